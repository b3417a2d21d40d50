#include "layers/norms/rms_norm.h"

#include "kernels/kernels.h"

namespace pn {

template <class T>
RmsNorm<T>::RmsNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name)
    : store(&s), d(dim), eps(T(o.eps)) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
}

template <class T>
void RmsNorm<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
                         uint16_t* y16) {
  rinv.resize(rows);
  k::rowgroup_rms_forward<T>(x, rows, d, 1, eps, store->p(gamma), y, y16, rinv.data());
}

template <class T>
void RmsNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                          bool add_to_dx, uint16_t* dx16) {
  k::rowgroup_rms_backward<T>(x, dy, rinv.data(), store->p(gamma), mask, rows, d, 1, dx,
                              store->g(gamma), add_to_dx, dx16);
}

template struct RmsNorm<float>;
template struct RmsNorm<double>;
PN_NORM_FACTORY(RmsNorm)

}  // namespace pn
