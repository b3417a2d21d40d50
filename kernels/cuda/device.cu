// CUDA device discovery, error reporting, the scratch pool and cuBLAS GEMMs.
//
// Row-major GEMM through column-major cuBLAS: a row-major C[M,N] is the column-major C^T[N,M],
// and C^T = op(B)^T op(A)^T, so C = op(A) op(B) is cuBLAS's (op_b, op_a, N, M, K) on (B, A).
#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device.h"

namespace pn::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return n;
}

void fail(const char* lib, const char* call, const char* detail, const char* file, int line) {
  char msg[1024];
  const std::string& who = error_context();  // "rank 3" in a multi-rank run
  std::snprintf(msg, sizeof msg, "%s%s%s error: %s at %s:%d: %s", who.c_str(),
                who.empty() ? "" : ": ", lib, call, file, line, detail);
  throw std::runtime_error(msg);
}

const char* cublas_status_string(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "not initialized (no device or no driver?)";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "invalid value (a size or leading dimension)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "architecture mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "not supported";
    default:
      return "unknown cuBLAS status";
  }
}

// ---- scratch pool ---------------------------------------------------------------------------
void* cuda_scratch(int slot, size_t bytes, cudaStream_t s) {
  struct Pool {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  static Pool pools[kSlotCount];
  Pool& p = pools[slot];
  if (bytes <= p.bytes) return p.ptr;
  // Grow by at least half again, so a slowly growing shape does not resynchronise each step.
  const size_t want = bytes > p.bytes + p.bytes / 2 ? bytes : p.bytes + p.bytes / 2;
  // Stream-ordered: the old block is released after the kernels queued on s before this call.
  if (p.ptr) CUDA_CHECK(cudaFreeAsync(p.ptr, s));
  p.ptr = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p.ptr, want, s));
  p.bytes = want;
  return p.ptr;
}

// ---- cuBLAS ---------------------------------------------------------------------------------
Blas::Blas(cudaStream_t s, GemmMath m) : stream(s), math(m) {
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetStream(handle, s));
}
Blas::~Blas() {
  if (weights16) cudaFreeAsync(weights16, stream);
  if (handle) cublasDestroy(handle);
}

void set_bf16_weights(Blas& b, const float* w, size_t n) {
  b.weights = w, b.weights_n = w ? n : 0;
  if (!w || n == 0) return;
  if (n > b.weights16_capacity) {
    if (b.weights16) CUDA_CHECK(cudaFreeAsync(b.weights16, b.stream));
    b.weights16 = nullptr;
    CUDA_CHECK(cudaMallocAsync(&b.weights16, n * sizeof(__nv_bfloat16), b.stream));
    b.weights16_capacity = n;
  }
  to_bf16(w, n, b.weights16, b.stream);
}

namespace {
cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }
cublasComputeType_t compute(const Blas& b) {
  // fp32 in and out, fp32 accumulation; tf32/bf16 round the operands for the tensor cores.
  switch (b.math) {
    case GemmMath::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmMath::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    default:
      return CUBLAS_COMPUTE_32F;
  }
}
}  // namespace

namespace {
// The elements a row-major rows x cols view with leading dimension ld spans in memory.
size_t view_span(int rows, int cols, int ld) {
  return rows == 0 || cols == 0 ? 0 : size_t(rows - 1) * size_t(ld) + size_t(cols);
}
}  // namespace

// bf16: the operands rounded to bf16 (nearest even) into scratch, then bf16 x bf16 products
// summed in fp32 (CUBLAS_COMPUTE_32F), which is the CPU's bf16 GEMM to the summation order.
// Asking _FAST_16BF of fp32 operands instead lets cuBLAS choose TF32 kernels, and it did on an
// H100 for every GEMM of GPT-2 small: tf32's speed, not bf16's.
void gemm(Blas& b, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (b.math == GemmMath::bf16 && K > 0) {
    const size_t na = ta ? view_span(K, M, lda) : view_span(M, K, lda);
    const size_t nb = tb ? view_span(N, K, ldb) : view_span(K, N, ldb);
    // A weight is read from the copy made once per forward; anything else is rounded here.
    const auto rounded = [&](const float* x, size_t n, int slot) -> const __nv_bfloat16* {
      if (b.weights && x >= b.weights && x + n <= b.weights + b.weights_n) {
        ++b.weights16_reads;
        return b.weights16 + (x - b.weights);
      }
      __nv_bfloat16* x16 = scratch_as<__nv_bfloat16>(slot, n, b.stream);
      to_bf16(x, n, x16, b.stream);
      return x16;
    };
    gemm_bf16(b, ta, tb, M, N, K, alpha, rounded(A, na, kSlotBf16A), lda,
              rounded(B, nb, kSlotBf16B), ldb, beta, C, ldc);
    return;
  }
  CUBLAS_CHECK(cublasGemmEx(b.handle, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                            CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute(b),
                            CUBLAS_GEMM_DEFAULT));
}

void gemm_strided_batched(Blas& b, bool ta, bool tb, int M, int N, int K, float alpha,
                          const float* A, int lda, long long sa, const float* B, int ldb,
                          long long sb, float beta, float* C, int ldc, long long sc, int batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(b.handle, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F,
                                          ldb, sb, A, CUDA_R_32F, lda, sa, &beta, C, CUDA_R_32F,
                                          ldc, sc, batch, compute(b), CUBLAS_GEMM_DEFAULT));
}

void gemm_bf16(Blas& b, bool ta, bool tb, int M, int N, int K, float alpha, const __nv_bfloat16* A,
               int lda, const __nv_bfloat16* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  CUBLAS_CHECK(cublasGemmEx(b.handle, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_16BF, ldb, A,
                            CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace pn::cuda
