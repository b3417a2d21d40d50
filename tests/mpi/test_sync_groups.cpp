// Sync groups (--sync-group-size, contract §3) under mpirun -np 4 (ctest mpi_np4_sync_groups;
// skipped at other world sizes): 4 ranks in groups of 2 with --max-tokens B train as 2 ranks
// with the local twin and --max-tokens 2B (contract §4: the same statistics batches, each
// group's rows being one rank's share there); a checkpoint written in groups resumes bit for
// bit, the consistency check comparing norm state within groups only; a group size that does
// not divide the world is refused (on a GPU: tests/cuda/mpi_nccl_main.cpp).
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "../lm_fixtures.h"
#include "mpi_env.h"
#include "trainer/trainer.h"
#include "trainer_checks.h"

namespace fs = std::filesystem;

namespace pn {
namespace {

const Corpus& corpus() { return test::builtin(); }

Options with_norm(const std::string& norm) {
  Options o = test::small_lm();
  o.norm_self = o.norm_ff = o.norm_final = norm;
  o.max_update = 6;
  o.warmup_updates = 2;  // PN's warmup ends at update 2: later forwards use the running state
  return o;
}

#define SKIP_UNLESS_FOUR_RANKS()                                                        \
  if (test::world().size() != 4) GTEST_SKIP() << "runs under mpirun -np 4 (ctest "      \
                                                 "mpi_np4_sync_groups)"

class GroupsOfTwo : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GroupsOfTwo, EqualTwoRanksWithTheLocalTwinAndTwiceTheTokens) {
  SKIP_UNLESS_FOUR_RANKS();
  FLAGS_minloglevel = 1;
  const auto& [norm, twin] = GetParam();
  Communicator& w = test::world();
  Options grouped = with_norm(norm);
  grouped.max_tokens = 48;
  grouped.sync_group_size = 2;
  Trainer a(grouped, w, corpus());
  const TrainResult ra = a.train();
  // The equal run: 2 ranks (each half of the job runs it; rank r is rank r % 2 there).
  std::unique_ptr<Communicator> half = w.split(w.rank() / 2);
  Options pair = with_norm(twin);
  pair.max_tokens = 96;
  Trainer b(pair, *half, corpus());
  const TrainResult rb = b.train();
  ASSERT_EQ(ra.losses.size(), rb.losses.size());
  for (size_t u = 0; u < rb.losses.size(); ++u)
    EXPECT_NEAR(ra.losses[u], rb.losses[u], 1e-5 * std::abs(rb.losses[u]))
        << norm << " update " << u + 1;
  // For sync_batch (training forward from batch statistics alone) the training losses are also
  // one process's with the whole micro-batch and ghost groups of 2B tokens: the same statistics
  // batches, though their running state moves one group after the other.
  if (norm == "sync_batch") {
    auto single = make_single_communicator();
    Options ghost = with_norm(twin);
    ghost.max_tokens = 192;
    ghost.stats_batch_tokens = 96;
    const TrainResult rg = Trainer(ghost, *single, corpus()).train();
    EXPECT_LT(test::max_rel_diff(ra.losses, rg.losses), 1e-5) << "ghost groups";
  }
  // Group 0 (ranks 0, 1) holds the state of the pair's rank 0, which is world rank 0 here.
  // (PN's state feeds its forward after warmup, so the losses hold it close. BatchNorm's
  // running mean follows biases that a mean-subtracting norm annihilates, where Adam turns
  // summation-order rounding into visible steps: only the losses compare there.)
  if (w.rank() == 0 && norm == "sync_power") {
    const std::vector<double> sa = test::norm_state(a), sb = test::norm_state(b);
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i)
      EXPECT_NEAR(sa[i], sb[i], 1e-5 * (1 + std::abs(sb[i]))) << norm << " state " << i;
  }
  // And the groups differ from the whole job: the check is not vacuous.
  Options all = with_norm(norm);
  all.max_tokens = 48;
  const TrainResult rall = Trainer(all, w, corpus()).train();
  EXPECT_GT(test::max_rel_diff(rall.losses, ra.losses), 1e-4) << norm;
  // One statistics all-reduce group per pair of ranks: the groups' states differ.
  std::vector<double> mine = test::norm_state(a), first = mine;
  w.broadcast(first.data(), first.size() * sizeof(double), 0);
  if (w.rank() == 1) {
    EXPECT_EQ(mine, first) << norm << ": rank 1 shares rank 0's group";
  }
  if (w.rank() == 2) {
    EXPECT_NE(mine, first) << norm << ": rank 2 is in another group";
  }
}

INSTANTIATE_TEST_SUITE_P(SyncGroups, GroupsOfTwo,
                         ::testing::Values(std::make_pair("sync_batch", "batch"),
                                           std::make_pair("sync_power", "power")));

TEST(SyncGroups, CheckpointWrittenInGroupsResumesBitForBit) {
  SKIP_UNLESS_FOUR_RANKS();
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  const fs::path root = fs::temp_directory_path() / "pn_sync_groups_resume";
  if (w.rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  w.barrier();
  Options o = with_norm("sync_power");
  o.max_tokens = 32;
  o.sync_group_size = 2;
  o.consistency_interval = 1;  // norm state compared within groups every update (it differs
                               // between them, so a comparison across the job would stop it)
  o.max_update = 8;
  o.save_dir = (root / "straight").string();
  Trainer straight(o, w, corpus());
  const TrainResult rs = straight.train();
  o.save_dir = (root / "split").string();
  o.max_update = 4;
  Trainer first(o, w, corpus());
  const TrainResult r1 = first.train();
  o.max_update = 8;
  Trainer second(o, w, corpus());
  EXPECT_EQ(second.start_update(), 4);
  const TrainResult r2 = second.train();
  std::vector<double> joined = r1.losses;
  joined.insert(joined.end(), r2.losses.begin(), r2.losses.end());
  EXPECT_EQ(joined, rs.losses);
  EXPECT_EQ(second.model().params.data, straight.model().params.data);
  EXPECT_EQ(test::norm_state(second), test::norm_state(straight));
  w.barrier();
  if (w.rank() == 0) fs::remove_all(root);
}

TEST(SyncGroups, GroupSizeThatDoesNotDivideTheWorldIsRefused) {
  SKIP_UNLESS_FOUR_RANKS();
  Options o = with_norm("sync_batch");
  o.sync_group_size = 3;
  try {
    Trainer t(o, test::world(), corpus());
    ADD_FAILURE() << "--sync-group-size 3 at 4 ranks was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--sync-group-size 3"), std::string::npos) << m;
    EXPECT_NE(m.find("world size 4"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace pn
