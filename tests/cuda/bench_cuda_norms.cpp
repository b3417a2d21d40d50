// pnbench_cuda_norms: forward + backward time of every norm layer on the GPU (make_norm's
// layers in a CUDA context: the kernels training runs) beside a device copy (the target: at
// least 80% of the copy's bandwidth). Not a test: it prints a table and exits 0, or says that no
// GPU is visible (exit 1 under PN_CUDA_REQUIRED=1).
//
//   pnbench_cuda_norms [rows d]      (default 16384 1024)
//
// Two forms per norm, fp32, training, every row a token:
//   plain     forward(x) -> y, backward(x, dy) -> dx. Bytes counted per element: x read and y
//             written, then x, dy read and dx written (5 floats).
//   residual  forward_residual(a, b) -> sum = a + b and y, backward(sum, dy) added into the
//             residual stream's gradient dx, as a pre-norm Transformer runs every norm: a, b read,
//             sum, y written; sum, dy, dx read and dx written (8 floats).
// Whatever else a norm reads (a statistics pass that reads its input again: batch and power_v
// need their statistics before their first output) is its own cost. The copy reference moves
// 5 floats per element with cudaMemcpyAsync (read + write); "of copy" = GB/s / the copy's GB/s.
// PN runs past its warmup (warmup 0), as it trains almost all of the time.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/device.h"
#include "layers/norms/norm.h"

namespace {

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
  DeviceScope scope(Device::CUDA);
  const cudaStream_t s = static_cast<cudaStream_t>(scope.context().stream);

  const size_t n = size_t(rows) * d;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float((i * 2654435761u) % 1000) / 500.f - 1.f;
  Buf<float> a(n), b(n), sum(n), y(n), dy(n), dx(n), copy_src(5 * n / 2 + 1), copy_dst(5 * n / 2 + 1);
  a.from_host(h);
  b.from_host(h);
  dy.from_host(h);
  Buf<uint8_t> mask(rows);
  mask.from_host(std::vector<uint8_t>(rows, 1));

  const int iters = 20;
  const double bytes = 5.0 * n * sizeof(float), bytes_residual = 8.0 * n * sizeof(float);
  const double copy_ms = time_ms(
      [&] {
        CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), copy_src.data(), 5 * n * sizeof(float) / 2,
                                   cudaMemcpyDeviceToDevice, s));
      },
      iters, s);  // reads half and writes half: 5 floats per element moved in all
  const double copy_gbs = bytes / copy_ms / 1e6;
  std::printf("%s, %d x %d floats; device copy of 5 floats an element: %.3f ms (%.0f GB/s)\n",
              prop.name, rows, d, copy_ms, copy_gbs);
  std::printf("%-10s %10s %8s %8s   %12s %8s %8s\n", "norm", "fwd+bwd ms", "GB/s", "of copy",
              "residual ms", "GB/s", "of copy");

  struct Kind {
    const char* name;
    const char* kind;
    int groups;
  };
  for (const Kind& k : {Kind{"layer", "layer", 1}, Kind{"rms", "rms", 1},
                        Kind{"group8", "group", 8}, Kind{"batch", "batch", 1},
                        Kind{"power_v", "power_v", 1}, Kind{"power", "power", 1}}) {
    NormOptions o;
    o.kind = k.kind;
    o.groups = k.groups;
    ParamStore<float> store;
    std::unique_ptr<Norm<float>> norm = make_norm<float>(o, d, store, "n", nullptr);
    store.allocate(1);
    const double plain_ms = time_ms(
        [&] {
          norm->forward(a.data(), mask.data(), rows, y.data(), true);
          norm->backward(a.data(), dy.data(), mask.data(), rows, dx.data());
        },
        iters, s);
    const double residual_ms = time_ms(
        [&] {
          norm->forward_residual(a.data(), b.data(), nullptr, 0.f, sum.data(), mask.data(), rows,
                                 y.data(), true);
          norm->backward(sum.data(), dy.data(), mask.data(), rows, dx.data(), true);
        },
        iters, s);
    const double gbs = bytes / plain_ms / 1e6, gbs_r = bytes_residual / residual_ms / 1e6;
    std::printf("%-10s %10.3f %8.0f %7.0f%%   %12.3f %8.0f %7.0f%%\n", k.name, plain_ms, gbs,
                100 * gbs / copy_gbs, residual_ms, gbs_r, 100 * gbs_r / copy_gbs);
  }
  synchronize();
  return 0;
}
