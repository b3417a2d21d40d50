#include "layers/norms/layer_norm.h"

#include "kernels/kernels.h"

namespace pn {

template <class T>
LayerNorm<T>::LayerNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name)
    : store(&s), d(dim), eps(T(o.eps)) {
  gamma = s.add(name + ".weight", {d}, Init::Ones);
  beta = s.add(name + ".bias", {d}, Init::Zeros);
}

template <class T>
void LayerNorm<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
                           uint16_t* y16) {
  mean.resize(rows);
  rstd.resize(rows);
  k::layernorm_forward<T>(x, rows, d, store->p(gamma), store->p(beta), eps, y, y16, mean.data(),
                          rstd.data());
}

// The residual add and the norm in one kernel: the sum is read once, where it is made.
template <class T>
void LayerNorm<T>::forward_residual(const T* a, const T* b, const uint8_t* keep, float p, T* sum,
                                    const uint8_t* mask, int rows, T* y, bool training,
                                    uint16_t* y16) {
  mean.resize(rows);
  rstd.resize(rows);
  k::residual_layernorm_forward<T>(a, b, keep, p, rows, d, store->p(gamma), store->p(beta), eps,
                                   sum, y, y16, mean.data(), rstd.data());
}

template <class T>
void LayerNorm<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                            bool add_to_dx, uint16_t* dx16) {
  k::layernorm_backward<T>(x, dy, mean.data(), rstd.data(), store->p(gamma), mask, rows, d, dx,
                           store->g(gamma), store->g(beta), add_to_dx, dx16);
}

template struct LayerNorm<float>;
template struct LayerNorm<double>;
PN_NORM_FACTORY(LayerNorm)

}  // namespace pn
