// pnbench_gemm: GFLOP/s of the CPU GEMM library on the matrix shapes of one micro-step of
// configs/ptb_small.ini (2048 tokens, d 256, ffn 1024, vocabulary 10000), row-major as the
// model calls them, best of 5 after a warm-up. It is how the BLAS was chosen: build the same
// file against another CBLAS (e.g. Debian's BLIS) and run both side by side:
//   g++ -O2 bench/gemm_shapes.cpp -I/usr/include/x86_64-linux-gnu/blis-openmp
//       -L/usr/lib/x86_64-linux-gnu/blis-openmp -lblis -o /tmp/gemm_blis
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

struct Shape {
  const char* name;
  bool trans_a, trans_b;
  int m, n, k;
};

}  // namespace

int main() {
  const Shape shapes[] = {{"logits = h E^T", false, true, 2048, 10000, 256},
                          {"dh = dz E", false, false, 2048, 256, 10000},
                          {"dE = dz^T h", true, false, 10000, 256, 2048},
                          {"fc1: x W1^T", false, true, 2048, 1024, 256},
                          {"fc2: h W2^T", false, true, 2048, 256, 1024},
                          {"dW1 = dh^T x", true, false, 1024, 256, 2048}};
  std::vector<float> a(size_t(2048) * 10000, 0.01f), b(a.size(), 0.02f), c(a.size(), 0.0f);
  double flops_all = 0, seconds_all = 0;
  for (const Shape& s : shapes) {
    const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    auto run = [&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                  s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), lda,
                  b.data(), ldb, 0.0f, c.data(), s.n);
    };
    run();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double flops = 2.0 * s.m * s.n * s.k;
    flops_all += flops, seconds_all += best;
    std::printf("%-16s %5d x %5d x %5d  %6.1f GFLOP/s\n", s.name, s.m, s.n, s.k,
                flops / best / 1e9);
  }
  std::printf("%-16s %23s  %6.1f GFLOP/s\n", "all", "", flops_all / seconds_all / 1e9);
}
