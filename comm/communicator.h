// The communicator interface: everything pntrain needs from MPI or NCCL, and nothing more.
// Only comm/ and the launcher include mpi.h; every other folder talks to this interface.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

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

  // Non-blocking sum: starts the reduction and returns a handle; the buffer must stay untouched
  // until wait(). test() lets the reduction progress (MPI progresses only inside MPI calls).
  using Request = int;
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
  // Ends the whole job (every rank) after printing msg; never returns.
  [[noreturn]] virtual void abort(const std::string& msg, int code = 1) = 0;
};

// A single-process communicator: sums are the identity. Used without mpirun and in unit tests.
std::unique_ptr<Communicator> make_single_communicator();
// MPI when the process was started by mpirun (or PN_FORCE_MPI=1), otherwise single-process.
// Initialises MPI if needed; the communicator finalises it on destruction.
std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv);
// True when the environment says we run under an MPI launcher.
bool launched_by_mpi();

}  // namespace pn
