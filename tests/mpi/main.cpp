// main() of the multi-rank GoogleTest binary, run by ctest under `mpirun -np 2` and `-np 3`.
// Every rank runs every test; only rank 0 prints; the job fails if any rank fails.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "kernels/device.h"
#include "mpi_env.h"

namespace pn::test {
namespace {
std::unique_ptr<Communicator> g_world;
}
Communicator& world() { return *g_world; }
}  // namespace pn::test

int main(int argc, char** argv) {
  if (!pn::launched_by_mpi()) setenv("PN_FORCE_MPI", "1", 0);  // a 1-rank MPI run also works
  FLAGS_minloglevel = 1;  // keep the trainers quiet
  pn::test::g_world = pn::make_communicator(&argc, &argv);
  pn::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (pn::test::world().rank() != 0) delete listeners.Release(listeners.default_result_printer());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  double f = failed;
  pn::test::world().allreduce_max(&f, 1);
  const int rc = f > 0 ? 1 : 0;
  pn::test::g_world.reset();  // finalises MPI
  return rc;
}
