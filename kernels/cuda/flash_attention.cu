// Fused causal attention on the tensor cores for --precision bf16 (flash attention's scheme):
// the T x T scores never reach device memory. Per (sequence, head) and tile of 64 rows:
//   forward:  one pass over the key tiles keeps each query row's running max m and sum l of
//             exp(S - m); a tile's P = exp(S - m) in bf16 adds P V to ctx after ctx is rescaled
//             by exp(m_old - m), and ctx / l is written at the end (online softmax); the row's
//             log-sum-exp lse = m + log l is saved for the backward (T floats per row of heads
//             instead of T x T probabilities).
//   backward: P = exp(S - lse) is recomputed; with D_i = sum_c dctx[i,c] ctx[i,c] (= sum_j P dP),
//             dS = P (dP - D), dV = P^T dctx, dK = dS^T Q / sqrt(dh) (one block per key tile)
//             and dQ = dS K / sqrt(dh) (one block per query tile: no atomics, so deterministic).
// S = Q K^T / sqrt(dh), dP = dctx V^T. Operands (Q, K, V, P, dctx, dS) are rounded to bf16 as
// the bf16 GEMMs round theirs; every product accumulates in fp32, and softmax runs in fp32.
// Layouts as attention.cu: qkv [nseq*T, 3d], ctx and dctx [nseq*T, d], lse [nseq, H, T].
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                    // rows of a block, and keys (or queries) per step
constexpr int kWarps = kTile / 16;           // each warp owns 16 rows of the block's 64
constexpr int kFlashThreads = kWarps * 32;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// dst[r][c] = bf16(src[(r0 + r) * ld + c]) for the 64 rows from r0, 0 from row T on.
template <int D>
__device__ void load_rows_bf16(bf16* dst, const float* src, int ld, int r0, int T) {
  for (int e = threadIdx.x; e < kTile * D; e += kFlashThreads) {
    const int r = e / D, c = e % D;
    dst[e] = __float2bfloat16(r0 + r < T ? src[size_t(r0 + r) * ld + c] : 0.f);
  }
}

// out[16 x 64] (fp32, row stride 64) = a[16 x D] b[64 x D]^T, a and b bf16 with row stride D.
template <int D>
__device__ void mul_abt(const bf16* a, const bf16* b, float* out) {
  FragC acc[kTile / 16];
  for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
  for (int k = 0; k < D; k += 16) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k, D);
    for (int n = 0; n < kTile / 16; ++n) {
      FragBCol fb;  // b^T's (k, n) block: b's rows n*16.., columns k..
      wmma::load_matrix_sync(fb, b + n * 16 * D + k, D);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
  for (int n = 0; n < kTile / 16; ++n)
    wmma::store_matrix_sync(out + n * 16, acc[n], kTile, wmma::mem_row_major);
}

// acc[16 x D] += a[16 x 64] b[64 x D]: a bf16 with row stride 64, b bf16 with row stride D.
template <int D>
__device__ void mul_ab_acc(const bf16* a, const bf16* b, FragC (&acc)[D / 16]) {
  for (int k = 0; k < kTile; k += 16) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k, kTile);
    for (int n = 0; n < D / 16; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b + k * D + n * 16, D);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x D accumulator rows (times scale) to dst rows row0.. (row stride ld),
// rows from T on skipped, through the warp's staging area (16 x D floats).
template <int D>
__device__ void store_rows(FragC (&acc)[D / 16], float scale, float* stage, float* dst, int ld,
                           int row0, int T) {
  for (int n = 0; n < D / 16; ++n) {
    for (int e = 0; e < acc[n].num_elements; ++e) acc[n].x[e] *= scale;
    wmma::store_matrix_sync(stage + n * 16, acc[n], D, wmma::mem_row_major);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int r = 0; r < 16; ++r)
    if (row0 + r < T)
      for (int c = lane; c < D; c += 32) dst[size_t(row0 + r) * ld + c] = stage[r * D + c];
  __syncthreads();
}

__host__ __device__ constexpr int stage_floats(int D) { return 16 * (D > kTile ? D : kTile); }

template <int D>
constexpr size_t forward_smem() {
  return 3 * kTile * D * sizeof(bf16) + kWarps * stage_floats(D) * sizeof(float) +
         kTile * kTile * sizeof(bf16);
}
template <int D>
constexpr size_t backward_smem() {  // both backward kernels: four bf16 row tiles, S, dP, P, dS
  return 4 * kTile * D * sizeof(bf16) + kTile * kTile * sizeof(float) +
         kWarps * stage_floats(D) * sizeof(float) + 2 * kTile * kTile * sizeof(bf16) +
         2 * kTile * sizeof(float);
}

// What the three kernels read and write; the grid is (nseq * H, tiles of 64 rows) for each.
struct FlashArgs {
  const float* qkv;   // [nseq*T, 3d]
  const float* dctx;  // backward: [nseq*T, d]
  const float* lse;   // backward: each row's log-sum-exp, [nseq, H, T]
  const float* dsum;  // backward: D_i, [nseq, H, T]
  float* lse_out;     // forward: where it writes lse
  float* out;         // forward: ctx [nseq*T, d]; backward: dqkv [nseq*T, 3d]
  int T, d, H;
  float scale;  // 1 / sqrt(dh)
};

// Where a block works: its tile, first row, sequence s and head h, and that head's Q columns
// in qkv (K at + d, V at + 2d). Tiles of the longest causal rows are launched first when asked.
struct BlockPlace {
  int tile, row0, s, h, ld;
  const float* q;
};
template <int D>
__device__ BlockPlace block_place(const FlashArgs& a, bool longest_first) {
  BlockPlace b;
  b.tile = longest_first ? int(gridDim.y - 1 - blockIdx.y) : int(blockIdx.y);
  b.row0 = b.tile * kTile, b.s = blockIdx.x / a.H, b.h = blockIdx.x % a.H, b.ld = 3 * a.d;
  b.q = a.qkv + size_t(b.s) * a.T * b.ld + size_t(b.h) * D;
  return b;
}

// acc's row r *= f[r], through the warp's staging area (16 x D floats): wmma does not say which
// lane holds which element, so rows are scaled in memory. Every warp of the block calls it.
template <int D>
__device__ void scale_rows(FragC (&acc)[D / 16], const float (&f)[16], float* stage) {
  __syncthreads();  // the stage's last readers are done
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(stage + n * 16, acc[n], D, wmma::mem_row_major);
  __syncthreads();
  const int lane = threadIdx.x & 31;
  #pragma unroll
  for (int r = 0; r < 16; ++r)
    for (int c = lane; c < D; c += 32) stage[r * D + c] *= f[r];
  __syncthreads();
  for (int n = 0; n < D / 16; ++n)
    wmma::load_matrix_sync(acc[n], stage + n * 16, D, wmma::mem_row_major);
}

// See the top of the file.
template <int D>
__global__ void flash_forward_kernel(FlashArgs a) {
  PN_DYNAMIC_SHARED(float, smem);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + kTile * D;
  bf16* Vs = Ks + kTile * D;
  float* stages = reinterpret_cast<float*>(Vs + kTile * D);
  bf16* Ps = reinterpret_cast<bf16*>(stages + kWarps * stage_floats(D));
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const BlockPlace b = block_place<D>(a, true);
  const int tile = b.tile, q0 = b.row0, ld = b.ld, T = a.T, d = a.d;
  const float scale = a.scale, *q = b.q;
  float* S = stages + w * stage_floats(D);  // this warp's 16 x 64 scores, then its ctx rows
  bf16* P = Ps + w * 16 * kTile;
  const int tiles = tile + 1;  // keys up to the block's last query
  load_rows_bf16<D>(Qs, q, ld, q0, T);
  float m[16], l[16], f[16];
  #pragma unroll
  for (int r = 0; r < 16; ++r) m[r] = -INFINITY, l[r] = 0.f;
  FragC o[D / 16];
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(o[n], 0.f);
  for (int kt = 0; kt < tiles; ++kt) {
    __syncthreads();
    load_rows_bf16<D>(Ks, q + d, ld, kt * kTile, T);
    load_rows_bf16<D>(Vs, q + 2 * d, ld, kt * kTile, T);
    __syncthreads();
    mul_abt<D>(Qs + w * 16 * D, Ks, S);
    __syncthreads();
    #pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int i = q0 + w * 16 + r;
      float v[2];
      for (int t = 0; t < 2; ++t) {
        const int j = kt * kTile + lane + 32 * t;
        v[t] = j <= i && j < T ? S[r * kTile + lane + 32 * t] * scale : -INFINITY;
      }
      const float mx = fmaxf(m[r], warp_max(fmaxf(v[0], v[1])));  // finite: key 0 counts
      float e = 0.f;
      for (int t = 0; t < 2; ++t) {
        const float p = v[t] == -INFINITY ? 0.f : expf(v[t] - mx);
        P[r * kTile + lane + 32 * t] = __float2bfloat16(p);
        e += p;
      }
      f[r] = expf(m[r] - mx);  // 0 on the first tile, where ctx is still 0
      l[r] = l[r] * f[r] + warp_sum(e);
      m[r] = mx;
    }
    scale_rows<D>(o, f, S);
    __syncthreads();
    mul_ab_acc<D>(P, Vs, o);
  }
  #pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int i = q0 + w * 16 + r;
    if (lane == r && i < T) a.lse_out[size_t(blockIdx.x) * T + i] = m[r] + logf(l[r]);
    f[r] = 1.f / l[r];
  }
  scale_rows<D>(o, f, S);
  store_rows<D>(o, 1.f, S, a.out + size_t(b.s) * T * d + size_t(b.h) * D, d, q0 + w * 16, T);
}

// D_i = sum_c dctx[i, c] ctx[i, c] over one head's columns: one warp per (row, head).
__global__ void flash_row_dot_kernel(const float* ctx, const float* dctx, int nseq, int T, int d,
                                     int H, float* dsum) {
  const int lane = threadIdx.x & 31, dh = d / H;
  const long long warps = (long long)nseq * T * H, stride = (long long)gridDim.x * kThreads / 32;
  for (long long wid = (blockIdx.x * (long long)kThreads + threadIdx.x) >> 5; wid < warps;
       wid += stride) {
    const int h = int(wid % H);
    const long long row = wid / H;  // s * T + i
    const float* a = ctx + row * d + h * dh;
    const float* b = dctx + row * d + h * dh;
    float acc = 0.f;
    for (int c = lane; c < dh; c += 32) acc += a[c] * b[c];
    acc = warp_sum(acc);
    if (lane == 0) dsum[(row / T * H + h) * T + row % T] = acc;
  }
}

// The pieces both backward kernels share, carved from the dynamic shared memory.
template <int D>
struct BackwardSmem {
  bf16 *own_a, *own_b, *other_a, *other_b;  // the block's two row tiles, the current step's two
  float *S, *dP;                            // [4][16][64] each (dP doubles as the staging area)
  bf16 *Pb, *dSb;                           // [4][16][64] each
  float *lse, *dsum;                        // 64 each: the query rows' saved values
  __device__ explicit BackwardSmem(float* smem) {
    own_a = reinterpret_cast<bf16*>(smem);
    own_b = own_a + kTile * D;
    other_a = own_b + kTile * D;
    other_b = other_a + kTile * D;
    S = reinterpret_cast<float*>(other_b + kTile * D);
    dP = S + kTile * kTile;
    Pb = reinterpret_cast<bf16*>(dP + kWarps * stage_floats(D));
    dSb = Pb + kTile * kTile;
    lse = reinterpret_cast<float*>(dSb + kTile * kTile);
    dsum = lse + kTile;
  }
};

__device__ void load_row_values(float* lse_s, float* dsum_s, const float* lse, const float* dsum,
                                int r0, int T) {
  for (int c = threadIdx.x; c < kTile; c += kFlashThreads) {
    lse_s[c] = r0 + c < T ? lse[r0 + c] : 0.f;
    dsum_s[c] = r0 + c < T ? dsum[r0 + c] : 0.f;
  }
}

// One block per tile of 64 keys: dK and dV over the query tiles at and after it. In this
// kernel's S and dP the rows are keys and the columns queries (S^T = K Q^T, dP^T = V dctx^T).
template <int D>
__global__ void flash_backward_kv_kernel(FlashArgs a) {
  PN_DYNAMIC_SHARED(float, smem);
  BackwardSmem<D> sm(smem);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const BlockPlace b = block_place<D>(a, false);  // the first keys, which most queries see, first
  const int tile = b.tile, k0 = b.row0, ld = b.ld, T = a.T, d = a.d;
  const float scale = a.scale, *q = b.q;
  const float* dout = a.dctx + size_t(b.s) * T * d + size_t(b.h) * D;
  const float* row_lse = a.lse + size_t(blockIdx.x) * T;
  const float* row_dsum = a.dsum + size_t(blockIdx.x) * T;
  float *S = sm.S + w * 16 * kTile, *dP = sm.dP + w * stage_floats(D);
  bf16 *Pb = sm.Pb + w * 16 * kTile, *dSb = sm.dSb + w * 16 * kTile;
  load_rows_bf16<D>(sm.own_a, q + d, ld, k0, T);      // K
  load_rows_bf16<D>(sm.own_b, q + 2 * d, ld, k0, T);  // V
  FragC dk[D / 16], dv[D / 16];
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dk[n], 0.f), wmma::fill_fragment(dv[n], 0.f);
  const int tiles = (T + kTile - 1) / kTile;
  for (int qt = tile; qt < tiles; ++qt) {
    __syncthreads();
    load_rows_bf16<D>(sm.other_a, q, ld, qt * kTile, T);   // Q
    load_rows_bf16<D>(sm.other_b, dout, d, qt * kTile, T);  // dctx
    load_row_values(sm.lse, sm.dsum, row_lse, row_dsum, qt * kTile, T);
    __syncthreads();
    mul_abt<D>(sm.own_a + w * 16 * D, sm.other_a, S);
    mul_abt<D>(sm.own_b + w * 16 * D, sm.other_b, dP);
    __syncthreads();
    for (int r = 0; r < 16; ++r) {
      const int j = k0 + w * 16 + r;
      for (int c = lane; c < kTile; c += 32) {
        const int i = qt * kTile + c;
        const float p = j <= i && i < T ? expf(S[r * kTile + c] * scale - sm.lse[c]) : 0.f;
        Pb[r * kTile + c] = __float2bfloat16(p);
        dSb[r * kTile + c] = __float2bfloat16(p * (dP[r * kTile + c] - sm.dsum[c]));
      }
    }
    __syncthreads();
    mul_ab_acc<D>(Pb, sm.other_b, dv);   // dV += P^T dctx
    mul_ab_acc<D>(dSb, sm.other_a, dk);  // dK += dS^T Q
  }
  __syncthreads();
  float* dk_out = a.out + size_t(b.s) * T * ld + size_t(b.h) * D + d;
  store_rows<D>(dk, scale, dP, dk_out, ld, k0 + w * 16, T);
  store_rows<D>(dv, 1.f, dP, dk_out + d, ld, k0 + w * 16, T);
}

// One block per tile of 64 queries: dQ over the key tiles up to it.
template <int D>
__global__ void flash_backward_q_kernel(FlashArgs a) {
  PN_DYNAMIC_SHARED(float, smem);
  BackwardSmem<D> sm(smem);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const BlockPlace b = block_place<D>(a, true);
  const int tile = b.tile, q0 = b.row0, ld = b.ld, T = a.T, d = a.d;
  const float scale = a.scale, *q = b.q;
  float *S = sm.S + w * 16 * kTile, *dP = sm.dP + w * stage_floats(D);
  bf16* dSb = sm.dSb + w * 16 * kTile;
  load_rows_bf16<D>(sm.own_a, q, ld, q0, T);                                             // Q
  load_rows_bf16<D>(sm.own_b, a.dctx + size_t(b.s) * T * d + size_t(b.h) * D, d, q0, T);  // dctx
  load_row_values(sm.lse, sm.dsum, a.lse + size_t(blockIdx.x) * T,
                  a.dsum + size_t(blockIdx.x) * T, q0, T);
  FragC dq[D / 16];
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.f);
  for (int kt = 0; kt <= tile; ++kt) {
    __syncthreads();
    load_rows_bf16<D>(sm.other_a, q + d, ld, kt * kTile, T);      // K
    load_rows_bf16<D>(sm.other_b, q + 2 * d, ld, kt * kTile, T);  // V
    __syncthreads();
    mul_abt<D>(sm.own_a + w * 16 * D, sm.other_a, S);
    mul_abt<D>(sm.own_b + w * 16 * D, sm.other_b, dP);
    __syncthreads();
    for (int r = 0; r < 16; ++r) {
      const int i = q0 + w * 16 + r;
      const float row_lse = sm.lse[w * 16 + r], row_dsum = sm.dsum[w * 16 + r];
      for (int c = lane; c < kTile; c += 32) {
        const int j = kt * kTile + c;
        const float p = j <= i && i < T ? expf(S[r * kTile + c] * scale - row_lse) : 0.f;
        dSb[r * kTile + c] = __float2bfloat16(p * (dP[r * kTile + c] - row_dsum));
      }
    }
    __syncthreads();
    mul_ab_acc<D>(dSb, sm.other_a, dq);  // dQ += dS K
  }
  __syncthreads();
  store_rows<D>(dq, scale, dP, a.out + size_t(b.s) * T * ld + size_t(b.h) * D, ld, q0 + w * 16, T);
}

// Opts a kernel into `smem` bytes of dynamic shared memory where that passes the 48 KiB default.
#define PN_FLASH_SMEM(kernel, smem)                                                          \
  if ((smem) > 48 * 1024)                                                                    \
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                    int(smem)))

template <int D>
void forward_for(const float* qkv, int nseq, int T, int d, int H, float* lse, float* ctx,
                 cudaStream_t st) {
  const size_t smem = forward_smem<D>();
  PN_FLASH_SMEM(flash_forward_kernel<D>, smem);
  const dim3 grid(unsigned(nseq * H), unsigned((T + kTile - 1) / kTile));
  const FlashArgs a{qkv, nullptr, nullptr, nullptr, lse, ctx, T, d, H, 1.0f / std::sqrt(float(D))};
  PN_LAUNCH(flash_forward_kernel<D>, grid, kFlashThreads, smem, st)(a);
  PN_LAUNCHED();
}

template <int D>
void backward_for(const float* qkv, const float* lse, const float* dctx, const float* dsum,
                  int nseq, int T, int d, int H, float* dqkv, cudaStream_t st) {
  const size_t smem = backward_smem<D>();
  PN_FLASH_SMEM(flash_backward_kv_kernel<D>, smem);
  PN_FLASH_SMEM(flash_backward_q_kernel<D>, smem);
  const dim3 grid(unsigned(nseq * H), unsigned((T + kTile - 1) / kTile));
  const FlashArgs a{qkv, dctx, lse, dsum, nullptr, dqkv, T, d, H, 1.0f / std::sqrt(float(D))};
  PN_LAUNCH(flash_backward_kv_kernel<D>, grid, kFlashThreads, smem, st)(a);
  PN_LAUNCHED();
  PN_LAUNCH(flash_backward_q_kernel<D>, grid, kFlashThreads, smem, st)(a);
  PN_LAUNCHED();
}

}  // namespace

bool flash_attention_supported(int d, int heads) {
  const int dh = heads > 0 ? d / heads : 0;
  return dh == 32 || dh == 64 || dh == 128;
}

void flash_attention_forward(const float* qkv, int nseq, int T, int d, int heads, float* lse,
                             float* ctx, cudaStream_t s) {
  if (nseq == 0 || T == 0) return;
  switch (d / heads) {
    case 32: return forward_for<32>(qkv, nseq, T, d, heads, lse, ctx, s);
    case 64: return forward_for<64>(qkv, nseq, T, d, heads, lse, ctx, s);
    case 128: return forward_for<128>(qkv, nseq, T, d, heads, lse, ctx, s);
  }
  fail("CUDA", "flash_attention_forward", "head size is not 32, 64 or 128", __FILE__, __LINE__);
}

void flash_attention_backward(const float* qkv, const float* lse, const float* ctx,
                              const float* dctx, int nseq, int T, int d, int heads, float* dqkv,
                              float* dsum, cudaStream_t s) {
  if (nseq == 0 || T == 0) return;
  const long long warps = (long long)nseq * T * heads;
  PN_LAUNCH(flash_row_dot_kernel, blocks_for(size_t(warps) * 32), kThreads, 0, s)(
      ctx, dctx, nseq, T, d, heads, dsum);
  PN_LAUNCHED();
  switch (d / heads) {
    case 32: return backward_for<32>(qkv, lse, dctx, dsum, nseq, T, d, heads, dqkv, s);
    case 64: return backward_for<64>(qkv, lse, dctx, dsum, nseq, T, d, heads, dqkv, s);
    case 128: return backward_for<128>(qkv, lse, dctx, dsum, nseq, T, d, heads, dqkv, s);
  }
  fail("CUDA", "flash_attention_backward", "head size is not 32, 64 or 128", __FILE__, __LINE__);
}

}  // namespace pn::cuda
