// Data parallelism under mpirun -np 2 and -np 3:
// parameters stay identical on every rank, and R ranks at max_tokens B/R reproduce one
// process at B (LayerNorm, dropout 0): docs/contract.md §4 and §5.
#include <gtest/gtest.h>

#include <cmath>

#include "../lm_fixtures.h"
#include "mpi_env.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

using test::small_lm;
const Corpus& corpus() { return test::builtin(); }

TEST(DataParallel, ParametersIdenticalOnEveryRank) {
  Communicator& w = test::world();
  Options o = small_lm();
  o.dropout = 0.1;  // dropout differs per rank; parameters must not
  o.max_tokens = 48;
  Trainer t(o, w, corpus());
  t.train();
  const auto& p = t.model().params.data;
  // Compare every rank with rank 0, element by element.
  std::vector<float> ref = p.to_host();
  w.broadcast(ref.data(), ref.size() * sizeof(float), 0);
  size_t differing = 0;
  for (size_t i = 0; i < p.size(); ++i) differing += p[i] != ref[i];
  EXPECT_EQ(differing, 0u) << "rank " << w.rank();
  // And the parameters did move.
  Trainer fresh(o, w, corpus());
  size_t moved = 0;
  for (size_t i = 0; i < p.size(); ++i) moved += p[i] != fresh.model().params.data[i];
  EXPECT_GT(moved, p.size() / 2);
}

// R ranks with max_tokens B give the same losses and parameters as one process with R*B
// (with `single_norm` in the one process when given: sync_X at R ranks == X at one).
void expect_matches_single_process(int max_tokens_per_rank, const std::string& norm = "layer",
                                   const std::string& single_norm = "") {
  Communicator& w = test::world();
  Options o = small_lm();
  o.max_tokens = max_tokens_per_rank;
  o.norm_self = o.norm_ff = o.norm_final = norm;
  Trainer multi(o, w, corpus());
  const TrainResult rm = multi.train();

  auto single_comm = make_single_communicator();
  Options os = o;
  os.max_tokens = max_tokens_per_rank * w.size();
  if (!single_norm.empty()) os.norm_self = os.norm_ff = os.norm_final = single_norm;
  Trainer single(os, *single_comm, corpus());
  const TrainResult rs = single.train();

  ASSERT_EQ(rm.losses.size(), rs.losses.size());
  for (size_t u = 0; u < rm.losses.size(); ++u)
    EXPECT_NEAR(rm.losses[u], rs.losses[u], 2e-5 * std::abs(rs.losses[u]))
        << norm << " update " << u + 1;
  // Adam divides by sqrt(v): where a gradient entry is at rounding level, summation order can
  // flip its step (up to ~lr). So: no parameter further than 2 lr, and almost all within 5% of one step.
  double max_diff = 0;
  size_t far = 0;
  const auto& a = multi.model().params.data;
  const auto& b = single.model().params.data;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(double(a[i]) - double(b[i]));
    max_diff = std::max(max_diff, diff);
    far += diff > 0.05 * o.lr;
  }
  EXPECT_LT(max_diff, 2 * o.lr) << norm;
  // Batch-type norms annihilate some gradient directions exactly (a bias feeding only a
  // mean-subtracting norm), where Adam amplifies rounding noise; there losses are the check.
  if (norm == "layer") {
    EXPECT_LT(double(far), 0.01 * double(a.size())) << norm;
  }
}

TEST(DataParallel, EvenSharesReproduceOneProcess) {
  expect_matches_single_process(48);  // 3 samples per rank
}

TEST(DataParallel, UnevenSharesReproduceOneProcess) {
  // 40 tokens per rank: 5 samples at 2 ranks (2+3), 7 samples at 3 ranks (2+2+3).
  expect_matches_single_process(40);
}

TEST(DataParallel, SyncBatchAtRRanksEqualsBatchInOneProcess) {
  expect_matches_single_process(48, "sync_batch", "batch");
  expect_matches_single_process(40, "sync_power_v", "power_v");  // uneven shares
  expect_matches_single_process(48, "sync_power", "power");
}

TEST(DataParallel, LocalBatchNormDependsOnTheSplit) {
  // Local BN normalises each rank's tokens by their own statistics: not the one-process run.
  Communicator& w = test::world();
  Options o = small_lm();
  o.max_tokens = 48;
  o.norm_self = o.norm_ff = o.norm_final = "batch";
  Trainer multi(o, w, corpus());
  const TrainResult rm = multi.train();
  auto single_comm = make_single_communicator();
  Options os = o;
  os.max_tokens = 48 * w.size();
  Trainer single(os, *single_comm, corpus());
  const TrainResult rs = single.train();
  double max_rel = 0;
  for (size_t u = 0; u < rm.losses.size(); ++u)
    max_rel = std::max(max_rel, std::abs(rm.losses[u] - rs.losses[u]) / rs.losses[u]);
  EXPECT_GT(max_rel, 1e-3);
}

}  // namespace
}  // namespace pn
