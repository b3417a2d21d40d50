// What the row norms' kernels (layer, rms, group: one warp to each row group) share with the
// experiments of dev/cuda: a value's input gradient and the backward's per-row formula.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace pn::cuda {

// An input gradient dx[i] = v and, where dx16 is given, its bf16 rounding.
__device__ __forceinline__ void put_grad16(float* dx, uint16_t* dx16, size_t i, float v) {
  dx[i] = v;
  if (dx16) reinterpret_cast<__nv_bfloat16*>(dx16)[i] = __float2bfloat16_rn(v);
}

// A row group's normalized value: (a - mu) rstd, or a rinv for rms.
__device__ __forceinline__ float row_xhat(float a, bool rms, float mu, float rs) {
  return rms ? __fmul_rn(a, rs) : __fmul_rn(__fsub_rn(a, mu), rs);
}
// The means over a row group of g and g xh from a lane's sums (the warp adds them; rms: no mean
// of g), and a value's input gradient from them (rowgroup_backward_kernel's formula).
struct RowMeans {
  float g, gx;
};
__device__ __forceinline__ RowMeans row_means(bool rms, double sg, double sgx, int m) {
  if (!rms) sg = warp_sum(sg);
  sgx = warp_sum(sgx);
  return {float(sg / m), float(sgx / m)};
}
__device__ __forceinline__ float row_grad(bool rms, float rs, float xh, float g, RowMeans mean) {
  return rms ? __fmul_rn(rs, __fsub_rn(g, __fmul_rn(xh, mean.gx)))
             : __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mean.g), __fmul_rn(xh, mean.gx)));
}
// A masked row's input gradient: 0, or dx as it is when adding; its bf16 copy where given.
__device__ __forceinline__ void masked_row_grad(float* dx, uint16_t* dx16, size_t off, int m,
                                                int lane, bool add) {
  if (!add || dx16)
    for (int c = lane; c < m; c += 32) put_grad16(dx, dx16, off + c, add ? dx[off + c] : 0.f);
}

}  // namespace pn::cuda
