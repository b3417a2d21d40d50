// Helpers of the --probe-norm-stats diagnostics (Norm::probe): only called when probing.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace pn {

// ||a - b||_2 / d over the d features.
inline double probe_distance(const double* a, const double* b, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c) s += (a[c] - b[c]) * (a[c] - b[c]);
  return std::sqrt(s) / d;
}

// ||psi_B^2 - psi^2||_2 / d from the reduced [count | sum x^2] and the running psi^2.
inline double probe_psi2_distance(const double* count_sum_x2, const std::vector<double>& psi2) {
  const int d = int(psi2.size());
  std::vector<double> psi2_b(d);
  for (int c = 0; c < d; ++c) psi2_b[c] = count_sum_x2[1 + c] / count_sum_x2[0];
  return probe_distance(psi2_b.data(), psi2.data(), d);
}

// RMS over the unmasked rows of || scale_c * coef_c * xh_ic ||_2, xh = (x - shift_c) * scale_c
// (shift may be null): the norm of a gradient part of the form scale * coef * xh.
template <class T>
double probe_xh_part(const T* x, const uint8_t* mask, int rows, int d, const double* shift,
                     const double* scale, const double* coef, double count) {
  if (count <= 0) return 0;
  double s = 0;
  for (int r = 0; r < rows; ++r) {
    if (mask && !mask[r]) continue;
    for (int c = 0; c < d; ++c) {
      const double xh = (double(x[size_t(r) * d + c]) - (shift ? shift[c] : 0.0)) * scale[c];
      const double v = scale[c] * coef[c] * xh;
      s += v * v;
    }
  }
  return std::sqrt(s / count);
}

}  // namespace pn
