// Label-smoothed cross-entropy fused with the output softmax (fairseq's definition):
//   lp = log_softmax(z);  nll = -lp[t];  smooth = -sum_j lp[j];  eps_i = eps / (V - 1)
//   loss = (1 - eps - eps_i) * nll + eps_i * smooth
//   dloss/dz = softmax(z) - q,  q_j = eps_i + (1 - eps - eps_i) * [j == t]   (sum_j q_j = 1)
#include <cmath>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ordered_sum.h"

namespace pn::k::cpu {

namespace {
// Sums in T over blocks of 256 vectorise (a double reduction over float data does not); the
// blocks are summed in double.
constexpr int kBlock = 256;
constexpr size_t kRowChunk = 16;  // rows a loss sum takes in order (ordered_sums)

// sum_j exp(z_j - mx); with kStore, z_j is replaced by exp(z_j - mx) (the training path turns
// it into the gradient in place, so every element sees one exp). Kept out of line: inlined into
// the OpenMP region, GCC 12 no longer vectorises its loop.
template <bool kStore, class T>
__attribute__((noinline)) double exp_sum(T* z, int V, T mx) {
  double sum = 0;
  for (int j0 = 0; j0 < V; j0 += kBlock) {
    const int j1 = j0 + kBlock < V ? j0 + kBlock : V;
    T block = 0;
#pragma omp simd reduction(+ : block)
    for (int j = j0; j < j1; ++j) {
      const T e = fast_exp(T(z[j] - mx));
      if constexpr (kStore) z[j] = e;
      block += e;
    }
    sum += double(block);
  }
  return sum;
}

// One row's loss and nll from its logits; returns sum_j exp(z_j - max) (with kStore, z then
// holds exp(z_j - max)).
template <bool kStore, class T>
double row_loss(T* z, int V, int t, T eps, double* loss, double* nll) {
  T mx = z[0];
  double zsum = 0;
  for (int j0 = 0; j0 < V; j0 += kBlock) {
    const int j1 = j0 + kBlock < V ? j0 + kBlock : V;
    T block = 0;
#pragma omp simd reduction(max : mx) reduction(+ : block)
    for (int j = j0; j < j1; ++j) {
      mx = z[j] > mx ? z[j] : mx;
      block += z[j];
    }
    zsum += double(block);
  }
  const T zt = z[t];
  const double sum = exp_sum<kStore>(z, V, mx);
  const double lse = double(mx) + std::log(sum);
  const double eps_i = V > 1 ? double(eps) / (V - 1) : 0.0;
  const double n = lse - double(zt);
  const double smooth = V * lse - zsum;
  *nll = n;
  *loss = (1.0 - eps - eps_i) * n + eps_i * smooth;
  return sum;
}
}  // namespace

template <class T>
LossSums softmax_xent(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, T eps, T grad_scale) {
  const T eps_i = V > 1 ? eps / T(V - 1) : T(0);
  const auto s = ordered_sums<3>(size_t(rows), kRowChunk, [&](size_t i, auto& acc) {
    T* z = logits + i * ld;
    if (mask && !mask[i]) {
      for (int j = 0; j < ld; ++j) z[j] = T(0);
      return;
    }
    double l, n;
    const T inv_sum = T(1.0 / row_loss<true>(z, V, target[i], eps, &l, &n));  // z: exp(z - max)
    acc[0] += l, acc[1] += n, acc[2] += 1;
#pragma omp simd
    for (int j = 0; j < V; ++j) z[j] = grad_scale * (z[j] * inv_sum - eps_i);
    z[target[i]] -= grad_scale * (T(1) - eps - eps_i);
    for (int j = V; j < ld; ++j) z[j] = T(0);  // the padded words: no gradient into the GEMMs
  });
  return {s[0], s[1], s[2]};
}

template <class T>
LossSums softmax_xent_eval(const T* logits, const int32_t* target, const uint8_t* mask, int rows,
                           int V, int ld, T eps) {
  const auto s = ordered_sums<3>(size_t(rows), kRowChunk, [&](size_t i, auto& acc) {
    if (mask && !mask[i]) return;
    double l, n;
    // Not written: row_loss<false> only reads.
    row_loss<false>(const_cast<T*>(logits) + i * ld, V, target[i], eps, &l, &n);
    acc[0] += l, acc[1] += n, acc[2] += 1;
  });
  return {s[0], s[1], s[2]};
}

// The explicit instantiations of the templated operations of kernels/ops.inc whose cpu file is
// this one.
#define PN_OPS_THIS_FILE_loss PN_OPS_PROBE
#include "kernels/instantiate.inc"

}  // namespace pn::k::cpu
