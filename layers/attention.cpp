#include "layers/attention.h"

#include <stdexcept>

#include "kernels/kernels.h"

namespace pn {

template <class T>
CausalSelfAttention<T>::CausalSelfAttention(ParamStore<T>& s, const std::string& name, int d,
                                            int num_heads)
    : dim(d), heads(num_heads), qkv_proj(s, name + ".qkv_proj", d, 3 * d),
      out_proj(s, name + ".out_proj", d, d) {
  if (num_heads <= 0 || d % num_heads != 0)
    throw std::invalid_argument("attention heads (" + std::to_string(num_heads) +
                                ") must divide the model dimension (" + std::to_string(d) + ")");
}

template <class T>
void CausalSelfAttention<T>::forward(const T* x, int num_seq, int seq_length, T* y) {
  nseq = num_seq;
  seq_len = seq_length;
  const size_t rows = size_t(nseq) * seq_len;
  qkv.resize(rows * 3 * dim);
  saved.resize(k::attention_saved_size(nseq, seq_len, dim, heads));
  ctx.resize(rows * dim);
  qkv_proj.forward(x, int(rows), qkv.data());
  k::attention_forward<T>(qkv.data(), nseq, seq_len, dim, heads, saved.data(), ctx.data());
  out_proj.forward(ctx.data(), int(rows), y);
}

template <class T>
void CausalSelfAttention<T>::backward(const T* x, const T* dy, T* dx) {
  const size_t rows = size_t(nseq) * seq_len;
  dctx.resize(rows * dim);
  dqkv.resize(rows * 3 * dim);
  scratch.resize(saved.size());
  out_proj.backward(ctx.data(), dy, int(rows), dctx.data());
  k::attention_backward<T>(qkv.data(), saved.data(), ctx.data(), dctx.data(), nseq, seq_len, dim,
                           heads, dqkv.data(), scratch.data());
  qkv_proj.backward(x, dqkv.data(), int(rows), dx);
}

template struct CausalSelfAttention<float>;
template struct CausalSelfAttention<double>;


template <class T>
MultiheadAttention<T>::MultiheadAttention(ParamStore<T>& s, const std::string& name, int d,
                                          int num_heads, bool is_cross, bool is_causal)
    : dim(d), heads(num_heads), cross(is_cross), causal(is_causal) {
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
                                    float attention_dropout, uint64_t dropout_seed) {
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
    k::dropout_mask(dropout_seed, np, dropout_p, keep.data());
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
  dctx.resize(rows_q * dim);
  scratch.resize(probs.size());
  out_proj.backward(ctx.data(), dy, int(rows_q), dctx.data());
  if (cross) {
    dq.resize(rows_q * dim);
    dkv.resize(rows_k * 2 * dim);
    k::mha_backward<T>(q.data(), dim, kv.data(), kv.data() + dim, 2 * dim, nseq, tq, tk, dim,
                       heads, causal, key_mask, drop ? keep.data() : nullptr, dropout_p,
                       probs.data(), drop ? probs_drop.data() : nullptr, dctx.data(), dq.data(),
                       dkv.data(), dkv.data() + dim, scratch.data());
    q_proj.backward(x, dq.data(), int(rows_q), dx);
    // dmem += dkv Wkv: Linear::backward overwrites its dx, so go through scratch.
    Buf<T>& dm = dctx;  // dctx is no longer needed
    dm.resize(rows_k * dim);
    kv_proj.backward(mem, dkv.data(), int(rows_k), dm.data());
    k::add_inplace<T>(dmem, dm.data(), rows_k * dim);
  } else {
    dqkv.resize(rows_q * 3 * dim);
    k::mha_backward<T>(qkv.data(), 3 * dim, qkv.data() + dim, qkv.data() + 2 * dim, 3 * dim,
                       nseq, tq, tk, dim, heads, causal, key_mask, drop ? keep.data() : nullptr,
                       dropout_p, probs.data(), drop ? probs_drop.data() : nullptr, dctx.data(),
                       dqkv.data(), dqkv.data() + dim, dqkv.data() + 2 * dim, scratch.data());
    qkv_proj.backward(x, dqkv.data(), int(rows_q), dx);
  }
}

template struct MultiheadAttention<float>;
template struct MultiheadAttention<double>;

}  // namespace pn
