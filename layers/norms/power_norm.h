// PowerNorm (PN; paper Algorithm 2, Definition 3, warmup of appendix A.1; docs/contract.md §2).
// State per feature: psi^2 (init 1), nu (init 0); t counts training forwards (init 0).
// Forward (training), B = |S| > 0:
//   t <- t + 1;  psi_B^2 = mean_S x^2
//   s = sqrt(psi_B^2 + eps) if t <= W, else sqrt(psi^2 + eps) (psi^2 before this iteration)
//   xh = x / s;  y = gamma * xh + beta                         (masked rows too)
//   psi^2 <- psi^2 + (psi_B^2 - psi^2) / t if t <= W (cumulative mean),
//            alpha_fwd psi^2 + (1 - alpha_fwd) psi_B^2 otherwise
// Backward (approximate), g = gamma * dy, nu from before this iteration:
//   dx = (g - nu * xh) / s on S (the forward's s: paper eq. 12), 0 on masked rows
//   Gamma = mean_S xh^2 = (sum_S x^2) / (B s^2);  Lambda = mean_S g xh
//   nu <- nu (1 - (1 - alpha_bkw) Gamma) + (1 - alpha_bkw) Lambda
//   dgamma = sum_S dy * xh;  dbeta = sum_S dy
// Inference, and training with B = 0: gamma * x / sqrt(psi^2 + eps) + beta; psi^2, nu and t
// unchanged, dx = 0, no parameter gradient.
// The authors' variant (PnVariant::authors, their public MaskPowerNorm) keeps s, y, dgamma,
// dbeta and inference, and differs in three places:
//   psi^2 <- psi^2 + (psi_B^2 - psi^2) / t if t < W (strictly), then in every iteration
//            psi^2 <- alpha_fwd psi^2 + (1 - alpha_fwd) psi_B^2
//   xh' = g - (1 - alpha_bkw) nu xh;  nu <- nu + mean_S xh' xh = nu (1 - (1 - alpha_bkw) Gamma)
//        + Lambda;  dx = xh' / s_B with s_B = sqrt(psi_B^2 + eps), this iteration's batch
//        statistic (also after warmup)
// Its sums are the paper's (count, sum x^2, sum g xh), so sync_power reduces the same buffers.
// PnWarmupPsi::ema gives the paper variant the authors' running-psi^2 rule alone (the
// first of the three places), so that validation during warmup sees recent batches.
// `power` keeps all of this rank-local (the paper's setting). sync_power is this layer with comm
// set (make_norm): its statistics cover the union of every rank's unmasked rows (docs/contract.md §3,
// beyond the paper); the forward all-reduces [count, sum x^2] and the backward [sum g xh]
// (sum xh^2 = sum x^2 / s^2 needs no second reduction because s is the same on every rank), so
// psi^2, nu and t are identical on every rank. Every rank joins both, even with no rows.
// On every device the layer is one sequence of kernels (kernels/ops.inc's per-column PN steps
// between the column statistics and the affine maps): t, the count and the warm/cold choice are
// read on the device, so a step never waits for the host.
#pragma once
#include <cstdint>

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct PowerNorm : ColumnNorm<T> {
  ParamStore<T>* store;
  int d, gamma, beta;
  double eps, alpha_fwd, alpha_bkw;
  int64_t warmup;
  bool authors = false;   // PnVariant::authors
  bool ema_state = false;  // the authors' running-psi^2 rule (authors, or PnWarmupPsi::ema)
  Communicator* comm = nullptr;  // non-null: statistics summed over every rank
  Buf<double> running_psi2, nu;
  Buf<double> t;  // [1]: training forward count, a double so that state() can expose it
  Buf<double> warm;  // [1]: 1 while this forward is in warmup (its s from its statistics)
  // Saved by the training forward for backward: [count | sum x^2] (all ranks), the forward's
  // 1/s and this iteration's sum x^2 as pn_absorb keeps it.
  Buf<double> stats, inv_s, sum_x2;
  // Backward scratch: [sum dy | sum dy x]; g_xh = sum_S g xh over all ranks; the authors' batch
  // scale inv_s_b and nu term nu_coef (dx = inv_s_b (g - nu_coef x inv_s_b)).
  Buf<double> sums, g_xh, inv_s_b, nu_coef;

  PowerNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
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
