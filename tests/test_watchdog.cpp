// The watchdog ends a job that cannot progress: a rank that stops beating, and a device
// collective that reported an asynchronous error (NCCL does when a peer dies), each naming the
// rank and the phase. Death tests: the watchdog ends the process through Communicator::abort.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/single_comm.h"
#include "comm/watchdog.h"

namespace pn {
namespace {

// Rank 0 of two whose device collectives fail (or not) as the test says; abort ends the process
// at once, as the real communicators' aborts end the job.
struct TestComm final : SingleCommunicator {
  std::string async_error;
  int size() const override { return 2; }
  std::string device_error() override { return async_error; }
  [[noreturn]] void abort(const std::string& msg, int code) override {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), msg.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
};

void run_for(Watchdog& w, double seconds, bool beat) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (beat) w.beat("a training micro-step");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(WatchdogDeathTest, EndsTheJobWhenADeviceCollectiveFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        TestComm comm;
        comm.async_error = "NCCL reported an asynchronous error: remote process exited";
        Watchdog w(comm, 60);
        run_for(w, 5, true);  // beating: only the device error can end it
        std::_Exit(0);
      },
      testing::ExitedWithCode(5),
      "rank 0: NCCL reported an asynchronous error: remote process exited \\(last in: a training "
      "micro-step\\)");
}

TEST(WatchdogDeathTest, EndsARankThatMakesNoProgress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        TestComm comm;
        Watchdog w(comm, 1);
        w.beat("the gradient all-reduce");
        run_for(w, 5, false);
        std::_Exit(0);
      },
      testing::ExitedWithCode(5), "rank 0 made no progress for 1 s \\(last in: the gradient");
}

TEST(WatchdogDeathTest, LeavesAHealthyRankAlone) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        TestComm comm;
        Watchdog w(comm, 0.5);
        run_for(w, 1.5, true);  // beats every 20 ms, no device error: its abort never runs
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pn
