// Under mpirun: contract §4's three ways to make one update, and exact resume with
// rank-local PN state.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../lm_fixtures.h"
#include "mpi_env.h"
#include "trainer_checks.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;

namespace pn {
namespace {

Options base(const std::string& norm) {
  Options o = test::small_lm();
  o.max_update = 5;
  o.norm_self = o.norm_ff = o.norm_final = norm;
  return o;
}

const Corpus& corpus() { return test::builtin(); }

using test::max_rel_diff;
using test::ThreeWays;

// The update of 96 tokens (6 samples) made three ways: one process with one micro-batch, one
// process with 6 micro-steps of one sample (update_freq 6), and R ranks with 96/R tokens each.
ThreeWays three_ways(const std::string& norm, const std::string& single_norm) {
  return test::three_ways(base, corpus(), 96, 6, norm, single_norm);
}

TEST(UpdateSplits, LayerNormGivesTheSameUpdateAllThreeWays) {
  FLAGS_minloglevel = 1;
  const ThreeWays t = three_ways("layer", "layer");
  EXPECT_LT(max_rel_diff(t.accumulated, t.one_big), 2e-5);
  EXPECT_LT(max_rel_diff(t.ranks, t.one_big), 2e-5);
}

TEST(UpdateSplits, SyncBatchMatchesAcrossRanksButNotAcrossMicroSteps) {
  FLAGS_minloglevel = 1;
  const ThreeWays t = three_ways("sync_batch", "batch");
  EXPECT_LT(max_rel_diff(t.ranks, t.one_big), 2e-5);   // same statistics batch
  EXPECT_GT(max_rel_diff(t.accumulated, t.one_big), 1e-3);  // 16-token statistics batches
}

TEST(GradientAllReduce, BucketedOverlapEqualsOneAllReduceAfterTheBackward) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  Options o = base("sync_power_v");
  o.max_tokens = 48;
  o.update_freq = 2;
  o.bucket_mb = 0;  // one blocking all-reduce of the whole buffer
  Trainer blocking(o, w, corpus());
  const TrainResult rb = blocking.train();
  o.bucket_mb = 0.002;  // 524-float buckets: dozens of them, launched during the backward
  Trainer bucketed(o, w, corpus());
  const TrainResult ro = bucketed.train();
  EXPECT_LT(max_rel_diff(ro.losses, rb.losses), 1e-6);
  double max_diff = 0;
  for (size_t i = 0; i < blocking.model().params.size(); ++i)
    max_diff = std::max(max_diff, double(std::abs(blocking.model().params.data[i] -
                                                  bucketed.model().params.data[i])));
  EXPECT_LT(max_diff, 1e-5);
}

TEST(Evaluation, RankLocalPowerStateEvaluatesWithRankZerosOrTheMean) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  Options o = base("power");
  o.max_tokens = 48;
  o.pn_warmup = 2;
  Trainer t(o, w, corpus());
  t.train();
  const std::vector<double> before = test::norm_state(t);
  const EvalResult rank0 = t.evaluate(corpus().valid);
  EXPECT_EQ(test::norm_state(t), before);  // each rank keeps its own state
  // The evaluation uses one state on every rank: the loss is rank 0's state's loss.
  double got[2] = {rank0.nll, -rank0.nll};
  w.allreduce_max(got, 2);
  EXPECT_EQ(got[0], -got[1]);
  Options om = o;
  om.pn_eval_state = EvalState::mean;
  om.max_update = 0;
  Trainer tm(om, w, corpus());
  for (size_t l = 0; l < tm.model().norms().size(); ++l) {  // give tm t's state
    auto src = t.model().norms()[l]->state(), dst = tm.model().norms()[l]->state();
    for (size_t k = 0; k < src.size(); ++k) std::copy(src[k].data, src[k].data + src[k].n, dst[k].data);
  }
  tm.model().params.data = t.model().params.data;
  const EvalResult mean = tm.evaluate(corpus().valid);
  EXPECT_NE(mean.nll, rank0.nll);  // the ranks' PN states differ, so their mean evaluates apart
}

TEST(Resume, PowerNormAtRRanksResumesExactly) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  const fs::path root = fs::temp_directory_path() / ("pn_resume_np" + std::to_string(w.size()));
  if (w.rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  w.barrier();
  Options o = base("power");
  o.max_tokens = 48;
  o.dropout = 0.1;
  o.pn_warmup = 4;  // crosses PN's warmup boundary before the stop
  o.max_update = 20;
  o.save_dir = (root / "straight").string();
  Trainer straight(o, w, corpus());
  const TrainResult rs = straight.train();

  o.save_dir = (root / "split").string();
  o.max_update = 10;
  Trainer first(o, w, corpus());
  const TrainResult r1 = first.train();
  o.max_update = 20;
  Trainer second(o, w, corpus());
  EXPECT_EQ(second.start_update(), 10);
  const TrainResult r2 = second.train();

  std::vector<double> joined = r1.losses;
  joined.insert(joined.end(), r2.losses.begin(), r2.losses.end());
  EXPECT_EQ(joined, rs.losses);  // same metrics, bit for bit
  EXPECT_EQ(second.model().params.data, straight.model().params.data);
  // Rank-local PN state resumed on every rank, also bit for bit.
  const std::vector<double> own = test::norm_state(second);
  EXPECT_EQ(own, test::norm_state(straight));
  // The ranks' PN states differ (rank-local), so a restart at another world size starts from
  // their mean, with a warning.
  std::vector<double> mean = own, mine = own;
  w.allreduce_sum(mean.data(), mean.size());
  for (double& v : mean) v /= w.size();
  std::vector<double> ref = own;
  w.broadcast(ref.data(), ref.size() * sizeof(double), 0);
  if (w.rank() == 1) {
    EXPECT_NE(ref, mine);
  }
  auto single = make_single_communicator();
  Options one = o;
  one.max_tokens = 48 * w.size();
  one.max_update = 20;
  one.restore_file = (root / "split" / "checkpoint_20").string();
  Trainer resumed_alone(one, *single, corpus());
  const std::vector<double> got = test::norm_state(resumed_alone);
  ASSERT_EQ(got.size(), mean.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], mean[i], 1e-12 * (1 + std::abs(mean[i])));
  w.barrier();
  if (w.rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace pn
