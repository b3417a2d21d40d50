// The dispatch point of every operation of kernels/ops.inc (see kernels.h): by the device of the
// current context, run the CPU kernel here or call the CUDA twin on the context's stream (float,
// and double where the list says stream_double; otherwise double is the CPU's, for the gradient
// checks). Every operation's dispatch is expanded from its entry in the list, except
// those marked cublas_by_hand or composite there, which are written below.
#include <array>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/buffer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "kernels/ops_expand.h"

#ifdef PN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
// The CUDA call of an operation, given the stream s (a generic lambda: instantiated only where
// the call is taken, so the double instantiations need no CUDA twin).
#define PN_CUDA(...) [&](auto s) { __VA_ARGS__; }
#else
#define PN_CUDA(...) [](auto) {}
#endif

namespace pn::k {
namespace {

[[noreturn]] void unsupported(const char* what) {
  throw std::logic_error(std::string(what) + " on the " + device_name(current_device()) +
                         " device: only float runs there (double is for the CPU's gradient "
                         "checks)");
}

#ifdef PN_HAVE_CUDA
cudaStream_t stream() { return static_cast<cudaStream_t>(current_context().stream); }
// Takes the lambda's stream so that a call through it stays a dependent (lazily compiled) one.
cuda::Blas& blas(cudaStream_t) { return *static_cast<cuda::Blas*>(current_context().blas); }
#endif

// cpu_fn(args...) on the CPU, or cuda_fn(stream) where the operation has
// a CUDA twin for these types (on_cuda).
template <bool on_cuda, class CpuFn, class CudaFn, class... A>
void run(const char* name, CpuFn cpu_fn, CudaFn cuda_fn, A... args) {
  switch (current_device()) {
    case Device::CPU:
      cpu_fn(args...);
      return;
    case Device::CUDA:
#ifdef PN_HAVE_CUDA
      if constexpr (on_cuda) {
        cuda_fn(stream());
        return;
      }
#endif
      unsupported(name);
  }
}

// A host-visible result of a device-resident sum (kernels/buffer.h's sums_to_host).
template <size_t N, class F>
std::array<double, N> fetch_sums(F accumulate) {
  Buf<double> scratch;
  return sums_to_host<N>(scratch, accumulate);
}

}  // namespace

// ---- the dispatch expanded from kernels/ops.inc ----------------------------------------------
// Per entry: the CPU function, whether its CUDA twin takes these types, and the call of the twin.
#define PN_DISPATCH_CPU_float_double(name) cpu::name<T>
#define PN_DISPATCH_CPU_fixed(name) cpu::name
#define PN_DISPATCH_ON_CUDA_fixed(cuda) true
#define PN_DISPATCH_ON_CUDA_float_double(cuda) PN_OPS_CAT(PN_DISPATCH_ON_CUDA_T_, cuda)
#define PN_DISPATCH_ON_CUDA_T_stream std::is_same_v<T, float>
#define PN_DISPATCH_ON_CUDA_T_stream_double true
#define PN_DISPATCH_ON_CUDA_T_cublas std::is_same_v<T, float>
#define PN_DISPATCH_ON_CUDA_T_cublas_by_hand std::is_same_v<T, float>
#define PN_DISPATCH_CUDA_stream(name, args) cuda::name(PN_OPS_UNPAREN args, s)
#define PN_DISPATCH_CUDA_stream_double PN_DISPATCH_CUDA_stream
#define PN_DISPATCH_CUDA_cublas(name, args) cuda::name(blas(s), PN_OPS_UNPAREN args)
#define PN_DISPATCH_CUDA_cublas_by_hand PN_DISPATCH_CUDA_cublas
#define PN_DISPATCH_FUNCTION(name, ret, params, args, types, cuda)                            \
  PN_OPS_CAT(PN_OPS_TEMPLATE_, types)                                                         \
  ret name params {                                                                           \
    return run<PN_OPS_CAT(PN_DISPATCH_ON_CUDA_, types)(cuda)>(                                \
        #name, PN_OPS_CAT(PN_DISPATCH_CPU_, types)(name),                                     \
        PN_CUDA(PN_OPS_CAT(PN_DISPATCH_CUDA_, cuda)(name, args)), PN_OPS_UNPAREN args);       \
  }
// stream, stream_double, cublas: pn::k::name itself; cublas_by_hand: generic::name, which the
// hand-written pn::k::name below calls where its own path does not apply; composite: nothing.
#define PN_DISPATCH_stream PN_DISPATCH_FUNCTION
#define PN_DISPATCH_stream_double PN_DISPATCH_FUNCTION
#define PN_DISPATCH_cublas PN_DISPATCH_FUNCTION
#define PN_DISPATCH_cublas_by_hand(...) \
  namespace generic {                   \
  PN_DISPATCH_FUNCTION(__VA_ARGS__)     \
  }
#define PN_DISPATCH_composite(...)
#define PN_OP(name, ret, params, args, types, cuda, file) \
  PN_OPS_CAT(PN_DISPATCH_, cuda)(name, ret, params, args, types, cuda)
#include "kernels/ops.inc"
#undef PN_OP

// ---- BLAS (cublas_by_hand) ----------------------------------------------------------------------
template <class T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  // bf16 off a GPU: the context's precision picks the CPU kernel when the call is made; a GPU's
  // cuBLAS handle carries it instead. The
  // CPU's bf16 instructions where it has them (oneDNN), else bf16's numerics on fp32 sgemm.
  if constexpr (std::is_same_v<T, float>) {
    if (current_context().gemm_math == GemmMath::bf16 && current_device() != Device::CUDA)
      return run<false>("gemm",
                        cpu::bf16_matmul_available() ? cpu::gemm_bf16_matmul
                                                     : cpu::gemm_bf16_operands,
                        PN_CUDA(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  generic::gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#ifdef PN_HAVE_CUDA
namespace {
// "pntrain: <what>: <line()>" on stderr the first time a process reaches it: which library ran
// an operation, for a GPU check to read (the line is made only that once; this runs every call).
template <class Line>
void say_once(std::once_flag& flag, const char* what, const Line& line) {
  std::call_once(flag, [&] {
    std::fprintf(stderr, "pntrain: %s: %s\n", what, std::string(line()).c_str());
  });
}
std::once_flag lt_forward_said, lt_forward16_said, lt_backward_said, lt_relu_backward_said,
    lt_dx16_said;
}  // namespace
#endif

template <class T>
bool gemm_inputs_in_bf16() {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>) {
    const Context& c = current_context();
    return c.device == Device::CUDA && c.gemm_math == GemmMath::bf16 && c.gemm_inputs_bf16;
  }
#endif
  return false;
}
template bool gemm_inputs_in_bf16<float>();
template bool gemm_inputs_in_bf16<double>();

template <class T>
bool gemm_outputs_in_bf16() {
  return gemm_inputs_in_bf16<T>() && current_context().gemm_bf16_outputs;
}
template bool gemm_outputs_in_bf16<float>();
template bool gemm_outputs_in_bf16<double>();

// A GEMM whose input may be kept in bf16 (A16 or B16 not null, which only gemm_inputs_in_bf16
// allows): cuBLAS on the kept bits; else gemm.
template <class T>
void gemm_kept(bool ta, bool tb, int M, int N, int K, const T* A, const uint16_t* A16, int lda,
               const T* B, const uint16_t* B16, int ldb, T beta, T* C, int ldc) {
  if (!A16 && !B16) return gemm<T>(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (current_device() == Device::CUDA)
      return cuda::gemm_bf16_inputs(blas(stream()), ta, tb, M, N, K, 1.f, A, A16, lda, B, B16,
                                    ldb, beta, C, ldc);
#endif
  throw std::logic_error("a GEMM input kept in bf16 where GEMMs do not read bf16 "
                         "(only where gemm_inputs_in_bf16())");
}

template <class T>
void linear_forward(const T* x, const uint16_t* x16, int rows, int in, int out, const T* W,
                    const T* bias, bool relu, T* y, uint16_t* y16) {
  if (y16 && !gemm_inputs_in_bf16<T>())
    throw std::logic_error("linear_forward: a bf16 output where GEMMs read no bf16");
  if (!y && !y16) throw std::logic_error("linear_forward: no output");
#ifdef PN_HAVE_CUDA
  // A GPU: the bias and the ReLU in cuBLASLt's epilogue where it runs the shape, and the
  // output's bf16 rounding written by it too where that is all that is kept.
  if constexpr (std::is_same_v<T, float>)
    if (current_device() == Device::CUDA && (bias || relu || y16)) {
      cuda::Blas& b = blas(stream());
      const bool ran16 = y16 && current_context().gemm_bf16_outputs &&
                         cuda::linear_forward_epilogue(b, x, x16, rows, in, out, W, bias, relu,
                                                       nullptr, y16);
      if (!ran16 && !y) y = cuda::linear_output_scratch(size_t(rows) * out, stream());
      const bool ran = ran16 || ((bias || relu) && cuda::linear_forward_epilogue(
                                                       b, x, x16, rows, in, out, W, bias, relu,
                                                       y, nullptr));
      say_once(y16 ? lt_forward16_said : lt_forward_said,
               y16 ? "a Linear's bf16 output" : "a Linear's bias and ReLU", [&] {
                 if (ran16 || (ran && !y16)) return "in cuBLASLt's epilogue";
                 return ran ? "a rounding pass after cuBLASLt's epilogue (bias, ReLU)"
                            : "passes after the GEMM (no cuBLASLt epilogue for the shape)";
               });
      if (ran16) return;
      if (ran) {
        if (y16) round_bf16(y, size_t(rows) * out, y16);
        return;
      }
    }
#endif
  gemm_kept<T>(false, true, rows, out, in, x, x16, in, W, nullptr, in, T(0), y, out);
  if (relu && bias)
    bias_relu_forward<T>(y, bias, rows, out);
  else if (relu)
    relu_forward<T>(y, size_t(rows) * out, y);
  else if (bias)
    add_bias<T>(y, bias, rows, out);
  if constexpr (std::is_same_v<T, float>)
    if (y16) round_bf16(y, size_t(rows) * out, y16);
}

namespace {
// A Linear's input gradient as its bf16 rounding alone, dx16 = bf16(dy W) (dy16: dy's kept
// rounding where not null), through a ReLU where relu (dx16 then holds that ReLU's output on
// entry, whose sign is the mask): on a GPU the GEMM writes it in bf16 (cuBLASLt) where it runs
// the shape, into scratch that one pass masks over dx16 where relu; else the GEMM writes fp32
// scratch and one pass rounds it (and masks it). Only where gemm_inputs_in_bf16<float>().
void input_grad_bf16(const float* dy, const uint16_t* dy16, int rows, int in, int out,
                     const float* W, bool relu, uint16_t* dx16) {
#ifdef PN_HAVE_CUDA
  const size_t n = size_t(rows) * in;
  uint16_t* g16 = relu ? cuda::relu_grad_scratch16(n, stream()) : dx16;
  const bool ran = current_context().gemm_bf16_outputs &&
                   cuda::linear_input_grad_bf16(blas(stream()), dy, dy16, rows, in, out, W, g16);
  say_once(relu ? lt_relu_backward_said : lt_dx16_said,
           relu ? "a ReLU's backward" : "a Linear's bf16 input gradient", [&] {
             if (!ran) return "a rounding pass after the GEMM";
             return relu ? "one bf16 pass after the GEMM, which writes bf16 (cuBLASLt)"
                         : "written by its GEMM (cuBLASLt)";
           });
  if (ran) {
    if (relu) relu_backward_bf16(dx16, g16, n);
    return;
  }
  float* dx = cuda::linear_output_scratch(n, stream());
  gemm_kept<float>(false, false, rows, in, out, dy, dy16, out, W, nullptr, in, 0.f, dx, in);
  if (relu)
    relu_backward_round_bf16(dx16, dx, n);
  else
    round_bf16(dx, n, dx16);
#else
  (void)dy, (void)dy16, (void)rows, (void)in, (void)out, (void)W, (void)relu, (void)dx16;
  throw std::logic_error("a bf16 input gradient where GEMMs read no bf16");
#endif
}
}  // namespace

template <class T>
void linear_backward(const T* x, const uint16_t* x16, const T* dy, const uint16_t* dy16, int rows,
                     int in, int out, const T* W, T* dx, uint16_t* dx16, T* dW, T* db) {
  if (dx16 && !gemm_inputs_in_bf16<T>())
    throw std::logic_error("linear_backward: a bf16 dx where GEMMs read no bf16");
  // bf16 GEMMs: dy rounded once for both, unless it came rounded
  const Bf16Copy rounded(dy16 ? nullptr : dy, size_t(rows) * out);
  if (dx16) {
    if constexpr (std::is_same_v<T, float>)
      input_grad_bf16(dy, dy16, rows, in, out, W, false, dx16);
  } else if (dx) {
    gemm_kept<T>(false, false, rows, in, out, dy, dy16, out, W, nullptr, in, T(0), dx, in);
  }
#ifdef PN_HAVE_CUDA
  // A GPU: the bias gradient in cuBLASLt's epilogue where it runs the shape.
  if constexpr (std::is_same_v<T, float>)
    if (current_device() == Device::CUDA && db) {
      const bool ran = cuda::linear_weight_grad_epilogue(blas(stream()), x, x16, dy, dy16, rows,
                                                         in, out, dW, db);
      say_once(lt_backward_said, "a Linear's bias gradient", [&] {
        return ran ? "in cuBLASLt's epilogue (BGRADB) of the weight gradient"
                   : "a pass after the GEMM (cuBLASLt has no BGRADB for the shape)";
      });
      if (ran) return;
    }
#endif
  gemm_kept<T>(true, false, out, in, rows, dy, dy16, out, x, x16, in, T(1), dW, in);
  if (!db) return;
  if constexpr (std::is_same_v<T, float>)
    if (dy16) return bias_grad_bf16(dy16, rows, out, db);
  bias_grad<T>(dy, rows, out, db);
}

template <class T>
void linear_relu_backward(const T* x, const uint16_t* x16, const T* y, T* dy, int rows, int in,
                          int out, const T* W, T* dx, T* dW, T* db) {
  const size_t n = size_t(rows) * out;
  if (current_device() == Device::CUDA) {
    relu_backward<T>(y, dy, n, dy);
    return linear_backward<T>(x, x16, dy, nullptr, rows, in, out, W, dx, nullptr, dW, db);
  }
  if (db)
    relu_backward_bias_grad<T>(y, dy, rows, out, db);
  else
    relu_backward<T>(y, dy, n, dy);
  linear_backward<T>(x, x16, dy, nullptr, rows, in, out, W, dx, nullptr, dW, nullptr);
}

template <class T>
void linear_backward_into_relu(const uint16_t* x16, const T* dy, const uint16_t* dy16, int rows,
                               int in, int out, const T* W, T* dW, T* db, uint16_t* dx16) {
  if constexpr (std::is_same_v<T, float>)
    if (gemm_inputs_in_bf16<T>() && x16 && dx16) {
      // dy rounded once for the three reads, unless it came rounded
      const Bf16Copy rounded(dy16 ? nullptr : dy, size_t(rows) * out);
      // dW and db first: they read x16, which dx16 may overwrite.
      linear_backward<T>(nullptr, x16, dy, dy16, rows, in, out, W, nullptr, nullptr, dW, db);
      return input_grad_bf16(dy, dy16, rows, in, out, W, true, dx16);
    }
  (void)x16, (void)dy, (void)dy16, (void)rows, (void)in, (void)out, (void)W, (void)dW, (void)db;
  (void)dx16;
  throw std::logic_error("linear_backward_into_relu: a ReLU output kept in bf16 where GEMMs "
                         "read no bf16 (only where gemm_inputs_in_bf16())");
}

Bf16Copy::Bf16Copy(const float* x, size_t n) {
#ifdef PN_HAVE_CUDA
  const Context& c = current_context();
  if (!x || c.device != Device::CUDA || c.gemm_math != GemmMath::bf16 || !c.blas) return;
  blas_ = c.blas;
  cuda::push_bf16_copy(*static_cast<cuda::Blas*>(blas_), x, n);
#else
  (void)x, (void)n;
#endif
}
Bf16Copy::~Bf16Copy() {
#ifdef PN_HAVE_CUDA
  if (blas_) cuda::pop_bf16_copy(*static_cast<cuda::Blas*>(blas_));
#endif
}

std::string cpu_bf16_gemm_path() { return cpu::bf16_matmul_description(); }

// ---- copy (composite) ---------------------------------------------------------------------------
template <class T>
void copy(const T* x, size_t n, T* y) {
  if (current_device() != Device::CPU) return copy_on_device(y, x, n * sizeof(T));
  cpu::copy<T>(x, n, y);
}

// ---- attention (cublas_by_hand) -----------------------------------------------------------------
namespace {
// Which kernels run the causal attention: on a GPU whose GEMMs compute in bf16, fused (no T x T
// matrices in memory) on cuDNN's SDPA where it runs the shape (kernels/device.h); materialized
// everywhere else.
enum class AttentionPath { materialized, cudnn };
#ifdef PN_HAVE_CUDA
// The first choice of a process where cuDNN could run, on stderr: which ran the attention, and
// why not cuDNN where it did not.
std::once_flag attention_said;  // one flag for every caller (each lambda is its own template)
template <class Line>
void say_once(const Line& line) {
  say_once(attention_said, "attention", line);
}
#endif
AttentionPath attention_path(int nseq, int seq_len, int d, int heads) {
#ifdef PN_HAVE_CUDA
  const Context& c = current_context();
  if (c.device != Device::CUDA || c.gemm_math != GemmMath::bf16 ||
      c.attention == Attention::materialized)
    return AttentionPath::materialized;
  const std::string why = cuda::cudnn_attention_unsupported(nseq, seq_len, d, heads);
  if (why.empty()) {
    say_once([] { return "cuDNN's fused SDPA (" + cuda::sdpa_description() + ")"; });
    return AttentionPath::cudnn;
  }
  if (c.attention == Attention::cudnn) throw std::runtime_error("--attention cudnn: " + why);
  say_once([&] { return "materialized (not cuDNN: " + why + ")"; });
#else
  (void)nseq, (void)seq_len, (void)d, (void)heads;
#endif
  return AttentionPath::materialized;
}
}  // namespace

size_t attention_saved_size(int nseq, int seq_len, int d, int heads) {
  const size_t rows = size_t(nseq) * heads * seq_len;
  switch (attention_path(nseq, seq_len, d, heads)) {
#ifdef PN_HAVE_CUDA
    case AttentionPath::cudnn:
      return cuda::cudnn_attention_saved_size(nseq, seq_len, d, heads);
#endif
    default:
      return rows * seq_len;
  }
}

template <class T>
bool attention_backward_reads_qkv(int nseq, int seq_len, int d, int heads) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)  // only float takes the fused paths (below)
    return attention_path(nseq, seq_len, d, heads) != AttentionPath::cudnn;
#endif
  (void)nseq, (void)seq_len, (void)d, (void)heads;
  return true;
}
template bool attention_backward_reads_qkv<float>(int, int, int, int);
template bool attention_backward_reads_qkv<double>(int, int, int, int);

template <class T>
const uint16_t* attention_ctx_bf16(const T* saved, int nseq, int seq_len, int d, int heads) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (gemm_inputs_in_bf16<T>() && attention_path(nseq, seq_len, d, heads) == AttentionPath::cudnn)
      return cuda::cudnn_attention_ctx16(saved, nseq, seq_len, d, heads);
#endif
  (void)saved, (void)nseq, (void)seq_len, (void)d, (void)heads;
  return nullptr;
}
template const uint16_t* attention_ctx_bf16<float>(const float*, int, int, int, int);
template const uint16_t* attention_ctx_bf16<double>(const double*, int, int, int, int);
template <class T>
uint16_t* attention_qkv_bf16(T* saved, int nseq, int seq_len, int d, int heads) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (gemm_inputs_in_bf16<T>() && attention_path(nseq, seq_len, d, heads) == AttentionPath::cudnn)
      return cuda::cudnn_attention_qkv16(saved, nseq, seq_len, d, heads);
#endif
  (void)saved, (void)nseq, (void)seq_len, (void)d, (void)heads;
  return nullptr;
}
template uint16_t* attention_qkv_bf16<float>(float*, int, int, int, int);
template uint16_t* attention_qkv_bf16<double>(double*, int, int, int, int);
template <class T>
const uint16_t* attention_dqkv_bf16(const T* scratch, int nseq, int seq_len, int d, int heads) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (gemm_inputs_in_bf16<T>() && attention_path(nseq, seq_len, d, heads) == AttentionPath::cudnn)
      return cuda::cudnn_attention_dqkv16(scratch, nseq, seq_len, d);
#endif
  (void)scratch, (void)nseq, (void)seq_len, (void)d, (void)heads;
  return nullptr;
}
template const uint16_t* attention_dqkv_bf16<float>(const float*, int, int, int, int);
template const uint16_t* attention_dqkv_bf16<double>(const double*, int, int, int, int);
template <class T>
uint16_t* attention_dctx_bf16(T* scratch, int nseq, int seq_len, int d, int heads) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (gemm_inputs_in_bf16<T>() && attention_path(nseq, seq_len, d, heads) == AttentionPath::cudnn)
      return cuda::cudnn_attention_dout16(scratch);
#endif
  (void)scratch, (void)nseq, (void)seq_len, (void)d, (void)heads;
  return nullptr;
}
template uint16_t* attention_dctx_bf16<float>(float*, int, int, int, int);
template uint16_t* attention_dctx_bf16<double>(double*, int, int, int, int);

template <class T>
void attention_forward(const T* qkv, int nseq, int seq_len, int d, int heads, T* saved, T* ctx) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>) switch (attention_path(nseq, seq_len, d, heads)) {
      case AttentionPath::cudnn:
        return cuda::cudnn_attention_forward(qkv, nseq, seq_len, d, heads, saved, ctx, stream());
      default:
        break;
    }
#endif
  generic::attention_forward<T>(qkv, nseq, seq_len, d, heads, saved, ctx);
}
template <class T>
void attention_backward(const T* qkv, const T* saved, const T* ctx, const T* dctx, int nseq,
                        int seq_len, int d, int heads, T* dqkv, T* scratch) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>) switch (attention_path(nseq, seq_len, d, heads)) {
      case AttentionPath::cudnn:
        return cuda::cudnn_attention_backward(saved, dctx, nseq, seq_len, d, heads, dqkv, scratch,
                                              stream());
      default:
        break;
    }
#endif
  generic::attention_backward<T>(qkv, saved, ctx, dctx, nseq, seq_len, d, heads, dqkv, scratch);
}

// ---- loss and reductions (composite: device-resident sums read back) ----------------------------
template <class T>
LossSums softmax_xent(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, T label_smoothing, T grad_scale) {
  if (current_device() == Device::CPU)
    return cpu::softmax_xent<T>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale);
  const auto s = fetch_sums<3>([&](double* dev) {
    softmax_xent_acc<T>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale, false,
                        false, dev);
  });
  return {s[0], s[1], s[2]};
}
template <class T>
LossSums softmax_xent_eval(const T* logits, const int32_t* target, const uint8_t* mask, int rows,
                           int V, int ld, T label_smoothing) {
  if (current_device() == Device::CPU)
    return cpu::softmax_xent_eval<T>(logits, target, mask, rows, V, ld, label_smoothing);
  const auto s = fetch_sums<3>([&](double* dev) {
    softmax_xent_eval_acc<T>(logits, target, mask, rows, V, ld, label_smoothing, dev);
  });
  return {s[0], s[1], s[2]};
}
template <class T>
double sum_squares(const T* x, size_t n) {
  if (current_device() == Device::CPU) return cpu::sum_squares<T>(x, n);
  return fetch_sums<2>([&](double* dev) { grad_stats_acc<T>(x, n, dev); })[0];
}
template <class T>
bool all_finite(const T* x, size_t n) {
  if (current_device() == Device::CPU) return cpu::all_finite<T>(x, n);
  return fetch_sums<2>([&](double* dev) { grad_stats_acc<T>(x, n, dev); })[1] == 0;
}

// ---- instantiations -----------------------------------------------------------------------------
// Every templated operation of kernels/ops.inc, in float and double.
#define PN_OPS_INSTANTIATE_EVERY_OP
#include "kernels/instantiate.inc"

}  // namespace pn::k
