// Synchronized norms across ranks (docs/contract.md §3), under mpirun -np 2 and -np 3:
// uneven per-rank shares, including a rank with no rows, reproduce one process holding all the
// rows (y, dx, dgamma/dbeta summed over ranks, running state), iteration after iteration; the
// rank-local `power` equals a one-process run on the rank's own rows.
// Every collective is called unconditionally (EXPECT_, never ASSERT_, before one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "tests/gradcheck.h"
#include "tests/pn_reference.h"
#include "layers/norms/norm.h"
#include "mpi_env.h"

namespace pn {
namespace {

using State = std::map<std::string, std::vector<double>>;

State snapshot(Norm<double>& n) {
  State m;
  for (const StateTensor& t : n.state()) m[t.name] = std::vector<double>(t.data, t.data + t.n);
  return m;
}

void expect_near_state(const State& a, const State& b, double tol, const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    EXPECT_TRUE(it != b.end()) << what << ": no " << name;
    if (it == b.end()) continue;
    EXPECT_EQ(v.size(), it->second.size()) << what << " " << name;
    for (size_t i = 0; i < std::min(v.size(), it->second.size()); ++i)
      EXPECT_NEAR(v[i], it->second[i], tol * std::max(1.0, std::abs(v[i])))
          << what << " " << name << "[" << i << "]";
  }
}

// Rows of rank r: uneven, rank 1 has none.
int rows_of(int r) { return r == 1 ? 0 : 3 + 4 * r; }

struct Iteration {
  std::vector<double> x, dy;
  std::vector<uint8_t> mask;
};

Iteration make_iteration(int N, int d, int it) {
  Iteration s;
  s.x = test::randn(size_t(N) * d, 1000 + it, 1.5 + 0.5 * it, 0.7);
  s.dy = test::randn(size_t(N) * d, 2000 + it);
  std::mt19937_64 rng(3000 + it);
  s.mask.resize(N);
  for (auto& m : s.mask) m = (rng() % 4) != 0;  // about a quarter masked
  return s;
}

// Runs `kind` synchronized over the world (this rank: its share) and in one process over all
// rows, compares every iteration.
void check_sync_matches_one_process(NormOptions o) {
  SCOPED_TRACE(o.kind + " " + pn_variant_choices()[size_t(o.pn_variant)] + " prescale " + std::to_string(o.prescale_groups));
  Communicator& w = test::world();
  const int R = w.size(), me = w.rank(), d = 6, iters = 4;
  int N = 0, first = 0;
  for (int r = 0; r < R; ++r) {
    if (r == me) first = N;
    N += rows_of(r);
  }
  const int n = rows_of(me);
  auto single = make_single_communicator();
  ParamStore<double> ss, sw;
  auto one = make_norm<double>(o, d, ss, "n", single.get());
  auto dist = make_norm<double>(o, d, sw, "n", &w);
  EXPECT_TRUE(dist->synchronized());
  ss.allocate(7);
  sw.allocate(7);
  auto perturb = test::randn(ss.data.size(), 8, 0.3);
  for (size_t i = 0; i < perturb.size(); ++i) ss.data[i] += perturb[i], sw.data[i] += perturb[i];
  for (int it = 0; it < iters; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it + 1) + " rank " + std::to_string(me));
    Iteration all = make_iteration(N, d, it);
    std::vector<double> y1(size_t(N) * d), dx1(size_t(N) * d);
    std::fill(ss.grad.begin(), ss.grad.end(), 0.0);
    std::fill(sw.grad.begin(), sw.grad.end(), 0.0);
    one->forward(all.x.data(), all.mask.data(), N, y1.data(), true);
    one->backward(all.x.data(), all.dy.data(), all.mask.data(), N, dx1.data());

    const size_t off = size_t(first) * d;
    std::vector<double> x(all.x.begin() + off, all.x.begin() + off + size_t(n) * d);
    std::vector<double> dy(all.dy.begin() + off, all.dy.begin() + off + size_t(n) * d);
    std::vector<uint8_t> mask(all.mask.begin() + first, all.mask.begin() + first + n);
    std::vector<double> y(size_t(n) * d), dx(size_t(n) * d);
    dist->forward(x.data(), mask.data(), n, y.data(), true);
    dist->backward(x.data(), dy.data(), mask.data(), n, dx.data());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_TRUE(std::isfinite(y[i]) && std::isfinite(dx[i])) << i;
      EXPECT_NEAR(y[i], y1[off + i], 1e-10) << "y " << i;
      EXPECT_NEAR(dx[i], dx1[off + i], 1e-10) << "dx " << i;
    }
    std::vector<double> g = sw.grad;
    w.allreduce_sum(g.data(), g.size());
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], ss.grad[i], 1e-10 * std::max(1.0, std::abs(g[i]))) << "dparam " << i;
    expect_near_state(snapshot(*one), snapshot(*dist), 1e-12, "state");
    // Running state identical on every rank, bit for bit.
    for (const StateTensor& t : dist->state()) {
      std::vector<double> ref(t.data, t.data + t.n);
      w.broadcast(ref.data(), ref.size() * sizeof(double), 0);
      for (size_t i = 0; i < t.n; ++i) EXPECT_EQ(t.data[i], ref[i]) << t.name << " " << i;
    }
  }
}

TEST(SyncNorms, UnevenAndEmptyRanksEqualOneProcess) {
  for (const char* kind : {"sync_batch", "sync_power_v", "sync_power", "sync_power authors"}) {
    for (int prescale : {0, 2}) {
      NormOptions o;
      o.kind = kind;
      if (o.kind == "sync_power authors") o.kind = "sync_power", o.pn_variant = PnVariant::authors;
      o.prescale_groups = prescale;
      o.warmup = 2;
      o.alpha = 0.7;
      o.alpha_fwd = 0.8;
      o.alpha_bkw = 0.6;
      check_sync_matches_one_process(o);
    }
  }
}

// Every row of every rank masked: no NaN, the state stays, the collectives still match up.
TEST(SyncNorms, AllMaskedEverywhereKeepsState) {
  Communicator& w = test::world();
  for (const char* kind : {"sync_batch", "sync_power_v", "sync_power"}) {
    SCOPED_TRACE(kind);
    NormOptions o;
    o.kind = kind;
    const int d = 3, n = rows_of(w.rank());
    ParamStore<double> s;
    auto norm = make_norm<double>(o, d, s, "n", &w);
    s.allocate(1);
    auto x = test::randn(size_t(n) * d, 5 + w.rank()), dy = test::randn(size_t(n) * d, 9);
    std::vector<uint8_t> zeros(n, 0);
    std::vector<double> y(size_t(n) * d), dx(size_t(n) * d, 1.0);
    State before = snapshot(*norm);
    norm->forward(x.data(), zeros.data(), n, y.data(), true);
    norm->backward(x.data(), dy.data(), zeros.data(), n, dx.data());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_TRUE(std::isfinite(y[i]));
      EXPECT_EQ(dx[i], 0.0);
    }
    for (double g : s.grad) EXPECT_EQ(g, 0.0);
    EXPECT_TRUE(snapshot(*norm) == before);
  }
}

// `power` is rank-local: each rank's state is that of one process over its own rows.
TEST(SyncNorms, PowerStateIsRankLocal) {
  Communicator& w = test::world();
  const int R = w.size(), me = w.rank(), d = 5;
  int N = 0, first = 0;
  for (int r = 0; r < R; ++r) {
    if (r == me) first = N;
    N += rows_of(r);
  }
  const int n = rows_of(me);
  NormOptions o;
  o.kind = "power";
  o.warmup = 2;
  ParamStore<double> sa, sb;
  auto a = make_norm<double>(o, d, sa, "n", &w);  // given the world, still local
  auto single = make_single_communicator();
  auto b = make_norm<double>(o, d, sb, "n", single.get());
  EXPECT_FALSE(a->synchronized());
  sa.allocate(3);
  sb.allocate(3);
  for (int it = 0; it < 4; ++it) {
    Iteration all = make_iteration(N, d, it);
    const size_t off = size_t(first) * d;
    std::vector<double> x(all.x.begin() + off, all.x.begin() + off + size_t(n) * d);
    std::vector<double> dy(all.dy.begin() + off, all.dy.begin() + off + size_t(n) * d);
    std::vector<uint8_t> mask(all.mask.begin() + first, all.mask.begin() + first + n);
    std::vector<double> ya(size_t(n) * d), yb(ya.size()), dxa(ya.size()), dxb(ya.size());
    a->forward(x.data(), mask.data(), n, ya.data(), true);
    a->backward(x.data(), dy.data(), mask.data(), n, dxa.data());
    b->forward(x.data(), mask.data(), n, yb.data(), true);
    b->backward(x.data(), dy.data(), mask.data(), n, dxb.data());
    EXPECT_EQ(ya, yb);
    EXPECT_EQ(dxa, dxb);
    EXPECT_TRUE(snapshot(*a) == snapshot(*b)) << "rank " << me << " iteration " << it;
  }
  // The ranks' states differ (they saw different rows), except on a rank with none.
  State st = snapshot(*a);
  EXPECT_EQ(st["t"][0], n > 0 ? 4.0 : 0.0);
}

// PN, both variants, against the contract's pseudo-code (docs/contract.md §2; tests/pn_reference.h) in double precision
// across the warmup boundary (W = 3 of 5 iterations), masked rows and uneven shares including a
// rank with none: `sync_power` against the pseudo-code over every rank's rows, `power` on each
// rank against the pseudo-code over that rank's own rows.
void check_pn_against_pseudo_code(const std::string& kind, const std::string& variant,
                                  bool masked) {
  Communicator& w = test::world();
  const int R = w.size(), me = w.rank(), d = 4, iters = 5, W = 3;
  SCOPED_TRACE(kind + " " + variant + (masked ? " masked" : "") + " rank " +
               std::to_string(me) + " of " + std::to_string(R));
  int N = 0, first = 0;
  for (int r = 0; r < R; ++r) {
    if (r == me) first = N;
    N += rows_of(r);
  }
  const int n = rows_of(me);
  const bool sync = kind == "sync_power";
  NormOptions o;
  o.kind = kind;
  o.warmup = W;
  o.alpha_fwd = 0.8;
  o.alpha_bkw = 0.6;
  o.pn_variant = parse_pn_variant(variant);
  ParamStore<double> s;
  auto norm = make_norm<double>(o, d, s, "n", &w);
  s.allocate(7);
  auto perturb = test::randn(s.data.size(), 8, 0.3);
  for (size_t i = 0; i < perturb.size(); ++i) s.data[i] += perturb[i];
  test::PnReference ref(d, o.eps, o.alpha_fwd, o.alpha_bkw, W, variant == "authors");
  for (int it = 0; it < iters; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it + 1));
    Iteration all = make_iteration(N, d, it);
    if (!masked) std::fill(all.mask.begin(), all.mask.end(), 1);
    // The reference's rows: all of them (sync_power) or this rank's (power).
    const int ref_first = sync ? 0 : first, ref_n = sync ? N : n;
    std::vector<double> rx(all.x.begin() + size_t(ref_first) * d,
                           all.x.begin() + size_t(ref_first + ref_n) * d);
    std::vector<double> rdy(all.dy.begin() + size_t(ref_first) * d,
                            all.dy.begin() + size_t(ref_first + ref_n) * d);
    std::vector<uint8_t> rm(all.mask.begin() + ref_first, all.mask.begin() + ref_first + ref_n);
    std::vector<double> yr(rx.size()), dxr(rx.size()), dgr(d), dbr(d);
    ref.forward(rx, rm, s.p(0), s.p(1), yr);
    ref.backward(rx, rdy, rm, s.p(0), dxr, dgr, dbr);

    const size_t off = size_t(first) * d, roff = sync ? off : 0;
    std::vector<double> x(all.x.begin() + off, all.x.begin() + off + size_t(n) * d);
    std::vector<double> dy(all.dy.begin() + off, all.dy.begin() + off + size_t(n) * d);
    std::vector<uint8_t> mask(all.mask.begin() + first, all.mask.begin() + first + n);
    std::vector<double> y(size_t(n) * d), dx(size_t(n) * d);
    std::fill(s.grad.begin(), s.grad.end(), 0.0);
    norm->forward(x.data(), mask.data(), n, y.data(), true);
    norm->backward(x.data(), dy.data(), mask.data(), n, dx.data());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], yr[roff + i], 1e-11 * std::max(1.0, std::abs(yr[roff + i]))) << "y " << i;
      EXPECT_NEAR(dx[i], dxr[roff + i], 1e-11 * std::max(1.0, std::abs(dxr[roff + i])))
          << "dx " << i;
    }
    // Parameter gradients: summed over ranks for sync_power, this rank's own for power.
    std::vector<double> g = s.grad;
    if (sync) w.allreduce_sum(g.data(), g.size());
    for (int c = 0; c < d; ++c) {
      EXPECT_NEAR(g[c], dgr[c], 1e-11 * std::max(1.0, std::abs(dgr[c]))) << "dgamma " << c;
      EXPECT_NEAR(g[d + c], dbr[c], 1e-11 * std::max(1.0, std::abs(dbr[c]))) << "dbeta " << c;
    }
    State want{{"running_psi2", ref.psi2}, {"nu", ref.nu}, {"t", {double(ref.t)}}};
    expect_near_state(snapshot(*norm), want, 1e-12, "state");
  }
}

TEST(SyncNorms, PowerNormVariantsMatchPseudoCode) {
  for (const char* kind : {"power", "sync_power"})
    for (const char* variant : {"paper", "authors"})
      for (bool masked : {false, true}) check_pn_against_pseudo_code(kind, variant, masked);
}

}  // namespace
}  // namespace pn
