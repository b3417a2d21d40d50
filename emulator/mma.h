// The warp matrix functions (nvcuda::wmma) for the CUDA emulation, bf16 m16n16k16 with fp32
// accumulators: what kernels/cuda/flash_attention.cu uses. On a GPU a fragment is spread over the
// warp's 32 lanes in an unspecified layout; here lane 0 of the warp holds the whole tile and does
// the warp's work (the other lanes' fragments stay unused), which keeps the functions' contracts:
// element-wise operations on x[0..num_elements) are layout-free, and a tile reaches other threads
// only through store_matrix_sync and a barrier. Products are summed in fp32 in k order (a tensor
// core's order within a k-step is not specified either).
#pragma once
#include <cstddef>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline bool warp_leader() { return threadIdx.x % 32 == 0; }

template <class Use, int M, int N, int K>
constexpr int rows() { return std::is_same<Use, matrix_b>::value ? K : M; }
template <class Use, int M, int N, int K>
constexpr int cols() { return std::is_same<Use, matrix_a>::value ? K : N; }
}  // namespace detail

// x holds the tile row-major (rows x cols of the operand's own shape).
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int kRows = detail::rows<Use, M, N, K>(), kCols = detail::cols<Use, M, N, K>();
  static constexpr int num_elements = kRows * kCols;
  T x[num_elements] = {};  // defined in every lane, though only lane 0 uses it
};

template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v) {
  if (!detail::warp_leader()) return;
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = T(v);
}
template <class Use, int M, int N, int K, class L>
inline void fill_fragment(fragment<Use, M, N, K, __nv_bfloat16, L>& f, float v) {
  if (!detail::warp_leader()) return;
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = __float2bfloat16(v);
}

// Operand tiles: element (r, c) at p[r * ldm + c] (row_major) or p[c * ldm + r] (col_major).
template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, L>;
  if (!detail::warp_leader()) return;
  for (int r = 0; r < F::kRows; ++r)
    for (int c = 0; c < F::kCols; ++c)
      f.x[r * F::kCols + c] =
          std::is_same<L, col_major>::value ? p[size_t(c) * ldm + r] : p[size_t(r) * ldm + c];
}
template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  if (!detail::warp_leader()) return;
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = layout == mem_col_major ? p[size_t(c) * ldm + r] : p[size_t(r) * ldm + c];
}
template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f,
                              unsigned ldm, layout_t layout) {
  if (!detail::warp_leader()) return;
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[size_t(c) * ldm + r] : p[size_t(r) * ldm + c]) = f.x[r * N + c];
}

// d = a b + c
template <int M, int N, int K, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                     const fragment<matrix_a, M, N, K, __nv_bfloat16, LA>& a,
                     const fragment<matrix_b, M, N, K, __nv_bfloat16, LB>& b,
                     const fragment<accumulator, M, N, K, float>& c) {
  if (!detail::warp_leader()) return;
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = c.x[i * N + j];
      for (int k = 0; k < K; ++k)
        s += __bfloat162float(a.x[i * K + k]) * __bfloat162float(b.x[k * N + j]);
      out[i * N + j] = s;
    }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
