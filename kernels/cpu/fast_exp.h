// exp for the CPU kernels' hot loops. The float version is branch-free and inlined so that
// `omp simd` loops vectorise it (glibc's expf is a call per element without -ffast-math):
//   x = n ln2 + r, |r| <= ln2/2 (n rounded, ln2 split in two for an exact n ln2),
//   e^r = 1 + r + r^2 (1/2 + r/6 + ...) to degree 7 (Cephes' expf coefficients),
//   e^x = 2^n e^r with 2^n built in the exponent bits.
// Relative error below 2.5e-7 on [-87, 88]; inputs below -87 give ~1.6e-38 instead of a
// denormal or 0, which no sum of probabilities can see; inputs above 88 are not supported. The double version is std::exp, so the
// double-precision paths (finite-difference tests) stay exact.
#pragma once
#include <cmath>
#include <cstdint>

namespace pn::k {

inline float fast_exp(float x) {
  // x = max(x, -87) as arithmetic: GCC threads a conditional clamp into a branch, which stops
  // the loop from vectorising. (No upper clamp: softmax arguments are <= 0.)
  const float low = x < -87.0f ? 1.0f : 0.0f;
  x += low * (-87.0f - x);
  // n = round(x / ln2): adding and subtracting 1.5 * 2^23 rounds to nearest with plain SSE2
  // arithmetic (std::floor would need SSE4.1 to vectorise).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  return p * __builtin_bit_cast(float, bits);
}

inline double fast_exp(double x) { return std::exp(x); }

}  // namespace pn::k
