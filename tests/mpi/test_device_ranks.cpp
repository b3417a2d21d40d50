// Ranks on a device: the synchronized norms' statistics and the gradient buckets go through the
// device path of the communicator. On the stand-in device (no device collectives) they are
// staged through the host, as for ranks sharing one GPU; the result must equal the CPU run bit
// for bit, and sync_batch at R ranks must equal batch in one process (contract §4).
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "../lm_fixtures.h"
#include "mpi_env.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

std::vector<double> losses_on(Device device, const Options& o, Communicator& comm) {
  DeviceScope scope(device);
  Trainer t(o, comm, test::builtin());
  return t.train().losses;
}

TEST(DeviceRanks, StagedStatisticsAndBucketsEqualTheCpu) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  for (const char* norm : {"sync_batch", "sync_power", "power"}) {
    Options o = test::small_lm();
    o.norm_self = o.norm_ff = o.norm_final = norm;
    o.max_tokens = 64;
    o.bucket_mb = std::getenv("PN_T_BUCKET") ? std::atof(std::getenv("PN_T_BUCKET")) : 0.01;
    o.warmup_updates = 3;
    const std::vector<double> cpu = losses_on(Device::CPU, o, w);
    const std::vector<double> sim = losses_on(Device::Sim, o, w);
    EXPECT_EQ(sim, cpu) << norm << " on rank " << w.rank();
  }
}

TEST(DeviceRanks, SyncBatchAtRRanksEqualsBatchInOneProcess) {
  FLAGS_minloglevel = 1;
  Communicator& w = test::world();
  Options o = test::small_lm();
  o.norm_self = o.norm_ff = o.norm_final = "sync_batch";
  o.max_tokens = 48;
  const std::vector<double> ranks = losses_on(Device::Sim, o, w);
  auto one = make_single_communicator();
  Options single = o;
  single.norm_self = single.norm_ff = single.norm_final = "batch";
  single.max_tokens = 48 * w.size();
  const std::vector<double> alone = losses_on(Device::Sim, single, *one);
  ASSERT_EQ(ranks.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i)
    EXPECT_NEAR(ranks[i], alone[i], 1e-5 * std::abs(alone[i])) << "update " << i + 1;
}

}  // namespace
}  // namespace pn
