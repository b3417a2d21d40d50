// A per-rank watchdog: a thread that ends the whole job when this rank makes no progress for
// timeout_s (stuck in a kernel, a deadlock, a frozen file system, a GPU collective whose peer is
// gone), naming the rank and the phase it was in. Peers waiting for this rank in a collective
// time out a little later (their limit is longer), so the stuck rank's own message comes first.
// It also ends the job at once when the device collectives report an asynchronous error.
// Ending the job goes through Communicator::abort, which for NCCL aborts the communicator first
// (ncclCommAbort releases the kernels spinning in the collective) and then stops every rank.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"

namespace pn {

class Watchdog {
 public:
  Watchdog(Communicator& comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
    if (timeout_s_ > 0) thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Marks progress; `phase` must be a string literal (it is read by the watchdog thread).
  void beat(const char* phase) {
    phase_.store(phase);
    last_.store(now());
  }

 private:
  static double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
  }
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    double woke = now();
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      // A wait of 200 ms that took seconds: the process was stopped (SIGSTOP, a suspended job);
      // time spent stopped is no rank's lack of progress.
      const double before = woke;
      woke = now();
      if (woke - before > 1.0) last_.store(last_.load() + (woke - before));
      if (comm_.in_collective) last_.store(now());  // waiting for peers is not being stuck
      const std::string device_error = stop_ ? "" : comm_.device_error();
      if (!device_error.empty())
        comm_.abort("rank " + std::to_string(comm_.rank()) + ": " + device_error +
                        " (last in: " + phase_.load() + "); the job is stopped",
                    5);
      if (!stop_ && now() - last_.load() > timeout_s_)
        comm_.abort("rank " + std::to_string(comm_.rank()) + " made no progress for " +
                        std::to_string(int(timeout_s_)) + " s (last in: " + phase_.load() +
                        "); the job is stopped (--comm-timeout sets the limit)",
                    5);
    }
  }
  Communicator& comm_;
  double timeout_s_;
  std::atomic<double> last_{now()};
  std::atomic<const char*> phase_{"start-up"};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pn
