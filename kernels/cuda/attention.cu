// Causal multi-head attention on the GPU: cuBLAS strided-batched GEMMs (one call per head,
// batched over the sequences) around a fused masked softmax, one warp per row of scores.
//   S = Q K^T / sqrt(dh);  P = softmax over j <= i (0 for j > i);  ctx = P V
// Backward: dP = dctx V^T; dS = P * (dP - rowsum(P * dP)); dQ = dS K / sqrt(dh);
//           dK = dS^T Q / sqrt(dh); dV = P^T dctx.
// Layouts as kernels/kernels.h: qkv [nseq*T, 3d] (q | k | v, heads of dh = d/H side by side),
// probs and scratch [nseq, H, T, T], ctx [nseq*T, d]. The GEMM of head h over the sequences
// walks q with stride T*3d and P with stride H*T*T.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row

// Row i of a T x T block (rows numbered over all blocks): P[i, j] = exp(S - max) / sum for
// j <= i, 0 beyond.
__global__ void causal_softmax_kernel(float* P, long long nrows, int T) {
  const long long row = blockIdx.x * (long long)kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= nrows) return;
  const int lane = threadIdx.x & 31;
  const int i = int(row % T);
  float* p = P + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j <= i; j += 32) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) p[j] = j <= i ? p[j] * inv : 0.f;
}

// dS = P * (dP - sum_j P dP) on j <= i, 0 beyond; dS overwrites dP.
__global__ void causal_softmax_backward_kernel(const float* P, float* dS, long long nrows, int T) {
  const long long row = blockIdx.x * (long long)kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= nrows) return;
  const int lane = threadIdx.x & 31;
  const int i = int(row % T);
  const float* p = P + row * T;
  float* g = dS + row * T;
  float dot = 0.f;
  for (int j = lane; j <= i; j += 32) dot += p[j] * g[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) g[j] = j <= i ? p[j] * (g[j] - dot) : 0.f;
}

unsigned row_blocks(long long nrows) { return unsigned((nrows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void attention_forward(Blas& b, const float* qkv, int nseq, int T, int d, int heads, float* probs,
                       float* ctx) {
  if (nseq == 0 || T == 0) return;
  const int dh = d / heads, ld = 3 * d;
  const float scale = 1.0f / std::sqrt(float(dh));
  const long long sq = (long long)T * ld, sp = (long long)heads * T * T, sc = (long long)T * d;
  for (int h = 0; h < heads; ++h) {
    const float* q = qkv + size_t(h) * dh;
    float* P = probs + size_t(h) * T * T;
    gemm_strided_batched(b, false, true, T, T, dh, scale, q, ld, sq, q + d, ld, sq, 0.f, P, T,
                         sp, nseq);
  }
  const long long nrows = (long long)nseq * heads * T;
  causal_softmax_kernel<<<row_blocks(nrows), kThreads, 0, b.stream>>>(probs, nrows, T);
  PN_LAUNCHED();
  for (int h = 0; h < heads; ++h) {
    const float* v = qkv + size_t(h) * dh + 2 * size_t(d);
    gemm_strided_batched(b, false, false, T, dh, T, 1.f, probs + size_t(h) * T * T, T, sp, v, ld,
                         sq, 0.f, ctx + size_t(h) * dh, d, sc, nseq);
  }
}

void attention_backward(Blas& b, const float* qkv, const float* probs, const float* dctx,
                        int nseq, int T, int d, int heads, float* dqkv, float* scratch) {
  if (nseq == 0 || T == 0) return;
  const int dh = d / heads, ld = 3 * d;
  const float scale = 1.0f / std::sqrt(float(dh));
  const long long sq = (long long)T * ld, sp = (long long)heads * T * T, sc = (long long)T * d;
  for (int h = 0; h < heads; ++h) {  // dP = dctx V^T
    const float* v = qkv + size_t(h) * dh + 2 * size_t(d);
    gemm_strided_batched(b, false, true, T, T, dh, 1.f, dctx + size_t(h) * dh, d, sc, v, ld, sq,
                         0.f, scratch + size_t(h) * T * T, T, sp, nseq);
  }
  const long long nrows = (long long)nseq * heads * T;
  causal_softmax_backward_kernel<<<row_blocks(nrows), kThreads, 0, b.stream>>>(probs, scratch,
                                                                               nrows, T);
  PN_LAUNCHED();
  for (int h = 0; h < heads; ++h) {
    const size_t off = size_t(h) * dh;
    const float* q = qkv + off;
    const float* k = q + d;
    const float* dS = scratch + size_t(h) * T * T;
    const float* P = probs + size_t(h) * T * T;
    float* dq = dqkv + off;
    gemm_strided_batched(b, false, false, T, dh, T, scale, dS, T, sp, k, ld, sq, 0.f, dq, ld, sq,
                         nseq);
    gemm_strided_batched(b, true, false, T, dh, T, scale, dS, T, sp, q, ld, sq, 0.f, dq + d, ld,
                         sq, nseq);
    gemm_strided_batched(b, true, false, T, dh, T, 1.f, P, T, sp, dctx + off, d, sc, 0.f,
                         dq + 2 * size_t(d), ld, sq, nseq);
  }
}

}  // namespace pn::cuda
