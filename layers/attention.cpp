#include "layers/attention.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/kernels.h"

namespace pn {

template <class T>
CausalSelfAttention<T>::CausalSelfAttention(ParamStore<T>& s, Workspace<T>& w,
                                            const std::string& name, int d, int num_heads)
    : dim(d), heads(num_heads), qkv_proj(s, name + ".qkv_proj", d, 3 * d),
      out_proj(s, name + ".out_proj", d, d), ws(&w) {
  if (num_heads <= 0 || d % num_heads != 0)
    throw std::invalid_argument("attention heads (" + std::to_string(num_heads) +
                                ") must divide the model dimension (" + std::to_string(d) + ")");
}

template <class T>
void CausalSelfAttention<T>::forward(const T* x, int num_seq, int seq_length, T* y,
                                     const uint16_t* x16) {
  nseq = num_seq;
  seq_len = seq_length;
  const size_t rows = size_t(nseq) * seq_len;
  saved.resize(k::attention_saved_size(nseq, seq_len, dim, heads));
  // Where the attention reads q|k|v in bf16, the projection writes that rounding into `saved`
  // itself: no fp32 q|k|v. Where the backward reads them from `saved` (cuDNN's bf16 copy), fp32
  // ones are a transient.
  uint16_t* qkv16 = k::attention_qkv_bf16<T>(saved.data(), nseq, seq_len, dim, heads);
  const bool keep = k::attention_backward_reads_qkv<T>(nseq, seq_len, dim, heads);
  T* q = qkv16  ? nullptr
         : keep ? (qkv.resize(rows * 3 * dim), qkv.data())
                : ws->take(ws->qkv, rows * 3 * dim);
  qkv_saved = keep ? q : nullptr;
  // Where the attention keeps its output in bf16 for the projection, there is no fp32 ctx.
  ctx16 = k::attention_ctx_bf16<T>(saved.data(), nseq, seq_len, dim, heads);
  if (!ctx16) ctx.resize(rows * dim);
  qkv_proj.forward(x, int(rows), q, false, x16, qkv16);
  k::attention_forward<T>(q, nseq, seq_len, dim, heads, saved.data(),
                          ctx16 ? nullptr : ctx.data());
  out_proj.forward(ctx16 ? nullptr : ctx.data(), int(rows), y, false, ctx16);
}

template <class T>
void CausalSelfAttention<T>::backward(const T* x, const T* dy, T* dx, const uint16_t* x16,
                                      const uint16_t* dy16) {
  const size_t rows = size_t(nseq) * seq_len;
  T* scratch = ws->take(ws->attn_scratch, saved.size());
  // Where the attention reads its incoming gradient in bf16, the projection writes it there: no
  // fp32 dctx. Where it leaves dqkv in bf16 for the projection, there is no fp32 dqkv.
  uint16_t* dctx16 = k::attention_dctx_bf16<T>(scratch, nseq, seq_len, dim, heads);
  T* dctx = dctx16 ? nullptr : ws->take(ws->dctx, rows * dim);
  const uint16_t* dqkv16 = k::attention_dqkv_bf16<T>(scratch, nseq, seq_len, dim, heads);
  T* dqkv = dqkv16 ? nullptr : ws->take(ws->dqkv, rows * 3 * dim);
  const T* ctx32 = ctx16 ? nullptr : ctx.data();
  out_proj.backward(ctx32, dy, int(rows), dctx, ctx16, dy16, dctx16);
  k::attention_backward<T>(qkv_saved, saved.data(), ctx32, dctx, nseq, seq_len, dim, heads, dqkv,
                           scratch);
  qkv_proj.backward(x, dqkv, int(rows), dx, x16, dqkv16);
}

template struct CausalSelfAttention<float>;
template struct CausalSelfAttention<double>;


template <class T>
MultiheadAttention<T>::MultiheadAttention(ParamStore<T>& s, Workspace<T>& w,
                                          const std::string& name, int d, int num_heads,
                                          bool is_cross, bool is_causal)
    : dim(d), heads(num_heads), cross(is_cross), causal(is_causal), ws(&w) {
  if (num_heads <= 0 || d % num_heads != 0)
    throw std::invalid_argument("attention heads (" + std::to_string(num_heads) +
                                ") must divide the model dimension (" + std::to_string(d) + ")");
  if (cross) {
    q_proj = Linear<T>(s, name + ".q_proj", d, d);
    kv_proj = Linear<T>(s, name + ".kv_proj", d, 2 * d);
  } else {
    qkv_proj = Linear<T>(s, name + ".qkv_proj", d, 3 * d);
  }
  out_proj = Linear<T>(s, name + ".out_proj", d, d);
}

template <class T>
void MultiheadAttention<T>::forward(const T* x, const T* mem, int num_seq, int q_len, int k_len,
                                    const uint8_t* key_padding_mask, T* y,
                                    float attention_dropout, const uint64_t* step_seed,
                                    uint64_t dropout_site) {
  nseq = num_seq, tq = q_len, tk = cross ? k_len : q_len;
  key_mask = key_padding_mask;
  dropout_p = attention_dropout;
  const size_t rows_q = size_t(nseq) * tq, rows_k = size_t(nseq) * tk;
  const size_t np = size_t(nseq) * heads * tq * tk;
  probs.resize(np);
  ctx.resize(rows_q * dim);
  const T *qp, *kp, *vp;
  int ldq, ldkv;
  if (cross) {
    q.resize(rows_q * dim);
    kv.resize(rows_k * 2 * dim);
    q_proj.forward(x, int(rows_q), q.data());
    kv_proj.forward(mem, int(rows_k), kv.data());
    qp = q.data(), kp = kv.data(), vp = kv.data() + dim, ldq = dim, ldkv = 2 * dim;
  } else {
    qkv.resize(rows_q * 3 * dim);
    qkv_proj.forward(x, int(rows_q), qkv.data());
    qp = qkv.data(), kp = qkv.data() + dim, vp = qkv.data() + 2 * dim, ldq = ldkv = 3 * dim;
  }
  const bool drop = dropout_p > 0;
  if (drop) {
    keep.resize(np);
    probs_drop.resize(np);
    if (!step_seed) throw std::logic_error("attention dropout without the micro-step's seed");
    k::dropout_mask(step_seed, dropout_site, np, dropout_p, keep.data());
  }
  k::mha_forward<T>(qp, ldq, kp, vp, ldkv, nseq, tq, tk, dim, heads, causal, key_mask,
                    drop ? keep.data() : nullptr, dropout_p, probs.data(),
                    drop ? probs_drop.data() : nullptr, ctx.data());
  out_proj.forward(ctx.data(), int(rows_q), y);
}

template <class T>
void MultiheadAttention<T>::backward(const T* x, const T* mem, const T* dy, T* dx, T* dmem) {
  const size_t rows_q = size_t(nseq) * tq, rows_k = size_t(nseq) * tk;
  const bool drop = dropout_p > 0;
  T* dctx = ws->take(ws->dctx, std::max(rows_q, rows_k) * dim);
  T* scratch = ws->take(ws->attn_scratch, probs.size());
  out_proj.backward(ctx.data(), dy, int(rows_q), dctx);
  if (cross) {
    T* dq = ws->take(ws->dq, rows_q * dim);
    T* dkv = ws->take(ws->dkv, rows_k * 2 * dim);
    k::mha_backward<T>(q.data(), dim, kv.data(), kv.data() + dim, 2 * dim, nseq, tq, tk, dim,
                       heads, causal, key_mask, drop ? keep.data() : nullptr, dropout_p,
                       probs.data(), drop ? probs_drop.data() : nullptr, dctx, dq, dkv,
                       dkv + dim, scratch);
    q_proj.backward(x, dq, int(rows_q), dx);
    // dmem += dkv Wkv: Linear::backward overwrites its dx, so go through dctx, no longer needed.
    kv_proj.backward(mem, dkv, int(rows_k), dctx);
    k::add_inplace<T>(dmem, dctx, rows_k * dim);
  } else {
    T* dqkv = ws->take(ws->dqkv, rows_q * 3 * dim);
    k::mha_backward<T>(qkv.data(), 3 * dim, qkv.data() + dim, qkv.data() + 2 * dim, 3 * dim,
                       nseq, tq, tk, dim, heads, causal, key_mask, drop ? keep.data() : nullptr,
                       dropout_p, probs.data(), drop ? probs_drop.data() : nullptr, dctx, dqkv,
                       dqkv + dim, dqkv + 2 * dim, scratch);
    qkv_proj.backward(x, dqkv, int(rows_q), dx);
  }
}

template struct MultiheadAttention<float>;
template struct MultiheadAttention<double>;

}  // namespace pn
