// Devices a rank can compute on, and the context the kernels dispatch on.
//
// CPU is always present; CUDA when built with it and a GPU is visible (or, in the emulation
// build, the CUDA emulation of emulator/, whose device memory the host cannot read).
//
// Each thread has a current Context (CPU by default); kernels.h's operations run on its device,
// on its stream. Buffers (kernels/buffer.h) allocate on the device that is current when they
// grow. Memory of a device is touched by the host only through the copies below.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pn {

enum class Device { CPU, CUDA };

// The arithmetic of the float GEMMs (--precision). Storage, accumulation, master weights, Adam
// and every norm statistic stay fp32 (or double) in all three: tf32 and bf16 only round the
// GEMM operands, for a GPU's tensor cores (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 and
// CUBLAS_COMPUTE_32F_FAST_16BF) or, bf16 only, on the CPU (kernels/cpu/blas.cpp) the same way.
enum class GemmMath { fp32, tf32, bf16 };
GemmMath parse_gemm_math(const std::string& precision);  // "fp32", "tf32", "bf16"
const char* gemm_math_name(GemmMath m);

// --attention: the language model's causal attention on a GPU whose GEMMs compute in bf16.
// fused: cuDNN's fused SDPA where cuDNN runs the shape (kernels/cuda/cudnn_attention.cu), else
// materialized; cudnn: cuDNN only (an error where it cannot run); materialized: the T x T
// probabilities, as everywhere else.
enum class Attention { fused, cudnn, materialized };
Attention parse_attention(const std::string& name);  // "fused", "cudnn", "materialized"

struct Context {
  Device device = Device::CPU;
  int cuda_device = -1;    // CUDA: the GPU's index
  void* stream = nullptr;  // CUDA: cudaStream_t the kernels are queued on
  void* blas = nullptr;    // CUDA: pn::cuda::Blas* bound to that stream
  GemmMath gemm_math = GemmMath::fp32;  // what the float GEMMs compute in
  Attention attention = Attention::fused;  // --attention (above)
  // bf16 GEMMs on a GPU: layers keep GEMM inputs as their bf16 rounding (k::gemm_inputs_in_bf16);
  // off, in fp32 and rounded at each call (the tests compare the two).
  bool gemm_inputs_bf16 = true;
  // A GEMM whose output only bf16 GEMMs read (k::linear_forward's y16) writes the rounding from
  // its cuBLASLt epilogue; off, the fp32 output and a rounding pass (the tests compare the two:
  // cuBLASLt may sum in another order for a bf16 output).
  bool gemm_bf16_outputs = true;
  // Work run through a StepGraph (below) may be captured and replayed as a CUDA graph (CUDA
  // only; the trainer sets it for --cuda-graphs where a micro-step touches no host).
  bool cuda_graphs = false;
};

// This thread's current context.
Context& current_context();
inline Device current_device() { return current_context().device; }

// Makes a context of `device` current for its lifetime (and owns its CUDA stream and cuBLAS
// handle); the previous context is current again afterwards. cuda_index: the GPU (a rank takes
// its node-local rank modulo the GPUs visible). tf32 is refused off a GPU (std::invalid_argument).
class DeviceScope {
 public:
  explicit DeviceScope(Device device, int cuda_index = 0, GemmMath math = GemmMath::fp32);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Context& context() const { return ctx_; }

 private:
  Context ctx_, previous_;
};

// ---- memory of the current device ---------------------------------------------------------
// Allocation and release are ordered on the current stream (no device-wide synchronisation).
void* device_alloc(size_t bytes);
void device_free(Device device, void* p);
void device_memset_zero(void* p, size_t bytes);
// The most memory the current device has held at once since the process started or the last
// device_reset_peak(): on a GPU CUDA's default pool, which every device allocation here comes
// from (PyTorch's max_memory_allocated counterpart); 0 on the CPU.
size_t device_peak_bytes();
void device_reset_peak();
// The same for the CPU's buffers (device_alloc on the CPU), as glibc sizes their blocks: what
// the tests count a layer's memory in.
size_t cpu_buffers_peak_bytes();
void cpu_buffers_reset_peak();
// Host -> device, in stream order, from pageable memory: src may be reused or freed as soon as
// the call returns (the bytes are copied first: on a GPU into pinned memory owned here).
void copy_to_device(void* dst, const void* src, size_t bytes);
// Device -> host, in stream order: dst holds the data only after synchronize().
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
// The host waits until everything queued on the current stream has run.
void synchronize();

// ---- work replayed as a CUDA graph ----------------------------------------------------------
// A training micro-step of a fixed shape queues the same kernels on the same buffers every time:
// hundreds of launches that a small model's kernels finish faster than the host issues them.
// StepGraph::run(key, work) runs `work`; on a GPU whose context has cuda_graphs, a call that
// repeats the previous one (same key, no device memory allocated or released since, nor during
// it) is also captured as a CUDA graph, and later calls with that key replay the graph: one
// launch. The first calls, a new key, or memory allocated in between (a validation's larger
// batch) run `work` as it is. `work` must leave the host out: its inputs are on the device
// before the call (a kernel argument that changes from call to call is in `key` or read from
// device memory), and it copies nothing to or from the host and waits for nothing. Inside a
// capture those throw, and so does an allocation; the graph is then dropped and the run goes
// on without graphs, saying why once on stderr. Everywhere else `work` simply runs.
class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(StepGraph&& o) noexcept;
  StepGraph& operator=(StepGraph&& o) noexcept;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  void run(const std::vector<int64_t>& key, const std::function<void()>& work);
  int64_t captures() const { return captures_; }  // graphs captured
  int64_t replays() const { return replays_; }    // calls that launched one
  bool given_up() const { return given_up_; }     // a capture failed: eager from then on

 private:
  void capture(const std::vector<int64_t>& key, const std::function<void()>& work);
  void drop();
  void* exec_ = nullptr;  // cudaGraphExec_t
  std::vector<int64_t> key_;
  uint64_t allocations_ = 0;  // device_allocations() when captured
  int64_t captures_ = 0, replays_ = 0;
  bool given_up_ = false;
};
// Device allocations and releases made by this process so far (every device), and whether this
// thread is capturing a StepGraph now.
uint64_t device_allocations();
bool capturing_step_graph();

bool cuda_built();          // compiled with the CUDA path
int cuda_device_count();    // GPUs visible to this process (0 when not built)
// Why no GPU is usable, in the runtime's words ("" when one is).
std::string cuda_unavailable_reason();
// One line naming the current context's device: for CUDA the GPU model, its memory, the driver
// and runtime versions; on the CPU its threads, and the OpenBLAS core where a program's rerun
// chose it (launcher/programs/openblas_core.h).
std::string device_summary();
// What a run's provenance records of its libraries and device (trainer/provenance.cpp): the BLAS
// (OpenBLAS's configuration and the core kernels it runs), and for the current context's GPU
// its name, the driver's and the CUDA runtime's versions and cuDNN's; "" where one is absent.
struct DeviceVersions {
  std::string blas, gpu_name, gpu_driver, cuda, cudnn;
};
DeviceVersions device_versions();

std::string device_name(Device d);
bool parse_device(const std::string& name, Device* out);  // "cpu", "cuda"
// --device: "auto" is cuda when the build has CUDA and a GPU is visible, else cpu (saying why
// when `say`); "cuda" without a usable GPU throws the runtime's reason.
Device resolve_device(const std::string& name, bool say);
// Who this process is in error messages of the device path ("rank 3"; empty: say nothing).
void set_error_context(const std::string& who);
const std::string& error_context();
// Threads for this rank's OpenMP loops and GEMMs.
// `source`: where n came from (the allocation, an environment variable), for device_summary.
void set_num_threads(int n, const std::string& source = "");
int num_threads();
int hardware_cores();

}  // namespace pn
