// Token embedding scaled by sqrt(d) plus sinusoidal positions, and the tied output projection.
//   forward:  h[i] = sqrt(d) * E[tok[i]] + P[i mod T]
//   output:   logits = h E^T;  dh = dlogits E;  dE += dlogits^T h
// The output GEMMs run over Vp = round_up(V, M) rows of E: a GPU's tensor-core GEMMs take their
// fast kernels only when their N dimension, the vocabulary itself, is a multiple of 8, better 64.
// M = vocab_multiple(): 64 on a GPU, 1 on the CPU (whose results stay those of V rows). Rows
// [V, Vp) are zeros reserved in the ParamStore right after the table (its shape stays {V, d}):
// their logits are 0, softmax_xent never reads those columns and sets their gradient to 0, so dE
// there is 0 and Adam leaves them 0.
// The logits' rows are ld apart; logits_ld() pads them to 8 words (32 bytes), since cuBLAS runs
// a GEMM whose leading dimension is not a multiple of 16 bytes on slower kernels.
// The loss (output_loss) runs over chunks of rows whose logits hold at most max_logits values
// (twice as many where they are bf16, in the same bytes: k::gemm_outputs_in_bf16): the logits of
// a whole batch would be the largest buffer of an update.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "layers/params.h"

namespace pn {

// The multiple the output layer pads its vocabulary to on the current device: 64 on a GPU, else
// 1 unless set_cpu_vocab_multiple says otherwise (tests: the CPU padded as a GPU pads).
int vocab_multiple();
void set_cpu_vocab_multiple(int multiple);

// The models' default bound on the logits held at once by the loss: 64 Mi values, 256 MiB in fp32.
constexpr size_t kMaxLogits = size_t(1) << 26;
// The rows of each of output_loss's chunks: all of them where they fit, else as many as fit,
// a multiple of 64 where that leaves one or more (the GEMMs' tiles).
int logits_chunk_rows(int rows, int ld, size_t max_logits);

template <class T>
struct Embedding {
  ParamStore<T>* store = nullptr;
  int vocab = 0, dim = 0, max_len = 0, table = -1;
  int padded_vocab = 0;  // Vp: the rows the output GEMMs run over
  Buf<T> positions;      // [max_len, dim], not a parameter

  Embedding() = default;
  // output: the table is also the output projection (its GEMMs pad the vocabulary).
  Embedding(ParamStore<T>& s, const std::string& name, int vocab_size, int d, int max_positions,
            int padding_idx, bool output = true);
  T scale() const;
  void forward(const int32_t* tok, int rows, int seq_len, T* y) const;
  void backward(const int32_t* tok, const T* dy, int rows) const;  // accumulates dE
  int logits_ld() const { return (padded_vocab + 7) / 8 * 8; }
  // logits[:, 0:Vp] = h E^T, rows ld >= Vp apart; columns [V, Vp) come out 0.
  void output_forward(const T* h, int rows, T* logits, int ld) const;
  // dlogits' columns [V, Vp) must be 0 (softmax_xent leaves them so). dh overwritten.
  // dlogits16: where not null, the gradient's bf16 rounding, rows ld16 apart (softmax_xent_acc's
  // grad_bf16 in place of the logits), which the GEMMs read instead of dlogits.
  void output_backward(const T* h, const T* dlogits, const uint16_t* dlogits16, int ld16,
                       int rows, int ld, T* dh) const;
  // The output layer and the label-smoothed cross-entropy of rows of h, chunk by chunk
  // (logits_chunk_rows), the loss sums {loss, nll, tokens} added to loss_sums (device memory).
  // With dh (training): dh overwritten with the loss's gradient times grad_scale, dE accumulated.
  // Without (evaluation): the loss only. `logits` is the chunk's scratch.
  void output_loss(const T* h, const int32_t* target, const uint8_t* mask, int rows,
                   T label_smoothing, T grad_scale, double* loss_sums, Buf<T>& logits, T* dh,
                   size_t max_logits) const;
};

}  // namespace pn
