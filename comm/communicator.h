// The communicator interface: everything pntrain needs from MPI or NCCL, and nothing more.
// Only comm/ and the launcher include mpi.h; every other folder talks to this interface.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pn {

struct Communicator {
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // rank among the processes on this node
  virtual int local_size() const = 0;
  virtual std::string name() const = 0;  // "single", "mpi"

  // In-place sums over all ranks. Every rank must call them in the same order (zero-length too).
  virtual void allreduce_sum(float* buf, size_t n) = 0;
  virtual void allreduce_sum(double* buf, size_t n) = 0;
  virtual void allreduce_max(double* buf, size_t n) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // A communicator over the ranks of this one that pass the same `color`, ranked in their order
  // here (MPI_Comm_split; ncclCommSplit for device sums): the synchronized norms' statistics
  // groups of --sync-group-size. Collective: every rank calls it. local_rank() and local_size()
  // stay this communicator's (they place the rank on its node). Its waits and collective time
  // count here as well (`parent`), where the watchdog and the time reports look.
  virtual std::unique_ptr<Communicator> split(int color) = 0;

  // Non-blocking sum: starts the reduction and returns a handle; the buffer must stay untouched
  // until wait(). test() lets the reduction progress (MPI progresses only inside MPI calls).
  // A pending host sum: an index into the communicator's own table; `id < 0` = nothing to wait
  // for. Device sums have their own type (DeviceRequest), so neither kind can be handed to the
  // other's wait.
  struct Request {
    int id = -1;
  };
  virtual Request iallreduce_sum(float* buf, size_t n) = 0;
  virtual Request iallreduce_sum(double* buf, size_t n) = 0;
  virtual bool test(Request r) = 0;
  virtual void wait(Request r) = 0;

  // A collective that waits longer than this aborts the job naming the waiting rank
  // (a peer is hung or dead). 0 disables the limit.
  double timeout_s = 300;
  // Seconds this rank spent inside collectives (blocking calls and wait()), for time reports.
  double collective_seconds = 0;
  // True while this rank waits inside a collective (its peers are late, not this rank).
  std::atomic<bool> in_collective{false};
  // All-reduces this rank ran (host, non-blocking and device ones) and the bytes it summed in
  // them, for cost reports (pnbench).
  int64_t allreduce_count = 0;
  int64_t allreduce_bytes = 0;
  // When set, every blocking host all-reduce first meets its peers at a barrier, timed apart in
  // wait_seconds: the wait for the group's slowest rank, so that collective time minus it is the
  // transfer alone (pnbench --split-stats-wait). The barrier costs one latency per call.
  bool wait_apart = false;
  double wait_seconds = 0;
  // Where set, every blocking host all-reduce under wait_apart calls it after the barrier and
  // before its own sum: a program's measurement taken in the state that training leaves
  // (pnbench --probe-allreduce times probe all-reduces there).
  std::function<void()> after_barrier;
  // The communicator this one was split from (null for the job's own).
  Communicator* parent = nullptr;
  // Marks this rank as waiting in a collective, here and in every communicator it was split from.
  void enter_collective() {
    for (Communicator* c = this; c; c = c->parent) c->in_collective = true;
  }
  void leave_collective(double seconds) {
    for (Communicator* c = this; c; c = c->parent) {
      c->in_collective = false;
      c->collective_seconds += seconds;
    }
  }
  // The program that errors name ("pntrain: error: ...").
  std::string program = "pntrain";
  // Ends the whole job (every rank) after printing msg; never returns.
  [[noreturn]] virtual void abort(const std::string& msg, int code = 1) = 0;

  // ---- device buffers (the CUDA path; comm/nccl_comm.h) -------------------------------------
  // In-place sums of device memory. `stream` is a cudaStream_t, passed as void* so that this
  // header needs no CUDA include. allreduce_sum_device is ordered on `stream` (after the work
  // queued on it before, before the work queued after) without a host synchronisation: the
  // synchronized norms' statistics on the compute stream. iallreduce_sum_device runs the sum on
  // the communicator's own stream, ordered after the work queued so far on `stream`, and
  // wait_device(r, stream) orders later work on `stream` after it (CUDA events, no host wait):
  // gradient buckets overlapped with the backward. With one rank a sum is the identity, so
  // these defaults serve the single-process communicator; several ranks need the NCCL one.
  virtual bool device_collectives() const { return size() == 1; }
  virtual void allreduce_sum_device(float* buf, size_t n, void* stream) { single_rank_only(); }
  virtual void allreduce_sum_device(double* buf, size_t n, void* stream) { single_rank_only(); }
  struct DeviceRequest {
    int id = -1;
  };
  virtual DeviceRequest iallreduce_sum_device(float* buf, size_t n, void* stream) {
    single_rank_only();
    return {};
  }
  virtual void wait_device(DeviceRequest r, void* stream) {}
  // An error that device collectives reported asynchronously (NCCL: a peer or the network
  // failed), or "" while there is none. The watchdog polls it from its own thread and ends the
  // job with it, rather than letting the GPU spin in a collective that can never complete.
  virtual std::string device_error() { return ""; }

 private:
  void single_rank_only() {
    if (size() > 1)
      abort("the " + name() + " communicator has no device collectives; a multi-rank CUDA run "
            "needs the NCCL communicator (make_device_communicator)");
  }
};

// A single-process communicator: sums are the identity. Used without mpirun and in unit tests.
std::unique_ptr<Communicator> make_single_communicator();
// MPI when the process was started by mpirun (or PN_FORCE_MPI=1), otherwise single-process.
// Initialises MPI if needed; the communicator finalises it on destruction.
std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv);
// For ranks computing on GPUs: as make_communicator, wrapped in the NCCL communicator when built
// with NCCL (PN_HAVE_NCCL; it selects this rank's GPU by node-local rank); without NCCL the
// plain communicator, whose device collectives exist only at one rank.
std::unique_ptr<Communicator> make_device_communicator(int* argc, char*** argv);
// The same for a communicator already made: wrapped in the NCCL one when built with NCCL.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host);
// The communicator of this rank's statistics group (--sync-group-size): the group_size
// consecutive ranks r that share r / group_size (group_size 0: every rank). A split even when the
// group is the whole job, so that its counts hold the statistics sums alone. Throws
// std::invalid_argument (sync_group_error) when group_size does not divide the world size.
std::unique_ptr<Communicator> make_group_communicator(Communicator& world, int group_size);
// "" when group_size (0: the world size) is a divisor of world_size; otherwise the error, naming
// both numbers and the fix.
std::string sync_group_error(int group_size, int world_size);
// True when the environment says we run under an MPI launcher.
bool launched_by_mpi();
// The version of the NCCL library this process runs on ("2.21.5"); "" when built without NCCL.
std::string nccl_version();

}  // namespace pn
