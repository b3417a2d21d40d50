// The NCCL communicator across ranks, and training in sync groups on the GPU, run by ctest as
// `mpirun -np 2 pn_cuda_mpi_tests`.
// With a GPU per rank it exercises NCCL itself; with two ranks on one GPU, the host-staged
// fallback (same results, a warning). Without a GPU on some rank every rank exits 77, which
// ctest reports as skipped. Every rank runs every test; only rank 0 prints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_comm.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/lm_fixtures.h"
#include "trainer/trainer.h"

namespace pn::test {
namespace {

Communicator* g_comm = nullptr;

TEST(NcclAcrossRanks, DeviceSumsOnTheComputeStream) {
  Communicator& comm = *g_comm;
  const int R = comm.size(), r = comm.rank();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> f(1000);
  std::vector<double> g(37);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(r + 1) * 0.5f + float(i % 7);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (r + 1) * 1e-3 + double(i);
  DBuf<float> df(f);
  DBuf<double> dg(g);
  comm.allreduce_sum_device(df.data(), f.size(), s);
  comm.allreduce_sum_device(dg.data(), g.size(), s);
  comm.allreduce_sum_device(dg.data(), 0, s);  // zero-length: every rank joins, nothing moves
  CUDA_CHECK(cudaStreamSynchronize(s));
  const double rank_sum = R * (R + 1) / 2.0;  // sum over ranks of (r + 1)
  const auto hf = df.download();
  const auto hg = dg.download();
  for (size_t i = 0; i < f.size(); ++i)
    EXPECT_FLOAT_EQ(hf[i], float(0.5 * rank_sum + R * double(i % 7))) << i;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(hg[i], 1e-3 * rank_sum + R * double(i), 1e-12);
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(NcclAcrossRanks, BucketOverlappedOnTheCommunicatorStream) {
  Communicator& comm = *g_comm;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> a(1 << 20, float(comm.rank() + 1)), b(4096, 1.f);
  DBuf<float> da(a), db(b);
  const Communicator::DeviceRequest ra = comm.iallreduce_sum_device(da.data(), a.size(), s);
  const Communicator::DeviceRequest rb = comm.iallreduce_sum_device(db.data(), b.size(), s);
  comm.wait_device(rb, s);
  comm.wait_device(ra, s);
  cuda::scale_inplace(da.data(), a.size(), 2.f, s);  // ordered after the sum by wait_device
  CUDA_CHECK(cudaStreamSynchronize(s));
  const int R = comm.size();
  const auto ha = da.download();
  const auto hb = db.download();
  EXPECT_EQ(ha.front(), float(R * (R + 1)));
  EXPECT_EQ(ha.back(), float(R * (R + 1)));
  EXPECT_EQ(hb[123], float(R));
  CUDA_CHECK(cudaStreamDestroy(s));
}

// sync_power_v's forward statistics: every rank sums its contiguous share of the rows (one rank
// with no rows at all), the packed [count | sum x^2] is all-reduced on the device, and the result
// equals the one-process statistics of all rows.
TEST(NcclAcrossRanks, SynchronizedStatisticsEqualOneProcess) {
  Communicator& comm = *g_comm;
  const int R = comm.size(), r = comm.rank();
  const int rows = 301, d = 24;
  const auto x = randf(size_t(rows) * d, 5, 1.3f);
  const auto mask = random_mask(rows, 6);
  std::vector<double> all(1 + d);
  k::column_stats<float>(x.data(), mask.data(), rows, d, nullptr, &all[0], nullptr, &all[1]);
  // Rank R-1 gets no rows; the others split the rows contiguously.
  const int parts = R > 1 ? R - 1 : 1;
  const int lo = r < parts ? int(long(rows) * r / parts) : rows;
  const int hi = r < parts ? int(long(rows) * (r + 1) / parts) : rows;
  const int n = hi - lo;
  DBuf<float> dx(std::vector<float>(x.begin() + size_t(lo) * d, x.begin() + size_t(hi) * d));
  DBuf<uint8_t> dm(std::vector<uint8_t>(mask.begin() + lo, mask.begin() + hi));
  DBuf<double> stats(1 + d);
  cuda::column_stats(n ? dx.data() : nullptr, n ? dm.data() : nullptr, n, d, nullptr,
                     stats.data(), nullptr, stats.data() + 1, nullptr);
  comm.allreduce_sum_device(stats.data(), stats.size(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_close("statistics over all ranks", stats.download(), all, 1e-12, 1e-9);
}

// Sync groups on the GPU, one rank per GPU where there are several (NCCL) and ranks sharing
// one otherwise (the host-staged sums): sync_batch and sync_power train in groups of 1 and of
// the whole job as on the CPU (losses to 1e-4 relative: GPU sums are ordered differently), and
// groups of 1 train as the local twin on the GPU.
TEST(NcclAcrossRanks, SyncGroupsTrainAsOnTheCpu) {
  Communicator& comm = *g_comm;
  const std::pair<const char*, const char*> norms[] = {{"sync_batch", "batch"},
                                                        {"sync_power", "power"}};
  for (const auto& [norm, twin] : norms)
    for (int K : {1, comm.size()}) {
      Options o = small_lm();
      o.norm_self = o.norm_ff = o.norm_final = norm;
      o.max_tokens = 32;
      o.sync_group_size = K;
      o.bucket_mb = 0.01;
      const auto losses = [&](const Options& opt, Device device) {
        DeviceScope scope(device, comm.local_rank());
        return Trainer(opt, comm, builtin()).train().losses;
      };
      const std::vector<double> gpu = losses(o, Device::CUDA), cpu = losses(o, Device::CPU);
      ASSERT_EQ(gpu.size(), cpu.size());
      for (size_t u = 0; u < cpu.size(); ++u)
        EXPECT_NEAR(gpu[u], cpu[u], 1e-4 * std::abs(cpu[u])) << norm << " K " << K << " update "
                                                             << u + 1;
      if (K != 1) continue;
      Options local = o;
      local.norm_self = local.norm_ff = local.norm_final = twin;
      const std::vector<double> alone = losses(local, Device::CUDA);
      for (size_t u = 0; u < cpu.size(); ++u)
        EXPECT_NEAR(gpu[u], alone[u], 1e-6 * std::abs(alone[u])) << norm << " K 1 vs " << twin
                                                                 << " update " << u + 1;
    }
}

}  // namespace
}  // namespace pn::test

int main(int argc, char** argv) {
  if (!pn::launched_by_mpi()) setenv("PN_FORCE_MPI", "1", 0);  // a 1-rank MPI run also works
  auto host = pn::make_communicator(&argc, &argv);
  std::string why;
  double no_gpu = pn::test::gpu_visible(&why) ? 0 : 1;
  host->allreduce_max(&no_gpu, 1);  // every rank takes the same road
  if (no_gpu > 0) {
    if (host->rank() == 0)
      std::printf("pn_cuda_mpi_tests: SKIPPED on every rank: %s\n",
                  why.empty() ? "another rank sees no CUDA device" : why.c_str());
    host.reset();  // finalises MPI
    return pn::test::gpu_required() ? 1 : 77;  // PN_CUDA_REQUIRED=1: a skip is a failure
  }
  auto comm = pn::make_nccl_communicator(std::move(host));
  pn::test::g_comm = comm.get();
  if (comm->rank() == 0)
    std::printf("pn_cuda_mpi_tests: %d ranks, communicator %s\n", comm->size(),
                comm->name().c_str());
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (comm->rank() != 0) delete listeners.Release(listeners.default_result_printer());
  double failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  comm->allreduce_max(&failed, 1);
  comm.reset();
  return failed > 0 ? 1 : 0;
}
