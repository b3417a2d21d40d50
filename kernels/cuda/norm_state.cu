// The per-column steps of the batch-type norms between their big kernels, on the device: turn
// the (all-reduced) packed statistics into the scale of the affine map, update the running state
// and PN's t and nu, and form the backward coefficients and parameter gradients. Each is one
// thread per feature column (PN's t: one thread), reading the statistics count from device
// memory, so a layer's whole step stays on the GPU with no host synchronisation. The math is
// that of layers/norms/{batch_norm,power_v_norm,power_norm}.cpp and psi_common.h, line by line;
// an empty statistics set (count 0) takes the inference formula and leaves the state alone.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

unsigned col_grid(int d) { return unsigned((d + kThreads - 1) / kThreads); }
#define PN_COLUMN_INDEX(c, d)                          \
  const int c = blockIdx.x * blockDim.x + threadIdx.x; \
  if (c >= (d)) return

// stats = [count | sum (x - rm) | sum (x - rm)^2] (shift = running mean before this step).
__global__ void batch_absorb_kernel(const double* stats, int d, double eps, double alpha,
                                    double* rm, double* rv, double* mean, double* rstd,
                                    double* var_b) {
  PN_COLUMN_INDEX(c, d);
  const double count = stats[0];
  if (count > 0) {
    const double m1 = stats[1 + c] / count;
    const double var = fmax(0.0, stats[1 + d + c] / count - m1 * m1);
    mean[c] = rm[c] + m1;
    rstd[c] = 1.0 / sqrt(var + eps);
    if (var_b) var_b[c] = var;
    rm[c] = alpha * rm[c] + (1 - alpha) * mean[c];
    rv[c] = alpha * rv[c] + (1 - alpha) * var;
  } else {  // inference formula, state unchanged
    mean[c] = rm[c];
    rstd[c] = 1.0 / sqrt(rv[c] + eps);
  }
}

// sums = [sum dy | sum dy (x - mean)] of this rank (before the all-reduce).
__global__ void batch_param_grads_kernel(const double* count, const double* sums, int d,
                                         const double* rstd, float* dgamma, float* dbeta) {
  PN_COLUMN_INDEX(c, d);
  if (!(*count > 0)) return;
  dgamma[c] += float(sums[d + c] * rstd[c]);
  dbeta[c] += float(sums[c]);
}

// a = mean_S g, b = mean_S g xh from the all-reduced sums; 0 for an empty set (then every row
// is masked and column_norm_backward writes dx = 0).
__global__ void batch_backward_coeffs_kernel(const double* count, const double* sums, int d,
                                             const float* gamma, const double* rstd, double* a,
                                             double* b) {
  PN_COLUMN_INDEX(c, d);
  const double n = *count;
  a[c] = n > 0 ? double(gamma[c]) * sums[c] / n : 0.0;
  b[c] = n > 0 ? double(gamma[c]) * sums[d + c] * rstd[c] / n : 0.0;
}

// stats = [count | sum x^2]; PN-V: inv_s from the batch, psi^2 moving average.
__global__ void power_v_absorb_kernel(const double* stats, int d, double eps, double alpha,
                                      double* psi2, double* inv_s) {
  PN_COLUMN_INDEX(c, d);
  const double count = stats[0];
  if (count > 0) {
    const double psi2_b = stats[1 + c] / count;
    inv_s[c] = 1.0 / sqrt(psi2_b + eps);
    psi2[c] = alpha * psi2[c] + (1 - alpha) * psi2_b;
  } else {
    inv_s[c] = 1.0 / sqrt(psi2[c] + eps);
  }
}

// PN forward, before the statistics are in: after warmup (t + 1 > W) s comes from the running
// psi^2 of before this iteration, so the affine map can run while the all-reduce is in flight.
__global__ void pn_forward_scale_kernel(const double* t, int64_t warmup, int d, double eps,
                                        const double* psi2, double* inv_s, double* warm) {
  const bool is_warm = *t + 1 <= double(warmup);
  if (blockIdx.x == 0 && threadIdx.x == 0) *warm = is_warm ? 1.0 : 0.0;
  PN_COLUMN_INDEX(c, d);
  if (!is_warm) inv_s[c] = 1.0 / sqrt(psi2[c] + eps);
}

// PN absorb (t not yet incremented; pn_step_kernel does it after): warm iterations take s from
// the batch and the cumulative mean, later ones the moving average. Empty set: inference s.
__global__ void pn_absorb_kernel(const double* stats, const double* t, int64_t warmup, int d,
                                 double eps, double alpha_fwd, bool authors_rule, double* psi2,
                                 double* inv_s, double* sum_x2) {
  PN_COLUMN_INDEX(c, d);
  const double count = stats[0];
  if (!(count > 0)) {
    inv_s[c] = 1.0 / sqrt(psi2[c] + eps);
    return;
  }
  const double t1 = *t + 1;
  const bool warm = t1 <= double(warmup);
  sum_x2[c] = stats[1 + c];
  const double psi2_b = sum_x2[c] / count;
  if (warm) inv_s[c] = 1.0 / sqrt(psi2_b + eps);
  if (authors_rule) {  // cumulative mean strictly inside warmup, then the average in every iteration
    if (t1 < double(warmup)) psi2[c] += (psi2_b - psi2[c]) / t1;
    psi2[c] = alpha_fwd * psi2[c] + (1 - alpha_fwd) * psi2_b;
  } else {
    psi2[c] =
        warm ? psi2[c] + (psi2_b - psi2[c]) / t1 : alpha_fwd * psi2[c] + (1 - alpha_fwd) * psi2_b;
  }
}

// The authors' backward scale from this iteration's batch, and the nu term in kernel form.
__global__ void pn_authors_coeffs_kernel(const double* count, const double* sum_x2,
                                         const double* nu, const double* inv_s, int d, double eps,
                                         double alpha_bkw, double* inv_s_b, double* nu_coef) {
  PN_COLUMN_INDEX(c, d);
  const double n = *count;
  inv_s_b[c] = 1.0 / sqrt((n > 0 ? sum_x2[c] / n : 0.0) + eps);
  nu_coef[c] = (1 - alpha_bkw) * nu[c] * inv_s[c] / inv_s_b[c];
}
__global__ void pn_step_kernel(const double* stats, double* t) {
  if (stats[0] > 0) *t += 1;
}

// psi_common.h's backward sums: sums = [sum dy | sum dy x] of this rank; dgamma += dy xh,
// dbeta += dy, and g_xh = gamma * sum dy xh (to be all-reduced). Empty set: g_xh = 0.
__global__ void psi_param_grads_kernel(const double* count, const double* sums, int d,
                                       const double* inv_s, const float* gamma, float* dgamma,
                                       float* dbeta, double* g_xh) {
  PN_COLUMN_INDEX(c, d);
  if (!(*count > 0)) {
    g_xh[c] = 0;
    return;
  }
  const double dy_xh = sums[d + c] * inv_s[c];
  dgamma[c] += float(dy_xh);
  dbeta[c] += float(sums[c]);
  g_xh[c] = double(gamma[c]) * dy_xh;
}

// PN-V backward coefficient: b = mean_S g xh (0 for an empty set).
__global__ void mean_over_count_kernel(const double* count, const double* sums, int d, double* b) {
  PN_COLUMN_INDEX(c, d);
  b[c] = *count > 0 ? sums[c] / *count : 0.0;
}

// PN backward, after dx was formed with the old nu: Gamma = mean_S xh^2, Lambda = mean_S g xh,
// nu <- nu (1 - (1 - alpha_bkw) Gamma) + (1 - alpha_bkw) Lambda.
__global__ void pn_nu_kernel(const double* count, const double* sum_x2, const double* g_xh,
                             const double* inv_s, int d, double alpha_bkw, double lambda_coef,
                             double* nu) {
  PN_COLUMN_INDEX(c, d);
  const double n = *count;
  if (!(n > 0)) return;
  const double Gamma = sum_x2[c] * inv_s[c] * inv_s[c] / n;
  const double Lambda = g_xh[c] / n;
  nu[c] = nu[c] * (1 - (1 - alpha_bkw) * Gamma) + lambda_coef * Lambda;
}

}  // namespace

#define PN_COLUMN_LAUNCH(kernel, d, s, ...)                      \
  do {                                                           \
    if ((d) <= 0) return;                                        \
    PN_LAUNCH(kernel, col_grid(d), kThreads, 0, s)(__VA_ARGS__); \
    PN_LAUNCHED();                                               \
  } while (0)

void batch_absorb(const double* stats, int d, double eps, double alpha, double* running_mean,
                  double* running_var, double* mean, double* rstd, double* var_b,
                  cudaStream_t s) {
  PN_COLUMN_LAUNCH(batch_absorb_kernel, d, s, stats, d, eps, alpha, running_mean, running_var, mean,
                   rstd, var_b);
}
void batch_param_grads(const double* count, const double* sums, int d, const double* rstd,
                       float* dgamma, float* dbeta, cudaStream_t s) {
  PN_COLUMN_LAUNCH(batch_param_grads_kernel, d, s, count, sums, d, rstd, dgamma, dbeta);
}
void batch_backward_coeffs(const double* count, const double* sums, int d, const float* gamma,
                           const double* rstd, double* a, double* b, cudaStream_t s) {
  PN_COLUMN_LAUNCH(batch_backward_coeffs_kernel, d, s, count, sums, d, gamma, rstd, a, b);
}
void power_v_absorb(const double* stats, int d, double eps, double alpha, double* running_psi2,
                    double* inv_s, cudaStream_t s) {
  PN_COLUMN_LAUNCH(power_v_absorb_kernel, d, s, stats, d, eps, alpha, running_psi2, inv_s);
}
void pn_forward_scale(const double* t, int64_t warmup, int d, double eps,
                      const double* running_psi2, double* inv_s, double* warm, cudaStream_t s) {
  PN_COLUMN_LAUNCH(pn_forward_scale_kernel, d, s, t, warmup, d, eps, running_psi2, inv_s, warm);
}
void pn_absorb(const double* stats, double* t, int64_t warmup, int d, double eps, double alpha_fwd,
               bool authors_rule, double* running_psi2, double* inv_s, double* sum_x2,
               cudaStream_t s) {
  if (d <= 0) return;
  PN_LAUNCH(pn_absorb_kernel, col_grid(d), kThreads, 0, s)(
      stats, t, warmup, d, eps, alpha_fwd, authors_rule, running_psi2, inv_s, sum_x2);
  PN_LAUNCHED();
  PN_LAUNCH(pn_step_kernel, 1, 1, 0, s)(stats, t);
  PN_LAUNCHED();
}
void psi_param_grads(const double* count, const double* sums, int d, const double* inv_s,
                     const float* gamma, float* dgamma, float* dbeta, double* g_xh,
                     cudaStream_t s) {
  PN_COLUMN_LAUNCH(psi_param_grads_kernel, d, s, count, sums, d, inv_s, gamma, dgamma, dbeta, g_xh);
}
void mean_over_count(const double* count, const double* sums, int d, double* b, cudaStream_t s) {
  PN_COLUMN_LAUNCH(mean_over_count_kernel, d, s, count, sums, d, b);
}
void pn_nu_update(const double* count, const double* sum_x2, const double* g_xh,
                  const double* inv_s, int d, double alpha_bkw, double lambda_coef, double* nu,
                  cudaStream_t s) {
  PN_COLUMN_LAUNCH(pn_nu_kernel, d, s, count, sum_x2, g_xh, inv_s, d, alpha_bkw, lambda_coef, nu);
}
void pn_authors_coeffs(const double* count, const double* sum_x2, const double* nu,
                       const double* inv_s, int d, double eps, double alpha_bkw, double* inv_s_b,
                       double* nu_coef, cudaStream_t s) {
  PN_COLUMN_LAUNCH(pn_authors_coeffs_kernel, d, s, count, sum_x2, nu, inv_s, d, eps, alpha_bkw,
                   inv_s_b, nu_coef);
}

}  // namespace pn::cuda
