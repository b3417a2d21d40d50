// Token embedding scaled by sqrt(d) plus sinusoidal positions, and the tied output projection.
//   forward:  h[i] = sqrt(d) * E[tok[i]] + P[i mod T]
//   output:   logits = h E^T;  dh = dlogits E;  dE += dlogits^T h
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
  void output_forward(const T* h, int rows, T* logits) const;
  void output_backward(const T* h, const T* dlogits, int rows, T* dh) const;  // dh overwritten
};

}  // namespace pn
