// CPU twins of kernels/cuda/norm_state.cu and of the device-resident sums: the per-column state
// steps of the batch-type norms, one loop over the d features each, and the accumulating loss and
// gradient sums. The count is read from memory exactly as on the device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"
#include "kernels/cpu/ordered_sum.h"

namespace pn::k::cpu {

template <class T>
void softmax_xent_acc(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, T label_smoothing, T grad_scale, bool grad_bf16, bool logits_bf16,
                      double* sums) {
  if (grad_bf16 && !std::is_same_v<T, float>)
    throw std::logic_error("softmax_xent_acc: a bf16 gradient of double logits");
  if (logits_bf16 && !grad_bf16)
    throw std::logic_error("softmax_xent_acc: bf16 logits with an fp32 gradient");
  if (logits_bf16) {  // the float path over the logits' values, its gradient rounded back
    uint16_t* z16 = reinterpret_cast<uint16_t*>(logits);
    std::vector<float> z(size_t(rows) * ld);
    for (size_t i = 0; i < z.size(); ++i) z[i] = bf16_value(z16[i]);
    const LossSums s = softmax_xent<float>(z.data(), target, mask, rows, V, ld,
                                           float(label_smoothing), float(grad_scale));
    sums[0] += s.loss, sums[1] += s.nll, sums[2] += s.ntokens;
    for (size_t i = 0; i < z.size(); ++i) z16[i] = bf16_bits(z[i]);
    return;
  }
  const LossSums s =
      softmax_xent<T>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale);
  sums[0] += s.loss, sums[1] += s.nll, sums[2] += s.ntokens;
  if (!grad_bf16) return;
  // Each row's roundings into the first half of its own bytes, in ascending order: value j's
  // two bytes land on value j / 2, read before.
#pragma omp parallel for schedule(static) if (size_t(rows) * ld > 65536)
  for (int r = 0; r < rows; ++r) {
    unsigned char* row = reinterpret_cast<unsigned char*>(logits + size_t(r) * ld);
    for (int j = 0; j < ld; ++j) {
      float v;
      std::memcpy(&v, row + 4 * size_t(j), 4);
      const uint16_t b = bf16_bits(v);
      std::memcpy(row + 2 * size_t(j), &b, 2);
    }
  }
}
template <class T>
void softmax_xent_eval_acc(const T* logits, const int32_t* target, const uint8_t* mask, int rows,
                           int V, int ld, T label_smoothing, double* sums) {
  const LossSums s = softmax_xent_eval<T>(logits, target, mask, rows, V, ld, label_smoothing);
  sums[0] += s.loss, sums[1] += s.nll, sums[2] += s.ntokens;
}
template <class T>
void grad_stats_acc(const T* x, size_t n, double* out) {
  const auto s = ordered_sums<2>(n, kSumChunk, [&](size_t i, auto& acc) {
    acc[0] += double(x[i]) * double(x[i]);
    acc[1] += std::isfinite(x[i]) ? 0.0 : 1.0;
  });
  out[0] += s[0], out[1] += s[1];
}

void batch_absorb(const double* stats, int d, double eps, double alpha, double* running_mean,
                  double* running_var, double* mean, double* rstd, double* var_b) {
  const double count = stats[0];
  for (int c = 0; c < d; ++c) {
    if (count > 0) {
      const double m1 = stats[1 + c] / count;
      const double var = std::max(0.0, stats[1 + d + c] / count - m1 * m1);
      mean[c] = running_mean[c] + m1;
      rstd[c] = 1.0 / std::sqrt(var + eps);
      if (var_b) var_b[c] = var;
      running_mean[c] = alpha * running_mean[c] + (1 - alpha) * mean[c];
      running_var[c] = alpha * running_var[c] + (1 - alpha) * var;
    } else {  // inference formula, state unchanged
      mean[c] = running_mean[c];
      rstd[c] = 1.0 / std::sqrt(running_var[c] + eps);
    }
  }
}

template <class T>
void batch_param_grads(const double* count, const double* sums, int d, const double* rstd,
                       T* dgamma, T* dbeta) {
  if (!(*count > 0)) return;
  for (int c = 0; c < d; ++c) {
    dgamma[c] += T(sums[d + c] * rstd[c]);
    dbeta[c] += T(sums[c]);
  }
}

template <class T>
void batch_backward_coeffs(const double* count, const double* sums, int d, const T* gamma,
                           const double* rstd, double* a, double* b) {
  const double n = *count;
  for (int c = 0; c < d; ++c) {
    a[c] = n > 0 ? double(gamma[c]) * sums[c] / n : 0.0;
    b[c] = n > 0 ? double(gamma[c]) * sums[d + c] * rstd[c] / n : 0.0;
  }
}

void power_v_absorb(const double* stats, int d, double eps, double alpha, double* running_psi2,
                    double* inv_s) {
  const double count = stats[0];
  for (int c = 0; c < d; ++c) {
    if (count > 0) {
      const double psi2_b = stats[1 + c] / count;
      inv_s[c] = 1.0 / std::sqrt(psi2_b + eps);
      running_psi2[c] = alpha * running_psi2[c] + (1 - alpha) * psi2_b;
    } else {
      inv_s[c] = 1.0 / std::sqrt(running_psi2[c] + eps);
    }
  }
}

void pn_forward_scale(const double* t, int64_t warmup, int d, double eps,
                      const double* running_psi2, double* inv_s, double* warm) {
  *warm = *t + 1 <= double(warmup) ? 1.0 : 0.0;
  if (*warm > 0) return;
  for (int c = 0; c < d; ++c) inv_s[c] = 1.0 / std::sqrt(running_psi2[c] + eps);
}

void pn_absorb(const double* stats, double* t, int64_t warmup, int d, double eps,
               double alpha_fwd, bool authors_rule, double* running_psi2, double* inv_s,
               double* sum_x2) {
  const double count = stats[0];
  if (!(count > 0)) {
    inverse_sqrt_eps(running_psi2, d, eps, inv_s);
    return;
  }
  const double t1 = *t + 1;
  const bool warm = t1 <= double(warmup);
  for (int c = 0; c < d; ++c) {
    sum_x2[c] = stats[1 + c];
    const double psi2_b = sum_x2[c] / count;
    if (warm) inv_s[c] = 1.0 / std::sqrt(psi2_b + eps);
    if (authors_rule) {
      if (t1 < double(warmup)) running_psi2[c] += (psi2_b - running_psi2[c]) / t1;
      running_psi2[c] = alpha_fwd * running_psi2[c] + (1 - alpha_fwd) * psi2_b;
    } else {
      running_psi2[c] = warm ? running_psi2[c] + (psi2_b - running_psi2[c]) / t1
                             : alpha_fwd * running_psi2[c] + (1 - alpha_fwd) * psi2_b;
    }
  }
  *t = t1;
}

void pn_authors_coeffs(const double* count, const double* sum_x2, const double* nu,
                       const double* inv_s, int d, double eps, double alpha_bkw, double* inv_s_b,
                       double* nu_coef) {
  const double n = *count;
  for (int c = 0; c < d; ++c) {
    inv_s_b[c] = 1.0 / std::sqrt((n > 0 ? sum_x2[c] / n : 0.0) + eps);
    nu_coef[c] = (1 - alpha_bkw) * nu[c] * inv_s[c] / inv_s_b[c];
  }
}

template <class T>
void psi_param_grads(const double* count, const double* sums, int d, const double* inv_s,
                     const T* gamma, T* dgamma, T* dbeta, double* g_xh) {
  const bool has_rows = *count > 0;
  for (int c = 0; c < d; ++c) {
    if (!has_rows) {
      g_xh[c] = 0;
      continue;
    }
    const double dy_xh = sums[d + c] * inv_s[c];
    dgamma[c] += T(dy_xh);
    dbeta[c] += T(sums[c]);
    g_xh[c] = double(gamma[c]) * dy_xh;
  }
}

void mean_over_count(const double* count, const double* sums, int d, double* b) {
  const double n = *count;
  for (int c = 0; c < d; ++c) b[c] = n > 0 ? sums[c] / n : 0.0;
}

void pn_nu_update(const double* count, const double* sum_x2, const double* g_xh,
                  const double* inv_s, int d, double alpha_bkw, double lambda_coef, double* nu) {
  const double n = *count;
  if (!(n > 0)) return;
  for (int c = 0; c < d; ++c) {
    const double Gamma = sum_x2[c] * inv_s[c] * inv_s[c] / n;
    const double Lambda = g_xh[c] / n;
    nu[c] = nu[c] * (1 - (1 - alpha_bkw) * Gamma) + lambda_coef * Lambda;
  }
}

void inverse_sqrt_eps(const double* var, int d, double eps, double* inv) {
  for (int c = 0; c < d; ++c) inv[c] = 1.0 / std::sqrt(var[c] + eps);
}

// The explicit instantiations of the templated operations of kernels/ops.inc whose cpu file is
// this one.
#define PN_OPS_THIS_FILE_norm_state PN_OPS_PROBE
#include "kernels/instantiate.inc"

}  // namespace pn::k::cpu
