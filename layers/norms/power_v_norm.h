// PN-V (paper eq. 5-6): batch quadratic mean instead of mean and variance, exact gradient.
// Forward (training), per feature column, B = |S| (unmasked rows):
//   psi_B^2 = mean_S x^2;  s = sqrt(psi_B^2 + eps);  xh = x / s;  y = gamma * xh + beta
//   running: psi^2 <- alpha psi^2 + (1-alpha) psi_B^2   (init 1)
// Backward (exact), g = gamma * dy:
//   dx = (g - xh * mean_S(g xh)) / s on S, 0 on masked rows
//   dgamma = sum_S dy * xh;  dbeta = sum_S dy
// Inference, and training with B = 0: gamma * x / sqrt(psi^2 + eps) + beta, state unchanged,
// dx = 0, no parameter gradient.
// sync_power_v is this layer with comm set (make_norm), over the union of every rank's unmasked
// rows: forward all-reduces [count, sum x^2], backward [sum g xh], one double buffer each; every
// rank joins both, even with no rows. Running psi^2 is identical on every rank.
#pragma once

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct PowerVNorm : ColumnNorm<T> {
  ParamStore<T>* store;
  int d, gamma, beta;
  double eps, alpha;
  Communicator* comm = nullptr;  // non-null: statistics summed over every rank
  Buf<double> running_psi2;
  // Saved by the training forward: [count | sum x^2] (all ranks) and 1/s.
  Buf<double> stats, inv_s;
  Buf<double> sums, g_xh, b, scratch;  // backward and inference scratch

  PowerVNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
             Communicator* comm = nullptr);
  bool synchronized() const override { return comm != nullptr; }
  void forward_in(const NormInput<T>& in, const uint8_t* mask, int rows, T* y, bool training,
                  uint16_t* y16) override;
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                bool add_to_dx = false, uint16_t* dx16 = nullptr) override;
  int width() const override { return d; }
  std::vector<StateTensor> state() override;
  void save_forward(Buf<double>* saved) override;
  void load_forward(const Buf<double>& saved) override;
};

}  // namespace pn
