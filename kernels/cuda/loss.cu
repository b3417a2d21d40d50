// Label-smoothed cross-entropy fused with the output softmax, one block per row of logits
// (the formula of kernels/cpu/loss.cpp, fairseq's definition):
//   lp = log_softmax(z);  nll = -lp[t];  smooth = -sum_j lp[j] = V lse - sum_j z_j;
//   eps_i = eps / (V - 1);  loss = (1 - eps - eps_i) nll + eps_i smooth
//   dloss/dz = softmax(z) - q,  q_j = eps_i + (1 - eps - eps_i) [j == t]   (times grad_scale),
//   softmax(z)_j = exp(z_j - max) / sum_k exp(z_k - max)
// Per row: max, sum exp(z - max) and sum z in double in one pass (block reductions in fixed
// order), then the gradient overwrites the row (in fp32, or as its bf16 rounding where the output GEMMs
// read bf16), its padding [V, ld) set to 0 (the output layer's GEMMs over a padded vocabulary
// read it). Row losses go to a per-row array that one block sums in
// row order, so the totals are deterministic. Masked rows contribute nothing and get dz = 0.
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

// Thread 0 writes row_out's {loss_i, nll_i, 1} from the row's max mx, sum exp(z - mx) se,
// sum z sz and target logit zt (the formula above).
__device__ __forceinline__ void put_row_loss(double* out, float mx, double se, double sz, float zt,
                                             int V, float eps) {
  if (threadIdx.x != 0) return;
  const double lse = double(mx) + log(se);
  const double eps_i = V > 1 ? double(eps) / (V - 1) : 0.0;
  const double nll = lse - double(zt);
  out[0] = (1.0 - eps - eps_i) * nll + eps_i * (V * lse - sz);
  out[1] = nll;
  out[2] = 1;
}

// dloss/dz_j times grad_scale for a column j below V, softmax as the CPU forms it: exp(z - max)
// times the float reciprocal of the double sum.
struct XentGrad {
  float mx, inv_sum, eps, eps_f, scale;
  __device__ XentGrad(float mx_, double se, int V, float eps_, float grad_scale)
      : mx(mx_), inv_sum(float(1.0 / se)), eps(eps_), eps_f(V > 1 ? eps_ / float(V - 1) : 0.f),
        scale(grad_scale) {}
  __device__ float operator()(float z, bool target) const {
    float g = scale * (expf(z - mx) * inv_sum - eps_f);
    if (target) g -= scale * (1.f - eps - eps_f);
    return g;
  }
};

// row_out[i] = {loss_i, nll_i, 1} (zeros on masked rows). Two passes over the row: the first
// takes the max, sum exp(z - max) and sum z together (each thread's sum of exponentials is
// rescaled when its running max grows, then to the row's max), the second writes the gradient
// over the row: in fp32, or (kBf16) as its bf16 roundings in the first half of the row's bytes.
// Value j's two bytes land on value j / 2, so the second pass goes in stages of kStage
// stretches of blockDim values in ascending order, each read whole (its loads in flight
// together) before any of its values is written. kIn16 (with kBf16): the logits are bf16, rows
// ld apart, and each gradient value overwrites its own logit (no stage waits for another).
constexpr int kStage = 8;
template <bool kGrad, bool kBf16, bool kIn16>
__global__ void xent_row_kernel(float* logits, const int32_t* target, const uint8_t* mask, int V,
                                int ld, float eps, float grad_scale, double* row_out) {
  static_assert(!kIn16 || kBf16, "bf16 logits take a bf16 gradient");
  __shared__ double shd[kThreads / 32];
  __shared__ float shf[kThreads / 32];
  const int i = blockIdx.x;
  float* z = logits + size_t(i) * ld;  // unread with kIn16
  __nv_bfloat16* z16 = kIn16 ? reinterpret_cast<__nv_bfloat16*>(logits) + size_t(i) * ld
                             : reinterpret_cast<__nv_bfloat16*>(z);
  const auto load = [&](int j) { return kIn16 ? __bfloat162float(z16[j]) : z[j]; };
  auto put = [&](int j, float g) {
    if (kBf16)
      z16[j] = __float2bfloat16_rn(g);
    else
      z[j] = g;
  };
  double* out = row_out + size_t(i) * 3;
  if (mask && !mask[i]) {
    if (kGrad)
      for (int j = threadIdx.x; j < ld; j += blockDim.x) put(j, 0.f);
    if (threadIdx.x == 0) out[0] = out[1] = out[2] = 0;
    return;
  }
  float m = -INFINITY;  // this thread's running max; se: its sum of exp(z - m)
  double se = 0, sz = 0;
#pragma unroll 4
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = load(j);
    if (v > m) se *= exp(double(m) - double(v)), m = v;
    se += double(expf(v - m));
    sz += double(v);
  }
  const float mx = block_max(m, shf);
  se = block_sum(m == -INFINITY ? 0.0 : se * exp(double(m) - double(mx)), shd);
  sz = block_sum(sz, shd);
  const int t = target[i];
  put_row_loss(out, mx, se, sz, load(t), V, eps);
  if (!kGrad) return;
  __syncthreads();  // every thread has read z[t]
  const XentGrad grad(mx, se, V, eps, grad_scale);  // the padding [V, ld) gets no gradient
  for (int j0 = 0; j0 < ld; j0 += kStage * blockDim.x) {
    float g[kStage];
#pragma unroll
    for (int u = 0; u < kStage; ++u) {
      const int j = j0 + u * blockDim.x + threadIdx.x;
      g[u] = j < V ? grad(load(j), j == t) : 0.f;
    }
    if (kBf16 && !kIn16) __syncthreads();  // the stage read whole before it is overwritten
#pragma unroll
    for (int u = 0; u < kStage; ++u) {
      const int j = j0 + u * blockDim.x + threadIdx.x;
      if (j < ld) put(j, g[u]);
    }
  }
}

// The same for bf16 logits whose gradient overwrites them (kIn16), the row held in registers:
// each thread loads its 16-byte pieces of the row (8 values each; pieces threadIdx.x + u
// blockDim) once, takes the row's max, then sum exp(z - max) and sum z in double from its
// registers, and writes the gradient from them: one read and one write of the row where the
// kernel above reads it twice. For rows of at most kPieces * kBlock * 8 values, ld a multiple of
// 8 and the rows 16-byte aligned; blocks of kBlock threads.
template <int kPieces, int kBlock>
__global__ void __launch_bounds__(kBlock)
    xent_row_bf16_regs_kernel(__nv_bfloat16* logits, const int32_t* target, const uint8_t* mask,
                              int V, int ld, float eps, float grad_scale, double* row_out) {
  __shared__ double shd[kBlock / 32];
  __shared__ float shf[kBlock / 32];
  union Piece {
    uint4 u;
    __nv_bfloat16 h[8];
  };
  const int i = blockIdx.x, pieces = ld / 8;
  uint4* row = reinterpret_cast<uint4*>(logits + size_t(i) * ld);
  double* out = row_out + size_t(i) * 3;
  if (mask && !mask[i]) {
    for (int q = threadIdx.x; q < pieces; q += blockDim.x) row[q] = uint4{};
    if (threadIdx.x == 0) out[0] = out[1] = out[2] = 0;
    return;
  }
  Piece z[kPieces];
#pragma unroll
  for (int u = 0; u < kPieces; ++u) {
    const int q = threadIdx.x + u * blockDim.x;
    z[u].u = q < pieces ? row[q] : uint4{};
  }
  // value e of piece u: column 8 (threadIdx.x + u blockDim) + e, live below V
  const auto live = [&](int u, int e) { return 8 * (threadIdx.x + u * blockDim.x) + e < V; };
  float m = -INFINITY;
#pragma unroll
  for (int u = 0; u < kPieces; ++u)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (live(u, e)) m = fmaxf(m, __bfloat162float(z[u].h[e]));
  const float mx = block_max(m, shf);
  double se = 0, sz = 0;
#pragma unroll
  for (int u = 0; u < kPieces; ++u)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (live(u, e)) {
        const float v = __bfloat162float(z[u].h[e]);
        se += double(expf(v - mx));
        sz += double(v);
      }
  se = block_sum(se, shd);
  sz = block_sum(sz, shd);
  const int t = target[i];
  put_row_loss(out, mx, se, sz, __bfloat162float(logits[size_t(i) * ld + t]), V, eps);
  __syncthreads();  // every thread has read z[t]
  const XentGrad grad(mx, se, V, eps, grad_scale);  // the padding [V, ld) gets no gradient
#pragma unroll
  for (int u = 0; u < kPieces; ++u) {
    const int q = threadIdx.x + u * blockDim.x;
    if (q >= pieces) continue;
    Piece g;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float v = live(u, e) ? grad(__bfloat162float(z[u].h[e]), 8 * q + e == t) : 0.f;
      g.h[e] = __float2bfloat16_rn(v);
    }
    row[q] = g.u;
  }
}

// sums[k] = sum over rows of row_out[i*3 + k], fixed order.
__global__ void xent_sum_kernel(const double* row_out, int rows, double* sums) {
  __shared__ double sh[kThreads / 32];
  for (int k = 0; k < 3; ++k) {
    double acc = 0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) acc += row_out[size_t(i) * 3 + k];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) sums[k] = acc;
  }
}

// xent_row_bf16_regs_kernel's shapes: 8 pieces a thread in blocks of 256 (rows of up to 16,384
// values), else 9 in blocks of 512 (up to 36,864 values; GPT-2's 50,257 take the kernel above).
// Both hold a thread's pieces in 128 registers without spilling (ptxas, sm_90), where 5 pieces
// in blocks of 1024 (64 registers) spill.
constexpr int kRegPiecesSmall = 8, kRegPieces = 9, kRegBlock = 512;

template <bool kGrad, bool kBf16 = false, bool kIn16 = false>
void xent(float* logits, const int32_t* target, const uint8_t* mask, int rows, int V, int ld,
          float eps, float grad_scale, double* sums, cudaStream_t s) {
  double* row_out = scratch_as<double>(kSlotRows, size_t(rows > 0 ? rows : 1) * 3, s);
  const bool in_regs = kGrad && kIn16 && ld % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                       ld / 8 <= kRegPieces * kRegBlock;
  if (rows > 0 && in_regs) {
    auto* z16 = reinterpret_cast<__nv_bfloat16*>(logits);
    if (ld / 8 <= kRegPiecesSmall * kThreads)
      PN_LAUNCH((xent_row_bf16_regs_kernel<kRegPiecesSmall, kThreads>), rows, kThreads, 0, s)(
          z16, target, mask, V, ld, eps, grad_scale, row_out);
    else
      PN_LAUNCH((xent_row_bf16_regs_kernel<kRegPieces, kRegBlock>), rows, kRegBlock, 0, s)(
          z16, target, mask, V, ld, eps, grad_scale, row_out);
    PN_LAUNCHED();
  } else if (rows > 0) {
    PN_LAUNCH((xent_row_kernel<kGrad, kBf16, kIn16>), rows, kThreads, 0, s)(
        logits, target, mask, V, ld, eps, grad_scale, row_out);
    PN_LAUNCHED();
  }
  PN_LAUNCH(xent_sum_kernel, 1, kThreads, 0, s)(row_out, rows, sums);
  PN_LAUNCHED();
}

}  // namespace

void softmax_xent(float* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                  int ld, float label_smoothing, float grad_scale, double* sums, cudaStream_t s) {
  xent<true>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale, sums, s);
}

void softmax_xent_eval(const float* logits, const int32_t* target, const uint8_t* mask, int rows,
                       int V, int ld, float label_smoothing, double* sums, cudaStream_t s) {
  // The eval instantiation never writes the logits.
  xent<false>(const_cast<float*>(logits), target, mask, rows, V, ld, label_smoothing, 0.f, sums,
              s);
}

k::LossSums loss_sums_host(const double* sums, cudaStream_t s) {
  double h[3];
  CUDA_CHECK(cudaMemcpyAsync(h, sums, sizeof h, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return {h[0], h[1], h[2]};
}


void softmax_xent_acc(float* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, float label_smoothing, float grad_scale, bool grad_bf16,
                      bool logits_bf16, double* sums, cudaStream_t s) {
  if (logits_bf16 && !grad_bf16)
    throw std::logic_error("softmax_xent_acc: bf16 logits with an fp32 gradient");
  double* tmp = scratch_as<double>(kSlotSums, 3, s);
  if (logits_bf16)
    xent<true, true, true>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale, tmp,
                           s);
  else if (grad_bf16)
    xent<true, true>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale, tmp, s);
  else
    softmax_xent(logits, target, mask, rows, V, ld, label_smoothing, grad_scale, tmp, s);
  add_inplace(sums, tmp, 3, s);
}
void softmax_xent_eval_acc(const float* logits, const int32_t* target, const uint8_t* mask,
                           int rows, int V, int ld, float label_smoothing, double* sums,
                           cudaStream_t s) {
  double* tmp = scratch_as<double>(kSlotSums, 3, s);
  softmax_xent_eval(logits, target, mask, rows, V, ld, label_smoothing, tmp, s);
  add_inplace(sums, tmp, 3, s);
}

namespace {
// x <- x - max - log(sum exp(x - max)) per row, one block per row; the sum in double.
__global__ void log_softmax_rows_kernel(float* x, int cols) {
  __shared__ double shd[kThreads / 32];
  __shared__ float shf[kThreads / 32];
  float* row = x + size_t(blockIdx.x) * cols;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, shf);
  double se = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) se += double(expf(row[j] - mx));
  se = block_sum(se, shd);
  const float lse = mx + float(log(se));
  __syncthreads();
  for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] -= lse;
}
}  // namespace

void log_softmax_rows(float* x, int rows, int cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  PN_LAUNCH(log_softmax_rows_kernel, rows, kThreads, 0, s)(x, cols);
  PN_LAUNCHED();
}

}  // namespace pn::cuda
