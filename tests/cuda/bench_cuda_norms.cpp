// pnbench_cuda_norms: forward + backward time of every norm's CUDA kernels beside a device copy
// of the same bytes (the target: at least 80% of the copy's bandwidth). Not a test: it
// prints a table and exits 0, or says that no GPU is visible (exit 1 under PN_CUDA_REQUIRED=1).
//
//   pnbench_cuda_norms [rows d]      (default 16384 1024)
//
// Bytes counted per element: forward reads x and writes y, backward reads x and dy and writes
// dx (5 floats); statistics passes that read x again are the kernels' own cost. The copy
// reference moves the same number of bytes with cudaMemcpyAsync (read + write).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tests/cuda/gpu_norm_pipeline.h"

namespace {

using pn::cuda::DeviceBuffer;

template <class F>
double time_ms(F f, int iters, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) f();  // warm up (scratch allocation, clocks)
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) f();
  CUDA_CHECK(cudaEventRecord(b, s));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pn;
  const int rows = argc > 2 ? std::atoi(argv[1]) : 16384;
  const int d = argc > 2 ? std::atoi(argv[2]) : 1024;
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::printf("pnbench_cuda_norms: no CUDA device visible (%s); nothing to measure\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    // Under PN_CUDA_REQUIRED=1 (pn gpu-check) measuring nothing is a failure.
    const char* req = std::getenv("PN_CUDA_REQUIRED");
    return req && std::string(req) == "1" ? 1 : 0;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));

  const size_t n = size_t(rows) * d;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float((i * 2654435761u) % 1000) / 500.f - 1.f;
  DeviceBuffer<float> x(h), dy(h), y(n), dx(n), copy_dst(5 * n);
  DeviceBuffer<float> gamma(std::vector<float>(d, 1.f)), beta(std::vector<float>(d, 0.f));
  DeviceBuffer<float> dgamma(std::vector<float>(d, 0.f)), dbeta(std::vector<float>(d, 0.f));
  DeviceBuffer<float> mean(size_t(rows) * 16), rstd(size_t(rows) * 16);
  DeviceBuffer<uint8_t> mask(std::vector<uint8_t>(rows, 1));
  DeviceBuffer<float> copy_src(5 * n);

  const int iters = 20;
  const double bytes = 5.0 * n * sizeof(float);
  const double copy_ms = time_ms(
      [&] {
        CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), copy_src.data(), 5 * n * sizeof(float) / 2,
                                   cudaMemcpyDeviceToDevice, s));
      },
      iters, s);  // reads half and writes half: 5 floats per element moved in all
  std::printf("%s, %d x %d floats; device copy of the same bytes: %.3f ms (%.0f GB/s)\n", prop.name,
              rows, d, copy_ms, bytes / copy_ms / 1e6);
  std::printf("%-10s %10s %10s %10s\n", "norm", "fwd+bwd ms", "GB/s", "of copy");

  auto report = [&](const char* name, double ms) {
    std::printf("%-10s %10.3f %10.0f %9.0f%%\n", name, ms, bytes / ms / 1e6, 100 * copy_ms / ms);
  };
  report("layer", time_ms(
                      [&] {
                        cuda::layernorm_forward(x.data(), rows, d, gamma.data(), beta.data(), 1e-5f,
                                                y.data(), nullptr, mean.data(), rstd.data(), s);
                        cuda::layernorm_backward(x.data(), dy.data(), mean.data(), rstd.data(),
                                                 gamma.data(), mask.data(), rows, d, dx.data(),
                                                 dgamma.data(), dbeta.data(), false, s);
                      },
                      iters, s));
  report("rms", time_ms(
                    [&] {
                      cuda::rowgroup_rms_forward(x.data(), rows, d, 1, 1e-5f, gamma.data(),
                                                 y.data(), nullptr, rstd.data(), s);
                      cuda::rowgroup_rms_backward(x.data(), dy.data(), rstd.data(), gamma.data(),
                                                  mask.data(), rows, d, 1, dx.data(), dgamma.data(),
                                                  false, s);
                    },
                    iters, s));
  report("group8", time_ms(
                       [&] {
                         cuda::rowgroup_norm_forward(x.data(), rows, d, 8, 1e-5f, gamma.data(),
                                                     beta.data(), y.data(), nullptr, mean.data(),
                                                     rstd.data(), s);
                         cuda::rowgroup_norm_backward(x.data(), dy.data(), mean.data(), rstd.data(),
                                                      gamma.data(), mask.data(), rows, d, 8,
                                                      dx.data(), dgamma.data(), dbeta.data(), false,
                                                      s);
                       },
                       iters, s));
  for (const char* kind : {"batch", "power_v", "power"}) {
    NormOptions o;
    o.kind = kind;
    test::GpuNormState st(d);
    report(kind, time_ms(
                     [&] {
                       test::gpu_step(kind, o, st, x.data(), dy.data(), mask.data(), rows,
                                      gamma.data(), beta.data(), y.data(), dx.data(), dgamma.data(),
                                      dbeta.data(), s);
                     },
                     iters, s));
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
