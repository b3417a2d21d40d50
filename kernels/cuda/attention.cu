// Causal multi-head attention on the GPU: cuBLAS strided-batched GEMMs (one call per head,
// batched over the sequences) around a fused masked softmax, one warp per row of scores.
//   S = Q K^T / sqrt(dh);  P = softmax over j <= i (0 for j > i);  ctx = P V
// Backward: dP = dctx V^T; dS = P * (dP - rowsum(P * dP)); dQ = dS K / sqrt(dh);
//           dK = dS^T Q / sqrt(dh); dV = P^T dctx.
// Layouts as kernels/ops.inc: qkv [nseq*T, 3d] (q | k | v, heads of dh = d/H side by side),
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

unsigned row_blocks(long long nrows) {
  return unsigned((nrows + kRowsPerBlock - 1) / kRowsPerBlock);
}

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
    gemm_strided_batched(b, false, true, T, T, dh, scale, q, ld, sq, q + d, ld, sq, 0.f, P, T, sp,
                         nseq);
  }
  const long long nrows = (long long)nseq * heads * T;
  PN_LAUNCH(causal_softmax_kernel, row_blocks(nrows), kThreads, 0, b.stream)(probs, nrows, T);
  PN_LAUNCHED();
  for (int h = 0; h < heads; ++h) {
    const float* v = qkv + size_t(h) * dh + 2 * size_t(d);
    gemm_strided_batched(b, false, false, T, dh, T, 1.f, probs + size_t(h) * T * T, T, sp, v, ld,
                         sq, 0.f, ctx + size_t(h) * dh, d, sc, nseq);
  }
}

void attention_backward(Blas& b, const float* qkv, const float* probs, const float* /*ctx*/,
                        const float* dctx, int nseq, int T, int d, int heads, float* dqkv,
                        float* scratch) {
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
  PN_LAUNCH(causal_softmax_backward_kernel, row_blocks(nrows), kThreads, 0, b.stream)(
      probs, scratch, nrows, T);
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
    gemm_strided_batched(b, true, false, T, dh, T, scale, dS, T, sp, q, ld, sq, 0.f, dq + d, ld, sq,
                         nseq);
    gemm_strided_batched(b, true, false, T, dh, T, 1.f, P, T, sp, dctx + off, d, sc, 0.f,
                         dq + 2 * size_t(d), ld, sq, nseq);
  }
}

// ---- general multi-head attention (kernels/ops.inc: mha_forward, mha_backward, attention_step)
// Key j is allowed for query i when (!causal || j <= i) and key_mask[s*tk + j] != 0; a row with
// no allowed key is all zero. Attention dropout: Pd = P keep / (1-p), written by the softmax
// kernel beside P. Rows are numbered ((s*H + h)*tq + i), one warp each.
namespace {

__device__ __forceinline__ bool key_allowed(bool causal, const uint8_t* km, int i, int j) {
  return (!causal || j <= i) && (!km || km[j]);
}

__global__ void mha_softmax_kernel(float* P, float* Pd, const uint8_t* key_mask,
                                   const uint8_t* keep, float inv_keep, bool causal,
                                   long long nrows, int heads, int tq, int tk) {
  const long long row = blockIdx.x * (long long)kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= nrows) return;
  const int lane = threadIdx.x & 31;
  const int i = int(row % tq);
  const long long s = row / ((long long)heads * tq);
  const uint8_t* km = key_mask ? key_mask + s * tk : nullptr;
  float* p = P + row * tk;
  float mx = -INFINITY;
  for (int j = lane; j < tk; j += 32)
    if (key_allowed(causal, km, i, j)) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < tk; j += 32) {
    const float e = key_allowed(causal, km, i, j) ? expf(p[j] - mx) : 0.f;
    p[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const uint8_t* kp = keep ? keep + row * tk : nullptr;
  for (int j = lane; j < tk; j += 32) {
    const float v = p[j] * inv;
    p[j] = v;
    if (kp) Pd[row * tk + j] = kp[j] ? v * inv_keep : 0.f;
  }
}

// dS = P * (dP - sum_j P dP), dP = dPd keep / (1-p) (or dPd without dropout); overwrites dPd.
__global__ void mha_softmax_backward_kernel(const float* P, float* dS, const uint8_t* keep,
                                            float inv_keep, long long nrows, int tk) {
  const long long row = blockIdx.x * (long long)kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= nrows) return;
  const int lane = threadIdx.x & 31;
  const float* p = P + row * tk;
  float* g = dS + row * tk;
  const uint8_t* kp = keep ? keep + row * tk : nullptr;
  float dot = 0.f;
  for (int j = lane; j < tk; j += 32) {
    const float gj = kp ? (kp[j] ? g[j] * inv_keep : 0.f) : g[j];
    g[j] = gj;
    dot += p[j] * gj;
  }
  dot = warp_sum(dot);
  for (int j = lane; j < tk; j += 32) g[j] = p[j] * (g[j] - dot);
}

// One block per (sequence n, head h): scores of the query against the first len keys in shared
// memory, softmax, then ctx[c] = sum_j p_j v[j, c] with one thread per output column (the CPU's
// order over j).
__global__ void attention_step_kernel(const float* q, int ldq, const float* k, const float* v,
                                      int ldkv, size_t seq_stride, int len, int d, int heads,
                                      const uint8_t* key_mask, int mask_stride, float scale,
                                      float* ctx) {
  PN_DYNAMIC_SHARED(float, w);
  __shared__ float red[kThreads / 32];
  const int n = blockIdx.x / heads, h = blockIdx.x % heads, dh = d / heads;
  const float* qn = q + size_t(n) * ldq + size_t(h) * dh;
  const float* kn = k + size_t(n) * seq_stride + size_t(h) * dh;
  const float* vn = v + size_t(n) * seq_stride + size_t(h) * dh;
  const uint8_t* km = key_mask ? key_mask + size_t(n) * mask_stride : nullptr;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    float sdot = 0.f;
    if (!km || km[j]) {
      for (int c = 0; c < dh; ++c) sdot += qn[c] * kn[size_t(j) * ldkv + c];
      sdot *= scale;
      mx = fmaxf(mx, sdot);
    }
    w[j] = sdot;
  }
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    w[j] = (km && !km[j]) ? 0.f : expf(w[j] - mx);
    sum += w[j];
  }
  sum = block_sum(sum, red);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  __syncthreads();
  float* out = ctx + size_t(n) * d + size_t(h) * dh;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < len; ++j) {
      const float pj = w[j] * inv;
      if (pj != 0.f) acc += pj * vn[size_t(j) * ldkv + c];
    }
    out[c] = acc;
  }
}

}  // namespace

void mha_forward(Blas& b, const float* q, int ldq, const float* k, const float* v, int ldkv,
                 int nseq, int tq, int tk, int d, int heads, bool causal, const uint8_t* key_mask,
                 const uint8_t* keep, float p, float* probs, float* probs_drop, float* ctx) {
  if (nseq == 0 || tq == 0) return;
  const int dh = d / heads;
  const float scale = 1.0f / std::sqrt(float(dh)), inv_keep = 1.0f / (1.0f - p);
  const long long sq = (long long)tq * ldq, skv = (long long)tk * ldkv,
                  sp = (long long)heads * tq * tk, sc = (long long)tq * d;
  if (tk == 0) {  // no keys: every row of P is empty, ctx is 0
    CUDA_CHECK(cudaMemsetAsync(ctx, 0, size_t(nseq) * tq * d * sizeof(float), b.stream));
    return;
  }
  for (int h = 0; h < heads; ++h)
    gemm_strided_batched(b, false, true, tq, tk, dh, scale, q + size_t(h) * dh, ldq, sq,
                         k + size_t(h) * dh, ldkv, skv, 0.f, probs + size_t(h) * tq * tk, tk, sp,
                         nseq);
  const long long nrows = (long long)nseq * heads * tq;
  PN_LAUNCH(mha_softmax_kernel, row_blocks(nrows), kThreads, 0, b.stream)(
      probs, probs_drop, key_mask, keep, inv_keep, causal, nrows, heads, tq, tk);
  PN_LAUNCHED();
  const float* Pv = keep ? probs_drop : probs;
  for (int h = 0; h < heads; ++h)
    gemm_strided_batched(b, false, false, tq, dh, tk, 1.f, Pv + size_t(h) * tq * tk, tk, sp,
                         v + size_t(h) * dh, ldkv, skv, 0.f, ctx + size_t(h) * dh, d, sc, nseq);
}

void mha_backward(Blas& b, const float* q, int ldq, const float* k, const float* v, int ldkv,
                  int nseq, int tq, int tk, int d, int heads, bool causal, const uint8_t* key_mask,
                  const uint8_t* keep, float p, const float* probs, const float* probs_drop,
                  const float* dctx, float* dq, float* dk, float* dv, float* scratch) {
  if (nseq == 0 || tq == 0) return;
  if (tk == 0) {  // no keys: dq = dS k = 0 (the q columns of each row only), dk and dv empty
    CUDA_CHECK(cudaMemset2DAsync(dq, size_t(ldq) * sizeof(float), 0, size_t(d) * sizeof(float),
                                 size_t(nseq) * tq, b.stream));
    return;
  }
  const int dh = d / heads;
  const float scale = 1.0f / std::sqrt(float(dh)), inv_keep = 1.0f / (1.0f - p);
  const long long sq = (long long)tq * ldq, skv = (long long)tk * ldkv,
                  sp = (long long)heads * tq * tk, sc = (long long)tq * d;
  for (int h = 0; h < heads; ++h)  // dPd = dctx v^T
    gemm_strided_batched(b, false, true, tq, tk, dh, 1.f, dctx + size_t(h) * dh, d, sc,
                         v + size_t(h) * dh, ldkv, skv, 0.f, scratch + size_t(h) * tq * tk, tk, sp,
                         nseq);
  const long long nrows = (long long)nseq * heads * tq;
  PN_LAUNCH(mha_softmax_backward_kernel, row_blocks(nrows), kThreads, 0, b.stream)(
      probs, scratch, keep, inv_keep, nrows, tk);
  PN_LAUNCHED();
  const float* Pv = keep ? probs_drop : probs;
  for (int h = 0; h < heads; ++h) {
    const size_t off = size_t(h) * dh, blk = size_t(h) * tq * tk;
    gemm_strided_batched(b, false, false, tq, dh, tk, scale, scratch + blk, tk, sp, k + off, ldkv,
                         skv, 0.f, dq + off, ldq, sq, nseq);
    gemm_strided_batched(b, true, false, tk, dh, tq, scale, scratch + blk, tk, sp, q + off, ldq, sq,
                         0.f, dk + off, ldkv, skv, nseq);
    gemm_strided_batched(b, true, false, tk, dh, tq, 1.f, Pv + blk, tk, sp, dctx + off, d, sc, 0.f,
                         dv + off, ldkv, skv, nseq);
  }
}

void attention_step(const float* q, int ldq, const float* k, const float* v, int ldkv,
                    size_t seq_stride, int N, int len, int d, int heads, const uint8_t* key_mask,
                    int mask_stride, float* ctx, cudaStream_t s) {
  if (N == 0) return;
  const float scale = 1.0f / std::sqrt(float(d / heads));
  // Padded by a 16-byte vector and rounded up to one: ptxas may read the unrolled remainder of
  // the weighted sum's loop over j a few floats past len (compute-sanitizer memcheck flagged
  // 12-byte shared reads at w[len - 1] on sm_90).
  const size_t smem = (size_t(len > 0 ? len : 1) + 3) / 4 * 4 * sizeof(float) + 16;
  // The 48 KiB default covers static and dynamic shared memory together; beyond it the kernel
  // must opt in, up to what the device allows per block minus the kernel's static part.
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_step_kernel));
  if (smem + attr.sharedSizeBytes > 48 * 1024) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem + attr.sharedSizeBytes > size_t(optin))
      fail("CUDA", "attention_step", "the key cache is too long for one block's shared memory",
           __FILE__, __LINE__);
    CUDA_CHECK(cudaFuncSetAttribute(attention_step_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  PN_LAUNCH(attention_step_kernel, unsigned(N) * heads, kThreads, smem, s)(
      q, ldq, k, v, ldkv, seq_stride, len, d, heads, key_mask, mask_stride, scale, ctx);
  PN_LAUNCHED();
}

}  // namespace pn::cuda
