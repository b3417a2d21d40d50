// GemmInput<T>: an activation that only GEMMs read (a norm's output feeding a projection, the
// feed-forward's hidden layer), kept from its forward for the weight gradient of its backward.
// Kept in T, or, where the context's GEMMs read bf16 (k::gemm_inputs_in_bf16: a GPU at
// --precision bf16), only as its bf16 rounding, the one the GEMMs would otherwise make at each
// call: a producer that can write the rounding alone (a norm) writes it there (begin_either);
// a GEMM writes it beside its T values in a transient of the model's Workspace, gone by the
// backward (begin_with_rounding; on a GPU cuBLASLt's epilogue writes the rounding instead).
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
  const T* x = nullptr;           // the T values of the last forward (null where kept in bf16)
  const uint16_t* x16 = nullptr;  // the rounding, or null

  // Where a GEMM writes the next forward's n values: {`full`, null}, or where kept in bf16 {a
  // transient (scratch), the rounding's storage}, both of which it writes (k::linear_forward's
  // y and y16).
  std::pair<T*, uint16_t*> begin_with_rounding(size_t n, Buf<T>& transient) {
    if (!k::gemm_inputs_in_bf16<T>()) return begin_either(n);
    half.resize(n);
    x = nullptr, x16 = half.data();
    return {Workspace<T>::take(transient, n), half.data()};
  }
  // Where a producer that writes bf16 itself (a norm) puts the next forward's n values: {`full`,
  // null}, or where kept in bf16 {null, the rounding's storage} (no T values exist then).
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
  // For the backward: the T values where kept in T (null where only the rounding is kept).
  const T* saved() const { return x16 ? nullptr : x; }
};

}  // namespace pn
