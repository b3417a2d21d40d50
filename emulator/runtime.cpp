// The emulated CUDA runtime: memory, streams, events, errors and the one emulated device.
//
// A stream is an in-order queue drained by its own worker thread, so work runs apart from the
// host thread as on a GPU: a host read of a buffer before its stream is synchronized sees the
// old bytes (and ThreadSanitizer sees the race). The legacy default stream (nullptr) waits for
// the blocking streams and they for it, as CUDA's legacy stream does.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_runtime.h"

namespace {
// The emulated device's memory: a cudaMalloc beyond it fails as on a GPU. 4 GiB by default (the
// CPU's memory is shared), PN_EMU_DEVICE_GIB=N for more.
size_t device_memory() {
  static const size_t bytes = [] {
    const char* v = std::getenv("PN_EMU_DEVICE_GIB");
    return size_t(v ? std::atoi(v) : 4) << 30;
  }();
  return bytes;
}
constexpr int kSharedDefault = 48 << 10, kSharedOptin = 227 << 10;  // an H100's limits
}  // namespace

struct CUstream_st {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0, done = 0;  // counts of items queued and finished
  bool blocking = true;           // synchronizes with the legacy stream
  std::thread worker;
  // While captured: what is queued goes here instead (a graph's work, in order), and whether
  // an operation a capture cannot hold (a synchronisation) has invalidated it.
  std::vector<std::function<void()>>* capture = nullptr;
  bool capture_invalidated = false;

  void run() {
    std::unique_lock<std::mutex> l(m);
    for (;;) {
      cv.wait(l, [&] { return !queue.empty(); });
      std::function<void()> fn = std::move(queue.front());
      queue.pop_front();
      l.unlock();
      fn();
      fn = nullptr;
      l.lock();
      ++done;
      cv.notify_all();
    }
  }
  uint64_t push(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(m);
    queue.push_back(std::move(fn));
    cv.notify_all();
    return ++queued;
  }
  void wait_until(uint64_t n) {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return done >= n; });
  }
  uint64_t tail() {
    std::lock_guard<std::mutex> l(m);
    return queued;
  }
  bool idle() {
    std::lock_guard<std::mutex> l(m);
    return done == queued;
  }
};

struct CUgraph_st {
  std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};

struct CUevent_st {
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded = 0, reached = 0;  // records issued, records the stream has passed
  std::chrono::steady_clock::time_point when;
};

namespace pn_emu {
namespace {

thread_local cudaError_t last_error = cudaSuccess;

// Streams live for the process (a destroyed one is drained and parked): their workers never
// need joining at exit, when the host may leave work queued.
std::mutex streams_mu;
std::set<CUstream_st*> live_streams;
CUstream_st* new_stream(bool blocking) {
  auto* s = new CUstream_st;
  s->blocking = blocking;
  s->worker = std::thread([s] { s->run(); });
  s->worker.detach();
  std::lock_guard<std::mutex> l(streams_mu);
  live_streams.insert(s);
  return s;
}
CUstream_st* legacy() {
  static CUstream_st* s = new_stream(true);
  return s;
}
CUstream_st* resolve(cudaStream_t s) { return s ? s : legacy(); }

// Device allocations by start address, and pinned host blocks: memory kinds are told apart
// by lookup, so a copy or free naming the wrong kind fails with the culprit's address.
enum class Kind { device, pinned };
struct Alloc {
  size_t bytes;
  Kind kind;
};
std::mutex allocs_mu;
std::map<uintptr_t, Alloc> allocs;
size_t device_bytes = 0, device_bytes_high = 0;  // live, and the most ever live

const Alloc* find_alloc(const void* p, uintptr_t* base) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = allocs.upper_bound(a);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (a >= it->first + (it->second.bytes ? it->second.bytes : 1)) return nullptr;
  *base = it->first;
  return &it->second;
}
bool is_kind(const void* p, size_t bytes, Kind k) {
  std::lock_guard<std::mutex> l(allocs_mu);
  uintptr_t base = 0;
  const Alloc* a = find_alloc(p, &base);
  return a && a->kind == k && reinterpret_cast<uintptr_t>(p) + bytes <= base + a->bytes;
}

// Device memory the host cannot read. Outside the sanitizer builds device allocations are whole
// pages of one reserved arena, mapped without access whenever no stream has work queued or
// running: a host read or write of device memory then faults at the faulty line, as on a GPU
// (a host read while work is in flight is a race, which the ThreadSanitizer build reports). The
// arena opens when work is queued and closes at the next synchronisation of the host that finds
// every stream idle. The sanitizer builds take device memory from malloc, so that
// AddressSanitizer sees an overflow or a use after free of it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGuarded = false;
#else
constexpr bool kGuarded = true;
#endif
constexpr size_t kPage = 4096;
struct Arena {
  char* base = nullptr;
  size_t bytes = 0;
  std::map<size_t, size_t> free_runs;  // offset -> bytes, coalesced
  bool open = false;                   // readable and writable (work queued or running)
  std::mutex mu;                       // taken before allocs_mu, streams_mu and a stream's m
};
Arena& arena() {
  static Arena* a = [] {
    auto* r = new Arena;  // never unmapped: buffers may be released during exit
    r->bytes = 2 * device_memory() + (size_t(1) << 30);
    void* p = mmap(nullptr, r->bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                   0);
    if (p == MAP_FAILED) die("cannot reserve %zu bytes of address space for device memory", r->bytes);
    r->base = static_cast<char*>(p);
    r->free_runs[0] = r->bytes;
    return r;
  }();
  return *a;
}
void protect(char* p, size_t bytes, bool open) {
  if (mprotect(p, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    die("mprotect of device memory failed");
}
// Called (under the arena's lock) before work is queued, and at a synchronisation.
void open_device_memory(Arena& a) {
  if (!a.open) protect(a.base, a.bytes, true);
  a.open = true;
}
// Pages for a device allocation (first fit), poisoned with NaN bytes: code that reads what it
// never wrote shows it. Null where the arena is full.
char* arena_take(size_t bytes) {
  Arena& a = arena();
  const size_t want = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> l(a.mu);
  auto it = std::find_if(a.free_runs.begin(), a.free_runs.end(),
                         [&](const auto& run) { return run.second >= want; });
  if (it == a.free_runs.end()) return nullptr;
  const size_t at = it->first, left = it->second - want;
  a.free_runs.erase(it);
  if (left) a.free_runs[at + want] = left;
  char* p = a.base + at;
  if (!a.open) protect(p, want, true);
  std::memset(p, 0xff, bytes);
  if (!a.open) protect(p, want, false);
  return p;
}
void arena_give(void* p, size_t bytes) {
  Arena& a = arena();
  const size_t at = static_cast<char*>(p) - a.base;
  size_t len = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  madvise(p, len, MADV_DONTNEED);  // the pages go back to the system
  std::lock_guard<std::mutex> l(a.mu);
  size_t start = at;
  auto next = a.free_runs.lower_bound(at);
  if (next != a.free_runs.end() && next->first == at + len) {
    len += next->second;
    next = a.free_runs.erase(next);
  }
  if (next != a.free_runs.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      start = prev->first;
      len += prev->second;
      a.free_runs.erase(prev);
    }
  }
  a.free_runs[start] = len;
}

void* allocate(size_t bytes, Kind k) {
  if (k == Kind::device) {
    std::lock_guard<std::mutex> l(allocs_mu);
    if (device_bytes + bytes > device_memory()) return nullptr;  // out of device memory
  }
  void* p = nullptr;
  if (k == Kind::device && kGuarded) {
    p = arena_take(bytes);
  } else {
    p = std::malloc(bytes ? bytes : 1);
    // New device memory holds NaN bytes, as in the arena.
    if (p && k == Kind::device) std::memset(p, 0xff, bytes);
  }
  if (!p) return nullptr;
  std::lock_guard<std::mutex> l(allocs_mu);
  allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, k};
  if (k == Kind::device) device_bytes_high = std::max(device_bytes_high, device_bytes += bytes);
  return p;
}
cudaError_t release(void* p, Kind k, const char* call) {
  if (!p) return cudaSuccess;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> l(allocs_mu);
    auto it = allocs.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocs.end() || it->second.kind != k)
      return fail_with(cudaErrorInvalidValue, "%s(%p): not the start of a live %s allocation",
                       call, p, k == Kind::device ? "device" : "pinned host");
    if (k == Kind::device) device_bytes -= it->second.bytes;
    bytes = it->second.bytes;
    allocs.erase(it);
  }
  if (k == Kind::device && kGuarded)
    arena_give(p, bytes);
  else
    std::free(p);
  return cudaSuccess;
}

// The end of a synchronisation of the host: device memory closed where every stream is idle.
void close_device_memory_if_idle() {
  if (!kGuarded) return;
  Arena& a = arena();
  std::lock_guard<std::mutex> l(a.mu);
  if (!a.open) return;
  {
    std::lock_guard<std::mutex> ls(streams_mu);
    for (CUstream_st* s : live_streams)
      if (!s->idle()) return;
  }
  protect(a.base, a.bytes, false);
  a.open = false;
}

void sync_all() {
  std::vector<std::pair<CUstream_st*, uint64_t>> tails;
  {
    std::lock_guard<std::mutex> l(streams_mu);
    for (CUstream_st* s : live_streams) tails.emplace_back(s, s->tail());
  }
  for (auto& [s, n] : tails) s->wait_until(n);
  close_device_memory_if_idle();
}

const char* kind_name(cudaMemcpyKind k) {
  static const char* names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                                "Default"};
  return names[k];
}

// A copy's pointers must be of the kinds its direction names, and device ranges must lie inside
// one allocation: a GPU would fault, copy garbage or reject the call.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                       const char* call) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = is_device_range(dst, bytes), src_dev = is_device_range(src, bytes);
  const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) return cudaSuccess;
  if (dst_dev != want_dst)
    return fail_with(cudaErrorInvalidValue,
                     "%s %s: the destination %p (%zu bytes) is %s device memory", call,
                     kind_name(kind), dst, bytes, dst_dev ? "" : "not (inside one allocation of)");
  if (src_dev != want_src)
    return fail_with(cudaErrorInvalidValue, "%s %s: the source %p (%zu bytes) is %s device memory",
                     call, kind_name(kind), src, bytes,
                     src_dev ? "" : "not (inside one allocation of)");
  return cudaSuccess;
}

void say(const char* fmt, std::va_list ap) {  // one line on stderr, named as the emulation's
  std::fprintf(stderr, "pn CUDA emulation: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
}
}  // namespace

void die(const char* fmt, ...) {
  std::va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
  std::abort();
}

cudaError_t fail_with(cudaError_t e, const char* fmt, ...) {
  // PN_EMU_QUIET=1: tests that provoke errors on purpose keep their logs clean.
  static const bool quiet = std::getenv("PN_EMU_QUIET") != nullptr;
  if (!quiet) {
    std::va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
  }
  last_error = e;
  return e;
}

bool is_device_range(const void* p, size_t bytes) { return is_kind(p, bytes, Kind::device); }

void enqueue(cudaStream_t s, std::function<void()> fn) {
  CUstream_st* st = resolve(s);
  if (st->capture) {  // recorded, not run (the capture's host thread is the only writer)
    st->capture->push_back(std::move(fn));
    return;
  }
  std::unique_lock<std::mutex> opened;  // held while queuing: no close between open and push
  if (kGuarded) {
    opened = std::unique_lock<std::mutex>(arena().mu);
    open_device_memory(arena());
  }
  // Legacy-stream semantics: the legacy stream waits for every blocking stream's queued work,
  // a blocking stream for the legacy stream's.
  std::vector<std::pair<CUstream_st*, uint64_t>> waits;
  if (st == legacy()) {
    std::lock_guard<std::mutex> l(streams_mu);
    for (CUstream_st* o : live_streams)
      if (o != st && o->blocking) waits.emplace_back(o, o->tail());
  } else if (st->blocking) {
    waits.emplace_back(legacy(), legacy()->tail());
  }
  if (!waits.empty())
    st->push([waits] {
      for (auto& [o, n] : waits) o->wait_until(n);
    });
  st->push(std::move(fn));
}

namespace {
std::mutex attrs_mu;
std::map<std::string, int> dynamic_optin;  // kernel name -> MaxDynamicSharedMemorySize
}  // namespace

cudaError_t func_get_attributes(cudaFuncAttributes* a, const char* kernel) {
  std::lock_guard<std::mutex> l(attrs_mu);
  a->sharedSizeBytes = 0;
  a->maxThreadsPerBlock = 1024;
  auto it = dynamic_optin.find(kernel);
  a->maxDynamicSharedSizeBytes = it == dynamic_optin.end() ? kSharedDefault : it->second;
  return cudaSuccess;
}
cudaError_t func_set_attribute(const char* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > kSharedOptin)
    return fail_with(cudaErrorInvalidValue, "cudaFuncSetAttribute(%s, %d, %d): out of range",
                     kernel, int(attr), value);
  std::lock_guard<std::mutex> l(attrs_mu);
  dynamic_optin[kernel] = value;
  return cudaSuccess;
}
int dynamic_smem_limit(const char* kernel) {
  std::lock_guard<std::mutex> l(attrs_mu);
  auto it = dynamic_optin.find(kernel);
  return it == dynamic_optin.end() ? kSharedDefault : it->second;
}

}  // namespace pn_emu

using namespace pn_emu;

// ---- errors and the device ------------------------------------------------------------------
cudaError_t cudaGetLastError() { return std::exchange(pn_emu::last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return pn_emu::last_error; }
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unknown error";
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess
                : fail_with(cudaErrorInvalidDevice, "cudaSetDevice(%d): one device (0)", d);
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return fail_with(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", d);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "CUDA emulation on the CPU");
  // A UUID per process: ranks of one machine look like ranks with a GPU each.
  const uint64_t pid = uint64_t(getpid());
  std::memcpy(p->uuid.bytes, "pnemu...", 8);
  std::memcpy(p->uuid.bytes + 8, &pid, 8);
  p->totalGlobalMem = device_memory();
  p->sharedMemPerBlock = kSharedDefault;
  p->sharedMemPerBlockOptin = kSharedOptin;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  p->maxThreadsPerBlock = 1024;
  p->warpSize = 32;
  p->l2CacheSize = 4 << 20;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin)
    return fail_with(cudaErrorInvalidValue, "cudaDeviceGetAttribute(%d): not emulated", int(a));
  *v = kSharedOptin;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  sync_all();
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> l(allocs_mu);
  *total_bytes = device_memory();
  *free_bytes = device_bytes < device_memory() ? device_memory() - device_bytes : 0;
  return cudaSuccess;
}

// ---- memory ---------------------------------------------------------------------------------
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device != 0) return fail_with(cudaErrorInvalidDevice, "cudaDeviceGetDefaultMemPool(%d)", device);
  static int the_pool;
  *pool = reinterpret_cast<cudaMemPool_t>(&the_pool);
  return cudaSuccess;
}
// The used-memory counters of the one pool (uint64_t, as CUDA's); other attributes are refused.
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (!pool || (attr != cudaMemPoolAttrUsedMemCurrent && attr != cudaMemPoolAttrUsedMemHigh))
    return fail_with(cudaErrorInvalidValue, "cudaMemPoolGetAttribute(%d)", int(attr));
  std::lock_guard<std::mutex> l(allocs_mu);
  *static_cast<uint64_t*>(value) =
      attr == cudaMemPoolAttrUsedMemHigh ? device_bytes_high : device_bytes;
  return cudaSuccess;
}
// Only the high-water mark may be set, and only to 0: it restarts from what is live.
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (!pool || attr != cudaMemPoolAttrUsedMemHigh || *static_cast<uint64_t*>(value) != 0)
    return fail_with(cudaErrorInvalidValue, "cudaMemPoolSetAttribute(%d)", int(attr));
  std::lock_guard<std::mutex> l(allocs_mu);
  device_bytes_high = device_bytes;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = allocate(bytes, Kind::device);
  return *p ? cudaSuccess : fail_with(cudaErrorMemoryAllocation, "cudaMalloc(%zu)", bytes);
}
cudaError_t cudaFree(void* p) {
  sync_all();  // cudaFree waits for the device, as on a GPU
  return release(p, Kind::device, "cudaFree");
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  return cudaMalloc(p, bytes);  // usable by work queued after this call, as the real one
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (p && !is_device_range(p, 0))
    return fail_with(cudaErrorInvalidValue, "cudaFreeAsync(%p): not device memory", p);
  enqueue(s, [p] {
    if (release(p, Kind::device, "cudaFreeAsync") != cudaSuccess)
      die("cudaFreeAsync(%p): freed twice", p);
  });
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = allocate(bytes, Kind::pinned);
  return *p ? cudaSuccess : fail_with(cudaErrorMemoryAllocation, "cudaMallocHost(%zu)", bytes);
}
cudaError_t cudaFreeHost(void* p) {
  sync_all();
  return release(p, Kind::pinned, "cudaFreeHost");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpyAsync")) return e;
  // Even from pageable memory the copy may happen after the call returns (CUDA promises no
  // more), so the source is read in stream order.
  if (bytes) enqueue(s, [=] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpy")) return e;
  if (bytes) enqueue(nullptr, [=] { std::memcpy(dst, src, bytes); });
  return cudaStreamSynchronize(nullptr);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (bytes && !is_device_range(p, bytes))
    return fail_with(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %zu bytes): not device memory",
                     p, bytes);
  if (bytes) enqueue(s, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr)) return e;
  return cudaStreamSynchronize(nullptr);
}
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t s) {
  if (height == 0 || width == 0) return cudaSuccess;
  if (width > pitch || !is_device_range(p, pitch * (height - 1) + width))
    return fail_with(cudaErrorInvalidValue,
                     "cudaMemset2DAsync(%p, pitch %zu, width %zu, height %zu): not inside one "
                     "device allocation",
                     p, pitch, width, height);
  enqueue(s, [=] {
    for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, value, width);
  });
  return cudaSuccess;
}

// ---- streams and events ---------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new_stream(!(flags & cudaStreamNonBlocking));
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return fail_with(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(legacy stream)");
  s->wait_until(s->tail());  // the queued work still runs, as on a GPU
  std::lock_guard<std::mutex> l(streams_mu);
  live_streams.erase(s);  // its worker stays parked on the empty queue
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  CUstream_st* st = resolve(s);
  if (st->capture) {  // as on a GPU: refused, and the capture is invalidated
    st->capture_invalidated = true;
    return pn_emu::fail_with(cudaErrorStreamCaptureUnsupported,
                             "cudaStreamSynchronize of a capturing stream");
  }
  if (st == legacy()) enqueue(s, [] {});  // the legacy stream waits for the blocking ones too
  st->wait_until(st->tail());
  close_device_memory_if_idle();
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s) return pn_emu::fail_with(cudaErrorStreamCaptureUnsupported, "capture of the legacy stream");
  if (s->capture) return pn_emu::fail_with(cudaErrorInvalidValue, "capture begun twice");
  s->capture = new std::vector<std::function<void()>>;
  s->capture_invalidated = false;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!s || !s->capture)
    return pn_emu::fail_with(cudaErrorInvalidValue, "cudaStreamEndCapture of a stream not capturing");
  std::unique_ptr<std::vector<std::function<void()>>> work(std::exchange(s->capture, nullptr));
  if (s->capture_invalidated)
    return pn_emu::fail_with(cudaErrorStreamCaptureInvalidated, "the capture was invalidated");
  *graph = new CUgraph_st{std::move(*work)};
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  CUstream_st* st = resolve(s);
  *status = !st->capture               ? cudaStreamCaptureStatusNone
            : st->capture_invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count) {
  if (!g || nodes) return pn_emu::fail_with(cudaErrorInvalidValue, "cudaGraphGetNodes: count only");
  *count = g->work.size();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  if (!g) return pn_emu::fail_with(cudaErrorInvalidValue, "cudaGraphInstantiate(null graph)");
  *exec = new CUgraphExec_st{g->work};  // an executable graph outlives its graph, as on a GPU
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return pn_emu::fail_with(cudaErrorInvalidValue, "cudaGraphLaunch(null)");
  if (resolve(s)->capture)
    return pn_emu::fail_with(cudaErrorStreamCaptureUnsupported, "a graph launched into a capture");
  for (const auto& fn : exec->work) pn_emu::enqueue(s, fn);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;  // work it queued runs on: the stream holds copies of the functions
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  CUstream_st* st = resolve(s);
  std::lock_guard<std::mutex> l(st->m);
  return st->done == st->queued ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  // A record may still be queued: the event is parked rather than freed (a few bytes each).
  static std::mutex mu;
  static std::vector<cudaEvent_t>* parked = new std::vector<cudaEvent_t>;
  if (!e) return fail_with(cudaErrorInvalidResourceHandle, "cudaEventDestroy(null)");
  std::lock_guard<std::mutex> l(mu);
  parked->push_back(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> l(e->m);
    n = ++e->recorded;
  }
  enqueue(s, [e, n] {
    std::lock_guard<std::mutex> l(e->m);
    if (n > e->reached) e->reached = n;
    e->when = std::chrono::steady_clock::now();
    e->cv.notify_all();
  });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::mutex> l(e->m);
  return e->reached >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::unique_lock<std::mutex> l(e->m);
  const uint64_t n = e->recorded;
  e->cv.wait(l, [&] { return e->reached >= n; });
  l.unlock();
  close_device_memory_if_idle();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> l(e->m);
    n = e->recorded;  // the record issued last before this call, as CUDA captures it
  }
  enqueue(s, [e, n] {
    std::unique_lock<std::mutex> l(e->m);
    e->cv.wait(l, [&] { return e->reached >= n; });
  });
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  std::lock_guard<std::mutex> la(a->m);
  std::lock_guard<std::mutex> lb(b->m);
  if (a->reached < a->recorded || b->reached < b->recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}
