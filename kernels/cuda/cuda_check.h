// Error checks and an owning device buffer for the CUDA path (host code).
//
// CUDA_CHECK / CUBLAS_CHECK throw std::runtime_error naming the failing call, its file and line
// and the library's own error string, so a failure deep in a kernel launch reads as
// "CUDA error: cudaMemcpyAsync(...) at kernels/cuda/loss.cu:88: an illegal memory access ...".
// Kernel launches are checked with CUDA_CHECK(cudaGetLastError()) right after the launch.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace pn::cuda {

[[noreturn]] void fail(const char* lib, const char* call, const char* detail, const char* file,
                       int line);
const char* cublas_status_string(cublasStatus_t s);

}  // namespace pn::cuda

#define CUDA_CHECK(call)                                                                \
  do {                                                                                  \
    const cudaError_t pn_err_ = (call);                                                 \
    if (pn_err_ != cudaSuccess)                                                         \
      ::pn::cuda::fail("CUDA", #call, cudaGetErrorString(pn_err_), __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    const cublasStatus_t pn_st_ = (call);                                                   \
    if (pn_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::pn::cuda::fail("cuBLAS", #call, ::pn::cuda::cublas_status_string(pn_st_), __FILE__, \
                       __LINE__);                                                           \
  } while (0)

namespace pn::cuda {

// An owning array of n elements of device memory. Not copyable; moves transfer ownership.
// upload()/download() are blocking conveniences for tests and setup code (the training path
// uses Buf<T>, kernels/buffer.h).
template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;

  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  explicit DeviceBuffer(const std::vector<T>& host) { upload(host); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr(std::exchange(o.ptr, nullptr)), n(std::exchange(o.n, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr = std::exchange(o.ptr, nullptr);
      n = std::exchange(o.n, 0);
    }
    return *this;
  }

  T* data() { return ptr; }
  const T* data() const { return ptr; }
  size_t size() const { return n; }

  // Reallocates (contents lost) when the size changes.
  void resize(size_t count) {
    if (count == n) return;
    release();
    if (count) CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(T)));
    n = count;
  }
  // Copies in stream order on `s` (the stream that will read it) and waits until the data has
  // landed: a plain cudaMemcpy from pageable memory may return before the DMA completes, and
  // kernels on a non-blocking stream do not wait for the legacy stream.
  void upload(const std::vector<T>& host, cudaStream_t s = nullptr) {
    resize(host.size());
    if (!n) return;
    CUDA_CHECK(cudaMemcpyAsync(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::vector<T> download(cudaStream_t s = nullptr) const {
    std::vector<T> host(n);
    if (!n) return host;
    CUDA_CHECK(cudaMemcpyAsync(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return host;
  }
  void release() {
    if (ptr) cudaFree(ptr);  // no check: may run during unwinding
    ptr = nullptr;
    n = 0;
  }
};

}  // namespace pn::cuda
