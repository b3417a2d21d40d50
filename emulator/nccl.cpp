// NCCL for the CUDA emulation, between the ranks of one machine through POSIX shared memory.
//
// Not on MPI: the project initialises MPI with MPI_THREAD_FUNNELED (only the main thread may call
// it), and an emulated collective runs on its stream's worker thread, in stream order, while the
// main thread goes on. A communicator is one shared segment: a slot per rank through which each
// chunk of an all-reduce passes, and per-rank step counters (a data channel for the collectives
// on streams, a bootstrap channel for the host calls: init and split). Every rank adds the slots
// in rank order, so the sums are the same on every rank and repeat bit for bit. An abort (here or
// on a peer) ends every wait; a peer that abort()s is reported by ncclCommGetAsyncError.
#include "nccl.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kChunk = size_t(1) << 20;  // bytes of one rank's slot

struct Shared {  // the segment's header; the slots follow it
  std::atomic<int> aborted;
  std::atomic<uint64_t> data_in[kMaxRanks], data_out[kMaxRanks], boot[kMaxRanks];
  int split_color[kMaxRanks], split_key[kMaxRanks];
};

}  // namespace

struct ncclComm {
  std::string name;
  int rank = 0, size = 1;
  Shared* shm = nullptr;
  char* slots = nullptr;
  uint64_t data_step = 0, boot_step = 0;  // this rank's steps on each channel
  int splits = 0;                         // splits made from this communicator
  std::atomic<bool> aborted{false};
  std::mutex data_mu;  // one collective of this communicator at a time

  char* slot(int r) { return slots + size_t(r) * kChunk; }
  // Waits until every rank's counter has reached step; false when the communicator is aborted.
  bool wait_all(std::atomic<uint64_t>* counters, uint64_t step) {
    for (int spins = 0;; ++spins) {
      bool all = true;
      for (int r = 0; r < size && all; ++r) all = counters[r].load(std::memory_order_acquire) >= step;
      if (all) return true;
      if (aborted || shm->aborted.load()) return false;
      if (spins < 1000)
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool boot_barrier() {
    ++boot_step;
    shm->boot[rank].store(boot_step, std::memory_order_release);
    return wait_all(shm->boot, boot_step);
  }
};

namespace {

ncclResult_t open_comm(ncclComm_t* out, const std::string& name, int size, int rank) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) return ncclInvalidArgument;
  auto* c = new ncclComm;
  c->name = name;
  c->rank = rank;
  c->size = size;
  const size_t bytes = sizeof(Shared) + size_t(size) * kChunk;
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) {
    std::fprintf(stderr, "pn CUDA emulation: NCCL cannot create the shared segment %s\n",
                 name.c_str());
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return ncclSystemError;
  c->shm = static_cast<Shared*>(m);
  c->slots = static_cast<char*>(m) + sizeof(Shared);
  if (!c->boot_barrier()) return ncclRemoteError;  // every rank has mapped it
  if (rank == 0) shm_unlink(name.c_str());          // gone with the last mapping
  *out = c;
  return ncclSuccess;
}

template <class T>
void sum_chunk(ncclComm& c, T* recv, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T s = reinterpret_cast<const T*>(c.slot(0))[i];
    for (int r = 1; r < c.size; ++r) s += reinterpret_cast<const T*>(c.slot(r))[i];
    recv[i] = s;
  }
}

// One all-reduce, chunk by chunk, on the stream's worker thread.
template <class T>
void all_reduce(ncclComm& c, const T* send, T* recv, size_t count) {
  std::lock_guard<std::mutex> l(c.data_mu);
  const size_t per = kChunk / sizeof(T);
  for (size_t off = 0; off < count; off += per) {
    const size_t n = std::min(per, count - off);
    const uint64_t step = ++c.data_step;
    std::memcpy(c.slot(c.rank), send + off, n * sizeof(T));
    c.shm->data_in[c.rank].store(step, std::memory_order_release);
    if (!c.wait_all(c.shm->data_in, step)) return;
    sum_chunk(c, recv + off, n);
    c.shm->data_out[c.rank].store(step, std::memory_order_release);  // my slot may be reused
    if (!c.wait_all(c.shm->data_out, step)) return;
  }
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetVersion(int* version) {
  *version = 0;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<int> counter{0};
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "/pn_emu_nccl_%d_%d", int(getpid()),
                counter++);
  shm_unlink(id->internal);  // a segment left by a crashed process of the same pid starts over
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return open_comm(comm, std::string(id.internal, strnlen(id.internal, sizeof id.internal)),
                   nranks, rank);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out,
                           ncclConfig_t* config) {
  comm->shm->split_color[comm->rank] = color;
  comm->shm->split_key[comm->rank] = key;
  if (!comm->boot_barrier()) return ncclRemoteError;
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of this color
  for (int r = 0; r < comm->size; ++r)
    if (comm->shm->split_color[r] == color) members.emplace_back(comm->shm->split_key[r], r);
  const int split = comm->splits++;
  if (!comm->boot_barrier()) return ncclRemoteError;  // every rank has read the table
  if (color == NCCL_SPLIT_NOCOLOR) {
    *out = nullptr;
    return ncclSuccess;
  }
  std::sort(members.begin(), members.end());
  const int me = int(std::find(members.begin(), members.end(), std::make_pair(key, comm->rank)) -
                     members.begin());
  return open_comm(out, comm->name + "_" + std::to_string(split) + "_" + std::to_string(color),
                   int(members.size()), me);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  // Collectives still queued on a stream may name it: it is parked for the process.
  static std::mutex mu;
  static std::vector<ncclComm_t>* parked = new std::vector<ncclComm_t>;
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> l(mu);
  parked->push_back(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  comm->aborted = true;
  comm->shm->aborted.store(1);  // the peers' waits end too
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (!comm) return ncclInvalidArgument;
  *async = comm->shm->aborted.load() && !comm->aborted ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  if (!comm || op != ncclSum || (type != ncclFloat32 && type != ncclFloat64))
    return ncclInvalidArgument;
  const size_t bytes = count * (type == ncclFloat64 ? 8 : 4);
  if (count && (!pn_emu::is_device_range(send, bytes) || !pn_emu::is_device_range(recv, bytes))) {
    std::fprintf(stderr, "pn CUDA emulation: ncclAllReduce of %zu bytes: a buffer is not device "
                         "memory\n", bytes);
    return ncclInvalidArgument;
  }
  if (count == 0) return ncclSuccess;
  pn_emu::enqueue(s, [=] {
    if (type == ncclFloat64)
      all_reduce(*comm, static_cast<const double*>(send), static_cast<double*>(recv), count);
    else
      all_reduce(*comm, static_cast<const float*>(send), static_cast<float*>(recv), count);
  });
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }  // each call is queued on its own already
ncclResult_t ncclGroupEnd() { return ncclSuccess; }
