// Translation: parallel data and batches, the encoder-decoder's gradients, padding
// invariance of outputs and batch statistics, beam search against greedy decoding, and the
// shared training loop (accumulation, exact resume).
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "gradcheck.h"
#include "model/translation.h"
#include "temp_dir.h"
#include "test_translation_fixtures.h"
#include "trainer/average_checkpoints.h"
#include "trainer/beam_search.h"
#include "trainer/checkpoint.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;

namespace pn {
namespace {

const ParallelCorpus& toy() { return test::toy_corpus(); }

// ---- data --------------------------------------------------------------------------------

TEST(TranslationData, BatchesHoldSimilarLengthsWithinTheTokenCap) {
  const ParallelSplit& train = toy().train;
  const auto batches = length_batches(train, 96);
  std::set<int64_t> seen;
  size_t padded = 0, real = 0, padded_src = 0, real_src = 0;
  for (const auto& b : batches) {
    size_t longest = 0;
    for (int64_t i : b) {
      seen.insert(i);
      longest = std::max({longest, train.src[i].size(), train.tgt[i].size()});
      real += train.tgt[i].size();
      real_src += train.src[i].size();
    }
    EXPECT_LE(longest * b.size(), 96u);
    ParallelBatch pb;
    make_parallel_batch(train, b, &pb);
    padded += size_t(pb.nseq) * pb.tgt_len;
    padded_src += size_t(pb.nseq) * pb.src_len;
  }
  EXPECT_EQ(seen.size(), train.size());  // every pair exactly once
  EXPECT_LT(double(padded) / real, 1.05);  // sorted by length: little target padding
  EXPECT_GT(padded_src, real_src);         // but sources are padded: the masks matter
}

TEST(TranslationData, DecoderInputIsEosThenTheShiftedTarget) {
  const ParallelSplit& s = toy().train;
  ParallelBatch b;
  make_parallel_batch(s, {0, 1}, &b);
  ASSERT_EQ(b.nseq, 2);
  for (int r = 0; r < 2; ++r) {
    const auto& tgt = s.tgt[r];
    EXPECT_EQ(tgt.back(), Vocabulary::kEos);
    EXPECT_EQ(b.prev[size_t(r) * b.tgt_len], Vocabulary::kEos);
    for (size_t t = 0; t < size_t(b.tgt_len); ++t) {
      const size_t i = size_t(r) * b.tgt_len + t;
      EXPECT_EQ(b.tgt_mask[i], t < tgt.size() ? 1 : 0);
      EXPECT_EQ(b.tgt[i], t < tgt.size() ? tgt[t] : Vocabulary::kPad);
      if (t > 0 && t < tgt.size()) {
        EXPECT_EQ(b.prev[i], tgt[t - 1]);
      }
    }
  }
  // An empty rank share is one fully masked pair: no token for any statistic or the loss.
  make_parallel_batch(s, {}, &b);
  EXPECT_EQ(b.nseq, 1);
  EXPECT_EQ(b.src_mask[0] + b.tgt_mask[0], 0);
  // Pieces of an update batch are contiguous and cover it in order.
  const std::vector<int64_t> ub = {5, 6, 7, 8, 9};
  std::vector<int64_t> joined;
  for (int p = 0; p < 4; ++p)
    for (int64_t i : batch_piece(ub, p, 4)) joined.push_back(i);
  EXPECT_EQ(joined, ub);
}

TEST(TranslationData, JointVocabularyAndClearErrors) {
  EXPECT_EQ(toy().src_vocab.words, toy().tgt_vocab.words);
  EXPECT_EQ(toy().src_vocab.words[0], "<pad>");
  EXPECT_EQ(toy().src_vocab.words[1], "<eos>");
  EXPECT_EQ(toy().src_vocab.words[2], "<unk>");
  const fs::path dir = fs::temp_directory_path() / "pn_mt_missing_train";
  fs::create_directories(dir);
  for (const char* f : {"valid.de", "valid.en", "test.de", "test.en"})
    std::ofstream(dir / f) << "a b\n";
  try {
    load_parallel_corpus(dir.string(), "de", "en", true);
    ADD_FAILURE() << "a missing train.de must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("train.de"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--train-subset"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "test.en") << "a b\nc d\n";  // 2 lines against test.de's 1
  try {
    load_parallel_corpus(dir.string(), "de", "en", true, "valid");
    ADD_FAILURE() << "misaligned sides must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line-aligned"), std::string::npos) << e.what();
  }
  const ParallelCorpus ok = [&] {
    std::ofstream(dir / "test.en") << "a b\n";
    return load_parallel_corpus(dir.string(), "de", "en", true, "valid");
  }();
  EXPECT_EQ(ok.train.size(), 1u);
  fs::remove_all(dir);
}

// ---- model -------------------------------------------------------------------------------

TranslationConfig tiny_config(const std::string& enc_norm, int vocab) {
  TranslationConfig c;
  c.src_vocab = c.tgt_vocab = vocab;
  c.share_all_embeddings = true;
  c.dim = 8;
  c.encoder_layers = c.decoder_layers = 1;
  c.encoder_heads = c.decoder_heads = 2;
  c.encoder_ffn_dim = c.decoder_ffn_dim = 16;
  c.dropout = 0;
  c.label_smoothing = 0.1;
  c.max_len = 64;
  for (NormOptions* n : {&c.enc_norm_self, &c.enc_norm_ff, &c.enc_norm_final}) n->kind = enc_norm;
  return c;
}

TEST(TranslationModel, GradientsMatchFiniteDifferences) {
  // Double precision, batch norms in the encoder (exact gradient over the real tokens only),
  // layer norms in the decoder, sentences of different lengths so the masks matter.
  TranslationModel<double> m(tiny_config("batch", toy().src_vocab.size()), 3, nullptr);
  test::randomize(m.params, 4);
  // Three pairs of three different source lengths.
  std::vector<int64_t> ids;
  std::set<size_t> lengths;
  for (int64_t i = 0; ids.size() < 3; ++i)
    if (lengths.insert(toy().train.src[i].size()).second) ids.push_back(i);
  ParallelBatch b;
  make_parallel_batch(toy().train, ids, &b);
  ASSERT_GT(std::count(b.src_mask.begin(), b.src_mask.end(), 0), 0);
  std::fill(m.params.grad.begin(), m.params.grad.end(), 0.0);
  m.forward_backward(b, 1.0, 0);
  const std::vector<double> analytic = m.params.grad;
  test::expect_gradient("params", m.params.data, analytic,
                        [&] { return m.evaluate(b, /*training=*/true).loss; }, 1e-6, 400);
}

// The same pairs padded further: src_len + extra_src, tgt_len + extra_tgt.
ParallelBatch pad_more(const ParallelBatch& a, int extra_src, int extra_tgt) {
  ParallelBatch b = a;
  b.src_len += extra_src, b.tgt_len += extra_tgt;
  auto widen = [](const auto& v, int rows, int from, int to, auto fill) {
    std::remove_const_t<std::remove_reference_t<decltype(v)>> out(size_t(rows) * to, fill);
    for (int r = 0; r < rows; ++r)
      std::copy_n(v.begin() + size_t(r) * from, from, out.begin() + size_t(r) * to);
    return out;
  };
  b.src = widen(a.src, a.nseq, a.src_len, b.src_len, Vocabulary::kPad);
  b.src_mask = widen(a.src_mask, a.nseq, a.src_len, b.src_len, uint8_t(0));
  b.prev = widen(a.prev, a.nseq, a.tgt_len, b.tgt_len, Vocabulary::kPad);
  b.tgt = widen(a.tgt, a.nseq, a.tgt_len, b.tgt_len, Vocabulary::kPad);
  b.tgt_mask = widen(a.tgt_mask, a.nseq, a.tgt_len, b.tgt_len, uint8_t(0));
  return b;
}

std::vector<double> norm_state(TranslationModel<double>& m) {
  std::vector<double> s;
  for (Norm<double>* n : m.norms())
    for (const StateTensor& t : n->state()) s.insert(s.end(), t.data, t.data + t.n);
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

void expect_padding_invariant(const std::string& enc_norm) {
  SCOPED_TRACE(enc_norm);
  const TranslationConfig c = tiny_config(enc_norm, toy().src_vocab.size());
  TranslationModel<double> plain(c, 5, nullptr), padded(c, 5, nullptr);
  ParallelBatch a;
  make_parallel_batch(toy().train, {3, 4, 5, 6}, &a);
  const ParallelBatch b = pad_more(a, 5, 3);
  for (int step = 0; step < 3; ++step) {  // the later steps use the running state (PN's nu)
    std::fill(plain.params.grad.begin(), plain.params.grad.end(), 0.0);
    std::fill(padded.params.grad.begin(), padded.params.grad.end(), 0.0);
    const k::LossSums la = plain.forward_backward(a, 1.0, 0);
    const k::LossSums lb = padded.forward_backward(b, 1.0, 0);
    EXPECT_NEAR(la.loss, lb.loss, 1e-10 * la.loss);
    EXPECT_EQ(la.ntokens, lb.ntokens);
    // Real tokens' encoder outputs and logits.
    double out_diff = 0;
    for (int s = 0; s < a.nseq; ++s)
      for (int t = 0; t < a.src_len; ++t)
        if (a.src_mask[size_t(s) * a.src_len + t])
          for (int j = 0; j < c.dim; ++j)
            out_diff = std::max(out_diff,
                                std::abs(plain.enc_out[(size_t(s) * a.src_len + t) * c.dim + j] -
                                         padded.enc_out[(size_t(s) * b.src_len + t) * c.dim + j]));
    EXPECT_LT(out_diff, 1e-10) << "step " << step;
    // Every batch statistic (running mean/var, psi^2, nu, t) and every gradient.
    EXPECT_LT(max_abs_diff(norm_state(plain), norm_state(padded)), 1e-10) << "step " << step;
    EXPECT_LT(max_abs_diff(plain.params.grad, padded.params.grad), 1e-10) << "step " << step;
    for (size_t i = 0; i < plain.params.data.size(); ++i)  // same small SGD step on both
      plain.params.data[i] -= 0.05 * plain.params.grad[i] / la.ntokens,
          padded.params.data[i] -= 0.05 * padded.params.grad[i] / lb.ntokens;
  }
  EXPECT_FALSE(norm_state(plain).empty());
  // Inference with the running state: the same real-token logits.
  plain.forward_logits(a);
  padded.forward_logits(b);
  double logit_diff = 0;
  const int V = c.tgt_vocab, ld = plain.target_embedding().logits_ld();
  for (int s = 0; s < a.nseq; ++s)
    for (int t = 0; t < a.tgt_len; ++t)
      if (a.tgt_mask[size_t(s) * a.tgt_len + t])
        for (int v = 0; v < V; ++v)
          logit_diff = std::max(logit_diff,
                                std::abs(plain.logits[(size_t(s) * a.tgt_len + t) * ld + v] -
                                         padded.logits[(size_t(s) * b.tgt_len + t) * ld + v]));
  EXPECT_LT(logit_diff, 1e-10);
}

TEST(TranslationModel, EncoderPaddingChangesNoRealTokenNorAnyStatistic) {
  expect_padding_invariant("batch");
  expect_padding_invariant("power");
}

// The loss in chunks of 3 target rows (Embedding::output_loss) is the loss of the whole logits.
TEST(TranslationModel, ChunkedLossIsTheWholeOne) {
  TranslationConfig c = tiny_config("power", toy().src_vocab.size());
  c.dropout = 0.1;
  TranslationModel<double> whole(c, 5, nullptr);
  c.max_logits = size_t(whole.target_embedding().logits_ld()) * 3;
  TranslationModel<double> chunked(c, 5, nullptr);
  ParallelBatch b;
  make_parallel_batch(toy().train, {3, 4, 5, 6}, &b);
  ASSERT_GT(b.nseq * b.tgt_len, 3 * 3);
  for (int step = 0; step < 2; ++step) {
    const k::LossSums w = whole.forward_backward(b, 1.0, 9 + step);
    const k::LossSums h = chunked.forward_backward(b, 1.0, 9 + step);
    EXPECT_NEAR(h.loss, w.loss, 1e-12 * w.loss);
    EXPECT_EQ(h.ntokens, w.ntokens);
    EXPECT_NEAR(chunked.evaluate(b).nll, whole.evaluate(b).nll, 1e-12 * w.nll);
  }
  test::expect_same_gradients(chunked.params.grad, whole.params.grad, 1e-12);
}

// ---- decoding ----------------------------------------------------------------------------

TEST(BeamSearch, BeamOneEqualsGreedyDecoding) {
  TranslationConfig c = tiny_config("layer", toy().src_vocab.size());
  c.dim = 16;
  TranslationModel<float> m(c, 7, nullptr);
  std::mt19937_64 rng(8);
  std::normal_distribution<float> noise(0.0f, 0.4f);
  for (float& p : m.params.data) p += noise(rng);  // peaky, varied predictions
  std::vector<std::vector<int32_t>> srcs(toy().test.src.begin(), toy().test.src.begin() + 6);
  GenerateOptions g;
  g.beam = 1;
  g.max_len_a = 0, g.max_len_b = 12;
  g.max_tokens = 40;  // several decoding batches, padded sources within each
  const std::vector<Hypothesis> beam = beam_search(m, srcs, g);
  size_t nonempty = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    const std::vector<int32_t> greedy = greedy_decode_reference(m, srcs[i], 12);
    EXPECT_EQ(beam[i].tokens, greedy) << "sentence " << i;
    nonempty += !greedy.empty();
  }
  EXPECT_GT(nonempty, 0u);
  g.beam = 4;
  const std::vector<Hypothesis> b4 = beam_search(m, srcs, g);
  // Decoding a sentence alone or inside a padded batch gives the same translation.
  g.max_tokens = 1;  // one sentence per batch
  const std::vector<Hypothesis> alone = beam_search(m, srcs, g);
  for (size_t i = 0; i < srcs.size(); ++i) EXPECT_EQ(alone[i].tokens, b4[i].tokens);
}

// ---- the training loop -------------------------------------------------------------------

TEST(TranslationTrainer, LossFallsAndBeamSearchTranslatesBetterThanChance) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  Options o = test::small_mt();
  o.encoder_embed_dim = o.decoder_embed_dim = 32;
  o.encoder_ffn_embed_dim = o.decoder_ffn_embed_dim = 64;
  o.max_tokens = 256;
  o.max_update = 120;
  o.warmup_updates = 10;
  o.lr = 5e-3;
  o.validate_interval_updates = 120;
  Trainer t(o, *comm, toy());
  const TrainResult r = t.train();
  EXPECT_LT(r.losses.back(), r.losses.front() - 1.2) << r.losses.front() << " -> "
                                                      << r.losses.back();
  EXPECT_LT(r.valid_nll, std::log(12.0));  // below a uniform guess over the 12 target words
  GenerateOptions g;
  g.beam = 3;
  g.max_len_a = 1.0, g.max_len_b = 2;
  const GenerateResult gen = t.generate(toy().test, g, false, false);
  EXPECT_EQ(gen.hyps.size(), toy().test.size());
  EXPECT_GT(gen.bleu.precision(0), 0.3) << gen.bleu.summary();  // chance: 1/12
  EXPECT_GT(gen.bleu.hyp_len, 0.7 * gen.bleu.ref_len) << gen.bleu.summary();
}

TEST(TranslationTrainer, GradientAccumulationEqualsOneLargeMicroBatch) {
  // contract §4 with padded batches: the update's pairs depend on the global tokens per update only.
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  Options a = test::small_mt(), b = test::small_mt();
  a.max_tokens = 256, a.update_freq = 1;
  b.max_tokens = 64, b.update_freq = 4;
  const TrainResult ra = Trainer(a, *comm, toy()).train();
  const TrainResult rb = Trainer(b, *comm, toy()).train();
  ASSERT_EQ(ra.losses.size(), rb.losses.size());
  for (size_t u = 0; u < ra.losses.size(); ++u)
    EXPECT_NEAR(ra.losses[u], rb.losses[u], 2e-5 * ra.losses[u]) << "update " << u + 1;
}

TEST(TranslationTrainer, ResumesExactlyWithPowerNormAndDropout) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  const fs::path dir = fs::temp_directory_path() / "pn_mt_resume";
  fs::remove_all(dir);
  Options o = test::small_mt();
  o.encoder_norm_self = o.encoder_norm_ff = "power";
  o.dropout = 0.1;
  o.attention_dropout = 0.1;
  o.max_update = 6;
  o.save_dir = dir.string();
  o.save_interval_updates = 3;
  Trainer straight(o, *comm, toy());
  const TrainResult full = straight.train();
  Options r = o;
  r.save_dir = (dir / "again").string();
  r.restore_file = (dir / "checkpoint_3").string();
  Trainer resumed(r, *comm, toy());
  ASSERT_EQ(resumed.start_update(), 3);
  const TrainResult tail = resumed.train();
  ASSERT_EQ(tail.losses.size(), 3u);
  for (size_t u = 0; u < 3; ++u) EXPECT_EQ(tail.losses[u], full.losses[u + 3]) << u;
  EXPECT_EQ(resumed.params().data, straight.params().data);
  fs::remove_all(dir);
}

TEST(TranslationTrainer, AveragedCheckpointHoldsTheMeanParametersAndEvaluates) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  const fs::path dir = fs::temp_directory_path() / "pn_mt_average";
  fs::remove_all(dir);
  Options o = test::small_mt();
  o.encoder_norm_self = "power";
  o.max_update = 6;
  o.save_dir = dir.string();
  o.save_interval_updates = 2;
  Trainer(o, *comm, toy()).train();
  const auto inputs = newest_checkpoints(dir.string(), 2);
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(fs::path(inputs[1]).filename(), "checkpoint_6");
  average_checkpoints(inputs, (dir / "avg").string());
  const CheckpointFile a = read_checkpoint_file(inputs[0] + "/model.bin");
  const CheckpointFile b = read_checkpoint_file(inputs[1] + "/model.bin");
  const CheckpointFile m = read_checkpoint_file((dir / "avg/model.bin").string());
  const float* pa = reinterpret_cast<const float*>(a.payload.data());
  const float* pb = reinterpret_cast<const float*>(b.payload.data());
  const float* pm = reinterpret_cast<const float*>(m.payload.data());
  const size_t n = m.payload.size() / (3 * sizeof(float));
  for (size_t i = 0; i < n; i += 97) EXPECT_FLOAT_EQ(pm[i], float((double(pa[i]) + pb[i]) / 2));
  Options e = o;
  e.save_dir.clear();
  e.restore_file = (dir / "avg").string();
  Trainer averaged(e, *comm, toy());
  EXPECT_TRUE(averaged.restored());
  EXPECT_GT(averaged.evaluate(toy().valid).nll, 0.0);
  EXPECT_THROW(newest_checkpoints(dir.string(), 9), std::runtime_error);
  fs::remove_all(dir);
}

TEST(TranslationTrainer, ProbesTheEncodersBatchStatistics) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  const fs::path metrics = fs::temp_directory_path() / "pn_mt_probe.jsonl";
  Options o = test::small_mt();
  o.encoder_norm_self = o.encoder_norm_ff = "power";
  o.max_update = 2;
  o.probe_norm_stats = "all";
  o.metrics = metrics.string();
  Trainer(o, *comm, toy()).train();
  std::ifstream in(metrics);
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("\"0.self\""), std::string::npos) << line;
  EXPECT_NE(line.find("dist_psi2"), std::string::npos) << line;
  fs::remove(metrics);
}

}  // namespace
}  // namespace pn

namespace pn {
namespace {

// --max-epoch ends a translation run after the update that completes the epoch (an epoch is one
// pass over the update batches); a run resumed there trains no more, and --max-update caps it.
// tests/reference/mt_epochs.txt holds where 2-rank runs ended before the end of a run was
// computed in one place.
TEST(TranslationTrainer, MaxEpochStopsAfterTheUpdateThatCompletesTheEpoch) {
  FLAGS_minloglevel = 1;
  const test::TempDir dir("pn_mt_max_epoch");
  Options o = test::small_mt();
  o.max_tokens = 256;
  o.max_update = 1000;
  o.max_epoch = 1;
  o.save_dir = dir.path.string();
  auto comm = make_single_communicator();
  const int64_t per_epoch = int64_t(length_batches(toy().train, 256).size());
  ASSERT_GT(per_epoch, 2);
  const TrainResult one = Trainer(o, *comm, toy()).train();
  EXPECT_EQ(one.updates, per_epoch);
  EXPECT_EQ(one.update_limit, per_epoch);
  o.max_epoch = 2;  // resumes where the first epoch ended
  Trainer second(o, *comm, toy());
  EXPECT_EQ(second.start_update(), per_epoch);
  const TrainResult two = second.train();
  EXPECT_EQ(two.updates, 2 * per_epoch);
  EXPECT_EQ(two.update_limit, 2 * per_epoch);
  EXPECT_EQ(int64_t(two.losses.size()), per_epoch);
  const TrainResult again = Trainer(o, *comm, toy()).train();  // at the end already
  EXPECT_TRUE(again.losses.empty());
  EXPECT_EQ(again.update_limit, 2 * per_epoch);
  o.max_update = 2 * per_epoch - 1;  // the smaller limit wins
  o.save_dir = (dir.path / "capped").string();
  const TrainResult capped = Trainer(o, *comm, toy()).train();
  EXPECT_EQ(capped.updates, 2 * per_epoch - 1);
  EXPECT_EQ(capped.update_limit, 2 * per_epoch - 1);
}

}  // namespace
}  // namespace pn
