// GemmInput<T>: an activation that only GEMMs read (a norm's output feeding a projection, the
// feed-forward's hidden layer), kept from its forward for the weight gradient of its backward.
// Kept in T, or, where the context's GEMMs read bf16 (k::gemm_inputs_in_bf16: a GPU at
// --precision bf16), only as its bf16 rounding, the one the GEMMs would otherwise make at each
// call: its producer writes the rounding alone (begin_either): a norm, or a Linear, whose
// cuBLASLt epilogue writes it on a GPU (k::linear_forward's y16).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/buffer.h"
#include "kernels/kernels.h"

namespace pn {

template <class T>
struct GemmInput {
  Buf<T> full;                    // the activation in T, where kept so
  Buf<uint16_t> half;             // its bf16 rounding, where kept so
  const T* x = nullptr;           // the T values of the last forward (null where kept in bf16)
  const uint16_t* x16 = nullptr;  // the rounding, or null

  // Where the producer puts the next forward's n values: {`full`, null}, or where kept in bf16
  // {null, the rounding's storage} (no T values exist then).
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
