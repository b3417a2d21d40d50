// The CUDA runtime emulated on the CPU (-DPN_CUDA_EMULATE=ON): the names kernels/cuda,
// comm/nccl_comm.cpp and tests/cuda use, so that those sources compile as host C++ unchanged
// and their kernels run on CPU threads. docs/gpu.md ("The CUDA emulation") says what it checks.
#pragma once
#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

// ---- kernel-side language -------------------------------------------------------------------
#define __global__
#define __launch_bounds__(...)
#define __device__
#define __host__
#define __forceinline__ inline
// Blocks run one at a time, so a function-local static is the running block's shared memory.
#define __shared__ static

// The 16- and 8-byte vector types the kernels load and store whole.
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
// Set by the emulator on each OS thread before it runs its GPU thread.
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

namespace pn_emu {
void syncthreads();
uint64_t shfl_xor(unsigned mask, uint64_t bits, int lane_mask, int width);
void* dynamic_shared();
}  // namespace pn_emu

inline void __syncthreads() { pn_emu::syncthreads(); }
// Any type of up to 8 bytes travels through the warp's exchange slots as raw bits.
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  static_assert(sizeof(T) <= 8, "__shfl_xor_sync: at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = pn_emu::shfl_xor(mask, bits, lane_mask, width);
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Atomics on the GCC builtins (ThreadSanitizer understands them); float/double by CAS.
template <class T>
T atomicAdd(T* p, T v) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  } else {
    T old, sum;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do sum = old + v;
    while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
  }
}
template <class T>
T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED)) {
  }
  return old;
}

// Intrinsics with an explicit rounding: separate operations (the build adds -ffp-contract=off).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
using std::isfinite;
using std::isinf;
using std::isnan;

// ---- runtime types --------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureWrongThread = 908,
};
using cudaError = cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaMemPoolAttr { cudaMemPoolAttrUsedMemCurrent = 7, cudaMemPoolAttrUsedMemHigh = 8 };

struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;  // the emulator has one pool: every device allocation
using cudaStream_t = CUstream_st*;  // nullptr: the legacy default stream
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;

// Stream capture and CUDA graphs: a capturing stream records what is queued on it (kernels,
// copies, the emulated libraries' work) instead of running it; a launch queues the recording.
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
using cudaGraphNode_t = CUgraphNode_st*;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
  int major, minor, multiProcessorCount, maxThreadsPerBlock, warpSize;
  int maxThreadsDim[3], maxGridSize[3];
  int l2CacheSize;  // bytes (a timing flushes it by writing a larger buffer)
};
struct cudaFuncAttributes {
  size_t sharedSizeBytes;  // static shared memory: unknown to the emulator, reported as 0
  int maxThreadsPerBlock, maxDynamicSharedSizeBytes;
};

// ---- runtime API ----------------------------------------------------------------------------
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <class T>
cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t s) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), bytes, s);
}
template <class T>
cudaError_t cudaMallocHost(T** p, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t s = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

// Kernels are known by the name written at the launch (PN_LAUNCH) and in these two calls.
#define cudaFuncGetAttributes(attr, kernel) ::pn_emu::func_get_attributes(attr, #kernel)
#define cudaFuncSetAttribute(kernel, attr, value) \
  ::pn_emu::func_set_attribute(#kernel, attr, value)

// ---- what the emulated libraries (cuBLAS, CUB, NCCL) and the launch share --------------------
namespace pn_emu {
cudaError_t func_get_attributes(cudaFuncAttributes* a, const char* kernel);
cudaError_t func_set_attribute(const char* kernel, cudaFuncAttribute attr, int value);

// Runs fn on stream s's worker thread after everything queued there before it.
void enqueue(cudaStream_t s, std::function<void()> fn);
// True when p..p+bytes lies inside one device allocation (cudaMalloc/cudaMallocAsync).
bool is_device_range(const void* p, size_t bytes);
// Prints "pn CUDA emulation: <what>" and aborts: a fault a GPU would also end the program on.
[[noreturn]] void die(const char* fmt, ...);
// Sets the calling thread's last error (as the runtime does) and returns it.
cudaError_t fail_with(cudaError_t e, const char* fmt, ...);

struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  const char* kernel;
};
// Checks the configuration as a GPU does (the error goes to cudaGetLastError) and queues
// grid x block threads of `body` on the stream.
void launch_kernel(const LaunchConfig& c, std::function<void()> body);

template <class Body>
struct Launch {
  LaunchConfig config;
  Body body;
  template <class... A>
  void operator()(A&&... a) const {
    // The arguments are copied at the launch, as a GPU copies them into its parameter space.
    launch_kernel(config, [b = body, args = std::make_tuple(std::decay_t<A>(a)...)] {
      std::apply(b, args);
    });
  }
};
template <class Body>
Launch<Body> make_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t s, const char* kernel,
                         Body body) {
  return Launch<Body>{LaunchConfig{grid, block, smem, s, kernel}, body};
}
}  // namespace pn_emu
