// Buf<T>: a grow-only array on a device, the one container of parameters, gradients, optimizer
// state, activations and norm state on every device.
//
// It behaves like the std::vector it replaces where the layers use one (resize keeps the contents
// and zeroes new elements, assign fills), but its memory is on the device that is current when it
// grows, and the host touches it only through to_host()/from_host() (or operator[], which is for
// CPU buffers only). Capacity never shrinks, so after the first update of a fixed shape nothing
// is allocated; growing is ordered on the stream (no device-wide synchronisation).
#pragma once
#include <array>
#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include <algorithm>
#include <type_traits>

#include "kernels/kernels.h"

namespace pn {

template <class T>
class Buf {
 public:
  Buf() = default;
  explicit Buf(size_t count) { resize(count); }
  Buf(size_t count, T value) { assign(count, value); }
  ~Buf() { device_free(device_, ptr_); }
  Buf(const Buf& o) { *this = o; }
  Buf& operator=(const Buf& o) {
    if (this == &o) return *this;
    resize(o.n_);
    copy_on_device(ptr_, o.ptr_, o.n_ * sizeof(T));
    return *this;
  }
  Buf(Buf&& o) noexcept { swap(o); }
  Buf& operator=(Buf&& o) noexcept {
    swap(o);
    return *this;
  }
  void swap(Buf& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    std::swap(cap_, o.cap_);
    std::swap(device_, o.device_);
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  Device device() const { return device_; }

  // As std::vector::resize: contents kept, new elements zero.
  void resize(size_t count) {
    if (count > cap_ || (ptr_ && device_ != current_device())) grow(count);
    if (count > n_) device_memset_zero(ptr_ + n_, (count - n_) * sizeof(T));
    n_ = count;
  }
  // count copies of value (a kernel on the device).
  void assign(size_t count, T value) {
    resize(count);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      k::fill<T>(ptr_, count, value);
    } else if (device_ == Device::CPU) {
      std::fill(ptr_, ptr_ + count, value);
    } else {
      if (value != T(0)) throw std::logic_error("Buf::assign: only zero fills this type on a device");
      device_memset_zero(ptr_, count * sizeof(T));
    }
  }
  void from_host(const T* src, size_t count) {
    resize(count);
    copy_to_device(ptr_, src, count * sizeof(T));
  }
  void from_host(const std::vector<T>& v) { from_host(v.data(), v.size()); }
  // Copies the contents to the host and waits for them.
  std::vector<T> to_host() const {
    std::vector<T> v(n_);
    copy_to_host(v.data(), ptr_, n_ * sizeof(T));
    synchronize();
    return v;
  }
  // A host copy, implicitly (tests compare and perturb through it).
  operator std::vector<T>() const { return to_host(); }
  // Element access on the host: CPU buffers only (a device buffer is read with to_host()).
  T& operator[](size_t i) { return ptr_[host_index(i)]; }
  const T& operator[](size_t i) const { return ptr_[host_index(i)]; }
  T* begin() { return &(*this)[0]; }
  T* end() { return begin() + n_; }
  const T* begin() const { return &(*this)[0]; }
  const T* end() const { return begin() + n_; }

 private:
  size_t host_index(size_t i) const {
    if (device_ != Device::CPU && ptr_)
      throw std::logic_error("host access to a " + device_name(device_) + " buffer");
    return i;
  }
  void grow(size_t count) {
    if (n_ && device_ != current_device())
      throw std::logic_error("a " + device_name(device_) + " buffer grown while " +
                             device_name(current_device()) + " is the current device");
    T* p = static_cast<T*>(device_alloc(count * sizeof(T)));
    if (n_) copy_on_device(p, ptr_, n_ * sizeof(T));
    device_free(device_, ptr_);
    ptr_ = p;
    cap_ = count;
    device_ = current_device();
  }

  T* ptr_ = nullptr;
  size_t n_ = 0, cap_ = 0;
  Device device_ = Device::CPU;
};

// Zeroes N doubles of `scratch` (memory of the current device), lets add(scratch.data()) add
// sums to them and returns them to the host: one copy back, one wait. The one helper of the
// host-returning forms (the loss and gradient-statistics kernels', the models'
// forward_backward and evaluate): they let tests, pnnorm and the GPU comparisons check a result
// in one call on any device, while the training loop keeps its sums on the device and reads
// them once per update.
template <size_t N, class F>
std::array<double, N> sums_to_host(Buf<double>& scratch, F add) {
  scratch.assign(N, 0.0);
  add(scratch.data());
  const std::vector<double> h = scratch.to_host();
  std::array<double, N> out{};
  std::copy(h.begin(), h.begin() + N, out.begin());
  return out;
}
template <class F>
k::LossSums host_loss_sums(Buf<double>& scratch, F add) {
  const auto s = sums_to_host<3>(scratch, add);
  return {s[0], s[1], s[2]};
}

// Equal sizes and contents (copies both to the host: for tests and checks, not the hot path).
template <class T>
bool operator==(const Buf<T>& a, const Buf<T>& b) {
  return a.size() == b.size() && a.to_host() == b.to_host();
}
template <class T>
bool operator!=(const Buf<T>& a, const Buf<T>& b) {
  return !(a == b);
}

}  // namespace pn
