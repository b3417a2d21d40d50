// Rounding a float to fewer bits of mantissa, as the tensor-core and bf16 GEMMs read their
// operands: the CPU's bf16 GEMM (and the cuBLAS emulation, emulator/cublas.cpp, has the same
// function), so that both mean the same.
#pragma once
#include <cstdint>
#include <cstring>

namespace pn {

// Round-to-nearest-even of f to `keep` bits of mantissa (bf16: 7, tf32: 10); Inf and NaN kept.
inline float round_mantissa(float f, int keep) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  const int drop = 23 - keep;
  u += ((1u << (drop - 1)) - 1) + ((u >> drop) & 1u);
  u &= ~((1u << drop) - 1);
  std::memcpy(&f, &u, 4);
  return f;
}

inline float round_to_bf16(float f) { return round_mantissa(f, 7); }

// The bits of f rounded to bf16 (the upper half of round_to_bf16's); a NaN stays a quiet NaN.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  const float r = round_to_bf16(f);
  std::memcpy(&u, &r, 4);
  return uint16_t(u >> 16);
}

// The float whose bits are `bits` followed by 16 zeros: a bf16 widened (exact).
inline float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace pn
