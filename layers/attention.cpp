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
  probs.resize(size_t(nseq) * heads * seq_len * seq_len);
  ctx.resize(rows * dim);
  qkv_proj.forward(x, int(rows), qkv.data());
  k::attention_forward<T>(qkv.data(), nseq, seq_len, dim, heads, probs.data(), ctx.data());
  out_proj.forward(ctx.data(), int(rows), y);
}

template <class T>
void CausalSelfAttention<T>::backward(const T* x, const T* dy, T* dx) {
  const size_t rows = size_t(nseq) * seq_len;
  dctx.resize(rows * dim);
  dqkv.resize(rows * 3 * dim);
  scratch.resize(probs.size());
  out_proj.backward(ctx.data(), dy, int(rows), dctx.data());
  k::attention_backward<T>(qkv.data(), probs.data(), dctx.data(), nseq, seq_len, dim, heads,
                           dqkv.data(), scratch.data());
  qkv_proj.backward(x, dqkv.data(), int(rows), dx);
}

template struct CausalSelfAttention<float>;
template struct CausalSelfAttention<double>;

}  // namespace pn
