// Trainer, data order, options and schedule (one process).
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "lm_fixtures.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/schedule.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

Options tiny() {  // one block, two heads: the cheapest LM that still attends
  Options o = test::small_lm();
  o.decoder_layers = 1;
  o.decoder_attention_heads = 2;
  o.warmup_updates = 5;
  return o;
}

const Corpus& builtin() { return test::builtin(); }

TEST(Trainer, LossFallsOnTheBuiltinCorpus) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  Options o = tiny();
  o.tokens_per_sample = 32;
  o.max_tokens = 512;
  o.max_update = 100;
  o.lr = 5e-3;
  o.warmup_updates = 10;
  o.validate_interval_updates = 100;
  Trainer t(o, *comm, builtin());
  const TrainResult r = t.train();
  ASSERT_EQ(r.losses.size(), 100u);
  EXPECT_GT(r.losses.front(), std::log(double(builtin().vocab.size())));
  EXPECT_LT(r.losses.back(), r.losses.front() - 1.2);
  EXPECT_GT(r.valid_nll, builtin().entropy_floor);  // nobody beats the source's entropy
  EXPECT_LT(r.valid_nll, std::log(double(builtin().vocab.size())) - 0.2);  // beats uniform
}

TEST(Trainer, GradientAccumulationEqualsOneLargeMicroBatch) {
  // contract §4: 1 rank, max_tokens B, update_freq 1 == 1 rank, max_tokens B/4, update_freq 4.
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  Options a = tiny(), b = tiny();
  a.max_tokens = 128, a.update_freq = 1, a.max_update = 5;
  b.max_tokens = 32, b.update_freq = 4, b.max_update = 5;
  Trainer ta(a, *comm, builtin()), tb(b, *comm, builtin());
  const TrainResult ra = ta.train(), rb = tb.train();
  ASSERT_EQ(ra.losses.size(), rb.losses.size());
  for (size_t u = 0; u < ra.losses.size(); ++u)
    EXPECT_NEAR(ra.losses[u], rb.losses[u], 1e-5 * ra.losses[u]) << "update " << u + 1;
}

TEST(Data, EachEpochIsAPermutationAndDependsOnTheSeed) {
  SampleOrder a(100, 7), b(100, 8);
  std::set<int64_t> seen;
  bool differs = false;
  for (int64_t g = 0; g < 100; ++g) {
    seen.insert(a.sample(g));
    differs |= a.sample(g) != b.sample(g);
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_TRUE(differs);
  bool epochs_differ = false;
  for (int64_t g = 0; g < 100; ++g) epochs_differ |= a.sample(g) != a.sample(g + 100);
  EXPECT_TRUE(epochs_differ);
}

TEST(Data, RankSharesAreContiguousAndCoverTheMicroBatch) {
  for (int world : {1, 2, 3, 5})
    for (int64_t n : {0, 1, 4, 7}) {
      int64_t prev_end = 0;
      for (int r = 0; r < world; ++r) {
        int64_t b, e;
        rank_share(n, r, world, &b, &e);
        EXPECT_EQ(b, prev_end);
        EXPECT_LE(b, e);
        prev_end = e;
      }
      EXPECT_EQ(prev_end, n);
    }
}

TEST(Data, VocabularyUnknownWordsAndEos) {
  Corpus c = corpus_from_text("t", "a b a\nc a\n", "a z\n", "b\n");
  EXPECT_EQ(c.vocab.words[0], "<pad>");
  EXPECT_EQ(c.vocab.words[1], "<eos>");
  EXPECT_EQ(c.vocab.words[2], "<unk>");
  EXPECT_EQ(c.vocab.words[3], "a");  // most frequent first
  EXPECT_EQ(c.train.size(), 7u);     // 5 words + 2 <eos>
  EXPECT_EQ(c.valid, (std::vector<int32_t>{c.vocab.id("a"), Vocabulary::kUnk, Vocabulary::kEos}));
}

TEST(Data, LoadsPtbAndWikitextFileNames) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pn_test_corpus";
  fs::create_directories(dir);
  for (const char* f : {"ptb.train.txt", "ptb.valid.txt", "wiki.test.tokens"})
    std::ofstream(dir / f) << "the cat sat\n";
  Corpus c = load_corpus(dir.string());
  EXPECT_EQ(c.train.size(), 4u);
  EXPECT_EQ(c.test.size(), 4u);
  fs::remove_all(dir);
  EXPECT_THROW(load_corpus(dir.string()), std::runtime_error);
}

TEST(Data, TailSampleIsPaddedAndMasked) {
  std::vector<int32_t> stream = {5, 6, 7, 8, 9, 10, 11};  // 6 targets
  SampleSet full(stream, 4, false), tail(stream, 4, true);
  EXPECT_EQ(full.count, 1);
  EXPECT_EQ(tail.count, 2);
  Batch b;
  tail.make_batch({1}, &b);
  EXPECT_EQ(b.tokens[0], 9);
  EXPECT_EQ(b.targets[0], 10);
  EXPECT_EQ(b.targets[1], 11);
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{1, 1, 0, 0}));
}

TEST(Schedule, InverseSqrtWarmsUpLinearlyThenDecays) {
  EXPECT_DOUBLE_EQ(learning_rate(LrScheduler::inverse_sqrt, 1e-3, 0, 100, 50), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(LrScheduler::inverse_sqrt, 1e-3, 0, 100, 100), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(LrScheduler::inverse_sqrt, 1e-3, 0, 100, 400), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(LrScheduler::fixed, 1e-3, 0, 100, 400), 1e-3);
}

TEST(Options, CommandLineWinsOverConfigFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "pn_opts.ini").string();
  std::ofstream(path) << "lr = 0.5\nmax-update = 7\nnorm = layer\n";
  const char* argv[] = {"pntrain", "--config", path.c_str(), "--lr", "0.25"};
  Options o;
  std::string help;
  ASSERT_TRUE(parse_options(5, const_cast<char**>(argv), &o, &help));
  EXPECT_DOUBLE_EQ(o.lr, 0.25);
  EXPECT_EQ(o.max_update, 7);
  EXPECT_EQ(o.norm_ff, "layer");
  const char* norms[] = {"pntrain", "--norm", "batch", "--norm-final", "power"};
  ASSERT_TRUE(parse_options(5, const_cast<char**>(norms), &o, &help));
  EXPECT_EQ(o.norm_self, "batch");
  EXPECT_EQ(o.norm_ff, "batch");
  EXPECT_EQ(o.norm_final, "power");  // the explicit place wins over --norm
  const char* bad[] = {"pntrain", "--max-update", "many"};
  EXPECT_THROW(parse_options(3, const_cast<char**>(bad), &o, &help), std::invalid_argument);
}

}  // namespace
}  // namespace pn
