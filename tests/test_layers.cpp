// Finite-difference checks (double precision) of every layer, and kernel checks.
#include <gtest/gtest.h>
#include <omp.h>

#include "comm/communicator.h"
#include "gradcheck.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/kernels.h"
#include "layers/attention.h"
#include "layers/embedding.h"
#include "layers/feed_forward.h"
#include "layers/linear.h"
#include "layers/norms/norm.h"

namespace pn {
namespace {

using test::dot;
using test::expect_gradient;
using test::randn;

using test::randomize;

TEST(Linear, GradientMatchesFiniteDifferences) {
  const int rows = 5, in = 7, out = 4;
  ParamStore<double> s;
  Linear<double> lin(s, "fc", in, out);
  s.allocate(1);
  randomize(s, 2);
  auto x = randn(size_t(rows) * in, 3), w = randn(size_t(rows) * out, 4);
  std::vector<double> y(rows * out), dx(x.size());
  auto loss = [&] {
    lin.forward(x.data(), rows, y.data());
    return dot(y, w);
  };
  loss();
  lin.backward(x.data(), w.data(), rows, dx.data());
  expect_gradient("dx", x, dx, loss);
  std::vector<double> dparam = s.grad;
  expect_gradient("dW,db", s.data, dparam, loss);
}

// The output projection with its logits' rows padded (ld 16 for 11 words, as logits_ld() pads):
// the padding never enters the gradients, and output_forward leaves it untouched.
TEST(Embedding, GradientOfInputAndTiedOutput) {
  const int V = 11, d = 6, T = 4, rows = 8;
  ParamStore<double> s;
  Embedding<double> emb(s, "embed", V, d, T, 0);
  const int ld = emb.logits_ld();
  ASSERT_EQ(ld, 16);
  s.allocate(5);
  std::vector<int32_t> tok = {1, 3, 3, 10, 0, 2, 7, 3};
  auto w = randn(size_t(rows) * d, 6), wl = randn(size_t(rows) * ld, 7);
  std::vector<double> y(rows * d), logits(rows * ld, 0.0), dh(rows * d);
  auto loss_in = [&] {
    emb.forward(tok.data(), rows, T, y.data());
    return dot(y, w);
  };
  loss_in();
  emb.backward(tok.data(), w.data(), rows);
  std::vector<double> dE = s.grad;
  expect_gradient("dE (input)", s.data, dE, loss_in);

  std::fill(s.grad.begin(), s.grad.end(), 0.0);
  auto h = randn(size_t(rows) * d, 8);
  auto loss_out = [&] {
    emb.output_forward(h.data(), rows, logits.data(), ld);
    return dot(logits, wl);
  };
  loss_out();
  for (int r = 0; r < rows; ++r)
    for (int j = V; j < ld; ++j) ASSERT_EQ(logits[size_t(r) * ld + j], 0.0) << "padding written";
  emb.output_backward(h.data(), wl.data(), nullptr, 0, rows, ld, dh.data());
  expect_gradient("dh (output)", h, dh, loss_out);
  dE = s.grad;
  expect_gradient("dE (output)", s.data, dE, loss_out);
}

TEST(Embedding, PositionsAreSinusoidal) {
  std::vector<double> P(4 * 8);
  k::sinusoidal_positions<double>(4, 8, P.data());
  EXPECT_DOUBLE_EQ(P[0 * 8 + 0], 0.0);           // sin(0)
  EXPECT_DOUBLE_EQ(P[0 * 8 + 4], 1.0);           // cos(0)
  EXPECT_NEAR(P[1 * 8 + 0], std::sin(1.0), 1e-15);  // first frequency is 1
  EXPECT_NEAR(P[2 * 8 + 3], std::sin(2.0 * 1e-4), 1e-15);  // last frequency is 1/10000
}

TEST(Attention, GradientMatchesFiniteDifferences) {
  const int nseq = 2, T = 5, d = 8, H = 2, rows = nseq * T;
  ParamStore<double> s;
  Workspace<double> ws;
  CausalSelfAttention<double> att(s, ws, "attn", d, H);
  s.allocate(9);
  randomize(s, 10);
  auto x = randn(size_t(rows) * d, 11), w = randn(size_t(rows) * d, 12);
  std::vector<double> y(rows * d), dx(rows * d);
  auto loss = [&] {
    att.forward(x.data(), nseq, T, y.data());
    return dot(y, w);
  };
  loss();
  att.backward(x.data(), w.data(), dx.data());
  expect_gradient("dx", x, dx, loss);
  std::vector<double> dparam = s.grad;
  expect_gradient("dparams", s.data, dparam, loss);
}

TEST(Attention, IsCausal) {
  // Changing the last token must leave every earlier output unchanged.
  const int T = 6, d = 4, H = 1;
  ParamStore<double> s;
  Workspace<double> ws;
  CausalSelfAttention<double> att(s, ws, "attn", d, H);
  s.allocate(13);
  auto x = randn(size_t(T) * d, 14);
  std::vector<double> y1(T * d), y2(T * d);
  att.forward(x.data(), 1, T, y1.data());
  for (int c = 0; c < d; ++c) x[(T - 1) * d + c] += 3.0;
  att.forward(x.data(), 1, T, y2.data());
  for (int i = 0; i < (T - 1) * d; ++i) EXPECT_DOUBLE_EQ(y1[i], y2[i]) << i;
  bool last_changed = false;
  for (int c = 0; c < d; ++c) last_changed |= y1[(T - 1) * d + c] != y2[(T - 1) * d + c];
  EXPECT_TRUE(last_changed);
}

TEST(FeedForward, GradientMatchesFiniteDifferences) {
  const int rows = 6, d = 5, f = 9;
  ParamStore<double> s;
  Workspace<double> ws;
  FeedForward<double> ff(s, ws, "ff", d, f);
  s.allocate(15);
  randomize(s, 16);
  auto x = randn(size_t(rows) * d, 17), w = randn(size_t(rows) * d, 18);
  std::vector<double> y(rows * d), dx(rows * d);
  auto loss = [&] {
    ff.forward(x.data(), rows, y.data());
    return dot(y, w);
  };
  loss();
  ff.backward(x.data(), w.data(), dx.data());
  expect_gradient("dx", x, dx, loss);
  std::vector<double> dparam = s.grad;
  expect_gradient("dparams", s.data, dparam, loss);
}

// LayerNorm is checked with the other norms in test_norms.cpp (Norms.GradientsMatchFiniteDifferences).

TEST(Loss, LabelSmoothedCrossEntropyGradientAndValue) {
  const int rows = 4, V = 7;
  const double eps = 0.1;
  auto z = randn(size_t(rows) * V, 23);
  std::vector<int32_t> t = {0, 3, 6, 2};
  std::vector<uint8_t> mask = {1, 1, 0, 1};
  auto loss = [&] { return k::softmax_xent_eval<double>(z.data(), t.data(), mask.data(), rows, V, V, eps).loss; };
  std::vector<double> g = z;
  const k::LossSums sums = k::softmax_xent<double>(g.data(), t.data(), mask.data(), rows, V, V, eps, 1.0);
  EXPECT_EQ(sums.ntokens, 3);
  expect_gradient("dlogits", z, g, loss);
  // Value against the definition for row 0.
  double lse = 0;
  for (int j = 0; j < V; ++j) lse += std::exp(z[j]);
  lse = std::log(lse);
  const double nll0 = lse - z[0];
  double smooth = 0;
  for (int j = 0; j < V; ++j) smooth += lse - z[j];
  const double eps_i = eps / (V - 1);
  const auto one = k::softmax_xent_eval<double>(z.data(), t.data(), nullptr, 1, V, V, eps);
  EXPECT_NEAR(one.loss, (1 - eps - eps_i) * nll0 + eps_i * smooth, 1e-12);
  EXPECT_NEAR(one.nll, nll0, 1e-12);
}

// Rows ld apart (the models pad them): the same sums and gradient as packed rows; the padding
// (1e300 here) never read, left alone by the loss-only form and set to exactly 0 in the
// gradient, every row (masked ones too), so that GEMMs over a padded vocabulary read zeros.
TEST(Loss, PaddedRowsAreThePackedRows) {
  const int rows = 5, V = 13, ld = 16;
  const auto packed = randn(size_t(rows) * V, 41, 2.0);
  std::vector<double> padded(size_t(rows) * ld, 1e300);
  for (int r = 0; r < rows; ++r)
    std::copy_n(packed.begin() + size_t(r) * V, V, padded.begin() + size_t(r) * ld);
  std::vector<int32_t> t = {0, 12, 5, 7, 3};
  std::vector<uint8_t> mask = {1, 1, 0, 1, 1};
  const auto e1 = k::softmax_xent_eval<double>(packed.data(), t.data(), mask.data(), rows, V, V, 0.1);
  const auto e2 = k::softmax_xent_eval<double>(padded.data(), t.data(), mask.data(), rows, V, ld, 0.1);
  EXPECT_EQ(e1.loss, e2.loss);
  EXPECT_EQ(e1.ntokens, 4);
  for (int r = 0; r < rows; ++r)
    for (int j = V; j < ld; ++j) EXPECT_EQ(padded[size_t(r) * ld + j], 1e300) << "eval wrote";
  std::vector<double> g1 = packed, g2 = padded;
  const auto s1 = k::softmax_xent<double>(g1.data(), t.data(), mask.data(), rows, V, V, 0.1, 0.5);
  const auto s2 = k::softmax_xent<double>(g2.data(), t.data(), mask.data(), rows, V, ld, 0.1, 0.5);
  EXPECT_EQ(s1.loss, s2.loss);
  EXPECT_EQ(s1.nll, s2.nll);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < V; ++j) EXPECT_EQ(g1[size_t(r) * V + j], g2[size_t(r) * ld + j]);
    for (int j = V; j < ld; ++j) EXPECT_EQ(g2[size_t(r) * ld + j], 0.0) << "padding not zeroed";
  }
}

TEST(Loss, FloatPathMatchesDoubleOnAWideVocabulary) {
  // The float path takes its exponentials from the vectorised fast_exp: the loss, nll and
  // gradient must still match the double path (std::exp) to float rounding, with large and
  // very negative logits in the row.
  const int rows = 3, V = 5000;
  auto zd = randn(size_t(rows) * V, 29, 4.0);
  zd[7] = 40, zd[V + 11] = -120;
  std::vector<float> zf(zd.begin(), zd.end());
  std::vector<int32_t> t = {7, 11, 4999};
  std::vector<double> gd(zf.begin(), zf.end());  // same rounded inputs
  const auto d = k::softmax_xent<double>(gd.data(), t.data(), nullptr, rows, V, V, 0.1, 1.0);
  const auto f = k::softmax_xent<float>(zf.data(), t.data(), nullptr, rows, V, V, 0.1f, 1.0f);
  EXPECT_NEAR(f.loss, d.loss, 1e-5 * d.loss);
  EXPECT_NEAR(f.nll, d.nll, 1e-5 * d.nll);
  double max_err = 0;
  for (size_t i = 0; i < gd.size(); ++i) max_err = std::max(max_err, std::abs(zf[i] - gd[i]));
  EXPECT_LT(max_err, 1e-6);
}

// The loss and the gradient's sum of squares (which clipping reads) are the same to the bit on
// any number of threads: their sums run in fixed chunks, added in chunk order (an OpenMP
// reduction adds the threads' sums in the order they finish; three threads or more can change
// the last bits from run to run).
TEST(Kernels, LossAndGradientNormDoNotDependOnTheThreads) {
  const int rows = 4099, V = 37;
  const auto z = randn(size_t(rows) * V, 31, 3.0);
  std::vector<int32_t> t(rows);
  for (int i = 0; i < rows; ++i) t[i] = (i * 7) % V;
  const auto g = randn(300007, 32, 1.0);
  const std::vector<float> gf(g.begin(), g.end());
  auto sums = [&](int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> zf(z.begin(), z.end());
    const auto l = k::softmax_xent<float>(zf.data(), t.data(), nullptr, rows, V, V, 0.1f, 1.0f);
    double stats[2] = {0, 0};
    k::grad_stats_acc<float>(gf.data(), gf.size(), stats);
    omp_set_num_threads(before);
    return std::vector<double>{l.loss, l.nll, l.ntokens, stats[0], k::sum_squares(gf.data(),
                                                                                 gf.size())};
  };
  const std::vector<double> one = sums(1);
  EXPECT_EQ(one[2], double(rows));
  EXPECT_EQ(one[3], one[4]);
  for (int threads : {2, 3, 5, 8}) EXPECT_EQ(sums(threads), one) << threads << " threads";
}

TEST(Kernels, FastExpIsWithinTwoUlpOfExp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f)
    worst = std::max(worst, std::abs(k::fast_exp(x) / std::exp(double(x)) - 1));
  EXPECT_LT(worst, 2.5e-7);
  EXPECT_EQ(k::fast_exp(0.0f), 1.0f);
  EXPECT_GT(k::fast_exp(-1000.0f), 0.0f);  // clamped, never NaN
  EXPECT_LT(k::fast_exp(-1000.0f), 1e-37f);
}

TEST(Kernels, DropoutKeepsExpectedFractionAndIsDeterministic) {
  const size_t n = 100000;
  std::vector<uint8_t> a(n), b(n), c(n);
  const uint64_t seed40 = 40, seed42 = 42;
  k::dropout_mask(&seed42, 0, n, 0.3f, a.data());
  k::dropout_mask(&seed40, 2, n, 0.3f, b.data());  // the site adds to the micro-step's seed
  k::dropout_mask(&seed42, 1, n, 0.3f, c.data());
  size_t kept = 0, same = 0;
  for (size_t i = 0; i < n; ++i) kept += a[i], same += a[i] == c[i];
  EXPECT_EQ(a, b);
  EXPECT_NEAR(double(kept) / n, 0.7, 0.01);
  EXPECT_LT(same, n);  // another seed gives another mask
}

TEST(Kernels, AdamFirstStepMovesBySignTimesLr) {
  // At t=1 the bias-corrected update is lr * g / (|g| + eps) = lr * sign(g).
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2, 0.0f), v(2, 0.0f);
  k::adam_update(p.data(), g.data(), m.data(), v.data(), 2, 1.0f, 1.0f, 0.1f, 0.9f, 0.98f, 1e-8f,
                 0.0f, 1);
  EXPECT_NEAR(p[0], 0.9f, 1e-5);
  EXPECT_NEAR(p[1], -1.9f, 1e-5);
}

// Adam's two gradient factors (per token, clipping) are the passes of scale_inplace they
// replace, to the bit, and leave the gradient as it is.
TEST(Kernels, AdamScalesTheGradientAsTwoPassesWould) {
  const size_t n = 100003;
  const auto p0 = randn(n, 41, 1.0), g0 = randn(n, 42, 3.0);
  std::vector<float> p(p0.begin(), p0.end()), g(g0.begin(), g0.end()), m(n, 0.1f), v(n, 0.2f);
  std::vector<float> p2 = p, g2 = g, m2 = m, v2 = v;
  const float scale = 1.0f / 3072, clip = 0.37f;
  k::adam_update(p.data(), g.data(), m.data(), v.data(), n, scale, clip, 1e-3f, 0.9f, 0.98f,
                 1e-8f, 0.01f, 2);
  k::scale_inplace<float>(g2.data(), n, scale);
  k::scale_inplace<float>(g2.data(), n, clip);
  k::adam_update(p2.data(), g2.data(), m2.data(), v2.data(), n, 1.0f, 1.0f, 1e-3f, 0.9f, 0.98f,
                 1e-8f, 0.01f, 2);
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  EXPECT_EQ(g, std::vector<float>(g0.begin(), g0.end()));
}

}  // namespace
}  // namespace pn
