// The GPU-only failure classes a CPU run cannot show, each held by a test that runs on the first
// GPU (skipped without one): GEMMs on non-square views with padded leading dimensions, fp32
// GEMMs that stay fp32 after a tf32 context, logits of more than 2^31 elements, and host
// sources of copies reused at once while the stream is still busy, the peak-memory measure; and
// on the emulation, a host read of device memory faults, as it does on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace pn::test {
namespace {

constexpr cudaStream_t kStream = nullptr;  // the legacy default stream: download() syncs it

// A host read of device memory dies of SIGSEGV at the read: the emulation's device memory is
// mapped without access while no stream has work (emulator/runtime.cpp), so a wiring mistake that
// a GPU would fault on faults here too; the device itself still reads and copies it.
TEST(CudaEmulation, AHostReadOfDeviceMemoryFaults) {
  PN_REQUIRE_GPU();
#if !defined(PN_CUDA_EMULATE)
  GTEST_SKIP() << "a GPU's own fault; the check is the emulation's";
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer builds take device memory from malloc, to see its overflows";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DBuf<float> b(std::vector<float>(16, 2.5f));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const float* p = b.data();
  EXPECT_EXIT(
      {
        volatile float v = p[3];  // the planted host read
        (void)v;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EQ(b.download(), std::vector<float>(16, 2.5f));
#endif
}

// Row-major views inside wider arrays, as the models use them (q, k, v inside qkv [rows, 3d]):
// every leading dimension larger than the view's width, M, N and K all different; C's padding
// must come back untouched.
TEST(CudaKernels, GemmPaddedLeadingDimensions) {
  PN_REQUIRE_GPU();
  cuda::Blas blas(kStream);
  const int M = 48, N = 20, K = 33, pad = 7;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const auto A = randf(size_t(ta ? K : M) * lda, 101), B = randf(size_t(tb ? N : K) * ldb, 102);
      auto C = randf(size_t(M) * ldc, 103);
      DBuf<float> dA(A), dB(B), dC(C);
      cuda::gemm(blas, ta, tb, M, N, K, 1.3f, dA.data(), lda, dB.data(), ldb, -0.5f, dC.data(),
                 ldc);
      k::gemm<float>(ta, tb, M, N, K, 1.3f, A.data(), lda, B.data(), ldb, -0.5f, C.data(), ldc);
      expect_close("gemm, padded", dC.download(), C, 1e-5, 1e-5);
    }
  // Strided-batched over 3 sequences, operands at their own strides (attention's layout).
  const int batch = 3, lda = K + 5, ldb = N + 3, ldc = N + 9;
  const long long sa = (long long)M * lda + 11, sb = (long long)K * ldb + 13,
                  sc = (long long)M * ldc + 17;
  const auto A = randf(size_t(sa) * batch, 104), B = randf(size_t(sb) * batch, 105);
  auto C = randf(size_t(sc) * batch, 106);
  DBuf<float> dA(A), dB(B), dC(C);
  cuda::gemm_strided_batched(blas, false, false, M, N, K, 0.9f, dA.data(), lda, sa, dB.data(), ldb,
                             sb, 0.2f, dC.data(), ldc, sc, batch);
  for (int i = 0; i < batch; ++i)
    k::gemm<float>(false, false, M, N, K, 0.9f, A.data() + i * sa, lda, B.data() + i * sb, ldb,
                   0.2f, C.data() + i * sc, ldc);
  expect_close("gemm_strided_batched, padded", dC.download(), C, 1e-5, 1e-5);
}

// The bf16 copies (cuda::push_bf16_copy, made through k::Bf16Copy once per forward for the
// weights and once per Linear backward for its output gradient): a GEMM reading an operand
// inside a copied range (a slice of it, as either operand) gives C bit for bit as the rounding at
// each call does, and counts as served from the copy; copies nest, the inner one ending first;
// an operand outside every copy is rounded as before; a scope copies only on a bf16 GPU context
// and forgets the copy at its end.
TEST(CudaKernels, Bf16CopyIsTheRoundingAtEachCall) {
  PN_REQUIRE_GPU();
  const int M = 33, N = 48, K = 40;
  const auto w = randf(size_t(2) * N * K, 51), x = randf(size_t(M) * K, 52);
  const auto g = randf(size_t(M) * N, 53);
  DBuf<float> dw(w), dx(x), dg(g), c_each(size_t(M) * N), c_copy(size_t(M) * N);
  DBuf<float> k_each(size_t(N) * K), k_copy(size_t(N) * K);
  const float* slice = dw.data() + size_t(N) * K;  // the second of two N x K weights
  cuda::Blas each(kStream, GemmMath::bf16), copy(kStream, GemmMath::bf16);
  cuda::push_bf16_copy(copy, dw.data(), w.size());
  for (int as_a = 0; as_a < 2; ++as_a) {
    SCOPED_TRACE(as_a ? "weight as A" : "weight as B");
    for (cuda::Blas* b : {&each, &copy}) {
      float* c = b == &each ? c_each.data() : c_copy.data();
      if (as_a)  // C^T[N, M] = W[N, K] x^T
        cuda::gemm(*b, false, true, N, M, K, 1.f, slice, K, dx.data(), K, 0.f, c, M);
      else  // C[M, N] = x W^T
        cuda::gemm(*b, false, true, M, N, K, 1.f, dx.data(), K, slice, K, 0.f, c, N);
    }
    expect_equal("C from the copy", c_copy.download(), c_each.download());
  }
  EXPECT_EQ(copy.copy_reads, 2u);
  EXPECT_EQ(each.copy_reads, 0u);
  cuda::gemm(copy, false, true, M, M, K, 1.f, dx.data(), K, dx.data(), K, 0.f, c_copy.data(), M);
  EXPECT_EQ(copy.copy_reads, 2u) << "an activation was read from the weights' copy";
  // A Linear's backward inside the weights' scope: dy (g, [M, N]) copied once, read by dx = dy W
  // and by dW += dy^T x, each GEMM reading both its operands from copies but x.
  cuda::push_bf16_copy(copy, dg.data(), g.size());
  for (cuda::Blas* b : {&each, &copy}) {
    float* c = b == &each ? c_each.data() : c_copy.data();
    float* kk = b == &each ? k_each.data() : k_copy.data();
    cuda::gemm(*b, false, false, M, K, N, 1.f, dg.data(), N, slice, K, 0.f, c, K);
    cuda::gemm(*b, true, false, N, K, M, 1.f, dg.data(), N, dx.data(), K, 0.f, kk, K);
  }
  expect_equal("dx from the copies", c_copy.download(), c_each.download());
  expect_equal("dW from the copy", k_copy.download(), k_each.download());
  EXPECT_EQ(copy.copy_reads, 5u);  // dy twice, the weight once
  cuda::pop_bf16_copy(copy);
  cuda::gemm(copy, false, false, M, K, N, 1.f, dg.data(), N, slice, K, 0.f, c_copy.data(), K);
  EXPECT_EQ(copy.copy_reads, 6u) << "a popped copy still served dy (or the weights' did not)";
  {
    DeviceScope bf16(Device::CUDA, 0, GemmMath::bf16);
    auto& b = *static_cast<cuda::Blas*>(current_context().blas);
    {
      k::Bf16Copy weights(dw.data(), w.size());
      {
        k::Bf16Copy grad(dg.data(), g.size());
        ASSERT_EQ(b.live, 2u);
        EXPECT_EQ(b.copies[1].x, dg.data());
      }
      ASSERT_EQ(b.live, 1u);
      EXPECT_EQ(b.copies[0].x, dw.data());
    }
    EXPECT_EQ(b.live, 0u);
  }
  DeviceScope fp32(Device::CUDA, 0, GemmMath::fp32);
  k::Bf16Copy scope(dw.data(), w.size());
  EXPECT_EQ(static_cast<cuda::Blas*>(current_context().blas)->live, 0u);
}

// bf16 on the GPU is the CPU's bf16 GEMM: operands rounded to bf16, products summed in fp32, on
// padded views and every transpose; so within fp32 summation order of it, and visibly apart from
// the fp32 product (the rounding happened).
TEST(CudaKernels, Bf16GemmIsTheCpusBf16Gemm) {
  PN_REQUIRE_GPU();
  cuda::Blas blas(kStream, GemmMath::bf16);
  const int M = 40, N = 24, K = 130, pad = 5;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const auto A = randf(size_t(ta ? K : M) * lda, 111), B = randf(size_t(tb ? N : K) * ldb, 112);
      const auto C0 = randf(size_t(M) * ldc, 113);
      DBuf<float> dA(A), dB(B), dC(C0);
      cuda::gemm(blas, ta, tb, M, N, K, 0.7f, dA.data(), lda, dB.data(), ldb, 0.5f, dC.data(),
                 ldc);
      auto cpu_bf16 = C0, fp32 = C0;
      k::cpu::gemm_bf16_operands(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.5f,
                                 cpu_bf16.data(), ldc);
      k::gemm<float>(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.5f, fp32.data(), ldc);
      const std::vector<float> got = dC.download();
      expect_close("bf16 gemm against the CPU's", got, cpu_bf16, 1e-5, 1e-5);
      double apart = 0;
      for (size_t i = 0; i < got.size(); ++i) apart = std::max(apart, double(std::fabs(got[i] - fp32[i])));
      EXPECT_GT(apart, 1e-3) << "the operands were not rounded to bf16";
    }
}

// fp32 means fp32: A = 1 + 2^-15 (kept by fp32's 23 bits, lost by tf32's 10), B = 1, so every
// entry of C = A B is K (1 + 2^-15) exactly in fp32 and K in tf32. A tf32 context before must not
// leak into the fp32 one after it (each scope owns its cuBLAS handle).
TEST(CudaDevice, Fp32GemmStaysFp32AfterATf32Context) {
  PN_REQUIRE_GPU();
  const int n = 256;
  const float a = 1.0f + std::ldexp(1.0f, -15);
  const std::vector<float> A(size_t(n) * n, a), B(size_t(n) * n, 1.0f);
  const float exact = float(n) * a;
  auto product = [&](GemmMath math) {
    DeviceScope scope(Device::CUDA, 0, math);
    Buf<float> dA, dB, dC(size_t(n) * n);
    dA.from_host(A);
    dB.from_host(B);
    k::gemm<float>(false, false, n, n, n, 1.0f, dA.data(), n, dB.data(), n, 0.0f, dC.data(), n);
    return dC.to_host();
  };
  const std::vector<float> tf32 = product(GemmMath::tf32);
  const std::vector<float> fp32 = product(GemmMath::fp32);
  size_t bad = 0;
  for (float c : fp32) bad += c != exact;
  EXPECT_EQ(bad, 0u) << "fp32 GEMM entries differ from " << exact << " (first " << fp32[0]
                     << "): tf32 or another reduced precision is in use";
  RecordProperty("tf32_entry", std::to_string(tf32[0]));  // n on tensor cores, shown in the XML
}

// Logits of 65536 tokens x 32771 words: 2^31 + 196608 floats, so the last rows lie beyond what
// an int index reaches. The GEMM that makes them and the fused cross-entropy over them must
// address those rows right: the last rows (the only live ones) against the CPU on their host copy.
TEST(CudaLarge, LogitsBeyondTwoToThe31Elements) {
  PN_REQUIRE_GPU();
  const int R = 65536, V = 32771, K = 8, live = 4;
  const size_t n = size_t(R) * V;
  ASSERT_GT(n, size_t(1) << 31);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (free_b < n * sizeof(float) + (size_t(1) << 30))
    GTEST_SKIP() << "needs " << (n * sizeof(float) >> 30) << " GiB of GPU memory, "
                 << (free_b >> 30) << " GiB free";
  cuda::Blas blas(kStream);
  const auto H = randf(size_t(R) * K, 201), E = randf(size_t(V) * K, 202);
  DBuf<float> dH(H), dE(E), dlogits(n);
  cuda::gemm(blas, false, true, R, V, K, 1.0f, dH.data(), K, dE.data(), K, 0.0f, dlogits.data(), V);
  // The last rows, computed on the CPU from the same operands.
  const size_t first = size_t(R - live) * V;
  std::vector<float> rows(size_t(live) * V), cpu(size_t(live) * V);
  CUDA_CHECK(cudaMemcpy(rows.data(), dlogits.data() + first, rows.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  k::gemm<float>(false, true, live, V, K, 1.0f, H.data() + size_t(R - live) * K, K, E.data(), K,
                 0.0f, cpu.data(), V);
  expect_close("logits beyond 2^31", rows, cpu, 1e-5, 1e-5);

  std::vector<int32_t> target(R);
  for (int i = 0; i < R; ++i) target[i] = int32_t((size_t(i) * 7919) % V);
  std::vector<uint8_t> mask(R, 0);
  for (int i = R - live; i < R; ++i) mask[i] = 1;
  DBuf<int32_t> dtarget(target);
  DBuf<uint8_t> dmask(mask);
  DBuf<double> dsums(3);
  cuda::softmax_xent(dlogits.data(), dtarget.data(), dmask.data(), R, V, V, 0.1f, 0.5f, dsums.data(),
                     kStream);
  const k::LossSums g = cuda::loss_sums_host(dsums.data(), kStream);
  const k::LossSums c = k::softmax_xent<float>(rows.data(), target.data() + (R - live), nullptr,
                                               live, V, V, 0.1f, 0.5f);
  EXPECT_EQ(g.ntokens, live);
  EXPECT_NEAR(g.loss, c.loss, 1e-5 * (1 + std::fabs(c.loss)));
  EXPECT_NEAR(g.nll, c.nll, 1e-5 * (1 + std::fabs(c.nll)));
  std::vector<float> grad(size_t(live) * V);
  CUDA_CHECK(cudaMemcpy(grad.data(), dlogits.data() + first, grad.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  expect_close("dlogits beyond 2^31", grad, rows, 1e-5, 1e-7);
  float masked = 1.0f;  // a masked row's gradient is zero
  CUDA_CHECK(cudaMemcpy(&masked, dlogits.data() + first - 1, sizeof masked, cudaMemcpyDeviceToHost));
  EXPECT_EQ(masked, 0.0f);
}

// copy_to_device takes memory the caller reuses at once (a batch's tokens, then the next
// batch's): with the stream busy, each source is overwritten and freed right after the call,
// and the device must still receive what it held at the call: small copies, one above the
// staging size, and 1 MB copies past the pinned blocks' 64 MB (which wait for a busy block).
TEST(CudaDevice, HostSourceOfACopyIsFreeAtOnce) {
  PN_REQUIRE_GPU();
  DeviceScope scope(Device::CUDA, 0);
  const int n = 2048, copies = 24 + 100;
  Buf<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  k::fill<float>(a.data(), a.size(), 1.0f);
  k::fill<float>(b.data(), b.size(), 1.0f);
  auto busy = [&] {  // tens of milliseconds of work queued ahead of the copies
    for (int i = 0; i < 8; ++i)
      k::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  busy();
  const size_t small = 50000, big = (size_t(20) << 20) / sizeof(float);
  std::vector<Buf<float>> dst(copies);
  for (int i = 0; i < copies; ++i) {
    const size_t len = i < 23 ? small : i == 23 ? big : (size_t(1) << 20) / sizeof(float);
    dst[i].resize(len);
    auto src = std::make_unique<std::vector<float>>(len, float(i));
    copy_to_device(dst[i].data(), src->data(), len * sizeof(float));
    std::fill(src->begin(), src->end(), -1.0f);
    src.reset();
    if (i == 23) busy();
  }
  for (int i = 0; i < copies; ++i) {
    const std::vector<float> got = dst[i].to_host();
    size_t bad = 0;
    for (float v : got) bad += v != float(i);
    EXPECT_EQ(bad, 0u) << "copy " << i << ": the device got what the host wrote after the call";
  }
}

// device_peak_bytes (the metrics' device_peak_mb, beside PyTorch's max_memory_allocated in the
// benchmark) is the most memory held at once: 12 MB live together, then 2 MB after they are
// freed, reads at least 12 MB and less than what was ever asked for in all.
TEST(CudaDevice, PeakMemoryIsTheLargestLiveSet) {
  PN_REQUIRE_GPU();
  DeviceScope scope(Device::CUDA, 0);
  const size_t mb = size_t(1) << 20, before = device_peak_bytes();
  {
    Buf<float> a(8 * mb / sizeof(float)), b(4 * mb / sizeof(float));
    synchronize();
  }
  synchronize();  // the frees are stream-ordered
  Buf<float> c(2 * mb / sizeof(float));
  synchronize();
  const size_t peak = device_peak_bytes();
  EXPECT_GE(peak, std::max(before, 12 * mb));
  EXPECT_LT(peak, before + 14 * mb) << "counts freed memory as live";
}

}  // namespace
}  // namespace pn::test
