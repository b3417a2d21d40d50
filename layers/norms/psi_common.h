// What PN-V and PN share.
//
// Inference (and training with an empty statistics set): y = gamma * x / sqrt(psi^2 + eps) + beta.
//
// The backward step (paper eqs. 6 and 12): with xh = x * inv_s, g = gamma*dy, accumulate this
// rank's dgamma += sum_S dy*xh and dbeta += sum_S dy, and leave in g_xh the sum over the
// statistics batch (all ranks when comm is set) of g*xh. PN, whose dx needs none of these sums,
// makes them in its dx pass (column_backward_dot) and calls psi_grads_from_sums. Every rank joins the all-reduce, even
// with no rows. count is the statistics count in device memory.
#pragma once
#include "comm/communicator.h"
#include "kernels/kernels.h"
#include "layers/norms/norm.h"
#include "layers/params.h"

namespace pn {

// scratch receives 1/sqrt(psi^2 + eps).
template <class T>
void psi_inference_forward(const T* x, int rows, int d, const Buf<double>& running_psi2,
                           double eps, const ParamStore<T>& store, int gamma, int beta, T* y,
                           uint16_t* y16, Buf<double>* scratch) {
  scratch->resize(d);
  k::inverse_sqrt_eps(running_psi2.data(), d, eps, scratch->data());
  k::column_affine<T>(x, rows, d, nullptr, scratch->data(), store.p(gamma), store.p(beta), y, y16,
                      nullptr);
}

// From sums = [sum dy | sum dy x] of this rank (2d): the parameter gradients, and g_xh (d).
template <class T>
void psi_grads_from_sums(const double* count, int d, const double* inv_s, ParamStore<T>& store,
                         int gamma, int beta, Communicator* comm, const Buf<double>& sums,
                         Buf<double>* g_xh) {
  g_xh->resize(d);
  k::psi_param_grads<T>(count, sums.data(), d, inv_s, store.p(gamma), store.g(gamma),
                        store.g(beta), g_xh->data());
  if (comm) allreduce_sum_here(*comm, g_xh->data(), size_t(d));
}

// sums: scratch of 2d ([sum dy | sum dy x]); g_xh: d.
template <class T>
void psi_backward_sums(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                       const double* count, const double* inv_s, ParamStore<T>& store, int gamma,
                       int beta, Communicator* comm, Buf<double>* sums, Buf<double>* g_xh) {
  sums->resize(2 * size_t(d));
  k::column_dot<T>(dy, x, mask, rows, d, nullptr, sums->data(), sums->data() + d);
  psi_grads_from_sums<T>(count, d, inv_s, store, gamma, beta, comm, *sums, g_xh);
}

}  // namespace pn
