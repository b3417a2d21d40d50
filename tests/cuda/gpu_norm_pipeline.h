// The batch-type norms as a CUDA layer would run them: the big kernels of norm_kernels.cu and
// the per-column state steps of norm_state.cu, every value on the device, in the order of
// layers/norms/{batch_norm,power_v_norm,power_norm}.cpp. Shared by the layer tests and the
// benchmark; the blueprint of the device path of layers/norms (not wired yet).
#pragma once
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "layers/norms/norm.h"

namespace pn::test {

struct GpuNormState {  // device copies of what the CPU layers keep as members
  int d;
  cuda::DeviceBuffer<double> stats, sums, g_xh, a, b, mean, rstd, inv_s, sum_x2;
  cuda::DeviceBuffer<double> running_mean, running_var, psi2, nu, t;
  explicit GpuNormState(int dim)
      : d(dim),
        stats(1 + 2 * size_t(dim)),
        sums(2 * size_t(dim)),
        g_xh(dim),
        a(dim),
        b(dim),
        mean(dim),
        rstd(dim),
        inv_s(std::vector<double>(dim, 1.0)),
        sum_x2(dim),
        running_mean(std::vector<double>(dim, 0.0)),
        running_var(std::vector<double>(dim, 1.0)),
        psi2(std::vector<double>(dim, 1.0)),
        nu(std::vector<double>(dim, 0.0)),
        t(std::vector<double>(1, 0.0)) {}
};

// One training forward and backward of `kind` (batch, power_v, power) on `stream`.
inline void gpu_step(const std::string& kind, const NormOptions& o, GpuNormState& st,
                     const float* x, const float* dy, const uint8_t* mask, int rows,
                     const float* gamma, const float* beta, float* y, float* dx, float* dgamma,
                     float* dbeta, cudaStream_t stream = nullptr) {
  const int d = st.d;
  double* stats = st.stats.data();
  double* sums = st.sums.data();
  if (kind == "batch") {
    cuda::column_stats(x, mask, rows, d, st.running_mean.data(), stats, stats + 1, stats + 1 + d,
                       stream);
    // (sync_batch: allreduce_sum_device(stats) here)
    cuda::batch_absorb(stats, d, o.eps, o.alpha, st.running_mean.data(), st.running_var.data(),
                       st.mean.data(), st.rstd.data(), nullptr, stream);
    cuda::column_affine(x, rows, d, st.mean.data(), st.rstd.data(), gamma, beta, y, nullptr,
                        stream);
    cuda::column_dot(dy, x, mask, rows, d, st.mean.data(), sums, sums + d, stream);
    cuda::batch_param_grads(stats, sums, d, st.rstd.data(), dgamma, dbeta, stream);
    // (sync_batch: allreduce_sum_device(sums) here)
    cuda::batch_backward_coeffs(stats, sums, d, gamma, st.rstd.data(), st.a.data(), st.b.data(),
                                stream);
    cuda::column_norm_backward(x, dy, mask, rows, d, st.mean.data(), st.rstd.data(), gamma,
                               st.a.data(), st.b.data(), dx, false, stream);
    return;
  }
  cuda::column_stats(x, mask, rows, d, nullptr, stats, nullptr, stats + 1, stream);
  if (kind == "power_v") {
    cuda::power_v_absorb(stats, d, o.eps, o.alpha, st.psi2.data(), st.inv_s.data(), stream);
  } else {
    cuda::pn_forward_scale(st.t.data(), o.warmup, d, o.eps, st.psi2.data(), st.inv_s.data(),
                           stream);
    cuda::pn_absorb(stats, st.t.data(), o.warmup, d, o.eps, o.alpha_fwd, false, st.psi2.data(),
                    st.inv_s.data(), st.sum_x2.data(), stream);
  }
  cuda::column_affine(x, rows, d, nullptr, st.inv_s.data(), gamma, beta, y, nullptr, stream);
  cuda::column_dot(dy, x, mask, rows, d, nullptr, sums, sums + d, stream);
  cuda::psi_param_grads(stats, sums, d, st.inv_s.data(), gamma, dgamma, dbeta, st.g_xh.data(),
                        stream);
  if (kind == "power_v") {
    cuda::mean_over_count(stats, st.g_xh.data(), d, st.b.data(), stream);
    cuda::column_norm_backward(x, dy, mask, rows, d, nullptr, st.inv_s.data(), gamma, nullptr,
                               st.b.data(), dx, false, stream);
  } else {
    cuda::column_norm_backward(x, dy, mask, rows, d, nullptr, st.inv_s.data(), gamma, nullptr,
                               st.nu.data(), dx, false, stream);
    cuda::pn_nu_update(stats, st.sum_x2.data(), st.g_xh.data(), st.inv_s.data(), d, o.alpha_bkw,
                       1 - o.alpha_bkw, st.nu.data(), stream);
  }
}

}  // namespace pn::test
