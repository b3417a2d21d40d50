// The NCCL communicator (see comm/nccl_comm.h). Built only with PN_HAVE_NCCL.
#include "comm/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace pn {
namespace {

struct NcclCommunicator final : Communicator {
  std::unique_ptr<Communicator> host;  // host collectives, bootstrap, fallback, abort
  ncclComm_t nccl = nullptr;          // statistics, on the caller's (compute) stream
  ncclComm_t nccl_buckets = nullptr;  // gradient buckets, on bucket_stream (ncclCommSplit):
                                      // collectives of one communicator on two streams could
                                      // interleave differently on two ranks and deadlock, and
                                      // statistics must never queue behind a bucket
  bool staged = false;  // ranks share a GPU: device sums go through the host communicator
  int device = -1;
  cudaStream_t bucket_stream = nullptr;  // iallreduce_sum_device runs here
  std::vector<cudaEvent_t> done;         // per request: the sum has completed on bucket_stream
  std::vector<bool> done_busy;
  cudaEvent_t ready = nullptr;  // the caller's stream reached the bucket
  std::atomic<bool> aborted{false};  // ncclCommAbort was called (by abort(), maybe another thread)
  // The splits of this communicator (statistics groups): the watchdog asks this one for device
  // errors and aborts through it, so it answers and aborts for them too.
  std::mutex splits_mu;
  std::vector<NcclCommunicator*> splits;
  NcclCommunicator* split_of = nullptr;
  void* pinned = nullptr;            // staging buffer (fallback only)
  size_t pinned_bytes = 0;

  explicit NcclCommunicator(std::unique_ptr<Communicator> h) : host(std::move(h)) {
    timeout_s = host->timeout_s;
    int ndev = 0;
    cuda(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount (no GPU visible to this rank?)");
    if (ndev == 0) host->abort("rank " + std::to_string(rank()) + " sees no CUDA device");
    device = local_rank() % ndev;
    cuda(cudaSetDevice(device), "cudaSetDevice");
    if (local_size() > ndev && local_rank() == 0)
      std::fprintf(stderr,
                   "pntrain: warning: %d ranks on this node share %d GPU(s); ranks on the same "
                   "GPU sum through host memory (slow)\n",
                   local_size(), ndev);
    staged = shares_a_gpu();
    if (staged && rank() == 0)
      std::fprintf(stderr,
                   "pntrain: warning: two or more ranks run on the same GPU, which NCCL refuses; "
                   "device all-reduces fall back to %s through host memory\n",
                   host->name().c_str());
    cuda(cudaStreamCreateWithFlags(&bucket_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    if (!staged) {
      // The statistics (this communicator, compute stream) and the gradient buckets (the split
      // one, bucket stream) run at the same time in the backward. NCCL does not promise that
      // collectives of two communicators on two streams of one GPU make progress together:
      // ranks whose GPUs start them in different orders can deadlock. Every rank issues them in
      // the same program order, and this makes NCCL (2.26 and later) launch them in that
      // order, still overlapped (CUDA 12.3 and later). A value the user set is kept.
      setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
      ncclUniqueId id;
      std::memset(&id, 0, sizeof id);
      if (rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      host->broadcast(&id, sizeof id, 0);
      check(ncclCommInitRank(&nccl, size(), id, rank()), "ncclCommInitRank");
      check(ncclCommSplit(nccl, 0, rank(), &nccl_buckets, nullptr), "ncclCommSplit");
    }
  }
  // A split of `from` (split()): the host communicator `h` split alike, and NCCL communicators
  // split from `from`'s with the same color, on the same GPU.
  NcclCommunicator(std::unique_ptr<Communicator> h, NcclCommunicator& from, int color)
      : host(std::move(h)) {
    host->parent = nullptr;  // its time counts through this communicator, into `from`, once
    timeout_s = from.timeout_s;
    program = from.program;
    device = from.device;
    staged = from.staged;
    cuda(cudaStreamCreateWithFlags(&bucket_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    if (!staged) {
      check(ncclCommSplit(from.nccl, color, from.rank(), &nccl, nullptr), "ncclCommSplit");
      check(ncclCommSplit(from.nccl_buckets, color, from.rank(), &nccl_buckets, nullptr),
            "ncclCommSplit");
    }
    split_of = &from;
    std::lock_guard<std::mutex> lock(from.splits_mu);
    from.splits.push_back(this);
  }
  ~NcclCommunicator() override {
    if (split_of) {
      std::lock_guard<std::mutex> lock(split_of->splits_mu);
      split_of->splits.erase(std::find(split_of->splits.begin(), split_of->splits.end(), this));
    }
    if (nccl_buckets && !aborted) ncclCommDestroy(nccl_buckets);
    if (nccl && !aborted) ncclCommDestroy(nccl);
    for (cudaEvent_t e : done) cudaEventDestroy(e);
    if (ready) cudaEventDestroy(ready);
    if (bucket_stream) cudaStreamDestroy(bucket_stream);
    if (pinned) cudaFreeHost(pinned);
  }

  // Every rank's device UUID, gathered through an all-reduce (max) of a zeroed table in which
  // each rank fills its own row; true when two ranks hold the same GPU.
  bool shares_a_gpu() {
    cudaDeviceProp prop;
    cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    const int R = size(), U = int(sizeof prop.uuid.bytes);
    std::vector<double> table(size_t(R) * U, 0.0);
    for (int i = 0; i < U; ++i)
      table[size_t(rank()) * U + i] = double(static_cast<unsigned char>(prop.uuid.bytes[i]));
    sync_host_fields();
    host->allreduce_max(table.data(), table.size());
    for (int a = 0; a < R; ++a)
      for (int b = a + 1; b < R; ++b)
        if (std::equal(table.begin() + size_t(a) * U, table.begin() + size_t(a + 1) * U,
                       table.begin() + size_t(b) * U))
          return true;
    return false;
  }

  void cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      host->abort("rank " + std::to_string(rank()) + ": CUDA error in " + what + ": " +
                  cudaGetErrorString(e));
  }
  void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess)
      host->abort("rank " + std::to_string(rank()) + ": NCCL error in " + what + ": " +
                  ncclGetErrorString(r) +
                  (r == ncclInvalidUsage ? " (two ranks on one GPU? see NCCL_DEBUG=WARN)" : ""));
  }

  // The host communicator keeps the timeout and the time accounting of the calls it runs.
  void sync_host_fields() { host->timeout_s = timeout_s; }
  template <class F>
  void on_host(F f) {
    sync_host_fields();
    const double before = host->collective_seconds;
    enter_collective();
    f();
    leave_collective(host->collective_seconds - before);
  }

  int rank() const override { return host->rank(); }
  int size() const override { return host->size(); }
  int local_rank() const override { return host->local_rank(); }
  int local_size() const override { return host->local_size(); }
  std::string name() const override { return staged ? host->name() + "+staged" : "nccl"; }

  std::unique_ptr<Communicator> split(int color) override {
    std::unique_ptr<Communicator> h;
    on_host([&] { h = host->split(color); });
    auto group = std::make_unique<NcclCommunicator>(std::move(h), *this, color);
    group->parent = this;
    return group;
  }
  void count(size_t bytes) {
    ++allreduce_count;
    allreduce_bytes += int64_t(bytes);
  }

  void allreduce_sum(float* buf, size_t n) override {
    count(n * sizeof(float));
    on_host([&] { host->allreduce_sum(buf, n); });
  }
  void allreduce_sum(double* buf, size_t n) override {
    count(n * sizeof(double));
    on_host([&] { host->allreduce_sum(buf, n); });
  }
  void allreduce_max(double* buf, size_t n) override {
    count(n * sizeof(double));
    on_host([&] { host->allreduce_max(buf, n); });
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    on_host([&] { host->broadcast(buf, bytes, root); });
  }
  void barrier() override {
    on_host([&] { host->barrier(); });
  }
  Request iallreduce_sum(float* buf, size_t n) override {
    count(n * sizeof(float));
    return host->iallreduce_sum(buf, n);
  }
  Request iallreduce_sum(double* buf, size_t n) override {
    count(n * sizeof(double));
    return host->iallreduce_sum(buf, n);
  }
  bool test(Request r) override { return host->test(r); }
  void wait(Request r) override {
    on_host([&] { host->wait(r); });
  }
  // Called by the watchdog thread too: aborting the NCCL communicator first ends the collectives
  // that a dead or hung peer would keep spinning on the GPU, so that the process can exit.
  [[noreturn]] void abort(const std::string& msg, int code) override {
    abort_device_comms();
    host->abort(msg, code);
    std::_Exit(code);  // not reached: host->abort ends the job
  }

  void abort_device_comms() {
    {
      std::lock_guard<std::mutex> lock(splits_mu);
      for (NcclCommunicator* g : splits) g->abort_device_comms();
    }
    if (nccl && !aborted.exchange(true)) {
      if (nccl_buckets) ncclCommAbort(nccl_buckets);
      ncclCommAbort(nccl);
    }
  }

  // ---- device sums ----------------------------------------------------------------------------
  bool device_collectives() const override { return true; }

  std::string device_error() override {
    {
      std::lock_guard<std::mutex> lock(splits_mu);
      for (NcclCommunicator* g : splits)
        if (std::string e = g->device_error(); !e.empty()) return e;
    }
    if (!nccl || aborted) return "";
    for (ncclComm_t c : {nccl, nccl_buckets}) {
      ncclResult_t async = ncclSuccess;
      if (!c || ncclCommGetAsyncError(c, &async) != ncclSuccess || async == ncclSuccess ||
          async == ncclInProgress)
        continue;
      return std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(async) +
             " (a peer rank died or the network failed; NCCL_DEBUG=WARN says more)";
    }
    return "";
  }

  template <class T>
  void staged_sum(T* buf, size_t n, cudaStream_t s) {
    const size_t bytes = n * sizeof(T);
    if (bytes > pinned_bytes) {
      if (pinned) cuda(cudaFreeHost(pinned), "cudaFreeHost");
      cuda(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
      pinned_bytes = bytes;
    }
    T* h = static_cast<T*>(pinned);
    cuda(cudaMemcpyAsync(h, buf, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    on_host([&] { host->allreduce_sum(h, n); });
    cuda(cudaMemcpyAsync(buf, h, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // h is reused by the next call
  }
  template <class T>
  void device_sum(T* buf, size_t n, cudaStream_t s, ncclDataType_t type) {
    count(n * sizeof(T));
    if (n == 0) return;
    if (staged) return staged_sum(buf, n, s);
    check(ncclAllReduce(buf, buf, n, type, ncclSum, nccl, s), "ncclAllReduce");
  }
  void allreduce_sum_device(float* buf, size_t n, void* stream) override {
    device_sum(buf, n, static_cast<cudaStream_t>(stream), ncclFloat32);
  }
  void allreduce_sum_device(double* buf, size_t n, void* stream) override {
    device_sum(buf, n, static_cast<cudaStream_t>(stream), ncclFloat64);
  }

  DeviceRequest iallreduce_sum_device(float* buf, size_t n, void* stream) override {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (staged || n == 0) {  // the fallback is synchronous: nothing left to wait for
      device_sum(buf, n, s, ncclFloat32);
      return {};
    }
    size_t r = 0;
    while (r < done.size() && done_busy[r]) ++r;
    if (r == done.size()) {
      cudaEvent_t e;
      cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      done.push_back(e);
      done_busy.push_back(false);
    }
    count(n * sizeof(float));
    cuda(cudaEventRecord(ready, s), "cudaEventRecord");
    cuda(cudaStreamWaitEvent(bucket_stream, ready, 0), "cudaStreamWaitEvent");
    check(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, nccl_buckets, bucket_stream),
          "ncclAllReduce (gradient bucket)");
    cuda(cudaEventRecord(done[r], bucket_stream), "cudaEventRecord");
    done_busy[r] = true;
    return DeviceRequest{int(r)};
  }
  void wait_device(DeviceRequest r, void* stream) override {
    if (r.id < 0 || size_t(r.id) >= done.size() || !done_busy[r.id]) return;
    cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done[r.id], 0),
         "cudaStreamWaitEvent");
    done_busy[r.id] = false;  // the wait captured the event; it may be recorded again
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host) {
  return std::make_unique<NcclCommunicator>(std::move(host));
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v <= 0) return "";
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch from 2.9 on, major*1000 + ... before.
  const bool current = v >= 10000;
  const int major = current ? v / 10000 : v / 1000, minor = current ? v / 100 % 100 : v / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

}  // namespace pn
