// Adam over the flat parameter buffer, with decoupled weight decay (as fairseq's adam), on the
// gradient g = (grad scale) clip (two rounded products; clip 1 changes nothing):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + lr * wd * p
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace pn::k::cpu {

void adam_update(float* p, const float* grad, float* m, float* v, size_t n, float scale,
                 float clip, float lr, float beta1, float beta2, float eps, float weight_decay,
                 int64_t t) {
  const float bc1 = 1.0f - float(std::pow(double(beta1), double(t)));
  const float bc2 = 1.0f - float(std::pow(double(beta2), double(t)));
  const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = lr * weight_decay;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i] * scale;
    g = g * clip;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    p[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps) + decay * p[i];
  }
}

}  // namespace pn::k::cpu
