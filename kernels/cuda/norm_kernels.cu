// CUDA kernels of the normalization family; the math is in kernels/ops.inc.
//
// Column statistics over tokens (batch, power_v, power; bias and parameter gradients too) are
// one pass over the rows with the two-level reduction of common.cuh: blocks of 32 columns x 256
// rows sum float inputs in double, then each column adds its block sums in block order. No
// atomics: the partition depends on the shape only, so results repeat bit for bit. The batch-type
// norms' per-element maps walk the same blocks (column_pass_kernel), each thread with its
// column's coefficients in registers, and a map whose coefficients are known before the sums
// (PN's) runs in the pass that sums: one read of the input where two passes make two.
// Row statistics (layer, rms, group, pre-scaling) give one warp to each (row, group), summing
// in double with a butterfly of shuffles; groups of up to 1024 are read once into registers,
// and the backward sums the parameter gradients as it goes (no second pass over x and dy).
// Affine maps use per-column float coefficients made from the double statistics exactly as the
// CPU kernels make them (shift split into its float rounding plus a double correction folded
// into the offset), with explicitly rounded float operations, so that y and dx match the CPU to
// the last bit when the coefficients do. Each thread makes its column's coefficients as its pass
// starts: a kernel of their own cost a launch per map (three in each PN iteration).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/row_groups.cuh"

namespace pn::cuda {
namespace {

// A norm's output value i: in fp32 (y), or only as its bf16 rounding where y16 is given.
__device__ __forceinline__ void put_out(float* y, uint16_t* y16, size_t i, float v) {
  if (y16)
    reinterpret_cast<__nv_bfloat16*>(y16)[i] = __float2bfloat16_rn(v);
  else
    y[i] = v;
}

// An input gradient: dx[i] += v (add: the residual stream's gradient taken in place, rounded as
// a separate add would round it), else dx[i] = v (put_grad16); where dx16 is given, its bf16
// rounding too.
__device__ __forceinline__ void put_grad(float* dx, uint16_t* dx16, size_t i, float v, bool add) {
  put_grad16(dx, dx16, i, add ? __fadd_rn(dx[i], v) : v);
}

// The per-column float coefficients of the maps below, made from the double statistics by each
// thread of the column as the pass starts (no kernel of their own, no array between).
// column_affine's: y = A (x - S) + B;  A = gamma scale, S = float(shift), B = beta - A (shift - S)
struct AffineCo {
  float A, S, B;
};
__device__ __forceinline__ AffineCo affine_co(int c, const double* shift, const double* scale,
                                              const float* gamma, const float* beta) {
  const double a = double(gamma[c]) * scale[c];
  const double s = shift ? shift[c] : 0.0;
  const float sf = float(s);
  return {float(a), sf, float((beta ? double(beta[c]) : 0.0) - a * (s - double(sf)))};
}

// column_norm_backward's: with u = x - S (S = float(shift), e = shift - S),
// dx = P dy + Q u + R,  P = scale gamma, Q = -scale^2 b, R = scale (b scale e - a); 0 if masked.
struct BackwardCo {
  float P, Q, R, S;
};
__device__ __forceinline__ BackwardCo backward_co(int c, const double* shift, const double* scale,
                                                  const float* gamma, const double* a,
                                                  const double* b) {
  const double s = shift ? shift[c] : 0.0;
  const float sf = float(s);
  const double e = s - double(sf), sc = scale[c];
  return {float(sc * double(gamma[c])), float(-sc * sc * b[c]),
          float(sc * (b[c] * sc * e - (a ? a[c] : 0.0))), sf};
}

// x = a, or a + dropout(b) written to x_out (dropout_add's rounding); sums v0 = x - shift_c,
// v1 = v0^2 (column_stats); where y or y16, y = A (x - S) + B (column_affine's rounding).
struct StatsAffinePass {
  const float* a;
  const float* b;       // null: x = a
  const uint8_t* keep;  // null: no dropout
  float keep_scale;     // 1 / (1 - p)
  float* x_out;
  const double* shift;  // null: 0
  const double* scale;  // the map's (affine_co); read only where y or y16
  const float* gamma;
  const float* beta;
  float* y;
  uint16_t* y16;
  struct Column {
    double shift;
    AffineCo co;
  };
  struct In {
    float a, b;
    bool kept;
  };
  __device__ Column column(int c) const {
    Column k{shift ? shift[c] : 0.0, {0.f, 0.f, 0.f}};
    if (y || y16) k.co = affine_co(c, shift, scale, gamma, beta);
    return k;
  }
  __device__ In load(const Column&, int, size_t i) const {
    return {a[i], b ? b[i] : 0.f, keep ? keep[i] != 0 : true};
  }
  __device__ void apply(const Column& k, size_t i, const In& in, bool, double& v0,
                        double& v1) const {
    float x = in.a;
    if (b) {
      x = __fadd_rn(x, keep ? (in.kept ? __fmul_rn(in.b, keep_scale) : 0.f) : in.b);
      x_out[i] = x;
    }
    v0 = double(x) - k.shift;
    v1 = v0 * v0;
    if (y || y16) put_out(y, y16, i, __fadd_rn(__fmul_rn(k.co.A, __fsub_rn(x, k.co.S)), k.co.B));
  }
};

// column_dot: v0 = a, v1 = a (b - shift_c).
struct DotPass {
  const float* a;
  const float* b;
  const double* shift;  // null: 0
  struct Column {
    double shift;
  };
  struct In {
    float a, b;
  };
  __device__ Column column(int c) const { return {shift ? shift[c] : 0.0}; }
  __device__ In load(const Column&, int, size_t i) const { return {a[i], b[i]}; }
  __device__ void apply(const Column& k, size_t, const In& in, bool, double& v0,
                        double& v1) const {
    v0 = double(in.a);
    v1 = v0 * (double(in.b) - k.shift);
  }
};

// column_norm_backward's map dx = P dy + Q (x - S) + R on live rows (masked: 0, or dx kept when
// adding), and its bf16 rounding where dx16; with dot, also column_dot(dy, x)'s sums (shift 0):
// v0 = dy, v1 = dy x.
struct BackwardPass {
  const float* x;
  const float* dy;
  const double *shift, *scale, *a, *b;  // backward_co's (shift, a: null for 0)
  const float* gamma;
  float* dx;
  uint16_t* dx16;
  bool add, dot;
  using Column = BackwardCo;
  struct In {
    float x, dy, dx;
  };
  __device__ Column column(int c) const { return backward_co(c, shift, scale, gamma, a, b); }
  __device__ In load(const Column&, int, size_t i) const {
    return {x[i], dy[i], add ? dx[i] : 0.f};
  }
  __device__ void apply(const Column& k, size_t i, const In& in, bool live, double& v0,
                        double& v1) const {
    if (dot) {
      v0 = double(in.dy);
      v1 = v0 * double(in.x);
    }
    if (!live) {
      put_grad16(dx, dx16, i, add ? in.dx : 0.f);
      return;
    }
    const float v =
        __fadd_rn(__fadd_rn(__fmul_rn(k.P, in.dy), __fmul_rn(k.Q, __fsub_rn(in.x, k.S))), k.R);
    put_grad16(dx, dx16, i, add ? __fadd_rn(in.dx, v) : v);
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
void count_rows(const uint8_t* mask, int rows, double* count, cudaStream_t s) {
  PN_LAUNCH(count_rows_kernel, 1, kThreads, 0, s)(mask, rows, count);
  PN_LAUNCHED();
}

// ---- row groups: one warp per (row, group) --------------------------------------------------
constexpr int kWarpsPerBlock = kThreads / 32;
unsigned warp_blocks(long long units) {
  return unsigned((units + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
__device__ __forceinline__ long long warp_unit() {
  return blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
}

// A lane's values of one (row, group) of m: l, l + 32, ... (KMAX of them at most when KMAX > 0, a
// number fixed at compile time, so that they stay in registers; KMAX = 0: any m).
template <int KMAX>
__device__ __forceinline__ int lane_slots(int m) {
  return KMAX > 0 ? KMAX : (m + 31) / 32;
}
constexpr int kMaxHeld = 32;  // values a lane holds at most: groups of up to 1024
template <int KMAX>
using Held = float[KMAX > 0 ? KMAX : 1];
template <int KMAX>
__device__ __forceinline__ float held_or_read(const Held<KMAX>& v, const float* xr, int k, int c) {
  if constexpr (KMAX > 0)
    return v[k];
  else
    return xr[c];
}

// Forward of a row group, kRms: rinv = 1/sqrt(mean x^2 + eps), y = x rinv gamma (stat = rinv).
// Otherwise: mu, var over the group (deviations from the float mean squared in float, summed in
// double, the offset mu - float(mu) removed after, as the CPU); xh = (x - mu) rstd; y = gamma xh +
// beta (stat = rstd, mean = float(mu)). With KMAX > 0 x is read once. With res.branch the group
// normalized is x + dropout(branch), rounded as dropout_add rounds it, and written to res.sum.
struct ResidualIn {
  const float* branch;  // null: normalize x itself
  const uint8_t* keep;  // null: no dropout
  float scale;          // 1 / (1 - p)
  float* sum;
};
template <bool kRms, int KMAX>
__global__ void rowgroup_forward_kernel(const float* x, ResidualIn res, int rows, int d, int G,
                                        float eps, const float* gamma, const float* beta,
                                        float* y, uint16_t* y16, float* mean, float* stat) {
  const long long w = warp_unit();
  if (w >= (long long)rows * G) return;
  const int lane = threadIdx.x & 31, m = d / G, j = int(w % G), K = lane_slots<KMAX>(m);
  const size_t off = size_t(w / G) * d + size_t(j) * m;
  const float* xr = (res.branch ? res.sum : x) + off;  // what the later passes read (KMAX 0)
  Held<KMAX> v;
  double s1 = 0;
  // With KMAX > 0 the loads come first and the sum is written after them: a store between two
  // loads (which might alias it, for all the compiler knows) would make each load wait for the
  // one before, a memory round trip per value.
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = lane + 32 * k;
    if (c >= m) continue;
    const size_t i = off + c;
    float a = x[i];
    if (res.branch) {
      a = __fadd_rn(a, res.keep ? (res.keep[i] ? __fmul_rn(res.branch[i], res.scale) : 0.f)
                                : res.branch[i]);
      if constexpr (KMAX == 0) res.sum[i] = a;
    }
    if constexpr (KMAX > 0) v[k] = a;
    s1 += kRms ? double(__fmul_rn(a, a)) : double(a);
  }
  if constexpr (KMAX > 0) {
    if (res.branch)
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (lane + 32 * k < m) res.sum[off + lane + 32 * k] = v[k];
  }
  s1 = warp_sum(s1);
  float mf = 0.f, rs;
  if constexpr (kRms) {
    rs = float(1.0 / sqrt(s1 / m + double(eps)));
  } else {
    const double mu = s1 / m;
    mf = float(mu);
    double s2 = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int c = lane + 32 * k;
      if (c >= m) continue;
      const float u = __fsub_rn(held_or_read<KMAX>(v, xr, k, c), mf);
      s2 += double(__fmul_rn(u, u));
    }
    s2 = warp_sum(s2);
    const double o = mu - double(mf);
    rs = float(1.0 / sqrt(fmax(0.0, s2 / m - o * o) + double(eps)));
  }
  const float* gj = gamma ? gamma + size_t(j) * m : nullptr;
  const float* bj = beta ? beta + size_t(j) * m : nullptr;
  const auto out_of = [&](float a, int c) {
    if constexpr (kRms)
      return gj ? __fmul_rn(__fmul_rn(a, rs), gj[c]) : __fmul_rn(a, rs);
    else
      return __fadd_rn(__fmul_rn(gj[c], __fmul_rn(__fsub_rn(a, mf), rs)), bj[c]);
  };
  if constexpr (KMAX > 0) {  // every output (reading gamma and beta) before the first store
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane + 32 * k < m) v[k] = out_of(v[k], lane + 32 * k);
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane + 32 * k < m) put_out(y, y16, off + lane + 32 * k, v[k]);
  } else {
    for (int c = lane; c < m; c += 32) put_out(y, y16, off + c, out_of(xr[c], c));
  }
  if (lane == 0) {
    if (!kRms) mean[w] = mf;
    stat[w] = rs;
  }
}

// Backward of a row group, xh = (x - mu) rstd (kRms: x rinv), g = gamma dy: dx = rstd (g -
// mean_group g - xh mean_group(g xh)) (kRms: rinv (g - xh mean_group(g xh))); 0 on masked rows.
// Block b takes group j = b % G of rows b / G * kRowWarps + warp, stepping row_step. With part
// (KMAX > 0) each lane also sums dy xh and dy (dgamma, dbeta) of its columns over its live rows in
// float, as the CPU sums a chunk; the block adds its warps in warp order, in double, into part[(b /
// G) * 2 + {0, 1}][column], summed by column_combine_kernel. The partition depends on the shape
// alone: bitwise repeatable.
constexpr int kRowWarps = 8;
template <bool kRms, int KMAX>
__global__ void rowgroup_backward_kernel(const float* x, const float* dy, const float* mean,
                                         const float* stat, const float* gamma, const uint8_t* mask,
                                         int rows, int d, int G, int row_step, float* dx,
                                         bool add, uint16_t* dx16, double* part) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, m = d / G, K = lane_slots<KMAX>(m);
  const int j = int(blockIdx.x % G), rb = int(blockIdx.x / G);
  const float* gj = gamma ? gamma + size_t(j) * m : nullptr;
  constexpr bool kEarlyDx = KMAX > 0 && KMAX <= 24;
  Held<KMAX> pg{}, pb{};
  for (int r = rb * kRowWarps + warp; r < rows; r += row_step) {
    const size_t off = size_t(r) * d + size_t(j) * m;
    // Whether the row is live is read with its values, not before them (a load that decided
    // whether the others ran would be a memory round trip of its own a row); a masked row's
    // values are read and go unused.
    const bool row_live = live(mask, r);
    // The row's dx (when adding into it) loaded with its x and dy, before any store: one memory
    // round trip for the three where a load of dx in each stage below made one a stage. Up to
    // 24 values a lane (d 768): 128 registers, two blocks an SM as without; 32 would need 154.
    Held<KMAX> dx_in{};
    if constexpr (kEarlyDx) {
      if (add)
#pragma unroll
        for (int k = 0; k < K; ++k)
          if (lane + 32 * k < m) dx_in[k] = dx[off + lane + 32 * k];
    }
    const size_t u = size_t(r) * G + j;
    const float rs = stat[u], mu = kRms ? 0.f : mean[u];
    const auto xhat = [&](float a) { return row_xhat(a, kRms, mu, rs); };
    // f(k, c, dy, xh, g) over the lane's values of the row (the second time from L1 or L2)
    const auto each = [&](auto&& f) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int c = lane + 32 * k;
        if (c >= m) continue;
        const float dyc = dy[off + c];
        f(k, c, dyc, xhat(x[off + c]), gj ? __fmul_rn(gj[c], dyc) : dyc);
      }
    };
    double sg = 0, sgx = 0;
    each([&](int k, int, float dyc, float xh, float g) {
      sg += double(g);
      sgx += double(__fmul_rn(g, xh));
      if constexpr (KMAX > 0) {
        if (row_live) {
          pg[k] = __fadd_rn(pg[k], __fmul_rn(dyc, xh));
          pb[k] = __fadd_rn(pb[k], dyc);
        }
      }
    });
    if (!row_live) {
      masked_row_grad(dx, dx16, off, m, lane, add);
      continue;
    }
    const RowMeans means = row_means(kRms, sg, sgx, m);
    const auto grad = [&](float xh, float g) { return row_grad(kRms, rs, xh, g, means); };
    if constexpr (KMAX > 0) {
      // kStage values at a time: their loads before their stores, so that the loads of a stage
      // are in flight together (see the forward).
      constexpr int kStage = KMAX < 8 ? KMAX : 8;
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += kStage) {
        float dxv[kStage] = {};
#pragma unroll
        for (int k = k0; k < k0 + kStage; ++k) {
          const int c = lane + 32 * k;
          if (c >= m) continue;
          const float dyc = dy[off + c], g = gj ? __fmul_rn(gj[c], dyc) : dyc;
          const float v = grad(xhat(x[off + c]), g);
          dxv[k - k0] = add ? __fadd_rn(kEarlyDx ? dx_in[k] : dx[off + c], v) : v;
        }
#pragma unroll
        for (int k = k0; k < k0 + kStage; ++k)
          if (lane + 32 * k < m) put_grad16(dx, dx16, off + lane + 32 * k, dxv[k - k0]);
      }
    } else {
      each([&](int, int c, float, float xh, float g) {
        put_grad(dx, dx16, off + c, grad(xh, g), add);
      });
    }
  }
  if constexpr (KMAX > 0) {
    if (!part) return;  // uniform over the block: no barrier is skipped by some threads only
    __shared__ float sh[2][kRowWarps][32];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      sh[0][warp][lane] = pg[k];
      sh[1][warp][lane] = pb[k];
      __syncthreads();
      const int c = lane + 32 * k;
      if (warp < 2 && c < m) {
        double a = 0;
        for (int w = 0; w < kRowWarps; ++w) a += double(sh[warp][w][lane]);
        part[(size_t(rb) * 2 + warp) * d + size_t(j) * m + c] = kRms && warp == 1 ? 0.0 : a;
      }
      __syncthreads();
    }
  }
}
struct RowGradOp {  // the unfused path's parameter gradients: v0 = dy xh, v1 = dy
  const float* x;
  const float* dy;
  const float* mean;  // null: kRms (xh = x rinv)
  const float* stat;
  int d, G, m;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    const size_t k = size_t(r) * G + c / m;
    const float xh = row_xhat(x[i], !mean, mean ? mean[k] : 0.f, stat[k]);
    v0 = double(__fmul_rn(dy[i], xh));
    v1 = double(dy[i]);
  }
};

// The smallest lane capacity for m values (0: more than kMaxHeld per lane, nothing held).
int held_slots(int m) {
  for (int k : {2, 4, 8, 16, 24, kMaxHeld})
    if (m <= 32 * k) return k;
  return 0;
}
template <class F>
void with_held_slots(int m, F&& f) {  // f(std::integral_constant<int, KMAX>)
  switch (held_slots(m)) {
    case 2: return f(std::integral_constant<int, 2>());
    case 4: return f(std::integral_constant<int, 4>());
    case 8: return f(std::integral_constant<int, 8>());
    case 16: return f(std::integral_constant<int, 16>());
    case 24: return f(std::integral_constant<int, 24>());
    case kMaxHeld: return f(std::integral_constant<int, kMaxHeld>());
    default: return f(std::integral_constant<int, 0>());
  }
}

template <bool kRms>
void rowgroup_forward(const float* x, ResidualIn res, int rows, int d, int G, float eps,
                      const float* gamma, const float* beta, float* y, uint16_t* y16, float* mean,
                      float* stat, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  with_held_slots(d / G, [&](auto held) {
    PN_LAUNCH((rowgroup_forward_kernel<kRms, decltype(held)::value>),
              warp_blocks((long long)rows * G), kThreads, 0, s)(x, res, rows, d, G, eps, gamma,
                                                               beta, y, y16, mean, stat);
    PN_LAUNCHED();
  });
}

// Row blocks of the backward: at most kGradBlocks blocks in all (their partial sums are d doubles
// x 2 each), and no more than the rows need.
constexpr int kGradBlocks = 256;
template <bool kRms>
void rowgroup_backward(const float* x, const float* dy, const float* mean, const float* stat,
                       const float* gamma, const uint8_t* mask, int rows, int d, int G, float* dx,
                       float* dgamma, float* dbeta, bool add, uint16_t* dx16, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  const int m = d / G;
  const int rb = std::max(1, std::min((rows + kRowWarps - 1) / kRowWarps, kGradBlocks / G));
  const bool fused = held_slots(m) > 0 && (dgamma || dbeta);
  double* part = fused ? scratch_as<double>(kSlotPartials, size_t(rb) * 2 * d, s) : nullptr;
  with_held_slots(m, [&](auto held) {
    PN_LAUNCH((rowgroup_backward_kernel<kRms, decltype(held)::value>), unsigned(rb) * G,
              kRowWarps * 32, 0, s)(x, dy, mean, stat, gamma, mask, rows, d, G, rb * kRowWarps,
                                    dx, add, dx16, part);
    PN_LAUNCHED();
  });
  if (fused) {
    column_combine(part, rb, d, dgamma, dbeta, s);
  } else if (dgamma || dbeta) {
    column_reduce(RowGradOp{x, dy, mean, stat, d, G, m}, mask, rows, d, dgamma, dbeta, s);
  }
}

}  // namespace

void column_stats(const float* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq, cudaStream_t s) {
  column_stats_affine(x, nullptr, nullptr, 0.f, nullptr, mask, rows, d, shift, count, sum, sumsq,
                      nullptr, nullptr, nullptr, nullptr, nullptr, s);
}

void column_dot(const float* a, const float* b, const uint8_t* mask, int rows, int d,
                const double* shift, double* sum_a, double* sum_ab, cudaStream_t s) {
  column_pass(DotPass{a, b, shift}, mask, rows, d, nullptr, sum_a, sum_ab, s);
}

void column_affine(const float* x, int rows, int d, const double* shift, const double* scale,
                   const float* gamma, const float* beta, float* y, uint16_t* y16,
                   const double* when, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  column_pass(
      StatsAffinePass{x, nullptr, nullptr, 0.f, nullptr, shift, scale, gamma, beta, y, y16},
      nullptr, rows, d, when, (double*)nullptr, (double*)nullptr, s);
}

void column_norm_backward(const float* x, const float* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const float* gamma,
                          const double* a, const double* b, float* dx, bool add_to_dx,
                          uint16_t* dx16, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  column_pass(BackwardPass{x, dy, shift, scale, a, b, gamma, dx, dx16, add_to_dx, false}, mask,
              rows, d, nullptr, (double*)nullptr, (double*)nullptr, s);
}

void column_stats_affine(const float* a, const float* b, const uint8_t* keep, float p, float* x,
                         const uint8_t* mask, int rows, int d, const double* shift,
                         double* count, double* sum, double* sumsq, const double* scale,
                         const float* gamma, const float* beta, float* y, uint16_t* y16,
                         cudaStream_t s) {
  count_rows(mask, rows, count, s);
  column_pass(StatsAffinePass{a, b, keep, 1.f / (1.f - p), x, shift, scale, gamma, beta, y, y16},
              mask, rows, d, nullptr, sum, sumsq, s);
}

void column_backward_dot(const float* x, const float* dy, const uint8_t* mask, int rows, int d,
                         const double* scale, const float* gamma, const double* b, float* dx,
                         bool add_to_dx, uint16_t* dx16, double* sum_dy, double* sum_dy_x,
                         cudaStream_t s) {
  column_pass(BackwardPass{x, dy, nullptr, scale, nullptr, b, gamma, dx, dx16, add_to_dx, true},
              mask, rows, d, nullptr, sum_dy, sum_dy_x, s);
}

void rowgroup_rms_forward(const float* x, int rows, int d, int G, float eps, const float* gamma,
                          float* y, uint16_t* y16, float* rinv, cudaStream_t s) {
  rowgroup_forward<true>(x, ResidualIn{}, rows, d, G, eps, gamma, nullptr, y, y16, nullptr, rinv,
                         s);
}

void rowgroup_rms_backward(const float* x, const float* dy, const float* rinv, const float* gamma,
                           const uint8_t* mask, int rows, int d, int G, float* dx, float* dgamma,
                           bool add_to_dx, uint16_t* dx16, cudaStream_t s) {
  rowgroup_backward<true>(x, dy, nullptr, rinv, gamma, mask, rows, d, G, dx, dgamma, nullptr,
                          add_to_dx, dx16, s);
}

void rowgroup_norm_forward(const float* x, int rows, int d, int G, float eps, const float* gamma,
                           const float* beta, float* y, uint16_t* y16, float* mean, float* rstd,
                           cudaStream_t s) {
  rowgroup_forward<false>(x, ResidualIn{}, rows, d, G, eps, gamma, beta, y, y16, mean, rstd, s);
}

void rowgroup_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                            const float* gamma, const uint8_t* mask, int rows, int d, int G,
                            float* dx, float* dgamma, float* dbeta, bool add_to_dx,
                            uint16_t* dx16, cudaStream_t s) {
  rowgroup_backward<false>(x, dy, mean, rstd, gamma, mask, rows, d, G, dx, dgamma, dbeta,
                           add_to_dx, dx16, s);
}

void layernorm_forward(const float* x, int rows, int d, const float* gamma, const float* beta,
                       float eps, float* y, uint16_t* y16, float* mean, float* rstd,
                       cudaStream_t s) {
  rowgroup_norm_forward(x, rows, d, 1, eps, gamma, beta, y, y16, mean, rstd, s);
}

void residual_layernorm_forward(const float* a, const float* b, const uint8_t* keep, float p,
                                int rows, int d, const float* gamma, const float* beta, float eps,
                                float* sum, float* y, uint16_t* y16, float* mean, float* rstd,
                                cudaStream_t s) {
  rowgroup_forward<false>(a, ResidualIn{b, keep, 1.f / (1.f - p), sum}, rows, d, 1, eps, gamma,
                          beta, y, y16, mean, rstd, s);
}

void layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                        const float* gamma, const uint8_t* mask, int rows, int d, float* dx,
                        float* dgamma, float* dbeta, bool add_to_dx, uint16_t* dx16,
                        cudaStream_t s) {
  rowgroup_norm_backward(x, dy, mean, rstd, gamma, mask, rows, d, 1, dx, dgamma, dbeta, add_to_dx,
                         dx16, s);
}

}  // namespace pn::cuda
