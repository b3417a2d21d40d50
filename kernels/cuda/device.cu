// CUDA device discovery, error reporting, the scratch pool and cuBLAS GEMMs.
//
// Row-major GEMM through column-major cuBLAS: a row-major C[M,N] is the column-major C^T[N,M],
// and C^T = op(B)^T op(A)^T, so C = op(A) op(B) is cuBLAS's (op_b, op_a, N, M, K) on (B, A).
#include <cstdio>
#include <initializer_list>
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
  count_allocation();
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
// One cuBLASLt matmul shape (a Linear's forward with its bias and ReLU, or its weight gradient
// with the bias gradient): its descriptors and the algorithm the heuristic chose, made at the
// shape's first call and kept (a run repeats a few dozen shapes).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false;  // cuBLASLt has an algorithm for it; else gemm and a pass run it
};
// Column-major, as cuBLASLt reads it: (trans a, trans b, m, n, k, lda, ldb, ldd, epilogue, bf16
// operands, the operands' alignment in bytes).
// D's type, and with it the bias's: fp32 and fp32; bf16 with an fp32 bias; bf16 with a bf16 bias
// (cuBLASLt's default for a bf16 D, as autocast's bf16 Linear adds it).
enum class LtOut { fp32, bf16, bf16_bias16 };
// {transa, transb, m, n, k, lda, ldb, ldd, epilogue, bf16 inputs, alignment, output}
using LtKey = std::tuple<bool, bool, int, int, int, int, int, int, int, bool, uint32_t, LtOut>;
using LtPlans = std::map<LtKey, LtPlan>;
void destroy(LtPlan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d})
    if (l) cublasLtMatrixLayoutDestroy(l);
}
}  // namespace

Blas::~Blas() {
  for (Bf16Copy& c : copies)
    if (c.copy) cudaFreeAsync(c.copy, stream);
  if (lt_plans) {
    auto* plans = static_cast<LtPlans*>(lt_plans);
    for (auto& kv : *plans) destroy(kv.second);
    delete plans;
  }
  if (lt) cublasLtDestroy(lt);
  if (handle) cublasDestroy(handle);
}

void push_bf16_copy(Blas& b, const float* x, size_t n) {
  if (b.math != GemmMath::bf16) return;
  // Inside a copy that holds [x, x + n) already, the scope serves from that one: no second
  // rounding pass (an empty entry keeps the pops balanced).
  bool held = false;
  for (size_t i = 0; i < b.live && !held; ++i)
    held = x >= b.copies[i].x && x + n <= b.copies[i].x + b.copies[i].n && b.copies[i].x;
  if (b.live == b.copies.size()) b.copies.emplace_back();
  Blas::Bf16Copy& c = b.copies[b.live++];
  if (held) {
    c.x = nullptr, c.n = 0;
    return;
  }
  c.x = x, c.n = n;
  if (n > c.capacity) {
    count_allocation();
    if (c.copy) CUDA_CHECK(cudaFreeAsync(c.copy, b.stream));
    c.copy = nullptr;
    CUDA_CHECK(cudaMallocAsync(&c.copy, n * sizeof(__nv_bfloat16), b.stream));
    c.capacity = n;
  }
  if (n) to_bf16(x, n, c.copy, b.stream);
}

void pop_bf16_copy(Blas& b) {
  if (b.math != GemmMath::bf16 || b.live == 0) return;
  Blas::Bf16Copy& c = b.copies[--b.live];
  c.x = nullptr, c.n = 0;
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
// x[0, n) in bf16 for a GEMM of bf16 math: read from a live copy that holds it (the weights,
// a gradient two GEMMs read); anything else is rounded here into scratch `slot`.
const __nv_bfloat16* bf16_operand(Blas& b, const float* x, size_t n, int slot) {
  for (size_t i = b.live; i-- > 0;) {
    const Blas::Bf16Copy& c = b.copies[i];
    if (x >= c.x && x + n <= c.x + c.n) {
      ++b.copy_reads;
      return c.copy + (x - c.x);
    }
  }
  __nv_bfloat16* x16 = scratch_as<__nv_bfloat16>(slot, n, b.stream);
  to_bf16(x, n, x16, b.stream);
  return x16;
}
}  // namespace

namespace {
// A kept bf16 input (uint16_t bits, round_bf16) as cuBLAS's type; only a bf16 Blas reads one.
const __nv_bfloat16* kept_bf16(const Blas& b, const uint16_t* x16) {
  if (b.math != GemmMath::bf16)
    throw std::logic_error("a GEMM input kept in bf16 reached GEMMs that compute in " +
                           std::string(b.math == GemmMath::tf32 ? "tf32" : "fp32"));
  return reinterpret_cast<const __nv_bfloat16*>(x16);
}
}  // namespace

void gemm_bf16_inputs(Blas& b, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                      const uint16_t* A16, int lda, const float* B, const uint16_t* B16, int ldb,
                      float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  const size_t na = ta ? view_span(K, M, lda) : view_span(M, K, lda);
  const size_t nb = tb ? view_span(N, K, ldb) : view_span(K, N, ldb);
  if (K == 0) {  // no products: cuBLAS scales C (the rounding of nothing is skipped)
    CUBLAS_CHECK(cublasGemmEx(b.handle, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                              CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute(b),
                              CUBLAS_GEMM_DEFAULT));
    return;
  }
  gemm_bf16(b, ta, tb, M, N, K, alpha,
            A16 ? kept_bf16(b, A16) : bf16_operand(b, A, na, kSlotBf16A), lda,
            B16 ? kept_bf16(b, B16) : bf16_operand(b, B, nb, kSlotBf16B), ldb, beta, C, ldc);
}

void gemm(Blas& b, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (b.math == GemmMath::bf16 && K > 0)
    return gemm_bf16_inputs(b, ta, tb, M, N, K, alpha, A, nullptr, lda, B, nullptr, ldb, beta, C,
                            ldc);
  CUBLAS_CHECK(cublasGemmEx(b.handle, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                            CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute(b),
                            CUBLAS_GEMM_DEFAULT));
}

namespace {
constexpr size_t kLtWorkspace = size_t(32) << 20;  // what cuBLASLt may use per matmul

// The plan of one shape (ok = false where cuBLASLt has no algorithm for it): column-major
// D[m, n] = op(A)[m, k] op(B)[k, n] (+ beta D), A stored [ta ? k : m] x [ta ? m : k] with leading
// dimension lda, likewise B, D of the key's LtOut. align: the operands' common alignment, which the heuristic
// is told (it assumes 256 bytes otherwise, and a weight inside the parameter buffer may be
// aligned to 4).
LtPlan& lt_plan(Blas& b, const LtKey& key) {
  if (!b.lt_plans) b.lt_plans = new LtPlans;
  auto& plans = *static_cast<LtPlans*>(b.lt_plans);
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  LtPlan& p = plans[key];
  if (!b.lt && cublasLtCreate(&b.lt) != CUBLAS_STATUS_SUCCESS) {
    b.lt = nullptr;
    return p;
  }
  const auto [tra, trb, m, n, k, lda, ldb, ldd, epilogue, bf16, align, out] = key;
  const bool d_bf16 = out != LtOut::fp32;
  const cudaDataType_t in_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t math = bf16 ? CUBLAS_COMPUTE_32F : compute(b);
  const int32_t ta = tra ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const uint32_t ep = uint32_t(epilogue);
  const int32_t bias_type = out == LtOut::bf16_bias16 ? CUDA_R_16BF : CUDA_R_32F;
  const bool has_bias =
      epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
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
      (!d_bf16 || !has_bias ||
       cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                      sizeof bias_type) == CUBLAS_STATUS_SUCCESS) &&
      cublasLtMatrixLayoutCreate(&p.a, in_type, tra ? k : m, tra ? m : k, lda) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.b, in_type, trb ? n : k, trb ? k : n, ldb) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&p.d, d_bf16 ? CUDA_R_16BF : CUDA_R_32F, m, n, ldd) ==
          CUBLAS_STATUS_SUCCESS &&
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
      cublasLtMatmulAlgoGetHeuristic(b.lt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result,
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

// The largest power of two up to 256 that divides every address.
uint32_t common_alignment(std::initializer_list<const void*> ptrs) {
  uintptr_t addresses = 256;
  for (const void* p : ptrs) addresses |= uintptr_t(p);
  return uint32_t(addresses & (~addresses + 1));
}

// D = op(A) op(B) + beta D on the plan of `key`, its epilogue reading or writing `vec` (the bias,
// or the bias gradient); false where cuBLASLt has no algorithm for the shape or refuses the call
// (then never again for this shape).
bool lt_matmul(Blas& b, const LtKey& key, const void* A, const void* B, float beta, void* D,
               const void* vec) {
  LtPlan& p = lt_plan(b, key);
  if (!p.ok) return false;
  if (vec && cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                            sizeof vec) != CUBLAS_STATUS_SUCCESS)
    return false;
  void* workspace = p.workspace ? cuda_scratch(kSlotLt, p.workspace, b.stream) : nullptr;
  const float one = 1.f;
  if (cublasLtMatmul(b.lt, p.desc, &one, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.algo,
                     workspace, p.workspace, b.stream) != CUBLAS_STATUS_SUCCESS) {
    p.ok = false;  // not again for this shape; the operands' conversions are harmless
    return false;
  }
  ++b.lt_calls;
  return true;
}

}  // namespace

bool linear_forward_epilogue(Blas& b, const float* x, const uint16_t* x16, int rows, int in,
                             int out, const float* W, const float* bias, bool relu, float* y,
                             uint16_t* y16) {
  if (rows == 0 || out == 0) return true;
  if (in == 0) return false;  // no products: gemm writes the zeros
  const cublasLtEpilogue_t epilogue =
      bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  const bool bf16 = b.math == GemmMath::bf16;
  if (y16 && !bf16) return false;
  void* d = y16 ? static_cast<void*>(y16) : static_cast<void*>(y);
  const LtOut d_type = y16 ? LtOut::bf16 : LtOut::fp32;
  const void* w_op = W;
  const void* x_op = x16 ? kept_bf16(b, x16) : static_cast<const void*>(x);
  if (bf16) {
    w_op = bf16_operand(b, W, size_t(out) * in, kSlotBf16B);
    if (!x16) x_op = bf16_operand(b, x, size_t(rows) * in, kSlotBf16A);
  }
  // y^T [out, rows] = W^T^T x^T: W stored [in, out] (ld in) and transposed, x stored [in, rows]
  // (ld in), the bias one value per row of y^T.
  const LtKey key{true, false, out, rows, in, in, in, out, int(epilogue), bf16,
                  common_alignment({w_op, x_op, d}), d_type};
  if (lt_matmul(b, key, w_op, x_op, 0.f, d, bias)) return true;
  if (!y16 || !bias) return false;
  // A bf16 D whose bias cuBLASLt takes only in bf16: the bias's rounding (the weights' copy).
  LtKey key16 = key;
  std::get<11>(key16) = LtOut::bf16_bias16;
  return lt_matmul(b, key16, w_op, x_op, 0.f, d, bf16_operand(b, bias, size_t(out), kSlotBias16));
}

bool linear_input_grad_bf16(Blas& b, const float* dy, const uint16_t* dy16, int rows, int in,
                            int out, const float* W, uint16_t* dx16) {
  if (rows == 0 || in == 0) return true;
  if (out == 0 || b.math != GemmMath::bf16) return false;
  const void* w_op = bf16_operand(b, W, size_t(out) * in, kSlotBf16A);
  const void* dy_op =
      dy16 ? kept_bf16(b, dy16) : bf16_operand(b, dy, size_t(rows) * out, kSlotBf16B);
  // dx^T [in, rows] = W^T dy^T: W stored [in, out] (ld in), dy stored [out, rows] (ld out).
  const LtKey key{false, false, in, rows, out, in, out, in, int(CUBLASLT_EPILOGUE_DEFAULT), true,
                  common_alignment({w_op, dy_op, dx16}), LtOut::bf16};
  return lt_matmul(b, key, w_op, dy_op, 0.f, dx16, nullptr);
}

uint16_t* relu_grad_scratch16(size_t n, cudaStream_t s) {
  return scratch_as<uint16_t>(kSlotLinearOut, n, s);
}

float* linear_output_scratch(size_t n, cudaStream_t s) {
  return scratch_as<float>(kSlotLinearOut, n, s);
}

bool linear_weight_grad_epilogue(Blas& b, const float* x, const uint16_t* x16, const float* dy,
                                 const uint16_t* dy16, int rows, int in, int out, float* dW,
                                 float* db) {
  if (out == 0 || in == 0) return true;
  if (rows == 0) return false;  // no products: gemm and bias_grad add nothing
  const bool bf16 = b.math == GemmMath::bf16;
  const void* x_op = x16 ? kept_bf16(b, x16) : static_cast<const void*>(x);
  const void* dy_op = dy16 ? kept_bf16(b, dy16) : static_cast<const void*>(dy);
  if (bf16) {
    if (!x16) x_op = bf16_operand(b, x, size_t(rows) * in, kSlotBf16A);
    if (!dy16) dy_op = bf16_operand(b, dy, size_t(rows) * out, kSlotBf16B);
  }
  // dW^T [in, out] += x^T dy: x stored [in, rows] (ld in), dy stored [out, rows] (ld out) and
  // transposed; BGRADB sums op(B) = dy over k = rows into one value per column of dW^T.
  float* sums = static_cast<float*>(cuda_scratch(kSlotBiasGrad, size_t(out) * sizeof(float),
                                                 b.stream));
  const LtKey key{false, true, in, out, rows, in, out, in, int(CUBLASLT_EPILOGUE_BGRADB), bf16,
                  common_alignment({x_op, dy_op, dW, sums}), LtOut::fp32};
  if (!lt_matmul(b, key, x_op, dy_op, 1.f, dW, sums)) return false;
  add_inplace(db, sums, size_t(out), b.stream);  // the epilogue writes; gradients accumulate
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
