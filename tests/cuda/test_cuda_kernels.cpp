// Every CUDA kernel against its CPU twin (the reference) on random data: forward, backward,
// statistics and masks, including fully masked and empty inputs. Skipped without a GPU.
//
// Tolerances: the GPU sums in another order (warp and block trees, cuBLAS tiles), so float
// results agree to a few float ulps of the larger terms; double statistics to ~1e-12 relative.
// The dropout mask and the per-element maps with the CPU's rounding are compared exactly.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"
#include "kernels/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace pn::test {
namespace {

constexpr cudaStream_t kStream = nullptr;  // the legacy default stream: download() syncs it

TEST(CudaKernels, GemmAllTransposes) {
  PN_REQUIRE_GPU();
  cuda::Blas blas(kStream);
  const int M = 37, N = 29, K = 45;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = ta ? M : K, ldb = tb ? K : N;
      const auto A = randf(size_t(M) * K, 1), B = randf(size_t(K) * N, 2);
      auto C = randf(size_t(M) * N, 3);
      DBuf<float> dA(A), dB(B), dC(C);
      cuda::gemm(blas, ta, tb, M, N, K, 0.7f, dA.data(), lda, dB.data(), ldb, 0.3f, dC.data(), N);
      k::gemm<float>(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, C.data(), N);
      expect_close("gemm", dC.download(), C, 1e-5, 1e-5);
    }
}

// bf16 operands, float accumulation: the CPU GEMM of the bf16-rounded operands, to float
// rounding; and the rounding itself (to nearest even, 8 bits of mantissa).
TEST(CudaKernels, Bf16GemmAndConversions) {
  PN_REQUIRE_GPU();
  cuda::Blas blas(kStream);
  const int M = 33, N = 20, K = 64;
  const auto A = randf(size_t(M) * K, 60), B = randf(size_t(K) * N, 61);
  DBuf<float> dA(A), dB(B), dAr(A.size()), dBr(B.size()), dC(size_t(M) * N);
  DBuf<__nv_bfloat16> hA(A.size()), hB(B.size());
  cuda::to_bf16(dA.data(), A.size(), hA.data(), kStream);
  cuda::to_bf16(dB.data(), B.size(), hB.data(), kStream);
  cuda::from_bf16(hA.data(), A.size(), dAr.data(), kStream);
  cuda::from_bf16(hB.data(), B.size(), dBr.data(), kStream);
  const auto Ar = dAr.download(), Br = dBr.download();
  for (size_t i = 0; i < A.size(); ++i)
    ASSERT_LE(std::fabs(Ar[i] - A[i]), std::ldexp(std::fabs(A[i]), -8)) << "bf16 rounding " << i;
  cuda::gemm_bf16(blas, false, true, M, N, K, 1.f, hA.data(), K, hB.data(), K, 0.f, dC.data(), N);
  std::vector<float> C(size_t(M) * N);
  // B^T of the rounded B: B is [K, N] here read as [N, K] with trans_b (ldb = K).
  k::gemm<float>(false, true, M, N, K, 1.f, Ar.data(), K, Br.data(), K, 0.f, C.data(), N);
  expect_close("gemm_bf16", dC.download(), C, 1e-5, 1e-5);
}

// A Linear's forward with the bias and the ReLU in cuBLASLt's epilogue is the CPU's GEMM and
// bias pass, in fp32 and on bf16 operands, with bias, ReLU or both, on a weight at an address
// aligned to 4 bytes only (as inside the parameter buffer); every call ran in the epilogue
// (it returns true and lt_calls counts it).
TEST(CudaKernels, LinearForwardEpilogueIsTheCpusLinear) {
  PN_REQUIRE_GPU();
  const int rows = 37, in = 48, out = 40;
  const auto x = randf(size_t(rows) * in, 70), w = randf(size_t(out) * in + 1, 71),
             bias = randf(out, 72);
  for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
    cuda::Blas blas(kStream, math);
    DBuf<float> dx(x), dw(w), db(bias), dy(size_t(rows) * out);
    // bf16: the CPU's reference takes the operands rounded as the GPU reads them.
    auto rounded = [&](std::vector<float> v) {
      if (math == GemmMath::bf16)
        for (float& e : v) e = __bfloat162float(__float2bfloat16(e));
      return v;
    };
    const auto xr = rounded(x), wr = rounded(w);
    for (int with_bias = 0; with_bias < 2; ++with_bias)
      for (int relu = 0; relu < 2; ++relu) {
        if (!with_bias && !relu) continue;  // a plain GEMM: nothing for an epilogue
        SCOPED_TRACE(std::string(math == GemmMath::bf16 ? "bf16" : "fp32") +
                     (with_bias ? " bias" : "") + (relu ? " relu" : ""));
        const size_t before = blas.lt_calls;
        EXPECT_TRUE(cuda::linear_forward_epilogue(blas, dx.data(), nullptr, rows, in, out,
                                                  dw.data() + 1,
                                                  with_bias ? db.data() : nullptr, relu,
                                                  dy.data(), nullptr));
        EXPECT_EQ(blas.lt_calls - before, 1u);
        std::vector<float> y(size_t(rows) * out);
        k::cpu::gemm<float>(false, true, rows, out, in, 1.f, xr.data(), in, wr.data() + 1, in,
                            0.f, y.data(), out);
        if (with_bias && relu)
          k::cpu::bias_relu_forward<float>(y.data(), bias.data(), rows, out);
        else if (relu)
          k::cpu::relu_forward<float>(y.data(), y.size(), y.data());
        else
          k::cpu::add_bias<float>(y.data(), bias.data(), rows, out);
        expect_close("linear_forward", dy.download(), y, 1e-5, 1e-5);
        if (math != GemmMath::bf16) continue;
        // The bf16 output from the epilogue: y's rounding, to one bf16 unit (the bias added in
        // bf16 where cuBLASLt takes it only so: half a unit of the bias more).
        DBuf<uint16_t> dy16(size_t(rows) * out);
        EXPECT_TRUE(cuda::linear_forward_epilogue(blas, dx.data(), nullptr, rows, in, out,
                                                  dw.data() + 1,
                                                  with_bias ? db.data() : nullptr, relu,
                                                  nullptr, dy16.data()));
        const std::vector<uint16_t> y16 = dy16.download();
        int off = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          uint32_t bits = uint32_t(y16[i]) << 16;
          float got;
          std::memcpy(&got, &bits, sizeof got);
          const double slack = std::ldexp(std::fabs(y[i]), -8) +
                               (with_bias ? std::ldexp(std::fabs(bias[i % out]), -8) : 0) + 1e-6;
          off += std::fabs(got - y[i]) > slack;
        }
        EXPECT_EQ(off, 0) << "of " << y.size() << " bf16 outputs";
      }
  }
}

// A Linear's weight and bias gradients in one cuBLASLt matmul (the bias gradient its BGRADB
// epilogue) are the CPU's GEMM and column sums, accumulated onto what the gradients held, in fp32
// and on bf16 operands (the column sums then of dy as rounded), on a weight gradient aligned to 4
// bytes only; every call ran in the epilogue. And k::linear_backward on a GPU context (dx too,
// with and without a bias) is the CPU's.
TEST(CudaKernels, LinearBackwardEpilogueIsTheCpusBackward) {
  PN_REQUIRE_GPU();
  const int rows = 37, in = 48, out = 40;
  const auto x = randf(size_t(rows) * in, 80), dy = randf(size_t(rows) * out, 81),
             w = randf(size_t(out) * in, 82), dw0 = randf(size_t(out) * in + 1, 83),
             db0 = randf(out, 84);
  for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
    SCOPED_TRACE(math == GemmMath::bf16 ? "bf16" : "fp32");
    cuda::Blas blas(kStream, math);
    DBuf<float> dx(x), ddy(dy), ddw(dw0), ddb(db0);
    auto rounded = [&](std::vector<float> v) {
      if (math == GemmMath::bf16)
        for (float& e : v) e = __bfloat162float(__float2bfloat16(e));
      return v;
    };
    const auto xr = rounded(x), dyr = rounded(dy);
    EXPECT_TRUE(cuda::linear_weight_grad_epilogue(blas, dx.data(), nullptr, ddy.data(), nullptr,
                                                  rows, in, out, ddw.data() + 1, ddb.data()));
    EXPECT_EQ(blas.lt_calls, 1u);
    std::vector<float> dW = dw0, db = db0;
    k::cpu::gemm<float>(true, false, out, in, rows, 1.f, dyr.data(), out, xr.data(), in, 1.f,
                        dW.data() + 1, in);
    k::cpu::bias_grad<float>(dyr.data(), rows, out, db.data());
    expect_close("dW", ddw.download(), dW, 1e-5, 1e-5);
    expect_close("db", ddb.download(), db, 1e-5, 1e-5);
  }
  for (int with_bias = 0; with_bias < 2; ++with_bias) {
    SCOPED_TRACE(with_bias ? "k::linear_backward with a bias" : "k::linear_backward, no bias");
    std::vector<float> dxc(size_t(rows) * in), dW = dw0, db = db0;
    k::linear_backward<float>(x.data(), nullptr, dy.data(), nullptr, rows, in, out, w.data(),
                              dxc.data(), nullptr, dW.data(), with_bias ? db.data() : nullptr);
    DeviceScope gpu(Device::CUDA, 0, GemmMath::fp32);
    Buf<float> bx, bdy, bw, bdx(dxc.size()), bdw, bdb;
    bx.from_host(x), bdy.from_host(dy), bw.from_host(w), bdw.from_host(dw0), bdb.from_host(db0);
    k::linear_backward<float>(bx.data(), nullptr, bdy.data(), nullptr, rows, in, out, bw.data(),
                              bdx.data(), nullptr, bdw.data(), with_bias ? bdb.data() : nullptr);
    expect_close("dx", bdx.to_host(), dxc, 1e-5, 1e-5);
    expect_close("dW", bdw.to_host(), dW, 1e-5, 1e-5);
    expect_close("db", bdb.to_host(), db, 1e-5, 1e-5);
  }
}

// The feed-forward's ReLU in bf16: k::linear_forward writes the ReLU's bf16 output from
// cuBLASLt's epilogue (bias and ReLU), and k::linear_backward_into_relu gives the next Linear's
// weight and bias gradients and, masked by that output's sign, the bf16 gradient of the ReLU's
// input over the output's own storage (the GEMM writes bf16, one pass masks it). Each is the
// CPU's result on the operands as the GPU rounds them, to one bf16 unit, and the gradient is
// exactly 0 where the ReLU was off.
TEST(CudaKernels, ReluBackwardOverItsBf16Output) {
  PN_REQUIRE_GPU();
  const int rows = 37, in = 48, hid = 136, out = 40;
  const auto x = randf(size_t(rows) * in, 90), w1 = randf(size_t(hid) * in, 91),
             b1 = randf(hid, 92), w2 = randf(size_t(out) * hid, 93),
             dy = randf(size_t(rows) * out, 94), dw0 = randf(size_t(out) * hid, 95),
             db0 = randf(out, 96);
  auto rounded = [](std::vector<float> v) {
    for (float& e : v) e = __bfloat162float(__float2bfloat16(e));
    return v;
  };
  auto widened = [](const std::vector<uint16_t>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t bits = uint32_t(v[i]) << 16;
      std::memcpy(&f[i], &bits, sizeof(float));
    }
    return f;
  };
  DeviceScope gpu(Device::CUDA, 0, GemmMath::bf16);
  Buf<float> bx, bw1, bb1, bw2, bdy, bdw, bdb;
  bx.from_host(x), bw1.from_host(w1), bb1.from_host(b1), bw2.from_host(w2), bdy.from_host(dy);
  bdw.from_host(dw0), bdb.from_host(db0);
  Buf<uint16_t> h16(size_t(rows) * hid);
  k::linear_forward<float>(bx.data(), nullptr, rows, in, hid, bw1.data(), bb1.data(), true,
                           nullptr, h16.data());
  // The forward: the CPU's bias and ReLU on the rounded operands, to one bf16 unit (and half a
  // unit of the bias, where cuBLASLt adds it in bf16).
  std::vector<float> y(size_t(rows) * hid);
  const auto xr = rounded(x), w1r = rounded(w1);
  k::cpu::gemm<float>(false, true, rows, hid, in, 1.f, xr.data(), in, w1r.data(), in, 0.f,
                      y.data(), hid);
  k::cpu::bias_relu_forward<float>(y.data(), b1.data(), rows, hid);
  const std::vector<float> h = widened(h16.to_host());
  int off = 0;
  for (size_t i = 0; i < y.size(); ++i)
    off += std::fabs(h[i] - y[i]) > std::ldexp(std::fabs(y[i]) + std::fabs(b1[i % hid]), -8) + 1e-6;
  EXPECT_EQ(off, 0) << "of " << y.size() << " bf16 outputs";

  k::linear_backward_into_relu<float>(h16.data(), bdy.data(), nullptr, rows, hid, out, bw2.data(),
                                      bdw.data(), bdb.data(), h16.data());
  const auto dyr = rounded(dy), w2r = rounded(w2);
  std::vector<float> dW = dw0, db = db0, dh(size_t(rows) * hid);
  k::cpu::gemm<float>(true, false, out, hid, rows, 1.f, dyr.data(), out, h.data(), hid, 1.f,
                      dW.data(), hid);
  k::cpu::bias_grad<float>(dyr.data(), rows, out, db.data());
  expect_close("dW", bdw.to_host(), dW, 1e-5, 1e-5);
  expect_close("db", bdb.to_host(), db, 1e-5, 1e-5);
  k::cpu::gemm<float>(false, false, rows, hid, out, 1.f, dyr.data(), out, w2r.data(), hid, 0.f,
                      dh.data(), hid);
  const std::vector<float> got = widened(h16.to_host());
  int on = 0, wrong = 0;
  for (size_t i = 0; i < dh.size(); ++i) {
    if (h[i] > 0.f) {
      ++on;
      wrong += std::fabs(got[i] - dh[i]) > std::ldexp(std::fabs(dh[i]), -8) + 1e-6;
    } else {
      wrong += got[i] != 0.f;
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << dh.size() << " gradients";
  EXPECT_GT(on, int(dh.size()) / 4);  // both sides of the ReLU are exercised
  EXPECT_LT(on, int(dh.size()) * 3 / 4);
}

// A Linear's output gradient given as its bf16 rounding (dy16: the loss's, cuDNN attention's)
// gives k::linear_backward on a bf16 GPU context the results of dy rounded at the call, to the
// bit, with and without a bias; bias_grad_bf16 is bias_grad of the widened values, to the bit,
// on the GPU and on the CPU.
TEST(CudaKernels, LinearBackwardFromABf16GradientIsTheRoundingAtTheCall) {
  PN_REQUIRE_GPU();
  const int rows = 37, in = 48, out = 40;
  const size_t ny = size_t(rows) * out;
  const auto x = randf(size_t(rows) * in, 85), dy = randf(ny, 86), w = randf(size_t(out) * in, 87),
             dw0 = randf(size_t(out) * in, 88), db0 = randf(out, 89);
  DeviceScope gpu(Device::CUDA, 0, GemmMath::bf16);
  Buf<float> bx, bdy, bw;
  bx.from_host(x), bdy.from_host(dy), bw.from_host(w);
  Buf<uint16_t> bdy16(ny);
  k::round_bf16(bdy.data(), ny, bdy16.data());
  for (int with_bias = 0; with_bias < 2; ++with_bias) {
    SCOPED_TRACE(with_bias ? "with a bias" : "no bias");
    Buf<float> dx[2], dw[2], db[2];
    for (int given = 0; given < 2; ++given) {
      dx[given].resize(size_t(rows) * in);
      dw[given].from_host(dw0), db[given].from_host(db0);
      k::linear_backward<float>(bx.data(), nullptr, given ? nullptr : bdy.data(),
                                given ? bdy16.data() : nullptr, rows, in, out, bw.data(),
                                dx[given].data(), nullptr, dw[given].data(),
                                with_bias ? db[given].data() : nullptr);
    }
    EXPECT_EQ(dx[1].to_host(), dx[0].to_host());
    EXPECT_EQ(dw[1].to_host(), dw[0].to_host());
    EXPECT_EQ(db[1].to_host(), db[0].to_host());
    // dx asked for as its bf16 rounding alone (the attention's dO): the GEMM's fp32 dx rounded,
    // to one bf16 unit (it may sum in another order); the parameter gradients as before.
    Buf<uint16_t> dx16(size_t(rows) * in);
    Buf<float> dw16, db16;
    dw16.from_host(dw0), db16.from_host(db0);
    k::linear_backward<float>(bx.data(), nullptr, bdy.data(), nullptr, rows, in, out, bw.data(),
                              nullptr, dx16.data(), dw16.data(),
                              with_bias ? db16.data() : nullptr);
    const std::vector<uint16_t> got16 = dx16.to_host();
    const std::vector<float> want = dx[0].to_host();
    int off = 0;
    for (size_t i = 0; i < want.size(); ++i)
      off += std::fabs(bf16_value(got16[i]) - want[i]) >
             std::ldexp(std::fabs(want[i]), -8) + 1e-6;
    EXPECT_EQ(off, 0) << "of " << want.size() << " bf16 input gradients";
    expect_close("dW with dx16", dw16.to_host(), dw[0].to_host(), 1e-6, 1e-6);
    expect_close("db with dx16", db16.to_host(), db[0].to_host(), 1e-6, 1e-6);
  }
  const std::vector<uint16_t> h16 = bdy16.to_host();
  std::vector<float> wide(ny);
  for (size_t i = 0; i < ny; ++i) wide[i] = bf16_value(h16[i]);
  Buf<float> bwide, s32, s16;
  bwide.from_host(wide), s32.from_host(db0), s16.from_host(db0);
  k::bias_grad<float>(bwide.data(), rows, out, s32.data());
  k::bias_grad_bf16(bdy16.data(), rows, out, s16.data());
  EXPECT_EQ(s16.to_host(), s32.to_host()) << "GPU";
  std::vector<float> c32 = db0, c16 = db0;
  k::cpu::bias_grad<float>(wide.data(), rows, out, c32.data());
  k::cpu::bias_grad_bf16(h16.data(), rows, out, c16.data());
  EXPECT_EQ(c16, c32) << "CPU";
}

// A GEMM input kept in bf16: round_bf16's bits are the CPU's (nearest even, the GEMMs'
// rounding); the ReLU's backward from them (written over them) is the rounding of the fp32 ReLU's
// backward from y itself (y > 0 exactly where its rounding is), on the CPU and the GPU alike; and
// the GPU's fp32 mask with the bias gradient is the CPU's.
TEST(CudaKernels, KeptBf16InputIsTheCpusRounding) {
  PN_REQUIRE_GPU();
  const int rows = 67, cols = 45;
  const size_t n = size_t(rows) * cols;
  auto y = randf(n, 90);
  y[0] = 0.f, y[1] = -0.f, y[2] = 1e-40f, y[3] = -1e-40f;  // zeros and denormals of both signs
  const auto dy = randf(n, 91), db0 = randf(cols, 92);
  std::vector<uint16_t> y16(n);
  k::round_bf16(y.data(), n, y16.data());
  DBuf<float> dyv(y), ddy(dy), ddb(db0);
  DBuf<uint16_t> dy16(n);
  cuda::round_bf16(dyv.data(), n, dy16.data(), kStream);
  const std::vector<uint16_t> got16 = dy16.download();
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += got16[i] != y16[i];
  EXPECT_EQ(differ, 0u) << "round_bf16's bits differ from the CPU's";
  std::vector<float> dx32 = dy, db32 = db0;
  k::relu_backward_bias_grad<float>(y.data(), dx32.data(), rows, cols, db32.data());
  std::vector<uint16_t> want16(n), cpu16 = y16;
  k::round_bf16(dx32.data(), n, want16.data());
  k::relu_backward_round_bf16(cpu16.data(), dy.data(), n);
  EXPECT_EQ(cpu16, want16) << "CPU: not the rounding of the fp32 ReLU's backward";
  cuda::relu_backward_round_bf16(dy16.data(), ddy.data(), n, kStream);
  EXPECT_EQ(dy16.download(), want16) << "GPU: not the rounding of the fp32 ReLU's backward";
  EXPECT_EQ(ddy.download(), dy) << "dy written";
  // The same from a gradient that a GEMM wrote in bf16 (relu_backward_bf16): masking commutes
  // with the rounding, so the bits are again want16 (8 values a thread, then a tail of 7).
  std::vector<uint16_t> g16(n), cpu_from16 = y16;
  k::round_bf16(dy.data(), n, g16.data());
  k::relu_backward_bf16(cpu_from16.data(), g16.data(), n);
  EXPECT_EQ(cpu_from16, want16) << "CPU: not the rounding of the fp32 ReLU's backward";
  DBuf<uint16_t> dg16(g16), dy16_from16(y16);
  cuda::relu_backward_bf16(dy16_from16.data(), dg16.data(), n, kStream);
  EXPECT_EQ(dy16_from16.download(), want16) << "GPU: not the rounding of the fp32 ReLU's backward";
  // The fp32 twin (one pass: the mask written as the column sums read it).
  DBuf<float> ddy32(dy), ddb32(db0);
  cuda::relu_backward_bias_grad(dyv.data(), ddy32.data(), rows, cols, ddb32.data(), kStream);
  expect_equal("relu_backward_bias_grad dy", ddy32.download(), dx32);
  expect_close("relu_backward_bias_grad db", ddb32.download(), db32, 1e-5, 1e-5);
}

TEST(CudaKernels, ElementWise) {
  PN_REQUIRE_GPU();
  const int rows = 67, cols = 45;
  const size_t n = size_t(rows) * cols;
  const auto a = randf(n, 4), b = randf(n, 5), bias = randf(cols, 6);
  DBuf<float> da(a), db(b), dbias(bias), dy(n);

  std::vector<float> y(n);
  k::add<float>(a.data(), b.data(), n, y.data());
  cuda::add(da.data(), db.data(), n, dy.data(), kStream);
  expect_equal("add", dy.download(), y);

  k::add_inplace<float>(y.data(), a.data(), n);
  cuda::add_inplace(dy.data(), da.data(), n, kStream);
  expect_equal("add_inplace", dy.download(), y);

  k::scale_inplace<float>(y.data(), n, 0.37f);
  cuda::scale_inplace(dy.data(), n, 0.37f, kStream);
  expect_equal("scale_inplace", dy.download(), y);

  k::add_bias<float>(y.data(), bias.data(), rows, cols);
  cuda::add_bias(dy.data(), dbias.data(), rows, cols, kStream);
  expect_equal("add_bias", dy.download(), y);

  std::vector<float> g(cols, 0.5f);
  DBuf<float> dg(g);
  k::bias_grad<float>(a.data(), rows, cols, g.data());
  cuda::bias_grad(da.data(), rows, cols, dg.data(), kStream);
  expect_close("bias_grad", dg.download(), g, 1e-5, 1e-5);  // CPU sums in float, GPU in double

  k::relu_forward<float>(a.data(), n, y.data());
  cuda::relu_forward(da.data(), n, dy.data(), kStream);
  expect_equal("relu_forward", dy.download(), y);
  std::vector<float> dx(n);
  DBuf<float> ddx(n);
  k::relu_backward<float>(y.data(), b.data(), n, dx.data());
  cuda::relu_backward(dy.data(), db.data(), n, ddx.data(), kStream);
  expect_equal("relu_backward", ddx.download(), dx);

  cuda::fill(ddx.data(), n, 2.5f, kStream);
  expect_equal("fill", ddx.download(), std::vector<float>(n, 2.5f));
  cuda::copy(da.data(), n, ddx.data(), kStream);
  expect_equal("copy", ddx.download(), a);
}

TEST(CudaKernels, DropoutMaskBitForBit) {
  PN_REQUIRE_GPU();
  const size_t n = 100003;
  for (float p : {0.0f, 0.1f, 0.5f}) {
    std::vector<uint8_t> keep(n);
    const uint64_t seed = 12345 + uint64_t(p * 100);
    k::dropout_mask(&seed, 7, n, p, keep.data());
    DBuf<uint8_t> dkeep(n);
    DBuf<uint64_t> dseed(std::vector<uint64_t>{seed});
    cuda::dropout_mask(dseed.data(), 7, n, p, dkeep.data(), kStream);
    expect_equal("dropout_mask", dkeep.download(), keep);

    auto x = randf(n, 7);
    DBuf<float> dx(x);
    k::dropout_apply<float>(x.data(), keep.data(), n, p);
    cuda::dropout_apply(dx.data(), dkeep.data(), n, p, kStream);
    expect_equal("dropout_apply", dx.download(), x);
  }
}

TEST(CudaKernels, EmbeddingAndPositions) {
  PN_REQUIRE_GPU();
  const int V = 17, d = 24, seq = 9, rows = 36, max_len = 40;
  std::vector<float> P(size_t(max_len) * d);
  k::sinusoidal_positions<float>(max_len, d, P.data());
  DBuf<float> dP(P.size());
  cuda::sinusoidal_positions(max_len, d, dP.data(), kStream);
  expect_close("sinusoidal_positions", dP.download(), P, 1e-6, 1e-6);
  std::vector<float> P_odd(size_t(max_len) * 7);
  k::sinusoidal_positions<float>(max_len, 7, P_odd.data());
  DBuf<float> dP_odd(P_odd.size());
  cuda::sinusoidal_positions(max_len, 7, dP_odd.data(), kStream);
  expect_close("sinusoidal_positions (odd d)", dP_odd.download(), P_odd, 1e-6, 1e-6);

  std::vector<int32_t> tok(rows);
  for (int i = 0; i < rows; ++i) tok[i] = (i * 7 + i / 5) % V;  // tokens repeat
  const auto E = randf(size_t(V) * d, 8), dy = randf(size_t(rows) * d, 9);
  DBuf<int32_t> dtok(tok);
  DBuf<float> dE(E), ddy(dy), dout(size_t(rows) * d);
  std::vector<float> out(size_t(rows) * d);
  k::embedding_forward<float>(tok.data(), rows, seq, E.data(), P.data(), d, 4.9f, out.data());
  cuda::embedding_forward(dtok.data(), rows, seq, dE.data(), dP.data(), d, 4.9f, dout.data(),
                          kStream);
  expect_close("embedding_forward", dout.download(), out, 1e-6, 1e-6);

  std::vector<float> gE = randf(size_t(V) * d, 10);
  DBuf<float> dgE(gE);
  k::embedding_backward<float>(tok.data(), rows, dy.data(), d, 4.9f, gE.data());
  cuda::embedding_backward(dtok.data(), rows, ddy.data(), d, 4.9f, dgE.data(), kStream);
  // Same order and the same two roundings as the CPU on x86-64; a host compiler that fuses
  // the CPU's multiply-add (aarch64) can differ by an ulp, hence close rather than equal.
  expect_close("embedding_backward", dgE.download(), gE, 1e-6, 1e-6);
}

TEST(CudaKernels, EmbeddingBackwardManyRowsIsDeterministic) {
  PN_REQUIRE_GPU();
  // More rows than a grid's y dimension holds, one token repeated 20,000 times (padding-like),
  // the rest spread: the sorted reduction must equal the CPU's row order and repeat bit for bit.
  const int V = 300, d = 96, rows = 70000;
  std::vector<int32_t> tok(rows);
  for (int i = 0; i < rows; ++i) tok[i] = i % 7 < 2 ? 1 : (i * 13 + i / 3) % V;
  const auto dy = randf(size_t(rows) * d, 21);
  const std::vector<float> zero(size_t(V) * d, 0.f);
  std::vector<float> gE = zero;
  k::embedding_backward<float>(tok.data(), rows, dy.data(), d, 0.5f, gE.data());
  DBuf<int32_t> dtok(tok);
  DBuf<float> ddy(dy), a(zero), b(zero);  // both start where the CPU's gE started
  cuda::embedding_backward(dtok.data(), rows, ddy.data(), d, 0.5f, a.data(), kStream);
  cuda::embedding_backward(dtok.data(), rows, ddy.data(), d, 0.5f, b.data(), kStream);
  const auto ha = a.download(), hb = b.download();
  EXPECT_EQ(ha, hb) << "two runs differ: the reduction is not deterministic";
  expect_close("embedding_backward, 70,000 rows", ha, gE, 1e-6, 1e-6);
}

TEST(CudaKernels, AttentionForwardBackward) {
  PN_REQUIRE_GPU();
  cuda::Blas blas(kStream);
  for (int T : {1, 13, 40}) {
    const int nseq = 3, d = 32, H = 4;
    const size_t nq = size_t(nseq) * T * 3 * d, np = size_t(nseq) * H * T * T,
                 nc = size_t(nseq) * T * d;
    const auto qkv = randf(nq, 11), dctx = randf(nc, 12);
    std::vector<float> probs(np), ctx(nc), dqkv(nq), scratch(np);
    k::attention_forward<float>(qkv.data(), nseq, T, d, H, probs.data(), ctx.data());
    k::attention_backward<float>(qkv.data(), probs.data(), ctx.data(), dctx.data(), nseq, T, d, H,
                                 dqkv.data(),
                                 scratch.data());
    DBuf<float> dqkv_in(qkv), ddctx(dctx), dprobs(np), dctxo(nc), ddqkv(nq), dscratch(np);
    cuda::attention_forward(blas, dqkv_in.data(), nseq, T, d, H, dprobs.data(), dctxo.data());
    cuda::attention_backward(blas, dqkv_in.data(), dprobs.data(), dctxo.data(), ddctx.data(),
                             nseq, T, d, H, ddqkv.data(), dscratch.data());
    expect_close("attention probs", dprobs.download(), probs, 1e-5, 1e-6);
    expect_close("attention ctx", dctxo.download(), ctx, 1e-4, 1e-5);
    expect_close("attention dqkv", ddqkv.download(), dqkv, 1e-4, 1e-5);
  }
}

// The CPU's attention in double on bf16-rounded qkv and dctx (drawn from seed): what the fused
// kernels, which take bf16 operands, are checked against.
struct AttentionReference {
  std::vector<float> qkv, dctx;      // the inputs, rounded to bf16
  std::vector<double> ctx, dqkv;     // the CPU's outputs in double
  double ctx_max = 0, dqkv_max = 0;  // their largest magnitudes
};
AttentionReference attention_reference(int nseq, int T, int d, int H, uint64_t seed) {
  const size_t nq = size_t(nseq) * T * 3 * d, nc = size_t(nseq) * T * d;
  const size_t np = size_t(nseq) * H * T * T;
  auto round_bf16 = [](std::vector<float> v) {
    for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
    return v;
  };
  AttentionReference r{round_bf16(randf(nq, seed)), round_bf16(randf(nc, seed + 1)), {}, {}};
  std::vector<double> qkv64(r.qkv.begin(), r.qkv.end()), dctx64(r.dctx.begin(), r.dctx.end());
  std::vector<double> probs(np), scratch(np);
  r.ctx.resize(nc), r.dqkv.resize(nq);
  k::attention_forward<double>(qkv64.data(), nseq, T, d, H, probs.data(), r.ctx.data());
  k::attention_backward<double>(qkv64.data(), probs.data(), r.ctx.data(), dctx64.data(), nseq, T, d,
                                H, r.dqkv.data(), scratch.data());
  for (double x : r.ctx) r.ctx_max = std::max(r.ctx_max, std::fabs(x));
  for (double x : r.dqkv) r.dqkv_max = std::max(r.dqkv_max, std::fabs(x));
  return r;
}

// cuDNN's fused attention (kernels/cuda/cudnn_attention.cu; on the emulation its stand-in,
// emulator/cudnn_sdpa.cpp) against the CPU's attention in double on the same bf16-rounded qkv
// and dctx, over short, odd and long sequences and head sizes 32, 64 and 128; two backward runs
// agree to the bit (cuDNN's deterministic backward). And the dispatch: --attention fused takes
// cuDNN wherever it runs the shape, and a shape cuDNN refuses (a sequence of one token, which
// its backward refuses; head size 12) goes to the materialized attention under fused but is an
// error under --attention cudnn; fp32 GEMMs and --attention materialized keep T x T floats.
TEST(CudaKernels, CudnnAttentionIsTheCpusAttention) {
  PN_REQUIRE_GPU();
  struct Case {
    int T, d, H;
  };
  for (const Case& c : {Case{37, 64, 2}, Case{64, 128, 1}, Case{150, 96, 3}}) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " head size " + std::to_string(c.d / c.H));
    const int nseq = 2, T = c.T, d = c.d, H = c.H;
    const std::string why = cuda::cudnn_attention_unsupported(nseq, T, d, H);
    ASSERT_EQ(why, "");
    const size_t nq = size_t(nseq) * T * 3 * d, nc = size_t(nseq) * T * d;
    const size_t nsaved = cuda::cudnn_attention_saved_size(nseq, T, d, H);
    const AttentionReference ref = attention_reference(nseq, T, d, H, 41);
    DBuf<float> dq(ref.qkv), ddctx(ref.dctx), saved(nsaved), dctxo(nc), ddqkv(nq),
        dscratch(nsaved), ddqkv2(nq);
    cuda::cudnn_attention_forward(dq.data(), nseq, T, d, H, saved.data(), dctxo.data(), kStream);
    cuda::cudnn_attention_backward(saved.data(), ddctx.data(), nseq, T, d, H, ddqkv.data(),
                                   dscratch.data(), kStream);
    cuda::cudnn_attention_backward(saved.data(), ddctx.data(), nseq, T, d, H, ddqkv2.data(),
                                   dscratch.data(), kStream);
    const std::vector<float> got_ctx = dctxo.download(), got_dqkv = ddqkv.download();
    expect_equal("cuDNN dqkv, two runs", ddqkv2.download(), got_dqkv);
    // bf16 outputs (ctx and dqkv rounded once: 2^-9 relative) on top of cuDNN's bf16 P and dS.
    expect_close("cuDNN ctx", got_ctx, ref.ctx, 0, 4e-3 * ref.ctx_max);
    expect_close("cuDNN dqkv", got_dqkv, ref.dqkv, 0, 8e-3 * ref.dqkv_max);
  }
  DeviceScope bf16(Device::CUDA, 0, GemmMath::bf16);
  EXPECT_EQ(k::attention_saved_size(3, 40, 64, 2), cuda::cudnn_attention_saved_size(3, 40, 64, 2));
  EXPECT_NE(cuda::cudnn_attention_unsupported(2, 1, 64, 2), "");   // one token
  EXPECT_NE(cuda::cudnn_attention_unsupported(3, 40, 24, 2), "");  // head size 12
  EXPECT_EQ(k::attention_saved_size(3, 40, 24, 2), size_t(3 * 2 * 40 * 40));
  current_context().attention = Attention::cudnn;
  EXPECT_THROW(k::attention_saved_size(3, 40, 24, 2), std::runtime_error);
  EXPECT_THROW(k::attention_saved_size(2, 1, 64, 2), std::runtime_error);
  current_context().attention = Attention::materialized;
  EXPECT_EQ(k::attention_saved_size(3, 40, 64, 2), size_t(3 * 2 * 40 * 40));
  DeviceScope fp32(Device::CUDA, 0, GemmMath::fp32);
  EXPECT_EQ(k::attention_saved_size(3, 40, 64, 2), size_t(3 * 2 * 40 * 40));
}

// mha_forward/mha_backward: fused-qkv self-attention (causal, key padding, attention dropout)
// and cross-attention (separate q and k/v buffers, one sequence with every key masked).
TEST(CudaKernels, GeneralMultiHeadAttention) {
  PN_REQUIRE_GPU();
  cuda::Blas blas(kStream);
  const int nseq = 3, d = 32, H = 4;
  struct Case {
    bool cross, causal, masked, dropout;
    int tq, tk;
  };
  for (const Case& c :
       {Case{false, true, true, true, 12, 12}, Case{false, false, true, false, 9, 9},
        Case{true, false, true, true, 7, 11}, Case{true, false, false, false, 5, 3}}) {
    SCOPED_TRACE("cross " + std::to_string(c.cross) + " causal " + std::to_string(c.causal) +
                 " dropout " + std::to_string(c.dropout));
    const int ldq = c.cross ? d : 3 * d, ldkv = c.cross ? 2 * d : 3 * d;
    const size_t nqbuf = size_t(nseq) * c.tq * ldq;
    const size_t nkvbuf = c.cross ? size_t(nseq) * c.tk * ldkv : 0;
    const auto qbuf = randf(nqbuf, 80), kvbuf = randf(nkvbuf, 81),
               dctx = randf(size_t(nseq) * c.tq * d, 82);
    std::vector<uint8_t> key_mask(size_t(nseq) * c.tk, 1);
    if (c.masked) {
      for (int j = c.tk - 3; j < c.tk; ++j) key_mask[size_t(0) * c.tk + j] = 0;  // padding
      if (c.cross)
        std::fill(key_mask.begin() + c.tk, key_mask.begin() + 2 * c.tk, 0);  // no key at all
    }
    const size_t np = size_t(nseq) * H * c.tq * c.tk;
    std::vector<uint8_t> keep(np, 1);
    const uint64_t seed = 99;
    if (c.dropout) k::dropout_mask(&seed, 0, np, 0.2f, keep.data());
    const float p = c.dropout ? 0.2f : 0.f;
    const uint8_t* km = c.masked ? key_mask.data() : nullptr;
    const uint8_t* kp = c.dropout ? keep.data() : nullptr;

    // CPU
    const float* q = qbuf.data();
    const float* kk = c.cross ? kvbuf.data() : q + d;
    const float* v = c.cross ? kvbuf.data() + d : q + 2 * d;
    std::vector<float> probs(np), probs_drop(np), ctx(size_t(nseq) * c.tq * d), scratch(np);
    std::vector<float> dq(nqbuf, 0.f), dkv(c.cross ? nkvbuf : 0, 0.f);
    k::mha_forward<float>(q, ldq, kk, v, ldkv, nseq, c.tq, c.tk, d, H, c.causal, km, kp, p,
                          probs.data(), probs_drop.data(), ctx.data());
    float* cdk = c.cross ? dkv.data() : dq.data() + d;
    float* cdv = c.cross ? dkv.data() + d : dq.data() + 2 * d;
    k::mha_backward<float>(q, ldq, kk, v, ldkv, nseq, c.tq, c.tk, d, H, c.causal, km, kp, p,
                           probs.data(), probs_drop.data(), dctx.data(), dq.data(), cdk, cdv,
                           scratch.data());
    // GPU
    DBuf<float> gq(qbuf), gkv(kvbuf), gdctx(dctx), gprobs(np), gprobs_drop(np), gctx(ctx.size()),
        gscratch(np), gdq(std::vector<float>(nqbuf, 0.f)),
        gdkv(std::vector<float>(dkv.size(), 0.f));
    DBuf<uint8_t> gmask(key_mask), gkeep(keep);
    const float* gk = c.cross ? gkv.data() : gq.data() + d;
    const float* gv = c.cross ? gkv.data() + d : gq.data() + 2 * d;
    const uint8_t* gkm = c.masked ? gmask.data() : nullptr;
    const uint8_t* gkp = c.dropout ? gkeep.data() : nullptr;
    cuda::mha_forward(blas, gq.data(), ldq, gk, gv, ldkv, nseq, c.tq, c.tk, d, H, c.causal, gkm,
                      gkp, p, gprobs.data(), gprobs_drop.data(), gctx.data());
    float* gdk = c.cross ? gdkv.data() : gdq.data() + d;
    float* gdv = c.cross ? gdkv.data() + d : gdq.data() + 2 * d;
    cuda::mha_backward(blas, gq.data(), ldq, gk, gv, ldkv, nseq, c.tq, c.tk, d, H, c.causal, gkm,
                       gkp, p, gprobs.data(), gprobs_drop.data(), gdctx.data(), gdq.data(), gdk,
                       gdv, gscratch.data());
    expect_close("mha probs", gprobs.download(), probs, 1e-5, 1e-6);
    if (c.dropout) expect_close("mha probs_drop", gprobs_drop.download(), probs_drop, 1e-5, 1e-6);
    expect_close("mha ctx", gctx.download(), ctx, 1e-4, 1e-5);
    expect_close("mha dq (and dk, dv when fused)", gdq.download(), dq, 1e-4, 1e-5);
    if (c.cross) expect_close("mha dk, dv", gdkv.download(), dkv, 1e-4, 1e-5);
  }
}

TEST(CudaKernels, AttentionDecodingStep) {
  PN_REQUIRE_GPU();
  const int N = 4, d = 32, H = 4, max_len = 16, len = 9, ldq = d, ldkv = 2 * d;
  const size_t seq_stride = size_t(max_len) * ldkv;
  const auto q = randf(size_t(N) * ldq, 90), cache = randf(size_t(N) * seq_stride, 91);
  std::vector<uint8_t> key_mask(size_t(N) * max_len, 1);
  key_mask[2] = key_mask[max_len + 5] = 0;
  std::fill(key_mask.begin() + 3 * max_len, key_mask.end(), 0);  // sequence 3: no key
  std::vector<float> ctx(size_t(N) * d);
  k::attention_step<float>(q.data(), ldq, cache.data(), cache.data() + d, ldkv, seq_stride, N, len,
                           d, H, key_mask.data(), max_len, ctx.data());
  DBuf<float> gq(q), gcache(cache), gctx(ctx.size());
  DBuf<uint8_t> gmask(key_mask);
  cuda::attention_step(gq.data(), ldq, gcache.data(), gcache.data() + d, ldkv, seq_stride, N, len,
                       d, H, gmask.data(), max_len, gctx.data(), kStream);
  expect_close("attention_step ctx", gctx.download(), ctx, 1e-5, 1e-6);
}

// Rows ld = V + 3 apart, as the models pad them: the padding, set to a value that would change
// every sum, is never read on either device; the loss leaves it, the gradient sets it to 0 (the
// output layer's GEMMs over a padded vocabulary read it).
TEST(CudaKernels, LabelSmoothedCrossEntropy) {
  PN_REQUIRE_GPU();
  const int rows = 29, V = 301, ld = V + 3;
  const float pad = 777.f;
  std::vector<int32_t> target(rows);
  for (int i = 0; i < rows; ++i) target[i] = (i * 37) % V;
  DBuf<int32_t> dtarget(target);
  DBuf<double> dsums(3);
  for (int masking = 0; masking < 3; ++masking) {  // none, some rows, every row
    std::vector<uint8_t> mask =
        masking == 0 ? std::vector<uint8_t>(rows, 1)
                     : (masking == 1 ? random_mask(rows, 13) : std::vector<uint8_t>(rows, 0));
    DBuf<uint8_t> dmask(mask);
    auto logits = randf(size_t(rows) * ld, 14, 3.f);
    for (int r = 0; r < rows; ++r)
      for (int j = V; j < ld; ++j) logits[size_t(r) * ld + j] = pad;
    DBuf<float> dlogits(logits);

    const k::LossSums ce =
        k::softmax_xent_eval<float>(logits.data(), target.data(), mask.data(), rows, V, ld, 0.1f);
    cuda::softmax_xent_eval(dlogits.data(), dtarget.data(), dmask.data(), rows, V, ld, 0.1f,
                            dsums.data(), kStream);
    const k::LossSums ge = cuda::loss_sums_host(dsums.data(), kStream);
    const std::vector<float> kept = dlogits.download();
    for (int r = 0; r < rows; ++r)
      for (int j = V; j < ld; ++j) {
        ASSERT_EQ(logits[size_t(r) * ld + j], pad) << "the CPU's loss wrote the padding";
        ASSERT_EQ(kept[size_t(r) * ld + j], pad) << "the GPU's loss wrote the padding";
      }
    EXPECT_NEAR(ge.loss, ce.loss, 1e-5 * (1 + std::fabs(ce.loss)));
    EXPECT_NEAR(ge.nll, ce.nll, 1e-5 * (1 + std::fabs(ce.nll)));
    EXPECT_EQ(ge.ntokens, ce.ntokens);

    const k::LossSums c =
        k::softmax_xent<float>(logits.data(), target.data(), mask.data(), rows, V, ld, 0.1f, 0.25f);
    cuda::softmax_xent(dlogits.data(), dtarget.data(), dmask.data(), rows, V, ld, 0.1f, 0.25f,
                       dsums.data(), kStream);
    const k::LossSums g = cuda::loss_sums_host(dsums.data(), kStream);
    EXPECT_NEAR(g.loss, c.loss, 1e-5 * (1 + std::fabs(c.loss)));
    EXPECT_NEAR(g.nll, c.nll, 1e-5 * (1 + std::fabs(c.nll)));
    EXPECT_EQ(g.ntokens, c.ntokens);
    const std::vector<float> got = dlogits.download();
    expect_close("xent dlogits", got, logits, 1e-5, 1e-7);
    for (int r = 0; r < rows; ++r)
      for (int j = V; j < ld; ++j) {
        ASSERT_EQ(logits[size_t(r) * ld + j], 0.f) << "the CPU's gradient left the padding";
        ASSERT_EQ(got[size_t(r) * ld + j], 0.f) << "the GPU's gradient left the padding";
      }
  }
  // No rows at all.
  cuda::softmax_xent(nullptr, nullptr, nullptr, 0, V, ld, 0.1f, 1.f, dsums.data(), kStream);
  const k::LossSums z = cuda::loss_sums_host(dsums.data(), kStream);
  EXPECT_EQ(z.ntokens, 0);
  EXPECT_EQ(z.loss, 0);
}

// The loss's gradient left as its bf16 rounding in place (softmax_xent_acc's grad_bf16, where the
// output GEMMs read nothing else): each row's first half of bytes holds the bits of the fp32
// gradient rounded, to the bit, with the same sums and the padding's gradient 0: on the GPU and
// on its CPU twin; the GPU's values within one bf16 step of the CPU's.
TEST(CudaKernels, LossGradientInBf16IsItsFp32Rounded) {
  PN_REQUIRE_GPU();
  const int rows = 29, V = 601, ld = V + 7;  // rows longer than a block: several stretches
  std::vector<int32_t> target(rows);
  for (int i = 0; i < rows; ++i) target[i] = (i * 37) % V;
  const std::vector<uint8_t> mask = random_mask(rows, 13);
  const auto logits = randf(size_t(rows) * ld, 14, 3.f);
  const size_t n = logits.size();
  // The bf16 matrix [rows, 2 ld] that a float matrix [rows, ld] holds in place: columns [0, ld).
  auto in_place_bits = [&](const std::vector<float>& m) {
    std::vector<uint16_t> all(2 * n), bits(n);
    std::memcpy(all.data(), m.data(), n * sizeof(float));
    const uint16_t* rows16 = k::bf16_rows_in_place(reinterpret_cast<const float*>(all.data()));
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < ld; ++j)
        bits[size_t(r) * ld + j] = rows16[size_t(r) * k::bf16_rows_in_place_ld(ld) + j];
    return bits;
  };
  DBuf<int32_t> dtarget(target);
  DBuf<uint8_t> dmask(mask);
  DBuf<float> grad32(logits), grad16(logits);
  DBuf<double> sums32(std::vector<double>(3, 0.0)), sums16(std::vector<double>(3, 0.0));
  DBuf<uint16_t> rounded(n);
  cuda::softmax_xent_acc(grad32.data(), dtarget.data(), dmask.data(), rows, V, ld, 0.1f, 0.25f,
                         false, false, sums32.data(), kStream);
  cuda::softmax_xent_acc(grad16.data(), dtarget.data(), dmask.data(), rows, V, ld, 0.1f, 0.25f,
                         true, false, sums16.data(), kStream);
  cuda::round_bf16(grad32.data(), n, rounded.data(), kStream);
  const std::vector<uint16_t> got = in_place_bits(grad16.download());
  EXPECT_EQ(got, rounded.download()) << "GPU: not the fp32 gradient rounded";
  EXPECT_EQ(sums16.download(), sums32.download());

  std::vector<float> c32 = logits, c16 = logits;
  std::vector<uint16_t> c_rounded(n);
  double c_sums32[3] = {0, 0, 0}, c_sums16[3] = {0, 0, 0};
  k::cpu::softmax_xent_acc<float>(c32.data(), target.data(), mask.data(), rows, V, ld, 0.1f, 0.25f,
                                  false, false, c_sums32);
  k::cpu::softmax_xent_acc<float>(c16.data(), target.data(), mask.data(), rows, V, ld, 0.1f, 0.25f,
                                  true, false, c_sums16);
  k::cpu::round_bf16(c32.data(), n, c_rounded.data());
  const std::vector<uint16_t> cpu = in_place_bits(c16);
  EXPECT_EQ(cpu, c_rounded) << "CPU: not the fp32 gradient rounded";
  for (int k = 0; k < 3; ++k) EXPECT_EQ(c_sums16[k], c_sums32[k]);

  size_t far = 0, padding = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = bf16_value(got[i]), c = bf16_value(cpu[i]);
    far += std::fabs(g - c) > std::ldexp(std::fabs(c), -7) + 1e-30f;
    padding += int(i % ld) >= V && got[i] != 0;
  }
  EXPECT_EQ(far, 0u) << "values more than one bf16 step from the CPU's";
  EXPECT_EQ(padding, 0u) << "a padded word with a gradient";
}

// The loss of logits that are bf16 themselves (softmax_xent_acc's logits_bf16, as the output
// GEMM writes them where GEMMs write bf16): the gradient's bf16 bits equal to the bit those of
// the fp32 path given the same values, on the GPU and on its CPU twin; the sums too on the CPU,
// and on the GPU to 1e-7 (its kernel holds a row in registers and takes each exponential from
// the row's max, as the CPU does, where the fp32 path's threads take theirs from running maxima:
// float exponentials of other arguments), in blocks of 256 (640 columns) and of 512 (20,032).
class LossOfBf16Logits : public ::testing::TestWithParam<std::tuple<int, int, int>> {};
TEST_P(LossOfBf16Logits, IsTheLossOfTheirValues) {
  PN_REQUIRE_GPU();
  const auto [rows, V, ld] = GetParam();
  std::vector<int32_t> target(rows);
  for (int i = 0; i < rows; ++i) target[i] = (i * 41) % V;
  const std::vector<uint8_t> mask = random_mask(rows, 15);
  const auto raw = randf(size_t(rows) * ld, 16, 4.f);
  const size_t n = raw.size();
  std::vector<uint16_t> z16(n);
  k::cpu::round_bf16(raw.data(), n, z16.data());
  std::vector<float> values(n);  // what the bf16 logits are, in float
  for (size_t i = 0; i < n; ++i) values[i] = bf16_value(z16[i]);
  // The fp32 path's gradient bits (grad_bf16: row r's in the first half of its own bytes).
  auto in_place_bits = [&](const std::vector<float>& m) {
    std::vector<uint16_t> bits(n);
    const uint16_t* rows16 = k::bf16_rows_in_place(m.data());
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < ld; ++j)
        bits[size_t(r) * ld + j] = rows16[size_t(r) * k::bf16_rows_in_place_ld(ld) + j];
    return bits;
  };
  // A float buffer of rows x ld whose first half holds the bf16 matrix [rows, ld].
  auto holding_bf16 = [&]() {
    std::vector<float> buf(n, 0.f);
    std::memcpy(buf.data(), z16.data(), n * sizeof(uint16_t));
    return buf;
  };
  auto leading_bits = [&](const std::vector<float>& buf) {
    std::vector<uint16_t> bits(n);
    std::memcpy(bits.data(), buf.data(), n * sizeof(uint16_t));
    return bits;
  };
  DBuf<int32_t> dtarget(target);
  DBuf<uint8_t> dmask(mask);
  DBuf<float> from32(values), from16(holding_bf16());
  DBuf<double> sums32(std::vector<double>(3, 0.0)), sums16(std::vector<double>(3, 0.0));
  cuda::softmax_xent_acc(from32.data(), dtarget.data(), dmask.data(), rows, V, ld, 0.1f, 0.5f,
                         true, false, sums32.data(), kStream);
  cuda::softmax_xent_acc(from16.data(), dtarget.data(), dmask.data(), rows, V, ld, 0.1f, 0.5f,
                         true, true, sums16.data(), kStream);
  EXPECT_EQ(leading_bits(from16.download()), in_place_bits(from32.download())) << "GPU";
  const std::vector<double> s16 = sums16.download(), s32 = sums32.download();
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(s16[k], s32[k], 1e-7 * std::fabs(s32[k])) << "GPU";
  EXPECT_GT(s16[2], 0.0);

  std::vector<float> c32 = values, c16 = holding_bf16();
  double c_sums32[3] = {0, 0, 0}, c_sums16[3] = {0, 0, 0};
  k::cpu::softmax_xent_acc<float>(c32.data(), target.data(), mask.data(), rows, V, ld, 0.1f, 0.5f,
                                  true, false, c_sums32);
  k::cpu::softmax_xent_acc<float>(c16.data(), target.data(), mask.data(), rows, V, ld, 0.1f, 0.5f,
                                  true, true, c_sums16);
  EXPECT_EQ(leading_bits(c16), in_place_bits(c32)) << "CPU";
  for (int k = 0; k < 3; ++k) EXPECT_EQ(c_sums16[k], c_sums32[k]) << "CPU";
}
INSTANTIATE_TEST_SUITE_P(CudaKernels, LossOfBf16Logits,
                         ::testing::Values(std::make_tuple(29, 601, 640),
                                           std::make_tuple(7, 20001, 20032)));

// A norm's output written by its own kernel as its bf16 rounding (y16, where only GEMMs read it)
// is the fp32 output rounded, to the bit, for every forward kernel of the norms (the row norm, rms
// and group rows, and the column affine map of BN, PN-V and PN), with the same statistics: on the
// GPU and on the CPU twins.
TEST(CudaKernels, NormOutputInBf16IsItsFp32Rounded) {
  PN_REQUIRE_GPU();
  const int rows = 37, d = 96, G = 4;
  const size_t n = size_t(rows) * d;
  const auto x = randf(n, 120, 2.f), gamma = randf(d, 121), beta = randf(d, 122);
  std::vector<double> shift(d), scale(d);
  for (int c = 0; c < d; ++c) shift[c] = 0.01 * c - 0.3, scale[c] = 0.5 + 0.01 * c;
  const std::vector<float> zeros(size_t(rows) * G, 0.f);  // the row norm fills rows of them
  DBuf<float> dx(x), dgamma(gamma), dbeta(beta), y(n), stat_a(zeros), stat_b(zeros);
  DBuf<double> dshift(shift), dscale(scale);
  DBuf<uint16_t> y16(n), rounded(n);
  const char* names[4] = {"layernorm_forward", "rowgroup_rms_forward", "rowgroup_norm_forward",
                          "column_affine"};
  for (int kernel = 0; kernel < 4; ++kernel) {
    SCOPED_TRACE(names[kernel]);
    std::vector<float> stats[2];
    std::vector<float> cy(n), ca(size_t(rows) * G), cb(size_t(rows) * G);
    std::vector<uint16_t> c16(n), c_rounded(n);
    for (int in_bf16 = 0; in_bf16 < 2; ++in_bf16) {
      float* yo = in_bf16 ? nullptr : y.data();
      uint16_t* yo16 = in_bf16 ? y16.data() : nullptr;
      float* co = in_bf16 ? nullptr : cy.data();
      uint16_t* co16 = in_bf16 ? c16.data() : nullptr;
      switch (kernel) {
        case 0:
          cuda::layernorm_forward(dx.data(), rows, d, dgamma.data(), dbeta.data(), 1e-5f, yo, yo16,
                                  stat_a.data(), stat_b.data(), kStream);
          k::cpu::layernorm_forward<float>(x.data(), rows, d, gamma.data(), beta.data(), 1e-5f, co,
                                           co16, ca.data(), cb.data());
          break;
        case 1:
          cuda::rowgroup_rms_forward(dx.data(), rows, d, G, 1e-5f, dgamma.data(), yo, yo16,
                                     stat_a.data(), kStream);
          k::cpu::rowgroup_rms_forward<float>(x.data(), rows, d, G, 1e-5f, gamma.data(), co, co16,
                                              ca.data());
          break;
        case 2:
          cuda::rowgroup_norm_forward(dx.data(), rows, d, G, 1e-5f, dgamma.data(), dbeta.data(), yo,
                                      yo16, stat_a.data(), stat_b.data(), kStream);
          k::cpu::rowgroup_norm_forward<float>(x.data(), rows, d, G, 1e-5f, gamma.data(),
                                               beta.data(), co, co16, ca.data(), cb.data());
          break;
        default:
          cuda::column_affine(dx.data(), rows, d, dshift.data(), dscale.data(), dgamma.data(),
                              dbeta.data(), yo, yo16, nullptr, kStream);
          k::cpu::column_affine<float>(x.data(), rows, d, shift.data(), scale.data(),
                                       gamma.data(), beta.data(), co, co16, nullptr);
      }
      stats[in_bf16] = stat_a.download();
      if (!in_bf16) {
        cuda::round_bf16(y.data(), n, rounded.data(), kStream);
        k::cpu::round_bf16(cy.data(), n, c_rounded.data());
      }
    }
    EXPECT_EQ(y16.download(), rounded.download()) << "GPU";
    EXPECT_EQ(c16, c_rounded) << "CPU";
    EXPECT_EQ(stats[1], stats[0]) << "the statistics differ";
  }
}

TEST(CudaKernels, AdamAndReductions) {
  PN_REQUIRE_GPU();
  const size_t n = 50001;
  auto p = randf(n, 15), g = randf(n, 16), m = randf(n, 17, 0.1f), v = randf(n, 18, 0.1f);
  for (auto& x : v) x = x * x;
  DBuf<float> dp(p), dg(g), dm(m), dv(v);
  for (int64_t t = 1; t <= 3; ++t) {
    k::adam_update(p.data(), g.data(), m.data(), v.data(), n, 0.25f, 0.75f, 1e-3f, 0.9f, 0.98f,
                   1e-8f, 0.01f, t);
    cuda::adam_update(dp.data(), dg.data(), dm.data(), dv.data(), n, 0.25f, 0.75f, 1e-3f, 0.9f,
                      0.98f, 1e-8f, 0.01f, t, kStream);
  }
  expect_close("adam p", dp.download(), p, 1e-6, 1e-7);
  expect_close("adam m", dm.download(), m, 1e-6, 1e-7);
  expect_close("adam v", dv.download(), v, 1e-6, 1e-7);

  const double cs = k::sum_squares<float>(g.data(), n);
  EXPECT_NEAR(cuda::sum_squares_host(dg.data(), n, kStream), cs, 1e-11 * cs);
  EXPECT_EQ(cuda::sum_squares_host(dg.data(), 0, kStream), 0.0);
  EXPECT_TRUE(cuda::all_finite_host(dg.data(), n, kStream));
  // grad_stats_acc adds [sum of squares | non-finite count]; the count (read only where the sum
  // is not finite) is 0 over finite values and counts the others.
  DBuf<double> acc(std::vector<double>{1.0, 5.0});
  cuda::grad_stats_acc(dg.data(), n, acc.data(), kStream);
  std::vector<double> a = acc.download();
  EXPECT_NEAR(a[0], 1.0 + cs, 1e-11 * cs);
  EXPECT_EQ(a[1], 5.0);
  g[n / 2] = INFINITY;
  g[7] = NAN;
  dg.upload(g);
  EXPECT_FALSE(cuda::all_finite_host(dg.data(), n, kStream));
  EXPECT_FALSE(k::all_finite<float>(g.data(), n));
  acc.upload({0.0, 0.0});
  cuda::grad_stats_acc(dg.data(), n, acc.data(), kStream);
  a = acc.download();
  EXPECT_FALSE(std::isfinite(a[0]));
  EXPECT_EQ(a[1], 2.0) << "the non-finite values counted";
}

// ---- the norm family ----------------------------------------------------------------------

struct NormCase {
  int rows, d;
  int masking;  // 0 none, 1 random rows, 2 every row masked
};
std::vector<uint8_t> case_mask(const NormCase& c, uint64_t seed) {
  if (c.masking == 0) return std::vector<uint8_t>(c.rows, 1);
  if (c.masking == 1) return random_mask(c.rows, seed);
  return std::vector<uint8_t>(c.rows, 0);
}
// What a backward with add_to_dx must leave: base + the same kernel's dx, to the bit (dx is 0 on
// masked rows, where base stays).
std::vector<float> added_to(std::vector<float> base, const std::vector<float>& dx) {
  for (size_t i = 0; i < base.size(); ++i) base[i] += dx[i];
  return base;
}
// The bf16 copy a backward writes beside dx (dx16): dx's rounding, value by value.
std::vector<uint16_t> bf16_of(const std::vector<float>& dx) {
  std::vector<uint16_t> out(dx.size());
  for (size_t i = 0; i < dx.size(); ++i) out[i] = bf16_bits(dx[i]);
  return out;
}

const NormCase kNormCases[] = {{1, 8, 0},   {37, 48, 1}, {300, 64, 1}, {600, 40, 0},
                               {64, 96, 2}, {0, 16, 0},  {513, 33, 1}};
// The row kernels also over groups a lane holds 2 to 32 values of, groups of more than 1024 (read
// again, not held), and more rows than the backward has warps (each warp sums several rows).
const NormCase kRowCases[] = {{1, 8, 0},    {37, 48, 1},   {300, 64, 1}, {600, 40, 0},
                              {64, 96, 2},  {0, 16, 0},    {513, 33, 1}, {37, 768, 1},
                              {20, 1024, 0}, {9, 1100, 1}, {1030, 160, 1}, {2000, 128, 1}};

// f(case) for every norm case.
template <class F>
void for_column_cases(F&& f) {
  for (const NormCase& c : kNormCases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d) + " masking " +
                 std::to_string(c.masking));
    f(c);
  }
}
// f(case, G) for every row case and group count 1, 2, 4 that divides d.
template <class F>
void for_row_cases(F&& f) {
  for (const NormCase& c : kRowCases)
    for (int G : {1, 2, 4}) {
      if (c.d % G) continue;
      SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d) + " G " +
                   std::to_string(G));
      f(c, G);
    }
}

TEST(CudaNormKernels, ColumnStatsAndDot) {
  PN_REQUIRE_GPU();
  for_column_cases([](const NormCase& c) {
    const size_t n = size_t(c.rows) * c.d;
    const auto x = randf(n, 20, 2.f, 3.f), b = randf(n, 21);
    const auto mask = case_mask(c, 22);
    std::vector<double> shift(c.d);
    for (int j = 0; j < c.d; ++j) shift[j] = 3.0 + 0.01 * j;
    DBuf<float> dx(x), db(b);
    DBuf<uint8_t> dmask(mask);
    DBuf<double> dshift(shift), dcount(1), dsum(c.d), dsumsq(c.d);
    const double* shifts[] = {nullptr, shift.data()};
    for (const double* sh : shifts) {
      double count = -1;
      std::vector<double> sum(c.d), sumsq(c.d);
      k::column_stats<float>(x.data(), mask.data(), c.rows, c.d, sh, &count, sum.data(),
                             sumsq.data());
      cuda::column_stats(dx.data(), dmask.data(), c.rows, c.d, sh ? dshift.data() : nullptr,
                         dcount.data(), dsum.data(), dsumsq.data(), kStream);
      EXPECT_EQ(dcount.download()[0], count);
      expect_close("column_stats sum", dsum.download(), sum, 1e-12, 1e-9);
      expect_close("column_stats sumsq", dsumsq.download(), sumsq, 1e-12, 1e-9);

      std::vector<double> sa(c.d), sab(c.d);
      k::column_dot<float>(b.data(), x.data(), mask.data(), c.rows, c.d, sh, sa.data(), sab.data());
      cuda::column_dot(db.data(), dx.data(), dmask.data(), c.rows, c.d,
                       sh ? dshift.data() : nullptr, dsum.data(), dsumsq.data(), kStream);
      expect_close("column_dot sum_a", dsum.download(), sa, 1e-12, 1e-9);
      expect_close("column_dot sum_ab", dsumsq.download(), sab, 1e-12, 1e-9);
    }
    // No mask at all (every row live).
    double count = -1;
    std::vector<double> sumsq(c.d);
    k::column_stats<float>(x.data(), nullptr, c.rows, c.d, nullptr, &count, nullptr, sumsq.data());
    cuda::column_stats(dx.data(), nullptr, c.rows, c.d, nullptr, dcount.data(), nullptr,
                       dsumsq.data(), kStream);
    EXPECT_EQ(dcount.download()[0], count);
    expect_close("column_stats sumsq (no mask)", dsumsq.download(), sumsq, 1e-12, 1e-9);
  });
}

TEST(CudaNormKernels, ColumnAffineAndBackward) {
  PN_REQUIRE_GPU();
  for_column_cases([](const NormCase& c) {
    const size_t n = size_t(c.rows) * c.d;
    const auto x = randf(n, 23, 2.f, 1.f), dy = randf(n, 24);
    const auto gamma = randf(c.d, 25, 0.3f, 1.f), beta = randf(c.d, 26, 0.3f);
    const auto mask = case_mask(c, 27);
    std::vector<double> shift(c.d), scale(c.d), a(c.d), b(c.d);
    for (int j = 0; j < c.d; ++j) {
      shift[j] = 1.0 + 1e-3 * j;
      scale[j] = 0.5 + 1e-2 * j;
      a[j] = 0.1 * std::sin(j);
      b[j] = 0.2 * std::cos(j);
    }
    DBuf<float> dx(x), ddy(dy), dgamma(gamma), dbeta(beta), dout(std::vector<float>(n, -7.f));
    DBuf<uint8_t> dmask(mask);
    DBuf<double> dshift(shift), dscale(scale), da(a), dbb(b);
    for (int variant = 0; variant < 2; ++variant) {  // batch (shift, a, beta) / PN (none)
      const bool full = variant == 0;
      std::vector<float> y(n);
      k::column_affine<float>(x.data(), c.rows, c.d, full ? shift.data() : nullptr, scale.data(),
                              gamma.data(), full ? beta.data() : nullptr, y.data(), nullptr,
                              nullptr);
      cuda::column_affine(dx.data(), c.rows, c.d, full ? dshift.data() : nullptr, dscale.data(),
                          dgamma.data(), full ? dbeta.data() : nullptr, dout.data(), nullptr,
                          nullptr, kStream);
      expect_close("column_affine", dout.download(), y, 1e-6, 1e-6);

      std::vector<float> gx(n);
      k::column_norm_backward<float>(x.data(), dy.data(), mask.data(), c.rows, c.d,
                                     full ? shift.data() : nullptr, scale.data(), gamma.data(),
                                     full ? a.data() : nullptr, b.data(), gx.data(), false,
                                     nullptr);
      cuda::column_norm_backward(dx.data(), ddy.data(), dmask.data(), c.rows, c.d,
                                 full ? dshift.data() : nullptr, dscale.data(), dgamma.data(),
                                 full ? da.data() : nullptr, dbb.data(), dout.data(), false,
                                 nullptr, kStream);
      expect_close("column_norm_backward", dout.download(), gx, 1e-6, 1e-6);
      const auto base = randf(n, 28, 3.f);
      DBuf<float> dsum(base);
      cuda::column_norm_backward(dx.data(), ddy.data(), dmask.data(), c.rows, c.d,
                                 full ? dshift.data() : nullptr, dscale.data(), dgamma.data(),
                                 full ? da.data() : nullptr, dbb.data(), dsum.data(), true,
                                 nullptr, kStream);
      EXPECT_EQ(dsum.download(), added_to(base, dout.download()));
    }
  });
}

// The parameter gradients' absolute tolerance: the CPU sums chunks of 256 rows in float, whose
// rounding grows with the chunks (the GPU sums a few rows per warp in float, the rest in double).
double grad_atol(int rows) { return 1e-5 * std::max(1.0, rows / 256.0); }

TEST(CudaNormKernels, RowGroupRms) {
  PN_REQUIRE_GPU();
  for_row_cases([&](const NormCase& c, int G) {
    const size_t n = size_t(c.rows) * c.d;
    const auto x = randf(n, 30, 1.5f), dy = randf(n, 31), gamma = randf(c.d, 32, 0.3f, 1.f);
    const auto mask = case_mask(c, 33);
    DBuf<float> dx(x), ddy(dy), dgm(gamma), dy_out(n), drinv(size_t(c.rows) * G), ddx(n);
    DBuf<uint8_t> dmask(mask);
    for (bool with_gamma : {true, false}) {  // gamma null: pre-scaling
      const float* gm = with_gamma ? gamma.data() : nullptr;
      std::vector<float> y(n), rinv(size_t(c.rows) * G), gx(n);
      std::vector<float> dgamma = randf(c.d, 34);
      DBuf<float> ddgamma(dgamma);
      k::rowgroup_rms_forward<float>(x.data(), c.rows, c.d, G, 1e-5f, gm, y.data(), nullptr,
                                     rinv.data());
      k::rowgroup_rms_backward<float>(x.data(), dy.data(), rinv.data(), gm, mask.data(), c.rows,
                                      c.d, G, gx.data(), with_gamma ? dgamma.data() : nullptr,
                                      false, nullptr);
      cuda::rowgroup_rms_forward(dx.data(), c.rows, c.d, G, 1e-5f,
                                 with_gamma ? dgm.data() : nullptr, dy_out.data(), nullptr,
                                 drinv.data(), kStream);
      cuda::rowgroup_rms_backward(dx.data(), ddy.data(), drinv.data(),
                                  with_gamma ? dgm.data() : nullptr, dmask.data(), c.rows, c.d, G,
                                  ddx.data(), with_gamma ? ddgamma.data() : nullptr, false, nullptr,
                                  kStream);
      expect_close("rms rinv", drinv.download(), rinv, 1e-6, 0);
      expect_close("rms y", dy_out.download(), y, 1e-6, 1e-6);
      expect_close("rms dx", ddx.download(), gx, 1e-5, 1e-6);
      expect_close("rms dgamma", ddgamma.download(), dgamma, 1e-5, grad_atol(c.rows));
      const auto base = randf(n, 35, 3.f);
      DBuf<float> dsum(base);
      DBuf<uint16_t> dsum16(n);
      cuda::rowgroup_rms_backward(dx.data(), ddy.data(), drinv.data(),
                                  with_gamma ? dgm.data() : nullptr, dmask.data(), c.rows, c.d, G,
                                  dsum.data(), with_gamma ? ddgamma.data() : nullptr, true,
                                  dsum16.data(), kStream);
      EXPECT_EQ(dsum.download(), added_to(base, ddx.download()));
      EXPECT_EQ(dsum16.download(), bf16_of(dsum.download()));
    }
  });
}

TEST(CudaNormKernels, RowGroupNormAndLayerNorm) {
  PN_REQUIRE_GPU();
  for_row_cases([&](const NormCase& c, int G) {
    const size_t n = size_t(c.rows) * c.d;
    const auto x = randf(n, 40, 2.f, 5.f), dy = randf(n, 41);
    const auto gamma = randf(c.d, 42, 0.3f, 1.f), beta = randf(c.d, 43, 0.3f);
    const auto mask = case_mask(c, 44);
    std::vector<float> y(n), mean(size_t(c.rows) * G), rstd(size_t(c.rows) * G), gx(n);
    std::vector<float> dgamma = randf(c.d, 45), dbeta = randf(c.d, 46);
    DBuf<float> dx(x), ddy(dy), dgm(gamma), dbt(beta), dyo(n), dmean(mean.size()),
        drstd(rstd.size()), ddx(n), ddgamma(dgamma), ddbeta(dbeta);
    DBuf<uint8_t> dmask(mask);
    if (G == 1) {
      k::layernorm_forward<float>(x.data(), c.rows, c.d, gamma.data(), beta.data(), 1e-5f, y.data(),
                                  nullptr, mean.data(), rstd.data());
      k::layernorm_backward<float>(x.data(), dy.data(), mean.data(), rstd.data(), gamma.data(),
                                   mask.data(), c.rows, c.d, gx.data(), dgamma.data(), dbeta.data(),
                                   false, nullptr);
      cuda::layernorm_forward(dx.data(), c.rows, c.d, dgm.data(), dbt.data(), 1e-5f, dyo.data(),
                              nullptr, dmean.data(), drstd.data(), kStream);
      cuda::layernorm_backward(dx.data(), ddy.data(), dmean.data(), drstd.data(), dgm.data(),
                               dmask.data(), c.rows, c.d, ddx.data(), ddgamma.data(), ddbeta.data(),
                               false, nullptr, kStream);
    } else {
      k::rowgroup_norm_forward<float>(x.data(), c.rows, c.d, G, 1e-5f, gamma.data(), beta.data(),
                                      y.data(), nullptr, mean.data(), rstd.data());
      k::rowgroup_norm_backward<float>(x.data(), dy.data(), mean.data(), rstd.data(), gamma.data(),
                                       mask.data(), c.rows, c.d, G, gx.data(), dgamma.data(),
                                       dbeta.data(), false, nullptr);
      cuda::rowgroup_norm_forward(dx.data(), c.rows, c.d, G, 1e-5f, dgm.data(), dbt.data(),
                                  dyo.data(), nullptr, dmean.data(), drstd.data(), kStream);
      cuda::rowgroup_norm_backward(dx.data(), ddy.data(), dmean.data(), drstd.data(), dgm.data(),
                                   dmask.data(), c.rows, c.d, G, ddx.data(), ddgamma.data(),
                                   ddbeta.data(), false, nullptr, kStream);
    }
    expect_close("norm mean", dmean.download(), mean, 1e-6, 1e-6);
    expect_close("norm rstd", drstd.download(), rstd, 1e-5, 0);
    expect_close("norm y", dyo.download(), y, 1e-5, 1e-5);
    expect_close("norm dx", ddx.download(), gx, 1e-4, 1e-5);
    expect_close("norm dgamma", ddgamma.download(), dgamma, 1e-5, grad_atol(c.rows));
    expect_close("norm dbeta", ddbeta.download(), dbeta, 1e-5, grad_atol(c.rows));
    // dx += in place (the residual stream's gradient), parameter gradients on the way
    const auto base = randf(n, 47, 3.f);
    DBuf<float> dsum(base);
    DBuf<uint16_t> dsum16(n);  // and its bf16 copy, as training writes it
    cuda::rowgroup_norm_backward(dx.data(), ddy.data(), dmean.data(), drstd.data(), dgm.data(),
                                 dmask.data(), c.rows, c.d, G, dsum.data(), ddgamma.data(),
                                 ddbeta.data(), true, dsum16.data(), kStream);
    EXPECT_EQ(dsum.download(), added_to(base, ddx.download()));
    EXPECT_EQ(dsum16.download(), bf16_of(dsum.download()));
  });
}

// The residual add made by LayerNorm's kernel (residual_layernorm_forward) is dropout_add then
// layernorm_forward to the bit: the sum, the output (fp32 or its bf16 rounding) and the
// statistics, with and without dropout, over groups held in registers and not; and the sum is
// the CPU's.
TEST(CudaNormKernels, ResidualLayerNormIsTheAddThenTheNorm) {
  PN_REQUIRE_GPU();
  for (const NormCase& c : kRowCases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d));
    const size_t n = size_t(c.rows) * c.d;
    const auto a = randf(n, 60, 2.f, 1.f), b = randf(n, 61), gamma = randf(c.d, 62, 0.3f, 1.f),
               beta = randf(c.d, 63, 0.3f);
    const auto keep = random_mask(int(n), 64, 0.3);  // a byte per element: 0 dropped
    DBuf<float> da(a), db(b), dgm(gamma), dbt(beta), sum(n), ref_sum(n), y(n), ref_y(n),
        mean(c.rows), ref_mean(c.rows), rstd(c.rows), ref_rstd(c.rows);
    DBuf<uint16_t> y16(n), ref_y16(n);
    DBuf<uint8_t> dkeep(keep);
    for (bool drop : {false, true})
      for (bool bf16 : {false, true}) {
        SCOPED_TRACE(std::string(drop ? "dropout" : "no dropout") + (bf16 ? ", bf16" : ""));
        const uint8_t* kp = drop ? dkeep.data() : nullptr;
        const float p = 0.3f;
        cuda::dropout_add(da.data(), db.data(), kp, p, n, ref_sum.data(), kStream);
        cuda::layernorm_forward(ref_sum.data(), c.rows, c.d, dgm.data(), dbt.data(), 1e-5f,
                                ref_y.data(), bf16 ? ref_y16.data() : nullptr, ref_mean.data(),
                                ref_rstd.data(), kStream);
        cuda::residual_layernorm_forward(da.data(), db.data(), kp, p, c.rows, c.d, dgm.data(),
                                         dbt.data(), 1e-5f, sum.data(), y.data(),
                                         bf16 ? y16.data() : nullptr, mean.data(), rstd.data(),
                                         kStream);
        EXPECT_EQ(sum.download(), ref_sum.download());
        if (bf16)
          EXPECT_EQ(y16.download(), ref_y16.download());
        else
          EXPECT_EQ(y.download(), ref_y.download());
        EXPECT_EQ(mean.download(), ref_mean.download());
        EXPECT_EQ(rstd.download(), ref_rstd.download());
        std::vector<float> cpu_sum(n), cpu_y(n), cpu_mean(c.rows), cpu_rstd(c.rows);
        k::residual_layernorm_forward<float>(a.data(), b.data(), drop ? keep.data() : nullptr, p,
                                             c.rows, c.d, gamma.data(), beta.data(), 1e-5f,
                                             cpu_sum.data(), cpu_y.data(), nullptr,
                                             cpu_mean.data(), cpu_rstd.data());
        EXPECT_EQ(sum.download(), cpu_sum);
      }
  }
}

// The inputs of the column passes' tests, on the host and the device: a, b, dy (rows x d),
// gamma, beta, a row mask, a dropout mask that drops every `drop`-th value, and per-column shift,
// scale and nu.
struct ColumnInputs {
  std::vector<float> a, b, dy, gamma, beta;
  std::vector<uint8_t> mask, keep;
  std::vector<double> shift, scale, nu;
  DBuf<float> da, db, ddy, dgm, dbt;
  DBuf<uint8_t> dmask, dkeep;
  DBuf<double> dshift, dscale, dnu;
  ColumnInputs(int rows, int d, uint64_t seed, int drop)
      : a(randf(size_t(rows) * d, seed, 1.2f, 0.4f)),
        b(randf(size_t(rows) * d, seed + 1)),
        dy(randf(size_t(rows) * d, seed + 2)),
        gamma(randf(d, seed + 3, 0.2f, 1.f)),
        beta(randf(d, seed + 4, 0.3f)),
        mask(random_mask(rows, seed + 5)),
        keep(size_t(rows) * d),
        shift(d),
        scale(d),
        nu(d) {
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = i % drop != 0;
    for (int c = 0; c < d; ++c)
      shift[c] = 0.02 * c, scale[c] = 0.7 + 0.01 * c, nu[c] = 0.1 - 3e-3 * c;
    da.upload(a), db.upload(b), ddy.upload(dy), dgm.upload(gamma), dbt.upload(beta);
    dmask.upload(mask), dkeep.upload(keep);
    dshift.upload(shift), dscale.upload(scale), dnu.upload(nu);
  }
};

// The fused passes of the batch-type norms are their parts to the bit: column_stats_affine is
// dropout_add, column_stats and column_affine (with and without the residual add, with dropout,
// in fp32 and bf16 outputs); column_backward_dot is column_dot and column_norm_backward (dx set
// and added); column_affine under a device `when` of 0 writes nothing.
TEST(CudaNormKernels, FusedPassesAreTheirParts) {
  PN_REQUIRE_GPU();
  const int rows = 600, d = 72;  // 3 row chunks, a partial column tile
  const size_t n = size_t(rows) * d;
  ColumnInputs in(rows, d, 130, 5);
  auto &da = in.da, &db = in.db, &ddy = in.ddy, &dgm = in.dgm, &dbt = in.dbt;
  auto &dmask = in.dmask, &dkeep = in.dkeep;
  auto &dshift = in.dshift, &dscale = in.dscale, &dnu = in.dnu;
  const auto& b = in.b;
  const float p = 0.2f;
  for (int form = 0; form < 3; ++form) {  // plain, residual, residual with dropout
    SCOPED_TRACE("form " + std::to_string(form));
    const float* rb = form ? db.data() : nullptr;
    const uint8_t* rk = form == 2 ? dkeep.data() : nullptr;
    DBuf<float> x1(n), x2(n), y1(n), y2(n);
    DBuf<uint16_t> h1(n), h2(n);
    DBuf<double> st1(1 + 2 * size_t(d)), st2(1 + 2 * size_t(d));
    // The fused pass.
    cuda::column_stats_affine(da.data(), rb, rk, p, x1.data(), dmask.data(), rows, d,
                              dshift.data(), st1.data(), st1.data() + 1, st1.data() + 1 + d,
                              dscale.data(), dgm.data(), dbt.data(), y1.data(), nullptr, kStream);
    cuda::column_stats_affine(da.data(), rb, rk, p, x1.data(), dmask.data(), rows, d,
                              dshift.data(), st1.data(), st1.data() + 1, st1.data() + 1 + d,
                              dscale.data(), dgm.data(), dbt.data(), nullptr, h1.data(), kStream);
    // Its parts.
    const float* x = da.data();
    if (form) {
      cuda::dropout_add(da.data(), db.data(), rk, p, n, x2.data(), kStream);
      x = x2.data();
    }
    cuda::column_stats(x, dmask.data(), rows, d, dshift.data(), st2.data(), st2.data() + 1,
                       st2.data() + 1 + d, kStream);
    cuda::column_affine(x, rows, d, dshift.data(), dscale.data(), dgm.data(), dbt.data(),
                        y2.data(), nullptr, nullptr, kStream);
    cuda::column_affine(x, rows, d, dshift.data(), dscale.data(), dgm.data(), dbt.data(), nullptr,
                        h2.data(), nullptr, kStream);
    if (form) expect_equal("x", x1.download(), x2.download());
    expect_equal("statistics", st1.download(), st2.download());
    expect_equal("y", y1.download(), y2.download());
    expect_equal("y in bf16", h1.download(), h2.download());
  }
  // column_affine under when = 0 leaves y, under when = 1 writes it.
  DBuf<double> off(std::vector<double>{0.0}), on(std::vector<double>{1.0});
  DBuf<float> y(std::vector<float>(n, 7.f));
  cuda::column_affine(da.data(), rows, d, nullptr, dscale.data(), dgm.data(), dbt.data(),
                      y.data(), nullptr, off.data(), kStream);
  expect_equal("y under when = 0", y.download(), std::vector<float>(n, 7.f));
  cuda::column_affine(da.data(), rows, d, nullptr, dscale.data(), dgm.data(), dbt.data(),
                      y.data(), nullptr, on.data(), kStream);
  EXPECT_NE(y.download()[0], 7.f) << "column_affine under when = 1 wrote nothing";
  for (int add = 0; add < 2; ++add) {
    SCOPED_TRACE(add ? "dx added" : "dx set");
    DBuf<float> dx1(b), dx2(b);
    DBuf<double> s1(2 * size_t(d)), s2(2 * size_t(d));
    cuda::column_backward_dot(da.data(), ddy.data(), dmask.data(), rows, d, dscale.data(),
                              dgm.data(), dnu.data(), dx1.data(), add, nullptr, s1.data(),
                              s1.data() + d, kStream);
    cuda::column_dot(ddy.data(), da.data(), dmask.data(), rows, d, nullptr, s2.data(),
                     s2.data() + d, kStream);
    cuda::column_norm_backward(da.data(), ddy.data(), dmask.data(), rows, d, nullptr,
                               dscale.data(), dgm.data(), nullptr, dnu.data(), dx2.data(), add,
                               nullptr, kStream);
    expect_equal("sums", s1.download(), s2.download());
    expect_equal("dx", dx1.download(), dx2.download());
  }
}

// One PN training iteration and the next one's running state, composed from the kernels as
// layers/norms/power_norm.cpp composes the CPU ones (statistics -> state on the host -> affine
// map -> backward with nu): the GPU kernels give the same psi^2, nu, y and dx.
TEST(CudaNormKernels, PowerNormIterationRunningState) {
  PN_REQUIRE_GPU();
  const int rows = 200, d = 32;
  const double eps = 1e-5, alpha_fwd = 0.9, alpha_bkw = 0.9;
  const auto mask = random_mask(rows, 50);
  const auto gamma = randf(d, 51, 0.2f, 1.f), beta = randf(d, 52, 0.2f);
  DBuf<uint8_t> dmask(mask);
  DBuf<float> dgm(gamma), dbt(beta), dy_out(size_t(rows) * d), ddx(size_t(rows) * d);
  DBuf<double> dcount(1), dsumsq(d), dinv(d), dnu(d), dsa(d), dsab(d);
  struct State {
    std::vector<double> psi2, nu;
  } cpu{std::vector<double>(d, 1.0), std::vector<double>(d, 0.0)}, gpu = cpu;
  for (int it = 0; it < 3; ++it) {
    const auto x = randf(size_t(rows) * d, 60 + it, 1.5f), dy = randf(size_t(rows) * d, 70 + it);
    DBuf<float> dx(x), ddy(dy);
    for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
      State& st = on_gpu ? gpu : cpu;
      double count;
      std::vector<double> sumsq(d), inv(d), sa(d), sab(d);
      std::vector<float> y(size_t(rows) * d), gx(size_t(rows) * d);
      if (on_gpu) {
        cuda::column_stats(dx.data(), dmask.data(), rows, d, nullptr, dcount.data(), nullptr,
                           dsumsq.data(), kStream);
        count = dcount.download()[0];
        sumsq = dsumsq.download();
      } else {
        k::column_stats<float>(x.data(), mask.data(), rows, d, nullptr, &count, nullptr,
                               sumsq.data());
      }
      for (int c = 0; c < d; ++c) {  // after warmup: s from the running psi^2 of before
        inv[c] = 1.0 / std::sqrt(st.psi2[c] + eps);
        st.psi2[c] = alpha_fwd * st.psi2[c] + (1 - alpha_fwd) * sumsq[c] / count;
      }
      if (on_gpu) {
        dinv.upload(inv);
        dnu.upload(st.nu);
        cuda::column_affine(dx.data(), rows, d, nullptr, dinv.data(), dgm.data(), dbt.data(),
                            dy_out.data(), nullptr, nullptr, kStream);
        cuda::column_norm_backward(dx.data(), ddy.data(), dmask.data(), rows, d, nullptr,
                                   dinv.data(), dgm.data(), nullptr, dnu.data(), ddx.data(), false,
                                   nullptr, kStream);
        cuda::column_dot(ddy.data(), dx.data(), dmask.data(), rows, d, nullptr, dsa.data(),
                         dsab.data(), kStream);
        sab = dsab.download();
        y = dy_out.download();
        gx = ddx.download();
      } else {
        k::column_affine<float>(x.data(), rows, d, nullptr, inv.data(), gamma.data(), beta.data(),
                                y.data(), nullptr, nullptr);
        k::column_norm_backward<float>(x.data(), dy.data(), mask.data(), rows, d, nullptr,
                                       inv.data(), gamma.data(), nullptr, st.nu.data(), gx.data(),
                                       false, nullptr);
        k::column_dot<float>(dy.data(), x.data(), mask.data(), rows, d, nullptr, sa.data(),
                             sab.data());
      }
      for (int c = 0; c < d; ++c) {
        const double Gamma = sumsq[c] * inv[c] * inv[c] / count;
        const double Lambda = double(gamma[c]) * sab[c] * inv[c] / count;
        st.nu[c] = st.nu[c] * (1 - (1 - alpha_bkw) * Gamma) + (1 - alpha_bkw) * Lambda;
      }
      static std::vector<float> y_cpu, dx_cpu;
      if (!on_gpu) {
        y_cpu = y;
        dx_cpu = gx;
      } else {
        expect_close("PN y", y, y_cpu, 1e-6, 1e-6);
        expect_close("PN dx", gx, dx_cpu, 1e-6, 1e-6);
      }
    }
    expect_close("PN running psi2", gpu.psi2, cpu.psi2, 1e-12, 1e-12);
    expect_close("PN nu", gpu.nu, cpu.nu, 1e-10, 1e-12);
  }
}

}  // namespace
}  // namespace pn::test
