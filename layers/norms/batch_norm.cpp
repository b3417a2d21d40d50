#include "layers/norms/batch_norm.h"

#include <cmath>

#include "kernels/kernels.h"
#include "layers/norms/probe.h"

namespace pn {

template <class T>
BatchNorm<T>::BatchNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
                        Communicator* c)
    : store(&s), d(dim), eps(o.eps), alpha(o.alpha), comm(c), running_mean(dim, 0.0),
      running_var(dim, 1.0), stats(1 + 2 * size_t(dim), 0.0), mean(dim, 0.0), rstd(dim, 1.0),
      sums(2 * size_t(dim), 0.0), a(dim, 0.0), b(dim, 0.0) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void BatchNorm<T>::forward_in(const NormInput<T>& in, const uint8_t* mask, int rows, T* y,
                              bool training, uint16_t* y16) {
  if (!training) {
    const T* x = in.made(size_t(rows) * size_t(d));
    scratch.resize(d);
    k::inverse_sqrt_eps(running_var.data(), d, eps, scratch.data());
    k::column_affine<T>(x, rows, d, running_mean.data(), scratch.data(), store->p(gamma),
                        store->p(beta), y, y16, nullptr);
    return;
  }
  // [count | sum (x - shift) | sum (x - shift)^2], shift = running mean (x made in that pass).
  k::column_stats_affine<T>(in.a, in.b, in.keep, in.p, in.sum, mask, rows, d, running_mean.data(),
                            stats.data(), stats.data() + 1, stats.data() + 1 + d, nullptr,
                            nullptr, nullptr, nullptr, nullptr);
  const T* x = in.x();
  if (comm) allreduce_sum_here(*comm, stats.data(), stats.size());
  // The probe compares the batch statistics with the running ones of before this update.
  std::vector<double> rm0, rv0;
  if (this->probe) rm0 = host_copy(running_mean.data(), d), rv0 = host_copy(running_var.data(), d);
  scratch.resize(d);
  // An empty set takes the inference formula (mean = rm, rstd from rv) and keeps the state.
  k::batch_absorb(stats.data(), d, eps, alpha, running_mean.data(), running_var.data(),
                  mean.data(), rstd.data(), scratch.data());
  if (this->probe && host_copy(stats.data(), 1)[0] > 0) {
    const std::vector<double> m = host_copy(mean.data(), d), v = host_copy(scratch.data(), d);
    this->probe_values = {{"dist_mean", probe_distance(m.data(), rm0.data(), d)},
                          {"dist_var", probe_distance(v.data(), rv0.data(), d)}};
  }
  k::column_affine<T>(x, rows, d, mean.data(), rstd.data(), store->p(gamma), store->p(beta), y,
                      y16, nullptr);
}

template <class T>
void BatchNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                            bool add_to_dx, uint16_t* dx16) {
  // [sum dy | sum dy (x - mu_B)], local parameter gradients taken before the reduction; every
  // rank joins the all-reduce, even with no rows.
  const double* count = stats.data();
  k::column_dot<T>(dy, x, mask, rows, d, mean.data(), sums.data(), sums.data() + d);
  k::batch_param_grads<T>(count, sums.data(), d, rstd.data(), store->g(gamma), store->g(beta));
  if (comm) allreduce_sum_here(*comm, sums.data(), sums.size());
  const T* gm = store->p(gamma);
  // a = mean_S g, b = mean_S g xh (0 for an empty set, whose rows are all masked: dx = 0).
  k::batch_backward_coeffs<T>(count, sums.data(), d, gm, rstd.data(), a.data(), b.data());
  k::column_norm_backward<T>(x, dy, mask, rows, d, mean.data(), rstd.data(), gm, a.data(),
                             b.data(), dx, add_to_dx, dx16);
  if (this->probe) {  // g_mu = rstd * mean g (the same for every row); g_sigma2 = rstd * b * xh
    const std::vector<double> r = host_copy(rstd.data(), d), av = host_copy(a.data(), d);
    double g_mu = 0;
    for (int c = 0; c < d; ++c) g_mu += (r[c] * av[c]) * (r[c] * av[c]);
    this->probe_values.emplace_back("g_mu", std::sqrt(g_mu));
    this->probe_values.emplace_back(
        "g_sigma2", probe_xh_part(x, mask, rows, d, mean.data(), rstd.data(), b.data(), count));
  }
}

template <class T>
std::vector<StateTensor> BatchNorm<T>::state() {
  return {state_of("running_mean", running_mean), state_of("running_var", running_var)};
}

template <class T>
void BatchNorm<T>::save_forward(Buf<double>* saved) {
  pack_forward(saved, {&stats, &mean, &rstd});
}

template <class T>
void BatchNorm<T>::load_forward(const Buf<double>& saved) {
  unpack_forward(saved, {&stats, &mean, &rstd});
}

template struct BatchNorm<float>;
template struct BatchNorm<double>;
PN_NORM_FACTORY(BatchNorm)

}  // namespace pn
