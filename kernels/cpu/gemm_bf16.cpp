// --precision bf16 at a bf16 unit's speed: oneDNN's matmul primitive on bf16 operands, on CPUs
// with AVX512_BF16 (vdpbf16ps) or AMX (tdpbf16ps). It computes what gemm_bf16_operands
// (blas.cpp) computes: the operands rounded to bf16 by float_rounding.h, their products (exact in
// fp32) summed in fp32, C and alpha, beta in fp32; only the order of the fp32 sums differs, and
// both instructions read a denormal bf16 as zero (values under 1.2e-38: none in training).
// Creating a primitive costs far more than a small GEMM, and a run repeats a few dozen shapes
// every micro-step, so each shape's primitive is made once and kept.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/float_rounding.h"

#ifdef PN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace pn::k::cpu {

const std::string kEmulated =
    "operands rounded to bf16, products summed in fp32 instructions: bf16's numerics at fp32's "
    "speed";

#ifdef PN_HAVE_DNNL
namespace {

using dt = dnnl::memory::data_type;

// A bf16 is the upper half of an fp32 word; round_to_bf16 has already rounded the lower half
// away (nearest even), so the bits agree with the emulated path. A NaN whose payload sat in the
// lower half keeps a quiet bit instead of turning into Inf.
inline uint16_t bf16_bits(float f) {
  const float r = round_to_bf16(f);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
  return uint16_t(u >> 16);
}

// The rows x cols row-major block at p (leading dimension ld), as bf16, packed in out.
void pack_bf16(const float* p, int rows, int cols, int ld, std::vector<uint16_t>* out) {
  out->resize(size_t(rows) * cols);
  uint16_t* o = out->data();
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) o[size_t(r) * cols + c] = bf16_bits(p[size_t(r) * ld + c]);
}

// The rows x cols block at from (leading dimension from_ld) into to (to_ld); padding untouched.
void copy_rows(const float* from, int from_ld, float* to, int to_ld, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r)
    std::memcpy(to + size_t(r) * to_ld, from + size_t(r) * from_ld, sizeof(float) * cols);
}

// op(X) as rows x cols over a packed block: transposed, its elements lie a column apart.
dnnl::memory::desc operand(int rows, int cols, int ld, bool trans, dt type) {
  const dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

// Set by allow_any_bf16_matmul(): oneDNN's matmul on any CPU, its reference loop included. The
// tests set it where the CPU lacks bf16 instructions, so that the call into oneDNN (packing,
// strides, alpha, beta, C's staging) is checked on every machine, not only on those with them.
// An atomic flag, not the environment: bf16_matmul_available() is asked on every GEMM call.
std::atomic<bool> any_impl{false};
bool any_implementation() { return any_impl.load(std::memory_order_relaxed); }
dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// What a GEMM call needs to find its primitive. alpha and beta are part of it: oneDNN 2.6 takes
// the sum post-op's scale (beta) only when the primitive is made. The operands are packed and C
// staged densely (below), so no leading dimension is part of it.
struct MatmulKey {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
  bool operator<(const MatmulKey& o) const {
    return std::tie(ta, tb, M, N, K, alpha, beta) <
           std::tie(o.ta, o.tb, o.M, o.N, o.K, o.alpha, o.beta);
  }
};

// A made primitive, or none where oneDNN has no implementation for the shape or only its
// reference one (a scalar loop, far slower than the emulated path).
struct Matmul {
  bool usable = false;
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
  size_t scratch_bytes = 0;
  std::string impl;
};

// C = alpha op(A) op(B) + beta C as oneDNN states it: output scale alpha, a sum post-op of scale
// beta (left out at beta 0, so that C is written without being read, as BLAS does). The user
// scratchpad keeps the primitive free of per-call state, so threads may share it.
Matmul make_matmul(const MatmulKey& k) {
  Matmul m;
  m.a = operand(k.M, k.K, k.ta ? k.M : k.K, k.ta, dt::bf16);
  m.b = operand(k.K, k.N, k.tb ? k.K : k.N, k.tb, dt::bf16);
  m.c = operand(k.M, k.N, k.N, false, dt::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(k.beta);
    attr.set_post_ops(sum);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m.a, m.b, m.c), attr, engine());
    m.impl = pd.impl_info_str();
    if (m.impl.rfind("ref", 0) == 0 && !any_implementation()) return m;
    m.scratch_bytes = pd.scratchpad_desc().get_size();
    m.prim = dnnl::matmul(pd);
    m.usable = true;
  } catch (const dnnl::error&) {
    // unimplemented here: the shape takes the emulated path
  }
  return m;
}

const Matmul& matmul_for(const MatmulKey& key) {
  static std::mutex mu;
  static std::map<MatmulKey, Matmul> made;  // map: references stay valid as it grows
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find(key);
  if (it == made.end()) it = made.emplace(key, make_matmul(key)).first;
  return it->second;
}

// The first bf16 matmul made answers for all: the CPU offers the instructions and oneDNN an
// implementation other than its reference loop. PN_CPU_WITHOUT=avx512_bf16 shows the emulated
// path on any CPU.
const Matmul* probe() {
  static const Matmul* found = [] {
    if (!cpu_has("avx512_bf16")) return static_cast<const Matmul*>(nullptr);
    const Matmul& m = matmul_for({false, true, 64, 64, 64, 1.0f, 1.0f});
    return m.usable ? &m : nullptr;
  }();
  if (found || !any_implementation()) return found;
  static const Matmul* any = [] {
    const Matmul& m = matmul_for({false, true, 64, 64, 64, 1.0f, 1.0f});
    return m.usable ? &m : nullptr;
  }();
  return any;
}

}  // namespace

bool bf16_matmul_available() { return probe() != nullptr; }

void allow_any_bf16_matmul() { any_impl = true; }

std::string bf16_matmul_description() {
  if (!cpu_has("avx512_bf16") && !(any_implementation() && probe()))
    return kEmulated + "; no avx512_bf16 flag for " + cpu_model_name() +
           (std::getenv("PN_CPU_WITHOUT") ? ", or PN_CPU_WITHOUT masks it" : "");
  if (!probe())
    return kEmulated + "; oneDNN made no bf16 matmul on " + cpu_model_name();
  const dnnl_version_t* v = dnnl_version();
  return "operands rounded to bf16, products summed in fp32 by oneDNN " +
         std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + "'s bf16 matmul, " + probe()->impl;
}

void gemm_bf16_matmul(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  // oneDNN runs its AMX kernels only for a dense C; a padded one (the logits, whose rows are
  // padded to 8 words) would take its slower vdpbf16ps kernels, so C is staged: computed dense,
  // then copied into its rows.
  const bool staged = ldc != N;
  const Matmul* m = K == 0 ? nullptr : &matmul_for({ta, tb, M, N, K, alpha, beta});
  if (!m || !m->usable)
    return gemm_bf16_operands(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  // Per thread: the attention kernels call GEMMs from inside their own parallel loops.
  thread_local std::vector<uint16_t> a, b;
  thread_local std::vector<float> dense_c;
  thread_local std::vector<uint8_t> scratch;
  thread_local dnnl::stream stream(engine());
  pack_bf16(A, ta ? K : M, ta ? M : K, lda, &a);
  pack_bf16(B, tb ? N : K, tb ? K : N, ldb, &b);
  float* c = C;
  if (staged) {
    dense_c.resize(size_t(M) * N);
    c = dense_c.data();
    if (beta != 0.0f) copy_rows(C, ldc, c, N, M, N);
  }
  dnnl::engine& e = engine();
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl::memory(m->a, e, a.data())},
                                                {DNNL_ARG_WEIGHTS, dnnl::memory(m->b, e, b.data())},
                                                {DNNL_ARG_DST, dnnl::memory(m->c, e, c)}};
  if (m->scratch_bytes > 0) {
    scratch.resize(std::max(scratch.size(), m->scratch_bytes));
    const dnnl::memory::desc bytes({dnnl::memory::dim(m->scratch_bytes)}, dt::u8, {1});
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(bytes, e, scratch.data()));
  }
  m->prim.execute(stream, args);
  stream.wait();
  if (staged) copy_rows(c, N, C, ldc, M, N);
}

#else  // built without oneDNN: bf16 is always the emulated path

bool bf16_matmul_available() { return false; }

void allow_any_bf16_matmul() {}

std::string bf16_matmul_description() {
  return kEmulated + "; built without oneDNN (Debian's libdnnl-dev)";
}

void gemm_bf16_matmul(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16_operands(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#endif

}  // namespace pn::k::cpu
