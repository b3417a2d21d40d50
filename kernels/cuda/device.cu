// CUDA device discovery, error reporting, the scratch pool and cuBLAS GEMMs.
//
// Row-major GEMM through column-major cuBLAS: a row-major C[M,N] is the column-major C^T[N,M],
// and C^T = op(B)^T op(A)^T, so C = op(A) op(B) is cuBLAS's (op_b, op_a, N, M, K) on (B, A).
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

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
namespace {
// One shape of linear_forward on cuBLASLt: its descriptors and the algorithm the heuristic
// chose, made at the shape's first call and kept (a run repeats a few dozen shapes).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false;  // cuBLASLt has an algorithm for it; else gemm and the bias pass run it
};
// (rows, in, out, epilogue, bf16 operands, the operands' alignment in bytes)
using LtKey = std::tuple<int, int, int, int, bool, uint32_t>;
using LtPlans = std::map<LtKey, LtPlan>;
void destroy(LtPlan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  for (cublasLtMatrixLayout_t l : {p.w, p.x, p.y})
    if (l) cublasLtMatrixLayoutDestroy(l);
}
}  // namespace

Blas::~Blas() {
  if (weights16) cudaFreeAsync(weights16, stream);
  if (lt_plans) {
    auto* plans = static_cast<LtPlans*>(lt_plans);
    for (auto& kv : *plans) destroy(kv.second);
    delete plans;
  }
  if (lt) cublasLtDestroy(lt);
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
namespace {
// x[0, n) in bf16 for a GEMM of bf16 math: a weight is read from the copy made once per
// forward; anything else is rounded here into scratch `slot`.
const __nv_bfloat16* bf16_operand(Blas& b, const float* x, size_t n, int slot) {
  if (b.weights && x >= b.weights && x + n <= b.weights + b.weights_n) {
    ++b.weights16_reads;
    return b.weights16 + (x - b.weights);
  }
  __nv_bfloat16* x16 = scratch_as<__nv_bfloat16>(slot, n, b.stream);
  to_bf16(x, n, x16, b.stream);
  return x16;
}
}  // namespace

void gemm(Blas& b, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (b.math == GemmMath::bf16 && K > 0) {
    const size_t na = ta ? view_span(K, M, lda) : view_span(M, K, lda);
    const size_t nb = tb ? view_span(N, K, ldb) : view_span(K, N, ldb);
    gemm_bf16(b, ta, tb, M, N, K, alpha, bf16_operand(b, A, na, kSlotBf16A), lda,
              bf16_operand(b, B, nb, kSlotBf16B), ldb, beta, C, ldc);
    return;
  }
  CUBLAS_CHECK(cublasGemmEx(b.handle, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                            CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute(b),
                            CUBLAS_GEMM_DEFAULT));
}

namespace {
constexpr size_t kLtWorkspace = size_t(32) << 20;  // what cuBLASLt may use per matmul

// The plan of one linear_forward shape (ok = false where cuBLASLt has no algorithm for it).
// Column-major, as cuBLASLt reads it: y^T [out, rows] = W^T^T x^T, W stored [in, out] (ld in)
// and transposed, x stored [in, rows] (ld in), the bias one value per row of y^T.
// align: the operands' common alignment, which the heuristic is told (it assumes 256 bytes
// otherwise, and a weight inside the parameter buffer may be aligned to 4).
LtPlan& lt_plan(Blas& b, int rows, int in, int out, cublasLtEpilogue_t epilogue, bool bf16,
                uint32_t align) {
  if (!b.lt_plans) b.lt_plans = new LtPlans;
  auto& plans = *static_cast<LtPlans*>(b.lt_plans);
  const LtKey key{rows, in, out, int(epilogue), bf16, align};
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  LtPlan& p = plans[key];
  if (!b.lt && cublasLtCreate(&b.lt) != CUBLAS_STATUS_SUCCESS) {
    b.lt = nullptr;
    return p;
  }
  const cudaDataType_t in_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t math = bf16 ? CUBLAS_COMPUTE_32F : compute(b);
  const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const uint32_t ep = epilogue;
  cublasLtMatmulPreference_t pref = nullptr;
  const uint64_t ws = kLtWorkspace;
  cublasLtMatmulHeuristicResult_t result{};
  int found_algos = 0;
  const bool made =
      cublasLtMatmulDescCreate(&p.desc, math, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.w, in_type, in, out, in) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.x, in_type, in, rows, in) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.y, CUDA_R_32F, out, rows, out) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                           sizeof ws) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                           &align, sizeof align) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                           &align, sizeof align) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                           &align, sizeof align) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                           &align, sizeof align) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(b.lt, p.desc, p.w, p.x, p.y, p.y, pref, 1, &result,
                                     &found_algos) == CUBLAS_STATUS_SUCCESS &&
      found_algos > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (made) {
    p.algo = result.algo;
    p.workspace = result.workspaceSize;
    p.ok = true;
  }
  return p;
}

}  // namespace

bool linear_forward_epilogue(Blas& b, const float* x, int rows, int in, int out, const float* W,
                             const float* bias, bool relu, float* y) {
  if (rows == 0 || out == 0) return true;
  if (in == 0) return false;  // no products: gemm writes the zeros
  const cublasLtEpilogue_t epilogue =
      bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS) : CUBLASLT_EPILOGUE_RELU;
  const bool bf16 = b.math == GemmMath::bf16;
  const void* w_op = W;
  const void* x_op = x;
  if (bf16) {
    w_op = bf16_operand(b, W, size_t(out) * in, kSlotBf16B);
    x_op = bf16_operand(b, x, size_t(rows) * in, kSlotBf16A);
  }
  // The largest power of two up to 256 that divides every operand's address.
  const uintptr_t addresses = uintptr_t(w_op) | uintptr_t(x_op) | uintptr_t(y) | uintptr_t(256);
  const uint32_t align = uint32_t(addresses & (~addresses + 1));
  LtPlan& p = lt_plan(b, rows, in, out, epilogue, bf16, align);
  if (!p.ok) return false;  // the conversions above are what gemm would make of them too
  if (bias &&
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                     sizeof bias) != CUBLAS_STATUS_SUCCESS)
    return false;
  void* workspace = p.workspace ? cuda_scratch(kSlotLt, p.workspace, b.stream) : nullptr;
  const float one = 1.f, zero = 0.f;
  if (cublasLtMatmul(b.lt, p.desc, &one, w_op, p.w, x_op, p.x, &zero, y, p.y, y, p.y, &p.algo,
                     workspace, p.workspace, b.stream) != CUBLAS_STATUS_SUCCESS) {
    p.ok = false;  // not again for this shape; the operands' conversions are harmless
    return false;
  }
  ++b.lt_calls;
  return true;
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
