// Translation under mpirun: contract §4's update splits with `layer` and `sync_batch`
// encoders, and the bucketed gradient all-reduce of the encoder-decoder (whose gradients
// complete in a different order than the LM's).
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../test_translation_fixtures.h"
#include "mpi_env.h"
#include "trainer_checks.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

const ParallelCorpus& toy() { return test::toy_corpus(); }

Options mt(const std::string& enc_norm) {
  Options o = test::small_mt();
  o.max_update = 4;
  o.encoder_norm_self = o.encoder_norm_ff = o.encoder_norm_final = enc_norm;
  return o;
}

using test::max_rel_diff;
using test::ThreeWays;

// 384 tokens per update three ways: one process in one micro-batch, one process in 4
// micro-steps of 96, and R ranks with 384/R each.
ThreeWays three_ways(const std::string& norm, const std::string& single_norm) {
  return test::three_ways(mt, toy(), 384, 4, norm, single_norm);
}

TEST(TranslationSplits, LayerNormEncoderGivesTheSameUpdateAllThreeWays) {
  FLAGS_minloglevel = 1;
  const ThreeWays t = three_ways("layer", "layer");
  EXPECT_LT(max_rel_diff(t.accumulated, t.one_big), 2e-5);
  EXPECT_LT(max_rel_diff(t.ranks, t.one_big), 2e-5);
}

TEST(TranslationSplits, SyncBatchEncoderMatchesAcrossRanksButNotAcrossMicroSteps) {
  FLAGS_minloglevel = 1;
  const ThreeWays t = three_ways("sync_batch", "batch");
  EXPECT_LT(max_rel_diff(t.ranks, t.one_big), 2e-5);        // one statistics batch
  EXPECT_GT(max_rel_diff(t.accumulated, t.one_big), 1e-4);  // four smaller ones
}

TEST(TranslationAllReduce, BucketedOverlapEqualsOneAllReduceAfterTheBackward) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  Options o = mt("power");
  o.share_all_embeddings = false;  // a separate target embedding: one more completion point
  ParallelCorpus separate = toy();
  o.max_tokens = 128;
  o.update_freq = 2;
  o.bucket_mb = 0;
  Trainer blocking(o, w, separate);
  const TrainResult rb = blocking.train();
  o.bucket_mb = 0.002;
  Trainer bucketed(o, w, separate);
  const TrainResult ro = bucketed.train();
  EXPECT_LT(max_rel_diff(ro.losses, rb.losses), 1e-6);
  double max_diff = 0;
  for (size_t i = 0; i < blocking.params().size(); ++i)
    max_diff = std::max(max_diff, double(std::abs(blocking.params().data[i] -
                                                  bucketed.params().data[i])));
  EXPECT_LT(max_diff, 1e-5);
}

// contract §6 at R ranks for the encoder-decoder: rank-local PN state in the encoder, dropout on;
// 6 updates straight equal 3 + 3 resumed from checkpoint_3, bit for bit, on every rank.
TEST(TranslationResume, PowerEncoderAtRRanksResumesExactly) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pn_mt_resume_np" + std::to_string(w.size()));
  if (w.rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  w.barrier();
  Options o = mt("power");
  o.dropout = 0.1;
  o.attention_dropout = 0.1;
  o.max_tokens = 384 / w.size();
  o.max_update = 6;
  o.save_dir = (dir / "straight").string();
  o.save_interval_updates = 3;
  Trainer straight(o, w, toy());
  const TrainResult full = straight.train();
  Options r = o;
  r.save_dir = (dir / "again").string();
  r.restore_file = (dir / "straight" / "checkpoint_3").string();
  Trainer resumed(r, w, toy());
  EXPECT_EQ(resumed.start_update(), 3);
  const TrainResult tail = resumed.train();
  EXPECT_EQ(tail.losses.size(), 3u);
  for (size_t u = 0; u < std::min<size_t>(3, tail.losses.size()); ++u)
    EXPECT_EQ(tail.losses[u], full.losses[u + 3]) << "update " << u + 4;
  EXPECT_EQ(resumed.params().data, straight.params().data);
  const std::vector<double> own = test::norm_state(resumed);
  EXPECT_FALSE(own.empty());
  EXPECT_EQ(own, test::norm_state(straight));  // this rank's PN state
  w.barrier();
  if (w.rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace pn
