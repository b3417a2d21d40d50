// LayerNorm: per-row mean and variance over the d features (no running state).
//   y = gamma * (x - mu_i) / sqrt(sigma_i^2 + eps) + beta
//   dx = rstd * (g - mean_j g - xh * mean_j(g xh)),  g = gamma * dy;  masked rows: dx = 0
#pragma once
#include <vector>

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct LayerNorm final : Norm<T> {
  ParamStore<T>* store;
  int d, gamma, beta;
  T eps;
  Buf<T> mean, rstd;

  LayerNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name);
  void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
               uint16_t* y16 = nullptr) override;
  void forward_residual(const T* a, const T* b, const uint8_t* keep, float p, T* sum,
                        const uint8_t* mask, int rows, T* y, bool training,
                        uint16_t* y16 = nullptr) override;
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                bool add_to_dx = false, uint16_t* dx16 = nullptr) override;
  int width() const override { return d; }
};

}  // namespace pn
