// The GPU timing of the norm bench (pnbench_norms --device cuda) and the kernel experiments
// (dev/cuda): a call timed alone with L2 flushed, and the bandwidth of a device copy timed the
// same way, which a kernel's bytes are a share of.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace pn::bench {

template <class T>
using DevBuf = cuda::DeviceBuffer<T>;

// The time of a call on stream s with L2 flushed: a buffer of twice the GPU's L2 is written
// before every call (an unflushed time flatters a kernel whose input fits in L2), and each call
// is timed alone by a pair of events.
class Timer {
 public:
  explicit Timer(cudaStream_t s) : s_(s) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    flush_.resize(2 * size_t(std::max(p.l2CacheSize, 1 << 20)));
    CUDA_CHECK(cudaEventCreate(&a_));
    CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  // The median milliseconds of reps calls of f, after two calls not timed (allocations, clocks).
  template <class F>
  double ms(F&& f, int reps) {
    for (int i = 0; i < 2; ++i) f();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      CUDA_CHECK(cudaMemsetAsync(flush_.ptr, i & 0xff, flush_.size(), s_));
      CUDA_CHECK(cudaEventRecord(a_, s_));
      f();
      CUDA_CHECK(cudaEventRecord(b_, s_));
      CUDA_CHECK(cudaEventSynchronize(b_));
      float m = 0;
      CUDA_CHECK(cudaEventElapsedTime(&m, a_, b_));
      t.push_back(double(m));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  // GB/s of a device-to-device copy moving `bytes` in all (half read, half written), timed the
  // same way: what a kernel's counted bytes are a share of.
  double copy_gbs(size_t bytes, int reps) {
    DevBuf<char> src(bytes / 2), dst(bytes / 2);
    const double t = ms(
        [&] {
          CUDA_CHECK(
              cudaMemcpyAsync(dst.ptr, src.ptr, bytes / 2, cudaMemcpyDeviceToDevice, s_));
        },
        reps);
    return double(bytes / 2 * 2) / t / 1e6;
  }
  size_t flush_bytes() const { return flush_.size(); }

 private:
  cudaStream_t s_;
  DevBuf<char> flush_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

}  // namespace pn::bench
