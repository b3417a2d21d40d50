// Helpers of the --probe-norm-stats diagnostics (Norm::probe): only called when probing. They
// take memory of the current device and copy what they read to the host (explicit copies and a
// wait: diagnostics, not the hot path).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/device.h"

namespace pn {

template <class T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> v(n);
  if (!p || n == 0) return v;
  copy_to_host(v.data(), p, n * sizeof(T));
  synchronize();
  return v;
}

// ||a - b||_2 / d over the d features (host vectors).
inline double probe_distance(const double* a, const double* b, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c) s += (a[c] - b[c]) * (a[c] - b[c]);
  return std::sqrt(s) / d;
}

// ||psi_B^2 - psi^2||_2 / d and mean_c psi^2 / psi_B^2 from the reduced [count | sum x^2] and the
// running psi^2 (before this iteration's update), both on the device.
// valid is false for an empty statistics set (nothing to compare).
struct Psi2Probe {
  double distance = 0, ratio = 0;
  bool valid = false;
};
inline Psi2Probe probe_psi2(const double* count_sum_x2, const double* psi2, int d) {
  const std::vector<double> s = host_copy(count_sum_x2, size_t(d) + 1), p = host_copy(psi2, d);
  std::vector<double> psi2_b(d);
  Psi2Probe out;
  if (!(s[0] > 0)) return out;
  out.valid = true;
  for (int c = 0; c < d; ++c) {
    psi2_b[c] = s[1 + c] / s[0];
    out.ratio += p[c] / psi2_b[c] / d;
  }
  out.distance = probe_distance(psi2_b.data(), p.data(), d);
  return out;
}

// RMS over the unmasked rows of || scale_c * coef_c * xh_ic ||_2, xh = (x - shift_c) * scale_c
// (shift may be null): the norm of a gradient part of the form scale * coef * xh.
template <class T>
double probe_xh_part(const T* x_dev, const uint8_t* mask_dev, int rows, int d,
                     const double* shift_dev, const double* scale_dev, const double* coef_dev,
                     const double* count_dev) {
  const double count = host_copy(count_dev, 1)[0];
  if (count <= 0) return 0;
  const std::vector<T> x = host_copy(x_dev, size_t(rows) * d);
  const std::vector<uint8_t> mask = host_copy(mask_dev, mask_dev ? size_t(rows) : 0);
  const std::vector<double> shift = host_copy(shift_dev, shift_dev ? size_t(d) : 0),
                            scale = host_copy(scale_dev, d), coef = host_copy(coef_dev, d);
  double s = 0;
  for (int r = 0; r < rows; ++r) {
    if (mask_dev && !mask[r]) continue;
    for (int c = 0; c < d; ++c) {
      const double xh = (double(x[size_t(r) * d + c]) - (shift_dev ? shift[c] : 0.0)) * scale[c];
      const double v = scale[c] * coef[c] * xh;
      s += v * v;
    }
  }
  return std::sqrt(s / count);
}

}  // namespace pn
