// The MPI communicator (Open MPI). Collectives are blocking; a rank that dies makes mpirun
// tear the job down, and abort() calls MPI_Abort so no rank is left waiting in a collective.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"

namespace pn {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    std::fprintf(stderr, "pntrain: MPI error in %s: %s\n", what, err);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct MpiCommunicator final : Communicator {
  bool owns_mpi = false;
  std::vector<MPI_Request> requests;  // handles of iallreduce_sum, reused once completed
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int world_rank_ = 0;              // the rank that messages name (the job's, also in a split)
  bool oversubscribed_ = false;     // more ranks on this node than cores: waits yield the core
  MPI_Comm comm = MPI_COMM_WORLD;   // the job, or a split's own communicator
  MPI_Comm node_comm = MPI_COMM_NULL;

  explicit MpiCommunicator(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_mpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Node-local rank: used to pick a GPU and to share the node's cores between its ranks.
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL,
                                  &node_comm), "MPI_Comm_split_type");
    MPI_Comm_rank(node_comm, &local_rank_);
    MPI_Comm_size(node_comm, &local_size_);
    world_rank_ = rank_;
    oversubscribed_ = unsigned(local_size_) > std::max(1u, std::thread::hardware_concurrency());
  }
  // A split of `from` (split()): the ranks of `c`, placed on their node as in `from`.
  MpiCommunicator(MPI_Comm c, const MpiCommunicator& from) : comm(c) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    local_rank_ = from.local_rank_;
    local_size_ = from.local_size_;
    world_rank_ = from.world_rank_;
    oversubscribed_ = from.oversubscribed_;
  }
  ~MpiCommunicator() override {
    if (comm != MPI_COMM_WORLD && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    if (node_comm != MPI_COMM_NULL) MPI_Comm_free(&node_comm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_mpi && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<Communicator> split(int color) override {
    MPI_Comm c = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm, color, rank_, &c), "MPI_Comm_split");
    auto group = std::make_unique<MpiCommunicator>(c, *this);
    group->program = program;
    group->timeout_s = timeout_s;
    group->parent = this;
    return group;
  }

  void allreduce_sum(float* buf, size_t n) override { reduce(buf, n, MPI_FLOAT, MPI_SUM); }
  void allreduce_sum(double* buf, size_t n) override { reduce(buf, n, MPI_DOUBLE, MPI_SUM); }
  void allreduce_max(double* buf, size_t n) override { reduce(buf, n, MPI_DOUBLE, MPI_MAX); }

  void reduce(void* buf, size_t n, MPI_Datatype type, MPI_Op op) {
    // MPI counts are int: reduce in chunks so multi-GB buffers work. Every rank joins even
    // with n == 0. Non-blocking calls completed under a timeout, so a dead peer cannot hang us.
    const size_t chunk = size_t(1) << 30;
    const size_t elem = type == MPI_FLOAT ? 4 : 8;
    ++allreduce_count;
    allreduce_bytes += int64_t(n * elem);
    if (wait_apart) {
      MPI_Request req;
      check_mpi(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
      wait_seconds += complete(&req, "a barrier before an all-reduce");
      if (after_barrier) after_barrier();
    }
    char* p = static_cast<char*>(buf);
    size_t off = 0;
    do {
      const int cnt = int(std::min(chunk, n - off));
      MPI_Request req;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p + off * elem, cnt, type, op, comm, &req),
                "MPI_Iallreduce");
      complete(&req, "an all-reduce");
      off += chunk;
    } while (off < n);
  }

  // Waits for req, polling so that a peer that never arrives ends the job after timeout_s.
  // Returns the seconds waited (also added to collective_seconds).
  double complete(MPI_Request* req, const char* what) {
    const double t0 = now_s();
    enter_collective();
    int done = 0;
    // The first kSpinSeconds poll back to back (as MPI's blocking calls do), so that a peer
    // microseconds late costs microseconds: a sleep would add its own 50-100 us to every
    // all-reduce a rank enters first. Only oversubscribed ranks yield between polls (a yield
    // would hand the core to any other process, for its whole time slice), to let a peer on the
    // same core run. A longer wait (a peer validating or writing a checkpoint) sleeps between
    // polls and leaves the core to others.
    constexpr double kSpinSeconds = 0.01;
    bool spinning = true;
    for (long polls = 0;; ++polls) {
      check_mpi(MPI_Test(req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) break;
      if ((polls & 63) == 0 && spinning) spinning = now_s() - t0 < kSpinSeconds;
      if (!spinning)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else if (oversubscribed_)
        std::this_thread::yield();
      if (timeout_s > 0 && (polls & 255) == 0 && now_s() - t0 > timeout_s) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "rank %d waited more than %.0f s in %s: another rank is hung or dead "
                      "(see its messages above; --comm-timeout sets the limit)",
                      world_rank_, timeout_s, what);
        std::fprintf(stderr, "%s: error: %s\n", program.c_str(), msg);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 4);
      }
    }
    const double waited = now_s() - t0;
    leave_collective(waited);
    return waited;
  }

  Request iallreduce_sum(float* buf, size_t n) override { return start(buf, n, MPI_FLOAT); }
  Request iallreduce_sum(double* buf, size_t n) override { return start(buf, n, MPI_DOUBLE); }
  Request start(void* buf, size_t n, MPI_Datatype type) {
    if (n > size_t(1) << 30) {  // beyond one MPI count: fall back to the blocking path
      reduce(buf, n, type, MPI_SUM);
      return {};
    }
    ++allreduce_count;
    allreduce_bytes += int64_t(n * (type == MPI_FLOAT ? 4 : 8));
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf, int(n), type, MPI_SUM, comm, &req),
              "MPI_Iallreduce");
    for (size_t i = 0; i < requests.size(); ++i)
      if (requests[i] == MPI_REQUEST_NULL) {
        requests[i] = req;
        return Request{int(i)};
      }
    requests.push_back(req);
    return Request{int(requests.size() - 1)};
  }
  bool test(Request r) override {
    if (r.id < 0 || requests[r.id] == MPI_REQUEST_NULL) return true;
    int done = 0;
    check_mpi(MPI_Test(&requests[r.id], &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void wait(Request r) override {
    if (r.id < 0 || requests[r.id] == MPI_REQUEST_NULL) return;
    complete(&requests[r.id], "a non-blocking all-reduce");
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    const size_t chunk = size_t(1) << 30;
    char* p = static_cast<char*>(buf);
    for (size_t off = 0; off < bytes || off == 0; off += chunk) {
      const int cnt = int(std::min(chunk, bytes - off));
      MPI_Request req;
      check_mpi(MPI_Ibcast(p + off, cnt, MPI_BYTE, root, comm, &req), "MPI_Ibcast");
      complete(&req, "a broadcast");
      if (bytes == 0) break;
    }
  }
  void barrier() override {
    MPI_Request req;
    check_mpi(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
    complete(&req, "a barrier");
  }

  [[noreturn]] void abort(const std::string& msg, int code) override {
    if (world_rank_ == 0) {
      std::fprintf(stderr, "%s: error: %s\n", program.c_str(), msg.c_str());
      std::fflush(stderr);
    } else {
      // Errors that every rank detects are reported once, by rank 0: give it time to do so
      // before this rank tears the job down; an error of this rank alone is still printed.
      std::this_thread::sleep_for(std::chrono::seconds(3));
      std::fprintf(stderr, "%s: error on rank %d: %s\n", program.c_str(), world_rank_,
                   msg.c_str());
      std::fflush(stderr);
    }
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}

}  // namespace pn
