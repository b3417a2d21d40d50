#include "layers/norms/prescale.h"

#include <stdexcept>

#include "kernels/kernels.h"

namespace pn {

template <class T>
Prescaled<T>::Prescaled(std::unique_ptr<Norm<T>> in, const NormOptions& o, int dim,
                        const std::string& name)
    : inner(std::move(in)), d(dim), groups(o.prescale_groups), eps(T(o.eps)) {
  if (groups < 1 || d % groups != 0)
    throw std::invalid_argument("norm '" + name + "': " + std::to_string(groups) +
                                " pre-scaling groups do not divide " + std::to_string(d) +
                                " features");
}

template <class T>
void Prescaled<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
                           uint16_t* y16) {
  z.resize(size_t(rows) * d);
  rinv.resize(size_t(rows) * groups);
  k::rowgroup_rms_forward<T>(x, rows, d, groups, eps, nullptr, z.data(), nullptr, rinv.data());
  inner->forward(z.data(), mask, rows, y, training, y16);
}

template <class T>
void Prescaled<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                            bool add_to_dx, uint16_t* dx16) {
  dz.resize(size_t(rows) * d);
  inner->backward(z.data(), dy, mask, rows, dz.data());  // no dx16: only rms reads dz
  k::rowgroup_rms_backward<T>(x, dz.data(), rinv.data(), nullptr, mask, rows, d, groups, dx,
                              nullptr, add_to_dx, dx16);
}

template struct Prescaled<float>;
template struct Prescaled<double>;

}  // namespace pn
