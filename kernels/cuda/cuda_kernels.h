// The CUDA twins of kernels/kernels.h and kernels/norm_kernels.h.
//
// Same operations, same argument order and the same math as the CPU kernels, in float, on raw
// device pointers, each enqueued on the stream given last (or on the Blas context's stream).
// Every pointer argument is device memory, including the double statistics of the norm kernels
// (count, sums, shift, scale) and the results of the reductions, so a layer can keep its whole
// step on the device without a host synchronisation. Functions whose name ends in _host copy a
// device result back and therefore synchronise the stream.
//
// Determinism: no float atomics. Column statistics are two-level reductions over a partition
// fixed by the shape alone (blocks of kRowChunk rows, then the blocks summed in block order, in
// double), row statistics are warp reductions in double, so every result is bitwise repeatable
// run to run and independent of the GPU model. They match the CPU kernels to float rounding
// (same formulas, different summation order); the dropout mask matches bit for bit.
//
// Scratch: kernels that need temporary device memory take it from a grow-only pool owned by this
// library (cuda_scratch in common.cuh); it grows in stream order (no device synchronisation), and
// after the first steps no call allocates. One host thread per process issues these kernels, and calls
// that use scratch must not run concurrently on two streams (they share the pool).
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace pn::cuda {

int device_count();  // 0 when no GPU is visible (or no driver)

// ---- BLAS -----------------------------------------------------------------------------------
// A cuBLAS handle bound to one stream. tf32: let float GEMMs use TF32 tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32, about 10 bits of mantissa in the products); off: plain float.
struct Blas {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  GemmMath math = GemmMath::fp32;  // what the float GEMMs compute in (kernels/device.h)
  explicit Blas(cudaStream_t s, GemmMath m = GemmMath::fp32);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
};
// C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, row-major, as k::gemm.
void gemm(Blas& b, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
          int lda, const float* B, int ldb, float beta, float* C, int ldc);
// batch independent GEMMs, operand i at A + i*stride_a (and so on).
void gemm_strided_batched(Blas& b, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                          const float* A, int lda, long long stride_a, const float* B, int ldb,
                          long long stride_b, float beta, float* C, int ldc, long long stride_c,
                          int batch);

// bf16 mixed precision (the building blocks of --precision bf16, not wired yet): bf16 operands,
// float accumulation and float C (CUBLAS_COMPUTE_32F), so master weights, optimizer state and
// norm statistics stay float. to_bf16 rounds to nearest even; from_bf16 is exact.
void gemm_bf16(Blas& b, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
               const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb, float beta,
               float* C, int ldc);
void to_bf16(const float* x, size_t n, __nv_bfloat16* y, cudaStream_t s);
void from_bf16(const __nv_bfloat16* x, size_t n, float* y, cudaStream_t s);

// ---- element-wise ---------------------------------------------------------------------------
void fill(float* x, size_t n, float value, cudaStream_t s);
void copy(const float* x, size_t n, float* y, cudaStream_t s);
void add_inplace(float* y, const float* x, size_t n, cudaStream_t s);          // y += x
void add(const float* a, const float* b, size_t n, float* y, cudaStream_t s);  // residual
void scale_inplace(float* y, size_t n, float a, cudaStream_t s);
void add_bias(float* y, const float* b, int rows, int cols, cudaStream_t s);
void bias_grad(const float* dy, int rows, int cols, float* db, cudaStream_t s);  // db += sum_r dy
void relu_forward(const float* x, size_t n, float* y, cudaStream_t s);
void relu_backward(const float* y, const float* dy, size_t n, float* dx, cudaStream_t s);
// keep[i] = splitmix64(splitmix64(seed) ^ i*K) >= p*2^64: the CPU kernel's mask, bit for bit.
void dropout_mask(uint64_t seed, size_t n, float p, uint8_t* keep, cudaStream_t s);
void gather_rows(const void* src, size_t src_stride, const int32_t* from, int rows, size_t bytes,
                 void* dst, size_t dst_stride, cudaStream_t s);
void dropout_apply(float* x, const uint8_t* keep, size_t n, float p, cudaStream_t s);

// ---- embedding ------------------------------------------------------------------------------
void sinusoidal_positions(int max_len, int d, float* table, cudaStream_t s);
void embedding_forward(const int32_t* tok, int rows, int seq_len, const float* E, const float* P,
                       int d, float scale, float* y, cudaStream_t s);
// dE[tok[i]] += scale * dy[i], rows in order per column (deterministic, no atomics).
void embedding_backward(const int32_t* tok, int rows, const float* dy, int d, float scale,
                        float* dE, cudaStream_t s);

// ---- causal multi-head attention (layouts as k::attention_*) --------------------------------
void attention_forward(Blas& b, const float* qkv, int nseq, int seq_len, int d, int heads,
                       float* probs, float* ctx);
void attention_backward(Blas& b, const float* qkv, const float* probs, const float* dctx, int nseq,
                        int seq_len, int d, int heads, float* dqkv, float* scratch);

// The same attention fused on the tensor cores in bf16 (flash_attention.cu), for head sizes of 32,
// 64 and 128: lse [nseq, H, T] holds each row's log-sum-exp for the backward; dsum [nseq, H, T]
// is the backward's scratch. k::attention_* take it where the context computes in bf16.
bool flash_attention_supported(int d, int heads);
void flash_attention_forward(const float* qkv, int nseq, int seq_len, int d, int heads,
                             float* lse, float* ctx, cudaStream_t s);
void flash_attention_backward(const float* qkv, const float* lse, const float* ctx,
                              const float* dctx, int nseq, int seq_len, int d, int heads,
                              float* dqkv, float* dsum, cudaStream_t s);

// General multi-head attention, as k::mha_forward / k::mha_backward (key padding mask, optional
// causal mask, attention dropout with keep [nseq, H, tq, tk], q and k/v with their own row
// strides) and k::attention_step (one query per sequence against a key/value cache).
void mha_forward(Blas& b, const float* q, int ldq, const float* k, const float* v, int ldkv,
                 int nseq, int tq, int tk, int d, int heads, bool causal, const uint8_t* key_mask,
                 const uint8_t* keep, float p, float* probs, float* probs_drop, float* ctx);
void mha_backward(Blas& b, const float* q, int ldq, const float* k, const float* v, int ldkv,
                  int nseq, int tq, int tk, int d, int heads, bool causal, const uint8_t* key_mask,
                  const uint8_t* keep, float p, const float* probs, const float* probs_drop,
                  const float* dctx, float* dq, float* dk, float* dv, float* scratch);
void attention_step(const float* q, int ldq, const float* k, const float* v, int ldkv,
                    size_t seq_stride, int N, int len, int d, int heads, const uint8_t* key_mask,
                    int mask_stride, float* ctx, cudaStream_t s);

// ---- LayerNorm (group norm with one group) --------------------------------------------------
void layernorm_forward(const float* x, int rows, int d, const float* gamma, const float* beta,
                       float eps, float* y, float* mean, float* rstd, cudaStream_t s);
void layernorm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                        const float* gamma, const uint8_t* mask, int rows, int d, float* dx,
                        float* dgamma, float* dbeta, cudaStream_t s);

// ---- loss -----------------------------------------------------------------------------------
// As k::softmax_xent; the sums (loss, nll, ntokens) are written to sums[0..2] on the device.
void softmax_xent(float* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                  int ld, float label_smoothing, float grad_scale, double* sums, cudaStream_t s);
void softmax_xent_eval(const float* logits, const int32_t* target, const uint8_t* mask, int rows,
                       int V, int ld, float label_smoothing, double* sums, cudaStream_t s);
k::LossSums loss_sums_host(const double* sums, cudaStream_t s);  // synchronises s

// ---- optimizer ------------------------------------------------------------------------------
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t t, cudaStream_t s);

// ---- reductions (result on the device; _host variants synchronise) --------------------------
void sum_squares(const float* x, size_t n, double* out, cudaStream_t s);
void count_nonfinite(const float* x, size_t n, double* out, cudaStream_t s);
double sum_squares_host(const float* x, size_t n, cudaStream_t s);
bool all_finite_host(const float* x, size_t n, cudaStream_t s);

// ---- normalization family (as kernels/norm_kernels.h; every pointer on the device) ----------
void column_stats(const float* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq, cudaStream_t s);
void column_dot(const float* a, const float* b, const uint8_t* mask, int rows, int d,
                const double* shift, double* sum_a, double* sum_ab, cudaStream_t s);
void column_affine(const float* x, int rows, int d, const double* shift, const double* scale,
                   const float* gamma, const float* beta, float* y, cudaStream_t s);
void column_norm_backward(const float* x, const float* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const float* gamma,
                          const double* a, const double* b, float* dx, cudaStream_t s);
void rowgroup_rms_forward(const float* x, int rows, int d, int G, float eps, const float* gamma,
                          float* y, float* rinv, cudaStream_t s);
void rowgroup_rms_backward(const float* x, const float* dy, const float* rinv, const float* gamma,
                           const uint8_t* mask, int rows, int d, int G, float* dx, float* dgamma,
                           cudaStream_t s);
void rowgroup_norm_forward(const float* x, int rows, int d, int G, float eps, const float* gamma,
                           const float* beta, float* y, float* mean, float* rstd, cudaStream_t s);
void rowgroup_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd,
                            const float* gamma, const uint8_t* mask, int rows, int d, int G,
                            float* dx, float* dgamma, float* dbeta, cudaStream_t s);

// ---- per-column state steps of the batch-type norms (norm_state.cu) -----------------------
// One thread per feature; the statistics count is read on the device (stats[0] or *count), so a
// layer's step needs no host synchronisation. Same math as layers/norms/*.cpp; count 0 (empty
// statistics set) takes the inference scale and leaves the running state, t and nu unchanged.
// batch: stats = [count | sum (x - rm) | sum (x - rm)^2] with shift rm = running_mean.
void batch_absorb(const double* stats, int d, double eps, double alpha, double* running_mean,
                  double* running_var, double* mean, double* rstd, double* var_b,
                  cudaStream_t s);  // var_b (may be null): the batch variance, for probes
// sums = [sum dy | sum dy (x - mean)]: dgamma += sums1 * rstd, dbeta += sums0 (this rank's).
void batch_param_grads(const double* count, const double* sums, int d, const double* rstd,
                       float* dgamma, float* dbeta, cudaStream_t s);
// From the all-reduced sums: a = mean_S g, b = mean_S g xh (0 when count is 0).
void batch_backward_coeffs(const double* count, const double* sums, int d, const float* gamma,
                           const double* rstd, double* a, double* b, cudaStream_t s);
// power_v: stats = [count | sum x^2]; inv_s = 1/sqrt(psi_B^2 + eps), psi^2 moving average.
void power_v_absorb(const double* stats, int d, double eps, double alpha, double* running_psi2,
                    double* inv_s, cudaStream_t s);
// PN (t is a device double): inv_s from the running psi^2 when this iteration is past warmup,
// before the statistics arrive; then pn_absorb with the (reduced) stats = [count | sum x^2]
// updates psi^2, sum_x2, inv_s (warm iterations) and t.
void pn_forward_scale(const double* t, int64_t warmup, int d, double eps,
                      const double* running_psi2, double* inv_s, cudaStream_t s);
void pn_absorb(const double* stats, double* t, int64_t warmup, int d, double eps, double alpha_fwd,
               bool authors_rule, double* running_psi2, double* inv_s, double* sum_x2,
               cudaStream_t s);
// --pn-variant authors: the backward's batch scale and nu term (kernels/ops.inc).
void pn_authors_coeffs(const double* count, const double* sum_x2, const double* nu,
                       const double* inv_s, int d, double eps, double alpha_bkw, double* inv_s_b,
                       double* nu_coef, cudaStream_t s);
// power_v and PN backward sums (psi_common.h): sums = [sum dy | sum dy x] of this rank;
// dgamma += dy xh, dbeta += dy, g_xh = gamma * sum dy xh (then all-reduced).
void psi_param_grads(const double* count, const double* sums, int d, const double* inv_s,
                     const float* gamma, float* dgamma, float* dbeta, double* g_xh, cudaStream_t s);
void mean_over_count(const double* count, const double* sums, int d, double* b, cudaStream_t s);
// PN: nu <- nu (1 - (1-alpha_bkw) Gamma) + lambda_coef Lambda, after dx used the old nu.
void pn_nu_update(const double* count, const double* sum_x2, const double* g_xh,
                  const double* inv_s, int d, double alpha_bkw, double lambda_coef, double* nu,
                  cudaStream_t s);


// ---- fused passes, device-resident sums, double vectors (twins of kernels/ops.inc) -----------
void bias_relu_forward(float* y, const float* b, int rows, int cols, cudaStream_t s);
void relu_backward_bias_grad(const float* y, float* dy, int rows, int cols, float* db,
                             cudaStream_t s);
void dropout_add(const float* a, const float* b, const uint8_t* keep, float p, size_t n,
                 float* y, cudaStream_t s);
void dropout_copy(const float* x, const uint8_t* keep, float p, size_t n, float* y,
                  cudaStream_t s);
void log_softmax_rows(float* x, int rows, int cols, cudaStream_t s);
// sums[0..2] += the loss sums; out[0] += sum x^2, out[1] += non-finite count.
void softmax_xent_acc(float* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, float label_smoothing, float grad_scale, double* sums,
                      cudaStream_t s);
void softmax_xent_eval_acc(const float* logits, const int32_t* target, const uint8_t* mask,
                           int rows, int V, int ld, float label_smoothing, double* sums,
                           cudaStream_t s);
void grad_stats_acc(const float* x, size_t n, double* out, cudaStream_t s);
void fill(double* x, size_t n, double value, cudaStream_t s);
void add_inplace(double* y, const double* x, size_t n, cudaStream_t s);
void inverse_sqrt_eps(const double* var, int d, double eps, double* inv, cudaStream_t s);

}  // namespace pn::cuda
