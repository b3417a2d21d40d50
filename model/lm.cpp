#include "model/lm.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pn {

template <class T>
LanguageModel<T>::LanguageModel(const ModelConfig& c, uint64_t seed, Communicator* comm)
    : config(c), embed(params, "embed_tokens", c.vocab, c.dim, c.max_len, c.padding_idx) {
  if (c.vocab <= 0) throw std::invalid_argument("the vocabulary is empty");
  if (c.dim <= 0 || c.layers < 0 || c.ffn_dim <= 0)
    throw std::invalid_argument("model sizes must be positive");
  blocks.resize(c.layers);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l);
    Block& b = blocks[l];
    b.param_begin = params.size();
    b.norm_self = make_norm<T>(c.norm_self, c.dim, params, p + ".self_attn_layer_norm", comm);
    b.attn = CausalSelfAttention<T>(params, workspace, p + ".self_attn", c.dim, c.heads);
    b.norm_ff = make_norm<T>(c.norm_ff, c.dim, params, p + ".final_layer_norm", comm);
    b.ff = FeedForward<T>(params, workspace, p, c.dim, c.ffn_dim);
  }
  final_norm_begin = params.size();
  norm_final = make_norm<T>(c.norm_final, c.dim, params, "layer_norm", comm);
  params.allocate(seed);
}

template <class T>
std::vector<Norm<T>*> LanguageModel<T>::norms() {
  std::vector<Norm<T>*> out;
  for (auto& b : blocks) {
    out.push_back(b.norm_self.get());
    out.push_back(b.norm_ff.get());
  }
  out.push_back(norm_final.get());
  return out;
}

template <class T>
void LanguageModel<T>::load(const Batch& batch, uint64_t dropout_seed) {
  tokens.from_host(batch.tokens);
  targets.from_host(batch.targets);
  mask.from_host(batch.mask);
  step_seed.from_host(&dropout_seed, 1);
}

template <class T>
void LanguageModel<T>::forward(const Batch& batch, bool training) {
  const int rows = batch.rows(), d = config.dim;
  const size_t n = size_t(rows) * d;
  const uint8_t* mask = this->mask.data();
  const bool drop = training && config.dropout > 0;
  const float p = float(config.dropout);
  Buf<T>* h = blocks.empty() ? &h_last : &blocks[0].x;
  h->resize(n);
  embed.forward(tokens.data(), rows, batch.seq_len, h->data());
  T* branch = workspace.take(workspace.branch, n);  // each branch's output, added at once
  // Each residual add is made by the norm that reads its sum (Norm::forward_residual: LN in the
  // same pass); `pending` is the block whose feed-forward branch is still to be added.
  const Block* pending = nullptr;
  for (size_t l = 0; l < blocks.size(); ++l) {
    Block& b = blocks[l];
    Buf<T>& next = l + 1 < blocks.size() ? blocks[l + 1].x : h_last;
    b.mid.resize(n);
    next.resize(n);
    // The norms write their output's bf16 rounding themselves where that is all that is kept.
    const auto [a, a16] = b.a.begin_either(n);
    if (pending)
      b.norm_self->forward_residual(pending->mid.data(), branch,
                                    drop ? pending->keep_ff.data() : nullptr, p, b.x.data(), mask,
                                    rows, a, training, a16);
    else
      b.norm_self->forward(b.x.data(), mask, rows, a, training, a16);
    b.attn.forward(b.a.x, batch.nseq, batch.seq_len, branch, b.a.x16);
    if (drop) {
      b.keep_attn.resize(n);
      k::dropout_mask(step_seed.data(), 2 * l, n, p, b.keep_attn.data());
    }
    const auto [ff_in, ff_in16] = b.b.begin_either(n);
    b.norm_ff->forward_residual(b.x.data(), branch, drop ? b.keep_attn.data() : nullptr, p,
                                b.mid.data(), mask, rows, ff_in, training, ff_in16);
    b.ff.forward(b.b.x, rows, branch, b.b.x16);
    if (drop) {
      b.keep_ff.resize(n);
      k::dropout_mask(step_seed.data(), 2 * l + 1, n, p, b.keep_ff.data());
    }
    pending = &b;
  }
  f.resize(n);
  if (pending)
    norm_final->forward_residual(pending->mid.data(), branch,
                                 drop ? pending->keep_ff.data() : nullptr, p, h_last.data(), mask,
                                 rows, f.data(), training);
  else
    norm_final->forward(h_last.data(), mask, rows, f.data(), training);
}

template <class T>
void LanguageModel<T>::forward_backward(const Batch& batch, T grad_scale, uint64_t dropout_seed,
                                        double* loss_sums, const GradsReady& grads_ready) {
  load(batch, dropout_seed);
  // The rest reads only the device: one CUDA graph where the context allows, keyed by what the
  // host decides the launches from. The all-reduce hook calls the host: no graph with it.
  if (grads_ready) return train_pass(batch, grad_scale, loss_sums, grads_ready);
  double scale = double(grad_scale);
  int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof scale);
  step_graph.run({batch.rows(), batch.nseq, batch.seq_len, int64_t(intptr_t(loss_sums)),
                  scale_bits},
                 [&] { train_pass(batch, grad_scale, loss_sums, nullptr); });
}

template <class T>
void LanguageModel<T>::train_pass(const Batch& batch, T grad_scale, double* loss_sums,
                                  const GradsReady& grads_ready) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const k::Bf16Copy weights16(params.data.data(), params.data.size());  // bf16 GEMMs' copy
  forward(batch, true);
  const auto t1 = clock::now();  // the output layer and the loss run with the backward, chunked
  const int rows = batch.rows(), d = config.dim;
  const size_t n = size_t(rows) * d;
  const uint8_t* mask = this->mask.data();
  const bool drop = config.dropout > 0;
  const float p = float(config.dropout);
  // grad_a carries the residual-stream gradient. Without dropout a branch's output projection
  // reads it as it is: where the GEMMs read bf16 the norms that write it write its bf16
  // rounding too (g16), and the projections read that instead of rounding it again.
  grad_a.resize(n);
  grad_b.resize(n);
  grad_c.resize(n);
  uint16_t* g16 = nullptr;
  if (!drop && k::gemm_inputs_in_bf16<T>()) {
    grad_a16.resize(n);
    g16 = grad_a16.data();
  }
  T* df = grad_c.data();
  embed.output_loss(f.data(), targets.data(), mask, rows, T(config.label_smoothing), grad_scale,
                    loss_sums, logits, df, config.max_logits);
  norm_final->backward(h_last.data(), df, mask, rows, grad_a.data(), false, g16);
  if (grads_ready) grads_ready(final_norm_begin);
  for (int l = int(blocks.size()) - 1; l >= 0; --l) {
    Block& b = blocks[l];
    // h_out = mid + drop(ff(norm_ff(mid))): branch gradient into grad_b (reuse df as scratch;
    // without dropout the branch's output gradient is the stream's, read where it is)
    if (drop) k::dropout_copy<T>(grad_a.data(), b.keep_ff.data(), p, n, df);
    b.ff.backward(b.b.saved(), drop ? df : grad_a.data(), grad_b.data(), b.b.x16, g16);
    // the norm's input gradient added to the stream's in place: grad wrt mid
    b.norm_ff->backward(b.mid.data(), grad_b.data(), mask, rows, grad_a.data(), true, g16);
    // mid = x + drop(attn(norm_self(x)))
    if (drop) k::dropout_copy<T>(grad_a.data(), b.keep_attn.data(), p, n, df);
    b.attn.backward(b.a.saved(), drop ? df : grad_a.data(), grad_b.data(), b.a.x16, g16);
    // wrt x (the first block's goes to the embedding, which reads it in fp32)
    b.norm_self->backward(b.x.data(), grad_b.data(), mask, rows, grad_a.data(), true,
                          l > 0 ? g16 : nullptr);
    if (grads_ready) grads_ready(b.param_begin);
  }
  embed.backward(tokens.data(), grad_a.data(), rows);
  if (grads_ready) grads_ready(0);
  const auto t2 = clock::now();
  // The host's clock times the halves only where the kernels run as they are called (the
  // CPU): on a GPU it would time their launches, so they go untimed (NaN).
  const bool host_timed = current_device() == Device::CPU;
  forward_s = host_timed ? std::chrono::duration<double>(t1 - t0).count() : NAN;
  backward_s = host_timed ? std::chrono::duration<double>(t2 - t1).count() : NAN;
}

template <class T>
void LanguageModel<T>::evaluate(const Batch& batch, double* loss_sums) {
  const k::Bf16Copy weights16(params.data.data(), params.data.size());
  load(batch, 0);
  forward(batch, false);
  embed.output_loss(f.data(), targets.data(), mask.data(), batch.rows(),
                    T(config.label_smoothing), T(1), loss_sums, logits, nullptr, config.max_logits);
}

template <class T>
void LanguageModel<T>::forward_logits(const Batch& batch) {
  const k::Bf16Copy weights16(params.data.data(), params.data.size());
  load(batch, 0);
  forward(batch, false);
  logits.resize(size_t(batch.rows()) * embed.logits_ld());
  embed.output_forward(f.data(), batch.rows(), logits.data(), embed.logits_ld());
}

template <class T>
k::LossSums LanguageModel<T>::forward_backward(const Batch& batch, T grad_scale,
                                               uint64_t dropout_seed,
                                               const GradsReady& grads_ready) {
  return host_loss_sums(sums, [&](double* s) {
    forward_backward(batch, grad_scale, dropout_seed, s, grads_ready);
  });
}

template <class T>
k::LossSums LanguageModel<T>::evaluate(const Batch& batch) {
  return host_loss_sums(sums, [&](double* s) { evaluate(batch, s); });
}

template struct LanguageModel<float>;
template struct LanguageModel<double>;

}  // namespace pn
