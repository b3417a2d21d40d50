// What the CUDA tests share: the skip guard, random data, device copies and comparisons.
//
// Every test starts with PN_REQUIRE_GPU(): without a visible GPU (no device, no driver) it is
// reported SKIPPED with the CUDA runtime's reason, and ctest counts it as skipped, not failed
// (a failure under PN_CUDA_REQUIRED=1).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::test {

// True when a CUDA device is visible; otherwise *why says what the runtime answered.
inline bool gpu_visible(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return true;
  cudaGetLastError();
  *why = "no CUDA device visible: cudaGetDeviceCount returned " +
         std::string(e == cudaSuccess ? "0 devices" : cudaGetErrorName(e)) + " (" +
         (e == cudaSuccess ? "no GPU" : cudaGetErrorString(e)) +
         "); the CUDA path is compiled but cannot be checked on this machine";
  return false;
}

// PN_CUDA_REQUIRED=1 (the GPU check) turns the skip into a failure, so that a run on a GPU
// machine whose driver or runtime is broken cannot come back green having run nothing.
inline bool gpu_required() {
  const char* v = std::getenv("PN_CUDA_REQUIRED");
  return v && std::string(v) == "1";
}

#define PN_REQUIRE_GPU()                                             \
  do {                                                               \
    std::string pn_why_;                                             \
    if (!::pn::test::gpu_visible(&pn_why_)) {                        \
      if (::pn::test::gpu_required()) FAIL() << "PN_CUDA_REQUIRED=1: " << pn_why_; \
      GTEST_SKIP() << pn_why_;                                       \
    }                                                                \
  } while (0)

inline std::vector<float> randf(size_t n, uint64_t seed, float scale = 1.f, float mean = 0.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
// mask[r] = 1 except for a fraction of rows (and always the rows listed).
inline std::vector<uint8_t> random_mask(int rows, uint64_t seed, double p_masked = 0.25) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution masked(p_masked);
  std::vector<uint8_t> m(rows);
  for (auto& v : m) v = masked(rng) ? 0 : 1;
  return m;
}

template <class T>
using DBuf = cuda::DeviceBuffer<T>;

// |gpu - cpu| <= atol + rtol |cpu| element-wise; reports the first few mismatches by index.
template <class A, class B>
void expect_close(const char* what, const std::vector<A>& gpu, const std::vector<B>& cpu,
                  double rtol, double atol) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double g = double(gpu[i]), c = double(cpu[i]);
    const double err = std::fabs(g - c);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(c)) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << g << " cpu " << c;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << cpu.size()
                    << " entries differ; largest error " << worst;
}

template <class T>
void expect_equal(const char* what, const std::vector<T>& gpu, const std::vector<T>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (gpu[i] != cpu[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first;
}

}  // namespace pn::test
