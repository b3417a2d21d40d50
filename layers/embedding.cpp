#include "layers/embedding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "kernels/device.h"
#include "kernels/kernels.h"

namespace pn {

namespace {
int cpu_vocab_multiple = 1;  // set by tests only
}  // namespace

int vocab_multiple() { return current_device() == Device::CUDA ? 64 : cpu_vocab_multiple; }

void set_cpu_vocab_multiple(int multiple) {
  if (multiple < 1) throw std::invalid_argument("the vocabulary multiple must be at least 1");
  cpu_vocab_multiple = multiple;
}

int logits_chunk_rows(int rows, int ld, size_t max_logits) {
  const size_t fit = std::max<size_t>(1, max_logits / size_t(std::max(ld, 1)));
  if (fit >= size_t(rows)) return rows;
  return int(fit >= 64 ? fit / 64 * 64 : fit);
}

template <class T>
Embedding<T>::Embedding(ParamStore<T>& s, const std::string& name, int vocab_size, int d,
                        int max_positions, int padding_idx, bool output)
    : store(&s), vocab(vocab_size), dim(d), max_len(max_positions) {
  const int m = output ? vocab_multiple() : 1;
  padded_vocab = (vocab + m - 1) / m * m;
  // fairseq's init: N(0, d^-1/2); the scale sqrt(d) then gives unit-variance inputs.
  table = s.add(name + ".weight", {vocab, dim}, Init::Normal, 1.0 / std::sqrt(double(dim)),
                size_t(padded_vocab - vocab) * dim);
  positions.resize(size_t(max_len) * dim);
  k::sinusoidal_positions<T>(max_len, dim, positions.data());
  (void)padding_idx;
}

template <class T>
T Embedding<T>::scale() const {
  return T(std::sqrt(double(dim)));
}

template <class T>
void Embedding<T>::forward(const int32_t* tok, int rows, int seq_len, T* y) const {
  if (seq_len > max_len) throw std::invalid_argument("sequence longer than the position table");
  k::embedding_forward<T>(tok, rows, seq_len, store->p(table), positions.data(), dim, scale(), y);
}

template <class T>
void Embedding<T>::backward(const int32_t* tok, const T* dy, int rows) const {
  k::embedding_backward<T>(tok, rows, dy, dim, scale(), store->g(table));
}

template <class T>
void Embedding<T>::output_forward(const T* h, int rows, T* logits, int ld) const {
  k::gemm<T>(false, true, rows, padded_vocab, dim, T(1), h, dim, store->p(table), dim, T(0),
             logits, ld);
}

template <class T>
void Embedding<T>::output_backward(const T* h, const T* dlogits, const uint16_t* dlogits16,
                                   int ld16, int rows, int ld, T* dh) const {
  // bf16 GEMMs: dlogits rounded once for both, unless the loss left them rounded in place
  const uint16_t* d16 = dlogits16;
  if (d16) ld = ld16;
  const T* d32 = d16 ? nullptr : dlogits;
  const k::Bf16Copy rounded(d32, size_t(rows) * ld);
  k::gemm_kept<T>(false, false, rows, dim, padded_vocab, d32, d16, ld, store->p(table), nullptr,
                  dim, T(0), dh, dim);
  k::gemm_kept<T>(true, false, padded_vocab, dim, rows, d32, d16, ld, h, nullptr, dim, T(1),
                  store->g(table), dim);
}

template <class T>
void Embedding<T>::output_loss(const T* h, const int32_t* target, const uint8_t* mask, int rows,
                              T label_smoothing, T grad_scale, double* loss_sums, Buf<T>& logits,
                              T* dh, size_t max_logits) const {
  const int ld = logits_ld();
  // The gradient in place of the logits, as its bf16 rounding where that is all the GEMMs read;
  // in training the logits themselves in bf16 where the GEMMs write bf16 (rows ld apart): half
  // the bytes, so a chunk of twice the rows in the same memory.
  const bool g16 = dh && k::gemm_inputs_in_bf16<T>();
  const bool z16 = g16 && k::gemm_outputs_in_bf16<T>() && ld == padded_vocab;
  const int chunk = logits_chunk_rows(rows, ld, z16 ? 2 * max_logits : max_logits);
  const size_t held = size_t(std::min(chunk, rows)) * ld;
  logits.resize(z16 ? (held + 1) / 2 : held);
  uint16_t* bits = reinterpret_cast<uint16_t*>(logits.data());  // z16, then the gradient's
  for (int r0 = 0; r0 < rows; r0 += chunk) {
    const int r = std::min(chunk, rows - r0);
    const T* hr = h + size_t(r0) * dim;
    if (z16)
      k::linear_forward<T>(hr, nullptr, r, dim, padded_vocab, store->p(table), nullptr, false,
                           nullptr, bits);
    else
      output_forward(hr, r, logits.data(), ld);
    if (!dh) {
      k::softmax_xent_eval_acc<T>(logits.data(), target + r0, mask + r0, r, vocab, ld,
                                  label_smoothing, loss_sums);
      continue;
    }
    k::softmax_xent_acc<T>(logits.data(), target + r0, mask + r0, r, vocab, ld, label_smoothing,
                           grad_scale, g16, z16, loss_sums);
    output_backward(hr, logits.data(), g16 ? bits : nullptr,
                    z16 ? ld : k::bf16_rows_in_place_ld(ld), r, ld, dh + size_t(r0) * dim);
  }
}

template struct Embedding<float>;
template struct Embedding<double>;

}  // namespace pn
