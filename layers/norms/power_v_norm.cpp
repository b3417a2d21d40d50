#include "layers/norms/power_v_norm.h"

#include <cmath>

#include "kernels/kernels.h"
#include "kernels/norm_kernels.h"
#include "layers/norms/probe.h"
#include "layers/norms/psi_common.h"

namespace pn {

template <class T>
PowerVNorm<T>::PowerVNorm(const NormOptions& o, int dim, ParamStore<T>& s,
                          const std::string& name)
    : store(&s), d(dim), eps(o.eps), alpha(o.alpha), running_psi2(dim, 1.0), inv_s(dim, 1.0) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void PowerVNorm<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training) {
  count = 0;
  if (training) {
    // Per-thread scratch reused across calls (no heap allocation once warm).
    static thread_local std::vector<double> buf;  // [count | sum x^2]
    buf.assign(1 + size_t(d), 0.0);
    k::column_stats<T>(x, mask, rows, d, nullptr, &buf[0], nullptr, &buf[1]);
    reduce(buf.data(), buf.size());
    count = buf[0];
    if (count > 0) {
      if (this->probe)
        this->probe_values = {{"dist_psi2", probe_psi2_distance(buf.data(), running_psi2)}};
      for (int c = 0; c < d; ++c) {
        const double psi2_b = buf[1 + c] / count;
        inv_s[c] = 1.0 / std::sqrt(psi2_b + eps);
        running_psi2[c] = alpha * running_psi2[c] + (1 - alpha) * psi2_b;
      }
      k::column_affine<T>(x, rows, d, nullptr, inv_s.data(), store->p(gamma), store->p(beta),
                          y);
      return;
    }
  }
  psi_inference_forward<T>(x, rows, d, running_psi2, eps, *store, gamma, beta, y);
}

template <class T>
void PowerVNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx) {
  static thread_local std::vector<double> buf;  // sum_S g xh, over all ranks when synchronized
  psi_backward_sums<T>(x, dy, mask, rows, d, inv_s, count > 0, *store, gamma, beta, comm, &buf);
  const T* gm = store->p(gamma);
  if (count <= 0) {
    k::fill<T>(dx, size_t(rows) * d, T(0));
    return;
  }
  for (int c = 0; c < d; ++c) buf[c] /= count;  // mean_S g xh
  k::column_norm_backward<T>(x, dy, mask, rows, d, nullptr, inv_s.data(), gm, nullptr,
                             buf.data(), dx);
  if (this->probe)  // g_psi2 = inv_s * mean(g xh) * xh
    this->probe_values.emplace_back(
        "g_psi2", probe_xh_part(x, mask, rows, d, nullptr, inv_s.data(), buf.data(), count));
}

template <class T>
std::vector<StateTensor> PowerVNorm<T>::state() {
  return {{"running_psi2", running_psi2.data(), running_psi2.size()}};
}

template <class T>
void PowerVNorm<T>::save_forward(std::vector<double>* saved) {
  pack_forward(saved, count, {&inv_s});
}

template <class T>
void PowerVNorm<T>::load_forward(const std::vector<double>& saved) {
  unpack_forward(saved, &count, {&inv_s});
}

template struct PowerVNorm<float>;
template struct PowerVNorm<double>;

}  // namespace pn
