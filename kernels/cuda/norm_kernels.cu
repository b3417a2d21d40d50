// CUDA kernels of the normalization family; the math is in kernels/ops.inc.
//
// Column statistics over tokens (batch, power_v, power; bias and parameter gradients too) are
// one pass over the rows with the two-level reduction of common.cuh: blocks of 32 columns x 256
// rows sum float inputs in double, then each column adds its block sums in block order. No
// atomics: the partition depends on the shape only, so results repeat bit for bit.
// Row statistics (layer, rms, group, pre-scaling) give one warp to each (row, group), summing
// in double with a butterfly of shuffles. Affine maps use per-column float coefficients made
// from the double statistics exactly as the CPU kernels make them (shift split into its float
// rounding plus a double correction folded into the offset), with explicitly rounded float
// operations, so that y and dx match the CPU to the last bit when the coefficients do.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

// A norm's output value i: in fp32 (y), or only as its bf16 rounding where y16 is given.
__device__ __forceinline__ void put_out(float* y, uint16_t* y16, size_t i, float v) {
  if (y16)
    reinterpret_cast<__nv_bfloat16*>(y16)[i] = __float2bfloat16_rn(v);
  else
    y[i] = v;
}

// ---- column statistics ----------------------------------------------------------------------
struct StatsOp {  // v0 = x - shift_c, v1 = v0^2
  const float* x;
  const double* shift;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    v0 = double(x[size_t(r) * d + c]) - (shift ? shift[c] : 0.0);
    v1 = v0 * v0;
  }
};
struct DotOp {  // v0 = a, v1 = a (b - shift_c)
  const float* a;
  const float* b;
  const double* shift;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    v0 = double(a[i]);
    v1 = v0 * (double(b[i]) - (shift ? shift[c] : 0.0));
  }
};

// *count = number of live rows (integer sum in one block: exact and deterministic).
__global__ void count_rows_kernel(const uint8_t* mask, int rows, double* count) {
  __shared__ double sh[kThreads / 32];
  double n = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) n += live(mask, r) ? 1.0 : 0.0;
  n = block_sum(n, sh);
  if (threadIdx.x == 0) *count = n;
}

// ---- per-column coefficients of the affine maps -----------------------------------------------
// column_affine: y = A (x - S) + B;  A = gamma scale, S = float(shift),
//                B = beta - A (shift - S)
__global__ void affine_coeffs_kernel(int d, const double* shift, const double* scale,
                                     const float* gamma, const float* beta, float* co) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const double a = double(gamma[c]) * scale[c];
  const double s = shift ? shift[c] : 0.0;
  const float sf = float(s);
  co[c] = float(a);
  co[d + c] = sf;
  co[2 * d + c] = float((beta ? double(beta[c]) : 0.0) - a * (s - double(sf)));
}
// The per-element maps walk a 2-D grid: a thread owns one column (its coefficients stay in
// registers) and strides over rows, so there is no per-element index division.
constexpr int kMapRows = 8;  // rows per block step (blockDim.y)
dim3 map_grid(int rows, int d) {
  const int gy = (rows + kMapRows - 1) / kMapRows;
  return dim3((d + kColTile - 1) / kColTile, gy < 4096 ? gy : 4096);
}
__global__ void affine_apply_kernel(const float* x, int rows, int d, const float* co, float* y,
                                    uint16_t* y16) {
  const int c = blockIdx.x * kColTile + threadIdx.x;
  if (c >= d) return;
  const float A = co[c], S = co[d + c], B = co[2 * d + c];
  for (int r = blockIdx.y * kMapRows + threadIdx.y; r < rows; r += gridDim.y * kMapRows) {
    const size_t i = size_t(r) * d + c;
    put_out(y, y16, i, __fadd_rn(__fmul_rn(A, __fsub_rn(x[i], S)), B));
  }
}

// column_norm_backward: with u = x - S (S = float(shift), e = shift - S),
// dx = P dy + Q u + R,  P = scale gamma, Q = -scale^2 b, R = scale (b scale e - a); 0 if masked.
__global__ void backward_coeffs_kernel(int d, const double* shift, const double* scale,
                                       const float* gamma, const double* a, const double* b,
                                       float* co) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const double s = shift ? shift[c] : 0.0;
  const float sf = float(s);
  const double e = s - double(sf), sc = scale[c];
  co[c] = float(sc * double(gamma[c]));
  co[d + c] = float(-sc * sc * b[c]);
  co[2 * d + c] = float(sc * (b[c] * sc * e - (a ? a[c] : 0.0)));
  co[3 * d + c] = sf;
}
__global__ void backward_apply_kernel(const float* x, const float* dy, const uint8_t* mask,
                                      int rows, int d, const float* co, float* dx) {
  const int c = blockIdx.x * kColTile + threadIdx.x;
  if (c >= d) return;
  const float P = co[c], Q = co[d + c], R = co[2 * d + c], S = co[3 * d + c];
  for (int r = blockIdx.y * kMapRows + threadIdx.y; r < rows; r += gridDim.y * kMapRows) {
    const size_t i = size_t(r) * d + c;
    if (!live(mask, r)) {
      dx[i] = 0.f;
      continue;
    }
    dx[i] = __fadd_rn(__fadd_rn(__fmul_rn(P, dy[i]), __fmul_rn(Q, __fsub_rn(x[i], S))), R);
  }
}

// ---- row groups: one warp per (row, group) --------------------------------------------------
constexpr int kWarpsPerBlock = kThreads / 32;
unsigned warp_blocks(long long units) {
  return unsigned((units + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
__device__ __forceinline__ long long warp_unit() {
  return blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
}

// rinv = 1/sqrt(mean_group x^2 + eps);  y = x rinv gamma
__global__ void rms_forward_kernel(const float* x, int rows, int d, int G, float eps,
                                   const float* gamma, float* y, uint16_t* y16, float* rinv) {
  const long long w = warp_unit();
  if (w >= (long long)rows * G) return;
  const int lane = threadIdx.x & 31, m = d / G, j = int(w % G);
  const size_t off = size_t(w / G) * d + size_t(j) * m;
  const float* xr = x + off;
  double s = 0;
  for (int c = lane; c < m; c += 32) s += double(xr[c] * xr[c]);
  s = warp_sum(s);
  const float rf = float(1.0 / sqrt(s / m + double(eps)));
  for (int c = lane; c < m; c += 32) {
    const float v = __fmul_rn(xr[c], rf);
    put_out(y, y16, off + c, gamma ? __fmul_rn(v, gamma[size_t(j) * m + c]) : v);
  }
  if (lane == 0) rinv[w] = rf;
}

// xh = x rinv, g = gamma dy: dx = rinv (g - xh mean_group(g xh)); 0 on masked rows.
__global__ void rms_backward_kernel(const float* x, const float* dy, const float* rinv,
                                    const float* gamma, const uint8_t* mask, int rows, int d, int G,
                                    float* dx) {
  const long long w = warp_unit();
  if (w >= (long long)rows * G) return;
  const int lane = threadIdx.x & 31, m = d / G, j = int(w % G);
  const int r = int(w / G);
  const size_t off = size_t(r) * d + size_t(j) * m;
  if (!live(mask, r)) {
    for (int c = lane; c < m; c += 32) dx[off + c] = 0.f;
    return;
  }
  const float ri = rinv[w];
  const float* gm = gamma ? gamma + size_t(j) * m : nullptr;
  double sgx = 0;
  for (int c = lane; c < m; c += 32) {
    const float g = gm ? __fmul_rn(gm[c], dy[off + c]) : dy[off + c];
    sgx += double(__fmul_rn(g, __fmul_rn(x[off + c], ri)));
  }
  sgx = warp_sum(sgx);
  const float mgx = float(sgx / m);
  for (int c = lane; c < m; c += 32) {
    const float g = gm ? __fmul_rn(gm[c], dy[off + c]) : dy[off + c];
    const float xh = __fmul_rn(x[off + c], ri);
    dx[off + c] = __fmul_rn(ri, __fsub_rn(g, __fmul_rn(xh, mgx)));
  }
}
struct RmsGradOp {  // v0 = dy xh (xh = x rinv), v1 unused
  const float* x;
  const float* dy;
  const float* rinv;
  int d, G, m;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    v0 = double(__fmul_rn(dy[i], __fmul_rn(x[i], rinv[size_t(r) * G + c / m])));
    v1 = 0;
  }
};

// mu, var over the group (deviations from the float mean squared in float, summed in double,
// the offset mu - float(mu) removed after, as the CPU); xh = (x - mu) rstd; y = gamma xh + beta.
__global__ void norm_forward_kernel(const float* x, int rows, int d, int G, float eps,
                                    const float* gamma, const float* beta, float* y, uint16_t* y16,
                                    float* mean, float* rstd) {
  const long long w = warp_unit();
  if (w >= (long long)rows * G) return;
  const int lane = threadIdx.x & 31, m = d / G, j = int(w % G);
  const size_t off = size_t(w / G) * d + size_t(j) * m;
  const float* xr = x + off;
  double s1 = 0;
  for (int c = lane; c < m; c += 32) s1 += double(xr[c]);
  const double mu = warp_sum(s1) / m;
  const float mf = float(mu);
  double s2 = 0;
  for (int c = lane; c < m; c += 32) {
    const float u = __fsub_rn(xr[c], mf);
    s2 += double(__fmul_rn(u, u));
  }
  s2 = warp_sum(s2);
  const double o = mu - double(mf);
  const double var = fmax(0.0, s2 / m - o * o);
  const float rs = float(1.0 / sqrt(var + double(eps)));
  const float* gj = gamma + size_t(j) * m;
  const float* bj = beta + size_t(j) * m;
  for (int c = lane; c < m; c += 32)
    put_out(y, y16, off + c,
            __fadd_rn(__fmul_rn(gj[c], __fmul_rn(__fsub_rn(xr[c], mf), rs)), bj[c]));
  if (lane == 0) {
    mean[w] = mf;
    rstd[w] = rs;
  }
}

// dx = rstd (g - mean_group g - xh mean_group(g xh)); 0 on masked rows.
__global__ void norm_backward_kernel(const float* x, const float* dy, const float* mean,
                                     const float* rstd, const float* gamma, const uint8_t* mask,
                                     int rows, int d, int G, float* dx) {
  const long long w = warp_unit();
  if (w >= (long long)rows * G) return;
  const int lane = threadIdx.x & 31, m = d / G, j = int(w % G);
  const int r = int(w / G);
  const size_t off = size_t(r) * d + size_t(j) * m;
  if (!live(mask, r)) {
    for (int c = lane; c < m; c += 32) dx[off + c] = 0.f;
    return;
  }
  const float mu = mean[w], rs = rstd[w];
  const float* gj = gamma + size_t(j) * m;
  double sg = 0, sgx = 0;
  for (int c = lane; c < m; c += 32) {
    const float g = __fmul_rn(gj[c], dy[off + c]);
    sg += double(g);
    sgx += double(__fmul_rn(g, __fmul_rn(__fsub_rn(x[off + c], mu), rs)));
  }
  sg = warp_sum(sg);
  sgx = warp_sum(sgx);
  const float mg = float(sg / m), mgx = float(sgx / m);
  for (int c = lane; c < m; c += 32) {
    const float g = __fmul_rn(gj[c], dy[off + c]);
    const float xh = __fmul_rn(__fsub_rn(x[off + c], mu), rs);
    dx[off + c] = __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mg), __fmul_rn(xh, mgx)));
  }
}
struct NormGradOp {  // v0 = dy xh, v1 = dy
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  int d, G, m;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    const size_t k = size_t(r) * G + c / m;
    v0 = double(__fmul_rn(dy[i], __fmul_rn(__fsub_rn(x[i], mean[k]), rstd[k])));
    v1 = double(dy[i]);
  }
};

unsigned col_blocks(int d) { return unsigned((d + kThreads - 1) / kThreads); }

}  // namespace

void column_stats(const float* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq, cudaStream_t s) {
  PN_LAUNCH(count_rows_kernel, 1, kThreads, 0, s)(mask, rows, count);
  PN_LAUNCHED();
  column_reduce(StatsOp{x, shift, d}, mask, rows, d, sum, sumsq, s);
}

void column_dot(const float* a, const float* b, const uint8_t* mask, int rows, int d,
                const double* shift, double* sum_a, double* sum_ab, cudaStream_t s) {
  column_reduce(DotOp{a, b, shift, d}, mask, rows, d, sum_a, sum_ab, s);
}

void column_affine(const float* x, int rows, int d, const double* shift, const double* scale,
                   const float* gamma, const float* beta, float* y, uint16_t* y16,
                   cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  float* co = scratch_as<float>(kSlotCoeffs, 3 * size_t(d), s);
  PN_LAUNCH(affine_coeffs_kernel, col_blocks(d), kThreads, 0, s)(d, shift, scale, gamma, beta, co);
  PN_LAUNCHED();
  PN_LAUNCH(affine_apply_kernel, map_grid(rows, d), dim3(kColTile, kMapRows), 0, s)(
      x, rows, d, co, y, y16);
  PN_LAUNCHED();
}

void column_norm_backward(const float* x, const float* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const float* gamma,
                          const double* a, const double* b, float* dx, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  float* co = scratch_as<float>(kSlotCoeffs, 4 * size_t(d), s);
  PN_LAUNCH(backward_coeffs_kernel, col_blocks(d), kThreads, 0, s)(
      d, shift, scale, gamma, a, b, co);
  PN_LAUNCHED();
  PN_LAUNCH(backward_apply_kernel, map_grid(rows, d), dim3(kColTile, kMapRows), 0, s)(
      x, dy, mask, rows, d, co, dx);
  PN_LAUNCHED();
}

void rowgroup_rms_forward(const float* x, int rows, int d, int G, float eps, const float* gamma,
                          float* y, uint16_t* y16, float* rinv, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  PN_LAUNCH(rms_forward_kernel, warp_blocks((long long)rows * G), kThreads, 0, s)(
      x, rows, d, G, eps, gamma, y, y16, rinv);
  PN_LAUNCHED();
}

void rowgroup_rms_backward(const float* x, const float* dy, const float* rinv, const float* gamma,
                           const uint8_t* mask, int rows, int d, int G, float* dx, float* dgamma,
                           cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  PN_LAUNCH(rms_backward_kernel, warp_blocks((long long)rows * G), kThreads, 0, s)(
      x, dy, rinv, gamma, mask, rows, d, G, dx);
  PN_LAUNCHED();
  if (dgamma)
    column_reduce(RmsGradOp{x, dy, rinv, d, G, d / G}, mask, rows, d, dgamma,
                  static_cast<float*>(nullptr), s);
}

void rowgroup_norm_forward(const float* x, int rows, int d, int G, float eps, const float* gamma,
                           const float* beta, float* y, uint16_t* y16, float* mean, float* rstd,
                           cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  PN_LAUNCH(norm_forward_kernel, warp_blocks((long long)rows * G), kThreads, 0, s)(
      x, rows, d, G, eps, gamma, beta, y, y16, mean, rstd);
  PN_LAUNCHED();
}

void rowgroup_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                            const float* gamma, const uint8_t* mask, int rows, int d, int G,
                            float* dx, float* dgamma, float* dbeta, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  PN_LAUNCH(norm_backward_kernel, warp_blocks((long long)rows * G), kThreads, 0, s)(
      x, dy, mean, rstd, gamma, mask, rows, d, G, dx);
  PN_LAUNCHED();
  if (dgamma || dbeta)
    column_reduce(NormGradOp{x, dy, mean, rstd, d, G, d / G}, mask, rows, d, dgamma, dbeta, s);
}

void layernorm_forward(const float* x, int rows, int d, const float* gamma, const float* beta,
                       float eps, float* y, uint16_t* y16, float* mean, float* rstd,
                       cudaStream_t s) {
  rowgroup_norm_forward(x, rows, d, 1, eps, gamma, beta, y, y16, mean, rstd, s);
}

void layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                        const float* gamma, const uint8_t* mask, int rows, int d, float* dx,
                        float* dgamma, float* dbeta, cudaStream_t s) {
  rowgroup_norm_backward(x, dy, mean, rstd, gamma, mask, rows, d, 1, dx, dgamma, dbeta, s);
}

}  // namespace pn::cuda
