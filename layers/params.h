// All parameters of a model live in one contiguous buffer, and all gradients in another of the
// same layout, so that one all-reduce moves every gradient and one Adam call updates everything.
// Both are on the device that is current when allocate() runs.
#pragma once
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/buffer.h"

namespace pn {

enum class Init { Zeros, Ones, XavierUniform, Normal };

struct ParamSpec {
  std::string name;
  std::vector<int> shape;
  Init init = Init::Zeros;
  double init_std = 0;  // for Init::Normal
  size_t offset = 0, numel = 0;
};

template <class T>
struct ParamStore {
  std::vector<ParamSpec> specs;
  Buf<T> data, grad;
  bool allocated = false;

  // Declares a tensor; returns its index. All declarations come before allocate().
  int add(const std::string& name, std::vector<int> shape, Init init, double init_std = 0) {
    if (allocated) throw std::logic_error("ParamStore::add after allocate: " + name);
    ParamSpec s{name, std::move(shape), init, init_std, 0, 1};
    for (int v : s.shape) s.numel *= size_t(v);
    s.offset = specs.empty() ? 0 : specs.back().offset + specs.back().numel;
    specs.push_back(s);
    return int(specs.size()) - 1;
  }
  size_t size() const { return specs.empty() ? 0 : specs.back().offset + specs.back().numel; }

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
