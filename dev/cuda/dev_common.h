// What the kernel experiments of dev/cuda share: random inputs, the check of a result against the
// CPU kernels, the timing loop and the command line.
//
// An experiment is a variant of a product kernel that no run of pntrain uses, kept as one program
// beside its CPU reference: `NAME --check` runs the variant and the product's kernel on small
// shapes against the CPU kernels (exit 1 on a mismatch; ctest runs it on the emulation); `NAME`
// checks, then times both at the norm bench's shapes (16384 rows, d 768 and 1024) with L2
// flushed between repetitions (bench/cuda_timer.h), as the norm bench times the product's.
// When a GPU's timing shows the variant faster, it replaces the product's kernel and its program
// goes; when it shows it slower, the program goes.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_timer.h"
#include "kernels/cuda/cuda_check.h"

namespace pn::dev {

using bench::DevBuf;
using bench::Timer;

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.f,
                                        float mean = 0.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
// 1 for a live row, 0 for about a quarter of them (none where masked is false).
inline std::vector<uint8_t> random_mask(int rows, uint64_t seed, bool masked) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution off(0.25);
  std::vector<uint8_t> m(rows, 1);
  if (masked)
    for (uint8_t& v : m) v = off(rng) ? 0 : 1;
  return m;
}

// The mismatches found over a program's run; each is printed where it is found.
inline int& failures() {
  static int n = 0;
  return n;
}
// Whether every got[i] lies within atol + rtol |want[i]| of want[i] (NaN never does); the first
// value outside is printed with the name of what was compared.
template <class T, class U>
bool expect_close(const std::string& what, const std::vector<T>& got, const std::vector<U>& want,
                  double atol, double rtol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double g = double(got[i]), w = double(want[i]);
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w)) && bad++ == 0) first = i;
  }
  if (got.size() == want.size() && bad == 0) return true;
  std::printf("MISMATCH %s: %zu of %zu values (sizes %zu and %zu)", what.c_str(), bad, got.size(),
              got.size(), want.size());
  if (bad) std::printf("; first at %zu: %.9g, want %.9g", first, double(got[first]),
                       double(want[first]));
  std::printf("\n");
  ++failures();
  return false;
}

// The command line of an experiment: --check (the check alone) and --reps N (timed calls a
// figure, default 20); anything else exits 2 naming it. Without a visible GPU it says so and the
// program ends: exit 0, or 1 under PN_CUDA_REQUIRED=1 (gpu-check), where measuring nothing fails.
struct Args {
  bool check_only = false;
  int reps = 20;
};
inline Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string v = argv[i];
    if (v == "--check") {
      a.check_only = true;
    } else if (v == "--reps" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      a.reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "%s: '%s' is not an option (use --check and --reps N, N > 0)\n",
                   argv[0], v.c_str());
      std::exit(2);
    }
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("%s: no CUDA device visible (%s); nothing to check or time\n", argv[0],
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    const char* req = std::getenv("PN_CUDA_REQUIRED");
    std::exit(req && std::string(req) == "1" ? 1 : 0);
  }
  return a;
}

// An experiment's main: check(stream), then, unless --check, time(timer, the copy's GB/s, reps,
// stream); the checks' verdict is the exit status.
template <class Check, class Time>
int experiment_main(int argc, char** argv, const char* name, Check check, Time time) {
  const Args args = parse_args(argc, argv);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  check(s);
  if (!args.check_only) {
    Timer timer(s);
    const double copy = timer.copy_gbs(size_t(16384) * 1024 * 4 * 4, args.reps);
    std::printf("device copy: %.0f GB/s; L2 flushed before each call (%zu MB written)\n", copy,
                timer.flush_bytes() >> 20);
    time(timer, copy, args.reps, s);
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  if (failures()) {
    std::printf("%s: %d checks FAILED\n", name, failures());
    return 1;
  }
  std::printf("%s: every check passed\n", name);
  return 0;
}

}  // namespace pn::dev
