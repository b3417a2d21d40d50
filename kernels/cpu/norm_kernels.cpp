// CPU kernels of the normalization family; see kernels/norm_kernels.h for the math.
// Column statistics: each thread owns a block of columns and walks all rows, accumulating in
// double, so sums are bitwise independent of the thread count.
#include "kernels/norm_kernels.h"

#include <algorithm>
#include <cmath>

namespace pn::k {
namespace {
constexpr int kBlock = 64;  // columns per thread task
inline bool big(int rows, int d) { return size_t(rows) * size_t(d) > 32768; }
inline bool live(const uint8_t* mask, int r) { return !mask || mask[r]; }
}  // namespace

template <class T>
void column_stats(const T* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq) {
  double n = 0;
  for (int r = 0; r < rows; ++r) n += live(mask, r) ? 1 : 0;
  *count = n;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int c0 = 0; c0 < d; c0 += kBlock) {
    const int c1 = std::min(d, c0 + kBlock);
    double s1[kBlock] = {0}, s2[kBlock] = {0}, sh[kBlock] = {0};
    if (shift)
      for (int c = c0; c < c1; ++c) sh[c - c0] = shift[c];
    for (int r = 0; r < rows; ++r) {
      if (!live(mask, r)) continue;
      const T* xr = x + size_t(r) * d;
      for (int c = c0; c < c1; ++c) {
        const double v = double(xr[c]) - sh[c - c0];
        s1[c - c0] += v;
        s2[c - c0] += v * v;
      }
    }
    for (int c = c0; c < c1; ++c) {
      if (sum) sum[c] = s1[c - c0];
      if (sumsq) sumsq[c] = s2[c - c0];
    }
  }
}

template <class T>
void column_dot(const T* a, const T* b, const uint8_t* mask, int rows, int d, const double* shift,
                double* sum_a, double* sum_ab) {
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int c0 = 0; c0 < d; c0 += kBlock) {
    const int c1 = std::min(d, c0 + kBlock);
    double s1[kBlock] = {0}, s2[kBlock] = {0}, sh[kBlock] = {0};
    if (shift)
      for (int c = c0; c < c1; ++c) sh[c - c0] = shift[c];
    for (int r = 0; r < rows; ++r) {
      if (!live(mask, r)) continue;
      const T* ar = a + size_t(r) * d;
      const T* br = b + size_t(r) * d;
      for (int c = c0; c < c1; ++c) {
        const double av = ar[c];
        s1[c - c0] += av;
        s2[c - c0] += av * (double(br[c]) - sh[c - c0]);
      }
    }
    for (int c = c0; c < c1; ++c) {
      if (sum_a) sum_a[c] = s1[c - c0];
      if (sum_ab) sum_ab[c] = s2[c - c0];
    }
  }
}

template <class T>
void column_affine(const T* x, int rows, int d, const double* shift, const double* scale,
                   const T* gamma, const T* beta, T* y) {
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + size_t(r) * d;
    T* yr = y + size_t(r) * d;
    for (int c = 0; c < d; ++c) {
      const double xc = double(xr[c]) - (shift ? shift[c] : 0.0);
      yr[c] = T(double(gamma[c]) * xc * scale[c] + (beta ? double(beta[c]) : 0.0));
    }
  }
}

template <class T>
void column_norm_backward(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const T* gamma,
                          const double* a, const double* b, T* dx) {
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    T* dxr = dx + size_t(r) * d;
    if (!live(mask, r)) {
      std::fill(dxr, dxr + d, T(0));
      continue;
    }
    const T* xr = x + size_t(r) * d;
    const T* dyr = dy + size_t(r) * d;
    for (int c = 0; c < d; ++c) {
      const double xh = (double(xr[c]) - (shift ? shift[c] : 0.0)) * scale[c];
      const double g = double(gamma[c]) * dyr[c];
      dxr[c] = T(scale[c] * (g - (a ? a[c] : 0.0) - b[c] * xh));
    }
  }
}

template <class T>
void rowgroup_rms_forward(const T* x, int rows, int d, int G, T eps, const T* gamma, T* y,
                          T* rinv) {
  const int m = d / G;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < G; ++j) {
      const T* xr = x + size_t(r) * d + size_t(j) * m;
      T* yr = y + size_t(r) * d + size_t(j) * m;
      double s = 0;
      for (int c = 0; c < m; ++c) s += double(xr[c]) * xr[c];
      const double ri = 1.0 / std::sqrt(s / m + double(eps));
      for (int c = 0; c < m; ++c)
        yr[c] = T(double(xr[c]) * ri * (gamma ? double(gamma[j * m + c]) : 1.0));
      rinv[size_t(r) * G + j] = T(ri);
    }
  }
}

template <class T>
void rowgroup_rms_backward(const T* x, const T* dy, const T* rinv, const T* gamma,
                           const uint8_t* mask, int rows, int d, int G, T* dx, T* dgamma) {
  const int m = d / G;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    T* dxr = dx + size_t(r) * d;
    if (!live(mask, r)) {
      std::fill(dxr, dxr + d, T(0));
      continue;
    }
    for (int j = 0; j < G; ++j) {
      const T* xr = x + size_t(r) * d + size_t(j) * m;
      const T* dyr = dy + size_t(r) * d + size_t(j) * m;
      T* dxg = dxr + size_t(j) * m;
      const double ri = rinv[size_t(r) * G + j];
      double sgx = 0;
      for (int c = 0; c < m; ++c)
        sgx += (gamma ? double(gamma[j * m + c]) : 1.0) * dyr[c] * (double(xr[c]) * ri);
      const double mgx = sgx / m;
      for (int c = 0; c < m; ++c) {
        const double g = (gamma ? double(gamma[j * m + c]) : 1.0) * dyr[c];
        dxg[c] = T(ri * (g - double(xr[c]) * ri * mgx));
      }
    }
  }
  if (!dgamma) return;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int c0 = 0; c0 < d; c0 += kBlock) {
    const int c1 = std::min(d, c0 + kBlock);
    for (int r = 0; r < rows; ++r) {
      if (!live(mask, r)) continue;
      const T* xr = x + size_t(r) * d;
      const T* dyr = dy + size_t(r) * d;
      for (int c = c0; c < c1; ++c) dgamma[c] += dyr[c] * xr[c] * rinv[size_t(r) * G + c / m];
    }
  }
}

template <class T>
void rowgroup_norm_forward(const T* x, int rows, int d, int G, T eps, const T* gamma,
                           const T* beta, T* y, T* mean, T* rstd) {
  const int m = d / G;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < G; ++j) {
      const size_t off = size_t(r) * d + size_t(j) * m;
      const T* xr = x + off;
      T* yr = y + off;
      double s = 0;
      for (int c = 0; c < m; ++c) s += xr[c];
      const double mu = s / m;
      double v = 0;
      for (int c = 0; c < m; ++c) v += (xr[c] - mu) * (xr[c] - mu);
      const double rs = 1.0 / std::sqrt(v / m + double(eps));
      for (int c = 0; c < m; ++c)
        yr[c] = T(double(gamma[j * m + c]) * (xr[c] - mu) * rs + double(beta[j * m + c]));
      mean[size_t(r) * G + j] = T(mu);
      rstd[size_t(r) * G + j] = T(rs);
    }
  }
}

template <class T>
void rowgroup_norm_backward(const T* x, const T* dy, const T* mean, const T* rstd,
                            const T* gamma, const uint8_t* mask, int rows, int d, int G, T* dx,
                            T* dgamma, T* dbeta) {
  const int m = d / G;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    T* dxr = dx + size_t(r) * d;
    if (!live(mask, r)) {
      std::fill(dxr, dxr + d, T(0));
      continue;
    }
    for (int j = 0; j < G; ++j) {
      const size_t off = size_t(r) * d + size_t(j) * m;
      const T* xr = x + off;
      const T* dyr = dy + off;
      const double mu = mean[size_t(r) * G + j], rs = rstd[size_t(r) * G + j];
      double sg = 0, sgx = 0;
      for (int c = 0; c < m; ++c) {
        const double g = double(gamma[j * m + c]) * dyr[c];
        sg += g;
        sgx += g * (xr[c] - mu) * rs;
      }
      const double mg = sg / m, mgx = sgx / m;
      for (int c = 0; c < m; ++c) {
        const double g = double(gamma[j * m + c]) * dyr[c];
        dxr[j * m + c] = T(rs * (g - mg - (xr[c] - mu) * rs * mgx));
      }
    }
  }
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int c0 = 0; c0 < d; c0 += kBlock) {
    const int c1 = std::min(d, c0 + kBlock);
    for (int r = 0; r < rows; ++r) {
      if (!live(mask, r)) continue;
      const T* xr = x + size_t(r) * d;
      const T* dyr = dy + size_t(r) * d;
      for (int c = c0; c < c1; ++c) {
        const size_t gi = size_t(r) * G + c / m;
        dgamma[c] += dyr[c] * (xr[c] - mean[gi]) * rstd[gi];
        dbeta[c] += dyr[c];
      }
    }
  }
}

#define PN_NORM_KERNELS(T)                                                                     \
  template void column_stats<T>(const T*, const uint8_t*, int, int, const double*, double*,    \
                                double*, double*);                                             \
  template void column_dot<T>(const T*, const T*, const uint8_t*, int, int, const double*,     \
                              double*, double*);                                               \
  template void column_affine<T>(const T*, int, int, const double*, const double*, const T*,   \
                                 const T*, T*);                                                \
  template void column_norm_backward<T>(const T*, const T*, const uint8_t*, int, int,          \
                                        const double*, const double*, const T*, const double*, \
                                        const double*, T*);                                    \
  template void rowgroup_rms_forward<T>(const T*, int, int, int, T, const T*, T*, T*);         \
  template void rowgroup_rms_backward<T>(const T*, const T*, const T*, const T*,               \
                                         const uint8_t*, int, int, int, T*, T*);               \
  template void rowgroup_norm_forward<T>(const T*, int, int, int, T, const T*, const T*, T*,   \
                                         T*, T*);                                              \
  template void rowgroup_norm_backward<T>(const T*, const T*, const T*, const T*, const T*,    \
                                          const uint8_t*, int, int, int, T*, T*, T*);
PN_NORM_KERNELS(float)
PN_NORM_KERNELS(double)
#undef PN_NORM_KERNELS

}  // namespace pn::k
