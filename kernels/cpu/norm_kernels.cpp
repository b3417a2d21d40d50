// CPU kernels of the normalization family; the math is in kernels/ops.inc.
//
// Determinism: every reduction is split into pieces fixed by the data shape alone (blocks of
// kRowChunk rows, per-row sums over 8 explicit lanes) and the pieces are combined in a fixed
// order, so results are bitwise independent of the number of OpenMP threads (and of the SIMD
// width: the lanes are explicit).
//
// Speed: one streaming pass per statistic, written so that GCC vectorises it at plain SSE2 as
// well as with AVX2:
//  * row sums (layer, rms, group) keep 8 independent double lanes (no serial dependency chain,
//    no reduction reordering needed);
//  * column sums (batch-type) walk the rows of a chunk and add whole rows into per-chunk double
//    partials that stay in L1, instead of reading narrow column blocks with a large stride;
//  * parameter gradients (dgamma, dbeta) are accumulated in the row loop of the backward into
//    per-chunk partials, then summed over chunks in chunk order (in double);
//  * per-element affine maps are applied in T with per-column coefficients precomputed in
//    double; a shift is split into its T rounding plus a double correction folded into the
//    offset, so large means do not lose precision.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace pn::k::cpu {
namespace {
constexpr int kRowChunk = 256;  // rows per partial-sum chunk (fixed: thread-count independent)
inline bool big(int rows, int d) { return size_t(rows) * size_t(d) > 32768; }
// A forward asked for its output in bf16 (y16, the GPU's form; here for the tests): into a
// temporary, then rounded.
template <class T, class Forward>
void rounded_output(size_t n, uint16_t* y16, Forward&& forward) {
  std::vector<T> y(n);
  forward(y.data());
  for (size_t i = 0; i < n; ++i) y16[i] = bf16_bits(float(y[i]));
}
// A backward asked for its dx in bf16 too (dx16, the GPU's form; here for the tests): rounded
// from dx as the kernel returns.
template <class T>
struct RoundedOnReturn {
  const T* dx;
  size_t n;
  uint16_t* dx16;
  ~RoundedOnReturn() {
    if (dx16)
      for (size_t i = 0; i < n; ++i) dx16[i] = bf16_bits(float(dx[i]));
  }
};
inline bool live(const uint8_t* mask, int r) { return !mask || mask[r]; }
inline int nchunks(int rows) { return (rows + kRowChunk - 1) / kRowChunk; }

// Per-thread scratch that only grows: no heap allocation once warm.
template <class U>
U* scratch(int slot, size_t n) {
  static thread_local std::vector<U> buf[4];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

// Row sums in double over 8 fixed lanes, written with GCC/Clang vector extensions of the
// native SSE2 width (4 floats, 2 doubles): four independent dependency chains per sum, and the
// same lane arithmetic (hence the same results) whatever ISA the compiler targets. The double
// instantiations (reference precision, not speed) use plain loops.
typedef float f4 __attribute__((vector_size(16)));
typedef double d2 __attribute__((vector_size(16)));
inline f4 ld4(const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// float -> double widening: GCC lowers __builtin_convertvector of 2 floats to scalar code, so on
// x86 use the SSE2 instruction directly (also valid, VEX-encoded, in AVX2 builds).
#if defined(__SSE2__)
inline d2 lo_d(f4 v) { return _mm_cvtps_pd(v); }
inline d2 hi_d(f4 v) { return _mm_cvtps_pd(_mm_movehl_ps(v, v)); }
#else
inline d2 lo_d(f4 v) { return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1), d2); }
inline d2 hi_d(f4 v) { return __builtin_convertvector(__builtin_shufflevector(v, v, 2, 3), d2); }
#endif
struct Acc8 {  // lanes 0-1, 2-3, 4-5, 6-7 of a block of 8
  d2 a = {0, 0}, b = {0, 0}, c = {0, 0}, d = {0, 0};
  void add(f4 v0, f4 v1) {
    a += lo_d(v0);
    b += hi_d(v0);
    c += lo_d(v1);
    d += hi_d(v1);
  }
  double sum() const {
    const d2 s = (a + b) + (c + d);
    return s[0] + s[1];
  }
};

// mu = mean x, then var = mean (x - mu)^2: two passes over the (L1-resident) row, in double.
inline void row_moments(const float* x, int n, double& mu, double& var) {
  Acc8 a, b;  // 8 dependency chains: 16 elements per step
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a.add(ld4(x + i), ld4(x + i + 4));
    b.add(ld4(x + i + 8), ld4(x + i + 12));
  }
  double s1 = a.sum() + b.sum();
  for (; i < n; ++i) s1 += double(x[i]);
  mu = s1 / n;
  // Deviations from the float mean are formed and squared in float (exact up to one rounding
  // of a positive term each), summed in double; the offset mu - mf is removed exactly after.
  const float mf = float(mu);
  Acc8 c, e;
  i = 0;
  for (; i + 16 <= n; i += 16) {
    const f4 u0 = ld4(x + i) - mf, u1 = ld4(x + i + 4) - mf;
    const f4 u2 = ld4(x + i + 8) - mf, u3 = ld4(x + i + 12) - mf;
    c.add(u0 * u0, u1 * u1);
    e.add(u2 * u2, u3 * u3);
  }
  double s2 = c.sum() + e.sum();
  for (; i < n; ++i) s2 += (double(x[i]) - mf) * (double(x[i]) - mf);
  const double off = mu - double(mf);
  var = std::max(0.0, s2 / n - off * off);
}
inline void row_moments(const double* x, int n, double& mu, double& var) {
  double s1 = 0;
  for (int i = 0; i < n; ++i) s1 += x[i];
  mu = s1 / n;
  double s2 = 0;
  for (int i = 0; i < n; ++i) s2 += (x[i] - mu) * (x[i] - mu);
  var = s2 / n;
}

inline double row_sumsq(const float* x, int n) {
  Acc8 a, b;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const f4 u0 = ld4(x + i), u1 = ld4(x + i + 4), u2 = ld4(x + i + 8), u3 = ld4(x + i + 12);
    a.add(u0 * u0, u1 * u1);
    b.add(u2 * u2, u3 * u3);
  }
  double s = a.sum() + b.sum();
  for (; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}
inline double row_sumsq(const double* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

// sum double(g * x * ri), g = gamma * dy (rms backward).
inline double row_dot_rms(const float* g, const float* dy, const float* x, float ri, int n) {
  Acc8 acc;
  int i = 0;
  for (; i + 8 <= n; i += 8)
    acc.add(ld4(g + i) * ld4(dy + i) * (ld4(x + i) * ri),
            ld4(g + i + 4) * ld4(dy + i + 4) * (ld4(x + i + 4) * ri));
  double s = acc.sum();
  for (; i < n; ++i) s += double(g[i] * dy[i] * (x[i] * ri));
  return s;
}
inline double row_dot_rms(const double* g, const double* dy, const double* x, double ri, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += g[i] * dy[i] * (x[i] * ri);
  return s;
}

// sg = sum double(g), sgx = sum double(g * xh), g = gamma * dy, xh = (x - mu) * rs.
inline void row_dot_norm(const float* gm, const float* dy, const float* x, float mu, float rs,
                         int n, double& sg, double& sgx) {
  Acc8 a1, a2;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const f4 g0 = ld4(gm + i) * ld4(dy + i), g1 = ld4(gm + i + 4) * ld4(dy + i + 4);
    a1.add(g0, g1);
    a2.add(g0 * ((ld4(x + i) - mu) * rs), g1 * ((ld4(x + i + 4) - mu) * rs));
  }
  sg = a1.sum();
  sgx = a2.sum();
  for (; i < n; ++i) {
    const float g = gm[i] * dy[i];
    sg += double(g);
    sgx += double(g * ((x[i] - mu) * rs));
  }
}
inline void row_dot_norm(const double* gm, const double* dy, const double* x, double mu,
                         double rs, int n, double& sg, double& sgx) {
  sg = sgx = 0;
  for (int i = 0; i < n; ++i) {
    const double g = gm[i] * dy[i];
    sg += g;
    sgx += g * ((x[i] - mu) * rs);
  }
}

// dst[c] (+)= sum over chunks (in chunk order) of part[ch * stride + c], in double: added to dst,
// or with kSet written over it.
template <bool kSet = false, class T, class P>
void combine_chunks(const P* part, int nch, size_t stride, int d, T* dst) {
  if (!dst) return;
#pragma omp parallel for schedule(static) if (size_t(nch) * d > 32768)
  for (int c0 = 0; c0 < d; c0 += 256) {
    const int c1 = std::min(d, c0 + 256);
    double acc[256];
    for (int c = c0; c < c1; ++c) acc[c - c0] = 0;
    for (int ch = 0; ch < nch; ++ch) {
      const P* p = part + size_t(ch) * stride;
      for (int c = c0; c < c1; ++c) acc[c - c0] += double(p[c]);
    }
    for (int c = c0; c < c1; ++c) dst[c] = kSet ? T(acc[c - c0]) : T(double(dst[c]) + acc[c - c0]);
  }
}

// Two per-column sums over the live rows into out1 and out2 (either may be null; zeros without
// rows): each chunk of kRowChunk rows adds its live rows into double partials, four at a time
// (four(o, s1, s2), o their offsets: a quarter of the partials' loads and stores) and the
// chunk's last ones one by one (one(o, s1, s2)); the chunks are added in chunk order.
template <class Four, class One>
void live_column_sums(const uint8_t* mask, int rows, int d, double* out1, double* out2,
                      Four&& four, One&& one) {
  const int nch = nchunks(rows);
  double* part = scratch<double>(1, size_t(nch) * 2 * d);  // per chunk: [s1 | s2]
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int ch = 0; ch < nch; ++ch) {
    double* s1 = part + size_t(ch) * 2 * d;
    double* s2 = s1 + d;
    std::fill(s1, s1 + 2 * size_t(d), 0.0);
    size_t o[4];
    int nr = 0;
    const int r1 = std::min(rows, (ch + 1) * kRowChunk);
    for (int r = ch * kRowChunk; r <= r1; ++r) {
      if (r < r1) {
        if (!live(mask, r)) continue;
        o[nr++] = size_t(r) * d;
        if (nr < 4) continue;
      }
      if (nr == 4)
        four(o, s1, s2);
      else
        for (int k = 0; k < nr; ++k) one(o[k], s1, s2);
      nr = 0;
    }
  }
  if (rows == 0) {
    if (out1) std::fill(out1, out1 + d, 0.0);
    if (out2) std::fill(out2, out2 + d, 0.0);
    return;
  }
  combine_chunks<true>(part, nch, 2 * size_t(d), d, out1);
  combine_chunks<true>(part + d, nch, 2 * size_t(d), d, out2);
}
}  // namespace

template <class T>
void column_stats(const T* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq) {
  double n = 0;
  for (int r = 0; r < rows; ++r) n += live(mask, r) ? 1 : 0;
  *count = n;
  double* sh = scratch<double>(0, d);
  for (int c = 0; c < d; ++c) sh[c] = shift ? shift[c] : 0.0;
  live_column_sums(
      mask, rows, d, sum, sumsq,
      [&](const size_t* o, double* s1, double* s2) {
        const T *x0 = x + o[0], *x1 = x + o[1], *x2 = x + o[2], *x3 = x + o[3];
        for (int c = 0; c < d; ++c) {
          const double v0 = double(x0[c]) - sh[c], v1 = double(x1[c]) - sh[c];
          const double v2 = double(x2[c]) - sh[c], v3 = double(x3[c]) - sh[c];
          s1[c] += (v0 + v1) + (v2 + v3);
          s2[c] += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
        }
      },
      [&](size_t o, double* s1, double* s2) {
        for (int c = 0; c < d; ++c) {
          const double v = double(x[o + c]) - sh[c];
          s1[c] += v;
          s2[c] += v * v;
        }
      });
}

template <class T>
void column_dot(const T* a, const T* b, const uint8_t* mask, int rows, int d, const double* shift,
                double* sum_a, double* sum_ab) {
  double* sh = scratch<double>(0, d);
  for (int c = 0; c < d; ++c) sh[c] = shift ? shift[c] : 0.0;
  live_column_sums(
      mask, rows, d, sum_a, sum_ab,
      [&](const size_t* o, double* s1, double* s2) {
        const T *a0 = a + o[0], *a1 = a + o[1], *a2 = a + o[2], *a3 = a + o[3];
        const T *b0 = b + o[0], *b1 = b + o[1], *b2 = b + o[2], *b3 = b + o[3];
        for (int c = 0; c < d; ++c) {
          const double u0 = double(a0[c]), u1 = double(a1[c]), u2 = double(a2[c]),
                       u3 = double(a3[c]);
          s1[c] += (u0 + u1) + (u2 + u3);
          s2[c] += (u0 * (double(b0[c]) - sh[c]) + u1 * (double(b1[c]) - sh[c])) +
                   (u2 * (double(b2[c]) - sh[c]) + u3 * (double(b3[c]) - sh[c]));
        }
      },
      [&](size_t o, double* s1, double* s2) {
        for (int c = 0; c < d; ++c) {
          const double av = double(a[o + c]);
          s1[c] += av;
          s2[c] += av * (double(b[o + c]) - sh[c]);
        }
      });
}

template <class T>
void column_affine(const T* x, int rows, int d, const double* shift, const double* scale,
                   const T* gamma, const T* beta, T* y, uint16_t* y16, const double* when) {
  if (when && !(*when > 0)) return;
  if (y16)
    return rounded_output<T>(size_t(rows) * d, y16, [&](T* t) {
      column_affine<T>(x, rows, d, shift, scale, gamma, beta, t, nullptr, nullptr);
    });
  // y = A (x - shf) + B with shf = T(shift), A = gamma * scale,
  // B = beta - A (shift - shf)   (the rounding of the shift, corrected in double).
  T* co = scratch<T>(0, 3 * size_t(d));
  T *A = co, *S = co + d, *B = co + 2 * size_t(d);
  for (int c = 0; c < d; ++c) {
    const double a = double(gamma[c]) * scale[c];
    const double s = shift ? shift[c] : 0.0;
    const T sf = T(s);
    A[c] = T(a);
    S[c] = sf;
    B[c] = T((beta ? double(beta[c]) : 0.0) - a * (s - double(sf)));
  }
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + size_t(r) * d;
    T* yr = y + size_t(r) * d;
#pragma omp simd
    for (int c = 0; c < d; ++c) yr[c] = A[c] * (xr[c] - S[c]) + B[c];
  }
}

template <class T>
void column_norm_backward(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const T* gamma,
                          const double* a, const double* b, T* dx, bool add_to_dx,
                          uint16_t* dx16) {
  const RoundedOnReturn<T> rounded{dx, size_t(rows) * size_t(d), dx16};
  // With u = x - shf (shf = T(shift), e = shift - shf): xh = (u - e) * scale and
  // dx = scale (gamma dy - a - b xh) = P dy + Q u + R,
  // P = scale gamma, Q = -scale^2 b, R = scale (b scale e - a).
  T* co = scratch<T>(0, 4 * size_t(d));
  T *P = co, *Q = co + d, *R = co + 2 * size_t(d), *S = co + 3 * size_t(d);
  for (int c = 0; c < d; ++c) {
    const double s = shift ? shift[c] : 0.0;
    const T sf = T(s);
    const double e = s - double(sf);
    const double sc = scale[c];
    P[c] = T(sc * double(gamma[c]));
    Q[c] = T(-sc * sc * b[c]);
    R[c] = T(sc * (b[c] * sc * e - (a ? a[c] : 0.0)));
    S[c] = sf;
  }
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    T* dxr = dx + size_t(r) * d;
    if (!live(mask, r)) {
      if (!add_to_dx) std::fill(dxr, dxr + d, T(0));
      continue;
    }
    const T* xr = x + size_t(r) * d;
    const T* dyr = dy + size_t(r) * d;
#pragma omp simd
    for (int c = 0; c < d; ++c) {
      const T v = P[c] * dyr[c] + Q[c] * (xr[c] - S[c]) + R[c];
      dxr[c] = add_to_dx ? dxr[c] + v : v;
    }
  }
}

template <class T>
void rowgroup_rms_forward(const T* x, int rows, int d, int G, T eps, const T* gamma, T* y,
                          uint16_t* y16, T* rinv) {
  if (y16)
    return rounded_output<T>(size_t(rows) * d, y16, [&](T* t) {
      rowgroup_rms_forward<T>(x, rows, d, G, eps, gamma, t, nullptr, rinv);
    });
  const int m = d / G;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < G; ++j) {
      const T* xr = x + size_t(r) * d + size_t(j) * m;
      T* yr = y + size_t(r) * d + size_t(j) * m;
      const double s = row_sumsq(xr, m);
      const double ri = 1.0 / std::sqrt(s / m + double(eps));
      const T rf = T(ri);
      if (gamma) {
        const T* gj = gamma + size_t(j) * m;
#pragma omp simd
        for (int c = 0; c < m; ++c) yr[c] = xr[c] * rf * gj[c];
      } else {
#pragma omp simd
        for (int c = 0; c < m; ++c) yr[c] = xr[c] * rf;
      }
      rinv[size_t(r) * G + j] = rf;
    }
  }
}

// The row-group backward passes' walk: chunks of kRowChunk rows (one thread each), each with its
// part_width partial column sums in part zeroed first (none where part is null); a row outside
// the mask gets dx 0 (or keeps it, when adding), and group(r, j, pg) runs for each group j of
// each live row r, pg being its chunk's partials (of type P: T, or double).
template <class T, class P, class Group>
void rowgroup_backward_chunks(const uint8_t* mask, int rows, int d, int G, T* dx, bool add_to_dx,
                              P* part, size_t part_width, const Group& group) {
  const int nch = nchunks(rows);
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int ch = 0; ch < nch; ++ch) {
    P* pg = part ? part + size_t(ch) * part_width : nullptr;
    if (pg) std::fill(pg, pg + part_width, P(0));
    const int r1 = std::min(rows, (ch + 1) * kRowChunk);
    for (int r = ch * kRowChunk; r < r1; ++r) {
      if (!live(mask, r)) {
        if (!add_to_dx) std::fill(dx + size_t(r) * d, dx + size_t(r + 1) * d, T(0));
        continue;
      }
      for (int j = 0; j < G; ++j) group(r, j, pg);
    }
  }
}

template <class T>
void rowgroup_rms_backward(const T* x, const T* dy, const T* rinv, const T* gamma,
                           const uint8_t* mask, int rows, int d, int G, T* dx, T* dgamma,
                           bool add_to_dx, uint16_t* dx16) {
  const RoundedOnReturn<T> rounded{dx, size_t(rows) * size_t(d), dx16};
  const int m = d / G;
  const int nch = nchunks(rows);
  T* ones = nullptr;
  if (!gamma) {
    ones = scratch<T>(0, d);
    std::fill(ones, ones + d, T(1));
  }
  const T* gm = gamma ? gamma : ones;
  T* part = dgamma ? scratch<T>(1, size_t(nch) * d) : nullptr;  // per chunk: sum dy * xh
  rowgroup_backward_chunks<T>(mask, rows, d, G, dx, add_to_dx, part, size_t(d),
                              [&](int r, int j, T* pg) {
    const size_t col = size_t(j) * m, off = size_t(r) * d + col;
    const T* xr = x + off;
    const T* dyr = dy + off;
    const T* gj = gm + col;
    T* dxg = dx + off;
    const T ri = rinv[size_t(r) * G + j];
    const double sgx = row_dot_rms(gj, dyr, xr, ri, m);
    const T mgx = T(sgx / m);
    if (pg) {
      T* pgj = pg + col;
#pragma omp simd
      for (int c = 0; c < m; ++c) {
        const T xh = xr[c] * ri, v = ri * (gj[c] * dyr[c] - xh * mgx);
        dxg[c] = add_to_dx ? dxg[c] + v : v;
        pgj[c] += dyr[c] * xh;
      }
    } else {
#pragma omp simd
      for (int c = 0; c < m; ++c) {
        const T xh = xr[c] * ri, v = ri * (gj[c] * dyr[c] - xh * mgx);
        dxg[c] = add_to_dx ? dxg[c] + v : v;
      }
    }
  });
  if (dgamma && rows > 0) combine_chunks(part, nch, size_t(d), d, dgamma);
}

template <class T>
void rowgroup_norm_forward(const T* x, int rows, int d, int G, T eps, const T* gamma,
                           const T* beta, T* y, uint16_t* y16, T* mean, T* rstd) {
  if (y16)
    return rounded_output<T>(size_t(rows) * d, y16, [&](T* t) {
      rowgroup_norm_forward<T>(x, rows, d, G, eps, gamma, beta, t, nullptr, mean, rstd);
    });
  const int m = d / G;
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < G; ++j) {
      const size_t off = size_t(r) * d + size_t(j) * m;
      const T* xr = x + off;
      T* yr = y + off;
      double mu, var;
      row_moments(xr, m, mu, var);
      const T rs = T(1.0 / std::sqrt(var + double(eps)));
      const T mf = T(mu);
      const T* gj = gamma + size_t(j) * m;
      const T* bj = beta + size_t(j) * m;
#pragma omp simd
      for (int c = 0; c < m; ++c) yr[c] = gj[c] * ((xr[c] - mf) * rs) + bj[c];
      mean[size_t(r) * G + j] = mf;
      rstd[size_t(r) * G + j] = rs;
    }
  }
}

template <class T>
void rowgroup_norm_backward(const T* x, const T* dy, const T* mean, const T* rstd,
                            const T* gamma, const uint8_t* mask, int rows, int d, int G, T* dx,
                            T* dgamma, T* dbeta, bool add_to_dx, uint16_t* dx16) {
  const RoundedOnReturn<T> rounded{dx, size_t(rows) * size_t(d), dx16};
  const int m = d / G;
  const int nch = nchunks(rows);
  T* part = scratch<T>(1, size_t(nch) * 2 * d);  // per chunk: [sum dy * xh | sum dy]
  rowgroup_backward_chunks<T>(mask, rows, d, G, dx, add_to_dx, part, 2 * size_t(d),
                              [&](int r, int j, T* pg) {
    const size_t col = size_t(j) * m, off = size_t(r) * d + col;
    const T* xr = x + off;
    const T* dyr = dy + off;
    const T* gj = gamma + col;
    T* dxg = dx + off;
    const T mu = mean[size_t(r) * G + j], rs = rstd[size_t(r) * G + j];
    double sg, sgx;
    row_dot_norm(gj, dyr, xr, mu, rs, m, sg, sgx);
    const T mg = T(sg / m), mgx = T(sgx / m);
    T* pgj = pg + col;
    T* pbj = pg + d + col;
#pragma omp simd
    for (int c = 0; c < m; ++c) {
      const T xh = (xr[c] - mu) * rs, v = rs * (gj[c] * dyr[c] - mg - xh * mgx);
      dxg[c] = add_to_dx ? dxg[c] + v : v;
      pgj[c] += dyr[c] * xh;
      pbj[c] += dyr[c];
    }
  });
  if (rows > 0) {
    combine_chunks(part, nch, 2 * size_t(d), d, dgamma);
    combine_chunks(part + d, nch, 2 * size_t(d), d, dbeta);
  }
}

// The CPU reads its input from cache in each pass: the fused operations are their parts in order.
template <class T>
void column_stats_affine(const T* a, const T* b, const uint8_t* keep, float p, T* x,
                         const uint8_t* mask, int rows, int d, const double* shift, double* count,
                         double* sum, double* sumsq, const double* scale, const T* gamma,
                         const T* beta, T* y, uint16_t* y16) {
  if (b) {
    dropout_add<T>(a, b, keep, p, size_t(rows) * size_t(d), x);
    a = x;
  }
  column_stats<T>(a, mask, rows, d, shift, count, sum, sumsq);
  if (y || y16) column_affine<T>(a, rows, d, shift, scale, gamma, beta, y, y16, nullptr);
}

template <class T>
void column_backward_dot(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                         const double* scale, const T* gamma, const double* b, T* dx,
                         bool add_to_dx, uint16_t* dx16, double* sum_dy, double* sum_dy_x) {
  column_dot<T>(dy, x, mask, rows, d, nullptr, sum_dy, sum_dy_x);
  column_norm_backward<T>(x, dy, mask, rows, d, nullptr, scale, gamma, nullptr, b, dx, add_to_dx,
                          dx16);
}

// ---- DyT (layers/norms/dyt.h) ------------------------------------------------------------------
// y = gamma * tanh(a x) + beta per element, a = alpha[0].
template <class T>
void dyt_forward(const T* x, int rows, int d, const T* alpha, const T* gamma, const T* beta, T* y,
                 uint16_t* y16) {
  if (y16)
    return rounded_output<T>(size_t(rows) * d, y16, [&](T* t) {
      dyt_forward<T>(x, rows, d, alpha, gamma, beta, t, nullptr);
    });
  const T a = alpha[0];
#pragma omp parallel for schedule(static) if (big(rows, d))
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + size_t(r) * d;
    T* yr = y + size_t(r) * d;
    for (int c = 0; c < d; ++c) yr[c] = gamma[c] * std::tanh(a * xr[c]) + beta[c];
  }
}

// t = tanh(a x), s = 1 - t^2: dx = dy gamma a s on live rows (0 on masked ones, or dx kept when
// adding); per chunk of rows the partials [sum dy t | sum dy | sum dy gamma x s] of the live
// rows in double, then added in chunk order into dgamma, dbeta and dalpha[0].
template <class T>
void dyt_backward(const T* x, const T* dy, const T* alpha, const T* gamma, const uint8_t* mask,
                  int rows, int d, T* dx, T* dgamma, T* dbeta, T* dalpha, bool add_to_dx,
                  uint16_t* dx16) {
  const RoundedOnReturn<T> rounded{dx, size_t(rows) * size_t(d), dx16};
  const T a = alpha[0];
  const int nch = nchunks(rows);
  const size_t width = 2 * size_t(d) + 1;
  double* part = scratch<double>(1, size_t(nch) * width);
  rowgroup_backward_chunks<T>(mask, rows, d, 1, dx, add_to_dx, part, width,
                              [&](int r, int, double* pg) {
    const T* xr = x + size_t(r) * d;
    const T* dyr = dy + size_t(r) * d;
    T* dxr = dx + size_t(r) * d;
    for (int c = 0; c < d; ++c) {
      const T t = std::tanh(a * xr[c]), s = T(1) - t * t, g = dyr[c] * gamma[c];
      const T v = g * a * s;
      dxr[c] = add_to_dx ? dxr[c] + v : v;
      pg[c] += double(dyr[c]) * double(t);
      pg[d + c] += double(dyr[c]);
      pg[2 * d] += double(g) * double(xr[c]) * double(s);
    }
  });
  combine_chunks<false>(part, nch, width, d, dgamma);
  combine_chunks<false>(part + d, nch, width, d, dbeta);
  combine_chunks<false>(part + 2 * d, nch, width, 1, dalpha);
}

// The explicit instantiations of the templated operations of kernels/ops.inc whose cpu file is
// this one.
#define PN_OPS_THIS_FILE_norm_kernels PN_OPS_PROBE
#include "kernels/instantiate.inc"

}  // namespace pn::k::cpu
