// Causal multi-head attention on the CPU: one (sequence, head) pair per OpenMP task, each
// made of small GEMMs (OpenBLAS runs single-threaded inside our parallel region).
//   S = Q K^T / sqrt(dh);  P = softmax over j <= i;  ctx = P V
// Backward: dP = dctx V^T; dS = P * (dP - rowsum(P * dP)); dQ = dS K / sqrt(dh);
//           dK = dS^T Q / sqrt(dh); dV = P^T dctx.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/cpu_kernels.h"

namespace pn::k::cpu {

template <class T>
void attention_forward(const T* qkv, int nseq, int seq_len, int d, int heads, T* probs, T* ctx) {
  const int dh = d / heads, Tn = seq_len, ld = 3 * d;
  const T scale = T(1) / std::sqrt(T(dh));
#pragma omp parallel for schedule(dynamic) collapse(2)
  for (int s = 0; s < nseq; ++s)
    for (int h = 0; h < heads; ++h) {
      const T* q = qkv + size_t(s) * Tn * ld + size_t(h) * dh;
      const T* kk = q + d;
      const T* v = q + 2 * d;
      T* P = probs + (size_t(s) * heads + h) * Tn * Tn;
      gemm<T>(false, true, Tn, Tn, dh, scale, q, ld, kk, ld, T(0), P, Tn);
      for (int i = 0; i < Tn; ++i) {
        T* row = P + size_t(i) * Tn;
        T mx = row[0];
        for (int j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
        T sum = 0;
        for (int j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const T inv = T(1) / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv;
        for (int j = i + 1; j < Tn; ++j) row[j] = T(0);
      }
      gemm<T>(false, false, Tn, dh, Tn, T(1), P, Tn, v, ld, T(0),
              ctx + size_t(s) * Tn * d + size_t(h) * dh, d);
    }
}

template <class T>
void attention_backward(const T* qkv, const T* probs, const T* /*ctx*/, const T* dctx, int nseq,
                        int seq_len, int d, int heads, T* dqkv, T* scratch) {
  const int dh = d / heads, Tn = seq_len, ld = 3 * d;
  const T scale = T(1) / std::sqrt(T(dh));
#pragma omp parallel for schedule(dynamic) collapse(2)
  for (int s = 0; s < nseq; ++s)
    for (int h = 0; h < heads; ++h) {
      const size_t off = size_t(s) * Tn * ld + size_t(h) * dh;
      const T* q = qkv + off;
      const T* kk = q + d;
      const T* v = q + 2 * d;
      T* dq = dqkv + off;
      T* dk = dq + d;
      T* dv = dq + 2 * d;
      const T* P = probs + (size_t(s) * heads + h) * Tn * Tn;
      T* dS = scratch + (size_t(s) * heads + h) * Tn * Tn;
      const T* dc = dctx + size_t(s) * Tn * d + size_t(h) * dh;
      gemm<T>(false, true, Tn, Tn, dh, T(1), dc, d, v, ld, T(0), dS, Tn);  // dP
      for (int i = 0; i < Tn; ++i) {
        const T* p = P + size_t(i) * Tn;
        T* g = dS + size_t(i) * Tn;
        T dot = 0;
        for (int j = 0; j <= i; ++j) dot += p[j] * g[j];
        for (int j = 0; j <= i; ++j) g[j] = p[j] * (g[j] - dot);
        for (int j = i + 1; j < Tn; ++j) g[j] = T(0);
      }
      gemm<T>(false, false, Tn, dh, Tn, scale, dS, Tn, kk, ld, T(0), dq, ld);
      gemm<T>(true, false, Tn, dh, Tn, scale, dS, Tn, q, ld, T(0), dk, ld);
      gemm<T>(true, false, Tn, dh, Tn, T(1), P, Tn, dc, d, T(0), dv, ld);
    }
}

}  // namespace pn::k::cpu

// ---- general multi-head attention: causal and/or key-padding masks, attention dropout,
// separate query and key/value sources (cross-attention). The math is above mha_forward in
// kernels/ops.inc. Key padding: a padded key never receives probability, so a real query's output
// and every gradient reaching a real token are independent of how much padding follows.
namespace pn::k::cpu {

namespace {
inline bool key_allowed(bool causal, const uint8_t* key_mask, int i, int j) {
  return (!causal || j <= i) && (!key_mask || key_mask[j]);
}
}  // namespace

template <class T>
void mha_forward(const T* q, int ldq, const T* k, const T* v, int ldkv, int nseq, int tq, int tk,
                 int d, int heads, bool causal, const uint8_t* key_mask, const uint8_t* keep,
                 float p, T* probs, T* probs_drop, T* ctx) {
  const int dh = d / heads;
  const T scale = T(1) / std::sqrt(T(dh));
  const T inv_keep = T(1) / (T(1) - T(p));
#pragma omp parallel for schedule(dynamic) collapse(2)
  for (int s = 0; s < nseq; ++s)
    for (int h = 0; h < heads; ++h) {
      const T* qs = q + size_t(s) * tq * ldq + size_t(h) * dh;
      const T* ks = k + size_t(s) * tk * ldkv + size_t(h) * dh;
      const T* vs = v + size_t(s) * tk * ldkv + size_t(h) * dh;
      const uint8_t* km = key_mask ? key_mask + size_t(s) * tk : nullptr;
      const size_t block = (size_t(s) * heads + h) * tq * tk;
      T* P = probs + block;
      gemm<T>(false, true, tq, tk, dh, scale, qs, ldq, ks, ldkv, T(0), P, tk);
      for (int i = 0; i < tq; ++i) {
        T* row = P + size_t(i) * tk;
        T mx = -std::numeric_limits<T>::infinity();
        for (int j = 0; j < tk; ++j)
          if (key_allowed(causal, km, i, j) && row[j] > mx) mx = row[j];
        T sum = 0;
        for (int j = 0; j < tk; ++j) {
          row[j] = key_allowed(causal, km, i, j) ? std::exp(row[j] - mx) : T(0);
          sum += row[j];
        }
        const T inv = sum > 0 ? T(1) / sum : T(0);
        for (int j = 0; j < tk; ++j) row[j] *= inv;
      }
      const T* Pv = P;
      if (keep) {
        T* Pd = probs_drop + block;
        const uint8_t* kp = keep + block;
        for (size_t e = 0; e < size_t(tq) * tk; ++e) Pd[e] = kp[e] ? P[e] * inv_keep : T(0);
        Pv = Pd;
      }
      gemm<T>(false, false, tq, dh, tk, T(1), Pv, tk, vs, ldkv, T(0),
              ctx + size_t(s) * tq * d + size_t(h) * dh, d);
    }
}

template <class T>
void mha_backward(const T* q, int ldq, const T* k, const T* v, int ldkv, int nseq, int tq, int tk,
                  int d, int heads, bool causal, const uint8_t* key_mask, const uint8_t* keep,
                  float p, const T* probs, const T* probs_drop, const T* dctx, T* dq, T* dk, T* dv,
                  T* scratch) {
  const int dh = d / heads;
  const T scale = T(1) / std::sqrt(T(dh));
  const T inv_keep = T(1) / (T(1) - T(p));
#pragma omp parallel for schedule(dynamic) collapse(2)
  for (int s = 0; s < nseq; ++s)
    for (int h = 0; h < heads; ++h) {
      const size_t qoff = size_t(s) * tq * ldq + size_t(h) * dh;
      const size_t kvoff = size_t(s) * tk * ldkv + size_t(h) * dh;
      const size_t block = (size_t(s) * heads + h) * tq * tk;
      const T* P = probs + block;
      const T* Pv = keep ? probs_drop + block : P;
      T* dS = scratch + block;
      const T* dc = dctx + size_t(s) * tq * d + size_t(h) * dh;
      gemm<T>(false, true, tq, tk, dh, T(1), dc, d, v + kvoff, ldkv, T(0), dS, tk);  // dPd
      for (int i = 0; i < tq; ++i) {
        const T* pr = P + size_t(i) * tk;
        T* g = dS + size_t(i) * tk;
        if (keep) {
          const uint8_t* kp = keep + block + size_t(i) * tk;
          for (int j = 0; j < tk; ++j) g[j] = kp[j] ? g[j] * inv_keep : T(0);
        }
        T dot = 0;
        for (int j = 0; j < tk; ++j) dot += pr[j] * g[j];
        for (int j = 0; j < tk; ++j) g[j] = pr[j] * (g[j] - dot);  // 0 where P is 0 (masked)
      }
      gemm<T>(false, false, tq, dh, tk, scale, dS, tk, k + kvoff, ldkv, T(0), dq + qoff, ldq);
      gemm<T>(true, false, tk, dh, tq, scale, dS, tk, q + qoff, ldq, T(0), dk + kvoff, ldkv);
      gemm<T>(true, false, tk, dh, tq, T(1), Pv, tk, dc, d, T(0), dv + kvoff, ldkv);
    }
}

template <class T>
void attention_step(const T* q, int ldq, const T* k, const T* v, int ldkv, size_t seq_stride,
                    int N, int len, int d, int heads, const uint8_t* key_mask, int mask_stride,
                    T* ctx) {
  const int dh = d / heads;
  const T scale = T(1) / std::sqrt(T(dh));
#pragma omp parallel for schedule(static) collapse(2)
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h) {
      thread_local std::vector<T> w;  // scores of one (row, head), reused across calls
      w.assign(static_cast<size_t>(len), T(0));
      const T* qn = q + size_t(n) * ldq + size_t(h) * dh;
      const T* kn = k + size_t(n) * seq_stride + size_t(h) * dh;
      const T* vn = v + size_t(n) * seq_stride + size_t(h) * dh;
      const uint8_t* km = key_mask ? key_mask + size_t(n) * mask_stride : nullptr;
      T mx = -std::numeric_limits<T>::infinity();
      for (int j = 0; j < len; ++j) {
        if (km && !km[j]) continue;
        T sdot = 0;
        for (int c = 0; c < dh; ++c) sdot += qn[c] * kn[size_t(j) * ldkv + c];
        w[j] = sdot * scale;
        mx = w[j] > mx ? w[j] : mx;
      }
      T sum = 0;
      for (int j = 0; j < len; ++j) {
        w[j] = (km && !km[j]) ? T(0) : std::exp(w[j] - mx);
        sum += w[j];
      }
      const T inv = sum > 0 ? T(1) / sum : T(0);
      T* out = ctx + size_t(n) * d + size_t(h) * dh;
      for (int c = 0; c < dh; ++c) out[c] = 0;
      for (int j = 0; j < len; ++j) {
        const T pj = w[j] * inv;
        if (pj == T(0)) continue;
        for (int c = 0; c < dh; ++c) out[c] += pj * vn[size_t(j) * ldkv + c];
      }
    }
}

template <class T>
void log_softmax_rows(T* x, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r) {
    T* row = x + size_t(r) * cols;
    T mx = row[0];
    for (int j = 1; j < cols; ++j) mx = row[j] > mx ? row[j] : mx;
    double sum = 0;
    constexpr int kBlock = 256;  // vectorised exps in T, blocks summed in double
    for (int j0 = 0; j0 < cols; j0 += kBlock) {
      const int j1 = std::min(cols, j0 + kBlock);
      T part = 0;
#pragma omp simd reduction(+ : part)
      for (int j = j0; j < j1; ++j) part += fast_exp(T(row[j] - mx));
      sum += double(part);
    }
    const T lse = mx + T(std::log(sum));
#pragma omp simd
    for (int j = 0; j < cols; ++j) row[j] -= lse;
  }
}

// The explicit instantiations of the templated operations of kernels/ops.inc whose cpu file is
// this one.
#define PN_OPS_THIS_FILE_attention PN_OPS_PROBE
#include "kernels/instantiate.inc"

}  // namespace pn::k::cpu
