// The batch-type norm layers and DyT on the GPU against the same layers on the CPU (make_norm, the
// one code path, its device in the buffers): y, the residual sum, dx, dgamma, dbeta and the running
// state after every iteration, over plain and residual inputs (with dropout), masked and fully
// masked iterations, gradients added into a residual stream, PN's warmup and both PN forms, then
// an inference forward. Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/device.h"
#include "layers/norms/norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace pn::test {
namespace {

struct DeviceNorm {  // a layer and its parameters on one device
  ParamStore<float> store;
  std::unique_ptr<Norm<float>> norm;
};

void make_on(DeviceNorm* n, const NormOptions& o, int d, const std::vector<float>& params) {
  n->norm = make_norm<float>(o, d, n->store, "n", nullptr);
  n->store.allocate(1);
  n->store.data.from_host(params);
}

Buf<float> up(const std::vector<float>& v) {
  Buf<float> b(v.size());
  b.from_host(v);
  return b;
}
Buf<uint8_t> up(const std::vector<uint8_t>& v) {
  Buf<uint8_t> b(v.size());
  b.from_host(v);
  return b;
}

// The CPU layer runs in a CPU context inside the test's GPU one.
template <class F>
void on_cpu(F&& f) {
  DeviceScope cpu(Device::CPU);
  f();
}

void compare_layer(const std::string& kind, PnVariant variant = PnVariant::paper) {
  const int rows = 333, d = 40;
  const size_t n = size_t(rows) * d;
  NormOptions o;
  o.kind = kind;
  o.pn_variant = variant;
  o.warmup = kind == "power" ? 2 : 0;  // iterations 1-2 warm (batch s), then running s
  ParamStore<float> dry;  // the parameter count: gamma, beta (and DyT's a)
  make_norm<float>(o, d, dry, "n", nullptr);
  const auto params = randf(dry.size(), 2, 0.3f, 0.5f);  // gamma != 1, beta != 0
  DeviceNorm cpu;
  make_on(&cpu, o, d, params);
  DeviceScope scope(Device::CUDA);
  DeviceNorm gpu;
  make_on(&gpu, o, d, params);
  const float p = 0.25f;
  for (int it = 0; it < 6; ++it) {
    // Odd iterations take the residual add before a pre-norm (with dropout in 1 and 5) and add
    // their input gradient into the stream's.
    const bool residual = it % 2 == 1, drop = it == 1 || it == 5;
    SCOPED_TRACE(kind + " iteration " + std::to_string(it) + (residual ? " (residual)" : ""));
    const auto a = randf(n, 10 + it, 1.5f, 0.5f), b = randf(n, 40 + it, 0.7f);
    const auto dy = randf(n, 20 + it), stream_grad = randf(n, 50 + it);
    const auto mask = it == 2 ? std::vector<uint8_t>(rows, 0) : random_mask(rows, 30 + it);
    std::vector<uint8_t> keep(n);
    for (size_t i = 0; i < n; ++i) keep[i] = (i * 2654435761u >> 7) % 4 != 0;
    const uint8_t* ck = drop ? keep.data() : nullptr;

    // The iteration on the current device: forward (of the residual sum), then backward.
    const auto step = [&](Norm<float>& norm, const float* a, const float* b, const uint8_t* keep,
                          float* sum, const uint8_t* mask, float* y, const float* dy, float* dx) {
      if (residual)
        norm.forward_residual(a, b, keep, p, sum, mask, rows, y, true);
      else
        norm.forward(a, mask, rows, y, true);
      norm.backward(residual ? sum : a, dy, mask, rows, dx, residual);
    };
    std::vector<float> y(n), sum(n), dx = residual ? stream_grad : std::vector<float>(n);
    on_cpu([&] {
      step(*cpu.norm, a.data(), b.data(), ck, sum.data(), mask.data(), y.data(), dy.data(),
           dx.data());
    });
    Buf<float> ga = up(a), gb = up(b), gdy = up(dy), gy(n), gsum(n), gdx = up(stream_grad);
    Buf<uint8_t> gmask = up(mask), gkeep = up(keep);
    step(*gpu.norm, ga.data(), gb.data(), drop ? gkeep.data() : nullptr, gsum.data(),
         gmask.data(), gy.data(), gdy.data(), gdx.data());

    expect_close("y", gy.to_host(), y, 1e-5, 1e-6);
    if (residual) expect_equal("the residual sum", gsum.to_host(), sum);
    expect_close("dx", gdx.to_host(), dx, 1e-5, 1e-6);
    const std::vector<float> cpu_grad(cpu.store.grad.begin(), cpu.store.grad.end());
    expect_close("dgamma, dbeta (, da)", gpu.store.grad.to_host(), cpu_grad, 1e-5, 1e-5);
    const auto cs = cpu.norm->state(), gs = gpu.norm->state();
    ASSERT_EQ(cs.size(), gs.size());
    for (size_t k = 0; k < cs.size(); ++k)
      expect_close(cs[k].name.c_str(), read_state(gs[k]), read_state(cs[k]), 1e-9, 1e-12);
  }
  // Inference of a residual sum with the running state.
  const auto a = randf(n, 90, 1.5f, 0.5f), b = randf(n, 91);
  std::vector<float> y(n), sum(n);
  on_cpu([&] {
    cpu.norm->forward_residual(a.data(), b.data(), nullptr, 0.f, sum.data(), nullptr, rows,
                               y.data(), false);
  });
  Buf<float> ga = up(a), gb = up(b), gy(n), gsum(n);
  gpu.norm->forward_residual(ga.data(), gb.data(), nullptr, 0.f, gsum.data(), nullptr, rows,
                             gy.data(), false);
  expect_close("inference y", gy.to_host(), y, 1e-5, 1e-6);
  expect_equal("inference residual sum", gsum.to_host(), sum);
}

// DyT (no statistic): its dx, dgamma, dbeta and da on the GPU as on the CPU.
TEST(CudaNormLayers, DytMatchesCpuLayer) {
  PN_REQUIRE_GPU();
  compare_layer("dyt");
}
TEST(CudaNormLayers, BatchMatchesCpuLayer) {
  PN_REQUIRE_GPU();
  compare_layer("batch");
}
TEST(CudaNormLayers, PowerVMatchesCpuLayer) {
  PN_REQUIRE_GPU();
  compare_layer("power_v");
}
TEST(CudaNormLayers, PowerNormMatchesCpuLayerThroughWarmup) {
  PN_REQUIRE_GPU();
  compare_layer("power");
}
TEST(CudaNormLayers, PowerNormAuthorsMatchesCpuLayerThroughWarmup) {
  PN_REQUIRE_GPU();
  compare_layer("power", PnVariant::authors);
}

}  // namespace
}  // namespace pn::test
