#include "layers/norms/group_norm.h"

#include <stdexcept>

#include "kernels/kernels.h"

namespace pn {

template <class T>
GroupNorm<T>::GroupNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name)
    : store(&s), d(dim), groups(o.groups), eps(T(o.eps)) {
  if (groups < 1 || d % groups != 0)
    throw std::invalid_argument("group norm '" + name + "': " + std::to_string(groups) +
                                " groups do not divide " + std::to_string(d) + " features");
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void GroupNorm<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
                           uint16_t* y16) {
  mean.resize(size_t(rows) * groups);
  rstd.resize(size_t(rows) * groups);
  k::rowgroup_norm_forward<T>(x, rows, d, groups, eps, store->p(gamma), store->p(beta), y, y16,
                              mean.data(), rstd.data());
}

template <class T>
void GroupNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                            bool add_to_dx, uint16_t* dx16) {
  k::rowgroup_norm_backward<T>(x, dy, mean.data(), rstd.data(), store->p(gamma), mask, rows, d,
                               groups, dx, store->g(gamma), store->g(beta), add_to_dx, dx16);
}

template struct GroupNorm<float>;
template struct GroupNorm<double>;
PN_NORM_FACTORY(GroupNorm)

}  // namespace pn
