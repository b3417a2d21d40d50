// The docs/contract.md §8 language model: a pre-norm Transformer decoder.
//   h0 = sqrt(d) E[tok] + P;  for each block l:
//     m = h + dropout(attn(norm_self(h)));  h = m + dropout(ff(norm_ff(m)))
//   logits = norm_final(h) E^T   (output projection tied to the embedding)
// Parameters and gradients live in one contiguous ParamStore each.
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
#include "layers/gemm_input.h"
#include "layers/norms/norm.h"
#include "layers/workspace.h"

namespace pn {

struct ModelConfig {
  int vocab = 0;
  int layers = 2, dim = 256, heads = 4, ffn_dim = 1024, max_len = 1024;
  double dropout = 0.1;
  double label_smoothing = 0.1;
  int padding_idx = 0;
  size_t max_logits = kMaxLogits;  // the most logits the loss holds at once (layers/embedding.h)
  NormOptions norm_self, norm_ff, norm_final;
};

// One micro-batch of one rank: nseq sequences of seq_len tokens, row-major.
struct Batch {
  int nseq = 0, seq_len = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<uint8_t> mask;  // 1 = real token (counts in the loss and in norm statistics)
  int rows() const { return nseq * seq_len; }
};

template <class T>
struct LanguageModel {
  struct Block {
    std::unique_ptr<Norm<T>> norm_self, norm_ff;
    CausalSelfAttention<T> attn;
    FeedForward<T> ff;
    // activations of the last training forward: block input, mid, the norm outputs (which
    // only GEMMs read; layers/gemm_input.h); the branch outputs, which no backward reads, are
    // the workspace's
    Buf<T> x, mid;
    GemmInput<T> a, b;
    Buf<uint8_t> keep_attn, keep_ff;
    size_t param_begin = 0;  // offset of the block's first parameter in the flat buffer
  };

  ModelConfig config;
  ParamStore<T> params;
  Workspace<T> workspace;  // what the layers need only while one of their calls runs
  Embedding<T> embed;
  std::vector<Block> blocks;
  std::unique_ptr<Norm<T>> norm_final;
  Buf<T> h_last, f, logits, grad_a, grad_b, grad_c;  // activations and scratch (logits: a chunk's
                                                     // in training and evaluation)
  Buf<uint16_t> grad_a16;  // grad_a's bf16 rounding, where the norms write it (train_pass)
  // The current batch on the device (uploaded once per forward), and the loss sums of the
  // convenience forms below.
  Buf<int32_t> tokens, targets;
  Buf<uint8_t> mask;
  Buf<uint64_t> step_seed;  // the micro-step's dropout seed (k::dropout_mask reads it there)
  Buf<double> sums;
  StepGraph step_graph;  // a training micro-step, replayed as a CUDA graph where allowed
  size_t final_norm_begin = 0;             // offset of the final norm's parameters
  double forward_s = 0, backward_s = 0;    // wall time of the last forward_backward's halves
                                           // (CPU only; NaN where kernels run asynchronously)

  LanguageModel(const ModelConfig& c, uint64_t seed, Communicator* comm);

  // Training micro-step: forward and backward; parameter gradients accumulate into
  // params.grad, scaled by grad_scale (1 leaves them as sums over target tokens).
  // grads_ready(begin), when given, is called as the backward finishes with parameters:
  // every gradient at offset >= begin of the flat buffer is final for this micro-step (the
  // hook of the overlapped gradient all-reduce).
  using GradsReady = std::function<void(size_t begin)>;
  // The loss sums {loss, nll, ntokens} are added to loss_sums[0..2], memory of the model's
  // device, so that a whole update runs without the host reading anything.
  void forward_backward(const Batch& batch, T grad_scale, uint64_t dropout_seed,
                        double* loss_sums, const GradsReady& grads_ready = nullptr);
  // Loss of a batch in inference mode (running statistics, no dropout), added to loss_sums.
  void evaluate(const Batch& batch, double* loss_sums);
  // The same, returning the sums to the host (one synchronisation each: tests and tools).
  k::LossSums forward_backward(const Batch& batch, T grad_scale, uint64_t dropout_seed,
                               const GradsReady& grads_ready = nullptr);
  k::LossSums evaluate(const Batch& batch);
  // Inference mode's logits of every position of a batch into `logits`, rows logits_ld() apart.
  void forward_logits(const Batch& batch);
  // Every norm layer, in model order (for state, probes and checkpoints).
  std::vector<Norm<T>*> norms();

 private:
  void load(const Batch& batch, uint64_t dropout_seed);  // the batch and seed to the device
  // The loaded batch's forward; with its backward, the micro-step after load (no host in it).
  void forward(const Batch& batch, bool training);
  void train_pass(const Batch& batch, T grad_scale, double* loss_sums,
                  const GradsReady& grads_ready);
};

}  // namespace pn
