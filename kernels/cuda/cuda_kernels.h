// The CUDA twins of the operations of kernels/ops.inc, and the CUDA-only pieces they are built
// from (cuBLAS handle, bf16 conversions, the fused attention, reductions read by the host).
//
// The twins are declared from the list itself (below): same name, same argument order and the
// same math as the CPU kernels (the math is in kernels/ops.inc), in float (and double where the
// list says stream_double), on raw device pointers, each enqueued on the stream given last
// (cuda: stream) or on the stream of the cuBLAS context given first (cuda: cublas). Every
// pointer argument is device memory, including the double statistics of the norm kernels
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
// after the first steps no call allocates. One host thread per process issues these kernels, and
// calls that use scratch must not run concurrently on two streams (they share the pool).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/ops_expand.h"

namespace pn::cuda {

int device_count();  // 0 when no GPU is visible (or no driver)
// Called before each allocation of device memory (kernels/device.cpp: a StepGraph replays only
// while none has happened since its capture; inside a capture it throws).
void count_allocation();

// ---- BLAS -----------------------------------------------------------------------------------
// A cuBLAS handle bound to one stream. math: what the float GEMMs compute in (kernels/device.h):
// fp32 (CUBLAS_COMPUTE_32F), tf32 (CUBLAS_COMPUTE_32F_FAST_TF32, about 10 bits of mantissa in the
// products) or bf16 (gemm below: operands rounded to bf16, fp32 sums).
struct Blas {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  GemmMath math = GemmMath::fp32;  // what the float GEMMs compute in (kernels/device.h)
  // bf16 math: bf16 copies of fp32 ranges (push_bf16_copy), which an operand inside one of them
  // is read from instead of being rounded again at each GEMM: the weights over a forward and its
  // backward, a gradient that two GEMMs read. A stack (the scopes nest); copies[0, live) are in
  // use, the deeper ones keep their memory for the next push.
  struct Bf16Copy {
    const float* x = nullptr;
    size_t n = 0;
    __nv_bfloat16* copy = nullptr;
    size_t capacity = 0;
  };
  std::vector<Bf16Copy> copies;
  size_t live = 0;
  size_t copy_reads = 0;  // operands served from a copy (the tests count them)
  // The Linear's cuBLASLt handle and its per-shape plans (device.cu), made on first use.
  cublasLtHandle_t lt = nullptr;
  void* lt_plans = nullptr;
  size_t lt_calls = 0;  // Linear forwards and weight gradients that ran in cuBLASLt's epilogue
  explicit Blas(cudaStream_t s, GemmMath m = GemmMath::fp32);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
};

// ---- the twins of kernels/ops.inc -----------------------------------------------------------
#define PN_OP PN_OPS_CUDA_TWIN
#define T float
#include "kernels/ops.inc"
#undef T
#undef PN_OP
#define PN_OP PN_OPS_CUDA_DOUBLE_TWIN
#define T double
#include "kernels/ops.inc"
#undef T
#undef PN_OP

// ---- CUDA-only building blocks --------------------------------------------------------------
// k::linear_forward (y = x W^T + bias, ReLU'd where relu) in one cuBLASLt matmul with the bias
// and the ReLU in its epilogue; false where cuBLASLt has no algorithm for the shape or refuses
// the call (k::linear_forward then runs gemm and one pass; at most the bf16 roundings of the
// operands were queued, which gemm makes again). Both read x16, x's kept bf16 rounding, instead
// of x where it is not null (as gemm_bf16_inputs). y16: where not null, the epilogue writes y's
// bf16 rounding there instead of y (y unused), under bf16 math only.
bool linear_forward_epilogue(Blas& b, const float* x, const uint16_t* x16, int rows, int in,
                             int out, const float* W, const float* bias, bool relu, float* y,
                             uint16_t* y16);
// A Linear's input gradient in bf16, dx16 [rows, in] = bf16(dy W), one cuBLASLt matmul with a
// bf16 D (bf16 math; dy16: dy's kept rounding where not null). False where cuBLASLt has no
// algorithm for the shape or refuses the call (dx16 untouched then).
bool linear_input_grad_bf16(Blas& b, const float* dy, const uint16_t* dy16, int rows, int in,
                            int out, const float* W, uint16_t* dx16);
// Scratch for the fp32 y of a k::linear_forward given only y16, where no epilogue writes y16, and
// for the fp32 input gradient where no cuBLASLt matmul writes it in bf16.
float* linear_output_scratch(size_t n, cudaStream_t s);
// Scratch for the bf16 input gradient of a Linear after a ReLU before the ReLU's mask is applied
// (k::linear_backward_into_relu); the same memory as linear_output_scratch.
uint16_t* relu_grad_scratch16(size_t n, cudaStream_t s);
// k::linear_backward's weight gradient dW += dy^T x and bias gradient db += sum_r dy[r, :] in
// one cuBLASLt matmul whose epilogue sums dy's columns (CUBLASLT_EPILOGUE_BGRADB, into scratch,
// then added to db); false where cuBLASLt has no algorithm for the shape or refuses the call.
// x16, dy16: the kept bf16 roundings of x and dy where not null.
bool linear_weight_grad_epilogue(Blas& b, const float* x, const uint16_t* x16, const float* dy,
                                 const uint16_t* dy16, int rows, int in, int out, float* dW,
                                 float* db);

// batch independent GEMMs, operand i at A + i*stride_a (and so on); under bf16 math cuBLAS's
// CUBLAS_COMPUTE_32F_FAST_16BF on the fp32 operands (the materialized attention's per-head GEMMs,
// strided views that a conversion per head would copy).
void gemm_strided_batched(Blas& b, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                          const float* A, int lda, long long stride_a, const float* B, int ldb,
                          long long stride_b, float beta, float* C, int ldc, long long stride_c,
                          int batch);

// bf16 GEMMs (wired: --precision bf16 on a GPU): gemm above, on a Blas whose math is bf16, rounds
// both operands to bf16 into scratch with to_bf16 and calls gemm_bf16: bf16 operands, float
// accumulation and float C (CUBLAS_COMPUTE_32F on CUDA_R_16BF inputs), so master weights,
// optimizer state and norm statistics stay float. to_bf16 rounds to nearest even; from_bf16 is
// exact (the tests use it).
// gemm on a bf16 Blas with an operand given already rounded where A16 (B16) is not null: a
// layer's GEMM input kept in bf16 (k::round_bf16's bits); the others are rounded here, or read
// from a bf16 copy that holds them. A kept input on a Blas of other math is a std::logic_error.
void gemm_bf16_inputs(Blas& b, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const float* A, const uint16_t* A16, int lda, const float* B,
                      const uint16_t* B16, int ldb, float beta, float* C, int ldc);
void gemm_bf16(Blas& b, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
               const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb, float beta,
               float* C, int ldc);
void to_bf16(const float* x, size_t n, __nv_bfloat16* y, cudaStream_t s);
// Rounds x[0, n) to bf16 once (on a bf16 Blas; elsewhere nothing) and serves every operand
// inside it from that copy until the matching pop; the copy must not change meanwhile.
void push_bf16_copy(Blas& b, const float* x, size_t n);
void pop_bf16_copy(Blas& b);
void from_bf16(const __nv_bfloat16* x, size_t n, float* y, cudaStream_t s);

// y = x, device to device (k::copy takes copy_on_device instead).
void copy(const float* x, size_t n, float* y, cudaStream_t s);

// The causal attention on cuDNN's fused SDPA (cudnn_attention.cu, through cudnn_sdpa.h): "" when
// cuDNN runs this shape here, else why not. saved and scratch: cudnn_attention_saved_size()
// floats; the backward reads qkv and ctx from `saved` (their bf16 copies). The forward's qkv
// null: its bf16 copy is in `saved` already (cudnn_attention_qkv16).
std::string cudnn_attention_unsupported(int nseq, int seq_len, int d, int heads);
size_t cudnn_attention_saved_size(int nseq, int seq_len, int d, int heads);
// The bf16 ctx that cudnn_attention_forward keeps in `saved` (rows x d, k::round_bf16's bits).
const uint16_t* cudnn_attention_ctx16(const float* saved, int nseq, int seq_len, int d,
                                      int heads);
// Where cudnn_attention_forward keeps q|k|v in bf16 inside `saved` (rows x 3d): a QKV projection
// may write it there itself, and the forward then be given no fp32 qkv (null).
uint16_t* cudnn_attention_qkv16(float* saved, int nseq, int seq_len, int d, int heads);
// The bf16 dqkv that cudnn_attention_backward leaves in its `scratch` (rows x 3d): cuDNN's own
// output, which it widens into dqkv only where given one.
const uint16_t* cudnn_attention_dqkv16(const float* scratch, int nseq, int seq_len, int d);
// Where cudnn_attention_backward rounds dctx to bf16 in its `scratch` (rows x d, at its start):
// an output projection's backward may write it there itself, and the backward then be given no
// fp32 dctx (null).
uint16_t* cudnn_attention_dout16(float* scratch);
std::string sdpa_description();  // the cuDNN in use (cudnn_sdpa.h)
std::string cudnn_version();     // cudnn_sdpa.h
void cudnn_attention_forward(const float* qkv, int nseq, int seq_len, int d, int heads,
                             float* saved, float* ctx, cudaStream_t s);
void cudnn_attention_backward(const float* saved, const float* dctx, int nseq, int seq_len, int d,
                              int heads, float* dqkv, float* scratch, cudaStream_t s);

// ---- loss and reductions with the result on the device (_host variants synchronise) ---------
// As k::softmax_xent; the sums (loss, nll, ntokens) are written to sums[0..2] on the device
// (softmax_xent_acc adds to them instead).
void softmax_xent(float* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                  int ld, float label_smoothing, float grad_scale, double* sums, cudaStream_t s);
void softmax_xent_eval(const float* logits, const int32_t* target, const uint8_t* mask, int rows,
                       int V, int ld, float label_smoothing, double* sums, cudaStream_t s);
k::LossSums loss_sums_host(const double* sums, cudaStream_t s);  // synchronises s
void sum_squares(const float* x, size_t n, double* out, cudaStream_t s);
// unless: null, or a device value: where it is finite, *out = 0 and x is not read.
void count_nonfinite(const float* x, size_t n, double* out, cudaStream_t s,
                     const double* unless = nullptr);
double sum_squares_host(const float* x, size_t n, cudaStream_t s);
bool all_finite_host(const float* x, size_t n, cudaStream_t s);

}  // namespace pn::cuda
