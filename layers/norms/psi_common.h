// What PN-V and PN share.
//
// Inference (and training with an empty statistics set): y = gamma * x / sqrt(psi^2 + eps) + beta.
//
// The backward step (paper eqs. 6 and 12): with xh = x * inv_s, g = gamma*dy,
// accumulate this rank's dgamma += sum_S dy*xh and dbeta += sum_S dy, and return in g_xh the
// sum over the statistics batch (all ranks when comm is set) of g*xh. Every rank joins the
// all-reduce, even with no rows.
#pragma once
#include <cmath>
#include <vector>

#include "comm/communicator.h"
#include "kernels/norm_kernels.h"
#include "layers/params.h"

namespace pn {

template <class T>
void psi_inference_forward(const T* x, int rows, int d, const std::vector<double>& running_psi2,
                           double eps, const ParamStore<T>& store, int gamma, int beta, T* y) {
  static thread_local std::vector<double> inv;  // per-thread scratch, no per-call allocation
  inv.resize(d);
  for (int c = 0; c < d; ++c) inv[c] = 1.0 / std::sqrt(running_psi2[c] + eps);
  k::column_affine<T>(x, rows, d, nullptr, inv.data(), store.p(gamma), store.p(beta), y);
}

template <class T>
void psi_backward_sums(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                       const std::vector<double>& inv_s, bool has_rows, ParamStore<T>& store,
                       int gamma, int beta, Communicator* comm, std::vector<double>* g_xh) {
  static thread_local std::vector<double> sum_dy;  // per-thread scratch, no per-call allocation
  g_xh->assign(d, 0.0);
  sum_dy.assign(d, 0.0);
  if (has_rows) {
    k::column_dot<T>(dy, x, mask, rows, d, nullptr, sum_dy.data(), g_xh->data());
    const T* gm = store.p(gamma);
    T* dg = store.g(gamma);
    T* db = store.g(beta);
    for (int c = 0; c < d; ++c) {
      const double dy_xh = (*g_xh)[c] * inv_s[c];
      dg[c] += T(dy_xh);
      db[c] += T(sum_dy[c]);
      (*g_xh)[c] = double(gm[c]) * dy_xh;
    }
  }
  if (comm) comm->allreduce_sum(g_xh->data(), size_t(d));
}

}  // namespace pn
