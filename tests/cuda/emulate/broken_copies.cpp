// Broken copies of CUDA kernels, each with one classic GPU defect, run on the CUDA emulation to
// show that it catches them; the intact copy of each runs clean (the control).
//   nosync      block_sum with the __syncthreads() between the shared writes and reads removed:
//               ThreadSanitizer reports the data race (build with -fsanitize=thread)
//   offbyone    a grid-stride copy whose bound is one past the end (i <= n):
//               AddressSanitizer reports the heap-buffer-overflow (-fsanitize=address)
//   usefreed    the copy launched on a source already given back with cudaFree:
//               AddressSanitizer reports the heap-use-after-free
//   shflmask    warp_sum with lane 31 left out of the __shfl_xor_sync mask: the emulator refuses
//   transposed  a row-major GEMM through cuBLAS with op(B) not transposed: differs from the CPU
//   nostreamsync  a device-to-host copy read before its stream was synchronized: stale data
// Usage: pn_emu_broken CASE [intact]; exit 0 when the copy ran clean and correct.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace {

#define CHECK(call)                                                                  \
  do {                                                                               \
    if ((call) != 0) {                                                               \
      std::fprintf(stderr, "%s failed at %s:%d\n", #call, __FILE__, __LINE__);       \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// common.cuh's block_sum, with the first or second barrier optionally removed.
template <bool kBroken>
__device__ float block_sum_copy(float v, float* shared) {
  v = pn::cuda::warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  if (!kBroken) __syncthreads();  // the defect: warp sums read before every warp wrote its own
  float s = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) s += shared[w];
  return s;
}
template <bool kBroken>
__global__ void sum_kernel(const float* x, int n, float* out) {
  __shared__ float sh[32];
  float acc = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  acc = block_sum_copy<kBroken>(acc, sh);
  if (threadIdx.x == 0) *out = acc;
}

template <bool kBroken>
__global__ void copy_kernel(const float* x, int n, float* y) {
  const int stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; kBroken ? i <= n : i < n; i += stride)
    y[i] = x[i];
}

template <bool kBroken>
__global__ void warp_sum_kernel(const float* x, float* out) {
  float v = x[threadIdx.x];
  const unsigned mask = kBroken ? 0x7fffffffu : 0xffffffffu;  // the defect: lane 31 left out
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  if (threadIdx.x == 0) *out = v;
}

float* to_device(const std::vector<float>& h) {
  float* d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

// Launched 32 times: ThreadSanitizer keeps 4 accesses per word, and the threads that wake from
// the barrier's mutex one after another (a loaded machine) are ordered by it, so one launch can
// hide the race; 32 cannot.
int run_nosync(bool broken) {
  const int n = 4096, launches = 32;
  std::vector<float> x(n, 1.f);
  float *dx = to_device(x), *dout = to_device({0.f}), out = 0;
  int wrong = 0;
  for (int l = 0; l < launches; ++l) {
    if (broken)
      PN_LAUNCH(sum_kernel<true>, 1, 256, 0, nullptr)(dx, n, dout);
    else
      PN_LAUNCH(sum_kernel<false>, 1, 256, 0, nullptr)(dx, n, dout);
    CHECK(cudaMemcpy(&out, dout, sizeof out, cudaMemcpyDeviceToHost));
    wrong += out != n;
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dout));
  std::printf("block sum %g (want %d); %d of %d launches wrong\n", out, n, wrong, launches);
  return wrong == 0 ? 0 : 1;
}

int run_offbyone(bool broken) {
  const int n = 1000;
  std::vector<float> x(n, 2.f), y(n);
  float *dx = to_device(x), *dy = to_device(y);
  if (broken)
    PN_LAUNCH(copy_kernel<true>, 4, 256, 0, nullptr)(dx, n, dy);
  else
    PN_LAUNCH(copy_kernel<false>, 4, 256, 0, nullptr)(dx, n, dy);
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  std::printf("copied %g ... %g\n", y[0], y[n - 1]);
  return y[n - 1] == 2.f ? 0 : 1;
}

int run_usefreed(bool broken) {
  const int n = 1000;
  std::vector<float> x(n, 2.f), y(n);
  float *dx = to_device(x), *dy = to_device(y);
  if (broken) CHECK(cudaFree(dx));  // the defect: freed before the kernel that reads it
  PN_LAUNCH(copy_kernel<false>, 4, 256, 0, nullptr)(dx, n, dy);
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (!broken) CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  std::printf("copied %g ... %g\n", y[0], y[n - 1]);
  return y[n - 1] == 2.f ? 0 : 1;
}

int run_shflmask(bool broken) {
  std::vector<float> x(32, 1.f);
  float *dx = to_device(x), *dout = to_device({0.f}), out = 0;
  if (broken)
    PN_LAUNCH(warp_sum_kernel<true>, 1, 32, 0, nullptr)(dx, dout);
  else
    PN_LAUNCH(warp_sum_kernel<false>, 1, 32, 0, nullptr)(dx, dout);
  CHECK(cudaMemcpy(&out, dout, sizeof out, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dout));
  std::printf("warp sum %g (want 32)\n", out);
  return out == 32 ? 0 : 1;
}

// C[M,N] = A[M,K] B[N,K]^T, row-major, through column-major cuBLAS as kernels/cuda/device.cu
// does: cuBLAS's (op_b, op_a, N, M, K) on (B, A). The defect: op_b left as N.
int run_transposed(bool broken) {
  const int M = 5, N = 7, K = 3;
  std::vector<float> A(M * K), B(N * K), C(M * N), want(M * N, 0.f);
  for (int i = 0; i < M * K; ++i) A[i] = float(i % 7) - 3;
  for (int i = 0; i < N * K; ++i) B[i] = float(i % 5) - 2;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) want[m * N + n] += A[m * K + k] * B[n * K + k];
  float *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  const float one = 1, zero = 0;
  // With op N, cuBLAS reads B as N x K column-major with ldb = K: a valid call, wrong operand.
  const cublasOperation_t op_b = broken ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int ldb = broken ? N : K;
  CHECK(cublasGemmEx(h, op_b, CUBLAS_OP_N, N, M, K, &one, dB, CUDA_R_32F, ldb, dA, CUDA_R_32F, K,
                     &zero, dC, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CHECK(cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < M * N; ++i) bad += C[i] != want[i];
  std::printf("%d of %d entries of the GEMM differ from the CPU's\n", bad, M * N);
  return bad ? 1 : 0;
}

// A kernel fills y, then y is copied back on a non-blocking stream; the broken copy reads the
// host buffer without cudaStreamSynchronize.
int run_nostreamsync(bool broken) {
  const int n = 1 << 16;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* dy = nullptr;
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  float* host = nullptr;
  CHECK(cudaMallocHost(&host, n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = -1.f;
  for (int rep = 0; rep < 20; ++rep)  // enough queued work that the copy is not done at once
    PN_LAUNCH(copy_kernel<false>, 64, 256, 0, s)(dy, 0, dy);
  CHECK(cudaMemsetAsync(dy, 0, n * sizeof(float), s));
  CHECK(cudaMemcpyAsync(host, dy, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  if (!broken) CHECK(cudaStreamSynchronize(s));
  int stale = 0;
  for (int i = 0; i < n; ++i) stale += host[i] != 0.f;
  std::printf("%d of %d values read back are stale (the copy had not landed)\n", stale, n);
  CHECK(cudaStreamSynchronize(s));
  return stale ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  const bool broken = !(argc > 2 && std::string(argv[2]) == "intact");
  if (what == "nosync") return run_nosync(broken);
  if (what == "offbyone") return run_offbyone(broken);
  if (what == "usefreed") return run_usefreed(broken);
  if (what == "shflmask") return run_shflmask(broken);
  if (what == "transposed") return run_transposed(broken);
  if (what == "nostreamsync") return run_nostreamsync(broken);
  std::fprintf(stderr, "pn_emu_broken: unknown case '%s' (nosync, offbyone, usefreed, "
                       "shflmask, transposed, nostreamsync; then 'intact' for the correct copy)\n",
               what.c_str());
  return 2;
}
