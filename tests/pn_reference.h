// The docs/contract.md §2 pseudo-code of PN, both variants, written out element by element in double
// precision, independently of layers/norms: the reference of the PN tests at 1, 2 and 3 ranks.
// Rows with m[r] == 0 are padding: outside every statistic and gradient, dx = 0 there.
// An iteration without unmasked rows uses the inference formula and changes no state.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace pn::test {

struct PnReference {
  int d;
  double eps, af, ab;
  int64_t W;
  bool authors;  // --pn-variant authors
  bool ema_state;  // the authors' running-psi^2 rule (authors, or --pn-warmup-psi ema)
  std::vector<double> psi2, nu, s;
  int64_t t = 0;
  double B = 0;  // unmasked rows of the current iteration

  PnReference(int d_, double eps_, double af_, double ab_, int64_t W_, bool authors_ = false,
              bool ema_state_ = false)
      : d(d_), eps(eps_), af(af_), ab(ab_), W(W_), authors(authors_),
        ema_state(authors_ || ema_state_), psi2(d_, 1.0), nu(d_, 0.0), s(d_) {}

  static double unmasked(const std::vector<uint8_t>& m) {
    double B = 0;
    for (auto v : m) B += v ? 1 : 0;
    return B;
  }

  // Mean over the unmasked rows of x^2, column c.
  double psi2_batch(const std::vector<double>& x, const std::vector<uint8_t>& m, int c) const {
    double pb = 0;
    for (size_t r = 0; r < m.size(); ++r)
      if (m[r]) pb += x[r * d + c] * x[r * d + c];
    return pb / B;
  }

  void forward(const std::vector<double>& x, const std::vector<uint8_t>& m, const double* g,
               const double* b, std::vector<double>& y) {
    const int rows = int(m.size());
    B = unmasked(m);
    if (B == 0) {  // inference formula, state unchanged
      for (int c = 0; c < d; ++c)
        for (int r = 0; r < rows; ++r)
          y[r * d + c] = g[c] * x[r * d + c] / std::sqrt(psi2[c] + eps) + b[c];
      return;
    }
    t += 1;
    for (int c = 0; c < d; ++c) {
      const double pb = psi2_batch(x, m, c);
      s[c] = t <= W ? std::sqrt(pb + eps) : std::sqrt(psi2[c] + eps);
      for (int r = 0; r < rows; ++r) y[r * d + c] = g[c] * x[r * d + c] / s[c] + b[c];
      if (ema_state) {
        if (t < W) psi2[c] = psi2[c] + (pb - psi2[c]) / double(t);
        psi2[c] = af * psi2[c] + (1 - af) * pb;
      } else {
        psi2[c] = t <= W ? psi2[c] + (pb - psi2[c]) / double(t) : af * psi2[c] + (1 - af) * pb;
      }
    }
  }

  // dgamma/dbeta overwritten with this iteration's sums.
  void backward(const std::vector<double>& x, const std::vector<double>& dy,
                const std::vector<uint8_t>& m, const double* g, std::vector<double>& dx,
                std::vector<double>& dgamma, std::vector<double>& dbeta) {
    const int rows = int(m.size());
    for (int c = 0; c < d; ++c) {
      dgamma[c] = dbeta[c] = 0;
      if (B == 0) {
        for (int r = 0; r < rows; ++r) dx[r * d + c] = 0;
        continue;
      }
      if (authors) {
        const double sb = std::sqrt(psi2_batch(x, m, c) + eps);
        double mean_xhp_xh = 0;
        for (int r = 0; r < rows; ++r) {
          const double xh = x[r * d + c] / s[c], gg = g[c] * dy[r * d + c];
          const double xhp = gg - (1 - ab) * nu[c] * xh;
          dx[r * d + c] = m[r] ? xhp / sb : 0.0;
          if (!m[r]) continue;
          mean_xhp_xh += xhp * xh / B;
          dgamma[c] += dy[r * d + c] * xh;
          dbeta[c] += dy[r * d + c];
        }
        nu[c] = nu[c] + mean_xhp_xh;
        continue;
      }
      double Gam = 0, Lam = 0;
      for (int r = 0; r < rows; ++r) {
        const double xh = x[r * d + c] / s[c], gg = g[c] * dy[r * d + c];
        dx[r * d + c] = m[r] ? (gg - nu[c] * xh) / s[c] : 0.0;
        if (!m[r]) continue;
        Gam += xh * xh / B;
        Lam += gg * xh / B;
        dgamma[c] += dy[r * d + c] * xh;
        dbeta[c] += dy[r * d + c];
      }
      nu[c] = nu[c] * (1 - (1 - ab) * Gam) + (1 - ab) * Lam;
    }
  }
};

}  // namespace pn::test
