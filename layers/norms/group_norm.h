// GroupNorm (as PyTorch's, per token): the d features of each row are split into G consecutive
// groups of d/G; each group is normalised by its own mean and (biased) variance. No running
// state. With m = d/G and, per row and group, mu, sigma^2, rstd = 1/sqrt(sigma^2 + eps):
//   xh = (x - mu) * rstd;  y = gamma * xh + beta
//   dx = rstd * (g - mean_group g - xh * mean_group(g xh)),  g = gamma * dy;  masked: dx = 0
//   dgamma = sum_S dy * xh,  dbeta = sum_S dy
#pragma once
#include <vector>

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct GroupNorm final : Norm<T> {
  ParamStore<T>* store;
  int d, groups, gamma, beta;
  T eps;
  Buf<T> mean, rstd;  // rows * groups, saved for backward

  GroupNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name);
  void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
               uint16_t* y16 = nullptr) override;
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                bool add_to_dx = false, uint16_t* dx16 = nullptr) override;
  int width() const override { return d; }
};

}  // namespace pn
