// Causal multi-head self-attention: qkv = x Wqkv^T + bqkv; ctx = softmax(q k^T/sqrt(dh)) v per
// head with j <= i; y = ctx Wo^T + bo. Caches ctx, what the attention kernels save
// (kernels.h attention_saved_size) and, where the attention backward reads it, qkv for the
// backward; the backward's inner gradients live in the model's Workspace.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layers/linear.h"
#include "layers/workspace.h"

namespace pn {

template <class T>
struct CausalSelfAttention {
  int dim = 0, heads = 0;
  Linear<T> qkv_proj, out_proj;
  Workspace<T>* ws = nullptr;
  // activations, reused across steps; saved: the probabilities or, fused, the log-sum-exps
  Buf<T> qkv, saved, ctx;
  const T* qkv_saved = nullptr;  // qkv of the last forward where the backward reads it, else null
  const uint16_t* ctx16 = nullptr;  // ctx in bf16 inside `saved` where kept so (then no fp32 ctx)
  int nseq = 0, seq_len = 0;

  CausalSelfAttention() = default;
  CausalSelfAttention(ParamStore<T>& s, Workspace<T>& w, const std::string& name, int d,
                      int num_heads);
  // x16: x's bf16 rounding where the caller keeps only that (Linear::forward).
  void forward(const T* x, int num_seq, int seq_length, T* y, const uint16_t* x16 = nullptr);
  // The same x (or x16) as forward; dx overwritten. dy16: dy's bf16 rounding where its producer
  // wrote one (Linear::backward).
  void backward(const T* x, const T* dy, T* dx, const uint16_t* x16 = nullptr,
                const uint16_t* dy16 = nullptr);
};


// Multi-head attention of the translation model. Self-attention (cross = false):
// q|k|v = x Wqkv^T + bqkv from one input, optionally causal; cross-attention (cross = true):
// q = x Wq^T + bq from the decoder, k|v = mem Wkv^T + bkv from the encoder output. Keys may
// carry a padding mask ([nseq, tk], 1 = real); attention dropout drops probabilities
// (inverted, seeded). y = ctx Wo^T + bo. Caches its activations for the backward.
template <class T>
struct MultiheadAttention {
  int dim = 0, heads = 0;
  bool cross = false, causal = false;
  Linear<T> qkv_proj;         // self: d -> 3d
  Linear<T> q_proj, kv_proj;  // cross: d -> d, d -> 2d
  Linear<T> out_proj;
  Workspace<T>* ws = nullptr;
  Buf<T> qkv, q, kv, probs, probs_drop, ctx;
  Buf<uint8_t> keep;
  const uint8_t* key_mask = nullptr;  // of the last forward (owned by the caller's batch)
  int nseq = 0, tq = 0, tk = 0;
  float dropout_p = 0;

  MultiheadAttention() = default;
  MultiheadAttention(ParamStore<T>& s, Workspace<T>& w, const std::string& name, int d,
                     int num_heads, bool is_cross, bool is_causal);
  // x: [nseq*tq, d]; mem: [nseq*tk, d] (cross only, else ignored and tk = tq).
  // attention_dropout > 0 draws its keep mask from the micro-step's seed on the device and
  // this site's number (k::dropout_mask; training only).
  void forward(const T* x, const T* mem, int num_seq, int q_len, int k_len,
               const uint8_t* key_padding_mask, T* y, float attention_dropout = 0,
               const uint64_t* step_seed = nullptr, uint64_t dropout_site = 0);
  // dx overwritten; dmem (cross only) accumulated (+=), since every decoder block adds to it.
  void backward(const T* x, const T* mem, const T* dy, T* dx, T* dmem);
};

}  // namespace pn
