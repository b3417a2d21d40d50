// The emulation's stand-in for cuDNN's fused attention (kernels/cuda/cudnn_sdpa.h): the same
// outputs computed on the CPU, written here from the definitions alone (not the project's CPU
// kernels), so that the emulated GPU path is checked against an independent attention.
//   S = q k^T / sqrt(dh) over keys j <= i; lse_i = log sum_j exp(S_ij); P = exp(S - lse);
//   o = P v;  backward with D_i = sum_c dout_ic o_ic: dP = dout v^T, dS = P (dP - D),
//   dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh), dv = P^T dout.
// Inputs are bf16 as cuDNN's; sums run in double and o, dq, dk, dv are rounded to bf16 once.
// The shapes cuDNN refuses are refused here too (sdpa_shape_refused).
#include "kernels/cuda/cudnn_sdpa.h"

#include <cmath>
#include <string>
#include <vector>

namespace pn::cuda {
namespace {

using bf16 = __nv_bfloat16;

struct View {  // head h of sequence b of a [nseq*T, ld] bf16 matrix, from column offset
  const bf16* base;
  int ld, T, dh, b, h, offset;
  double at(int i, int c) const {
    return __bfloat162float(base[(size_t(b) * T + i) * ld + offset + size_t(h) * dh + c]);
  }
};

// P (row-major T x T, zero above the diagonal) of head (b, h), and each row's log-sum-exp.
void probabilities(const View& q, const View& k, std::vector<double>& P, double* lse) {
  const int T = q.T, dh = q.dh;
  const double scale = 1.0 / std::sqrt(double(dh));
  P.assign(size_t(T) * T, 0.0);
  for (int i = 0; i < T; ++i) {
    double m = -INFINITY;
    for (int j = 0; j <= i; ++j) {
      double s = 0;
      for (int c = 0; c < dh; ++c) s += q.at(i, c) * k.at(j, c);
      P[size_t(i) * T + j] = s * scale;
      m = std::max(m, s * scale);
    }
    double l = 0;
    for (int j = 0; j <= i; ++j) l += std::exp(P[size_t(i) * T + j] - m);
    lse[i] = m + std::log(l);
    for (int j = 0; j <= i; ++j) P[size_t(i) * T + j] = std::exp(P[size_t(i) * T + j] - lse[i]);
  }
}

}  // namespace

std::string sdpa_unsupported(const SdpaShape& s) { return sdpa_shape_refused(s); }
size_t sdpa_workspace_bytes(const SdpaShape&) { return 256; }
std::string sdpa_description() { return "the emulation's attention (double sums, bf16 results)"; }
std::string cudnn_version() { return ""; }  // no cuDNN: the emulation computes its outputs

// On the stream, as the library's kernels run (emulator/runtime.cpp's queue).
void sdpa_forward(const SdpaShape& shape, const bf16* qkv, bf16* o, float* lse, void*,
                  cudaStream_t stream) {
  pn_emu::enqueue(stream, [=] {
    const SdpaShape& s = shape;
    const int T = s.seq_len, dh = s.head_dim, d = s.heads * dh;
    std::vector<double> P, row_lse(T);
    for (int b = 0; b < s.nseq; ++b)
      for (int h = 0; h < s.heads; ++h) {
        const View q{qkv, 3 * d, T, dh, b, h, 0}, k{qkv, 3 * d, T, dh, b, h, d},
            v{qkv, 3 * d, T, dh, b, h, 2 * d};
        probabilities(q, k, P, row_lse.data());
        for (int i = 0; i < T; ++i) {
          lse[(size_t(b) * s.heads + h) * T + i] = float(row_lse[i]);
          for (int c = 0; c < dh; ++c) {
            double acc = 0;
            for (int j = 0; j <= i; ++j) acc += P[size_t(i) * T + j] * v.at(j, c);
            o[(size_t(b) * T + i) * d + size_t(h) * dh + c] = __float2bfloat16(float(acc));
          }
        }
      }
  });
}

void sdpa_backward(const SdpaShape& shape, const bf16* qkv, const bf16* o, const bf16* dout,
                   const float*, bf16* dqkv, void*, cudaStream_t stream) {
  pn_emu::enqueue(stream, [=] {
    const SdpaShape& s = shape;
    const int T = s.seq_len, dh = s.head_dim, d = s.heads * dh;
    const double scale = 1.0 / std::sqrt(double(dh));
    std::vector<double> P, dS(size_t(T) * T), row_lse(T);
    for (int b = 0; b < s.nseq; ++b)
      for (int h = 0; h < s.heads; ++h) {
        const View q{qkv, 3 * d, T, dh, b, h, 0}, k{qkv, 3 * d, T, dh, b, h, d},
            v{qkv, 3 * d, T, dh, b, h, 2 * d}, ov{o, d, T, dh, b, h, 0}, g{dout, d, T, dh, b, h, 0};
        probabilities(q, k, P, row_lse.data());
        for (int i = 0; i < T; ++i) {
          double D = 0;
          for (int c = 0; c < dh; ++c) D += g.at(i, c) * ov.at(i, c);
          for (int j = 0; j <= i; ++j) {
            double dP = 0;
            for (int c = 0; c < dh; ++c) dP += g.at(i, c) * v.at(j, c);
            dS[size_t(i) * T + j] = P[size_t(i) * T + j] * (dP - D);
          }
        }
        auto put = [&](int row, int offset, int c, double x) {
          dqkv[(size_t(b) * T + row) * 3 * d + offset + size_t(h) * dh + c] =
              __float2bfloat16(float(x));
        };
        for (int i = 0; i < T; ++i)
          for (int c = 0; c < dh; ++c) {
            double dq = 0, dk = 0, dv = 0;
            for (int j = 0; j <= i; ++j) dq += dS[size_t(i) * T + j] * k.at(j, c);
            for (int r = i; r < T; ++r) {  // query rows r that see key i
              dk += dS[size_t(r) * T + i] * q.at(r, c);
              dv += P[size_t(r) * T + i] * g.at(r, c);
            }
            put(i, 0, c, dq * scale);
            put(i, d, c, dk * scale);
            put(i, 2 * d, c, dv);
          }
      }
  });
}

}  // namespace pn::cuda
