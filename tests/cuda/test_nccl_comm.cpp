// The NCCL communicator at one rank (a real NCCL communicator of size 1): the synchronized
// norms' statistics summed on the compute stream, a gradient bucket overlapped on the
// communicator's stream, and the host collectives still answered by the wrapped communicator.
// Multi-rank NCCL runs need several GPUs; skipped without a GPU, absent without NCCL.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "comm/communicator.h"
#include "kernels/kernels.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef PN_HAVE_NCCL
#include "comm/nccl_comm.h"
#endif

namespace pn::test {
namespace {

TEST(SingleCommunicator, DeviceSumsAreTheIdentity) {
  // No GPU needed: one rank's sum leaves the buffer alone and never touches it.
  auto comm = make_single_communicator();
  EXPECT_TRUE(comm->device_collectives());
  comm->allreduce_sum_device(static_cast<double*>(nullptr), 0, nullptr);
  const Communicator::DeviceRequest r =
      comm->iallreduce_sum_device(static_cast<float*>(nullptr), 0, nullptr);
  comm->wait_device(r, nullptr);
}

#ifdef PN_HAVE_NCCL
TEST(NcclCommunicator, StatisticsAndBucketsAtOneRank) {
  PN_REQUIRE_GPU();
  auto comm = make_nccl_communicator(make_single_communicator());
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_TRUE(comm->device_collectives());
  // The two communicators' collectives overlap in the backward: NCCL launches them in program
  // order (the same on every rank), or ranks could deadlock (unless the user chose otherwise).
  const char* order = std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
  ASSERT_NE(order, nullptr);
  EXPECT_STREQ(order, "1");
  cudaStream_t compute;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

  // Statistics of a synchronized norm, packed [count | sum x^2], reduced on the compute stream.
  const int rows = 300, d = 48;
  const auto x = randf(size_t(rows) * d, 1, 1.5f);
  const auto mask = random_mask(rows, 2);
  std::vector<double> cpu(1 + d);
  k::column_stats<float>(x.data(), mask.data(), rows, d, nullptr, &cpu[0], nullptr, &cpu[1]);
  DBuf<float> dx(x);
  DBuf<uint8_t> dmask(mask);
  DBuf<double> stats(1 + d);
  cuda::column_stats(dx.data(), dmask.data(), rows, d, nullptr, stats.data(), nullptr,
                     stats.data() + 1, compute);
  comm->allreduce_sum_device(stats.data(), stats.size(), compute);
  CUDA_CHECK(cudaStreamSynchronize(compute));
  expect_close("all-reduced statistics", stats.download(), cpu, 1e-12, 1e-9);

  // A gradient bucket on the communicator's stream, waited for on the compute stream.
  auto g = randf(100000, 3);
  DBuf<float> dg(g);
  const Communicator::DeviceRequest r = comm->iallreduce_sum_device(dg.data(), g.size(), compute);
  comm->wait_device(r, compute);
  cuda::scale_inplace(dg.data(), g.size(), 0.5f, compute);  // ordered after the sum
  CUDA_CHECK(cudaStreamSynchronize(compute));
  for (auto& v : g) v *= 0.5f;
  expect_equal("bucket", dg.download(), g);

  // Host collectives go to the wrapped communicator.
  std::vector<double> h = {1, 2, 3};
  comm->allreduce_sum(h.data(), h.size());
  EXPECT_EQ(h[2], 3);
  CUDA_CHECK(cudaStreamDestroy(compute));
}
#endif

}  // namespace
}  // namespace pn::test
