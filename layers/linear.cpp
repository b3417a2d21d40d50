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
void Linear<T>::forward(const T* x, int rows, T* y) const {
  k::gemm<T>(false, true, rows, out, in, T(1), x, in, store->p(w), in, T(0), y, out);
  if (b >= 0) k::add_bias<T>(y, store->p(b), rows, out);
}

template <class T>
void Linear<T>::backward(const T* x, const T* dy, int rows, T* dx) const {
  if (dx) k::gemm<T>(false, false, rows, in, out, T(1), dy, out, store->p(w), in, T(0), dx, in);
  k::gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), store->g(w), in);
  if (b >= 0) k::bias_grad<T>(dy, rows, out, store->g(b));
}

template struct Linear<float>;
template struct Linear<double>;

}  // namespace pn
