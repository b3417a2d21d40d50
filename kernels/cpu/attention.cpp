// Causal multi-head attention on the CPU: one (sequence, head) pair per OpenMP task, each
// made of small GEMMs (OpenBLAS runs single-threaded inside our parallel region).
//   S = Q K^T / sqrt(dh);  P = softmax over j <= i;  ctx = P V
// Backward: dP = dctx V^T; dS = P * (dP - rowsum(P * dP)); dQ = dS K / sqrt(dh);
//           dK = dS^T Q / sqrt(dh); dV = P^T dctx.
#include <cmath>

#include "kernels/kernels.h"

namespace pn::k {

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
void attention_backward(const T* qkv, const T* probs, const T* dctx, int nseq, int seq_len, int d,
                        int heads, T* dqkv, T* scratch) {
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

template void attention_forward<float>(const float*, int, int, int, int, float*, float*);
template void attention_forward<double>(const double*, int, int, int, int, double*, double*);
template void attention_backward<float>(const float*, const float*, const float*, int, int, int,
                                        int, float*, float*);
template void attention_backward<double>(const double*, const double*, const double*, int, int,
                                         int, int, double*, double*);

}  // namespace pn::k
