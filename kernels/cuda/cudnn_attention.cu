// The causal attention of --precision bf16 on a GPU through cuDNN's fused SDPA (the library
// boundary is kernels/cuda/cudnn_sdpa.h): the fp32 activations in, rounded to bf16 once, and
// out again, so the layers see the same buffers as on every other path.
//   forward:  qkv16 = bf16(qkv) (where not written by the projection, k::attention_qkv_bf16);
//             o16, lse = sdpa(qkv16); ctx = float(o16) (where asked for:
//             a layer keeping GEMM inputs in bf16 reads o16, k::attention_ctx_bf16)
//   backward: dout16 = bf16(dctx) (where not written by the output projection's backward,
//             k::attention_dctx_bf16); dqkv16 = sdpa_backward(qkv16, o16, dout16, lse);
//             dqkv = float(dqkv16) (where asked for: a layer keeping GEMM inputs in bf16 gives
//             dqkv16 to the projection's backward, k::attention_dqkv_bf16)
// `saved` keeps lse, qkv16 and o16 for the backward (the backward converts only dctx); the
// backward's `scratch` holds dout16 and dqkv16. Both are attention_saved_size() floats.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_sdpa.h"

namespace pn::cuda {
namespace {

using bf16 = __nv_bfloat16;

// The regions of `saved`, in floats from its start; bf16 regions 16-byte aligned.
struct SavedLayout {
  size_t lse = 0, qkv16 = 0, o16 = 0, end = 0;
};
SavedLayout saved_layout(int nseq, int T, int d, int heads) {
  const size_t rows = size_t(nseq) * T;
  SavedLayout l;
  l.qkv16 = (size_t(nseq) * heads * T + 3) / 4 * 4;
  l.o16 = l.qkv16 + (rows * 3 * d + 1) / 2;  // two bf16 per float
  l.o16 = (l.o16 + 3) / 4 * 4;
  l.end = l.o16 + (rows * d + 1) / 2;
  return l;
}
SdpaShape shape_of(int nseq, int T, int d, int heads) { return {nseq, heads, T, d / heads}; }

}  // namespace

std::string cudnn_attention_unsupported(int nseq, int T, int d, int heads) {
  if (heads <= 0 || d % heads) return "the model size is not a multiple of the heads";
  return sdpa_unsupported(shape_of(nseq, T, d, heads));
}

size_t cudnn_attention_saved_size(int nseq, int T, int d, int heads) {
  // The backward's scratch (dout16 and dqkv16: 4d bf16 a row) fits in the same size.
  return saved_layout(nseq, T, d, heads).end;
}

const uint16_t* cudnn_attention_ctx16(const float* saved, int nseq, int T, int d, int heads) {
  return reinterpret_cast<const uint16_t*>(saved + saved_layout(nseq, T, d, heads).o16);
}

uint16_t* cudnn_attention_qkv16(float* saved, int nseq, int T, int d, int heads) {
  return reinterpret_cast<uint16_t*>(saved + saved_layout(nseq, T, d, heads).qkv16);
}

uint16_t* cudnn_attention_dout16(float* scratch) { return reinterpret_cast<uint16_t*>(scratch); }

// Where the backward leaves dqkv16 in its scratch: after dout16, 16-byte aligned.
size_t dqkv16_offset(int nseq, int T, int d) { return (size_t(nseq) * T * d + 7) / 8 * 4; }
const uint16_t* cudnn_attention_dqkv16(const float* scratch, int nseq, int T, int d) {
  return reinterpret_cast<const uint16_t*>(scratch + dqkv16_offset(nseq, T, d));
}

void cudnn_attention_forward(const float* qkv, int nseq, int T, int d, int heads, float* saved,
                             float* ctx, cudaStream_t s) {
  if (nseq == 0 || T == 0) return;
  const size_t rows = size_t(nseq) * T;
  const SavedLayout l = saved_layout(nseq, T, d, heads);
  const SdpaShape shape = shape_of(nseq, T, d, heads);
  auto* qkv16 = reinterpret_cast<bf16*>(saved + l.qkv16);
  auto* o16 = reinterpret_cast<bf16*>(saved + l.o16);
  if (qkv) to_bf16(qkv, rows * 3 * d, qkv16, s);  // none where the projection wrote qkv16
  void* workspace = cuda_scratch(kSlotCudnn, sdpa_workspace_bytes(shape), s);
  sdpa_forward(shape, qkv16, o16, saved + l.lse, workspace, s);
  if (ctx) from_bf16(o16, rows * d, ctx, s);  // none where the projection reads o16 itself
}

void cudnn_attention_backward(const float* saved, const float* dctx, int nseq, int T, int d,
                              int heads, float* dqkv, float* scratch, cudaStream_t s) {
  if (nseq == 0 || T == 0) return;
  const size_t rows = size_t(nseq) * T;
  const SavedLayout l = saved_layout(nseq, T, d, heads);
  const SdpaShape shape = shape_of(nseq, T, d, heads);
  auto* dout16 = reinterpret_cast<bf16*>(scratch);
  auto* dqkv16 = reinterpret_cast<bf16*>(scratch + dqkv16_offset(nseq, T, d));
  if (dctx) to_bf16(dctx, rows * d, dout16, s);  // none where the projection wrote dout16
  void* workspace = cuda_scratch(kSlotCudnn, sdpa_workspace_bytes(shape), s);
  sdpa_backward(shape, reinterpret_cast<const bf16*>(saved + l.qkv16),
                reinterpret_cast<const bf16*>(saved + l.o16), dout16, saved + l.lse, dqkv16,
                workspace, s);
  if (dqkv) from_bf16(dqkv16, rows * 3 * d, dqkv, s);  // none where the projection reads dqkv16
}

}  // namespace pn::cuda
