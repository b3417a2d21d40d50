// LayerNorm over each row's d features, statistics in double for stability:
//   mu = mean(x); var = mean((x-mu)^2); xh = (x-mu)*rstd, rstd = 1/sqrt(var+eps); y = g*xh + b
// Backward (g_j = gamma_j * dy_j): dx = rstd * (g - mean(g) - xh * mean(g*xh))
// LayerNorm is group normalization with one group: both share the vectorised kernels of
// kernels/cpu/norm_kernels.cpp (row sums over independent double lanes, dgamma/dbeta
// accumulated in the same pass into fixed row-chunk partials combined in chunk order).
#include "kernels/cpu/cpu_kernels.h"

namespace pn::k::cpu {

template <class T>
void layernorm_forward(const T* x, int rows, int d, const T* gamma, const T* beta, T eps, T* y,
                       uint16_t* y16, T* mean, T* rstd) {
  rowgroup_norm_forward<T>(x, rows, d, 1, eps, gamma, beta, y, y16, mean, rstd);
}

template <class T>
void residual_layernorm_forward(const T* a, const T* b, const uint8_t* keep, float p, int rows,
                                int d, const T* gamma, const T* beta, T eps, T* sum, T* y,
                                uint16_t* y16, T* mean, T* rstd) {
  dropout_add<T>(a, b, keep, p, size_t(rows) * size_t(d > 0 ? d : 0), sum);
  layernorm_forward<T>(sum, rows, d, gamma, beta, eps, y, y16, mean, rstd);
}

template <class T>
void layernorm_backward(const T* x, const T* dy, const T* mean, const T* rstd, const T* gamma,
                        const uint8_t* mask, int rows, int d, T* dx, T* dgamma, T* dbeta,
                        bool add_to_dx, uint16_t* dx16) {
  rowgroup_norm_backward<T>(x, dy, mean, rstd, gamma, mask, rows, d, 1, dx, dgamma, dbeta,
                            add_to_dx, dx16);
}

// The explicit instantiations of the templated operations of kernels/ops.inc whose cpu file is
// this one.
#define PN_OPS_THIS_FILE_rownorm PN_OPS_PROBE
#include "kernels/instantiate.inc"

}  // namespace pn::k::cpu
