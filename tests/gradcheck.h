// Finite-difference gradient checks in double precision.
// For a layer f, the scalar L = sum(f(x) * w) with fixed random w has dL/dy = w, so the layer's
// backward given dy = w must match central differences (L(x+h) - L(x-h)) / 2h.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "layers/params.h"

namespace pn::test {

inline std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0, double mean = 0.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(mean, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Perturbs the parameters of a store away from their init, so gamma != 1 and biases != 0.
inline void randomize(ParamStore<double>& s, uint64_t seed) {
  const std::vector<double> r = randn(s.data.size(), seed, 0.5);
  for (size_t i = 0; i < r.size(); ++i) s.data[i] += r[i];
}

// Two flat gradient buffers of the same model equal to rtol of the largest |want|, which must be
// above 1e-3 (gradients that vanish would make the equality say nothing).
template <class G>
void expect_same_gradients(const G& got, const G& want, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, largest = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  EXPECT_GT(largest, 1e-3);
  EXPECT_LT(diff, rtol * largest);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares analytic[i] with the central difference of loss() in x[i], for every i (or a
// strided subset of at most max_checks entries). Relative-or-absolute tolerance.
// X: a std::vector<double> or a CPU Buf<double> (a ParamStore's parameters).
template <class X>
void expect_gradient(const char* what, X& x, const std::vector<double>& analytic,
                     const std::function<double()>& loss, double tol = 1e-6,
                     size_t max_checks = 200, double h = 1e-5) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const size_t stride = std::max<size_t>(1, x.size() / max_checks);
  size_t checked = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double lp = loss();
    x[i] = saved - h;
    const double lm = loss();
    x[i] = saved;
    const double fd = (lp - lm) / (2 * h);
    const double err = std::abs(fd - analytic[i]) / std::max(1.0, std::abs(fd));
    EXPECT_LT(err, tol) << what << "[" << i << "]: finite difference " << fd << " vs analytic "
                        << analytic[i];
    ++checked;
  }
  EXPECT_GT(checked, 0u) << what;
}

}  // namespace pn::test
