// --precision bf16 off a GPU: every float GEMM reads its operands rounded to bf16 and sums the
// products in fp32; storage, norms, their statistics, the loss and Adam stay fp32. The GEMM is
// checked against a double-precision sum of the rounded operands (it must equal it up to fp32
// summation) and against fp32 (within bf16's rounding); training with every norm kind must track
// fp32.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "lm_fixtures.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

constexpr double kFp32Unit = 1.0 / (1 << 24);  // fp32's unit roundoff
constexpr double kBf16Unit = 1.0 / (1 << 8);   // bf16's (8 significant bits)

struct GemmShape {
  const char* name;
  bool ta, tb;
  int M, N, K;
};

// The model's GEMMs (an LM's output layer, its backward, an FFN) at a quarter of ptb_small's
// rows, and an odd shape; every operand with a padded leading dimension.
const GemmShape kShapes[] = {
    {"logits = h E^T", false, true, 512, 1000, 256}, {"dh = dz E", false, false, 512, 256, 1000},
    {"dE = dz^T h", true, false, 1000, 256, 512},    {"fc1 = x W1^T", false, true, 512, 1024, 256},
    {"dW1 = dh^T x", true, false, 1024, 256, 512},   {"odd, both transposed", true, true, 33, 17, 29},
};

// The oneDNN matmul the fast path calls: the CPU's own where it has bf16 instructions; elsewhere
// oneDNN's implementation for this CPU, its reference loop included (allow_any_bf16_matmul), so
// that the call is checked on every machine. False only in a build without oneDNN.
bool use_any_bf16_matmul() {
  if (!k::cpu::bf16_matmul_available()) k::cpu::allow_any_bf16_matmul();
  return k::cpu::bf16_matmul_available();
}

TEST(Bf16Gemm, IsFp32SumsOfBf16Operands) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float alpha = 0.7f, beta = 0.5f;
  for (const GemmShape& s : kShapes) {
    const int a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
    const int b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
    const int lda = a_cols + 3, ldb = b_cols + 5, ldc = s.N + 2;
    std::vector<float> A(size_t(a_rows) * lda), B(size_t(b_rows) * ldb), C0(size_t(s.M) * ldc);
    for (float& x : A) x = normal(rng);
    for (float& x : B) x = normal(rng);
    for (float& x : C0) x = normal(rng);
    std::vector<float> C = C0;
    {
      DeviceScope bf16(Device::CPU, 0, GemmMath::bf16);
      k::gemm<float>(s.ta, s.tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta,
                     C.data(), ldc);
    }
    auto a = [&](int i, int k) { return A[s.ta ? size_t(k) * lda + i : size_t(i) * lda + k]; };
    auto b = [&](int k, int j) { return B[s.tb ? size_t(j) * ldb + k : size_t(k) * ldb + j]; };
    double worst_rounded = 0, worst_fp32 = 0, largest_change = 0;
    for (int i = 0; i < s.M; ++i)
      for (int j = 0; j < s.N; ++j) {
        double rounded = 0, exact = 0, size = 0;
        for (int k = 0; k < s.K; ++k) {
          rounded += double(round_to_bf16(a(i, k))) * round_to_bf16(b(k, j));
          exact += double(a(i, k)) * b(k, j);
          size += std::fabs(double(a(i, k)) * b(k, j));
        }
        const double c0 = C0[size_t(i) * ldc + j], c = C[size_t(i) * ldc + j];
        const double scale = alpha * size + std::fabs(beta * c0);
        // against the rounded operands: only fp32's summation error (K additions)
        worst_rounded = std::max(worst_rounded,
                                 std::fabs(c - (alpha * rounded + beta * c0)) / (s.K * kFp32Unit * scale));
        // against fp32: each product off by at most 2u + u^2 of bf16, plus the summation
        worst_fp32 = std::max(worst_fp32, std::fabs(c - (alpha * exact + beta * c0)) /
                                              ((2 * kBf16Unit + kBf16Unit * kBf16Unit + s.K * kFp32Unit) * scale));
        largest_change = std::max(largest_change, std::fabs(c - (alpha * exact + beta * c0)) / scale);
      }
    EXPECT_LE(worst_rounded, 1.0) << s.name << ": not an fp32 sum of the rounded operands";
    EXPECT_LE(worst_fp32, 1.0) << s.name << ": further from fp32 than bf16's rounding allows";
    // The rounding took place: the result moved by far more than fp32 sums could move it.
    EXPECT_GT(largest_change, 1e-4) << s.name;
    for (int i = 0; i < s.M; ++i)  // the padding of C is left alone
      for (int j = s.N; j < ldc; ++j)
        ASSERT_EQ(C[size_t(i) * ldc + j], C0[size_t(i) * ldc + j]) << s.name;
  }
}

TEST(Bf16Gemm, OnlyTheContextsPrecisionRounds) {
  const std::vector<float> a = {1.0f + 1.0f / 512, 3.0f}, b = {1.0f, 1.0f};  // 1 + 2^-9 rounds to 1
  float c = 0;
  k::gemm<float>(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 4.0f + 1.0f / 512);  // fp32: the default context
  {
    DeviceScope bf16(Device::CPU, 0, GemmMath::bf16);
    k::gemm<float>(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, &c, 1);
    EXPECT_EQ(c, 4.0f);
  }
  k::gemm<float>(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 4.0f + 1.0f / 512);  // the scope's end restores fp32
  double cd = 0;  // double (the gradient checks) is never rounded
  const std::vector<double> ad = {1.0 + 1.0 / 512, 3.0}, bd = {1.0, 1.0};
  DeviceScope bf16(Device::CPU, 0, GemmMath::bf16);
  k::gemm<double>(false, false, 1, 1, 2, 1.0, ad.data(), 2, bd.data(), 1, 0.0, &cd, 1);
  EXPECT_EQ(cd, 4.0 + 1.0 / 512);
}

// The fast path (oneDNN's bf16 matmul on AVX512_BF16 or AMX) against the emulated one (sgemm on
// the rounded operands): both are fp32 sums of the same exact products, so they differ by at most
// the two summation errors, 2 (K + 1) u of the sum of |products| plus |beta C|. Every transpose
// combination of the model's shapes, padded leading dimensions, alpha and beta, C's padding left
// alone; beta 0 overwrites a NaN in C as BLAS does; and the dispatch takes the fast path.
TEST(Bf16Gemm, MatmulEqualsEmulatedPath) {
  if (!use_any_bf16_matmul())
    GTEST_SKIP() << "no oneDNN bf16 matmul here: " << k::cpu::bf16_matmul_description();
  std::printf("%s\n", k::cpu::bf16_matmul_description().c_str());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<GemmShape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({"attention scores, ptb_small's head", false, true, 64, 64, 64});
  const float scales[][2] = {{1.0f, 0.0f}, {0.7f, 0.5f}, {1.0f, 1.0f}, {0.125f, 0.0f}};
  int compared = 0;
  double worst_of_all = 0;
  for (const GemmShape& shape : shapes)
    for (int t = 0; t < 4; ++t) {
      GemmShape s = shape;
      s.ta = t & 1, s.tb = t & 2;
      const int a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
      const int b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
      const int lda = a_cols + 3, ldb = b_cols + 5, ldc = s.N + 2;
      std::vector<float> A(size_t(a_rows) * lda), B(size_t(b_rows) * ldb);
      for (float& x : A) x = normal(rng);
      for (float& x : B) x = normal(rng);
      // sum_k |a_ik b_kj| of the rounded operands, for the bound (a double GEMM of |A| and |B|)
      std::vector<double> abs_a(A.size()), abs_b(B.size()), size(size_t(s.M) * s.N);
      for (size_t i = 0; i < A.size(); ++i) abs_a[i] = std::fabs(round_to_bf16(A[i]));
      for (size_t i = 0; i < B.size(); ++i) abs_b[i] = std::fabs(round_to_bf16(B[i]));
      k::gemm<double>(s.ta, s.tb, s.M, s.N, s.K, 1.0, abs_a.data(), lda, abs_b.data(), ldb, 0.0,
                      size.data(), s.N);
      for (const auto& ab : scales) {
        const float alpha = ab[0], beta = ab[1];
        std::vector<float> C0(size_t(s.M) * ldc);
        for (float& x : C0) x = beta == 0.0f ? NAN : normal(rng);
        std::vector<float> fast = C0, emulated = C0, dispatched = C0;
        k::cpu::gemm_bf16_matmul(s.ta, s.tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb,
                                 beta, fast.data(), ldc);
        k::cpu::gemm_bf16_operands(s.ta, s.tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb,
                                   beta, emulated.data(), ldc);
        {
          DeviceScope bf16(Device::CPU, 0, GemmMath::bf16);
          k::gemm<float>(s.ta, s.tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta,
                         dispatched.data(), ldc);
        }
        const std::string what = std::string(s.name) + (s.ta ? " A^T" : " A") +
                                 (s.tb ? " B^T" : " B") + " alpha " + std::to_string(alpha) +
                                 " beta " + std::to_string(beta);
        double worst = 0;
        for (int i = 0; i < s.M; ++i) {
          for (int j = 0; j < s.N; ++j) {
            const size_t at = size_t(i) * ldc + j;
            const double c0 = beta == 0.0f ? 0.0 : C0[at];
            const double bound = 2 * (s.K + 1) * kFp32Unit *
                                 (alpha * size[size_t(i) * s.N + j] + std::fabs(beta * c0));
            ASSERT_TRUE(std::isfinite(fast[at])) << what << " at " << i << "," << j;
            worst = std::max(worst, std::fabs(double(fast[at]) - emulated[at]) / bound);
          }
          for (int j = s.N; j < ldc; ++j) {  // the padding of C is left alone
            const size_t at = size_t(i) * ldc + j;
            ASSERT_TRUE(std::memcmp(&fast[at], &C0[at], sizeof(float)) == 0) << what;
          }
        }
        EXPECT_LE(worst, 1.0) << what << ": the fast and emulated paths differ by more than "
                                         "their fp32 summation";
        worst_of_all = std::max(worst_of_all, worst);
        ASSERT_EQ(0, std::memcmp(dispatched.data(), fast.data(), fast.size() * sizeof(float)))
            << what << ": --precision bf16 did not take the fast path";
        ++compared;
      }
    }
  std::printf("largest |fast - emulated| / (2 (K + 1) u sum |products|): %.3g\n", worst_of_all);
  EXPECT_EQ(compared, 7 * 4 * 4);
}

// The conversion to bf16 is float_rounding.h's, ties to even included: products that only the
// emulated rounding of each operand makes exact must come out exactly.
TEST(Bf16Gemm, MatmulRoundsAsTheEmulatedPath) {
  if (!use_any_bf16_matmul())
    GTEST_SKIP() << "no oneDNN bf16 matmul here: " << k::cpu::bf16_matmul_description();
  // 1 + 2^-8 is a tie (rounds down to 1, even), 1 + 3 * 2^-8 a tie up to 1 + 2^-6, and
  // 1 + 2^-8 + 2^-20 rounds up to 1 + 2^-7: each times 1, summed.
  const std::vector<float> a = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                                1.0f + 1.0f / 256 + 1.0f / (1 << 20)};
  const std::vector<float> b = {1.0f, 1.0f, 1.0f};
  float fast = 0, emulated = 0;
  k::cpu::gemm_bf16_matmul(false, false, 1, 1, 3, 1.0f, a.data(), 3, b.data(), 1, 0.0f, &fast, 1);
  k::cpu::gemm_bf16_operands(false, false, 1, 1, 3, 1.0f, a.data(), 3, b.data(), 1, 0.0f,
                             &emulated, 1);
  EXPECT_EQ(emulated, 1.0f + (1.0f + 1.0f / 64) + (1.0f + 1.0f / 128));
  EXPECT_EQ(fast, emulated);
}

std::vector<double> train_losses(Device device, GemmMath math, const Options& o) {
  DeviceScope scope(device, 0, math);
  auto comm = make_single_communicator();
  Trainer t(o, *comm, test::builtin());
  return t.train().losses;
}

// Every norm kind forward and backward inside a bf16 model: the training loss of each update
// within 0.2% of fp32's over 12 updates (measured here: 1e-4 to 3e-4; the norms compute in fp32
// in both, what differs is every GEMM before and after them), never all equal.
TEST(Bf16Training, EveryNormTracksFp32) {
  FLAGS_minloglevel = 1;
  for (const NormInfo& info : norm_registry()) {
    if (info.synchronized) continue;  // the local twin's arithmetic at one rank
    const char* norm = info.name.c_str();
    for (const char* variant : {"paper", "authors"}) {
      if (std::string(variant) == "authors" && std::string(norm) != "power") continue;
      Options o = test::small_lm();
      o.norm_self = o.norm_ff = o.norm_final = norm;
      o.pn_variant = parse_pn_variant(variant);
      o.max_tokens = 256;
      o.max_update = 12;
      o.warmup_updates = 4;
      const std::string what = std::string(norm) + " (" + variant + ")";
      const std::vector<double> fp32 = train_losses(Device::CPU, GemmMath::fp32, o);
      const std::vector<double> bf16 = train_losses(Device::CPU, GemmMath::bf16, o);
      ASSERT_EQ(fp32.size(), 12u) << what;
      ASSERT_EQ(bf16.size(), 12u) << what;
      double largest = 0;
      for (size_t i = 0; i < fp32.size(); ++i) {
        EXPECT_NEAR(bf16[i], fp32[i], 2e-3 * fp32[i]) << what << ": update " << i + 1;
        largest = std::max(largest, std::fabs(bf16[i] - fp32[i]) / fp32[i]);
      }
      EXPECT_GT(largest, 1e-6) << what << ": bf16 trained exactly as fp32 (no rounding?)";
      std::printf("%-16s largest relative loss difference bf16/fp32 over 12 updates: %.2e\n",
                  what.c_str(), largest);
    }
  }
}

}  // namespace
}  // namespace pn
