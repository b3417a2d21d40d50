// All parameters of a model live in one contiguous buffer, and all gradients in another of the
// same layout, so that one all-reduce moves every gradient and one Adam call updates everything.
// Both are on the device that is current when allocate() runs.
// A tensor may reserve zeros right after itself (the padded rows a GEMM runs over, e.g. the
// vocabulary of layers/embedding.h): they are no part of its shape, get no gradient and so stay
// zero under Adam, and checkpoints and exports leave them out (packed(), unpacked()).
#pragma once
#include <algorithm>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/buffer.h"

namespace pn {

enum class Init { Zeros, Ones, XavierUniform, Normal, Constant };

struct ParamSpec {
  std::string name;
  std::vector<int> shape;
  Init init = Init::Zeros;
  double init_std = 0;  // for Init::Normal; for Init::Constant, the value
  size_t offset = 0, numel = 0;
  size_t reserve = 0;  // zeros after the tensor in both buffers, not part of it
};

template <class T>
struct ParamStore {
  std::vector<ParamSpec> specs;
  Buf<T> data, grad;
  bool allocated = false;

  // Declares a tensor and the zeros reserved after it; returns its index. All declarations come
  // before allocate().
  int add(const std::string& name, std::vector<int> shape, Init init, double init_std = 0,
          size_t reserve = 0) {
    if (allocated) throw std::logic_error("ParamStore::add after allocate: " + name);
    ParamSpec s{name, std::move(shape), init, init_std, size(), 1, reserve};
    for (int v : s.shape) s.numel *= size_t(v);
    specs.push_back(s);
    return int(specs.size()) - 1;
  }
  // Elements of each buffer, reserved zeros included.
  size_t size() const {
    return specs.empty() ? 0 : specs.back().offset + specs.back().numel + specs.back().reserve;
  }
  // Elements of the tensors alone: the model's parameter count and a checkpoint's layout.
  size_t packed_size() const {
    size_t n = 0;
    for (const ParamSpec& s : specs) n += s.numel;
    return n;
  }
  // A host copy of a buffer of this layout (size() elements) without the reserved zeros, and
  // back (packed_size() elements in; the reserves come back zero).
  std::vector<T> packed(const std::vector<T>& buffer) const {
    std::vector<T> out;
    out.reserve(packed_size());
    for (const ParamSpec& s : specs)
      out.insert(out.end(), buffer.begin() + long(s.offset),
                 buffer.begin() + long(s.offset + s.numel));
    return out;
  }
  std::vector<T> unpacked(const T* packed) const {
    std::vector<T> out(size(), T(0));
    for (const ParamSpec& s : specs) {
      std::copy(packed, packed + s.numel, out.begin() + long(s.offset));
      packed += s.numel;
    }
    return out;
  }

  // Allocates both buffers and initialises parameters from seed (identical on every rank).
  // The values are drawn on the host (the same on every device) and copied over.
  void allocate(uint64_t seed) {
    std::vector<T> host(size(), T(0));
    grad.assign(size(), T(0));
    allocated = true;
    std::mt19937_64 rng(seed);
    for (const ParamSpec& s : specs) {
      T* p = host.data() + s.offset;
      switch (s.init) {
        case Init::Zeros: break;
        case Init::Ones: std::fill(p, p + s.numel, T(1)); break;
        case Init::Constant: std::fill(p, p + s.numel, T(s.init_std)); break;
        case Init::XavierUniform: {  // shape [out, in]
          const double a = std::sqrt(6.0 / double(s.shape.at(0) + s.shape.at(1)));
          std::uniform_real_distribution<double> u(-a, a);
          for (size_t i = 0; i < s.numel; ++i) p[i] = T(u(rng));
          break;
        }
        case Init::Normal: {
          std::normal_distribution<double> n(0.0, s.init_std);
          for (size_t i = 0; i < s.numel; ++i) p[i] = T(n(rng));
          break;
        }
      }
    }
    data.from_host(host);
    synchronize();  // host goes out of scope
  }
  T* p(int idx) { return data.data() + specs[idx].offset; }
  T* g(int idx) { return grad.data() + specs[idx].offset; }
  const T* p(int idx) const { return data.data() + specs[idx].offset; }
  size_t numel(int idx) const { return specs[idx].numel; }
};

}  // namespace pn
