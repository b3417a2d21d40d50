#include "layers/norms/power_norm.h"

#include <cmath>
#include <stdexcept>

#include "kernels/kernels.h"
#include "kernels/norm_kernels.h"
#include "layers/norms/probe.h"
#include "layers/norms/psi_common.h"

namespace pn {

template <class T>
PowerNorm<T>::PowerNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name)
    : store(&s), d(dim), eps(o.eps), alpha_fwd(o.alpha_fwd), alpha_bkw(o.alpha_bkw),
      warmup(o.warmup), authors(o.pn_variant == "authors"),
      ema_state(authors || o.pn_warmup_psi == "ema"), running_psi2(dim, 1.0),
      nu(dim, 0.0), inv_s(dim, 1.0), sum_x2(dim, 0.0), inv_s_b(dim, 1.0),
      nu_coef(dim, 0.0) {
  if (o.pn_variant != "paper" && o.pn_variant != "authors")
    throw std::invalid_argument("unknown PN variant '" + o.pn_variant + "' of norm '" + name +
                                "': use paper or authors");
  if (o.pn_warmup_psi != "cumulative" && o.pn_warmup_psi != "ema")
    throw std::invalid_argument("unknown PN warmup rule '" + o.pn_warmup_psi + "' of norm '" +
                                name + "': use cumulative or ema");
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void PowerNorm<T>::absorb_statistics(const double* buf, bool warm) {
  count = buf[0];
  if (count <= 0) return;  // empty statistics set: state unchanged
  t += 1;
  if (this->probe) {
    // psi2_ratio: mean over features of psi^2 / psi_B^2 (running value before this update, the
    // one inference would use): far from 1, inference scales the layer's output wrongly.
    double ratio = 0;
    for (int c = 0; c < d; ++c) ratio += running_psi2[c] / (buf[1 + c] / count) / d;
    this->probe_values = {{"dist_psi2", probe_psi2_distance(buf, running_psi2)},
                          {"psi2_ratio", ratio}};
  }
  for (int c = 0; c < d; ++c) {
    sum_x2[c] = buf[1 + c];
    const double psi2_b = sum_x2[c] / count;
    if (warm) inv_s[c] = 1.0 / std::sqrt(psi2_b + eps);
    if (ema_state) {  // cumulative mean strictly inside warmup, then the EMA in every iteration
      if (t < double(warmup)) running_psi2[c] += (psi2_b - running_psi2[c]) / t;
      running_psi2[c] = alpha_fwd * running_psi2[c] + (1 - alpha_fwd) * psi2_b;
    } else {
      running_psi2[c] = warm ? running_psi2[c] + (psi2_b - running_psi2[c]) / t
                             : alpha_fwd * running_psi2[c] + (1 - alpha_fwd) * psi2_b;
    }
  }
}

template <class T>
void PowerNorm<T>::complete_pending() {
  if (pending < 0) return;
  comm->wait(pending);
  pending = -1;
  absorb_statistics(fwd_stats.data(), /*warm=*/false);
}

template <class T>
void PowerNorm<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training) {
  count = 0;
  if (training) {
    fwd_stats.assign(1 + size_t(d), 0.0);  // [count | sum x^2]
    k::column_stats<T>(x, mask, rows, d, nullptr, &fwd_stats[0], nullptr, &fwd_stats[1]);
    // This iteration is warm (s from the batch) only when t + 1 <= W.
    const bool warm = t + 1 <= double(warmup);
    if (!warm)  // psi^2 from before this iteration
      for (int c = 0; c < d; ++c) inv_s[c] = 1.0 / std::sqrt(running_psi2[c] + eps);
    if (comm && !warm) {
      pending = comm->iallreduce_sum(fwd_stats.data(), fwd_stats.size());
    } else {
      reduce(fwd_stats.data(), fwd_stats.size());
      absorb_statistics(fwd_stats.data(), warm);
    }
    if (pending >= 0 || count > 0) {
      k::column_affine<T>(x, rows, d, nullptr, inv_s.data(), store->p(gamma), store->p(beta),
                          y);
      return;
    }
  }
  psi_inference_forward<T>(x, rows, d, running_psi2, eps, *store, gamma, beta, y);
}

template <class T>
void PowerNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx) {
  complete_pending();  // sync_power after warmup: the forward's statistics arrive now
  static thread_local std::vector<double> buf;  // sum_S g xh, over all ranks when synchronized
  psi_backward_sums<T>(x, dy, mask, rows, d, inv_s, count > 0, *store, gamma, beta, comm, &buf);
  const T* gm = store->p(gamma);
  if (count <= 0) {
    k::fill<T>(dx, size_t(rows) * d, T(0));
    return;
  }
  if (authors) {
    // dx = inv_s_B (g - (1 - alpha_bkw) nu xh) with xh = x inv_s, written as the kernel's
    // scale_c (g - b_c x scale_c) with scale = inv_s_B, b = (1 - alpha_bkw) nu inv_s / inv_s_B.
    for (int c = 0; c < d; ++c) {
      inv_s_b[c] = 1.0 / std::sqrt(sum_x2[c] / count + eps);
      nu_coef[c] = (1 - alpha_bkw) * nu[c] * inv_s[c] / inv_s_b[c];
    }
    k::column_norm_backward<T>(x, dy, mask, rows, d, nullptr, inv_s_b.data(), gm, nullptr,
                               nu_coef.data(), dx);
    if (this->probe)  // the nu term of dx: inv_s_B (1 - alpha_bkw) nu xh
      this->probe_values.emplace_back(
          "g_psi2",
          probe_xh_part(x, mask, rows, d, nullptr, inv_s_b.data(), nu_coef.data(), count));
    // nu <- nu + mean_S (g - (1 - alpha_bkw) nu xh) xh = nu (1 - (1 - alpha_bkw) Gamma) + Lambda
    for (int c = 0; c < d; ++c) {
      const double Gamma = sum_x2[c] * inv_s[c] * inv_s[c] / count;
      const double Lambda = buf[c] / count;
      nu[c] = nu[c] * (1 - (1 - alpha_bkw) * Gamma) + Lambda;
    }
    return;
  }
  // dx with the nu of before this iteration, then the nu update.
  k::column_norm_backward<T>(x, dy, mask, rows, d, nullptr, inv_s.data(), gm, nullptr,
                             nu.data(), dx);
  if (this->probe)  // PN's counterpart of g_psi2: inv_s * nu * xh
    this->probe_values.emplace_back(
        "g_psi2", probe_xh_part(x, mask, rows, d, nullptr, inv_s.data(), nu.data(), count));
  for (int c = 0; c < d; ++c) {
    const double Gamma = sum_x2[c] * inv_s[c] * inv_s[c] / count;
    const double Lambda = buf[c] / count;
    nu[c] = nu[c] * (1 - (1 - alpha_bkw) * Gamma) + (1 - alpha_bkw) * Lambda;
  }
}

template <class T>
std::vector<StateTensor> PowerNorm<T>::state() {
  return {{"running_psi2", running_psi2.data(), running_psi2.size()},
          {"nu", nu.data(), nu.size()},
          {"t", &t, 1}};
}

template <class T>
void PowerNorm<T>::save_forward(std::vector<double>* saved) {
  complete_pending();  // the next group's forward needs this group's psi^2
  pack_forward(saved, count, {&inv_s, &sum_x2});
}

template <class T>
void PowerNorm<T>::load_forward(const std::vector<double>& saved) {
  unpack_forward(saved, &count, {&inv_s, &sum_x2});
}

template struct PowerNorm<float>;
template struct PowerNorm<double>;

}  // namespace pn
