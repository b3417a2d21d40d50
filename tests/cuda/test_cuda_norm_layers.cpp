// The batch-type norms run on the GPU as a CUDA layer would run them (gpu_norm_pipeline.h)
// against the CPU layers themselves (make_norm): y, dx, dgamma, dbeta and the running state
// after every iteration, over masked, fully masked and PN warmup iterations. Skipped without a
// GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "layers/norms/norm.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_norm_pipeline.h"

namespace pn::test {
namespace {

std::vector<double> gpu_state(GpuNormState& st, const std::string& name) {
  if (name == "running_mean") return st.running_mean.download();
  if (name == "running_var") return st.running_var.download();
  if (name == "running_psi2") return st.psi2.download();
  if (name == "nu") return st.nu.download();
  if (name == "t") return st.t.download();
  ADD_FAILURE() << "unknown state " << name;
  return {};
}

void compare_layer(const std::string& kind) {
  const int rows = 333, d = 40;
  NormOptions o;
  o.kind = kind;
  o.warmup = kind == "power" ? 2 : 0;  // iterations 1-2 warm (batch s), then running s
  ParamStore<float> store;
  auto norm = make_norm<float>(o, d, store, "n", nullptr);
  store.allocate(1);
  const auto gb = randf(2 * size_t(d), 2, 0.3f);
  for (size_t i = 0; i < gb.size(); ++i) store.data[i] += gb[i];  // gamma != 1, beta != 0
  ASSERT_EQ(store.size(), 2 * size_t(d));
  const std::vector<float> gamma(store.data.begin(), store.data.begin() + d);
  const std::vector<float> beta(store.data.begin() + d, store.data.end());

  GpuNormState st(d);
  DBuf<float> dgamma(gamma), dbeta(beta), dgg(std::vector<float>(d, 0.f)),
      dgb(std::vector<float>(d, 0.f)), dy_out(size_t(rows) * d), ddx(size_t(rows) * d);
  for (int it = 0; it < 5; ++it) {
    SCOPED_TRACE(kind + " iteration " + std::to_string(it));
    const auto x = randf(size_t(rows) * d, 10 + it, 1.5f, 0.5f);
    const auto dy = randf(size_t(rows) * d, 20 + it);
    const auto mask = it == 2 ? std::vector<uint8_t>(rows, 0) : random_mask(rows, 30 + it);
    std::vector<float> y(x.size()), dx(x.size());
    norm->forward(x.data(), mask.data(), rows, y.data(), true);
    norm->backward(x.data(), dy.data(), mask.data(), rows, dx.data());

    DBuf<float> dxin(x), ddy(dy);
    DBuf<uint8_t> dmask(mask);
    gpu_step(kind, o, st, dxin.data(), ddy.data(), dmask.data(), rows, dgamma.data(), dbeta.data(),
             dy_out.data(), ddx.data(), dgg.data(), dgb.data());
    expect_close("y", dy_out.download(), y, 1e-5, 1e-6);
    expect_close("dx", ddx.download(), dx, 1e-5, 1e-6);
    const std::vector<float> cg(store.grad.begin(), store.grad.begin() + d);
    const std::vector<float> cb(store.grad.begin() + d, store.grad.end());
    expect_close("dgamma", dgg.download(), cg, 1e-5, 1e-5);
    expect_close("dbeta", dgb.download(), cb, 1e-5, 1e-5);
    for (const StateTensor& s : norm->state())
      expect_close(s.name.c_str(), gpu_state(st, s.name), std::vector<double>(s.data, s.data + s.n),
                   1e-9, 1e-12);
  }
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

}  // namespace
}  // namespace pn::test
