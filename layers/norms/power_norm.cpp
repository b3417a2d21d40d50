#include "layers/norms/power_norm.h"

#include <stdexcept>

#include "kernels/kernels.h"
#include "layers/norms/probe.h"
#include "layers/norms/psi_common.h"

namespace pn {

template <class T>
PowerNorm<T>::PowerNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
                        Communicator* c)
    : store(&s), d(dim), eps(o.eps), alpha_fwd(o.alpha_fwd), alpha_bkw(o.alpha_bkw),
      warmup(o.warmup), authors(o.pn_variant == PnVariant::authors),
      ema_state(authors || o.pn_warmup_psi == PnWarmupPsi::ema), comm(c), running_psi2(dim, 1.0),
      nu(dim, 0.0),
      t(1, 0.0), warm(1, 0.0), stats(1 + size_t(dim), 0.0), inv_s(dim, 1.0), sum_x2(dim, 0.0),
      sums(2 * size_t(dim), 0.0),
      g_xh(dim, 0.0), inv_s_b(dim, 1.0), nu_coef(dim, 0.0) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void PowerNorm<T>::forward_in(const NormInput<T>& in, const uint8_t* mask, int rows, T* y,
                              bool training, uint16_t* y16) {
  if (!training)
    return psi_inference_forward<T>(in.made(size_t(rows) * size_t(d)), rows, d, running_psi2, eps,
                                    *store, gamma, beta, y, y16, &inv_s_b);
  // Past warmup s comes from the psi^2 of before this iteration, known before the statistics:
  // y is written in the pass that sums [count | sum x^2] of this rank (and makes x). During
  // warmup (warm = 1) s comes from the statistics, and y is written again once they are in.
  k::pn_forward_scale(t.data(), warmup, d, eps, running_psi2.data(), inv_s.data(), warm.data());
  k::column_stats_affine<T>(in.a, in.b, in.keep, in.p, in.sum, mask, rows, d, nullptr,
                            stats.data(), nullptr, stats.data() + 1, inv_s.data(),
                            store->p(gamma), store->p(beta), y, y16);
  if (comm) allreduce_sum_here(*comm, stats.data(), stats.size());
  if (this->probe) {
    // psi2_ratio: mean over features of psi^2 / psi_B^2 (the running value before this update,
    // the one inference would use): far from 1, inference scales the layer's output wrongly.
    const Psi2Probe pr = probe_psi2(stats.data(), running_psi2.data(), d);
    if (pr.valid) this->probe_values = {{"dist_psi2", pr.distance}, {"psi2_ratio", pr.ratio}};
  }
  // During warmup (and for an empty statistics set, the inference scale: past warmup the same s)
  // pn_absorb sets s.
  k::pn_absorb(stats.data(), t.data(), warmup, d, eps, alpha_fwd, ema_state, running_psi2.data(),
               inv_s.data(), sum_x2.data());
  k::column_affine<T>(in.x(), rows, d, nullptr, inv_s.data(), store->p(gamma), store->p(beta), y,
                      y16, warm.data());
}

template <class T>
void PowerNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                            bool add_to_dx, uint16_t* dx16) {
  const double* count = stats.data();
  const T* gm = store->p(gamma);
  sums.resize(2 * size_t(d));
  // dx with the nu of before this iteration (all rows masked when the count is 0: dx = 0), in the
  // pass that sums [sum dy | sum dy x]; then the parameter gradients and the nu update.
  if (authors) {
    // dx = inv_s_B (g - (1 - alpha_bkw) nu xh), then nu <- nu + mean_S xh' xh
    // = nu (1 - (1 - alpha_bkw) Gamma) + Lambda.
    k::pn_authors_coeffs(count, sum_x2.data(), nu.data(), inv_s.data(), d, eps, alpha_bkw,
                         inv_s_b.data(), nu_coef.data());
    k::column_backward_dot<T>(x, dy, mask, rows, d, inv_s_b.data(), gm, nu_coef.data(), dx,
                              add_to_dx, dx16, sums.data(), sums.data() + d);
    psi_grads_from_sums<T>(count, d, inv_s.data(), *store, gamma, beta, comm, sums, &g_xh);
    if (this->probe)  // the nu term of dx: inv_s_B (1 - alpha_bkw) nu xh
      this->probe_values.emplace_back(
          "g_psi2",
          probe_xh_part(x, mask, rows, d, nullptr, inv_s_b.data(), nu_coef.data(), count));
    k::pn_nu_update(count, sum_x2.data(), g_xh.data(), inv_s.data(), d, alpha_bkw, 1.0, nu.data());
    return;
  }
  k::column_backward_dot<T>(x, dy, mask, rows, d, inv_s.data(), gm, nu.data(), dx, add_to_dx,
                            dx16, sums.data(), sums.data() + d);
  psi_grads_from_sums<T>(count, d, inv_s.data(), *store, gamma, beta, comm, sums, &g_xh);
  if (this->probe)  // PN's counterpart of g_psi2: inv_s * nu * xh
    this->probe_values.emplace_back(
        "g_psi2", probe_xh_part(x, mask, rows, d, nullptr, inv_s.data(), nu.data(), count));
  k::pn_nu_update(count, sum_x2.data(), g_xh.data(), inv_s.data(), d, alpha_bkw, 1 - alpha_bkw,
                  nu.data());
}

template <class T>
std::vector<StateTensor> PowerNorm<T>::state() {
  return {state_of("running_psi2", running_psi2), state_of("nu", nu), state_of("t", t)};
}

template <class T>
void PowerNorm<T>::save_forward(Buf<double>* saved) {
  pack_forward(saved, {&stats, &inv_s, &sum_x2});
}

template <class T>
void PowerNorm<T>::load_forward(const Buf<double>& saved) {
  unpack_forward(saved, {&stats, &inv_s, &sum_x2});
}

template struct PowerNorm<float>;
template struct PowerNorm<double>;
PN_NORM_FACTORY(PowerNorm)

}  // namespace pn
