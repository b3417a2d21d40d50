// The translation model: a pre-norm Transformer encoder-decoder (fairseq's
// `transformer` with --encoder-normalize-before --decoder-normalize-before).
//   encoder:  h0 = dropout(sqrt(d) E[src] + P)
//             per block: m = h + dropout(self_attn(norm_self(h), key padding mask))
//                        h = m + dropout(ff(norm_ff(m)))
//             enc = norm_enc_final(h)
//   decoder:  g0 = dropout(sqrt(d) E_tgt[prev] + P)
//             per block: m1 = g + dropout(causal_self_attn(norm_self(g)))
//                        m2 = m1 + dropout(cross_attn(norm_cross(m1), enc, source padding mask))
//                        g  = m2 + dropout(ff(norm_ff(m2)))
//             logits = norm_dec_final(g) E_tgt^T   (output projection tied to E_tgt)
// Every norm gets its side's padding mask, so padded tokens never enter a statistic (contract §2);
// with right padding and key masks, a real token's output does not depend on the padding.
// --share-all-embeddings makes E_tgt = E (a joint vocabulary). Parameters and gradients live in
// one ParamStore, laid out in the order the backward finishes with them (see the constructor).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "kernels/kernels.h"
#include "layers/attention.h"
#include "layers/embedding.h"
#include "layers/feed_forward.h"
#include "layers/norms/norm.h"
#include "layers/workspace.h"

namespace pn {

struct TranslationConfig {
  int src_vocab = 0, tgt_vocab = 0;
  bool share_all_embeddings = false;  // needs src_vocab == tgt_vocab (a joint vocabulary)
  int dim = 128;                      // encoder and decoder embedding dimension (equal)
  int encoder_layers = 2, encoder_heads = 4, encoder_ffn_dim = 512;
  int decoder_layers = 2, decoder_heads = 4, decoder_ffn_dim = 512;
  int max_len = 1024;  // positions
  double dropout = 0.1, attention_dropout = 0.0, label_smoothing = 0.1;
  size_t max_logits = kMaxLogits;  // the most logits the loss holds at once (layers/embedding.h)
  NormOptions enc_norm_self, enc_norm_ff, enc_norm_final;
  NormOptions dec_norm_self, dec_norm_cross, dec_norm_ff, dec_norm_final;
};

// One micro-batch of sentence pairs, right-padded, row-major [nseq, len].
struct ParallelBatch {
  int nseq = 0, src_len = 0, tgt_len = 0;
  std::vector<int32_t> src;         // source tokens, ending in <eos>
  std::vector<uint8_t> src_mask;    // 1 = real source token
  std::vector<int32_t> prev;        // decoder input: <eos> then the target without its <eos>
  std::vector<int32_t> tgt;         // targets, ending in <eos>
  std::vector<uint8_t> tgt_mask;    // 1 = real target token (loss and decoder statistics)
  std::vector<int64_t> ids;         // the pairs' indices in their split
};

template <class T>
struct TranslationModel {
  struct EncoderBlock {
    std::unique_ptr<Norm<T>> norm_self, norm_ff;
    MultiheadAttention<T> attn;
    FeedForward<T> ff;
    Buf<T> x, a, mid, b;  // activations of the last forward (branch outputs: the workspace's)
    Buf<uint8_t> keep_attn, keep_ff;
    size_t param_begin = 0;
  };
  struct DecoderBlock {
    std::unique_ptr<Norm<T>> norm_self, norm_cross, norm_ff;
    MultiheadAttention<T> self_attn, cross_attn;
    FeedForward<T> ff;
    Buf<T> x, a, m1, c, m2, b;
    Buf<uint8_t> keep_self, keep_cross, keep_ff;
    size_t param_begin = 0;
  };

  TranslationConfig config;
  ParamStore<T> params;
  Workspace<T> workspace;  // what the layers need only while one of their calls runs
  Embedding<T> embed_src, embed_tgt;  // embed_tgt unused (table == -1) when shared
  std::vector<EncoderBlock> encoder;
  std::vector<DecoderBlock> decoder;
  std::unique_ptr<Norm<T>> enc_norm_final, dec_norm_final;
  size_t enc_final_begin = 0, tgt_embed_begin = 0, dec_final_begin = 0;
  Buf<T> enc_h, enc_out, dec_h, f, logits, grad_a, grad_b, grad_c, grad_enc;
  Buf<uint8_t> keep_src_embed, keep_tgt_embed;
  // The current batch on the device (uploaded by encode and forward) and the convenience sums.
  Buf<int32_t> src_tok, prev_tok, tgt_tok;
  Buf<uint8_t> src_mask, tgt_mask;
  Buf<uint64_t> step_seed;  // the micro-step's dropout seed (k::dropout_mask reads it there)
  Buf<double> sums;
  double forward_s = 0, backward_s = 0;

  TranslationModel(const TranslationConfig& c, uint64_t seed, Communicator* comm);
  const Embedding<T>& target_embedding() const;

  using GradsReady = std::function<void(size_t begin)>;
  // Training micro-step (forward + backward); gradients accumulate into params.grad, scaled by
  // grad_scale; grads_ready as in LanguageModel (offsets only ever decrease).
  // The loss sums {loss, nll, ntokens} are added to loss_sums[0..2] (memory of the device).
  void forward_backward(const ParallelBatch& batch, T grad_scale, uint64_t dropout_seed,
                        double* loss_sums, const GradsReady& grads_ready = nullptr);
  // Loss of a batch: inference mode (running statistics, no dropout) unless `training`, which
  // runs the training forward (batch statistics, running state updated) without a backward.
  void evaluate(const ParallelBatch& batch, double* loss_sums, bool training = false);
  // The same, returning the sums to the host (one synchronisation each: tests and tools).
  k::LossSums forward_backward(const ParallelBatch& batch, T grad_scale, uint64_t dropout_seed,
                               const GradsReady& grads_ready = nullptr);
  k::LossSums evaluate(const ParallelBatch& batch, bool training = false);
  // Inference mode's logits of every target position into `logits`, rows logits_ld() apart.
  void forward_logits(const ParallelBatch& batch);
  std::vector<Norm<T>*> norms();

  // ---- incremental decoding (inference mode; every norm then acts on each row alone) ----
  // The state lives on the model's device; the host hands in each step's tokens and reads its
  // log-probabilities (one copy per step), as beam search needs them to choose.
  struct DecodeState {
    int rows = 0, beam = 1, src_len = 0, max_len = 0;
    Buf<uint8_t> src_mask;                  // [rows, src_len]
    std::vector<Buf<T>> self_kv, cross_kv;  // per decoder block: [rows, max_len|src_len, 2d]
    Buf<T> x, a, tmp, q, ctx, out, logits, logprobs;  // one step's activations
    Buf<T> kv_spare;                          // reorder's second cache buffer
    Buf<uint8_t> ones, mask_spare;
    Buf<int32_t> tokens, from;  // the step's tokens, the reorder's source rows
  };
  // Encodes the batch's sources and repeats every sentence `beam` times (rows = nseq*beam).
  void begin_decode(const ParallelBatch& batch, int beam, int max_len, DecodeState* st);
  // Feeds tokens [rows] (host) at position `step`; writes log-probabilities [rows, V] (host).
  void decode_step(DecodeState* st, const int32_t* tokens, int step, T* logprobs);
  // Row r of the new state is row from[r] of the old one (beam reordering; caches up to
  // steps_done). A shorter `from` drops rows (finished sentences); a row only ever takes a row
  // of its own sentence, whose source side is the same.
  void reorder(DecodeState* st, const std::vector<int>& from, int steps_done);

 private:
  void encode(const ParallelBatch& batch, bool training, uint64_t dropout_seed);
  void forward(const ParallelBatch& batch, bool training, uint64_t dropout_seed);
};

}  // namespace pn
