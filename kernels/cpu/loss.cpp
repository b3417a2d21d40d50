// Label-smoothed cross-entropy fused with the output softmax (fairseq's definition):
//   lp = log_softmax(z);  nll = -lp[t];  smooth = -sum_j lp[j];  eps_i = eps / (V - 1)
//   loss = (1 - eps - eps_i) * nll + eps_i * smooth
//   dloss/dz = softmax(z) - q,  q_j = eps_i + (1 - eps - eps_i) * [j == t]   (sum_j q_j = 1)
#include <cmath>

#include "kernels/kernels.h"

namespace pn::k {

namespace {
template <class T>
void row_loss(const T* z, int V, int t, T eps, double* loss, double* nll, T* lse_out) {
  T mx = z[0];
  for (int j = 1; j < V; ++j) mx = z[j] > mx ? z[j] : mx;
  double sum = 0, zsum = 0;
  for (int j = 0; j < V; ++j) {
    sum += std::exp(double(z[j] - mx));
    zsum += double(z[j]);
  }
  const double lse = double(mx) + std::log(sum);
  const double eps_i = V > 1 ? double(eps) / (V - 1) : 0.0;
  const double n = lse - double(z[t]);
  const double smooth = V * lse - zsum;
  *nll = n;
  *loss = (1.0 - eps - eps_i) * n + eps_i * smooth;
  *lse_out = T(lse);
}
}  // namespace

template <class T>
LossSums softmax_xent(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      T eps, T grad_scale) {
  double loss = 0, nll = 0, ntok = 0;
  const T eps_i = V > 1 ? eps / T(V - 1) : T(0);
#pragma omp parallel for reduction(+ : loss, nll, ntok) schedule(static)
  for (int i = 0; i < rows; ++i) {
    T* z = logits + size_t(i) * V;
    if (mask && !mask[i]) {
      for (int j = 0; j < V; ++j) z[j] = T(0);
      continue;
    }
    double l, n;
    T lse;
    row_loss(z, V, target[i], eps, &l, &n, &lse);
    loss += l;
    nll += n;
    ntok += 1;
#pragma omp simd
    for (int j = 0; j < V; ++j) z[j] = grad_scale * (std::exp(z[j] - lse) - eps_i);
    z[target[i]] -= grad_scale * (T(1) - eps - eps_i);
  }
  return {loss, nll, ntok};
}

template <class T>
LossSums softmax_xent_eval(const T* logits, const int32_t* target, const uint8_t* mask, int rows,
                           int V, T eps) {
  double loss = 0, nll = 0, ntok = 0;
#pragma omp parallel for reduction(+ : loss, nll, ntok) schedule(static)
  for (int i = 0; i < rows; ++i) {
    if (mask && !mask[i]) continue;
    double l, n;
    T lse;
    row_loss(logits + size_t(i) * V, V, target[i], eps, &l, &n, &lse);
    loss += l;
    nll += n;
    ntok += 1;
  }
  return {loss, nll, ntok};
}

template LossSums softmax_xent<float>(float*, const int32_t*, const uint8_t*, int, int, float, float);
template LossSums softmax_xent<double>(double*, const int32_t*, const uint8_t*, int, int, double,
                                       double);
template LossSums softmax_xent_eval<float>(const float*, const int32_t*, const uint8_t*, int, int,
                                           float);
template LossSums softmax_xent_eval<double>(const double*, const int32_t*, const uint8_t*, int,
                                            int, double);

}  // namespace pn::k
