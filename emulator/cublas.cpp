// cuBLAS's GEMMs on OpenBLAS, in the order of the handle's stream. The operands are read as
// cuBLAS reads them (column-major, op(A) m x k, op(B) k x n, leading dimensions in elements,
// checked as cuBLAS checks them) and rounded as the compute type asks (tf32: 10 bits of
// mantissa, bf16: 7), so that a precision test of the GPU path means the same here.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// Round-to-nearest-even of f to `keep` bits of mantissa (bf16: 7, tf32: 10), Inf and NaN kept:
// how the tensor cores read fp32 operands. The same rounding as kernels/cpu/float_rounding.h
// (the CPU's bf16 GEMM), written here again so that the emulator, a stand-in for the vendor's
// libraries, includes nothing of pntrain's kernels; CudaKernels.Bf16GemmIsTheCpusBf16Gemm and
// the precision tests compare the two.
float round_mantissa(float f, int keep) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  const int drop = 23 - keep;
  u += ((1u << (drop - 1)) - 1) + ((u >> drop) & 1u);
  u &= ~((1u << drop) - 1);
  std::memcpy(&f, &u, 4);
  return f;
}

// The rows x cols column-major operand at p (leading dimension ld) as packed floats.
std::vector<float> load(const void* p, cudaDataType_t type, int rows, int cols, int ld,
                        cublasComputeType_t compute) {
  std::vector<float> out(size_t(rows) * cols);
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) {
      const size_t i = size_t(c) * ld + r;
      float v = type == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                                    : static_cast<const float*>(p)[i];
      if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) v = round_mantissa(v, 10);
      if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) v = round_mantissa(v, 7);
      out[size_t(c) * rows + r] = v;
    }
  return out;
}

size_t elem_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

cublasStatus_t check(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                     int ldb, int ldc, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                     cublasComputeType_t compute) {
  const auto lead = [](cublasOperation_t op, int rows_n, int rows_t) {
    return std::max(1, op == CUBLAS_OP_N ? rows_n : rows_t);
  };
  if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
      (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || lda < lead(ta, m, k) || ldb < lead(tb, k, n) ||
      ldc < std::max(1, m)) {
    pn_emu::fail_with(cudaErrorInvalidValue,
                      "cuBLAS GEMM: invalid value (m %d n %d k %d, lda %d ldb %d ldc %d)", m, n,
                      k, lda, ldb, ldc);
    cudaGetLastError();  // cuBLAS reports through its status, not the runtime's last error
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (at != bt || ct != CUDA_R_32F || (at != CUDA_R_32F && at != CUDA_R_16BF) ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
       compute != CUBLAS_COMPUTE_32F_FAST_16BF))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) op(B) + beta C for one matrix of the batch; runs on the stream's worker.
void gemm_one(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
              const void* A, cudaDataType_t at, int lda, const void* B, int ldb, float beta,
              float* C, int ldc, cublasComputeType_t compute) {
  if (m == 0 || n == 0) return;
  const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  const std::vector<float> a = load(A, at, ar, ac, lda, compute);
  const std::vector<float> b = load(B, at, br, bc, ldb, compute);
  if (k == 0) {  // no products: C = beta C, and beta 0 never reads C
    for (int c = 0; c < n; ++c)
      for (int r = 0; r < m; ++r) {
        float& v = C[size_t(c) * ldc + r];
        v = beta == 0.f ? 0.f : beta * v;
      }
    return;
  }
  cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, a.data(),
              std::max(1, ar), b.data(), std::max(1, br), beta, C, ldc);
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (h) cudaStreamSynchronize(h->stream);  // queued GEMMs still read nothing of the handle
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType_t at, int lda, long long sa, const void* B,
    cudaDataType_t bt, int ldb, long long sb, const void* beta, void* C, cudaDataType_t ct,
    int ldc, long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t st = check(ta, tb, m, n, k, lda, ldb, ldc, at, bt, ct, compute)) return st;
  // Host pointer mode: alpha and beta are read at the call.
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const size_t es = elem_size(at);
  pn_emu::enqueue(h->stream, [=] {
    for (int i = 0; i < batch; ++i)
      gemm_one(ta, tb, m, n, k, al, static_cast<const char*>(A) + size_t(sa * i) * es, at, lda,
               static_cast<const char*>(B) + size_t(sb * i) * es, ldb, be,
               static_cast<float*>(C) + size_t(sc * i), ldc, compute);
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType_t at,
                            int lda, const void* B, cudaDataType_t bt, int ldb, const void* beta,
                            void* C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta,
                                    C, ct, ldc, 0, 1, compute, algo);
}

// ---- cuBLASLt: one matmul with a bias (and ReLU) epilogue, or a bias gradient ----------------
#include "cublasLt.h"

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float* bias = nullptr;  // read by BIAS, written by BGRADB
  int32_t bias_type = -1;  // -1: D's
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};
struct cublasLtMatmulPreferenceOpaque {};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new cublasLtMatmulDescOpaque;
  (*d)->compute = compute;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) =
          cublasOperation_t(*static_cast<const int32_t*>(buf));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      d->epilogue = cublasLtEpilogue_t(*static_cast<const uint32_t*>(buf));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      d->bias = *static_cast<float* const*>(buf);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      d->bias_type = *static_cast<const int32_t*>(buf);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < int64_t(std::max<uint64_t>(1, rows))) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void*, size_t size) {
  const bool known = attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ||
                     attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES ||
                     attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ||
                     attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ||
                     attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES;
  const size_t want = attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? sizeof(uint64_t)
                                                                       : sizeof(uint32_t);
  return known && size == want ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

namespace {
// The shapes cuBLASLt's matmul reads: op(A) m x k, op(B) k x n, C and D m x n; D fp32, or bf16
// from bf16 operands (its bias, where one, of D's type: "bias vector elements are the same type
// as the elements of output matrix", cublasLt.h).
cublasStatus_t lt_check(const cublasLtMatmulDescOpaque& d, const cublasLtMatrixLayoutOpaque& a,
                        const cublasLtMatrixLayoutOpaque& b, const cublasLtMatrixLayoutOpaque& c,
                        const cublasLtMatrixLayoutOpaque& dl) {
  const uint64_t m = d.ta == CUBLAS_OP_N ? a.rows : a.cols, k = d.ta == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.tb == CUBLAS_OP_N ? b.rows : b.cols, n = d.tb == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != kb || c.rows != m || c.cols != n || dl.rows != m || dl.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_RELU &&
      d.epilogue != CUBLASLT_EPILOGUE_BIAS && d.epilogue != CUBLASLT_EPILOGUE_RELU_BIAS &&
      d.epilogue != CUBLASLT_EPILOGUE_BGRADB)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool bias =
      d.epilogue == CUBLASLT_EPILOGUE_BIAS || d.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (dl.type == CUDA_R_16BF &&
      (a.type != CUDA_R_16BF || d.epilogue == CUBLASLT_EPILOGUE_BGRADB ||
       (bias && d.bias_type != -1 && d.bias_type != CUDA_R_16BF)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return check(d.ta, d.tb, int(m), int(n), int(k), int(a.ld), int(b.ld), int(dl.ld), a.type,
               b.type, dl.type == CUDA_R_16BF ? CUDA_R_32F : dl.type, d.compute);
}
}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t,
    int requested, cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t st = lt_check(*d, *a, *b, *c, *dl)) return st;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (cublasStatus_t st = lt_check(*d, *a, *b, *c, *dl)) return st;
  const bool bias =
      d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu =
      d->epilogue == CUBLASLT_EPILOGUE_RELU || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if ((bias || bgrad) && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (C != D && *static_cast<const float*>(beta) != 0.f) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (dl->type == CUDA_R_16BF && *static_cast<const float*>(beta) != 0.f)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const cublasLtMatmulDescOpaque desc = *d;  // the call's attributes, as the GPU reads them now
  const cublasLtMatrixLayoutOpaque la = *a, lb = *b, ld = *dl;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  pn_emu::enqueue(stream, [=] {
    const int m = int(ld.rows), n = int(ld.cols);
    const int k = int(desc.ta == CUBLAS_OP_N ? la.cols : la.rows);
    const bool d16 = ld.type == CUDA_R_16BF;
    std::vector<float> result(d16 ? size_t(m) * n : 0);  // a bf16 D's fp32 result, ld m
    float* out = d16 ? result.data() : static_cast<float*>(D);
    const int ldo = d16 ? m : int(ld.ld);
    gemm_one(desc.ta, desc.tb, m, n, k, al, A, la.type, int(la.ld), B, int(lb.ld), be, out, ldo,
             desc.compute);
    if (bgrad) {  // bias[j] = sum over k of op(B)[., j], as B's elements read (before rounding)
      const bool bn = desc.tb == CUBLAS_OP_N;
      const std::vector<float> bv = load(B, lb.type, bn ? k : n, bn ? n : k, int(lb.ld),
                                         CUBLAS_COMPUTE_32F);
      for (int j = 0; j < n; ++j) {
        float sum = 0.f;
        for (int kk = 0; kk < k; ++kk) sum += bn ? bv[size_t(j) * k + kk] : bv[size_t(kk) * n + j];
        desc.bias[j] = sum;
      }
      return;
    }
    // The epilogue on the fp32 result: + bias[row] (a bf16 D's in bf16), then max(., 0); a bf16
    // D gets the rounding.
    const auto* bias16 = reinterpret_cast<const __nv_bfloat16*>(desc.bias);
    for (int col = 0; col < n; ++col)
      for (int row = 0; row < m; ++row) {
        float& v = out[size_t(col) * ldo + row];
        if (bias) v += d16 ? __bfloat162float(bias16[row]) : desc.bias[row];
        if (relu) v = std::max(v, 0.f);
        if (d16)
          static_cast<__nv_bfloat16*>(D)[size_t(col) * ld.ld + row] = __float2bfloat16_rn(v);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
