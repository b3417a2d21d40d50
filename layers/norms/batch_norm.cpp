#include "layers/norms/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/norm_kernels.h"
#include "layers/norms/probe.h"

namespace pn {

template <class T>
BatchNorm<T>::BatchNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name)
    : store(&s), d(dim), eps(o.eps), alpha(o.alpha), running_mean(dim, 0.0),
      running_var(dim, 1.0), mean(dim, 0.0), rstd(dim, 1.0) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void BatchNorm<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training) {
  count = 0;
  if (training) {
    // [count | sum (x - shift) | sum (x - shift)^2], shift = running mean.
    // Per-thread scratch reused across calls (no heap allocation once warm).
    static thread_local std::vector<double> buf, var_b;
    buf.assign(1 + 2 * size_t(d), 0.0);
    k::column_stats<T>(x, mask, rows, d, running_mean.data(), &buf[0], &buf[1], &buf[1 + d]);
    reduce(buf.data(), buf.size());
    count = buf[0];
    if (count > 0) {
      var_b.resize(d);
      if (this->probe) this->probe_values = {{"dist_mean", 0.0}, {"dist_var", 0.0}};
      for (int c = 0; c < d; ++c) {
        const double m1 = buf[1 + c] / count;
        const double var = std::max(0.0, buf[1 + d + c] / count - m1 * m1);
        mean[c] = running_mean[c] + m1;
        rstd[c] = 1.0 / std::sqrt(var + eps);
        var_b[c] = var;
      }
      if (this->probe) {
        this->probe_values[0].second = probe_distance(mean.data(), running_mean.data(), d);
        this->probe_values[1].second = probe_distance(var_b.data(), running_var.data(), d);
      }
      for (int c = 0; c < d; ++c) {
        running_mean[c] = alpha * running_mean[c] + (1 - alpha) * mean[c];
        running_var[c] = alpha * running_var[c] + (1 - alpha) * var_b[c];
      }
      k::column_affine<T>(x, rows, d, mean.data(), rstd.data(), store->p(gamma),
                          store->p(beta), y);
      return;
    }
  }
  static thread_local std::vector<double> inv;
  inv.resize(d);
  for (int c = 0; c < d; ++c) inv[c] = 1.0 / std::sqrt(running_var[c] + eps);
  k::column_affine<T>(x, rows, d, running_mean.data(), inv.data(), store->p(gamma),
                      store->p(beta), y);
}

template <class T>
void BatchNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx) {
  // [sum dy | sum dy (x - mu_B)], local parameter gradients taken before the reduction.
  // Per-thread scratch reused across calls (no heap allocation once warm).
  static thread_local std::vector<double> buf, a, b;
  buf.assign(2 * size_t(d), 0.0);
  if (count > 0) {
    k::column_dot<T>(dy, x, mask, rows, d, mean.data(), &buf[0], &buf[d]);
    T* dg = store->g(gamma);
    T* db = store->g(beta);
    for (int c = 0; c < d; ++c) {
      dg[c] += T(buf[d + c] * rstd[c]);
      db[c] += T(buf[c]);
    }
  }
  reduce(buf.data(), buf.size());  // every rank joins, even with no rows
  if (count <= 0) {
    k::fill<T>(dx, size_t(rows) * d, T(0));
    return;
  }
  const T* gm = store->p(gamma);
  a.resize(d);
  b.resize(d);
  for (int c = 0; c < d; ++c) {
    a[c] = double(gm[c]) * buf[c] / count;                // mean_S g
    b[c] = double(gm[c]) * buf[d + c] * rstd[c] / count;  // mean_S g xh
  }
  k::column_norm_backward<T>(x, dy, mask, rows, d, mean.data(), rstd.data(), gm, a.data(),
                             b.data(), dx);
  if (this->probe) {  // g_mu = rstd * mean g (the same for every row); g_sigma2 = rstd * b * xh
    double g_mu = 0;
    for (int c = 0; c < d; ++c) g_mu += (rstd[c] * a[c]) * (rstd[c] * a[c]);
    this->probe_values.emplace_back("g_mu", std::sqrt(g_mu));
    this->probe_values.emplace_back(
        "g_sigma2", probe_xh_part(x, mask, rows, d, mean.data(), rstd.data(), b.data(), count));
  }
}

template <class T>
std::vector<StateTensor> BatchNorm<T>::state() {
  return {{"running_mean", running_mean.data(), running_mean.size()},
          {"running_var", running_var.data(), running_var.size()}};
}

template <class T>
void BatchNorm<T>::save_forward(std::vector<double>* saved) {
  pack_forward(saved, count, {&mean, &rstd});
}

template <class T>
void BatchNorm<T>::load_forward(const std::vector<double>& saved) {
  unpack_forward(saved, &count, {&mean, &rstd});
}

template struct BatchNorm<float>;
template struct BatchNorm<double>;

}  // namespace pn
