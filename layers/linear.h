// Linear layer y = x W^T + b, W: [out, in] (PyTorch's layout).
// Backward: dx = dy W;  dW += dy^T x;  db += sum_rows dy.
#pragma once
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
  void forward(const T* x, int rows, T* y) const;
  // dx (may be null) is overwritten; parameter gradients accumulate.
  void backward(const T* x, const T* dy, int rows, T* dx) const;
};

}  // namespace pn
