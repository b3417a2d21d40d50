// RMSNorm: per-row root mean square over the d features (no beta, no running state).
//   r_i = sqrt(mean_j x_ij^2 + eps);  xh = x / r_i;  y = gamma * xh
//   dx = (g - xh * mean_j(g xh)) / r_i,  g = gamma * dy;  masked rows: dx = 0
//   dgamma = sum over unmasked rows of dy * xh
#pragma once
#include <vector>

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct RmsNorm final : Norm<T> {
  ParamStore<T>* store;
  int d, gamma;
  T eps;
  Buf<T> rinv;  // 1 / r_i per row, saved for backward

  RmsNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name);
  void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
               uint16_t* y16 = nullptr) override;
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                bool add_to_dx = false, uint16_t* dx16 = nullptr) override;
  int width() const override { return d; }
};

}  // namespace pn
