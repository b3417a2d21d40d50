// What the .cu files of kernels/cuda share: launch helpers, warp and block reductions in a fixed
// order, the grow-only scratch pool and the two-level column reduction of the norm kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pn::cuda {

constexpr int kThreads = 256;  // threads per block of the element-wise kernels

inline unsigned blocks_for(size_t n, int threads = kThreads) {
  size_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535u * 32u ? b : 65535u * 32u);  // kernels grid-stride beyond this
}
#define PN_LAUNCHED() CUDA_CHECK(cudaGetLastError())

// The one launch form, PN_LAUNCH(kernel, grid, block, smem, stream)(args...): nvcc's <<<>>>, or
// under PN_CUDA_EMULATE the emulator's launch (emulator/), which runs the same
// kernel on CPU threads. PN_DYNAMIC_SHARED(T, name) declares the block's dynamic shared memory.
#ifdef PN_CUDA_EMULATE
#define PN_LAUNCH(kernel, grid, block, smem, stream) \
  ::pn_emu::make_launch(grid, block, smem, stream, #kernel, [](const auto&... a) { kernel(a...); })
#define PN_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::pn_emu::dynamic_shared())
#else
#define PN_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
// 128-byte aligned: WMMA loads and stores need 32-byte aligned tiles.
#define PN_DYNAMIC_SHARED(T, name) extern __shared__ __align__(128) T name[]
#endif

// Scratch device memory, grow-only, one pool per slot (a call may hold several slots at once).
// Growing frees the old block and allocates the new one in the order of stream s
// (cudaFreeAsync/cudaMallocAsync): kernels queued earlier still read the old block, and the
// host never waits for the device.
void* cuda_scratch(int slot, size_t bytes, cudaStream_t s);
template <class T>
T* scratch_as(int slot, size_t count, cudaStream_t s) {
  return static_cast<T*>(cuda_scratch(slot, count * sizeof(T), s));
}
enum ScratchSlot {
  kSlotPartials = 0,
  kSlotCoeffs = 1,
  kSlotRows = 2,
  kSlotSums = 3,
  kSlotSort = 4,  // embedding_backward: sorted (token, row) pairs and CUB's temporary storage
  kSlotBf16A = 5,  // gemm in bf16: its operands rounded to bf16
  kSlotBf16B = 6,
  kSlotCudnn = 7,  // cuDNN's attention: the workspace its plan asks for
  kSlotLt = 8,     // cuBLASLt's matmul workspace (the Linear's epilogues)
  kSlotBiasGrad = 9,  // the bias gradient cuBLASLt's BGRADB writes, before it is accumulated
  kSlotBias16 = 10,   // a bias rounded to bf16 for a cuBLASLt epilogue with a bf16 output
  kSlotLinearOut = 11,  // a Linear's fp32 output where cuBLASLt cannot write its bf16 rounding
  kSlotCount = 12
};

__device__ __forceinline__ bool live(const uint8_t* mask, int r) { return !mask || mask[r]; }

// Butterfly sum over the 32 lanes of a warp: every lane ends with the same value, and the
// order of additions is fixed (deterministic).
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of kThreads threads (warp sums, then the warp sums in warp order). Every
// thread gets the result. Uses `shared` of kThreads/32 entries; callable repeatedly.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T s = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) s += shared[w];
  return s;
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < int(blockDim.x >> 5); ++w) m = fmaxf(m, shared[w]);
  return m;
}

// ---- two-level column reduction (batch-type statistics and parameter gradients) -------------
// Level 1: block (chunk of kColRowChunk rows, tile of 32 columns): thread (tx, ty) sums rows
// ty, ty+8, ... of the chunk for column tile*32+tx in double, then the 8 row lanes are added in
// lane order into part[(chunk*2 + k)*d + c] for the two sums k = 0, 1 (column_pass_kernel).
// Level 2: each column adds its chunk partials in chunk order (column_combine). Only live rows
// are summed.
constexpr int kColTile = 32, kColLanes = 8, kColRowChunk = 256;

inline int column_chunks(int rows) { return (rows + kColRowChunk - 1) / kColRowChunk; }

// The end of level 1 in a block of kColTile x kColLanes threads: thread (tx, ty) holds the sums
// s0, s1 of its rows of column c; the row lanes are added in lane order into part[(ch * 2 + k) *
// d + c]. Every thread of the block must call it (a barrier).
__device__ __forceinline__ void block_partials(double s0, double s1, int ch, int c, int d,
                                               double* part) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  __shared__ double sh[2][kColLanes][kColTile];
  sh[0][ty][tx] = s0;
  sh[1][ty][tx] = s1;
  __syncthreads();
  if (ty < 2 && c < d) {
    double acc = 0;
#pragma unroll
    for (int l = 0; l < kColLanes; ++l) acc += sh[ty][l][tx];
    part[(size_t(ch) * 2 + ty) * d + c] = acc;
  }
}

// dst0[c] (=|+=) sum over chunks of part[.., 0, c], dst1 likewise (either may be null).
// Dst is double (overwritten: statistics) or float (accumulated as T(double(dst) + sum), the
// CPU kernels' rule for parameter gradients).
__device__ __forceinline__ void store_sum(double* dst, double v) { *dst = v; }
__device__ __forceinline__ void store_sum(float* dst, double v) { *dst = float(double(*dst) + v); }

// Level 2 in a block per 32 columns: lane ty adds chunks ty, ty + kCombineLanes, ... in order,
// then the lanes are added in lane order (a fixed order: results repeat to the bit).
constexpr int kCombineLanes = 16;
template <class Dst>
__global__ void column_combine_kernel(const double* part, int nch, int d, Dst* dst0, Dst* dst1) {
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * kColTile + tx;
  double a0 = 0, a1 = 0;
  if (c < d)
    for (int ch = ty; ch < nch; ch += kCombineLanes) {
      a0 += part[(size_t(ch) * 2) * d + c];
      a1 += part[(size_t(ch) * 2 + 1) * d + c];
    }
  __shared__ double sh[2][kCombineLanes][kColTile];
  sh[0][ty][tx] = a0;
  sh[1][ty][tx] = a1;
  __syncthreads();
  Dst* dst = ty == 0 ? dst0 : dst1;
  if (ty < 2 && c < d && dst) {
    double acc = 0;
#pragma unroll
    for (int l = 0; l < kCombineLanes; ++l) acc += sh[ty][l][tx];
    store_sum(dst + c, acc);
  }
}
template <class Dst>
void column_combine(const double* part, int nch, int d, Dst* dst0, Dst* dst1, cudaStream_t s) {
  PN_LAUNCH(column_combine_kernel<Dst>, (d + kColTile - 1) / kColTile,
            dim3(kColTile, kCombineLanes), 0, s)(part, nch, d, dst0, dst1);
  PN_LAUNCHED();
}

// ---- column passes ---------------------------------------------------------------------------
// Which chunk of rows and which tile of columns block b takes: a grid of chunks x tiles, the
// chunks in x (up to 2^31-1 of them). A pass's kernel takes the walk as a parameter so that
// dev/cuda can time another order of the same blocks.
struct StripWalk {
  __device__ void block(int& chunk, int& tile) const {
    chunk = blockIdx.x;
    tile = blockIdx.y;
  }
};

// A block takes kColRowChunk rows of kColTile columns (block kColTile x kColLanes, its chunk and
// tile from Walk): thread (tx, ty) has column c = tile * 32 + tx
// and rows r0 + ty, r0 + ty + 8, ..., which it takes kStageRows at a time: first every load of
// the stage (so that they are in flight together; a row's values are read whether it is live or
// not, so that no load waits for a mask), then the per-element work in row order. A Pass gives
//   Column column(c):       the column's coefficients, loaded once;
//   In load(col, r, i):     the inputs of element i = r * d + c;
//   void apply(col, i, in, live, v0, v1):  its outputs written, and its two summed values.
// The sums of the live rows go through block_partials into part (null: nothing summed), and
// column_combine adds the chunks: a partition and order fixed by the shape. when: null, or a
// device value: the pass does nothing unless *when > 0.
constexpr int kStageRows = 8;
template <class Pass, class Walk = StripWalk>
__global__ void column_pass_kernel(Pass pass, const uint8_t* mask, int rows, int d, Walk walk,
                                   const double* when, double* part) {
  if (when && !(*when > 0)) return;  // uniform over the grid: no barrier is left half-reached
  int ch, tile;
  walk.block(ch, tile);
  const int c = tile * kColTile + threadIdx.x;
  const int r0 = ch * kColRowChunk, r1 = min(rows, r0 + kColRowChunk);
  double s0 = 0, s1 = 0;
  if (c < d) {
    const typename Pass::Column col = pass.column(c);
    for (int rs = r0 + threadIdx.y; rs < r1; rs += kStageRows * kColLanes) {
      typename Pass::In in[kStageRows] = {};
      bool lv[kStageRows] = {};
#pragma unroll
      for (int k = 0; k < kStageRows; ++k) {
        const int r = rs + k * kColLanes;
        if (r >= r1) continue;
        lv[k] = live(mask, r);
        in[k] = pass.load(col, r, size_t(r) * d + c);
      }
#pragma unroll
      for (int k = 0; k < kStageRows; ++k) {
        const int r = rs + k * kColLanes;
        if (r >= r1) continue;
        double v0 = 0, v1 = 0;
        pass.apply(col, size_t(r) * d + c, in[k], lv[k], v0, v1);
        if (lv[k]) {
          s0 += v0;
          s1 += v1;
        }
      }
    }
  }
  if (part) block_partials(s0, s1, ch, c, d, part);
}

// Both levels of a pass on stream s: dst0, dst1 summed (either may be null; with rows == 0 the
// double destinations become 0 and the float ones stay as they are); without destinations, the
// map alone.
template <class Pass, class Dst>
void column_pass(const Pass& pass, const uint8_t* mask, int rows, int d, const double* when,
                 Dst* dst0, Dst* dst1, cudaStream_t s) {
  if (d <= 0) return;
  const bool sums = dst0 || dst1;
  const int nch = column_chunks(rows), tiles = (d + kColTile - 1) / kColTile;
  double* part = sums && nch > 0 ? scratch_as<double>(kSlotPartials, size_t(nch) * 2 * d, s)
                                 : nullptr;
  if (nch > 0) {
    PN_LAUNCH(column_pass_kernel<Pass>, dim3(nch, tiles), dim3(kColTile, kColLanes), 0, s)(
        pass, mask, rows, d, StripWalk{}, when, part);
    PN_LAUNCHED();
  }
  if (sums) column_combine(part, nch, d, dst0, dst1, s);
}

// A column reduction of Op(r, c, &v0, &v1) (the two values of row r, column c; the op may also
// write that element) as a pass.
template <class Op>
struct ReducePass {
  Op op;
  struct Column {
    int c;
  };
  struct In {
    double v0, v1;
  };
  __device__ Column column(int c) const { return {c}; }
  __device__ In load(const Column& k, int r, size_t) const {
    In in;
    op(r, k.c, in.v0, in.v1);
    return in;
  }
  __device__ void apply(const Column&, size_t, const In& in, bool, double& v0, double& v1) const {
    v0 = in.v0;
    v1 = in.v1;
  }
};
template <class Op, class Dst>
void column_reduce(const Op& op, const uint8_t* mask, int rows, int d, Dst* dst0, Dst* dst1,
                   cudaStream_t s) {
  column_pass(ReducePass<Op>{op}, mask, rows, d, nullptr, dst0, dst1, s);
}

}  // namespace pn::cuda
