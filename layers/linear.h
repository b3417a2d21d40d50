// Linear layer y = x W^T + b, W: [out, in] (PyTorch's layout).
// Backward: dx = dy W;  dW += dy^T x;  db += sum_rows dy.
#pragma once
#include <cstdint>
#include <string>

#include "layers/params.h"

namespace pn {

template <class T>
struct Linear {
  ParamStore<T>* store = nullptr;
  int in = 0, out = 0, w = -1, b = -1;

  Linear() = default;
  Linear(ParamStore<T>& s, const std::string& name, int in_features, int out_features,
         bool bias = true);
  // relu: y = max(x W^T + b, 0), bias and ReLU in one pass (on a GPU, the GEMM's epilogue).
  // x16: where not null, x's bf16 rounding kept by the caller (k::gemm_inputs_in_bf16), which the
  // GEMMs read instead of x (x may then be null). y16: where not null (likewise), y's bf16
  // rounding is written there and y is scratch, which may be null (k::linear_forward).
  void forward(const T* x, int rows, T* y, bool relu = false, const uint16_t* x16 = nullptr,
               uint16_t* y16 = nullptr) const;
  // dx (may be null) is overwritten; parameter gradients accumulate. dy16: where not null, dy's
  // bf16 rounding as its producer wrote it, read instead of dy (dy may then be null). dx16: where
  // not null (k::gemm_inputs_in_bf16), dx's bf16 rounding is written there instead of dx.
  void backward(const T* x, const T* dy, int rows, T* dx, const uint16_t* x16 = nullptr,
                const uint16_t* dy16 = nullptr, uint16_t* dx16 = nullptr) const;
  // Backward of forward(..., relu = true): y is its output and dy the gradient with respect to y,
  // masked in place by the ReLU in the same pass that takes the bias gradient.
  void backward_relu(const T* x, const T* y, T* dy, int rows, T* dx,
                     const uint16_t* x16 = nullptr) const;
  // Backward of a Linear whose input, kept as its bf16 rounding x16 alone, came out of a ReLU:
  // the parameter gradients, then the gradient with respect to that ReLU's input, rounded to
  // bf16, into dx16, which holds the ReLU's output on entry and may be x16's storage
  // (k::linear_backward_into_relu). dy16: as backward's.
  void backward_into_relu(const uint16_t* x16, const T* dy, int rows, uint16_t* dx16,
                          const uint16_t* dy16 = nullptr) const;
};

}  // namespace pn
