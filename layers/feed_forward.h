// Feed-forward block: y = W2 relu(W1 x + b1) + b2, d_model -> ffn_dim -> d_model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layers/gemm_input.h"
#include "layers/linear.h"
#include "layers/workspace.h"

namespace pn {

template <class T>
struct FeedForward {
  Linear<T> fc1, fc2;
  Workspace<T>* ws = nullptr;  // the backward's gradient of the hidden layer
  GemmInput<T> hidden;         // relu output, saved for the backward (fc2's input, fc1's mask)
  int rows = 0;

  FeedForward() = default;
  FeedForward(ParamStore<T>& s, Workspace<T>& w, const std::string& name, int d, int ffn_dim);
  // x16: x's bf16 rounding where the caller keeps only that (Linear::forward).
  void forward(const T* x, int num_rows, T* y, const uint16_t* x16 = nullptr);
  // dx overwritten. dy16: dy's bf16 rounding where its producer wrote one (Linear::backward).
  void backward(const T* x, const T* dy, T* dx, const uint16_t* x16 = nullptr,
                const uint16_t* dy16 = nullptr);
};

}  // namespace pn
