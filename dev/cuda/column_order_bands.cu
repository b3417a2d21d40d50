// The column passes' blocks handed out in bands: an experiment beside the product's order
// (StripWalk, kernels/cuda/common.cuh). The product walks a strip of 32 columns top to bottom,
// then the next strip (at d 768, rows 3 KB apart read 128 bytes at a time); bands hands out every
// strip of a band of 256 rows (contiguous memory) before the next band, and a pass that only maps
// (after a pass that summed the same rows) from the last band back, where the rows read last are
// the likeliest still in L2. The blocks, their sums and so the bits are the same in either order:
// the check runs three passes (statistics, a map, a backward's map with its sums) in both orders
// against each other and against the CPU; the timing puts both orders beside the product's
// column_stats, column_affine and column_backward_dot (dev_common.h).
//
//   dev_column_order_bands [--check] [--reps N]
#include <cstdint>
#include <string>
#include <vector>

#include "dev/cuda/dev_common.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

namespace pn::cuda {
namespace {

// Block b of a grid of chunks * tiles blocks in x: the tiles of a chunk one after another, from
// the last chunk back where `back`.
struct BandWalk {
  int tiles;
  bool back;
  __device__ void block(int& chunk, int& tile) const {
    const unsigned b = back ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    chunk = int(b / unsigned(tiles));
    tile = int(b % unsigned(tiles));
  }
};

// column_pass (common.cuh) in either order: the same kernel, its blocks walked in bands where
// `bands` (and from the last band back where nothing is summed).
template <class Pass>
void column_pass_in(bool bands, const Pass& pass, const uint8_t* mask, int rows, int d,
                    double* dst0, double* dst1, cudaStream_t s) {
  const int nch = column_chunks(rows), tiles = (d + kColTile - 1) / kColTile;
  if (!bands || nch == 0) return column_pass(pass, mask, rows, d, nullptr, dst0, dst1, s);
  const bool sums = dst0 || dst1;
  double* part = sums ? scratch_as<double>(kSlotPartials, size_t(nch) * 2 * d, s) : nullptr;
  PN_LAUNCH((column_pass_kernel<Pass, BandWalk>), dim3(unsigned(nch) * unsigned(tiles)),
            dim3(kColTile, kColLanes), 0, s)(pass, mask, rows, d, BandWalk{tiles, !sums},
                                             nullptr, part);
  PN_LAUNCHED();
  if (sums) column_combine(part, nch, d, dst0, dst1, s);
}

// The three passes: sums of x and x^2 (statistics); y = a_c x + b_c (a map); dx = a_c dy + b_c x
// with the sums of dy and dy x (a backward's map and its sums).
struct StatsOp {
  const float* x;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    v0 = double(x[size_t(r) * d + c]);
    v1 = v0 * v0;
  }
};
struct MapOp {
  const float *x, *a, *b;
  float* y;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    y[i] = __fadd_rn(__fmul_rn(a[c], x[i]), b[c]);
    v0 = v1 = 0;
  }
};
struct BackwardOp {
  const float *x, *dy, *a, *b;
  float* dx;
  int d;
  __device__ void operator()(int r, int c, double& v0, double& v1) const {
    const size_t i = size_t(r) * d + c;
    dx[i] = __fadd_rn(__fmul_rn(a[c], dy[i]), __fmul_rn(b[c], x[i]));
    v0 = double(dy[i]);
    v1 = v0 * double(x[i]);
  }
};

}  // namespace

void stats_in(bool bands, const float* x, const uint8_t* mask, int rows, int d, double* sum,
              double* sumsq, cudaStream_t s) {
  column_pass_in(bands, ReducePass<StatsOp>{{x, d}}, mask, rows, d, sum, sumsq, s);
}
void map_in(bool bands, const float* x, const float* a, const float* b, float* y, int rows, int d,
            cudaStream_t s) {
  column_pass_in(bands, ReducePass<MapOp>{{x, a, b, y, d}}, nullptr, rows, d, nullptr, nullptr,
                 s);
}
void backward_in(bool bands, const float* x, const float* dy, const float* a, const float* b,
                 const uint8_t* mask, float* dx, int rows, int d, double* sum_dy,
                 double* sum_dy_x, cudaStream_t s) {
  column_pass_in(bands, ReducePass<BackwardOp>{{x, dy, a, b, dx, d}}, mask, rows, d, sum_dy,
                 sum_dy_x, s);
}

}  // namespace pn::cuda

namespace {
using pn::dev::DevBuf;
using pn::dev::expect_close;

// The passes' inputs on the host and the device (xd: x), and their outputs' device buffers.
struct Inputs {
  int rows, d;
  std::vector<float> x, dy, a, b;
  std::vector<uint8_t> mask;
  DevBuf<float> xd, dyd, ad, bd, y, dx;
  DevBuf<uint8_t> maskd;
  DevBuf<double> sums;  // 2 d
  Inputs(int r, int dd, bool masked)
      : rows(r), d(dd), x(pn::dev::random_floats(size_t(r) * dd, 20, 2.f, 3.f)),
        dy(pn::dev::random_floats(size_t(r) * dd, 21)), a(pn::dev::random_floats(dd, 22)),
        b(pn::dev::random_floats(dd, 23)), mask(pn::dev::random_mask(r, 24, masked)), xd(x),
        dyd(dy), ad(a), bd(b), y(x.size()), dx(x.size()), maskd(mask), sums(2 * size_t(dd)) {}
};

// The outputs of the three passes in one order.
struct Out {
  std::vector<double> stats, back_sums;
  std::vector<float> y, dx;
};
Out run(Inputs& in, bool bands, cudaStream_t s) {
  Out o;
  // outputs filled first, so that a block left out shows
  in.y.upload(std::vector<float>(in.x.size(), -7.f), s);
  in.dx.upload(std::vector<float>(in.x.size(), -7.f), s);
  pn::cuda::stats_in(bands, in.xd.ptr, in.maskd.ptr, in.rows, in.d, in.sums.ptr,
                     in.sums.ptr + in.d, s);
  o.stats = in.sums.download(s);
  pn::cuda::map_in(bands, in.xd.ptr, in.ad.ptr, in.bd.ptr, in.y.ptr, in.rows, in.d, s);
  pn::cuda::backward_in(bands, in.xd.ptr, in.dyd.ptr, in.ad.ptr, in.bd.ptr, in.maskd.ptr,
                        in.dx.ptr, in.rows, in.d, in.sums.ptr, in.sums.ptr + in.d, s);
  o.back_sums = in.sums.download(s);
  o.y = in.y.download(s);
  o.dx = in.dx.download(s);
  return o;
}

void check(int rows, int d, bool masked, cudaStream_t s) {
  Inputs in(rows, d, masked);
  const std::string who = "rows " + std::to_string(rows) + " d " + std::to_string(d) + ": ";
  const Out bands = run(in, true, s), strips = run(in, false, s);
  expect_close(who + "statistics, bands against strips", bands.stats, strips.stats, 0, 0);
  expect_close(who + "map, bands against strips", bands.y, strips.y, 0, 0);
  expect_close(who + "backward map, bands against strips", bands.dx, strips.dx, 0, 0);
  expect_close(who + "backward sums, bands against strips", bands.back_sums, strips.back_sums, 0,
               0);
  // and the CPU's
  std::vector<double> count(1), sum(d), sumsq(d), sdy(d), sdyx(d);
  pn::k::column_stats<float>(in.x.data(), in.mask.data(), rows, d, nullptr, count.data(),
                             sum.data(), sumsq.data());
  pn::k::column_dot<float>(in.dy.data(), in.x.data(), in.mask.data(), rows, d, nullptr,
                           sdy.data(), sdyx.data());
  std::vector<double> stats(sum), back(sdy);
  stats.insert(stats.end(), sumsq.begin(), sumsq.end());
  back.insert(back.end(), sdyx.begin(), sdyx.end());
  expect_close(who + "statistics against the CPU", bands.stats, stats, 1e-9, 1e-12);
  expect_close(who + "backward sums against the CPU", bands.back_sums, back, 1e-9, 1e-12);
  std::vector<float> y(in.x.size()), dx(in.x.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const int c = int(i % d);
    y[i] = in.a[c] * in.x[i] + in.b[c];
    dx[i] = in.a[c] * in.dy[i] + in.b[c] * in.x[i];
  }
  expect_close(who + "map against the CPU", bands.y, y, 0, 0);
  expect_close(who + "backward map against the CPU", bands.dx, dx, 0, 0);
}

}  // namespace

int main(int argc, char** argv) {
  // more chunks than column tiles and a partial tile; one chunk; a partial last chunk; masked rows
  const auto check_all = [](cudaStream_t s) {
    check(2100, 200, true, s);
    check(100, 64, false, s);
    check(600, 72, true, s);
  };
  const auto time_all = [](pn::dev::Timer& timer, double copy, int reps, cudaStream_t s) {
    const int rows = 16384;
    std::printf("%5s %-22s | %8s %6s | %8s %6s | %8s %6s\n", "d", "pass", "product", "copy",
                "strips", "copy", "bands", "copy");
    for (int d : {768, 1024}) {
      Inputs in(rows, d, false);
      DevBuf<double> count(1), zero(std::vector<double>(d, 0.0)), one(std::vector<double>(d, 1.0));
      const double n = double(rows) * d * 4;  // bytes of one rows x d float array
      // a pass's bytes (its reads and writes) as a share of the copy's bandwidth
      const auto share = [&](double bytes, double ms) { return 100 * bytes / ms / 1e6 / copy; };
      const auto row = [&](const char* name, double bytes, auto product, auto in_order) {
        const double p = timer.ms(product, reps);
        const double t0 = timer.ms([&] { in_order(false); }, reps);
        const double t1 = timer.ms([&] { in_order(true); }, reps);
        std::printf("%5d %-22s | %8.3f %5.0f%% | %8.3f %5.0f%% | %8.3f %5.0f%%\n", d, name, p,
                    share(bytes, p), t0, share(bytes, t0), t1, share(bytes, t1));
      };
      row(
          "statistics (x)", n,
          [&] {
            pn::cuda::column_stats(in.xd.ptr, in.maskd.ptr, rows, d, nullptr, count.ptr,
                                   in.sums.ptr, in.sums.ptr + d, s);
          },
          [&](bool bands) {
            pn::cuda::stats_in(bands, in.xd.ptr, in.maskd.ptr, rows, d, in.sums.ptr,
                               in.sums.ptr + d, s);
          });
      row(
          "map (x -> y)", 2 * n,
          [&] {
            pn::cuda::column_affine(in.xd.ptr, rows, d, zero.ptr, one.ptr, in.ad.ptr, in.bd.ptr,
                                    in.y.ptr, nullptr, nullptr, s);
          },
          [&](bool bands) {
            pn::cuda::map_in(bands, in.xd.ptr, in.ad.ptr, in.bd.ptr, in.y.ptr, rows, d, s);
          });
      row(
          "backward (x, dy -> dx)", 3 * n,
          [&] {
            pn::cuda::column_backward_dot(in.xd.ptr, in.dyd.ptr, in.maskd.ptr, rows, d, one.ptr,
                                          in.ad.ptr, zero.ptr, in.dx.ptr, false, nullptr,
                                          in.sums.ptr, in.sums.ptr + d, s);
          },
          [&](bool bands) {
            pn::cuda::backward_in(bands, in.xd.ptr, in.dyd.ptr, in.ad.ptr, in.bd.ptr,
                                  in.maskd.ptr, in.dx.ptr, rows, d, in.sums.ptr, in.sums.ptr + d,
                                  s);
          });
    }
  };
  return pn::dev::experiment_main(argc, argv, "dev_column_order_bands", check_all, time_all);
}
