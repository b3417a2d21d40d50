// pnbench_cuda_norms: forward and backward time of every norm layer on the GPU (make_norm's
// layers in a CUDA context: the kernels training runs) beside a device copy (the target: each
// direction at least 80% of the copy's bandwidth). Not a test: it prints a table and exits 0, or
// says that no GPU is visible (exit 1 under PN_CUDA_REQUIRED=1).
//
//   pnbench_cuda_norms [rows d [kinds [reps]]]   (default 16384 1024 all 20)
//
// kinds: a comma list of the names below; reps: timed calls per figure after as many warm-up
// calls, at most 3 (reps 1: every kernel launched a few times only, for a profiler).
//
// Two forms per norm, training, every row a token; each direction timed on its own:
//   fp32      forward(x) -> y; backward(x, dy) -> dx. Bytes counted per element: x read, y
//             written (2 floats); x, dy read, dx written (3 floats).
//   training  as a pre-norm Transformer in bf16 runs every norm: forward_residual(a, b) ->
//             sum = a + b and y as bf16 only (y16, for the next GEMM): a, b read, sum written,
//             y16 written (3.5 floats); backward(sum, dy) added into the residual stream's
//             gradient dx, with its bf16 copy dx16: sum, dy, dx read, dx and dx16 written (4.5).
// "of copy" = the counted bytes' GB/s / the copy's GB/s. "bound" is the most a norm's design can
// reach in that count when no pass finds its input in L2: batch and power_v need their column
// statistics before their first output in each direction, so they read their input twice
// (fp32: 3 floats moved of 2 counted forward, 5 of 3 backward); layer, rms, group and power
// (past warmup its scale is known before the pass) read it once. The copy reference moves 5
// floats per element with cudaMemcpyAsync (read + write). PN runs past its warmup. The row
// norms run twice: their backward staged (the default) and held (cuda::RowBackward), the
// forward the same; the batch-type norms too: their column passes' blocks in strips (the
// default) and in bands (cuda::ColumnOrder).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device.h"
#include "layers/norms/norm.h"

namespace {

template <class F>
double time_ms(F f, int iters, cudaStream_t s) {
  for (int i = 0; i < std::min(iters, 3); ++i) f();  // warm up (scratch allocation, clocks)
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

// Floats moved per element by a norm's passes over DRAM, forward and backward, in the fp32 and
// the training form (see the header); counted bytes over these is the bound.
struct Passes {
  double fwd, bwd, fwd_train, bwd_train;
};
// twice: a statistics pass (x; a, b -> sum; dy, x) before the map (x -> y; x, dy -> dx).
Passes passes_of(bool twice) {
  return twice ? Passes{1 + 2, 2 + 3, 3 + 1.5, 2 + 4.5} : Passes{2, 3, 3.5, 4.5};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pn;
  const int rows = argc > 2 ? std::atoi(argv[1]) : 16384;
  const int d = argc > 2 ? std::atoi(argv[2]) : 1024;
  const std::string kinds = argc > 3 ? "," + std::string(argv[3]) + "," : "";
  const int iters = argc > 4 ? std::max(1, std::atoi(argv[4])) : 20;
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
  Buf<float> a(n), b(n), sum(n), y(n), dy(n), dx(n), copy_src(5 * n / 2 + 1),
      copy_dst(5 * n / 2 + 1);
  Buf<uint16_t> y16(n), dx16(n);
  a.from_host(h);
  b.from_host(h);
  dy.from_host(h);
  Buf<uint8_t> mask(rows);
  mask.from_host(std::vector<uint8_t>(rows, 1));

  const double copy_ms = time_ms(
      [&] {
        CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), copy_src.data(), 5 * n * sizeof(float) / 2,
                                   cudaMemcpyDeviceToDevice, s));
      },
      iters, s);  // reads half and writes half: 5 floats per element moved in all
  const double copy_gbs = 5.0 * n * sizeof(float) / copy_ms / 1e6;
  std::printf("%s, %d x %d floats; device copy of 5 floats an element: %.3f ms (%.0f GB/s)\n",
              prop.name, rows, d, copy_ms, copy_gbs);
  std::printf("%-13s | %-37s | %-37s\n", "", "fp32: x -> y; x, dy -> dx",
              "training: a + b -> sum, y16; dx +=, dx16");
  std::printf("%-13s | %7s %5s %7s %5s %9s | %7s %5s %7s %5s %9s\n", "norm", "fwd ms", "copy",
              "bwd ms", "copy", "bound", "fwd ms", "copy", "bwd ms", "copy", "bound");
  // floats counted per element x elements / ms, as a share of the copy's GB/s
  const auto of_copy = [&](double floats, double ms) {
    return 100.0 * floats * n * sizeof(float) / ms / 1e6 / copy_gbs;
  };

  struct Kind {
    const char* name;
    const char* kind;
    int groups;
    bool twice;  // its statistics read the input before the map reads it again
    cuda::RowBackward backward = cuda::RowBackward::staged;  // the row norms' backward kernel
    cuda::ColumnOrder order = cuda::ColumnOrder::strips;     // the column passes' block order
  };
  const cuda::RowBackward staged = cuda::RowBackward::staged, held = cuda::RowBackward::held,
                          backward_in_use = cuda::row_backward();
  const cuda::ColumnOrder bands = cuda::ColumnOrder::bands, order_in_use = cuda::column_order();
  for (const Kind& k :
       {Kind{"layer", "layer", 1, false}, Kind{"layer_held", "layer", 1, false, held},
        Kind{"rms", "rms", 1, false}, Kind{"rms_held", "rms", 1, false, held},
        Kind{"group8", "group", 8, false}, Kind{"group8_held", "group", 8, false, held},
        Kind{"batch", "batch", 1, true}, Kind{"batch_bands", "batch", 1, true, staged, bands},
        Kind{"power_v", "power_v", 1, true},
        Kind{"power_v_bands", "power_v", 1, true, staged, bands},
        Kind{"power", "power", 1, false}, Kind{"power_bands", "power", 1, false, staged, bands}}) {
    if (!kinds.empty() && kinds != ",all," &&
        kinds.find("," + std::string(k.name) + ",") == std::string::npos)
      continue;
    cuda::set_row_backward(k.backward);
    cuda::set_column_order(k.order);
    NormOptions o;
    o.kind = k.kind;
    o.groups = k.groups;
    ParamStore<float> store;
    std::unique_ptr<Norm<float>> norm = make_norm<float>(o, d, store, "n", nullptr);
    store.allocate(1);
    const auto fwd = [&] { norm->forward(a.data(), mask.data(), rows, y.data(), true); };
    const double fwd_ms = time_ms(fwd, iters, s);
    fwd();  // the backward's statistics
    const double bwd_ms = time_ms(
        [&] { norm->backward(a.data(), dy.data(), mask.data(), rows, dx.data()); }, iters, s);
    const auto fwd_train = [&] {
      norm->forward_residual(a.data(), b.data(), nullptr, 0.f, sum.data(), mask.data(), rows,
                             nullptr, true, y16.data());
    };
    const double fwd_train_ms = time_ms(fwd_train, iters, s);
    fwd_train();
    const double bwd_train_ms = time_ms(
        [&] {
          norm->backward(sum.data(), dy.data(), mask.data(), rows, dx.data(), true, dx16.data());
        },
        iters, s);
    const Passes p = passes_of(k.twice);
    std::printf("%-13s | %7.3f %4.0f%% %7.3f %4.0f%% %4.0f/%3.0f%% | %7.3f %4.0f%% %7.3f %4.0f%% "
                "%4.0f/%3.0f%%\n",
                k.name, fwd_ms, of_copy(2, fwd_ms), bwd_ms, of_copy(3, bwd_ms), 200 / p.fwd,
                300 / p.bwd, fwd_train_ms, of_copy(3.5, fwd_train_ms), bwd_train_ms,
                of_copy(4.5, bwd_train_ms), 350 / p.fwd_train, 450 / p.bwd_train);
  }
  cuda::set_row_backward(backward_in_use);
  cuda::set_column_order(order_in_use);
  synchronize();
  return 0;
}
