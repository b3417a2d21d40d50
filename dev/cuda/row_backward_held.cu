// The row norms' backward (layer, rms, group) with the group held whole: an experiment beside the
// product's kernel (rowgroup_backward_kernel, kernels/cuda/norm_kernels.cu), which reads each
// lane's values as floats and reads x and dy a second time from L1. This one takes 4 warps a block
// and 16-byte loads, and reads x, dy and dx once, on groups of 128, 256, 384, 512, 768 or 1024 on
// aligned rows. Both are checked against the CPU kernels, then timed (dev_common.h).
//
//   dev_row_backward_held [--check] [--reps N]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "dev/cuda/dev_common.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/row_groups.cuh"
#include "kernels/kernels.h"

namespace pn::cuda {
namespace {

// The same backward with the group held whole (m = 128 KV; x, dy, dx, gamma 16-byte aligned,
// dx16 8-byte): each lane loads its 4 KV values of x, dy and (adding) dx as 16-byte vectors,
// once, and keeps xh and g in their place for the second half (the product's kernel reads x and
// dy again, from L1, as scalars); blocks of kHeldWarps warps, a lane's values 4 (lane + 32 k) + e.
// The same math and rounding per value; the row sums and dgamma/dbeta add other lanes' columns
// in another order, so their last bits may differ from the product's.
constexpr int kHeldWarps = 4;
// Blocks an SM: three up to 4 vectors a lane (at most 152 registers); with more, a cap of 168
// spilled, and it takes two (d 768 and 1024: 148 to 236 registers, no spills).
constexpr int held_blocks_per_sm(int kv) { return kv <= 4 ? 3 : 2; }
struct F4 {
  float v[4];
};
__device__ __forceinline__ F4 load4(const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  return {{a.x, a.y, a.z, a.w}};
}
template <bool kRms, int KV, bool kAdd>
__global__ void __launch_bounds__(kHeldWarps * 32, held_blocks_per_sm(KV))
    rowgroup_backward_held_kernel(const float* x, const float* dy, const float* mean,
                                  const float* stat, const float* gamma, const uint8_t* mask,
                                  int rows, int d, int G, int row_step, float* dx,
                                  uint16_t* dx16, double* part) {
  constexpr int m = 128 * KV;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j = int(blockIdx.x % G), rb = int(blockIdx.x / G);
  const float* gj = gamma ? gamma + size_t(j) * m : nullptr;
  // dx (when adding) loaded with x and dy up to 6 vectors; at 8 it is loaded whole before the
  // second half instead (fewer registers while the first half's loads are in flight).
  constexpr bool kEarlyDx = KV <= 6;
  F4 pg[KV] = {}, pb[KV] = {};
  for (int r = rb * kHeldWarps + warp; r < rows; r += row_step) {
    const size_t off = size_t(r) * d + size_t(j) * m;
    const bool row_live = live(mask, r);  // read with the values, as the product's kernel
    F4 xv[KV], gv[KV], dv[kAdd ? KV : 1];
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      const size_t i = off + 4 * (lane + 32 * k);
      xv[k] = load4(x + i);
      gv[k] = load4(dy + i);
      if constexpr (kAdd && kEarlyDx) dv[k] = load4(dx + i);
    }
    const size_t u = size_t(r) * G + j;
    const float rs = stat[u], mu = kRms ? 0.f : mean[u];
    double sg = 0, sgx = 0;
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      const F4 gm = gj ? load4(gj + 4 * (lane + 32 * k)) : F4{};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dyc = gv[k].v[e], xh = row_xhat(xv[k].v[e], kRms, mu, rs);
        const float g = gj ? __fmul_rn(gm.v[e], dyc) : dyc;
        sg += double(g);
        sgx += double(__fmul_rn(g, xh));
        if (row_live) {
          pg[k].v[e] = __fadd_rn(pg[k].v[e], __fmul_rn(dyc, xh));
          pb[k].v[e] = __fadd_rn(pb[k].v[e], dyc);
        }
        xv[k].v[e] = xh;
        gv[k].v[e] = g;
      }
    }
    if (!row_live) {
      masked_row_grad(dx, dx16, off, m, lane, kAdd);
      continue;
    }
    const RowMeans means = row_means(kRms, sg, sgx, m);
    if constexpr (kAdd && !kEarlyDx)
#pragma unroll
      for (int k = 0; k < KV; ++k) dv[k] = load4(dx + off + 4 * (lane + 32 * k));
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      F4 o;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = row_grad(kRms, rs, xv[k].v[e], gv[k].v[e], means);
        if constexpr (kAdd)
          o.v[e] = __fadd_rn(dv[k].v[e], v);
        else
          o.v[e] = v;
      }
      const size_t i = off + 4 * (lane + 32 * k);
      *reinterpret_cast<float4*>(dx + i) = float4{o.v[0], o.v[1], o.v[2], o.v[3]};
      if (dx16) {
        union {
          __nv_bfloat162 h[2];
          uint2 u;
        } b;
        b.h[0] = __floats2bfloat162_rn(o.v[0], o.v[1]);
        b.h[1] = __floats2bfloat162_rn(o.v[2], o.v[3]);
        *reinterpret_cast<uint2*>(dx16 + i) = b.u;
      }
    }
  }
  if (!part) return;  // uniform over the block
  // dgamma, dbeta: the block's warps added in warp order, in double, 128 columns at a time
  __shared__ float sh[2][kHeldWarps][128];
#pragma unroll
  for (int k = 0; k < KV; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sh[0][warp][4 * lane + e] = pg[k].v[e];
      sh[1][warp][4 * lane + e] = pb[k].v[e];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < 2 * 128; t += kHeldWarps * 32) {
      const int which = t / 128, cc = t % 128;
      double a = 0;
      for (int w = 0; w < kHeldWarps; ++w) a += double(sh[which][w][cc]);
      part[(size_t(rb) * 2 + which) * d + size_t(j) * m + 128 * k + cc] =
          kRms && which == 1 ? 0.0 : a;
    }
    __syncthreads();
  }
}

// The held kernel's vectors a lane (KV = m / 128) where it takes the shape and the pointers, else
// 0 (the product's kernel runs instead).
int held_vectors(int m, const void* x, const void* dy, const void* dx, const void* gamma,
                 const void* dx16) {
  const auto at = [](const void* p, uintptr_t a) {
    return reinterpret_cast<uintptr_t>(p) % a == 0;
  };
  const int kv = m % 128 == 0 ? m / 128 : 0;
  const bool fits = kv == 1 || kv == 2 || kv == 3 || kv == 4 || kv == 6 || kv == 8;
  return fits && at(x, 16) && at(dy, 16) && at(dx, 16) && at(gamma, 16) && at(dx16, 8) ? kv : 0;
}
template <class F>
void with_held_vectors(int kv, F&& f) {  // f(std::integral_constant<int, KV>)
  switch (kv) {
    case 1: return f(std::integral_constant<int, 1>());
    case 2: return f(std::integral_constant<int, 2>());
    case 3: return f(std::integral_constant<int, 3>());
    case 4: return f(std::integral_constant<int, 4>());
    case 6: return f(std::integral_constant<int, 6>());
    default: return f(std::integral_constant<int, 8>());
  }
}

// As the product's rowgroup_norm_backward (kRms: rowgroup_rms_backward, mean unused) on the held
// kernel; false where the shape or the pointers do not fit it (nothing launched). Its blocks: as
// many as an H100's or H200's 132 SMs hold at once (a constant of the shape, not of the GPU, so
// that the partition, and the bits, depend on the shape alone).
template <bool kRms>
bool held_backward(const float* x, const float* dy, const float* mean, const float* stat,
                   const float* gamma, const uint8_t* mask, int rows, int d, int G, float* dx,
                   float* dgamma, float* dbeta, bool add, uint16_t* dx16, cudaStream_t s) {
  constexpr int kSms = 132;
  const int kv = d % 4 == 0 && rows > 0 ? held_vectors(d / G, x, dy, dx, gamma, dx16) : 0;
  if (kv == 0) return false;
  const int most = kSms * held_blocks_per_sm(kv) / G;
  const int rb = std::max(1, std::min((rows + kHeldWarps - 1) / kHeldWarps, most));
  const bool sums = dgamma || dbeta;
  double* part = sums ? scratch_as<double>(kSlotPartials, size_t(rb) * 2 * d, s) : nullptr;
  with_held_vectors(kv, [&](auto held) {
    constexpr int KV = decltype(held)::value;
    const unsigned grid = unsigned(rb) * G, threads = kHeldWarps * 32;
    if (add)
      PN_LAUNCH((rowgroup_backward_held_kernel<kRms, KV, true>), grid, threads, 0, s)(
          x, dy, mean, stat, gamma, mask, rows, d, G, rb * kHeldWarps, dx, dx16, part);
    else
      PN_LAUNCH((rowgroup_backward_held_kernel<kRms, KV, false>), grid, threads, 0, s)(
          x, dy, mean, stat, gamma, mask, rows, d, G, rb * kHeldWarps, dx, dx16, part);
    PN_LAUNCHED();
  });
  if (sums) column_combine(part, rb, d, dgamma, dbeta, s);
  return true;
}

}  // namespace
}  // namespace pn::cuda

namespace {
using pn::dev::DevBuf;
using pn::dev::expect_close;

// One shape's inputs on the host, with the forward's statistics from the CPU.
struct Case {
  int rows, d, G;
  bool rms;
  std::vector<float> x, dy, gamma, mean, stat, base;
  std::vector<uint8_t> mask;
  Case(int r, int dd, int g, bool is_rms, bool masked) : rows(r), d(dd), G(g), rms(is_rms) {
    const size_t n = size_t(rows) * d;
    x = pn::dev::random_floats(n, 40, 2.f, 5.f);
    dy = pn::dev::random_floats(n, 41);
    gamma = pn::dev::random_floats(d, 42, 0.3f, 1.f);
    base = pn::dev::random_floats(n, 47, 3.f);
    mask = pn::dev::random_mask(rows, 44, masked);
    std::vector<float> y(n), beta(d, 0.f);
    mean.assign(size_t(rows) * G, 0.f);
    stat.assign(size_t(rows) * G, 0.f);
    if (rms)
      pn::k::rowgroup_rms_forward<float>(x.data(), rows, d, G, 1e-5f, gamma.data(), y.data(),
                                         nullptr, stat.data());
    else
      pn::k::rowgroup_norm_forward<float>(x.data(), rows, d, G, 1e-5f, gamma.data(), beta.data(),
                                          y.data(), nullptr, mean.data(), stat.data());
  }
  std::string name() const {
    return std::string(rms ? "rms" : "layer") + " rows " + std::to_string(rows) + " d " +
           std::to_string(d) + " G " + std::to_string(G);
  }
};

// The outputs of the backward of either kernel: dx set, dgamma and dbeta; then dx added into
// the case's base, with its bf16 copy.
struct Out {
  std::vector<float> dx, dx_added, dgamma, dbeta;
  std::vector<uint16_t> dx16;
};
// A case's device buffers, and a backward of either kernel on them (held: the experiment's).
struct OnDevice {
  const Case& c;
  DevBuf<float> x, dy, gamma, mean, stat, dx, dgamma, dbeta;
  DevBuf<uint16_t> dx16;
  DevBuf<uint8_t> mask;
  explicit OnDevice(const Case& k)
      : c(k), x(k.x), dy(k.dy), gamma(k.gamma), mean(k.mean), stat(k.stat), dx(k.x.size()),
        dgamma(size_t(k.d)), dbeta(size_t(k.d)), dx16(k.x.size()), mask(k.mask) {}
  // false where the held kernel does not take the shape
  bool backward(bool held, bool add, bool with_dx16, cudaStream_t s) {
    float* db = c.rms ? nullptr : dbeta.ptr;
    uint16_t* h = with_dx16 ? dx16.ptr : nullptr;
    const float* mu = c.rms ? nullptr : mean.ptr;
    if (held)
      return c.rms ? pn::cuda::held_backward<true>(x.ptr, dy.ptr, mu, stat.ptr, gamma.ptr,
                                                   mask.ptr, c.rows, c.d, c.G, dx.ptr, dgamma.ptr,
                                                   db, add, h, s)
                   : pn::cuda::held_backward<false>(x.ptr, dy.ptr, mu, stat.ptr, gamma.ptr,
                                                    mask.ptr, c.rows, c.d, c.G, dx.ptr,
                                                    dgamma.ptr, db, add, h, s);
    if (c.rms)
      pn::cuda::rowgroup_rms_backward(x.ptr, dy.ptr, stat.ptr, gamma.ptr, mask.ptr, c.rows, c.d,
                                      c.G, dx.ptr, dgamma.ptr, add, h, s);
    else
      pn::cuda::rowgroup_norm_backward(x.ptr, dy.ptr, mu, stat.ptr, gamma.ptr, mask.ptr, c.rows,
                                       c.d, c.G, dx.ptr, dgamma.ptr, db, add, h, s);
    return true;
  }
  Out run(bool held, cudaStream_t s) {
    Out o;
    const std::vector<float> zero(size_t(c.d), 0.f);
    dgamma.upload(zero);
    dbeta.upload(zero);
    if (!backward(held, false, false, s)) return o;
    o.dx = dx.download(s);
    o.dgamma = dgamma.download(s);
    o.dbeta = dbeta.download(s);
    dx.upload(c.base);
    backward(held, true, true, s);
    o.dx_added = dx.download(s);
    o.dx16 = dx16.download(s);
    return o;
  }
};

uint16_t bf16_bits(float v) {  // rounded to nearest even, as __float2bfloat16_rn (no NaN here)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The held kernel and the product's against the CPU kernels on one case: dx, dgamma and dbeta to
// float rounding (sums in another order), dx added and its bf16 copy to the bit.
void check(const Case& c, cudaStream_t s) {
  const size_t n = c.x.size();
  std::vector<float> dx(n), dgamma(c.d, 0.f), dbeta(c.d, 0.f);
  if (c.rms)
    pn::k::rowgroup_rms_backward<float>(c.x.data(), c.dy.data(), c.stat.data(), c.gamma.data(),
                                        c.mask.data(), c.rows, c.d, c.G, dx.data(), dgamma.data(),
                                        false, nullptr);
  else
    pn::k::rowgroup_norm_backward<float>(c.x.data(), c.dy.data(), c.mean.data(), c.stat.data(),
                                         c.gamma.data(), c.mask.data(), c.rows, c.d, c.G,
                                         dx.data(), dgamma.data(), dbeta.data(), false, nullptr);
  const double grad_atol = 1e-6 * c.rows;
  OnDevice dev(c);
  for (bool held : {false, true}) {
    const Out o = dev.run(held, s);
    if (o.dx.empty()) continue;  // a shape the held kernel leaves to the product's
    const std::string who = c.name() + (held ? " held" : " product") + ": ";
    expect_close(who + "dx", o.dx, dx, 1e-4, 1e-5);
    expect_close(who + "dgamma", o.dgamma, dgamma, grad_atol, 1e-5);
    if (!c.rms) expect_close(who + "dbeta", o.dbeta, dbeta, grad_atol, 1e-5);
    std::vector<float> added(n);
    std::vector<uint16_t> h16(n);
    for (size_t i = 0; i < n; ++i) {
      added[i] = c.base[i] + o.dx[i];  // a masked row's dx is 0: its base stays
      h16[i] = bf16_bits(o.dx_added[i]);
    }
    expect_close(who + "dx added", o.dx_added, added, 0, 0);
    expect_close(who + "dx16", o.dx16, h16, 0, 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Every held width (1 to 8 vectors a lane), groups, masked rows (odd row counts), more rows than
  // the kernel's warps, and a width it leaves to the product's kernel.
  const auto check_all = [](cudaStream_t s) {
    const int shapes[][3] = {{37, 128, 1}, {9, 256, 2},   {300, 384, 1},  {64, 512, 4},
                             {33, 768, 1}, {20, 1024, 1}, {2001, 128, 1}, {41, 96, 1}};
    for (const auto& sh : shapes)
      for (bool rms : {false, true}) check(Case(sh[0], sh[1], sh[2], rms, sh[0] % 2 == 1), s);
  };
  const auto time_all = [](pn::dev::Timer& timer, double copy, int reps, cudaStream_t s) {
    std::printf("%-6s %5s %-10s | %8s %6s | %8s %6s\n", "norm", "d", "form", "product", "copy",
                "held", "copy");
    for (int d : {768, 1024})
      for (bool rms : {false, true})
        for (bool train : {false, true}) {
          const Case c(16384, d, 1, rms, false);
          OnDevice dev(c);
          // bytes: x, dy read, dx written; training also reads dx (added into) and writes dx16
          const double bytes = double(c.x.size()) * (train ? 4.5 : 3.0) * 4;
          double ms[2];
          for (bool held : {false, true})
            ms[held] = timer.ms([&] { dev.backward(held, train, train, s); }, reps);
          std::printf("%-6s %5d %-10s | %8.3f %5.0f%% | %8.3f %5.0f%%\n", rms ? "rms" : "layer",
                      d, train ? "dx+=, dx16" : "fp32", ms[0], 100 * bytes / ms[0] / 1e6 / copy,
                      ms[1], 100 * bytes / ms[1] / 1e6 / copy);
        }
  };
  return pn::dev::experiment_main(argc, argv, "dev_row_backward_held", check_all, time_all);
}
