// GEMM through OpenBLAS (cblas, row-major).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"

namespace pn::k::cpu {

template <>
void gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {
// The rows x cols row-major block at p (leading dimension ld), rounded to bf16, packed in out.
void round_block_to_bf16(const float* p, int rows, int cols, int ld, std::vector<float>* out) {
  out->resize(size_t(rows) * cols);
  float* o = out->data();
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) o[size_t(r) * cols + c] = round_to_bf16(p[size_t(r) * ld + c]);
}
}  // namespace

// A product of two bf16 is exact in fp32 (8 + 8 significant bits), so an sgemm of the rounded
// operands is the arithmetic of a bf16 unit with fp32 accumulation, up to the summation order.
void gemm_bf16_operands(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                        int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  thread_local std::vector<float> a, b;  // reused: the shapes repeat every micro-step
  const int a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int b_rows = tb ? N : K, b_cols = tb ? K : N;
  round_block_to_bf16(A, a_rows, a_cols, lda, &a);
  round_block_to_bf16(B, b_rows, b_cols, ldb, &b);
  gemm<float>(ta, tb, M, N, K, alpha, a.data(), std::max(1, a_cols), b.data(), std::max(1, b_cols),
              beta, C, ldc);
}

}  // namespace pn::k::cpu
