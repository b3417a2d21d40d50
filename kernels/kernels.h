// pntrain kernels: math on raw buffers, no knowledge of layers or models.
//
// Every function here is the single dispatch point for one operation. The CPU implementations
// (kernels/cpu/) are the reference and the fallback; they are templates instantiated for float
// (training) and double (finite-difference gradient checks). CUDA twins (kernels/cuda/) are
// selected here by the buffers' device once they exist; see kernels/device.h.
// Layout: activations are row-major [rows, cols]; a "row" is one token.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pn::k {

// ---- BLAS ---------------------------------------------------------------------------------
// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, leading dimensions explicit.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc);

// ---- element-wise -------------------------------------------------------------------------
template <class T> void fill(T* x, size_t n, T value);
template <class T> void copy(const T* x, size_t n, T* y);
template <class T> void add_inplace(T* y, const T* x, size_t n);          // y += x
template <class T> void add(const T* a, const T* b, size_t n, T* y);      // y = a + b
template <class T> void scale_inplace(T* y, size_t n, T a);               // y *= a
// y[r, c] += b[c] for every row; db[c] += sum_r dy[r, c]
template <class T> void add_bias(T* y, const T* b, int rows, int cols);
template <class T> void bias_grad(const T* dy, int rows, int cols, T* db);
template <class T> void relu_forward(const T* x, size_t n, T* y);
template <class T> void relu_backward(const T* y, const T* dy, size_t n, T* dx);  // dx=dy*(y>0)
// Fused passes of a Linear followed by ReLU (one pass over the activation instead of two):
// forward y <- max(y + b, 0) per row; backward dy <- dy * (y > 0) in place and db += its
// column sums (y: the ReLU output).
template <class T> void bias_relu_forward(T* y, const T* b, int rows, int cols);
template <class T> void relu_backward_bias_grad(const T* y, T* dy, int rows, int cols, T* db);
// Inverted dropout: keep with probability 1-p, scale kept values by 1/(1-p). The keep mask is a
// pure function of (seed, index), so results do not depend on the number of threads.
void dropout_mask(uint64_t seed, size_t n, float p, uint8_t* keep);
template <class T> void dropout_apply(T* x, const uint8_t* keep, size_t n, float p);
// Residual add of a dropped-out branch in one pass: y = a + dropout(b) with the stored mask
// (keep null: y = a + b). Its backward for the branch: y = dropout(x) into another buffer
// (keep null: a copy).
template <class T>
void dropout_add(const T* a, const T* b, const uint8_t* keep, float p, size_t n, T* y);
template <class T> void dropout_copy(const T* x, const uint8_t* keep, float p, size_t n, T* y);

// ---- embedding ----------------------------------------------------------------------------
// Sinusoidal positions as in fairseq/tensor2tensor: [sin(pos*w_0..w_{d/2-1}), cos(...)].
template <class T> void sinusoidal_positions(int max_len, int d, T* table);
// y[i] = scale * E[tok[i]] + P[i % seq_len]
template <class T>
void embedding_forward(const int32_t* tok, int rows, int seq_len, const T* E, const T* P, int d,
                       T scale, T* y);
// dE[tok[i]] += scale * dy[i]
template <class T>
void embedding_backward(const int32_t* tok, int rows, const T* dy, int d, T scale, T* dE);

// ---- causal multi-head attention ----------------------------------------------------------
// qkv: [nseq*T, 3d] holding q | k | v, each split into H heads of d/H. probs: [nseq, H, T, T]
// (saved for backward). ctx: [nseq*T, d]. softmax(q k^T / sqrt(d/H)) with j <= i.
template <class T>
void attention_forward(const T* qkv, int nseq, int seq_len, int d, int heads, T* probs, T* ctx);
// Given dctx, writes dqkv (overwritten). scratch: nseq*heads*T*T elements.
template <class T>
void attention_backward(const T* qkv, const T* probs, const T* dctx, int nseq, int seq_len, int d,
                        int heads, T* dqkv, T* scratch);

// ---- general multi-head attention (translation: encoder, cross-attention, decoder) ----------
// Queries q [nseq*tq, ldq], keys k and values v [nseq*tk, ldkv] (row strides explicit, so q, k, v
// may be slices of one fused qkv buffer), each split into H heads of dh = d/H columns. Key j is
// allowed for query i when (!causal || j <= i) and key_mask[s*tk + j] != 0 (key_mask may be
// null). S = q k^T / sqrt(dh) over allowed keys, P = softmax(S) (a row without allowed keys is
// all zero), Pd = P * keep / (1-p) when keep is given (attention dropout; keep [nseq,H,tq,tk]),
// ctx = Pd v, ctx [nseq*tq, d]. probs keeps P (and probs_drop Pd when keep) for the backward.
template <class T>
void mha_forward(const T* q, int ldq, const T* k, const T* v, int ldkv, int nseq, int tq, int tk,
                 int d, int heads, bool causal, const uint8_t* key_mask, const uint8_t* keep,
                 float p, T* probs, T* probs_drop, T* ctx);
// dPd = dctx v^T; dP = dPd * keep/(1-p); dS = P * (dP - rowsum(P * dP));
// dq = dS k / sqrt(dh); dk = dS^T q / sqrt(dh); dv = Pd^T dctx. dq, dk, dv overwritten (same
// strides as q and k/v); scratch: nseq*heads*tq*tk elements.
template <class T>
void mha_backward(const T* q, int ldq, const T* k, const T* v, int ldkv, int nseq, int tq, int tk,
                  int d, int heads, bool causal, const uint8_t* key_mask, const uint8_t* keep,
                  float p, const T* probs, const T* probs_drop, const T* dctx, T* dq, T* dk, T* dv,
                  T* scratch);
// Incremental decoding: one query row per sequence n (q [N, ldq]) against the first `len` keys
// of its cache, k/v rows of sequence n at k + n*seq_stride + j*ldkv; key_mask [N, mask_stride]
// or null. ctx [N, d] = softmax(q k^T / sqrt(dh)) v per head, no dropout (inference).
template <class T>
void attention_step(const T* q, int ldq, const T* k, const T* v, int ldkv, size_t seq_stride,
                    int N, int len, int d, int heads, const uint8_t* key_mask, int mask_stride,
                    T* ctx);
// In place, per row: x <- x - max - log(sum_j exp(x_j - max)) (decoding's log-probabilities).
template <class T>
void log_softmax_rows(T* x, int rows, int cols);

// ---- row normalisation (LayerNorm) ----------------------------------------------------------
// y = gamma * (x - mu_i) * rstd_i + beta, rstd_i = 1/sqrt(var_i + eps); saves mu, rstd per row.
template <class T>
void layernorm_forward(const T* x, int rows, int d, const T* gamma, const T* beta, T eps, T* y,
                       T* mean, T* rstd);
// dx overwritten; dgamma, dbeta accumulated over rows whose mask is nonzero (mask may be null).
template <class T>
void layernorm_backward(const T* x, const T* dy, const T* mean, const T* rstd, const T* gamma,
                        const uint8_t* mask, int rows, int d, T* dx, T* dgamma, T* dbeta);

// ---- loss -----------------------------------------------------------------------------------
// Label-smoothed cross-entropy as fairseq: eps_i = eps/(V-1),
// loss_i = (1-eps-eps_i) * nll_i + eps_i * sum_j -log p_ij, over rows with mask != 0.
// Overwrites logits with grad_scale * dloss/dlogits (0 on masked rows). Returns the sums.
struct LossSums {
  double loss = 0, nll = 0, ntokens = 0;
};
template <class T>
LossSums softmax_xent(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      T label_smoothing, T grad_scale);
// Loss only (no gradient), logits left intact.
template <class T>
LossSums softmax_xent_eval(const T* logits, const int32_t* target, const uint8_t* mask, int rows,
                           int V, T label_smoothing);

// ---- optimizer ------------------------------------------------------------------------------
// Adam with decoupled weight decay (fairseq's "adam"): m,v moments, bias-corrected, step t >= 1.
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t t);

// ---- reductions -----------------------------------------------------------------------------
template <class T> double sum_squares(const T* x, size_t n);
template <class T> bool all_finite(const T* x, size_t n);

}  // namespace pn::k
