// The normalization family of docs/contract.md §2 (one process): finite-difference gradient checks
// of every exact-gradient layer, PN against a hand computation of the contract's pseudo-code (docs/contract.md §2),
// empty statistics batches, inference with the running state, and the precision of the
// batch statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "comm/communicator.h"
#include "gradcheck.h"
#include "pn_reference.h"
#include "layers/norms/norm.h"

namespace pn {
namespace {

using test::dot;
using test::expect_gradient;
using test::randn;

using test::randomize;

std::map<std::string, std::vector<double>> snapshot(Norm<double>& n) {
  std::map<std::string, std::vector<double>> m;
  for (const StateTensor& t : n.state()) m[t.name] = std::vector<double>(t.data, t.data + t.n);
  return m;
}

NormOptions opts(const std::string& kind, int prescale = 0, int groups = 1) {
  NormOptions o;
  o.kind = kind;
  o.prescale_groups = prescale;
  o.groups = groups;
  return o;
}

std::string label(const NormOptions& o, bool masked) {
  return o.kind + (o.prescale_groups ? " prescale " + std::to_string(o.prescale_groups) : "") +
         (masked ? " masked" : "");
}

// Gradient of L = sum over unmasked rows of y * w, in x and in gamma/beta.
void check_gradients(const NormOptions& o, bool masked) {
  SCOPED_TRACE(label(o, masked));
  const int rows = 9, d = 6;
  auto comm = make_single_communicator();
  ParamStore<double> s;
  auto norm = make_norm<double>(o, d, s, "n", comm.get());
  s.allocate(19);
  randomize(s, 20);
  auto x = randn(size_t(rows) * d, 21, 2.0, 0.5), w = randn(size_t(rows) * d, 22);
  std::vector<uint8_t> mask(rows, 1);
  if (masked) mask[1] = mask[4] = mask[8] = 0;
  std::vector<double> wm = w;
  for (int r = 0; r < rows; ++r)
    if (!mask[r])
      for (int c = 0; c < d; ++c) wm[r * d + c] = 0;
  std::vector<double> y(rows * d), dx(rows * d);
  auto loss = [&] {
    norm->forward(x.data(), mask.data(), rows, y.data(), true);
    return dot(y, wm);
  };
  loss();
  // Masked rows' dy is arbitrary (w): it must not matter.
  norm->backward(x.data(), w.data(), mask.data(), rows, dx.data());
  for (int r = 0; r < rows; ++r)
    if (!mask[r]) {
      for (int c = 0; c < d; ++c) EXPECT_EQ(dx[r * d + c], 0.0) << "masked row " << r;
    }
  expect_gradient("dx", x, dx, loss, 1e-6);
  std::vector<double> dparam = s.grad;
  expect_gradient("the parameters (gamma, beta; DyT's a)", s.data, dparam, loss, 1e-6);
}

// Every row of the registry (layers/norms/norms.inc) builds its layer, whose parameters, state
// and synchronization are the row's.
TEST(Norms, KindsAreRegistered) {
  auto comm = make_single_communicator();
  ASSERT_EQ(norm_kinds().size(), norm_registry().size());
  for (const NormInfo& info : norm_registry()) {
    SCOPED_TRACE(info.name);
    EXPECT_TRUE(is_norm_kind(info.name));
    EXPECT_EQ(parse_norm_kind(info.name), info.kind);
    EXPECT_EQ(&norm_info(info.kind), &info);
    EXPECT_EQ(is_synchronized(info.kind), info.synchronized);
    EXPECT_FALSE(info.paper.empty());
    ParamStore<double> s;
    auto n = make_norm<double>(opts(info.name), 6, s, "n", comm.get());
    std::vector<std::string> params, state;
    for (const ParamSpec& p : s.specs) params.push_back(p.name);
    std::vector<std::string> want_params;
    for (const std::string& p : info.params) want_params.push_back("n." + p);
    EXPECT_EQ(params, want_params);
    s.allocate(1);
    for (const StateTensor& t : n->state()) state.push_back(t.name);
    EXPECT_EQ(state, info.state);
    EXPECT_EQ(n->synchronized(), info.synchronized);
    // Every flag it names is a norm flag.
    for (const std::string& f : info.flags) {
      bool known = false;
#define PN_NORM_FLAG(type, member, name, ...) known = known || f == name;
#include "layers/norms/norm_flags.inc"
#undef PN_NORM_FLAG
      EXPECT_TRUE(known) << f;
    }
  }
  EXPECT_FALSE(is_norm_kind("instance"));
  EXPECT_THROW(norm_info("instance"), std::invalid_argument);
  ParamStore<double> s;
  EXPECT_THROW(make_norm<double>(opts("group", 0, 4), 6, s, "g", nullptr), std::invalid_argument);
  EXPECT_THROW(make_norm<double>(opts("sync_batch"), 6, s, "b", nullptr), std::invalid_argument);
}

// PN's backward is the paper's approximation (its running nu), not the gradient of its forward.
bool exact_gradient(const NormInfo& n) {
  return n.kind != NormKind::power && n.kind != NormKind::sync_power;
}

TEST(Norms, GradientsMatchFiniteDifferences) {
  for (bool masked : {false, true}) {
    for (const NormInfo& n : norm_registry())
      if (exact_gradient(n)) check_gradients(opts(n.name, 0, 3), masked);
    check_gradients(opts("group", 0, 1), masked);
    check_gradients(opts("batch", 1), masked);
    check_gradients(opts("batch", 2), masked);
    check_gradients(opts("power_v", 1), masked);
    check_gradients(opts("power_v", 3), masked);
  }
}

// DyT: y = gamma tanh(a x) + beta, a starting at dyt_alpha_init, the same in training and
// inference; its parameters are gamma, beta and a (its gradients: GradientsMatchFiniteDifferences).
TEST(Norms, DytValues) {
  const int rows = 4, d = 5;
  NormOptions o = opts("dyt");
  o.dyt_alpha_init = 0.7;
  ParamStore<double> s;
  auto n = make_norm<double>(o, d, s, "t", nullptr);
  s.allocate(1);
  ASSERT_EQ(s.specs.size(), 3u);
  EXPECT_EQ(s.specs[2].name, "t.alpha");
  EXPECT_EQ(s.p(2)[0], 0.7);
  randomize(s, 40);
  const double a = s.p(2)[0];
  auto x = randn(size_t(rows) * d, 41, 2.0, 0.5);
  std::vector<double> y(rows * d), yi(rows * d);
  n->forward(x.data(), nullptr, rows, y.data(), true);
  n->forward(x.data(), nullptr, rows, yi.data(), false);
  EXPECT_EQ(y, yi);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c)
      EXPECT_NEAR(y[r * d + c], s.p(0)[c] * std::tanh(a * x[r * d + c]) + s.p(1)[c], 1e-14);
}

TEST(Norms, RmsAndGroupValues) {
  const int rows = 3, d = 4;
  auto x = randn(size_t(rows) * d, 30, 1.5, 0.3);
  ParamStore<double> s;
  auto rms = make_norm<double>(opts("rms"), d, s, "r", nullptr);
  auto grp = make_norm<double>(opts("group", 0, 2), d, s, "g", nullptr);
  s.allocate(1);
  randomize(s, 31);
  EXPECT_EQ(s.specs.size(), 3u);  // rms has no bias
  std::vector<double> y(rows * d), yg(rows * d);
  rms->forward(x.data(), nullptr, rows, y.data(), true);
  grp->forward(x.data(), nullptr, rows, yg.data(), true);
  const double* gr = s.p(0);
  const double *gg = s.p(1), *bg = s.p(2);
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int c = 0; c < d; ++c) ms += x[r * d + c] * x[r * d + c] / d;
    for (int c = 0; c < d; ++c)
      EXPECT_NEAR(y[r * d + c], gr[c] * x[r * d + c] / std::sqrt(ms + 1e-5), 1e-12);
    for (int j = 0; j < 2; ++j) {
      const double a = x[r * d + 2 * j], b = x[r * d + 2 * j + 1], mu = (a + b) / 2;
      const double var = ((a - mu) * (a - mu) + (b - mu) * (b - mu)) / 2;
      for (int c = 2 * j; c < 2 * j + 2; ++c)
        EXPECT_NEAR(yg[r * d + c], gg[c] * (x[r * d + c] - mu) / std::sqrt(var + 1e-5) + bg[c],
                    1e-12);
    }
  }
}

// PN, both variants, against the contract's pseudo-code (docs/contract.md §2; tests/pn_reference.h) across the warmup
// boundary: iterations 1 and 2 inside it (t < W), 3 on it (t = W: batch s, but the authors'
// state update is already the EMA alone), 4 to 6 after it.
void check_power_against_reference(const std::string& kind, int W, const std::string& variant,
                                   bool masked, const std::string& warmup_psi = "cumulative") {
  SCOPED_TRACE(kind + " W=" + std::to_string(W) + " " + variant + (masked ? " masked" : "") +
               " warmup psi " + warmup_psi);
  const int rows = 6, d = 3;
  NormOptions o = opts(kind);
  o.warmup = W;
  o.alpha_fwd = 0.7;
  o.alpha_bkw = 0.8;
  o.pn_variant = parse_pn_variant(variant);
  o.pn_warmup_psi = parse_pn_warmup_psi(warmup_psi);
  auto comm = make_single_communicator();
  ParamStore<double> s;
  auto pn = make_norm<double>(o, d, s, "pn", comm.get());
  s.allocate(1);
  randomize(s, 40);
  test::PnReference ref(d, o.eps, o.alpha_fwd, o.alpha_bkw, W, variant == "authors",
                        warmup_psi == "ema");
  std::vector<double> y(rows * d), yr(rows * d), dx(rows * d), dxr(rows * d), dgr(d), dbr(d);
  for (int it = 0; it < 6; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it + 1));
    auto x = randn(size_t(rows) * d, 41 + it, 1.0 + 0.5 * it, 0.2 * it);
    auto dy = randn(size_t(rows) * d, 51 + it);
    std::vector<uint8_t> mask(rows, 1);
    if (masked) mask[it % rows] = mask[(it + 3) % rows] = 0;
    std::fill(s.grad.begin(), s.grad.end(), 0.0);
    pn->forward(x.data(), mask.data(), rows, y.data(), true);
    ref.forward(x, mask, s.p(0), s.p(1), yr);
    pn->backward(x.data(), dy.data(), mask.data(), rows, dx.data());
    ref.backward(x, dy, mask, s.p(0), dxr, dgr, dbr);
    for (int i = 0; i < rows * d; ++i) {
      EXPECT_NEAR(y[i], yr[i], 1e-12) << "y " << i;
      EXPECT_NEAR(dx[i], dxr[i], 1e-12) << "dx " << i;
    }
    auto st = snapshot(*pn);
    for (int c = 0; c < d; ++c) {
      EXPECT_NEAR(s.g(0)[c], dgr[c], 1e-12) << "dgamma " << c;
      EXPECT_NEAR(s.g(1)[c], dbr[c], 1e-12) << "dbeta " << c;
      EXPECT_NEAR(st["running_psi2"][c], ref.psi2[c], 1e-12) << "psi2 " << c;
      EXPECT_NEAR(st["nu"][c], ref.nu[c], 1e-12) << "nu " << c;
    }
    EXPECT_EQ(st["t"][0], double(it + 1));
  }
  // Inference with the running psi^2.
  auto x = randn(size_t(rows) * d, 60, 2.0);
  pn->forward(x.data(), nullptr, rows, y.data(), false);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c)
      EXPECT_NEAR(y[r * d + c],
                  s.p(0)[c] * x[r * d + c] / std::sqrt(ref.psi2[c] + o.eps) + s.p(1)[c], 1e-12);
}

TEST(PowerNorm, MatchesSpecPseudoCodeAcrossWarmup) {
  for (const char* variant : {"paper", "authors"})
    for (bool masked : {false, true}) {
      check_power_against_reference("power", 3, variant, masked);
      check_power_against_reference("power", 0, variant, masked);
      check_power_against_reference("sync_power", 3, variant, masked);
    }
  // The paper variant with the authors' running-psi^2 rule during warmup.
  check_power_against_reference("power", 3, "paper", true, "ema");
  check_power_against_reference("sync_power", 3, "paper", false, "ema");
}

// The variants give different state and dx (so the test above exercises two code paths), and
// an unknown variant is refused.
TEST(PowerNorm, VariantsDifferAndUnknownIsRefused) {
  const int rows = 5, d = 2;
  std::vector<std::vector<double>> psi2, dxs;
  for (const char* variant : {"paper", "authors"}) {
    NormOptions o = opts("power");
    o.warmup = 2;
    o.pn_variant = parse_pn_variant(variant);
    ParamStore<double> s;
    auto pn = make_norm<double>(o, d, s, "pn", nullptr);
    s.allocate(1);
    std::vector<double> y(rows * d), dx(rows * d);
    for (int it = 0; it < 3; ++it) {
      auto x = randn(size_t(rows) * d, 70 + it, 2.0), dy = randn(size_t(rows) * d, 80 + it);
      pn->forward(x.data(), nullptr, rows, y.data(), true);
      pn->backward(x.data(), dy.data(), nullptr, rows, dx.data());
    }
    psi2.push_back(snapshot(*pn)["running_psi2"]);
    dxs.push_back(dx);
  }
  EXPECT_NE(psi2[0], psi2[1]);
  EXPECT_NE(dxs[0], dxs[1]);
  EXPECT_THROW(parse_pn_variant("fairseq"), std::invalid_argument);
  EXPECT_THROW(parse_pn_warmup_psi("median"), std::invalid_argument);
}

// backward(..., add_to_dx) adds the input gradient to dx in place: to the bit what a separate
// backward and add give (the model takes its residual stream's gradient so), masked rows kept,
// the parameter gradients the same; in float, as the model runs, for every kind and wrapper.
TEST(Norms, BackwardAddingToDxIsBackwardThenAdd) {
  auto comm = make_single_communicator();
  for (const NormInfo& info : norm_registry())
    for (int wrapper = 0; wrapper < 3; ++wrapper) {  // none, pre-scaling, ghost statistics
      if (info.synchronized) continue;  // the local twin's arithmetic
      NormOptions o = opts(info.name, wrapper == 1 ? 2 : 0, 2);
      if (wrapper == 2) o.stats_rows = 4;
      o.warmup = 1;
      SCOPED_TRACE(label(o, true) + (wrapper == 2 ? " ghost" : ""));
      const int rows = 11, d = 8;
      ParamStore<float> sa, sb;
      auto a = make_norm<float>(o, d, sa, "n", comm.get());
      auto b = make_norm<float>(o, d, sb, "n", comm.get());
      sa.allocate(5);
      sb.allocate(5);
      const auto to_float = [](const std::vector<double>& v) {
        return std::vector<float>(v.begin(), v.end());
      };
      std::vector<uint8_t> mask(rows, 1);
      mask[2] = mask[7] = 0;
      const auto stream = to_float(randn(size_t(rows) * d, 90, 3.0));
      for (int it = 0; it < 3; ++it) {  // past PN's warmup: its running state in dx
        const auto x = to_float(randn(size_t(rows) * d, 91 + it, 2.0, 1.0));
        const auto dy = to_float(randn(size_t(rows) * d, 95 + it));
        std::vector<float> y(size_t(rows) * d), dx(size_t(rows) * d), added = stream;
        a->forward(x.data(), mask.data(), rows, y.data(), true);
        b->forward(x.data(), mask.data(), rows, y.data(), true);
        a->backward(x.data(), dy.data(), mask.data(), rows, dx.data());
        b->backward(x.data(), dy.data(), mask.data(), rows, added.data(), true);
        std::vector<float> want = stream;
        for (size_t i = 0; i < want.size(); ++i) want[i] += dx[i];
        ASSERT_EQ(added, want) << "iteration " << it;
        for (int c = 0; c < d; ++c) EXPECT_EQ(added[7 * d + c], stream[7 * d + c]);
        EXPECT_EQ(sa.grad, sb.grad);
      }
    }
}

// Runs `iters` masked training iterations of kind and its twin and expects identical results.
TEST(Norms, SyncLayersEqualLocalTwinsUnderOneRank) {
  auto comm = make_single_communicator();
  for (auto [sync, local] : std::vector<std::pair<std::string, std::string>>{
           {"sync_batch", "batch"}, {"sync_power_v", "power_v"}, {"sync_power", "power"}}) {
    SCOPED_TRACE(sync);
    const int rows = 8, d = 5;
    NormOptions os = opts(sync, 1), ol = opts(local, 1);
    os.warmup = ol.warmup = 2;
    ParamStore<double> ss, sl;
    auto a = make_norm<double>(os, d, ss, "n", comm.get());
    auto b = make_norm<double>(ol, d, sl, "n", nullptr);
    EXPECT_TRUE(a->synchronized());
    EXPECT_FALSE(b->synchronized());
    ss.allocate(3);
    sl.allocate(3);
    for (int it = 0; it < 4; ++it) {
      auto x = randn(size_t(rows) * d, 60 + it, 2.0, 1.0), dy = randn(size_t(rows) * d, 70 + it);
      std::vector<uint8_t> mask(rows, 1);
      mask[(3 * it) % rows] = 0;
      std::vector<double> ya(rows * d), yb(rows * d), dxa(rows * d), dxb(rows * d);
      a->forward(x.data(), mask.data(), rows, ya.data(), true);
      b->forward(x.data(), mask.data(), rows, yb.data(), true);
      a->backward(x.data(), dy.data(), mask.data(), rows, dxa.data());
      b->backward(x.data(), dy.data(), mask.data(), rows, dxb.data());
      EXPECT_EQ(ya, yb);
      EXPECT_EQ(dxa, dxb);
      EXPECT_EQ(ss.grad, sl.grad);
      EXPECT_EQ(snapshot(*a), snapshot(*b));
    }
  }
}

// A micro-step whose statistics batch is empty uses the inference formula, keeps the state,
// gives dx = 0 and no parameter gradient, and never NaN.
TEST(Norms, EmptyStatisticsBatch) {
  auto comm = make_single_communicator();
  for (const NormInfo& info : norm_registry()) {
    const std::string& kind = info.name;
    for (int prescale : {0, 1}) {
      SCOPED_TRACE(kind + " prescale " + std::to_string(prescale));
      const int rows = 5, d = 4;
      NormOptions o = opts(kind, prescale, 2);
      o.warmup = 1;
      ParamStore<double> s;
      auto n = make_norm<double>(o, d, s, "n", comm.get());
      s.allocate(1);
      randomize(s, 80);
      auto x = randn(size_t(rows) * d, 81, 2.0, 1.0), dy = randn(size_t(rows) * d, 82);
      std::vector<double> y(rows * d), yi(rows * d), dx(rows * d, 7.0);
      std::vector<uint8_t> ones(rows, 1), zeros(rows, 0);
      for (int it = 0; it < 2; ++it) {  // a non-trivial state first
        n->forward(x.data(), ones.data(), rows, y.data(), true);
        n->backward(x.data(), dy.data(), ones.data(), rows, dx.data());
      }
      const auto before = snapshot(*n);
      std::fill(s.grad.begin(), s.grad.end(), 0.0);
      auto x2 = randn(size_t(rows) * d, 83, 3.0);
      n->forward(x2.data(), nullptr, rows, yi.data(), false);
      n->forward(x2.data(), zeros.data(), rows, y.data(), true);
      n->backward(x2.data(), dy.data(), zeros.data(), rows, dx.data());
      if (is_batch_type(info.kind)) {
        EXPECT_EQ(y, yi);  // inference formula
      }
      for (int i = 0; i < rows * d; ++i) {
        EXPECT_TRUE(std::isfinite(y[i])) << i;
        EXPECT_EQ(dx[i], 0.0) << i;
      }
      for (double g : s.grad) EXPECT_EQ(g, 0.0);
      EXPECT_EQ(snapshot(*n), before);
      // No rows at all (a rank without tokens).
      n->forward(nullptr, nullptr, 0, nullptr, true);
      n->backward(nullptr, nullptr, nullptr, 0, nullptr);
      for (double g : s.grad) EXPECT_EQ(g, 0.0);
      EXPECT_EQ(snapshot(*n), before);
    }
  }
}

TEST(Norms, InferenceUsesRunningState) {
  const int rows = 7, d = 3;
  for (const char* kind : {"batch", "power_v", "power", "sync_batch"}) {
    SCOPED_TRACE(kind);
    auto comm = make_single_communicator();
    NormOptions o = opts(kind);
    o.alpha = 0.6;
    o.warmup = 1;
    ParamStore<double> s;
    auto n = make_norm<double>(o, d, s, "n", comm.get());
    s.allocate(1);
    randomize(s, 90);
    std::vector<double> y(rows * d), dx(rows * d);
    std::vector<double> rm(d, 0.0), rv(d, 1.0);
    for (int it = 0; it < 3; ++it) {
      auto x = randn(size_t(rows) * d, 91 + it, 2.0, 3.0), dy = randn(size_t(rows) * d, 95);
      n->forward(x.data(), nullptr, rows, y.data(), true);
      n->backward(x.data(), dy.data(), nullptr, rows, dx.data());
      for (int c = 0; c < d; ++c) {  // batch running statistics by hand
        double mu = 0, var = 0;
        for (int r = 0; r < rows; ++r) mu += x[r * d + c] / rows;
        for (int r = 0; r < rows; ++r) var += (x[r * d + c] - mu) * (x[r * d + c] - mu) / rows;
        rm[c] = 0.6 * rm[c] + 0.4 * mu;
        rv[c] = 0.6 * rv[c] + 0.4 * var;
      }
    }
    auto st = snapshot(*n);
    if (st.count("running_mean"))
      for (int c = 0; c < d; ++c) {
        EXPECT_NEAR(st["running_mean"][c], rm[c], 1e-12);
        EXPECT_NEAR(st["running_var"][c], rv[c], 1e-12);
      }
    auto x = randn(size_t(rows) * d, 99, 2.0);
    n->forward(x.data(), nullptr, rows, y.data(), false);
    EXPECT_EQ(snapshot(*n), st);  // inference changes nothing
    const double *g = s.p(0), *b = s.p(1);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < d; ++c) {
        const double want =
            st.count("running_mean")
                ? g[c] * (x[r * d + c] - st["running_mean"][c]) /
                          std::sqrt(st["running_var"][c] + 1e-5) + b[c]
                : g[c] * x[r * d + c] / std::sqrt(st["running_psi2"][c] + 1e-5) + b[c];
        EXPECT_NEAR(y[r * d + c], want, 1e-12);
      }
  }
}

// 16K float tokens with mean 1000 and std 1: the batch variance must survive the large mean.
TEST(Norms, BatchVarianceIsPreciseWithLargeMean) {
  const int rows = 16384, d = 4;
  auto xd = randn(size_t(rows) * d, 100, 1.0, 1000.0);
  std::vector<float> x(xd.begin(), xd.end()), y(x.size()), dx(x.size());
  for (const char* kind : {"batch", "sync_batch"}) {
    SCOPED_TRACE(kind);
    auto comm = make_single_communicator();
    NormOptions o = opts(kind);
    o.alpha = 0.0;  // running state = this batch's statistics
    ParamStore<float> s;
    auto n = make_norm<float>(o, d, s, "n", comm.get());
    s.allocate(1);
    n->forward(x.data(), nullptr, rows, y.data(), true);
    std::map<std::string, std::vector<double>> st;
    for (const StateTensor& t : n->state()) st[t.name] = std::vector<double>(t.data, t.data + t.n);
    for (int c = 0; c < d; ++c) {
      double mu = 0, var = 0;
      for (int r = 0; r < rows; ++r) mu += double(x[r * d + c]) / rows;
      for (int r = 0; r < rows; ++r)
        var += (double(x[r * d + c]) - mu) * (double(x[r * d + c]) - mu) / rows;
      EXPECT_NEAR(st["running_mean"][c], mu, 1e-6 * std::abs(mu));
      EXPECT_NEAR(st["running_var"][c], var, 1e-3 * var);
      double ym = 0, yv = 0;  // the output is standardised
      for (int r = 0; r < rows; ++r) ym += double(y[r * d + c]) / rows;
      for (int r = 0; r < rows; ++r) yv += (y[r * d + c] - ym) * (y[r * d + c] - ym) / rows;
      EXPECT_NEAR(ym, 0.0, 1e-3);
      EXPECT_NEAR(yv, 1.0, 1e-3);
    }
  }
}

}  // namespace
}  // namespace pn

namespace pn {
namespace {

// --probe-norm-stats: the distances and gradient parts of paper eq. 3 against a direct
// computation, and nothing computed when off.
TEST(NormProbe, BatchNormDistancesAndGradientParts) {
  const int rows = 6, d = 3;
  ParamStore<double> s;
  NormOptions o;
  o.kind = "batch";
  auto norm = make_norm<double>(o, d, s, "bn", nullptr);
  s.allocate(1);
  std::vector<double> x = test::randn(rows * d, 2, 1.5, 0.7), dy = test::randn(rows * d, 3);
  std::vector<double> y(rows * d), dx(rows * d);
  norm->forward(x.data(), nullptr, rows, y.data(), true);
  norm->backward(x.data(), dy.data(), nullptr, rows, dx.data());
  EXPECT_TRUE(norm->probe_values.empty());  // off by default
  norm->probe = true;
  std::vector<double> mu0(norm->state()[0].data, norm->state()[0].data + d);
  std::vector<double> var0(norm->state()[1].data, norm->state()[1].data + d);
  norm->forward(x.data(), nullptr, rows, y.data(), true);
  norm->backward(x.data(), dy.data(), nullptr, rows, dx.data());
  // Direct computation (gamma = 1, so g = dy).
  double dm = 0, dv = 0, gmu = 0, gs = 0;
  for (int c = 0; c < d; ++c) {
    double m = 0, v = 0, mg = 0, mgx = 0;
    for (int r = 0; r < rows; ++r) m += x[r * d + c] / rows;
    for (int r = 0; r < rows; ++r) v += (x[r * d + c] - m) * (x[r * d + c] - m) / rows;
    const double rs = 1 / std::sqrt(v + o.eps);
    for (int r = 0; r < rows; ++r) {
      mg += dy[r * d + c] / rows;
      mgx += dy[r * d + c] * (x[r * d + c] - m) * rs / rows;
    }
    dm += (m - mu0[c]) * (m - mu0[c]);
    dv += (v - var0[c]) * (v - var0[c]);
    gmu += rs * mg * rs * mg;
    for (int r = 0; r < rows; ++r) {
      const double part = rs * mgx * (x[r * d + c] - m) * rs;
      gs += part * part / rows;
    }
  }
  std::map<std::string, double> got(norm->probe_values.begin(), norm->probe_values.end());
  EXPECT_NEAR(got.at("dist_mean"), std::sqrt(dm) / d, 1e-12);
  EXPECT_NEAR(got.at("dist_var"), std::sqrt(dv) / d, 1e-12);
  EXPECT_NEAR(got.at("g_mu"), std::sqrt(gmu), 1e-12);
  EXPECT_NEAR(got.at("g_sigma2"), std::sqrt(gs), 1e-12);
}

TEST(NormProbe, PowerNormsReportPsiDistanceAndGradientPart) {
  for (const char* kind : {"power_v", "power"}) {
    ParamStore<double> s;
    NormOptions o;
    o.kind = kind;
    o.prescale_groups = 1;  // the probe sees through the pre-scaling wrapper
    auto norm = make_norm<double>(o, 4, s, "pn", nullptr);
    s.allocate(1);
    norm->probed()->probe = true;
    std::vector<double> x = test::randn(20, 5), dy = test::randn(20, 6), y(20), dx(20);
    for (int it = 0; it < 2; ++it) {
      norm->forward(x.data(), nullptr, 5, y.data(), true);
      norm->backward(x.data(), dy.data(), nullptr, 5, dx.data());
    }
    std::map<std::string, double> got(norm->probed()->probe_values.begin(),
                                      norm->probed()->probe_values.end());
    ASSERT_EQ(got.size(), std::string(kind) == "power" ? 3u : 2u) << kind;
    EXPECT_GT(got.at("dist_psi2"), 0) << kind;
    EXPECT_GT(got.at("g_psi2"), 0) << kind;  // PN: nu != 0 after the first backward
  }
}

// PN's psi2_ratio: mean over features of the running psi^2 (before the update) over psi_B^2.
TEST(NormProbe, PowerNormReportsRunningOverBatchPsiRatio) {
  const int rows = 5, d = 4;
  ParamStore<double> s;
  NormOptions o;
  o.kind = "power";
  o.warmup = 0;
  auto norm = make_norm<double>(o, d, s, "pn", nullptr);
  s.allocate(1);
  norm->probe = true;
  std::vector<double> x = test::randn(rows * d, 7, 3.0), dy = test::randn(rows * d, 8);
  std::vector<double> y(rows * d), dx(rows * d);
  norm->forward(x.data(), nullptr, rows, y.data(), true);  // running psi^2 was 1
  double want = 0;
  for (int c = 0; c < d; ++c) {
    double pb = 0;
    for (int r = 0; r < rows; ++r) pb += x[r * d + c] * x[r * d + c] / rows;
    want += 1.0 / pb / d;
  }
  std::map<std::string, double> got(norm->probe_values.begin(), norm->probe_values.end());
  EXPECT_NEAR(got.at("psi2_ratio"), want, 1e-12);
}

}  // namespace
}  // namespace pn
