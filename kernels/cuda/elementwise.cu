// Element-wise kernels, embedding, dropout, Adam and the whole-buffer reductions on the GPU.
// Each is one grid-stride loop over the elements; the math is the CPU kernel's (kernels/cpu/
// elementwise.cpp, adam.cpp), written with __fmul_rn/__fadd_rn where the CPU result is two
// separately rounded operations, so that nvcc's FMA contraction does not change the rounding.
#include <cmath>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

#define PN_GRID_STRIDE(i, n)                                              \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += size_t(gridDim.x) * blockDim.x)

// A grid-stride loop applying f(i) to every index: the kernels below are one-line lambdas.
template <class F>
__global__ void for_each_kernel(size_t n, F f) {
  PN_GRID_STRIDE(i, n) f(i);
}
template <class F>
void for_each(size_t n, cudaStream_t s, F f) {
  if (n == 0) return;
  PN_LAUNCH(for_each_kernel, blocks_for(n), kThreads, 0, s)(n, f);
  PN_LAUNCHED();
}

// splitmix64, as kernels/cpu/elementwise.cpp: mask bit i depends only on (seed, i).
__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// ---- whole-buffer reductions: two levels over a partition fixed by n --------------------------
// Level 1: block b sums elements [b*chunk, (b+1)*chunk) (threads strided, in double), then the
// block sum in fixed order; level 2: one block adds the block sums in fixed order. unless: null,
// or a device value: where it is finite the sum is 0 and nothing is read.
constexpr int kReduceBlocks = 1024;

template <class Load>
__global__ void range_partials_kernel(size_t n, size_t chunk, Load load, const double* unless,
                                      double* part) {
  __shared__ double sh[kThreads / 32];
  if (unless && isfinite(*unless)) {  // uniform over the grid
    if (threadIdx.x == 0) part[blockIdx.x] = 0;
    return;
  }
  const size_t lo = blockIdx.x * chunk;
  const size_t hi = lo + chunk < n ? lo + chunk : n;
  double acc = 0;
  // Unrolled so that eight loads are in flight at once; the sum keeps its order.
#pragma unroll 8
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += load(i);
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}
__global__ void sum_partials_kernel(const double* part, int nblocks, double* out) {
  __shared__ double sh[kThreads / 32];
  double acc = 0;
  for (int i = threadIdx.x; i < nblocks; i += blockDim.x) acc += part[i];
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) *out = acc;
}
template <class Load>
void range_sum(size_t n, Load load, double* out, cudaStream_t s, const double* unless = nullptr) {
  const size_t per = size_t(kThreads) * 8;  // at least 8 elements per thread
  size_t nb = (n + per - 1) / per;
  if (nb > kReduceBlocks) nb = kReduceBlocks;
  if (nb == 0) nb = 1;
  const size_t chunk = (n + nb - 1) / nb;
  double* part = scratch_as<double>(kSlotRows, nb, s);
  PN_LAUNCH(range_partials_kernel, unsigned(nb), kThreads, 0, s)(n, chunk, load, unless, part);
  PN_LAUNCHED();
  PN_LAUNCH(sum_partials_kernel, 1, kThreads, 0, s)(part, int(nb), out);
  PN_LAUNCHED();
}

}  // namespace

void fill(float* x, size_t n, float value, cudaStream_t s) {
  if (value == 0.f && !std::signbit(value)) {  // +0 is all zero bits: a memset
    if (n) CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), s));
    return;
  }
  for_each(n, s, [=] __device__(size_t i) { x[i] = value; });
}
void copy(const float* x, size_t n, float* y, cudaStream_t s) {
  if (n) CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
}
void add_inplace(float* y, const float* x, size_t n, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { y[i] += x[i]; });
}
void add(const float* a, const float* b, size_t n, float* y, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { y[i] = a[i] + b[i]; });
}
void scale_inplace(float* y, size_t n, float a, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { y[i] *= a; });
}
void add_bias(float* y, const float* b, int rows, int cols, cudaStream_t s) {
  for_each(size_t(rows) * cols, s, [=] __device__(size_t i) { y[i] += b[i % cols]; });
}

namespace {
__device__ __forceinline__ float widened(float v) { return v; }
__device__ __forceinline__ float widened(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
template <class D>
struct BiasGradOp {  // v0 = dy[r, c] (a bf16 widened)
  const D* dy;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    v0 = double(widened(dy[size_t(r) * d + c]));
    v1 = 0;
  }
};
// The ReLU's output y > 0: from y itself, or from its bf16 rounding's bits (0x0001, the least
// denormal, to 0x7f80, +Inf).
__device__ __forceinline__ bool positive(const float* y, size_t i) { return y[i] > 0.f; }
__device__ __forceinline__ bool positive(const uint16_t* y16, size_t i) {
  return y16[i] >= 0x0001u && y16[i] <= 0x7f80u;
}
// v0 = dy[r, c] (y[r, c] > 0), written back into dy as it is read: the ReLU's mask and the bias
// gradient in one pass (the column reduction visits every element exactly once), the sums those
// of bias_grad over the masked dy.
struct ReluBiasGradOp {
  const float* y;
  float* dy;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    const float g = positive(y, i) ? dy[i] : 0.f;
    dy[i] = g;
    v0 = double(g);
    v1 = 0;
  }
};
void relu_mask_bias_grad(const float* y, float* dy, int rows, int cols, float* db,
                         cudaStream_t s) {
  if (db)
    column_reduce(ReluBiasGradOp{y, dy, cols}, nullptr, rows, cols, db,
                  static_cast<float*>(nullptr), s);
  else
    for_each(size_t(rows) * cols, s,
             [=] __device__(size_t i) { dy[i] = positive(y, i) ? dy[i] : 0.f; });
}
}  // namespace
void bias_grad(const float* dy, int rows, int cols, float* db, cudaStream_t s) {
  column_reduce(BiasGradOp<float>{dy, cols}, nullptr, rows, cols, db,
                static_cast<float*>(nullptr), s);
}
void bias_grad_bf16(const uint16_t* dy16, int rows, int cols, float* db, cudaStream_t s) {
  column_reduce(BiasGradOp<uint16_t>{dy16, cols}, nullptr, rows, cols, db,
                static_cast<float*>(nullptr), s);
}

// y = bf16(x), nearest even. Eight values a thread where x and y are 16-byte aligned: two
// 16-byte loads in flight before one 16-byte store (one value a thread moves half the bytes a
// copy does in the same time); the rest one a thread.
__global__ void to_bf16_by8_kernel(const float4* x, size_t n8, uint4* y) {
  PN_GRID_STRIDE(i, n8) {
    const float4 a = x[2 * i], b = x[2 * i + 1];
    union {
      __nv_bfloat162 h[4];
      uint4 u;
    } v;
    v.h[0] = __floats2bfloat162_rn(a.x, a.y), v.h[1] = __floats2bfloat162_rn(a.z, a.w);
    v.h[2] = __floats2bfloat162_rn(b.x, b.y), v.h[3] = __floats2bfloat162_rn(b.z, b.w);
    y[i] = v.u;
  }
}
void to_bf16(const float* x, size_t n, __nv_bfloat16* y, cudaStream_t s) {
  const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  const size_t n8 = aligned ? n / 8 : 0;
  if (n8) {
    PN_LAUNCH(to_bf16_by8_kernel, blocks_for(n8), kThreads, 0, s)(
        reinterpret_cast<const float4*>(x), n8, reinterpret_cast<uint4*>(y));
    PN_LAUNCHED();
  }
  const size_t done = 8 * n8;
  for_each(n - done, s, [=] __device__(size_t i) { y[done + i] = __float2bfloat16_rn(x[done + i]); });
}
void from_bf16(const __nv_bfloat16* x, size_t n, float* y, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { y[i] = __bfloat162float(x[i]); });
}

// y16 <- g16 where y16 > 0, else 0, 8 values a thread (two 16-byte loads, one store).
__global__ void relu_backward_bf16_by8_kernel(uint4* y16, const uint4* g16, size_t n8) {
  PN_GRID_STRIDE(i, n8) {
    union {
      uint4 u;
      uint16_t h[8];
    } y{y16[i]}, g{g16[i]};
#pragma unroll
    for (int j = 0; j < 8; ++j) y.h[j] = positive(y.h, j) ? g.h[j] : uint16_t(0);
    y16[i] = y.u;
  }
}
void relu_forward(const float* x, size_t n, float* y, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { y[i] = x[i] > 0.f ? x[i] : 0.f; });
}
void relu_backward(const float* y, const float* dy, size_t n, float* dx, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { dx[i] = y[i] > 0.f ? dy[i] : 0.f; });
}

// One block per destination row; its threads copy the row in words of W bytes (4 when every
// address and length allows it, else 1).
namespace {
template <class W>
__global__ void gather_rows_kernel(const W* src, size_t src_stride, const int32_t* from,
                                   size_t words, W* dst, size_t dst_stride) {
  const size_t r = blockIdx.x;
  const W* s = src + size_t(from ? from[r] : int32_t(r)) * src_stride;
  W* d = dst + r * dst_stride;
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
}
}  // namespace
void gather_rows(const void* src, size_t src_stride, const int32_t* from, int rows, size_t bytes,
                 void* dst, size_t dst_stride, cudaStream_t s) {
  if (rows == 0 || bytes == 0) return;
  const bool words = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                      src_stride | dst_stride | bytes) % 4 == 0;
  if (words)
    PN_LAUNCH(gather_rows_kernel, rows, kThreads, 0, s)(
        static_cast<const uint32_t*>(src), src_stride / 4, from, bytes / 4,
        static_cast<uint32_t*>(dst), dst_stride / 4);
  else
    PN_LAUNCH(gather_rows_kernel, rows, kThreads, 0, s)(
        static_cast<const uint8_t*>(src), src_stride, from, bytes, static_cast<uint8_t*>(dst),
        dst_stride);
  PN_LAUNCHED();
}

void dropout_mask(const uint64_t* step_seed, uint64_t site, size_t n, float p, uint8_t* keep,
                  cudaStream_t s) {
  // The threshold is computed on the host exactly as on the CPU; each thread reads the seed (a
  // CUDA graph replays the launch with the seed of the replay's micro-step).
  const uint64_t threshold = uint64_t(double(p) * 18446744073709551616.0);
  for_each(n, s, [=] __device__(size_t i) {
    const uint64_t base = splitmix64(*step_seed + site);
    keep[i] = splitmix64(base ^ (uint64_t(i) * 0xD6E8FEB86659FD93ull)) >= threshold;
  });
}
void dropout_apply(float* x, const uint8_t* keep, size_t n, float p, cudaStream_t s) {
  const float k = 1.0f / (1.0f - p);
  for_each(n, s, [=] __device__(size_t i) { x[i] = keep[i] ? x[i] * k : 0.f; });
}

// table[p, i] = sin(p w_i), table[p, half + i] = cos(p w_i), w_i = exp(-i ln(10000)/(half-1)),
// computed in double as on the CPU; an odd d leaves its last column 0.
void sinusoidal_positions(int max_len, int d, float* table, cudaStream_t s) {
  const int half = d / 2;
  const double step = half > 1 ? std::log(10000.0) / (half - 1) : 0.0;
  for_each(size_t(max_len) * d, s, [=] __device__(size_t idx) {
    const int p = int(idx / d), c = int(idx % d);
    if (c >= 2 * half) {
      table[idx] = 0.f;
      return;
    }
    const int i = c < half ? c : c - half;
    const double w = exp(-step * i);
    table[idx] = float(c < half ? sin(p * w) : cos(p * w));
  });
}

// y[i, c] = scale E[tok[i], c] + P[i mod seq_len, c]
void embedding_forward(const int32_t* tok, int rows, int seq_len, const float* E, const float* P,
                       int d, float scale, float* y, cudaStream_t s) {
  for_each(size_t(rows) * d, s, [=] __device__(size_t idx) {
    const size_t i = idx / d, c = idx % d;
    y[idx] = __fadd_rn(__fmul_rn(scale, E[size_t(tok[i]) * d + c]), P[(i % seq_len) * d + c]);
  });
}

// dE[tok[i], c] += scale dy[i, c]: one thread per column walks the rows in order, so repeated
// tokens add up in the CPU kernel's order with no atomics (parallel over d only; it is a small
// cost beside the output projection's GEMM).
namespace {
// dE[tok[i]] += scale * dy[i], parallel and deterministic. A stable radix sort of (token, row)
// pairs lists each token's rows in ascending row order; one thread per (token, column) then adds
// them serially in that order, which is the CPU kernel's order, so the result equals it bit for
// bit. No atomics: repeated tokens never race.
__global__ void iota_kernel(int32_t* v, int n) {
  PN_GRID_STRIDE(i, size_t(n)) v[i] = int32_t(i);
}
// The first block of each token's run of sorted rows adds the run's rows in row order (the
// CPU's order, so the sums are its bits). A frequent token's run is long (the most frequent
// word of a 16K-token batch: hundreds of rows): its end is found by bisection, and its rows are
// read kRunStage at a time before they are added, so that their loads are in flight together
// rather than one memory round trip a row.
constexpr int kRunStage = 8;
__global__ void embedding_backward_sorted_kernel(const int32_t* key, const int32_t* row, int rows,
                                                 const float* dy, int d, float scale, float* dE) {
  const int j = blockIdx.x;  // position in sorted order (gridDim.x allows 2^31-1 rows)
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const int32_t t = key[j];
  if (j > 0 && key[j - 1] == t) return;  // only the first row of each token's run works
  int lo = j + 1, hi = rows;  // the run's end: the first k > j with key[k] != t (keys sorted)
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (key[mid] == t)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int end = lo;
  float* e = dE + size_t(t) * d + c;
  float acc = *e;
  int k = j;
  for (; k + kRunStage <= end; k += kRunStage) {
    float v[kRunStage];
#pragma unroll
    for (int u = 0; u < kRunStage; ++u) v[u] = dy[size_t(row[k + u]) * d + c];
#pragma unroll
    for (int u = 0; u < kRunStage; ++u) acc = __fadd_rn(acc, __fmul_rn(scale, v[u]));
  }
  for (; k < end; ++k) acc = __fadd_rn(acc, __fmul_rn(scale, dy[size_t(row[k]) * d + c]));
  *e = acc;
}
}  // namespace
void embedding_backward(const int32_t* tok, int rows, const float* dy, int d, float scale,
                        float* dE, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  // One scratch block: sorted keys, rows in, rows sorted, then CUB's temporary storage.
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tok, (int32_t*)nullptr,
                                             (const int32_t*)nullptr, (int32_t*)nullptr, rows,
                                             0, 32, s));
  const size_t ints = (3 * size_t(rows) + 63) / 64 * 64;  // 256-byte aligned temporary storage
  int32_t* base = scratch_as<int32_t>(kSlotSort, ints + (temp_bytes + 3) / 4, s);
  int32_t *key = base, *row_in = base + rows, *row = base + 2 * size_t(rows);
  PN_LAUNCH(iota_kernel, blocks_for(rows), kThreads, 0, s)(row_in, rows);
  PN_LAUNCHED();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + ints, temp_bytes, tok, key, row_in, row, rows,
                                             0, 32, s));
  const dim3 grid(rows, (d + 127) / 128);
  PN_LAUNCH(embedding_backward_sorted_kernel, grid, 128, 0, s)(key, row, rows, dy, d, scale, dE);
  PN_LAUNCHED();
}

// Adam, as kernels/cpu/adam.cpp, on g = (grad scale) clip:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) + lr wd p
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float scale,
                 float clip, float lr, float beta1, float beta2, float eps, float weight_decay,
                 int64_t t, cudaStream_t s) {
  const float bc1 = 1.0f - float(std::pow(double(beta1), double(t)));
  const float bc2 = 1.0f - float(std::pow(double(beta2), double(t)));
  const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = lr * weight_decay;
  for_each(n, s, [=] __device__(size_t i) {
    const float gi = __fmul_rn(__fmul_rn(g[i], scale), clip);
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps) + decay * p[i];
  });
}

void sum_squares(const float* x, size_t n, double* out, cudaStream_t s) {
  range_sum(
      n, [=] __device__(size_t i) { return double(x[i]) * double(x[i]); }, out, s);
}
void count_nonfinite(const float* x, size_t n, double* out, cudaStream_t s,
                     const double* unless) {
  range_sum(
      n, [=] __device__(size_t i) { return isfinite(x[i]) ? 0.0 : 1.0; }, out, s, unless);
}
double sum_squares_host(const float* x, size_t n, cudaStream_t s) {
  double* d_out = scratch_as<double>(kSlotCoeffs, 1, s);
  sum_squares(x, n, d_out, s);
  double h = 0;
  CUDA_CHECK(cudaMemcpyAsync(&h, d_out, sizeof h, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return h;
}
bool all_finite_host(const float* x, size_t n, cudaStream_t s) {
  double* d_out = scratch_as<double>(kSlotCoeffs, 1, s);
  count_nonfinite(x, n, d_out, s);
  double h = 0;
  CUDA_CHECK(cudaMemcpyAsync(&h, d_out, sizeof h, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return h == 0;
}


// ---- fused passes and device-resident sums (the CPU kernels' math, one pass each) -----------
void bias_relu_forward(float* y, const float* b, int rows, int cols, cudaStream_t s) {
  const size_t n = size_t(rows) * cols;
  for_each(n, s, [=] __device__(size_t i) {
    const float v = y[i] + b[i % cols];
    y[i] = v > 0.f ? v : 0.f;
  });
}
void relu_backward_bias_grad(const float* y, float* dy, int rows, int cols, float* db,
                             cudaStream_t s) {
  relu_mask_bias_grad(y, dy, rows, cols, db, s);
}
void relu_backward_round_bf16(uint16_t* y16, const float* dy, size_t n, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) {
    const float g = positive(y16, i) ? dy[i] : 0.f;
    reinterpret_cast<__nv_bfloat16*>(y16)[i] = __float2bfloat16_rn(g);
  });
}
void relu_backward_bf16(uint16_t* y16, const uint16_t* g16, size_t n, cudaStream_t s) {
  const bool aligned =
      (reinterpret_cast<uintptr_t>(y16) | reinterpret_cast<uintptr_t>(g16)) % 16 == 0;
  const size_t n8 = aligned ? n / 8 : 0;
  if (n8) {
    PN_LAUNCH(relu_backward_bf16_by8_kernel, blocks_for(n8), kThreads, 0, s)(
        reinterpret_cast<uint4*>(y16), reinterpret_cast<const uint4*>(g16), n8);
    PN_LAUNCHED();
  }
  const size_t done = 8 * n8;
  for_each(n - done, s, [=] __device__(size_t i) {
    y16[done + i] = positive(y16, done + i) ? g16[done + i] : uint16_t(0);
  });
}
void round_bf16(const float* x, size_t n, uint16_t* y, cudaStream_t s) {
  to_bf16(x, n, reinterpret_cast<__nv_bfloat16*>(y), s);
}
void dropout_add(const float* a, const float* b, const uint8_t* keep, float p, size_t n,
                 float* y, cudaStream_t s) {
  if (!keep) return add(a, b, n, y, s);
  const float sc = 1.f / (1.f - p);
  for_each(n, s, [=] __device__(size_t i) { y[i] = __fadd_rn(a[i], keep[i] ? __fmul_rn(b[i], sc) : 0.f); });
}
void dropout_copy(const float* x, const uint8_t* keep, float p, size_t n, float* y,
                  cudaStream_t s) {
  if (!keep) return copy(x, n, y, s);
  const float sc = 1.f / (1.f - p);
  for_each(n, s, [=] __device__(size_t i) { y[i] = keep[i] ? __fmul_rn(x[i], sc) : 0.f; });
}
void fill(double* x, size_t n, double value, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { x[i] = value; });
}
void add_inplace(double* y, const double* x, size_t n, cudaStream_t s) {
  for_each(n, s, [=] __device__(size_t i) { y[i] += x[i]; });
}
void inverse_sqrt_eps(const double* var, int d, double eps, double* inv, cudaStream_t s) {
  for_each(size_t(d > 0 ? d : 0), s, [=] __device__(size_t c) { inv[c] = 1.0 / sqrt(var[c] + eps); });
}
void grad_stats_acc(const float* x, size_t n, double* out, cudaStream_t s) {
  double* tmp = scratch_as<double>(kSlotSums, 2, s);
  sum_squares(x, n, tmp, s);
  // A square of a float is finite in double, and so is a sum of them: the sum is finite
  // exactly when every value is, and then the count is 0 without a second read of x.
  count_nonfinite(x, n, tmp + 1, s, tmp);
  add_inplace(out, tmp, 2, s);
}

}  // namespace pn::cuda
