// Causal multi-head self-attention: qkv = x Wqkv^T + bqkv; ctx = softmax(q k^T/sqrt(dh)) v per
// head with j <= i; y = ctx Wo^T + bo. Caches qkv, probabilities and ctx for the backward.
#pragma once
#include <string>
#include <vector>

#include "layers/linear.h"

namespace pn {

template <class T>
struct CausalSelfAttention {
  int dim = 0, heads = 0;
  Linear<T> qkv_proj, out_proj;
  std::vector<T> qkv, probs, ctx, dqkv, dctx, scratch;  // activations, reused across steps
  int nseq = 0, seq_len = 0;

  CausalSelfAttention() = default;
  CausalSelfAttention(ParamStore<T>& s, const std::string& name, int d, int num_heads);
  void forward(const T* x, int num_seq, int seq_length, T* y);
  void backward(const T* x, const T* dy, T* dx);  // same x as forward; dx overwritten
};

}  // namespace pn
