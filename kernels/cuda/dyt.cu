// DyT's kernels (layers/norms/dyt.h); the math is in kernels/ops.inc, the CPU twins in
// kernels/cpu/norm_kernels.cpp. Products are written with __fmul_rn/__fadd_rn as the CPU rounds
// them, so that nvcc's FMA contraction does not change the rounding.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

// y = gamma tanh(a x) + beta, a grid-stride loop over the elements; only y's bf16 rounding where
// y16.
__global__ void dyt_forward_kernel(const float* x, size_t n, int d, const float* alpha,
                                   const float* gamma, const float* beta, float* y,
                                   uint16_t* y16) {
  const float a = *alpha;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int c = int(i % size_t(d));
    const float v = __fadd_rn(__fmul_rn(gamma[c], tanhf(__fmul_rn(a, x[i]))), beta[c]);
    if (y16)
      reinterpret_cast<__nv_bfloat16*>(y16)[i] = __float2bfloat16_rn(v);
    else
      y[i] = v;
  }
}

// Element (r, c) of the backward, t = tanh(a x), s = 1 - t^2: dx = dy gamma a s written (0 on a
// masked row, or dx kept when adding; dx16 its bf16 rounding), v0 = dy t and v1 = dy, which the
// column pass sums over the live rows into dgamma and dbeta.
struct DytBackwardOp {
  const float *x, *dy, *alpha, *gamma;
  const uint8_t* mask;
  int d;
  float* dx;
  uint16_t* dx16;
  bool add_to_dx;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    const float a = *alpha, t = tanhf(__fmul_rn(a, x[i]));
    const float s = __fsub_rn(1.f, __fmul_rn(t, t));
    const float v = __fmul_rn(__fmul_rn(__fmul_rn(dy[i], gamma[c]), a), s);
    const float out = live(mask, r) ? (add_to_dx ? __fadd_rn(dx[i], v) : v)
                                    : (add_to_dx ? dx[i] : 0.f);
    dx[i] = out;
    if (dx16) reinterpret_cast<__nv_bfloat16*>(dx16)[i] = __float2bfloat16_rn(out);
    v0 = double(dy[i]) * double(t);
    v1 = double(dy[i]);
  }
};

// v0 = dy gamma x (1 - t^2): the terms of da, summed per column over the live rows.
struct DytAlphaOp {
  const float *x, *dy, *alpha, *gamma;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    const float t = tanhf(__fmul_rn(*alpha, x[i]));
    const float s = __fsub_rn(1.f, __fmul_rn(t, t));
    v0 = double(__fmul_rn(dy[i], gamma[c])) * double(x[i]) * double(s);
    v1 = 0;
  }
};

// dalpha[0] += the sum of the d column sums, in one block in a fixed order.
__global__ void dyt_alpha_sum_kernel(const double* cols, int d, float* dalpha) {
  __shared__ double sh[kThreads / 32];
  double acc = 0;
  for (int c = threadIdx.x; c < d; c += blockDim.x) acc += cols[c];
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) *dalpha = float(double(*dalpha) + acc);
}

}  // namespace

void dyt_forward(const float* x, int rows, int d, const float* alpha, const float* gamma,
                 const float* beta, float* y, uint16_t* y16, cudaStream_t s) {
  const size_t n = size_t(rows) * size_t(d);
  if (n == 0) return;
  PN_LAUNCH(dyt_forward_kernel, blocks_for(n), kThreads, 0, s)(x, n, d, alpha, gamma, beta, y,
                                                               y16);
  PN_LAUNCHED();
}

void dyt_backward(const float* x, const float* dy, const float* alpha, const float* gamma,
                  const uint8_t* mask, int rows, int d, float* dx, float* dgamma, float* dbeta,
                  float* dalpha, bool add_to_dx, uint16_t* dx16, cudaStream_t s) {
  if (rows <= 0 || d <= 0) return;
  column_reduce(DytBackwardOp{x, dy, alpha, gamma, mask, d, dx, dx16, add_to_dx}, mask, rows, d,
                dgamma, dbeta, s);
  double* cols = scratch_as<double>(kSlotSums, size_t(d), s);
  column_reduce(DytAlphaOp{x, dy, alpha, gamma, d}, mask, rows, d, cols,
                static_cast<double*>(nullptr), s);
  PN_LAUNCH(dyt_alpha_sum_kernel, 1, kThreads, 0, s)(cols, d, dalpha);
  PN_LAUNCHED();
}

}  // namespace pn::cuda
