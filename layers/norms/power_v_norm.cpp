#include "layers/norms/power_v_norm.h"

#include "kernels/kernels.h"
#include "layers/norms/probe.h"
#include "layers/norms/psi_common.h"

namespace pn {

template <class T>
PowerVNorm<T>::PowerVNorm(const NormOptions& o, int dim, ParamStore<T>& s,
                          const std::string& name, Communicator* c)
    : store(&s), d(dim), eps(o.eps), alpha(o.alpha), comm(c), running_psi2(dim, 1.0),
      stats(1 + size_t(dim), 0.0), inv_s(dim, 1.0), b(dim, 0.0) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void PowerVNorm<T>::forward_in(const NormInput<T>& in, const uint8_t* mask, int rows, T* y,
                               bool training, uint16_t* y16) {
  if (!training)
    return psi_inference_forward<T>(in.made(size_t(rows) * size_t(d)), rows, d, running_psi2, eps,
                                    *store, gamma, beta, y, y16, &scratch);
  // [count | sum x^2] (x made in that pass); an empty set takes the inference scale and leaves
  // psi^2 alone.
  k::column_stats_affine<T>(in.a, in.b, in.keep, in.p, in.sum, mask, rows, d, nullptr,
                            stats.data(), nullptr, stats.data() + 1, nullptr, nullptr, nullptr,
                            nullptr, nullptr);
  const T* x = in.x();
  if (comm) allreduce_sum_here(*comm, stats.data(), stats.size());
  if (this->probe) {
    const Psi2Probe pr = probe_psi2(stats.data(), running_psi2.data(), d);
    if (pr.valid) this->probe_values = {{"dist_psi2", pr.distance}};
  }
  k::power_v_absorb(stats.data(), d, eps, alpha, running_psi2.data(), inv_s.data());
  k::column_affine<T>(x, rows, d, nullptr, inv_s.data(), store->p(gamma), store->p(beta), y, y16,
                      nullptr);
}

template <class T>
void PowerVNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                             bool add_to_dx, uint16_t* dx16) {
  const double* count = stats.data();
  psi_backward_sums<T>(x, dy, mask, rows, d, count, inv_s.data(), *store, gamma, beta, comm,
                       &sums, &g_xh);
  k::mean_over_count(count, g_xh.data(), d, b.data());  // mean_S g xh (0 for an empty set)
  k::column_norm_backward<T>(x, dy, mask, rows, d, nullptr, inv_s.data(), store->p(gamma),
                             nullptr, b.data(), dx, add_to_dx, dx16);
  if (this->probe)  // g_psi2 = inv_s * mean(g xh) * xh
    this->probe_values.emplace_back(
        "g_psi2", probe_xh_part(x, mask, rows, d, nullptr, inv_s.data(), b.data(), count));
}

template <class T>
std::vector<StateTensor> PowerVNorm<T>::state() {
  return {state_of("running_psi2", running_psi2)};
}

template <class T>
void PowerVNorm<T>::save_forward(Buf<double>* saved) {
  pack_forward(saved, {&stats, &inv_s});
}

template <class T>
void PowerVNorm<T>::load_forward(const Buf<double>& saved) {
  unpack_forward(saved, {&stats, &inv_s});
}

template struct PowerVNorm<float>;
template struct PowerVNorm<double>;
PN_NORM_FACTORY(PowerVNorm)

}  // namespace pn
