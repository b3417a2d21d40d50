// DyT, Dynamic Tanh (Zhu, Chen, He, LeCun and Liu, "Transformers without Normalization",
// CVPR 2025): an element-wise stand-in for a norm, with no statistic and no running state (its
// training and inference forms are one). One learnable scalar a per layer (its initial value
// --dyt-alpha-init), per-feature gamma and beta:
//   t = tanh(a x);  y = gamma * t + beta
//   dx = dy * gamma * a * (1 - t^2) on unmasked rows, 0 on masked rows
//   dgamma = sum_S dy t,  dbeta = sum_S dy,  da = sum_S sum_j dy gamma x (1 - t^2)
// a is a parameter of the ParamStore like gamma and beta: the trainer all-reduces its gradient
// with theirs, Adam updates it, checkpoints and exports keep it.
#pragma once

#include "kernels/kernels.h"
#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct DynamicTanh final : Norm<T> {
  ParamStore<T>* store;
  int d, gamma, beta, alpha;

  DynamicTanh(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name)
      : store(&s), d(dim) {
    gamma = s.add(name + ".weight", {d}, Init::Ones);
    beta = s.add(name + ".bias", {d}, Init::Zeros);
    alpha = s.add(name + ".alpha", {1}, Init::Constant, o.dyt_alpha_init);
  }
  int width() const override { return d; }
  // The same in training and inference: no statistic.
  void forward(const T* x, const uint8_t*, int rows, T* y, bool, uint16_t* y16) override {
    k::dyt_forward<T>(x, rows, d, store->p(alpha), store->p(gamma), store->p(beta), y, y16);
  }
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx, bool add_to_dx,
                uint16_t* dx16) override {
    k::dyt_backward<T>(x, dy, store->p(alpha), store->p(gamma), mask, rows, d, dx,
                       store->g(gamma), store->g(beta), store->g(alpha), add_to_dx, dx16);
  }
};

}  // namespace pn
