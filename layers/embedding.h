// Token embedding scaled by sqrt(d) plus sinusoidal positions, and the tied output projection.
//   forward:  h[i] = sqrt(d) * E[tok[i]] + P[i mod T]
//   output:   logits = h E^T;  dh = dlogits E;  dE += dlogits^T h
// The logits' rows are ld apart; logits_ld() pads them to 8 words (32 bytes), since cuBLAS runs
// a GEMM whose leading dimension is not a multiple of 16 bytes on slower kernels (a vocabulary
// such as WikiText-2's 33,279 words).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layers/params.h"

namespace pn {

template <class T>
struct Embedding {
  ParamStore<T>* store = nullptr;
  int vocab = 0, dim = 0, max_len = 0, table = -1;
  Buf<T> positions;  // [max_len, dim], not a parameter

  Embedding() = default;
  Embedding(ParamStore<T>& s, const std::string& name, int vocab_size, int d, int max_positions,
            int padding_idx);
  T scale() const;
  void forward(const int32_t* tok, int rows, int seq_len, T* y) const;
  void backward(const int32_t* tok, const T* dy, int rows) const;  // accumulates dE
  int logits_ld() const { return (vocab + 7) / 8 * 8; }
  void output_forward(const T* h, int rows, T* logits, int ld) const;
  void output_backward(const T* h, const T* dlogits, int rows, int ld, T* dh) const;  // dh overwritten
};

}  // namespace pn
