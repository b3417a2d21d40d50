#include "model/translation.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pn {

namespace {
// Dropout sites, each with its own mask stream drawn from (micro-step seed, site).
enum Site : uint64_t { kSrcEmbed = 0, kTgtEmbed = 1, kFirstBlock = 2 };
constexpr uint64_t kEncSites = 3, kDecSites = 5;
}  // namespace

template <class T>
TranslationModel<T>::TranslationModel(const TranslationConfig& c, uint64_t seed,
                                      Communicator* comm)
    : config(c),
      embed_src(params, c.share_all_embeddings ? "embed_tokens" : "encoder.embed_tokens",
                c.src_vocab, c.dim, c.max_len, 0, c.share_all_embeddings) {
  if (c.src_vocab <= 0 || c.tgt_vocab <= 0) throw std::invalid_argument("a vocabulary is empty");
  if (c.share_all_embeddings && c.src_vocab != c.tgt_vocab)
    throw std::invalid_argument("--share-all-embeddings needs one joint vocabulary (source " +
                                std::to_string(c.src_vocab) + " words, target " +
                                std::to_string(c.tgt_vocab) + ")");
  if (c.dim <= 0 || c.encoder_layers < 0 || c.decoder_layers < 0 || c.encoder_ffn_dim <= 0 ||
      c.decoder_ffn_dim <= 0)
    throw std::invalid_argument("model sizes must be positive");
  // Layout = the reverse of the order in which the backward finishes with the gradients:
  // [source (or shared) embedding][encoder blocks][encoder norm][target embedding][decoder
  // blocks][decoder norm]. The tied target embedding is complete only after the decoder's input
  // embedding backward; the shared one only at the very end.
  encoder.resize(c.encoder_layers);
  for (int l = 0; l < c.encoder_layers; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l);
    EncoderBlock& b = encoder[l];
    b.param_begin = params.size();
    b.norm_self = make_norm<T>(c.enc_norm_self, c.dim, params, p + ".self_attn_layer_norm", comm);
    b.attn = MultiheadAttention<T>(params, workspace, p + ".self_attn", c.dim, c.encoder_heads,
                                   false, false);
    b.norm_ff = make_norm<T>(c.enc_norm_ff, c.dim, params, p + ".final_layer_norm", comm);
    b.ff = FeedForward<T>(params, workspace, p, c.dim, c.encoder_ffn_dim);
  }
  enc_final_begin = params.size();
  enc_norm_final = make_norm<T>(c.enc_norm_final, c.dim, params, "encoder.layer_norm", comm);
  tgt_embed_begin = params.size();
  if (!c.share_all_embeddings)
    embed_tgt = Embedding<T>(params, "decoder.embed_tokens", c.tgt_vocab, c.dim, c.max_len, 0);
  decoder.resize(c.decoder_layers);
  for (int l = 0; l < c.decoder_layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l);
    DecoderBlock& b = decoder[l];
    b.param_begin = params.size();
    b.norm_self = make_norm<T>(c.dec_norm_self, c.dim, params, p + ".self_attn_layer_norm", comm);
    b.self_attn =
        MultiheadAttention<T>(params, workspace, p + ".self_attn", c.dim, c.decoder_heads, false,
                              true);
    b.norm_cross =
        make_norm<T>(c.dec_norm_cross, c.dim, params, p + ".encoder_attn_layer_norm", comm);
    b.cross_attn =
        MultiheadAttention<T>(params, workspace, p + ".encoder_attn", c.dim, c.decoder_heads,
                              true, false);
    b.norm_ff = make_norm<T>(c.dec_norm_ff, c.dim, params, p + ".final_layer_norm", comm);
    b.ff = FeedForward<T>(params, workspace, p, c.dim, c.decoder_ffn_dim);
  }
  dec_final_begin = params.size();
  dec_norm_final = make_norm<T>(c.dec_norm_final, c.dim, params, "decoder.layer_norm", comm);
  params.allocate(seed);
}

template <class T>
const Embedding<T>& TranslationModel<T>::target_embedding() const {
  return config.share_all_embeddings ? embed_src : embed_tgt;
}

template <class T>
std::vector<Norm<T>*> TranslationModel<T>::norms() {
  std::vector<Norm<T>*> out;
  for (auto& b : encoder) out.push_back(b.norm_self.get()), out.push_back(b.norm_ff.get());
  out.push_back(enc_norm_final.get());
  for (auto& b : decoder) {
    out.push_back(b.norm_self.get());
    out.push_back(b.norm_cross.get());
    out.push_back(b.norm_ff.get());
  }
  out.push_back(dec_norm_final.get());
  return out;
}

template <class T>
void TranslationModel<T>::encode(const ParallelBatch& batch, bool training, uint64_t seed) {
  const int rows = batch.nseq * batch.src_len, d = config.dim;
  const size_t n = size_t(rows) * d;
  src_tok.from_host(batch.src);
  src_mask.from_host(batch.src_mask);
  step_seed.from_host(&seed, 1);
  const uint8_t* mask = src_mask.data();
  const bool drop = training && config.dropout > 0;
  const float p = float(config.dropout);
  const float pa = training ? float(config.attention_dropout) : 0.0f;
  Buf<T>* h = encoder.empty() ? &enc_h : &encoder[0].x;
  h->resize(n);
  embed_src.forward(src_tok.data(), rows, batch.src_len, h->data());
  if (drop) {
    keep_src_embed.resize(n);
    k::dropout_mask(step_seed.data(), kSrcEmbed, n, p, keep_src_embed.data());
    k::dropout_apply<T>(h->data(), keep_src_embed.data(), n, p);
  }
  T* branch = workspace.take(workspace.branch, n);  // each branch's output, added at once
  for (size_t l = 0; l < encoder.size(); ++l) {
    EncoderBlock& b = encoder[l];
    const uint64_t site = kFirstBlock + kEncSites * l;
    Buf<T>& next = l + 1 < encoder.size() ? encoder[l + 1].x : enc_h;
    b.a.resize(n), b.mid.resize(n), b.b.resize(n);
    next.resize(n);
    b.norm_self->forward(b.x.data(), mask, rows, b.a.data(), training);
    b.attn.forward(b.a.data(), nullptr, batch.nseq, batch.src_len, batch.src_len, mask, branch,
                   pa, step_seed.data(), site);
    if (drop) {
      b.keep_attn.resize(n);
      k::dropout_mask(step_seed.data(), site + 1, n, p, b.keep_attn.data());
      k::dropout_apply<T>(branch, b.keep_attn.data(), n, p);
    }
    k::add<T>(b.x.data(), branch, n, b.mid.data());
    b.norm_ff->forward(b.mid.data(), mask, rows, b.b.data(), training);
    b.ff.forward(b.b.data(), rows, branch);
    if (drop) {
      b.keep_ff.resize(n);
      k::dropout_mask(step_seed.data(), site + 2, n, p, b.keep_ff.data());
      k::dropout_apply<T>(branch, b.keep_ff.data(), n, p);
    }
    k::add<T>(b.mid.data(), branch, n, next.data());
  }
  enc_out.resize(n);
  enc_norm_final->forward(enc_h.data(), mask, rows, enc_out.data(), training);
}

template <class T>
void TranslationModel<T>::forward(const ParallelBatch& batch, bool training, uint64_t seed) {
  encode(batch, training, seed);
  const int rows = batch.nseq * batch.tgt_len, d = config.dim;
  const size_t n = size_t(rows) * d;
  prev_tok.from_host(batch.prev);
  tgt_tok.from_host(batch.tgt);
  tgt_mask.from_host(batch.tgt_mask);
  const uint8_t* mask = tgt_mask.data();
  const bool drop = training && config.dropout > 0;
  const float p = float(config.dropout);
  const float pa = training ? float(config.attention_dropout) : 0.0f;
  Buf<T>* h = decoder.empty() ? &dec_h : &decoder[0].x;
  h->resize(n);
  target_embedding().forward(prev_tok.data(), rows, batch.tgt_len, h->data());
  if (drop) {
    keep_tgt_embed.resize(n);
    k::dropout_mask(step_seed.data(), kTgtEmbed, n, p, keep_tgt_embed.data());
    k::dropout_apply<T>(h->data(), keep_tgt_embed.data(), n, p);
  }
  const uint64_t dec_base = kFirstBlock + kEncSites * encoder.size();
  // Each branch's output, dropped out and added at once.
  T* branch = workspace.take(workspace.branch, n);
  auto dropout = [&](Buf<uint8_t>& keep, uint64_t s) {
    if (!drop) return;
    keep.resize(n);
    k::dropout_mask(step_seed.data(), s, n, p, keep.data());
    k::dropout_apply<T>(branch, keep.data(), n, p);
  };
  for (size_t l = 0; l < decoder.size(); ++l) {
    DecoderBlock& b = decoder[l];
    const uint64_t site = dec_base + kDecSites * l;
    Buf<T>& next = l + 1 < decoder.size() ? decoder[l + 1].x : dec_h;
    for (Buf<T>* v : {&b.a, &b.m1, &b.c, &b.m2, &b.b, &next}) v->resize(n);
    b.norm_self->forward(b.x.data(), mask, rows, b.a.data(), training);
    b.self_attn.forward(b.a.data(), nullptr, batch.nseq, batch.tgt_len, batch.tgt_len, nullptr,
                        branch, pa, step_seed.data(), site);
    dropout(b.keep_self, site + 1);
    k::add<T>(b.x.data(), branch, n, b.m1.data());
    b.norm_cross->forward(b.m1.data(), mask, rows, b.c.data(), training);
    b.cross_attn.forward(b.c.data(), enc_out.data(), batch.nseq, batch.tgt_len, batch.src_len,
                         src_mask.data(), branch, pa, step_seed.data(), site + 2);
    dropout(b.keep_cross, site + 3);
    k::add<T>(b.m1.data(), branch, n, b.m2.data());
    b.norm_ff->forward(b.m2.data(), mask, rows, b.b.data(), training);
    b.ff.forward(b.b.data(), rows, branch);
    dropout(b.keep_ff, site + 4);
    k::add<T>(b.m2.data(), branch, n, next.data());
  }
  f.resize(n);
  dec_norm_final->forward(dec_h.data(), mask, rows, f.data(), training);
}

template <class T>
void TranslationModel<T>::forward_backward(const ParallelBatch& batch, T grad_scale,
                                           uint64_t dropout_seed, double* loss_sums,
                                           const GradsReady& grads_ready) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const k::Bf16Copy weights16(params.data.data(), params.data.size());  // bf16 GEMMs' copy
  forward(batch, true, dropout_seed);
  const auto t1 = clock::now();
  const int rows_t = batch.nseq * batch.tgt_len, rows_s = batch.nseq * batch.src_len;
  const int d = config.dim;
  const size_t nt = size_t(rows_t) * d, ns = size_t(rows_s) * d;
  const uint8_t* tmask = tgt_mask.data();
  const uint8_t* smask = src_mask.data();
  const bool drop = config.dropout > 0;
  const float p = float(config.dropout);
  const size_t nmax = std::max(nt, ns);
  grad_a.resize(nmax), grad_b.resize(nmax), grad_c.resize(nmax);
  T *ga = grad_a.data(), *gb = grad_b.data(), *df = grad_c.data();
  auto ready = [&](size_t begin) {
    if (grads_ready) grads_ready(begin);
  };
  // branch: y = x + dropout(branch(x)); ga holds dL/dy and becomes dL/dx. The branch's output
  // gradient: without dropout the stream's, read where it is (the branch's backward reads it
  // before the norm's adds into it); with dropout its masked copy in df.
  auto branch_grad = [&](size_t n, const Buf<uint8_t>& keep) -> const T* {
    if (!drop) return ga;
    k::dropout_copy<T>(ga, keep.data(), p, n, df);
    return df;
  };
  target_embedding().output_loss(f.data(), tgt_tok.data(), tmask, rows_t,
                                T(config.label_smoothing), grad_scale, loss_sums, logits, df,
                                config.max_logits);
  dec_norm_final->backward(dec_h.data(), df, tmask, rows_t, ga);
  ready(dec_final_begin);
  grad_enc.assign(ns, T(0));  // every decoder block's cross-attention adds to it
  for (int l = int(decoder.size()) - 1; l >= 0; --l) {
    DecoderBlock& b = decoder[l];
    b.ff.backward(b.b.data(), branch_grad(nt, b.keep_ff), gb);
    b.norm_ff->backward(b.m2.data(), gb, tmask, rows_t, ga, true);
    b.cross_attn.backward(b.c.data(), enc_out.data(), branch_grad(nt, b.keep_cross), gb,
                          grad_enc.data());
    b.norm_cross->backward(b.m1.data(), gb, tmask, rows_t, ga, true);
    b.self_attn.backward(b.a.data(), nullptr, branch_grad(nt, b.keep_self), gb, nullptr);
    b.norm_self->backward(b.x.data(), gb, tmask, rows_t, ga, true);
    ready(b.param_begin);
  }
  if (drop) k::dropout_apply<T>(ga, keep_tgt_embed.data(), nt, p);
  target_embedding().backward(prev_tok.data(), ga, rows_t);
  if (!config.share_all_embeddings) ready(tgt_embed_begin);
  enc_norm_final->backward(enc_h.data(), grad_enc.data(), smask, rows_s, ga);
  ready(enc_final_begin);
  for (int l = int(encoder.size()) - 1; l >= 0; --l) {
    EncoderBlock& b = encoder[l];
    b.ff.backward(b.b.data(), branch_grad(ns, b.keep_ff), gb);
    b.norm_ff->backward(b.mid.data(), gb, smask, rows_s, ga, true);
    b.attn.backward(b.a.data(), nullptr, branch_grad(ns, b.keep_attn), gb, nullptr);
    b.norm_self->backward(b.x.data(), gb, smask, rows_s, ga, true);
    ready(b.param_begin);
  }
  if (drop) k::dropout_apply<T>(ga, keep_src_embed.data(), ns, p);
  embed_src.backward(src_tok.data(), ga, rows_s);
  ready(0);
  const auto t2 = clock::now();
  // The host's clock times the halves only where the kernels run as they are called (the
  // CPU): on a GPU it would time their launches, so they go untimed (NaN).
  const bool host_timed = current_device() == Device::CPU;
  forward_s = host_timed ? std::chrono::duration<double>(t1 - t0).count() : NAN;
  backward_s = host_timed ? std::chrono::duration<double>(t2 - t1).count() : NAN;
}

template <class T>
void TranslationModel<T>::evaluate(const ParallelBatch& batch, double* loss_sums, bool training) {
  if (training && config.dropout > 0)
    throw std::logic_error("evaluate(training) is for dropout-free checks");
  const k::Bf16Copy weights16(params.data.data(), params.data.size());
  forward(batch, training, 0);
  target_embedding().output_loss(f.data(), tgt_tok.data(), tgt_mask.data(),
                                 batch.nseq * batch.tgt_len, T(config.label_smoothing), T(1),
                                 loss_sums, logits, nullptr, config.max_logits);
}

template <class T>
void TranslationModel<T>::forward_logits(const ParallelBatch& batch) {
  const k::Bf16Copy weights16(params.data.data(), params.data.size());
  forward(batch, false, 0);
  const int rows = batch.nseq * batch.tgt_len, ld = target_embedding().logits_ld();
  logits.resize(size_t(rows) * ld);
  target_embedding().output_forward(f.data(), rows, logits.data(), ld);
}

template <class T>
k::LossSums TranslationModel<T>::forward_backward(const ParallelBatch& batch, T grad_scale,
                                                  uint64_t dropout_seed,
                                                  const GradsReady& grads_ready) {
  return host_loss_sums(sums, [&](double* s) {
    forward_backward(batch, grad_scale, dropout_seed, s, grads_ready);
  });
}

template <class T>
k::LossSums TranslationModel<T>::evaluate(const ParallelBatch& batch, bool training) {
  return host_loss_sums(sums, [&](double* s) { evaluate(batch, s, training); });
}

namespace {
// dst row r = the first `used` elements of src row from[r], rows `stride` elements apart (from:
// device memory, as upload_rows leaves it).
template <class T>
void gather(const Buf<T>& src, size_t stride, const int32_t* from, int rows, size_t used,
            Buf<T>* dst) {
  dst->resize(size_t(rows) * stride);
  k::gather_rows(src.data(), stride * sizeof(T), from, rows, used * sizeof(T), dst->data(),
                 stride * sizeof(T));
}
void upload_rows(const std::vector<int>& rows, Buf<int32_t>* idx) {
  const std::vector<int32_t> v(rows.begin(), rows.end());
  idx->from_host(v);
}
}  // namespace

template <class T>
void TranslationModel<T>::begin_decode(const ParallelBatch& batch, int beam, int max_len,
                                       DecodeState* st) {
  if (max_len > config.max_len)
    throw std::invalid_argument("decoding " + std::to_string(max_len) +
                                " steps needs more positions than the model's " +
                                std::to_string(config.max_len) + ": lower --max-len-b");
  encode(batch, false, 0);
  const int d = config.dim, Ts = batch.src_len;
  st->beam = beam;
  st->rows = batch.nseq * beam;
  st->src_len = Ts;
  st->max_len = max_len;
  std::vector<int> repeat(st->rows);  // row r decodes sentence r / beam
  for (int r = 0; r < st->rows; ++r) repeat[r] = r / beam;
  upload_rows(repeat, &st->from);
  gather(src_mask, size_t(Ts), st->from.data(), st->rows, size_t(Ts), &st->src_mask);
  st->self_kv.resize(decoder.size());
  st->cross_kv.resize(decoder.size());
  const size_t per_seq = size_t(Ts) * 2 * d;
  for (size_t l = 0; l < decoder.size(); ++l) {
    st->kv_spare.resize(size_t(batch.nseq) * per_seq);
    decoder[l].cross_attn.kv_proj.forward(enc_out.data(), batch.nseq * Ts, st->kv_spare.data());
    gather(st->kv_spare, per_seq, st->from.data(), st->rows, per_seq, &st->cross_kv[l]);
    st->self_kv[l].assign(size_t(st->rows) * max_len * 2 * d, T(0));
  }
  st->ones.from_host(std::vector<uint8_t>(size_t(st->rows), 1));
}

template <class T>
void TranslationModel<T>::decode_step(DecodeState* st, const int32_t* tokens, int step,
                                      T* logprobs) {
  const int N = st->rows, d = config.dim, V = config.tgt_vocab, H = config.decoder_heads;
  if (step >= st->max_len) throw std::logic_error("decode_step past max_len");
  const Embedding<T>& emb = target_embedding();
  st->tokens.from_host(tokens, size_t(N));
  st->x.resize(size_t(N) * d), st->a.resize(size_t(N) * d), st->out.resize(size_t(N) * d);
  st->ctx.resize(size_t(N) * d), st->q.resize(size_t(N) * d), st->tmp.resize(size_t(N) * 3 * d);
  st->logits.resize(size_t(N) * emb.logits_ld());
  st->logprobs.resize(size_t(N) * V);
  T* x = st->x.data();
  // x = scale * E[token] + P[step]: position `step` for every row (a sequence length of 1).
  k::embedding_forward<T>(st->tokens.data(), N, 1, emb.store->p(emb.table),
                          emb.positions.data() + size_t(step) * d, d, emb.scale(), x);
  const uint8_t* ones = st->ones.data();
  const size_t self_stride = size_t(st->max_len) * 2 * d;
  for (size_t l = 0; l < decoder.size(); ++l) {
    DecoderBlock& b = decoder[l];
    b.norm_self->forward(x, ones, N, st->a.data(), false);
    b.self_attn.qkv_proj.forward(st->a.data(), N, st->tmp.data());
    T* cache = st->self_kv[l].data();
    // This step's k | v of every row into its cache at position `step`.
    k::gather_rows(st->tmp.data() + d, 3 * d * sizeof(T), nullptr, N, 2 * d * sizeof(T),
                   cache + size_t(step) * 2 * d, self_stride * sizeof(T));
    k::attention_step<T>(st->tmp.data(), 3 * d, cache, cache + d, 2 * d, self_stride, N,
                         step + 1, d, H, nullptr, 0, st->ctx.data());
    b.self_attn.out_proj.forward(st->ctx.data(), N, st->out.data());
    k::add_inplace<T>(x, st->out.data(), size_t(N) * d);
    b.norm_cross->forward(x, ones, N, st->a.data(), false);
    b.cross_attn.q_proj.forward(st->a.data(), N, st->q.data());
    const T* ckv = st->cross_kv[l].data();
    k::attention_step<T>(st->q.data(), d, ckv, ckv + d, 2 * d, size_t(st->src_len) * 2 * d, N,
                         st->src_len, d, H, st->src_mask.data(), st->src_len, st->ctx.data());
    b.cross_attn.out_proj.forward(st->ctx.data(), N, st->out.data());
    k::add_inplace<T>(x, st->out.data(), size_t(N) * d);
    b.norm_ff->forward(x, ones, N, st->a.data(), false);
    b.ff.forward(st->a.data(), N, st->out.data());
    k::add_inplace<T>(x, st->out.data(), size_t(N) * d);
  }
  dec_norm_final->forward(x, ones, N, st->a.data(), false);
  emb.output_forward(st->a.data(), N, st->logits.data(), emb.logits_ld());
  // The first V of each row, packed (the padded vocabulary left out): beam search reads them.
  k::gather_rows(st->logits.data(), emb.logits_ld() * sizeof(T), nullptr, N, V * sizeof(T),
                 st->logprobs.data(), V * sizeof(T));
  k::log_softmax_rows<T>(st->logprobs.data(), N, V);
  copy_to_host(logprobs, st->logprobs.data(), size_t(N) * V * sizeof(T));
  synchronize();
}

template <class T>
void TranslationModel<T>::reorder(DecodeState* st, const std::vector<int>& from, int steps_done) {
  // Row r of the new state is row from[r] of the old one; from may be shorter than the old
  // rows (finished sentences leave). Only the filled prefix of the self-attention caches moves,
  // into a spare buffer that is then swapped in.
  const int d = config.dim, rows = int(from.size()), Ts = st->src_len;
  const size_t stride = size_t(st->max_len) * 2 * d, used = size_t(steps_done) * 2 * d;
  upload_rows(from, &st->from);
  for (auto& cache : st->self_kv) {
    gather(cache, stride, st->from.data(), rows, used, &st->kv_spare);
    cache.swap(st->kv_spare);
  }
  if (rows != st->rows) {  // sentences left: compact the per-sentence source side too
    const size_t per_seq = size_t(Ts) * 2 * d;
    for (auto& kv : st->cross_kv) {
      gather(kv, per_seq, st->from.data(), rows, per_seq, &st->kv_spare);
      kv.swap(st->kv_spare);
    }
    gather(st->src_mask, size_t(Ts), st->from.data(), rows, size_t(Ts), &st->mask_spare);
    st->src_mask.swap(st->mask_spare);
    st->rows = rows;
    st->ones.from_host(std::vector<uint8_t>(size_t(rows), 1));
  }
}

template struct TranslationModel<float>;
template struct TranslationModel<double>;

}  // namespace pn
