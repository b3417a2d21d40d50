// pntrain kernels: math on raw buffers, no knowledge of layers or models.
//
// Every operation of kernels/ops.inc (the one list, with each operation's math), declared here
// in pn::k, is the single dispatch point for that operation: kernels/dispatch.cpp sends it to the
// CPU implementation (kernels/cpu/, the reference, also used for double precision) or to its CUDA
// twin (kernels/cuda/, float, and double where the list says so), by the device of this thread's
// current Context (kernels/device.h).
// Layers call these functions and never ask which device they run on; the device lives in the
// buffers (kernels/buffer.h) and in the context.
// Layout: activations are row-major [rows, cols]; a "row" is one token.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/device.h"
#include "kernels/ops_expand.h"

namespace pn::k {

// Sums of the loss over a batch (per target token they are loss/ntokens and nll/ntokens).
struct LossSums {
  double loss = 0, nll = 0, ntokens = 0;
};

#define PN_OP PN_OPS_DECLARE
#include "kernels/ops.inc"
#undef PN_OP

// Elements of attention_forward's `saved` and attention_backward's `scratch` on the current
// context: nseq*H*T*T where the probabilities are materialized, nseq*H*T where fused.
size_t attention_saved_size(int nseq, int seq_len, int d, int heads);
// Whether attention_backward reads its qkv argument on the current context: not where cuDNN's
// SDPA runs it (its `saved` holds a bf16 copy), so the layer need not keep the fp32 q|k|v.
template <class T>
bool attention_backward_reads_qkv(int nseq, int seq_len, int d, int heads);
// Where attention_forward keeps the context it computed as bf16 inside `saved` (cuDNN's SDPA)
// and the layers keep GEMM inputs in bf16 (gemm_inputs_in_bf16), that bf16 ctx, the output
// projection's x16: then attention_forward may be given no fp32 ctx (null), since neither the
// projection nor that path's backward reads one. Null elsewhere.
template <class T>
const uint16_t* attention_ctx_bf16(const T* saved, int nseq, int seq_len, int d, int heads);
// Likewise for its input: where attention_forward rounds q|k|v to bf16 into `saved` (cuDNN's
// SDPA) and the layers keep GEMM inputs in bf16, where the QKV projection may write that
// rounding itself (Linear::forward's y16): then attention_forward may be given no qkv (null).
template <class T>
uint16_t* attention_qkv_bf16(T* saved, int nseq, int seq_len, int d, int heads);
// Likewise for the backward: where attention_backward computes dqkv in bf16 inside `scratch`
// (cuDNN's SDPA) and the layers keep GEMM inputs in bf16, that bf16 dqkv, the QKV projection's
// dy16: then attention_backward may be given no fp32 dqkv (null). Null elsewhere.
template <class T>
const uint16_t* attention_dqkv_bf16(const T* scratch, int nseq, int seq_len, int d, int heads);
// And for its incoming gradient: where attention_backward rounds dctx to bf16 inside `scratch`
// (cuDNN's SDPA) and the layers keep GEMM inputs in bf16, where the output projection's backward
// may write that rounding itself (Linear::backward's dx16): then attention_backward may be given
// no dctx (null). Null elsewhere.
template <class T>
uint16_t* attention_dctx_bf16(T* scratch, int nseq, int seq_len, int d, int heads);

// Whether a layer keeps an activation that only GEMMs read (a norm's output, the feed-forward's
// hidden layer) for its backward as its bf16 rounding alone (round_bf16, passed as the x16 of
// linear_forward and linear_backward) instead of in T: on a GPU context whose GEMMs compute in
// bf16 (Context::gemm_inputs_bf16 on), for float. The GEMMs read the rounding they would
// otherwise make at each call, so results are equal to the bit, in half the memory and passes.
template <class T>
bool gemm_inputs_in_bf16();
// Where a GPU's GEMMs read bf16 inputs and write bf16 outputs (gemm_inputs_in_bf16 and
// Context::gemm_bf16_outputs), for float: there the output layer writes its logits in bf16
// (half the bytes for the GEMM to write and the loss to read), as autocast's bf16 Linear does.
template <class T>
bool gemm_outputs_in_bf16();
// A float matrix [rows, ld] overwritten row by row with its values' bf16 roundings, each row's in
// the first half of its own bytes (softmax_xent_acc's grad_bf16): a bf16 matrix whose rows are
// 2 ld apart, at the same address.
inline const uint16_t* bf16_rows_in_place(const float* x) {
  return reinterpret_cast<const uint16_t*>(x);
}
inline int bf16_rows_in_place_ld(int ld) { return 2 * ld; }

// For its lifetime, the float GEMMs of a GPU context whose math is bf16 read operands inside
// [x, x + n) from one bf16 copy made here, instead of rounding them at every call; on every other
// context (and for double) nothing happens. x must not change meanwhile. The models hold one over
// the weights for a forward and its backward; a Linear over its output gradient, which both of
// its backward GEMMs read. Scopes nest (the innermost copy that holds an operand serves it).
// A null x makes no copy.
class Bf16Copy {
 public:
  Bf16Copy(const float* x, size_t n);
  Bf16Copy(const double*, size_t) {}
  ~Bf16Copy();
  Bf16Copy(const Bf16Copy&) = delete;
  Bf16Copy& operator=(const Bf16Copy&) = delete;

 private:
  void* blas_ = nullptr;  // the context's cuda::Blas where a copy was made
};

// How the float GEMMs of --precision bf16 run off a GPU, in words for device_summary(): on the
// CPU's bf16 instructions (oneDNN's matmul and its kernel) or as bf16's numerics on fp32 sgemm,
// and why.
std::string cpu_bf16_gemm_path();

}  // namespace pn::k
