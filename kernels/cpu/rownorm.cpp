// LayerNorm over each row's d features, statistics in double for stability:
//   mu = mean(x); var = mean((x-mu)^2); xh = (x-mu)*rstd, rstd = 1/sqrt(var+eps); y = g*xh + b
// Backward (g_j = gamma_j * dy_j): dx = rstd * (g - mean(g) - xh * mean(g*xh))
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace pn::k {

template <class T>
void layernorm_forward(const T* x, int rows, int d, const T* gamma, const T* beta, T eps, T* y,
                       T* mean, T* rstd) {
#pragma omp parallel for schedule(static) if (size_t(rows) * d > 32768)
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + size_t(r) * d;
    T* yr = y + size_t(r) * d;
    double s = 0;
    for (int c = 0; c < d; ++c) s += xr[c];
    const double mu = s / d;
    double v = 0;
    for (int c = 0; c < d; ++c) v += (xr[c] - mu) * (xr[c] - mu);
    const T rs = T(1.0 / std::sqrt(v / d + double(eps)));
    const T m = T(mu);
#pragma omp simd
    for (int c = 0; c < d; ++c) yr[c] = gamma[c] * (xr[c] - m) * rs + beta[c];
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <class T>
void layernorm_backward(const T* x, const T* dy, const T* mean, const T* rstd, const T* gamma,
                        const uint8_t* mask, int rows, int d, T* dx, T* dgamma, T* dbeta) {
#pragma omp parallel for schedule(static) if (size_t(rows) * d > 32768)
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + size_t(r) * d;
    const T* gr = dy + size_t(r) * d;
    T* dxr = dx + size_t(r) * d;
    if (mask && !mask[r]) {
      for (int c = 0; c < d; ++c) dxr[c] = T(0);
      continue;
    }
    const T m = mean[r], rs = rstd[r];
    double sg = 0, sgx = 0;
    for (int c = 0; c < d; ++c) {
      const double g = double(gamma[c]) * gr[c];
      sg += g;
      sgx += g * (xr[c] - m) * rs;
    }
    const T mg = T(sg / d), mgx = T(sgx / d);
#pragma omp simd
    for (int c = 0; c < d; ++c) {
      const T xh = (xr[c] - m) * rs;
      dxr[c] = rs * (gamma[c] * gr[c] - mg - xh * mgx);
    }
  }
  // Parameter gradients: columns split across threads (no two threads share an entry).
#pragma omp parallel for schedule(static) if (size_t(rows) * d > 32768)
  for (int c0 = 0; c0 < d; c0 += 32) {
    const int c1 = std::min(d, c0 + 32);
    for (int r = 0; r < rows; ++r) {
      if (mask && !mask[r]) continue;
      const T* xr = x + size_t(r) * d;
      const T* gr = dy + size_t(r) * d;
      const T m = mean[r], rs = rstd[r];
      for (int c = c0; c < c1; ++c) {
        dgamma[c] += gr[c] * (xr[c] - m) * rs;
        dbeta[c] += gr[c];
      }
    }
  }
}

template void layernorm_forward<float>(const float*, int, int, const float*, const float*, float,
                                       float*, float*, float*);
template void layernorm_forward<double>(const double*, int, int, const double*, const double*,
                                        double, double*, double*, double*);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*,
                                        const float*, const uint8_t*, int, int, float*, float*,
                                        float*);
template void layernorm_backward<double>(const double*, const double*, const double*,
                                         const double*, const double*, const uint8_t*, int, int,
                                         double*, double*, double*);

}  // namespace pn::k
