// Kernels of the normalization family (SPEC section 2): column statistics over the unmasked rows
// (batch-type norms) and per-row group statistics (rms, group, pre-scaling).
//
// Column statistics are accumulated in double and split across threads by column blocks, so a
// result never depends on the number of threads. A row r takes part in a column statistic only
// when mask is null or mask[r] != 0. Layout: row-major [rows, d].
#pragma once
#include <cstddef>
#include <cstdint>

namespace pn::k {

// ---- column statistics (batch-type norms) ---------------------------------------------------
// Overwrites: *count = number of unmasked rows; sum[c] = sum_S (x - shift_c);
// sumsq[c] = sum_S (x - shift_c)^2. shift may be null (0); sum may be null.
template <class T>
void column_stats(const T* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq);

// Overwrites: sum_a[c] = sum_S a; sum_ab[c] = sum_S a * (b - shift_c). shift may be null.
template <class T>
void column_dot(const T* a, const T* b, const uint8_t* mask, int rows, int d, const double* shift,
                double* sum_a, double* sum_ab);

// y = gamma_c * (x - shift_c) * scale_c + beta_c for every row (masked too). shift and beta may
// be null (0).
template <class T>
void column_affine(const T* x, int rows, int d, const double* shift, const double* scale,
                   const T* gamma, const T* beta, T* y);

// The common shape of the batch-type backward: with xh = (x - shift_c) * scale_c and
// g = gamma_c * dy, dx = scale_c * (g - a_c - b_c * xh) on unmasked rows and 0 on masked rows.
// shift and a may be null (0). batch: a = mean g, b = mean g*xh; power_v: b = mean g*xh;
// PN: b = nu.
template <class T>
void column_norm_backward(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const T* gamma,
                          const double* a, const double* b, T* dx);

// ---- per-row groups (rms, group, pre-scaling) -------------------------------------------------
// G groups of d/G consecutive features per row. rinv[r*G + j] = 1/sqrt(mean_group x^2 + eps);
// y = gamma * x * rinv (gamma null: 1).
template <class T>
void rowgroup_rms_forward(const T* x, int rows, int d, int G, T eps, const T* gamma, T* y,
                          T* rinv);
// xh = x * rinv, g = gamma * dy (gamma null: 1): dx = rinv * (g - xh * mean_group(g * xh)),
// 0 on masked rows; dgamma (may be null) += sum over unmasked rows of dy * xh.
template <class T>
void rowgroup_rms_backward(const T* x, const T* dy, const T* rinv, const T* gamma,
                           const uint8_t* mask, int rows, int d, int G, T* dx, T* dgamma);

// Per row and group: mu, var (biased); xh = (x - mu) * rstd; y = gamma * xh + beta.
// mean and rstd hold rows*G entries.
template <class T>
void rowgroup_norm_forward(const T* x, int rows, int d, int G, T eps, const T* gamma,
                           const T* beta, T* y, T* mean, T* rstd);
// dx = rstd * (g - mean_group g - xh * mean_group(g * xh)), 0 on masked rows;
// dgamma += sum_S dy * xh, dbeta += sum_S dy.
template <class T>
void rowgroup_norm_backward(const T* x, const T* dy, const T* mean, const T* rstd,
                            const T* gamma, const uint8_t* mask, int rows, int d, int G, T* dx,
                            T* dgamma, T* dbeta);

}  // namespace pn::k
