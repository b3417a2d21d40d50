// Feed-forward block: y = W2 relu(W1 x + b1) + b2, d_model -> ffn_dim -> d_model.
#pragma once
#include <string>
#include <vector>

#include "layers/linear.h"
#include "layers/workspace.h"

namespace pn {

template <class T>
struct FeedForward {
  Linear<T> fc1, fc2;
  Workspace<T>* ws = nullptr;  // the backward's gradient of the hidden layer
  Buf<T> hidden;               // relu output, saved for the backward
  int rows = 0;

  FeedForward() = default;
  FeedForward(ParamStore<T>& s, Workspace<T>& w, const std::string& name, int d, int ffn_dim);
  void forward(const T* x, int num_rows, T* y);
  void backward(const T* x, const T* dy, T* dx);  // dx overwritten
};

}  // namespace pn
