// The batch-type norms run on the GPU as a CUDA layer would run them (big kernels of
// norm_kernels.cu, per-column state steps of norm_state.cu, every value on the device), against
// the CPU layers themselves (make_norm): y, dx, dgamma, dbeta and the running state after
// every iteration, over masked, fully masked and PN warmup iterations. Skipped without a GPU.
// These pipelines are the blueprint of the device path of layers/norms (not wired yet).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "layers/norms/norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace pn::test {
namespace {

constexpr cudaStream_t kS = nullptr;

struct GpuNormState {  // device copies of what the CPU layers keep as members
  int d;
  DBuf<double> stats, sums, g_xh, a, b, mean, rstd, inv_s, sum_x2;
  DBuf<double> running_mean, running_var, psi2, nu, t;
  explicit GpuNormState(int dim)
      : d(dim), stats(1 + 2 * size_t(dim)), sums(2 * size_t(dim)), g_xh(dim), a(dim), b(dim),
        mean(dim), rstd(dim), inv_s(std::vector<double>(dim, 1.0)), sum_x2(dim),
        running_mean(std::vector<double>(dim, 0.0)), running_var(std::vector<double>(dim, 1.0)),
        psi2(std::vector<double>(dim, 1.0)), nu(std::vector<double>(dim, 0.0)),
        t(std::vector<double>(1, 0.0)) {}
};

// One training forward and backward of `kind` on the GPU.
void gpu_step(const std::string& kind, const NormOptions& o, GpuNormState& st, const float* x,
              const float* dy, const uint8_t* mask, int rows, const float* gamma,
              const float* beta, float* y, float* dx, float* dgamma, float* dbeta) {
  const int d = st.d;
  double* stats = st.stats.data();
  double* sums = st.sums.data();
  if (kind == "batch") {
    cuda::column_stats(x, mask, rows, d, st.running_mean.data(), stats, stats + 1, stats + 1 + d,
                       kS);
    // (sync_batch: allreduce_sum_device(stats) here)
    cuda::batch_absorb(stats, d, o.eps, o.alpha, st.running_mean.data(), st.running_var.data(),
                       st.mean.data(), st.rstd.data(), kS);
    cuda::column_affine(x, rows, d, st.mean.data(), st.rstd.data(), gamma, beta, y, kS);
    cuda::column_dot(dy, x, mask, rows, d, st.mean.data(), sums, sums + d, kS);
    cuda::batch_param_grads(stats, sums, d, st.rstd.data(), dgamma, dbeta, kS);
    // (sync_batch: allreduce_sum_device(sums) here)
    cuda::batch_backward_coeffs(stats, sums, d, gamma, st.rstd.data(), st.a.data(), st.b.data(),
                                kS);
    cuda::column_norm_backward(x, dy, mask, rows, d, st.mean.data(), st.rstd.data(), gamma,
                               st.a.data(), st.b.data(), dx, kS);
    return;
  }
  cuda::column_stats(x, mask, rows, d, nullptr, stats, nullptr, stats + 1, kS);
  if (kind == "power_v") {
    cuda::power_v_absorb(stats, d, o.eps, o.alpha, st.psi2.data(), st.inv_s.data(), kS);
  } else {
    cuda::pn_forward_scale(st.t.data(), o.warmup, d, o.eps, st.psi2.data(), st.inv_s.data(), kS);
    cuda::pn_absorb(stats, st.t.data(), o.warmup, d, o.eps, o.alpha_fwd, st.psi2.data(),
                    st.inv_s.data(), st.sum_x2.data(), kS);
  }
  cuda::column_affine(x, rows, d, nullptr, st.inv_s.data(), gamma, beta, y, kS);
  cuda::column_dot(dy, x, mask, rows, d, nullptr, sums, sums + d, kS);
  cuda::psi_param_grads(stats, sums, d, st.inv_s.data(), gamma, dgamma, dbeta, st.g_xh.data(),
                        kS);
  if (kind == "power_v") {
    cuda::mean_over_count(stats, st.g_xh.data(), d, st.b.data(), kS);
    cuda::column_norm_backward(x, dy, mask, rows, d, nullptr, st.inv_s.data(), gamma, nullptr,
                               st.b.data(), dx, kS);
  } else {
    cuda::column_norm_backward(x, dy, mask, rows, d, nullptr, st.inv_s.data(), gamma, nullptr,
                               st.nu.data(), dx, kS);
    cuda::pn_nu_update(stats, st.sum_x2.data(), st.g_xh.data(), st.inv_s.data(), d, o.alpha_bkw,
                       st.nu.data(), kS);
  }
}

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
    gpu_step(kind, o, st, dxin.data(), ddy.data(), dmask.data(), rows, dgamma.data(),
             dbeta.data(), dy_out.data(), ddx.data(), dgg.data(), dgb.data());
    expect_close("y", dy_out.download(), y, 1e-5, 1e-6);
    expect_close("dx", ddx.download(), dx, 1e-5, 1e-6);
    const std::vector<float> cg(store.grad.begin(), store.grad.begin() + d);
    const std::vector<float> cb(store.grad.begin() + d, store.grad.end());
    expect_close("dgamma", dgg.download(), cg, 1e-5, 1e-5);
    expect_close("dbeta", dgb.download(), cb, 1e-5, 1e-5);
    for (const StateTensor& s : norm->state())
      expect_close(s.name.c_str(), gpu_state(st, s.name),
                   std::vector<double>(s.data, s.data + s.n), 1e-9, 1e-12);
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
