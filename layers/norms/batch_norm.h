// BatchNorm over the statistics batch S (the unmasked rows; docs/contract.md §2), paper eq. 3.
// Forward (training), per feature column, B = |S|:
//   mu_B = mean_S x;  sigma_B^2 = mean_S (x - mu_B)^2 (biased);  rstd = 1/sqrt(sigma_B^2 + eps)
//   xh = (x - mu_B) * rstd;  y = gamma * xh + beta           (masked rows too)
//   running: mu <- alpha mu + (1-alpha) mu_B;  sigma^2 <- alpha sigma^2 + (1-alpha) sigma_B^2
// The sums are taken in double around a shift (the running mean, identical on every rank of a
// synchronized layer), so a large mean does not cancel the variance away.
// Backward (exact), g = gamma * dy:
//   dx = rstd * (g - mean_S g - xh * mean_S(g xh)) on S, 0 on masked rows
//   dgamma = sum_S dy * xh;  dbeta = sum_S dy
// Inference, and training with B = 0: gamma * (x - mu) / sqrt(sigma^2 + eps) + beta with the
// running state, which is then left unchanged; dx = 0 and no parameter gradient.
// sync_batch is this layer with comm set (make_norm): its statistics batch is the union of every
// rank's unmasked rows. The forward all-reduces [count, sum(x - shift), sum (x - shift)^2] and
// the backward [sum dy, sum dy (x - mu_B)] in one buffer each, so every rank counts with its own
// number of tokens: uneven and empty ranks give the one-process result, and a rank with no rows
// still joins both collectives. The running state is identical on every rank.
#pragma once

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct BatchNorm : ColumnNorm<T> {
  ParamStore<T>* store;
  int d, gamma, beta;
  double eps, alpha;
  Communicator* comm = nullptr;  // non-null: statistics summed over every rank
  Buf<double> running_mean, running_var;
  // Saved by the training forward for backward: [count | sum (x - rm) | sum (x - rm)^2] (all
  // ranks), mu_B and rstd.
  Buf<double> stats, mean, rstd;
  Buf<double> sums, a, b, scratch;  // backward and inference scratch

  BatchNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
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
