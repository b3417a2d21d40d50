#include "kernels/device.h"

#include <cblas.h>
#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <iterator>
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "kernels/cpu/cpu_features.h"
#include "kernels/kernels.h"

#ifdef PN_HAVE_CUDA
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace pn {

Context& current_context() {
  thread_local Context ctx;
  return ctx;
}

#ifdef PN_HAVE_CUDA
namespace {
cudaStream_t stream_of(const Context& c) { return static_cast<cudaStream_t>(c.stream); }
}  // namespace
#endif

namespace {
std::atomic<uint64_t> allocations{0};
thread_local bool capturing = false;
// What a captured micro-step cannot hold, refused before the runtime sees it: the message names
// the operation (the runtime would only invalidate the capture).
void refuse_in_capture(const char* what) {
  if (capturing)
    throw std::logic_error(std::string(what) + " inside the micro-step being captured");
}
}  // namespace

uint64_t device_allocations() { return allocations.load(); }

namespace {
// The CPU's buffer memory held now and at most since the last reset, in the sizes glibc gives
// the blocks.
std::atomic<size_t> cpu_live{0}, cpu_peak{0};
void count_cpu_bytes(void* p, bool allocated) {
  const size_t n = malloc_usable_size(p);
  if (!allocated) {
    cpu_live -= n;
    return;
  }
  const size_t now = cpu_live += n;
  size_t peak = cpu_peak.load();
  while (now > peak && !cpu_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

size_t cpu_buffers_peak_bytes() { return cpu_peak.load(); }
void cpu_buffers_reset_peak() { cpu_peak = cpu_live.load(); }
bool capturing_step_graph() { return capturing; }

#ifdef PN_HAVE_CUDA
namespace cuda {
void count_allocation() {
  refuse_in_capture("a device allocation");
  ++allocations;
}
}  // namespace cuda
#endif

GemmMath parse_gemm_math(const std::string& precision) {
  if (precision == "tf32") return GemmMath::tf32;
  if (precision == "bf16") return GemmMath::bf16;
  if (precision == "fp32") return GemmMath::fp32;
  throw std::invalid_argument("--precision '" + precision + "': choose fp32, tf32 or bf16");
}
const char* gemm_math_name(GemmMath m) {
  return m == GemmMath::tf32 ? "tf32" : m == GemmMath::bf16 ? "bf16" : "fp32";
}

Attention parse_attention(const std::string& name) {
  if (name == "fused") return Attention::fused;
  if (name == "cudnn") return Attention::cudnn;
  if (name == "materialized") return Attention::materialized;
  throw std::invalid_argument("--attention '" + name + "': choose fused, cudnn or materialized");
}

DeviceScope::DeviceScope(Device device, int cuda_index, GemmMath math)
    : previous_(current_context()) {
  if (math == GemmMath::tf32 && device != Device::CUDA)  // e.g. --device auto landed on the CPU
    throw std::invalid_argument(std::string("--precision ") + gemm_math_name(math) +
                                " needs a GPU, and this run computes on the " +
                                device_name(device) + ": drop the flag");
  ctx_.device = device;
  ctx_.gemm_math = math;
  if (device == Device::CUDA) {
#ifdef PN_HAVE_CUDA
    const int n = cuda::device_count();
    if (n <= 0)
      throw std::runtime_error("--device cuda: no GPU is visible (" + cuda_unavailable_reason() +
                               ")");
    ctx_.cuda_device = cuda_index % n;
    CUDA_CHECK(cudaSetDevice(ctx_.cuda_device));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ctx_.stream = s;
    ctx_.blas = new cuda::Blas(s, math);
#else
    throw std::runtime_error("--device cuda: this build has no CUDA path (rebuild with PN_CUDA=ON "
                             "on a machine with the CUDA toolkit)");
#endif
  }
  current_context() = ctx_;
}

DeviceScope::~DeviceScope() {
#ifdef PN_HAVE_CUDA
  if (ctx_.device == Device::CUDA) {
    cudaStreamSynchronize(stream_of(ctx_));  // no check: may run during unwinding
    delete static_cast<cuda::Blas*>(ctx_.blas);
    cudaStreamDestroy(stream_of(ctx_));
  }
#endif
  current_context() = previous_;
}

#ifndef PN_HAVE_CUDA
namespace {
[[noreturn]] void no_cuda() {
  throw std::logic_error("a CUDA context is current in a build without CUDA");
}
}  // namespace
#endif

void* device_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  const Context& c = current_context();
  switch (c.device) {
    case Device::CPU: {
      void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (!p) throw std::bad_alloc();
      count_cpu_bytes(p, true);
      return p;
    }
    case Device::CUDA: {
#ifdef PN_HAVE_CUDA
      void* p = nullptr;
      cuda::count_allocation();
      const cudaError_t e = cudaMallocAsync(&p, bytes, stream_of(c));
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        const std::string who = error_context().empty() ? "" : error_context() + ": ";
        throw std::runtime_error(
            who + "out of GPU memory: asked for " + std::to_string(bytes >> 20) + " MiB with " +
            std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
            " MiB; lower --max-tokens (or --tokens-per-sample, the model size)");
      }
      CUDA_CHECK(e);
      return p;
#else
      no_cuda();
#endif
    }
  }
  return nullptr;
}

void device_free(Device device, void* p) {
  if (!p) return;
  switch (device) {
    case Device::CPU:
      count_cpu_bytes(p, false);
      std::free(p);
      return;
    case Device::CUDA:
#ifdef PN_HAVE_CUDA
      ++allocations;  // a graph holding p must not replay
      cudaFreeAsync(p, stream_of(current_context()));  // no check: may run during unwinding
#endif
      return;
  }
}

#ifdef PN_HAVE_CUDA
namespace {
cudaMemPool_t default_pool() {
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  return pool;
}
}  // namespace
#endif

size_t device_peak_bytes() {
  switch (current_context().device) {
    case Device::CUDA: {
#ifdef PN_HAVE_CUDA
      uint64_t high = 0;
      CUDA_CHECK(cudaMemPoolGetAttribute(default_pool(), cudaMemPoolAttrUsedMemHigh, &high));
      return size_t(high);
#endif
    }
    default:
      return 0;
  }
}

void device_reset_peak() {
  switch (current_context().device) {
    case Device::CUDA: {
#ifdef PN_HAVE_CUDA
      uint64_t zero = 0;  // the pool's high-water mark restarts from what it holds now
      CUDA_CHECK(cudaMemPoolSetAttribute(default_pool(), cudaMemPoolAttrUsedMemHigh, &zero));
#endif
      return;
    }
    default:
      return;
  }
}

void device_memset_zero(void* p, size_t bytes) {
  if (!p || bytes == 0) return;
  const Context& c = current_context();
  switch (c.device) {
    case Device::CPU:
      std::memset(p, 0, bytes);
      return;
    case Device::CUDA:
#ifdef PN_HAVE_CUDA
      CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_of(c)));
      return;
#else
      no_cuda();
#endif
  }
}

namespace {
#ifdef PN_HAVE_CUDA
// Host -> device from memory the caller may reuse or free as soon as the call returns. CUDA
// promises no more than that a copy from pageable memory "might be synchronous" (older
// drivers staged it on a worker thread after returning), so the bytes are first copied into
// pinned blocks owned here, each reused once the event recorded after its copy has passed.
// Copies above kMaxStaged (checkpoints, datasets: not the training loop's) wait instead, and
// past kMaxPinned of blocks a copy waits for a busy block rather than pinning more.
constexpr size_t kMaxStaged = size_t(16) << 20, kMaxPinned = size_t(64) << 20;
void copy_to_device_staged(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (bytes > kMaxStaged) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  struct Block {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  // Kept for the process (a few, as many as copies in flight) and never destroyed: a static
  // vector would free its array at exit and leave the pinned blocks unreachable (LeakSanitizer
  // reports them). A GPU's driver takes the pinned memory back when the process ends.
  static std::mutex mutex;
  static std::vector<Block>& blocks = *new std::vector<Block>;
  static size_t pinned = 0;
  std::lock_guard<std::mutex> lock(mutex);
  Block* b = nullptr;
  for (Block& c : blocks) {
    if (c.bytes < bytes) continue;
    const cudaError_t q = cudaEventQuery(c.done);
    if (q == cudaErrorNotReady) continue;
    CUDA_CHECK(q);
    b = &c;
    break;
  }
  if (!b && pinned + bytes > kMaxPinned)
    for (Block& c : blocks)
      if (c.bytes >= bytes) {
        CUDA_CHECK(cudaEventSynchronize(c.done));
        b = &c;
        break;
      }
  if (!b) {
    Block n;
    n.bytes = std::max(bytes, size_t(64) << 10);
    CUDA_CHECK(cudaMallocHost(&n.host, n.bytes));
    CUDA_CHECK(cudaEventCreateWithFlags(&n.done, cudaEventDisableTiming));
    blocks.push_back(n);
    pinned += n.bytes;
    b = &blocks.back();
  }
  std::memcpy(b->host, src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, b->host, bytes, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaEventRecord(b->done, s));
}
#endif

// dir: cudaMemcpyKind as an int (1 H2D, 2 D2H, 3 D2D) so that this file's CPU build needs no
// CUDA header.
void copy_async(void* dst, const void* src, size_t bytes, int dir) {
  if (bytes == 0) return;
  if (dir != 3) refuse_in_capture(dir == 1 ? "a copy from the host" : "a copy to the host");
  const Context& c = current_context();
  switch (c.device) {
    case Device::CPU:
      std::memmove(dst, src, bytes);
      return;
    case Device::CUDA:
#ifdef PN_HAVE_CUDA
      if (dir == 1) return copy_to_device_staged(dst, src, bytes, stream_of(c));
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(dir), stream_of(c)));
      return;
#else
      no_cuda();
#endif
  }
}
}  // namespace

void copy_to_device(void* dst, const void* src, size_t bytes) { copy_async(dst, src, bytes, 1); }
void copy_to_host(void* dst, const void* src, size_t bytes) { copy_async(dst, src, bytes, 2); }
void copy_on_device(void* dst, const void* src, size_t bytes) { copy_async(dst, src, bytes, 3); }

void synchronize() {
  refuse_in_capture("a synchronisation with the host");
  const Context& c = current_context();
#ifdef PN_HAVE_CUDA
  if (c.device == Device::CUDA) CUDA_CHECK(cudaStreamSynchronize(stream_of(c)));
#endif
}

// ---- StepGraph ------------------------------------------------------------------------------
StepGraph::~StepGraph() { drop(); }
StepGraph::StepGraph(StepGraph&& o) noexcept { *this = std::move(o); }
StepGraph& StepGraph::operator=(StepGraph&& o) noexcept {
  if (this != &o) {
    drop();
    exec_ = std::exchange(o.exec_, nullptr);
    key_ = std::move(o.key_);
    allocations_ = o.allocations_;
    captures_ = o.captures_, replays_ = o.replays_, given_up_ = o.given_up_;
  }
  return *this;
}

void StepGraph::drop() {
#ifdef PN_HAVE_CUDA
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));  // no check: destructor
#endif
  exec_ = nullptr;
}

void StepGraph::run(const std::vector<int64_t>& key, const std::function<void()>& work) {
  const Context& c = current_context();
  if (c.device != Device::CUDA || !c.cuda_graphs || given_up_) return work();
#ifdef PN_HAVE_CUDA
  if (exec_ && key == key_ && allocations.load() == allocations_) {
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream_of(c)));
    ++replays_;
    return;
  }
  drop();
  const uint64_t before = allocations.load();
  work();
  // An eager call that allocated nothing is what a capture of the same call records.
  if (allocations.load() == before) capture(key, work);
#endif
}

void StepGraph::capture(const std::vector<int64_t>& key, const std::function<void()>& work) {
#ifdef PN_HAVE_CUDA
  const cudaStream_t s = stream_of(current_context());
  const uint64_t before = allocations.load();
  std::string why;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  capturing = true;
  try {
    work();  // queues nothing that runs: the stream records it
  } catch (const std::exception& e) {
    why = e.what();
  }
  capturing = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (why.empty() && end != cudaSuccess) why = std::string("capture: ") + cudaGetErrorString(end);
  if (why.empty() && allocations.load() != before) why = "device memory released while captured";
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  if (why.empty()) {
    cudaGraphGetNodes(graph, nullptr, &nodes);
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!why.empty()) {
    cudaGetLastError();  // the capture's error is reported here, not by the next check
    given_up_ = true;
    const std::string& who = error_context();
    std::fprintf(stderr, "pntrain: %s%sCUDA graphs: off for the rest of this run (%s); the "
                 "micro-steps run launch by launch\n", who.c_str(), who.empty() ? "" : ": ",
                 why.c_str());
    return;
  }
  exec_ = exec;
  key_ = key;
  allocations_ = allocations.load();
  ++captures_;
  static std::once_flag said;  // once a process, as the other lines of what ran where
  std::call_once(said, [&] {
    std::fprintf(stderr, "pntrain: a training micro-step: one CUDA graph of %zu nodes, "
                 "replayed\n", nodes);
  });
#else
  (void)key, (void)work;
#endif
}

bool cuda_built() {
#ifdef PN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef PN_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#ifdef PN_HAVE_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    // The two a machine without a GPU gives, in words; any other as the runtime names it.
    if (e == cudaErrorInsufficientDriver)
      return "no GPU driver was found, or it is older than this build's CUDA runtime "
             "(cudaErrorInsufficientDriver)";
    if (e == cudaErrorNoDevice) return "no GPU is visible (cudaErrorNoDevice)";
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return n > 0 ? "" : "the CUDA runtime reports 0 devices";
#else
  return "this build has no CUDA path";
#endif
}

#ifdef PN_HAVE_CUDA
namespace {
// 12040 -> "12.4": a version as cudaDriverGetVersion and cudaRuntimeGetVersion give it.
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// The version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX ... Kernel Module
// 550.54.15 ..."): its first word of digits and dots with a dot after "Module"; "" if none.
std::string nvidia_module_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line, word;
  if (!std::getline(in, line)) return "";
  const size_t at = line.find("Module");
  if (at == std::string::npos) return "";
  std::istringstream words(line.substr(at));
  while (words >> word)
    if (word.find('.') != std::string::npos &&
        word.find_first_not_of("0123456789.") == std::string::npos)
      return word;
  return "";
}
}  // namespace
#endif

namespace {
std::string& thread_source() {  // where set_num_threads' count came from ("" : not said)
  static std::string source;
  return source;
}
}  // namespace

std::string device_summary() {
  const Context& c = current_context();
  // bf16 off a GPU is either the CPU's bf16 instructions or only bf16's numerics: say which.
  const std::string bf16_off_gpu =
      c.gemm_math == GemmMath::bf16 ? ", GEMMs in bf16 (" + k::cpu_bf16_gemm_path() + ")" : "";
  // set by the programs' rerun with OPENBLAS_CORETYPE (launcher/programs/openblas_core.h)
  const char* fallback = std::getenv("PN_OPENBLAS_FALLBACK");
  const std::string blas =
      fallback ? std::string(", OpenBLAS kernels ") + openblas_get_corename() + " (OPENBLAS_CORETYPE" +
                     " set: it chose " + fallback + "'s on this CPU)"
               : "";
  if (c.device == Device::CPU)
    return "cpu (" + std::to_string(num_threads()) +
           (thread_source().empty()
                ? " threads of " + std::to_string(hardware_cores()) + " cores"
                : (num_threads() == 1 ? " thread: " : " threads: ") + thread_source() + "; " +
                      std::to_string(hardware_cores()) + " cores online") +
           ")" + blas + bf16_off_gpu;
#ifdef PN_HAVE_CUDA
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, c.cuda_device));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return "cuda:" + std::to_string(c.cuda_device) + " " + p.name + " (sm_" +
         std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB), driver " +
         cuda_version_text(driver) + ", runtime " + cuda_version_text(runtime) + ", GEMMs in " +
         gemm_math_name(c.gemm_math);
#else
  return "cuda";
#endif
}

DeviceVersions device_versions() {
  DeviceVersions v;
  v.blas = std::string(openblas_get_config()) + ", core " + openblas_get_corename();
  // A core forced by OPENBLAS_CORETYPE (the user's, or rerun_with_openblas_core's over its pick).
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    const char* fallback = std::getenv("PN_OPENBLAS_FALLBACK");
    v.blas += std::string(" (OPENBLAS_CORETYPE=") + forced +
              (fallback ? std::string("; OpenBLAS chose ") + fallback : std::string()) + ")";
  }
#ifdef PN_HAVE_CUDA
  const Context& c = current_context();
  if (c.device == Device::CUDA) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, c.cuda_device));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    v.gpu_name = p.name;
    // The kernel module's version (nvidia-smi's "Driver Version"), then the CUDA it supports.
    const std::string module = nvidia_module_version();
    const std::string supported = "CUDA " + cuda_version_text(driver);
    v.gpu_driver = module.empty() ? supported : module + " (" + supported + ")";
    v.cuda = cuda_version_text(runtime);
    v.cudnn = cuda::cudnn_version();
  }
#endif
  return v;
}

std::string device_name(Device d) {
  switch (d) {
    case Device::CPU: return "cpu";
    case Device::CUDA: return "cuda";
  }
  return "?";
}

bool parse_device(const std::string& name, Device* out) {
  for (Device d : {Device::CPU, Device::CUDA})
    if (name == device_name(d)) {
      *out = d;
      return true;
    }
  return false;
}

Device resolve_device(const std::string& name, bool say) {
  Device d = Device::CPU;
  if (name == "auto") {
    const std::string why = cuda_unavailable_reason();
    if (why.empty()) return Device::CUDA;
    if (say) std::fprintf(stderr, "pntrain: training on the CPU: %s\n", why.c_str());
    return Device::CPU;
  }
  if (!parse_device(name, &d))
    throw std::invalid_argument("--device '" + name + "' is not one of auto, cpu, cuda");
  if (d == Device::CUDA && !cuda_unavailable_reason().empty())
    throw std::runtime_error("--device cuda: no usable GPU (" + cuda_unavailable_reason() +
                             "); use --device cpu, or run where nvidia-smi lists a GPU");
  return d;
}

namespace {
std::string& error_context_storage() {
  static std::string who;
  return who;
}
}  // namespace
void set_error_context(const std::string& who) { error_context_storage() = who; }
const std::string& error_context() { return error_context_storage(); }

void set_num_threads(int n, const std::string& source) {
  if (n < 1) n = 1;
  thread_source() = source;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

int hardware_cores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : int(std::thread::hardware_concurrency());
}

}  // namespace pn
