// The CPU implementations of every operation of kernels/ops.inc (each defined in the file its
// entry names, kernels/cpu/<cpu file>.cpp, which also instantiates it): the reference the CUDA
// twins are tested against, and the fallback. Templates instantiated for float (training) and
// double (gradient checks).
// Called only by the dispatch in kernels/dispatch.cpp and by tests that compare a device with
// the CPU.
#pragma once
#include <string>

#include "kernels/kernels.h"

namespace pn::k::cpu {
#define PN_OP PN_OPS_DECLARE
#include "kernels/ops.inc"
#undef PN_OP

// gemm with --precision bf16 off a GPU: op(A) and op(B) rounded to bf16 (nearest even), their
// products summed in fp32, as a bf16 dot-product unit and cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF
// compute; C and alpha, beta stay fp32.
void gemm_bf16_operands(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const float* A, int lda, const float* B, int ldb, float beta, float* C,
                        int ldc);

// The same GEMM on the CPU's bf16 instructions through oneDNN's matmul (gemm_bf16.cpp): equal to
// gemm_bf16_operands up to the order of the fp32 sums. A shape oneDNN cannot make runs
// gemm_bf16_operands instead.
void gemm_bf16_matmul(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                      int lda, const float* B, int ldb, float beta, float* C, int ldc);
// True, checked once, where the CPU has AVX512_BF16 and oneDNN makes a bf16 matmul on it.
bool bf16_matmul_available();
// Lets bf16_matmul_available() take oneDNN's matmul where only its reference loop exists (slow:
// for the tests, which check the oneDNN call on CPUs without bf16 instructions).
void allow_any_bf16_matmul();
// Which of the two computes --precision bf16 here, and why, for the device's summary line.
std::string bf16_matmul_description();
}  // namespace pn::k::cpu
