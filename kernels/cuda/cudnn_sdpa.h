// The library boundary of the causal attention on a GPU: cuDNN's fused scaled-dot-product
// attention (its graph API through the cuDNN frontend; the flash-attention kernels NVIDIA tunes
// for each GPU). Host functions on device pointers, enqueued on the stream given.
//
// Three builds provide these functions: kernels/cuda/cudnn_sdpa.cpp on a real CUDA build (cuDNN
// loaded at run time, so a machine without it still runs, on the other attention kernels), the
// same file without the frontend's headers (every shape unsupported, with the reason), and
// emulator/cudnn_sdpa.cpp, which computes the same outputs on the CPU from the definitions
// (double sums, bf16 results), apart from the project's CPU attention, so that the call sites
// (kernels/cuda/cudnn_attention.cu) run everywhere and are checked against an independent one.
//
// Layouts, one sequence of T tokens after another, heads of dh = d/H columns:
//   qkv  bf16 [nseq*T, 3d]: q | k | v of each token (the QKV projection's output, rounded);
//   o    bf16 [nseq*T, d]:  softmax(q k^T / sqrt(dh), keys j <= i) v, per head;
//   lse  fp32 [nseq, H, T]: each query row's log-sum-exp of its scaled, masked scores;
//   dout bf16 [nseq*T, d] and dqkv bf16 [nseq*T, 3d] (dq | dk | dv, overwritten) likewise.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace pn::cuda {

struct SdpaShape {
  int nseq = 0, heads = 0, seq_len = 0, head_dim = 0;
};

// "" when cuDNN runs this shape's forward and backward on this GPU (the first call per shape
// loads cuDNN and builds both plans); otherwise why not, in one line.
std::string sdpa_unsupported(const SdpaShape& s);
// The shapes cuDNN 9 refuses whatever the GPU, checked before a plan is built (and by the
// emulation's stand-in alike): "" or why, in one line.
inline std::string sdpa_shape_refused(const SdpaShape& s) {
  if (s.head_dim % 8 || s.head_dim > 128)
    return "cuDNN's SDPA needs a head size that is a multiple of 8, at most 128";
  if (s.seq_len < 2)  // cuDNN 9.19 on an H200: "s_q = s_kv = 1 is not supported"
    return "cuDNN's SDPA backward does not take sequences of one token";
  return "";
}
// Device workspace the forward or the backward of this shape needs (after sdpa_unsupported).
size_t sdpa_workspace_bytes(const SdpaShape& s);
// The cuDNN library in use and how its backward reduces dq, for the device summary.
std::string sdpa_description();
// cuDNN's version ("9.1.0"), opening it where no attention has yet; "" when it cannot be opened.
std::string cudnn_version();

void sdpa_forward(const SdpaShape& s, const __nv_bfloat16* qkv, __nv_bfloat16* o, float* lse,
                  void* workspace, cudaStream_t stream);
void sdpa_backward(const SdpaShape& s, const __nv_bfloat16* qkv, const __nv_bfloat16* o,
                   const __nv_bfloat16* dout, const float* lse, __nv_bfloat16* dqkv,
                   void* workspace, cudaStream_t stream);

}  // namespace pn::cuda
