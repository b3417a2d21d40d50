// The GPU half of pnbench_norms (norm_bench_cuda.h). Two forms per norm, training, every row a
// token; each direction timed alone, with L2 flushed between repetitions (bench/cuda_timer.h):
//   fp32      forward(x) -> y; backward(x, dy) -> dx;
//   training  as a pre-norm Transformer in bf16 runs every norm: forward_residual(a, b) -> sum =
//             a + b and y as bf16 only (y16, for the next GEMM); backward(sum, dy) added into the
//             residual stream's gradient dx, with its bf16 copy dx16.
// Each figure's bytes are what its kernels read and write over DRAM, in floats per element:
// fp32 forward x read, y written (2); backward x, dy read, dx written (3); training forward a, b
// read, sum and y16 written (3.5); backward sum, dy, dx read, dx and dx16 written (4.5). batch and
// power_v need their column statistics before their first output in each direction, so they read
// their input twice, and those reads are counted (fp32 3 and 5, training 4.5 and 6.5). "of copy" is
// the GB/s of those bytes as a share of a device-to-device copy's, timed the same way. PN runs
// past its warmup.
#include "bench/norm_bench_cuda.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/cuda_timer.h"
#include "kernels/buffer.h"
#include "kernels/device.h"
#include "layers/norms/norm.h"

namespace pn::bench {
namespace {

// Floats moved per element, forward and backward, in the fp32 and the training form.
struct Floats {
  double fwd, bwd, fwd_train, bwd_train;
};
Floats floats_of(const std::string& kind) {
  const bool twice = kind == "batch" || kind == "power_v" || kind == "sync_batch" ||
                     kind == "sync_power_v";  // statistics before the map, in each direction
  return twice ? Floats{3, 5, 4.5, 6.5} : Floats{2, 3, 3.5, 4.5};
}

}  // namespace

int norm_bench_cuda(const std::vector<std::string>& kinds, const std::vector<int>& dims,
                    const std::vector<int>& tokens, int groups, int reps) {
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::printf("pnbench_norms: no CUDA device visible (%s); nothing to measure\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  DeviceScope scope(Device::CUDA);
  const cudaStream_t s = static_cast<cudaStream_t>(scope.context().stream);
  Timer timer(s);
  std::printf("pnbench_norms | %s | float32 and bf16 outputs, training, no mask | median of %d "
              "reps, L2 flushed before each (%zu MB written)\n",
              prop.name, reps, timer.flush_bytes() >> 20);
  for (int d : dims)
    for (int rows : tokens) {
      const size_t n = size_t(rows) * d;
      std::vector<float> h(n);
      for (size_t i = 0; i < n; ++i) h[i] = float((i * 2654435761u) % 1000) / 500.f - 1.f;
      Buf<float> a(n), b(n), sum(n), y(n), dy(n), dx(n);
      Buf<uint16_t> y16(n), dx16(n);
      a.from_host(h);
      b.from_host(h);
      dy.from_host(h);
      Buf<uint8_t> mask(rows);
      mask.from_host(std::vector<uint8_t>(rows, 1));
      const double copy_gbs = timer.copy_gbs(5 * n * sizeof(float), reps);
      std::printf("\nd %d, %d tokens; device copy %.0f GB/s\n", d, rows, copy_gbs);
      std::printf("%-9s | %-30s | %-30s\n", "", "fp32: x -> y; x, dy -> dx",
                  "training: a + b -> sum, y16; dx +=, dx16");
      std::printf("%-9s | %7s %6s %7s %6s | %7s %6s %7s %6s\n", "norm", "fwd ms", "copy",
                  "bwd ms", "copy", "fwd ms", "copy", "bwd ms", "copy");
      // floats per element over ms, as a share of the copy's GB/s
      const auto of_copy = [&](double floats, double ms) {
        return 100.0 * floats * n * sizeof(float) / ms / 1e6 / copy_gbs;
      };
      for (const std::string& kind : kinds) {
        NormOptions o;
        o.kind = kind;
        o.groups = kind == "group" ? groups : 1;
        ParamStore<float> store;
        std::unique_ptr<Norm<float>> norm = make_norm<float>(o, d, store, "n", nullptr);
        store.allocate(1);
        const auto fwd = [&] { norm->forward(a.data(), mask.data(), rows, y.data(), true); };
        const double fwd_ms = timer.ms(fwd, reps);
        fwd();  // the backward's statistics
        const double bwd_ms = timer.ms(
            [&] { norm->backward(a.data(), dy.data(), mask.data(), rows, dx.data()); }, reps);
        const auto fwd_train = [&] {
          norm->forward_residual(a.data(), b.data(), nullptr, 0.f, sum.data(), mask.data(), rows,
                                 nullptr, true, y16.data());
        };
        const double fwd_train_ms = timer.ms(fwd_train, reps);
        fwd_train();
        const double bwd_train_ms = timer.ms(
            [&] {
              norm->backward(sum.data(), dy.data(), mask.data(), rows, dx.data(), true,
                             dx16.data());
            },
            reps);
        const Floats f = floats_of(kind);
        std::printf("%-9s | %7.3f %5.0f%% %7.3f %5.0f%% | %7.3f %5.0f%% %7.3f %5.0f%%\n",
                    kind.c_str(), fwd_ms, of_copy(f.fwd, fwd_ms), bwd_ms, of_copy(f.bwd, bwd_ms),
                    fwd_train_ms, of_copy(f.fwd_train, fwd_train_ms), bwd_train_ms,
                    of_copy(f.bwd_train, bwd_train_ms));
      }
    }
  synchronize();
  return 0;
}

}  // namespace pn::bench
