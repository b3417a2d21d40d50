// GemmInput<T>: an activation that only GEMMs read (a norm's output feeding a projection, the
// feed-forward's hidden layer), kept from its forward for the weight gradient of its backward.
// Kept in T, or, where the context's GEMMs read bf16 (k::gemm_inputs_in_bf16: a GPU at
// --precision bf16), only as its bf16 rounding, the one the GEMMs would otherwise make at each
// call (the results are the same to the bit): a producer that can write the rounding itself (a
// norm) writes it there (begin_either); another writes its T values into a transient of the model's
// Workspace, which is gone by the backward, and end() rounds them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/buffer.h"
#include "kernels/kernels.h"
#include "layers/workspace.h"

namespace pn {

template <class T>
struct GemmInput {
  Buf<T> full;                    // the activation in T, where kept so
  Buf<uint16_t> half;             // its bf16 rounding, where kept so
  const T* x = nullptr;           // the T values of the last forward (a transient where kept in bf16)
  const uint16_t* x16 = nullptr;  // the rounding, or null

  // Where the producer writes the next forward's n values: `full`, or the transient.
  T* begin(size_t n, Buf<T>& transient) {
    if (!k::gemm_inputs_in_bf16<T>()) return begin_either(n).first;
    x16 = nullptr;
    T* t = Workspace<T>::take(transient, n);
    x = t;
    return t;
  }
  // Where a producer that writes bf16 itself (a norm) puts the next forward's n values: {`full`,
  // null}, or where kept in bf16 {null, the rounding's storage} (no T values exist then). No end().
  std::pair<T*, uint16_t*> begin_either(size_t n) {
    if (!k::gemm_inputs_in_bf16<T>()) {
      full.resize(n);
      x = full.data(), x16 = nullptr;
      return {full.data(), nullptr};
    }
    half.resize(n);
    x = nullptr, x16 = half.data();
    return {nullptr, half.data()};
  }
  // After the producer (before the GEMMs read it): the rounding, where kept in bf16.
  void end(size_t n) {
    if constexpr (std::is_same_v<T, float>)
      if (k::gemm_inputs_in_bf16<T>()) {
        half.resize(n);
        k::round_bf16(x, n, half.data());
        x16 = half.data();
      }
  }
  // For the backward: the T values where kept in T (null where only the rounding is kept).
  const T* saved() const { return x16 ? nullptr : x; }
};

}  // namespace pn
