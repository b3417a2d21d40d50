#include "layers/linear.h"


#include "kernels/kernels.h"

namespace pn {

template <class T>
Linear<T>::Linear(ParamStore<T>& s, const std::string& name, int in_features, int out_features,
                  bool bias)
    : store(&s), in(in_features), out(out_features) {
  w = s.add(name + ".weight", {out, in}, Init::XavierUniform);
  if (bias) b = s.add(name + ".bias", {out}, Init::Zeros);
}

template <class T>
void Linear<T>::forward(const T* x, int rows, T* y, bool relu, const uint16_t* x16,
                        uint16_t* y16) const {
  k::linear_forward<T>(x, x16, rows, in, out, store->p(w), b >= 0 ? store->p(b) : nullptr, relu,
                       y, y16);
}

template <class T>
void Linear<T>::backward(const T* x, const T* dy, int rows, T* dx, const uint16_t* x16,
                         const uint16_t* dy16, uint16_t* dx16) const {
  k::linear_backward<T>(x, x16, dy, dy16, rows, in, out, store->p(w), dx, dx16, store->g(w),
                        b >= 0 ? store->g(b) : nullptr);
}

template <class T>
void Linear<T>::backward_relu(const T* x, const T* y, T* dy, int rows, T* dx,
                              const uint16_t* x16) const {
  k::linear_relu_backward<T>(x, x16, y, dy, rows, in, out, store->p(w), dx, store->g(w),
                             b >= 0 ? store->g(b) : nullptr);
}

template <class T>
void Linear<T>::backward_into_relu(const uint16_t* x16, const T* dy, int rows, uint16_t* dx16,
                                   const uint16_t* dy16) const {
  k::linear_backward_into_relu<T>(x16, dy, dy16, rows, in, out, store->p(w), store->g(w),
                                  b >= 0 ? store->g(b) : nullptr, dx16);
}

template struct Linear<float>;
template struct Linear<double>;

}  // namespace pn
