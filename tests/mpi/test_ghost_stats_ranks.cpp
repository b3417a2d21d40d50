// Ghost statistics under mpirun: synchronized norms run one collective per statistics group on
// every rank, so R ranks with one micro-batch of G groups equal R ranks accumulating G
// micro-steps of one group each.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>

#include "../lm_fixtures.h"
#include "mpi_env.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

std::vector<double> losses(const std::string& norm, bool ghost) {
  Options o = test::small_lm();
  o.max_update = 4;
  o.warmup_updates = 1;  // PN warmup of 4 statistics batches: crossed after update 1
  o.norm_self = o.norm_ff = o.norm_final = norm;
  if (ghost)
    o.max_tokens = 128, o.stats_batch_tokens = 32;
  else
    o.max_tokens = 32, o.update_freq = 4;
  return Trainer(o, test::world(), test::builtin()).train().losses;
}

class GhostAtRanks : public ::testing::TestWithParam<std::string> {};

TEST_P(GhostAtRanks, OneMicroBatchOfGroupsEqualsAccumulatedGroups) {
  FLAGS_minloglevel = 1;
  const std::vector<double> ghost = losses(GetParam(), true), accum = losses(GetParam(), false);
  EXPECT_EQ(ghost.size(), 4u);
  EXPECT_EQ(ghost.size(), accum.size());
  for (size_t u = 0; u < std::min(ghost.size(), accum.size()); ++u)
    EXPECT_NEAR(ghost[u], accum[u], 2e-5 * accum[u]) << "update " << u + 1;
}

INSTANTIATE_TEST_SUITE_P(Norms, GhostAtRanks,
                         ::testing::Values("sync_batch", "sync_power_v", "sync_power", "power"));

}  // namespace
}  // namespace pn
