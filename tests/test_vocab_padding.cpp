// The output layer's vocabulary padded to a multiple of 64 (layers/embedding.h), as a GPU runs
// it, forced here on the CPU: the padding is invisible. The same losses, checkpoints, samples and
// beam search as without it; the padded rows stay exactly zero; no token >= V comes out.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gradcheck.h"
#include "layers/embedding.h"
#include "lm_fixtures.h"
#include "temp_dir.h"
#include "test_translation_fixtures.h"
#include "trainer/beam_search.h"
#include "trainer/checkpoint.h"
#include "trainer/sample.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

// The CPU pads to `multiple` while it lives (every model built then), then to 1 again.
struct CpuVocabMultiple {
  explicit CpuVocabMultiple(int multiple) { set_cpu_vocab_multiple(multiple); }
  ~CpuVocabMultiple() { set_cpu_vocab_multiple(1); }
};

// Every element of the rows [vocab, padded_vocab) of the table, in a buffer of the store's
// layout, is exactly 0.
void expect_padding_zero(const Embedding<float>& e, const std::vector<float>& buffer,
                         const std::string& what) {
  const ParamSpec& s = e.store->specs[size_t(e.table)];
  ASSERT_EQ(s.reserve, size_t(e.padded_vocab - e.vocab) * e.dim) << what;
  size_t nonzero = 0;
  for (size_t i = s.offset + s.numel; i < s.offset + s.numel + s.reserve; ++i)
    nonzero += buffer[i] != 0.0f;
  EXPECT_EQ(nonzero, 0u) << what << ": padded rows of " << s.name;
}

TEST(VocabPadding, TableReservesZerosWithItsShapeKept) {
  CpuVocabMultiple pad(64);
  ParamStore<float> s;
  Embedding<float> emb(s, "embed", 11, 6, 4, 0);
  Embedding<float> input_only(s, "src", 11, 6, 4, 0, /*output=*/false);
  s.allocate(3);
  EXPECT_EQ(emb.padded_vocab, 64);
  EXPECT_EQ(emb.logits_ld(), 64);
  EXPECT_EQ(input_only.padded_vocab, 11);
  EXPECT_EQ(s.specs[0].shape, (std::vector<int>{11, 6}));
  EXPECT_EQ(s.specs[1].offset, size_t(64 * 6));  // the next tensor after the reserve
  EXPECT_EQ(s.size(), size_t(64 * 6 + 11 * 6));
  EXPECT_EQ(s.packed_size(), size_t(2 * 11 * 6));
  const std::vector<float> all = s.data.to_host();
  expect_padding_zero(emb, all, "after allocate");
  const std::vector<float> packed = s.packed(all);
  ASSERT_EQ(packed.size(), s.packed_size());
  EXPECT_EQ(s.unpacked(packed.data()), all);
  // The same seed without padding draws the same tensors.
  set_cpu_vocab_multiple(1);
  ParamStore<float> plain;
  Embedding<float> e1(plain, "embed", 11, 6, 4, 0), e2(plain, "src", 11, 6, 4, 0, false);
  plain.allocate(3);
  EXPECT_EQ(plain.size(), plain.packed_size());
  EXPECT_EQ(plain.data.to_host(), packed);
}

// The output GEMMs over 64 rows give the unpadded layer's logits, dh and dE, with the padded
// logits 0 and no gradient into the padded rows.
TEST(VocabPadding, OutputLayerEqualsTheUnpaddedOne) {
  const int V = 11, d = 6, rows = 8;
  auto run = [&](int multiple, std::vector<double>* logits, std::vector<double>* dh,
                 std::vector<double>* dE, int* ld_out) {
    CpuVocabMultiple pad(multiple);
    ParamStore<double> s;
    Embedding<double> emb(s, "embed", V, d, 4, 0);
    s.allocate(5);
    const int ld = emb.logits_ld();
    *ld_out = ld;
    const auto h = test::randn(size_t(rows) * d, 8);
    const auto w = test::randn(size_t(rows) * V, 9);
    logits->assign(size_t(rows) * ld, std::numeric_limits<double>::quiet_NaN());
    emb.output_forward(h.data(), rows, logits->data(), ld);
    std::vector<double> dlogits(size_t(rows) * ld, 0.0);  // as softmax_xent leaves its padding
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < V; ++j) dlogits[size_t(r) * ld + j] = w[size_t(r) * V + j];
    dh->resize(size_t(rows) * d);
    emb.output_backward(h.data(), dlogits.data(), nullptr, 0, rows, ld, dh->data());
    *dE = s.grad;
    const ParamSpec& t = s.specs[0];
    for (size_t i = t.offset + t.numel; i < t.offset + t.numel + t.reserve; ++i)
      ASSERT_EQ((*dE)[i], 0.0) << "gradient in a padded row";
    dE->resize(t.numel);
  };
  std::vector<double> l1, dh1, dE1, l64, dh64, dE64;
  int ld1 = 0, ld64 = 0;
  run(1, &l1, &dh1, &dE1, &ld1);
  run(64, &l64, &dh64, &dE64, &ld64);
  ASSERT_EQ(ld64, 64);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < V; ++j)
      EXPECT_NEAR(l64[size_t(r) * ld64 + j], l1[size_t(r) * ld1 + j], 1e-13) << r << "," << j;
    for (int j = V; j < 64; ++j) EXPECT_EQ(l64[size_t(r) * ld64 + j], 0.0) << r << "," << j;
  }
  for (size_t i = 0; i < dh1.size(); ++i) EXPECT_NEAR(dh64[i], dh1[i], 1e-13) << i;
  for (size_t i = 0; i < dE1.size(); ++i) EXPECT_NEAR(dE64[i], dE1[i], 1e-13) << i;
}

// softmax_xent never reads the padding [V, ld) of a row and leaves its gradient exactly 0;
// the loss-only form leaves it as it was.
TEST(VocabPadding, LossNeverReadsThePaddingAndZeroesItsGradient) {
  const int rows = 3, V = 5, ld = 64;
  const std::vector<int32_t> target = {1, 4, 0};
  const std::vector<uint8_t> mask = {1, 0, 1};
  const auto z = test::randn(size_t(rows) * V, 11);
  std::vector<float> packed(z.begin(), z.end());
  std::vector<float> padded(size_t(rows) * ld, std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) padded[size_t(r) * ld + j] = float(z[size_t(r) * V + j]);
  const std::vector<float> before = padded;
  const k::LossSums e1 =
      k::softmax_xent_eval<float>(packed.data(), target.data(), mask.data(), rows, V, V, 0.1f);
  const k::LossSums e64 =
      k::softmax_xent_eval<float>(padded.data(), target.data(), mask.data(), rows, V, ld, 0.1f);
  EXPECT_EQ(e64.loss, e1.loss);
  EXPECT_EQ(e64.nll, e1.nll);
  for (size_t i = 0; i < padded.size(); ++i)  // the padding keeps its NaN, the logits their value
    EXPECT_TRUE(std::isnan(before[i]) ? std::isnan(padded[i]) : padded[i] == before[i]) << i;
  const k::LossSums g1 = k::softmax_xent<float>(packed.data(), target.data(), mask.data(), rows,
                                                V, V, 0.1f, 1.0f);
  const k::LossSums g64 = k::softmax_xent<float>(padded.data(), target.data(), mask.data(), rows,
                                                 V, ld, 0.1f, 1.0f);
  EXPECT_EQ(g64.loss, g1.loss);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < V; ++j)
      EXPECT_EQ(padded[size_t(r) * ld + j], packed[size_t(r) * V + j]) << r << "," << j;
    for (int j = V; j < ld; ++j) EXPECT_EQ(padded[size_t(r) * ld + j], 0.0f) << r << "," << j;
  }
}

// model.bin of the last checkpoint of save_dir.
CheckpointFile model_file(const std::string& save_dir) {
  return read_checkpoint_file(last_checkpoint(save_dir) + "/model.bin");
}

std::vector<float> floats(const std::vector<char>& bytes, size_t begin, size_t n) {
  std::vector<float> v(n);
  std::memcpy(v.data(), bytes.data() + begin * sizeof(float), n * sizeof(float));
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// The padded and the unpadded GEMMs agree to rounding only (OpenBLAS sums in another order for
// another N or K), and a ReLU input within rounding of 0 then turns the other way: the runs agree
// to 1e-5 in their losses and to a third of one Adam step (lr 3e-3) in their tensors. An Adam eps
// of 1e-6 (as tests/test_device.cpp's) keeps the attention's key bias, whose gradient is 0 up to
// rounding, from taking lr-sized steps on the sign of that rounding.
constexpr double kLossRtol = 1e-5, kTensorAtol = 1e-3, kAdamEps = 1e-6;

TEST(VocabPadding, LmTrainsSavesAndSamplesAsUnpadded) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  test::TempDir dir("pn_vocab_pad");
  auto save_dir = [&](const std::string& name) { return (dir.path / name).string(); };
  Options o = test::small_lm();
  o.max_tokens = 256;
  o.max_update = 6;
  o.adam_eps = kAdamEps;
  // Trains o with the CPU padding to `multiple`, saving into save_dir(name) (resuming from it).
  auto train = [&](int multiple, const std::string& name, int64_t updates) {
    CpuVocabMultiple pad(multiple);
    Options oo = o;
    oo.save_dir = save_dir(name);
    oo.max_update = updates;
    Trainer t(oo, *comm, test::builtin());
    const Embedding<float>& e = t.model().embed;
    EXPECT_NE(e.vocab % 64, 0) << "no padding to test";
    EXPECT_EQ(e.padded_vocab, (e.vocab + multiple - 1) / multiple * multiple);
    const TrainResult r = t.train();
    expect_padding_zero(e, t.params().data.to_host(), name + ": parameters");
    expect_padding_zero(e, t.params().grad.to_host(), name + ": gradients");
    return r.losses;
  };
  auto expect_near_losses = [&](const std::vector<double>& got, const std::vector<double>& want,
                                size_t first, const std::string& what) {
    ASSERT_EQ(got.size(), want.size() - first) << what;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[first + i], kLossRtol * std::fabs(want[first + i]))
          << what << ", update " << first + i + 1;
  };
  const std::vector<double> l1 = train(1, "m1", 6), l64 = train(64, "m64", 6);
  expect_near_losses(l64, l1, 0, "padded against unpadded");
  const CheckpointFile c1 = model_file(save_dir("m1")), c64 = model_file(save_dir("m64"));
  EXPECT_EQ(c64.header.at("params"), c1.header.at("params"));
  ASSERT_EQ(c64.payload.size(), c1.payload.size());
  const size_t n = c1.payload.size() / sizeof(float);
  EXPECT_LE(max_abs_diff(floats(c64.payload, 0, n), floats(c1.payload, 0, n)), kTensorAtol)
      << "parameters and Adam moments";

  // Either checkpoint restores under either multiple to exactly the tensors it holds, and
  // samples the same words of the first V only.
  SampleOptions so;
  so.count = 3;
  so.max_len = 10;
  so.seed = 5;
  for (const std::string name : {"m1", "m64"}) {
    std::vector<std::vector<int32_t>> samples[2];
    for (const int multiple : {1, 64}) {
      CpuVocabMultiple pad(multiple);
      Options oo = o;
      oo.save_dir = save_dir(name);
      Trainer t(oo, *comm, test::builtin());
      ASSERT_TRUE(t.restored());
      ParamStore<float>& p = t.params();
      const std::string what = name + " restored padding to " + std::to_string(multiple);
      EXPECT_EQ(p.packed(p.data.to_host()),
                floats((name == "m1" ? c1 : c64).payload, 0, p.packed_size()))
          << what;
      expect_padding_zero(t.model().embed, p.data.to_host(), what);
      for (double temperature : {1.0, 0.0}) {
        so.temperature = temperature;
        for (const TextSample& x : sample_text(t, so)) {
          for (int32_t tok : x.tokens) EXPECT_LT(tok, t.model().config.vocab) << what;
          samples[multiple == 64].push_back(x.tokens);
        }
      }
    }
    EXPECT_EQ(samples[1], samples[0]) << name;
  }

  // A padded run resumes bit for bit; a checkpoint of either multiple resumes under the other.
  train(64, "resume64", 3);
  EXPECT_EQ(train(64, "resume64", 6), std::vector<double>(l64.begin() + 3, l64.end()));
  EXPECT_TRUE(model_file(save_dir("resume64")).payload == c64.payload);
  train(64, "64then1", 3);
  expect_near_losses(train(1, "64then1", 6), l1, 3, "saved padded, resumed unpadded");
  train(1, "1then64", 3);
  expect_near_losses(train(64, "1then64", 6), l1, 3, "saved unpadded, resumed padded");
}

TEST(VocabPadding, TranslationTrainsAndDecodesAsUnpadded) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  for (const bool shared : {true, false}) {
    Options o = test::small_mt();
    o.share_all_embeddings = shared;
    o.max_update = 6;
    o.adam_eps = kAdamEps;
    struct Run {
      std::vector<double> losses;
      std::vector<Hypothesis> hyps;
      std::vector<float> packed;
    };
    auto run = [&](int multiple) {
      CpuVocabMultiple pad(multiple);
      Trainer t(o, *comm, test::toy_corpus());
      Run r;
      r.losses = t.train().losses;
      TranslationModel<float>& m = t.translation_model();
      const Embedding<float>& out = m.target_embedding();
      EXPECT_EQ(out.padded_vocab, (out.vocab + multiple - 1) / multiple * multiple);
      EXPECT_EQ(m.embed_src.padded_vocab, shared ? out.padded_vocab : m.embed_src.vocab);
      expect_padding_zero(out, t.params().data.to_host(), "parameters after training");
      expect_padding_zero(out, t.params().grad.to_host(), "gradients after training");
      GenerateOptions g;
      g.beam = 3;
      g.max_len_b = 12;
      r.hyps = beam_search(m, test::toy_corpus().test.src, g);
      for (const Hypothesis& h : r.hyps)
        for (int32_t tok : h.tokens) EXPECT_LT(tok, m.config.tgt_vocab);
      r.packed = t.params().packed(t.params().data.to_host());
      return r;
    };
    const Run a = run(1), b = run(64);
    const std::string what = shared ? "shared embeddings" : "separate embeddings";
    ASSERT_FALSE(a.hyps.empty()) << what;
    ASSERT_EQ(b.losses.size(), a.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i)
      EXPECT_NEAR(b.losses[i], a.losses[i], kLossRtol * std::fabs(a.losses[i]))
          << what << ", update " << i + 1;
    ASSERT_EQ(b.hyps.size(), a.hyps.size());
    for (size_t i = 0; i < a.hyps.size(); ++i)
      EXPECT_EQ(b.hyps[i].tokens, a.hyps[i].tokens) << what << ", sentence " << i;
    EXPECT_LE(max_abs_diff(b.packed, a.packed), kTensorAtol) << what << ": the trained tensors";
  }
}

}  // namespace
}  // namespace pn
