// Element-wise kernels, embedding, reductions and the dropout mask.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"

namespace pn::k::cpu {

template <class T> void fill(T* x, size_t n, T value) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) x[i] = value;
}
template <class T> void copy(const T* x, size_t n, T* y) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = x[i];
}
template <class T> void add_inplace(T* y, const T* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}
template <class T> void add(const T* a, const T* b, size_t n, T* y) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
template <class T> void scale_inplace(T* y, size_t n, T a) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] *= a;
}
template <class T> void add_bias(T* y, const T* b, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r) {
    T* yr = y + size_t(r) * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) yr[c] += b[c];
  }
}
namespace {
template <class V> V widened(V v) { return v; }
float widened(uint16_t bits) { return bf16_value(bits); }
// db[c] += sum_r dy[r, c], columns split across threads so that no two write the same db entry.
template <class D, class T> void column_sums(const D* dy, int rows, int cols, T* db) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int c0 = 0; c0 < cols; c0 += 64) {
    const int c1 = std::min(cols, c0 + 64);
    for (int r = 0; r < rows; ++r) {
      const D* dr = dy + size_t(r) * cols;
      for (int c = c0; c < c1; ++c) db[c] += widened(dr[c]);
    }
  }
}
}  // namespace
template <class T> void bias_grad(const T* dy, int rows, int cols, T* db) {
  column_sums(dy, rows, cols, db);
}
void bias_grad_bf16(const uint16_t* dy16, int rows, int cols, float* db) {
  column_sums(dy16, rows, cols, db);
}
template <class T> void bias_relu_forward(T* y, const T* b, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r) {
    T* yr = y + size_t(r) * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) {
      const T v = yr[c] + b[c];
      yr[c] = v > T(0) ? v : T(0);
    }
  }
}
namespace {
// The ReLU's output y > 0: from y itself, or from its bf16 rounding's bits (0x0001, the least
// denormal, to 0x7f80, +Inf).
template <class V> bool relu_positive(V v) { return v > V(0); }
bool relu_positive(uint16_t bits) { return bits >= 0x0001u && bits <= 0x7f80u; }
// dy <- dy (y > 0) in place and db += its column sums (db null: no sums). Column blocks per
// thread, as bias_grad: no two threads write the same db entry.
template <class T> void relu_mask_bias_grad(const T* y, T* dy, int rows, int cols, T* db) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int c0 = 0; c0 < cols; c0 += 64) {
    const int c1 = std::min(cols, c0 + 64);
    for (int r = 0; r < rows; ++r) {
      const T* yr = y + size_t(r) * cols;
      T* dr = dy + size_t(r) * cols;
#pragma omp simd
      for (int c = c0; c < c1; ++c) {
        dr[c] = relu_positive(yr[c]) ? dr[c] : T(0);
        if (db) db[c] += dr[c];
      }
    }
  }
}
}  // namespace
template <class T> void relu_backward_bias_grad(const T* y, T* dy, int rows, int cols, T* db) {
  relu_mask_bias_grad(y, dy, rows, cols, db);
}
void relu_backward_round_bf16(uint16_t* y16, const float* dy, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y16[i] = bf16_bits(relu_positive(y16[i]) ? dy[i] : 0.f);
}
void relu_backward_bf16(uint16_t* y16, const uint16_t* g16, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y16[i] = relu_positive(y16[i]) ? g16[i] : uint16_t(0);
}
void round_bf16(const float* x, size_t n, uint16_t* y) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = bf16_bits(x[i]);
}
template <class T> void relu_forward(const T* x, size_t n, T* y) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}
template <class T> void relu_backward(const T* y, const T* dy, size_t n, T* dx) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

// splitmix64: a counter-based generator, so mask bit i depends only on (seed, i).
static inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void dropout_mask(const uint64_t* step_seed, uint64_t site, size_t n, float p, uint8_t* keep) {
  const uint64_t threshold = uint64_t(double(p) * 18446744073709551616.0);
  const uint64_t base = splitmix64(*step_seed + site);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) keep[i] = splitmix64(base ^ (i * 0xD6E8FEB86659FD93ull)) >= threshold;
}
void gather_rows(const void* src, size_t src_stride, const int32_t* from, int rows, size_t bytes,
                 void* dst, size_t dst_stride) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int r = 0; r < rows; ++r)
    std::memcpy(d + size_t(r) * dst_stride, s + size_t(from ? from[r] : r) * src_stride, bytes);
}
template <class T> void dropout_apply(T* x, const uint8_t* keep, size_t n, float p) {
  const T s = T(1) / (T(1) - T(p));
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) x[i] = keep[i] ? x[i] * s : T(0);
}

template <class T>
void dropout_add(const T* a, const T* b, const uint8_t* keep, float p, size_t n, T* y) {
  if (!keep) return add<T>(a, b, n, y);
  const T s = T(1) / (T(1) - T(p));
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + (keep[i] ? b[i] * s : T(0));
}
template <class T> void dropout_copy(const T* x, const uint8_t* keep, float p, size_t n, T* y) {
  if (!keep) return copy<T>(x, n, y);
  const T s = T(1) / (T(1) - T(p));
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = keep[i] ? x[i] * s : T(0);
}

template <class T> void sinusoidal_positions(int max_len, int d, T* table) {
  const int half = d / 2;
  const double step = half > 1 ? std::log(10000.0) / (half - 1) : 0.0;
  for (int p = 0; p < max_len; ++p)
    for (int i = 0; i < half; ++i) {
      const double w = std::exp(-step * i);
      table[size_t(p) * d + i] = T(std::sin(p * w));
      table[size_t(p) * d + half + i] = T(std::cos(p * w));
    }
  if (d % 2)
    for (int p = 0; p < max_len; ++p) table[size_t(p) * d + d - 1] = T(0);
}

template <class T>
void embedding_forward(const int32_t* tok, int rows, int seq_len, const T* E, const T* P, int d,
                       T scale, T* y) {
#pragma omp parallel for schedule(static) if (size_t(rows) * d > 65536)
  for (int i = 0; i < rows; ++i) {
    const T* e = E + size_t(tok[i]) * d;
    const T* p = P + size_t(i % seq_len) * d;
    T* yi = y + size_t(i) * d;
#pragma omp simd
    for (int c = 0; c < d; ++c) yi[c] = scale * e[c] + p[c];
  }
}

template <class T>
void embedding_backward(const int32_t* tok, int rows, const T* dy, int d, T scale, T* dE) {
  // Serial over rows (tokens repeat), vectorised over features: cheap next to the GEMMs.
  for (int i = 0; i < rows; ++i) {
    T* e = dE + size_t(tok[i]) * d;
    const T* g = dy + size_t(i) * d;
#pragma omp simd
    for (int c = 0; c < d; ++c) e[c] += scale * g[c];
  }
}

template <class T> double sum_squares(const T* x, size_t n) {
  double sums[2] = {0, 0};  // sum x^2, non-finite count
  grad_stats_acc<T>(x, n, sums);
  return sums[0];
}
template <class T> bool all_finite(const T* x, size_t n) {
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) bad |= !std::isfinite(x[i]);
  return !bad;
}

// The explicit instantiations of the templated operations of kernels/ops.inc whose cpu file is
// this one.
#define PN_OPS_THIS_FILE_elementwise PN_OPS_PROBE
#include "kernels/instantiate.inc"

}  // namespace pn::k::cpu
