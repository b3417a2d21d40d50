// The dispatch point of every operation of kernels/ops.inc (see kernels.h): by the device of the
// current context, run the CPU kernel here, queue it on the stand-in device with the pointers
// translated to their readable twins, or call the CUDA twin on the context's stream (float only;
// double precision is the CPU's, for the gradient checks).
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/instantiate.inc"
#include "kernels/kernels.h"
#include "kernels/sim_device.h"

#ifdef PN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
// The CUDA call of an operation, given the stream s (a generic lambda: instantiated only for
// float, so the double instantiations need no CUDA twin).
#define PN_CUDA(call) [&](auto s) { call; }
#else
#define PN_CUDA(call) [](auto) {}
#endif

namespace pn::k {
namespace {

template <class A>
A translate(A a) {
  if constexpr (std::is_pointer_v<A>)
    return sim::real(a);
  else
    return a;
}

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

// cpu_fn(args...) on the CPU, queued on the stand-in, or cuda_fn(stream) when T is float.
template <class T, class CpuFn, class CudaFn, class... A>
void run(const char* name, CpuFn cpu_fn, CudaFn cuda_fn, A... args) {
  switch (current_device()) {
    case Device::CPU:
      cpu_fn(args...);
      return;
    case Device::Sim:
      sim::enqueue([=] { cpu_fn(translate(args)...); });
      return;
    case Device::CUDA:
#ifdef PN_HAVE_CUDA
      if constexpr (std::is_same_v<T, float>) {
        cuda_fn(stream());
        return;
      }
#endif
      unsupported(name);
  }
}

// A host-visible result of a device-resident sum: the sum into a small device buffer, one copy
// back, one wait (tests and conveniences; the training loop reads its sums once per update).
template <size_t N, class F>
std::array<double, N> fetch_sums(F accumulate) {
  double* dev = static_cast<double*>(device_alloc(N * sizeof(double)));
  device_memset_zero(dev, N * sizeof(double));
  accumulate(dev);
  std::array<double, N> host{};
  copy_to_host(host.data(), dev, sizeof host);
  device_free(current_device(), dev);
  synchronize();
  return host;
}

}  // namespace

#define PN_RUN(T, name, cuda_call, ...) run<T>(#name, cpu::name<T>, PN_CUDA(cuda_call), __VA_ARGS__)

// ---- BLAS -------------------------------------------------------------------------------------
template <class T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  // bf16 off a GPU: the context's precision picks the CPU kernel when the call is made (the
  // stand-in runs it later, on its own thread); a GPU's cuBLAS handle carries it instead. The
  // CPU's bf16 instructions where it has them (oneDNN), else bf16's numerics on fp32 sgemm.
  if constexpr (std::is_same_v<T, float>) {
    if (current_context().gemm_math == GemmMath::bf16 && current_device() != Device::CUDA)
      return run<T>("gemm",
                    cpu::bf16_matmul_available() ? cpu::gemm_bf16_matmul : cpu::gemm_bf16_operands,
                    PN_CUDA(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  PN_RUN(T, gemm, cuda::gemm(blas(s), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), ta,
         tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string cpu_bf16_gemm_path() { return cpu::bf16_matmul_description(); }

// ---- element-wise -----------------------------------------------------------------------------
template <class T>
void fill(T* x, size_t n, T value) {
  if constexpr (std::is_same_v<T, double>) {
#ifdef PN_HAVE_CUDA
    if (current_device() == Device::CUDA) return cuda::fill(x, n, value, stream());
#endif
  }
  PN_RUN(T, fill, cuda::fill(x, n, value, s), x, n, value);
}
template <class T>
void copy(const T* x, size_t n, T* y) {
  if (current_device() != Device::CPU) return copy_on_device(y, x, n * sizeof(T));
  cpu::copy<T>(x, n, y);
}
template <class T>
void add_inplace(T* y, const T* x, size_t n) {
  if constexpr (std::is_same_v<T, double>) {
#ifdef PN_HAVE_CUDA
    if (current_device() == Device::CUDA) return cuda::add_inplace(y, x, n, stream());
#endif
  }
  PN_RUN(T, add_inplace, cuda::add_inplace(y, x, n, s), y, x, n);
}
template <class T>
void add(const T* a, const T* b, size_t n, T* y) {
  PN_RUN(T, add, cuda::add(a, b, n, y, s), a, b, n, y);
}
template <class T>
void scale_inplace(T* y, size_t n, T a) {
  PN_RUN(T, scale_inplace, cuda::scale_inplace(y, n, a, s), y, n, a);
}
template <class T>
void add_bias(T* y, const T* b, int rows, int cols) {
  PN_RUN(T, add_bias, cuda::add_bias(y, b, rows, cols, s), y, b, rows, cols);
}
template <class T>
void bias_grad(const T* dy, int rows, int cols, T* db) {
  PN_RUN(T, bias_grad, cuda::bias_grad(dy, rows, cols, db, s), dy, rows, cols, db);
}
template <class T>
void relu_forward(const T* x, size_t n, T* y) {
  PN_RUN(T, relu_forward, cuda::relu_forward(x, n, y, s), x, n, y);
}
template <class T>
void relu_backward(const T* y, const T* dy, size_t n, T* dx) {
  PN_RUN(T, relu_backward, cuda::relu_backward(y, dy, n, dx, s), y, dy, n, dx);
}
template <class T>
void bias_relu_forward(T* y, const T* b, int rows, int cols) {
  PN_RUN(T, bias_relu_forward, cuda::bias_relu_forward(y, b, rows, cols, s), y, b, rows, cols);
}
template <class T>
void relu_backward_bias_grad(const T* y, T* dy, int rows, int cols, T* db) {
  PN_RUN(T, relu_backward_bias_grad, cuda::relu_backward_bias_grad(y, dy, rows, cols, db, s), y,
         dy, rows, cols, db);
}
void gather_rows(const void* src, size_t src_stride, const int32_t* from, int rows, size_t bytes,
                 void* dst, size_t dst_stride) {
  run<float>("gather_rows", cpu::gather_rows,
             PN_CUDA(cuda::gather_rows(src, src_stride, from, rows, bytes, dst, dst_stride, s)),
             src, src_stride, from, rows, bytes, dst, dst_stride);
}
void dropout_mask(uint64_t seed, size_t n, float p, uint8_t* keep) {
  run<float>("dropout_mask", cpu::dropout_mask, PN_CUDA(cuda::dropout_mask(seed, n, p, keep, s)),
             seed, n, p, keep);
}
template <class T>
void dropout_apply(T* x, const uint8_t* keep, size_t n, float p) {
  PN_RUN(T, dropout_apply, cuda::dropout_apply(x, keep, n, p, s), x, keep, n, p);
}
template <class T>
void dropout_add(const T* a, const T* b, const uint8_t* keep, float p, size_t n, T* y) {
  PN_RUN(T, dropout_add, cuda::dropout_add(a, b, keep, p, n, y, s), a, b, keep, p, n, y);
}
template <class T>
void dropout_copy(const T* x, const uint8_t* keep, float p, size_t n, T* y) {
  PN_RUN(T, dropout_copy, cuda::dropout_copy(x, keep, p, n, y, s), x, keep, p, n, y);
}

// ---- embedding --------------------------------------------------------------------------------
template <class T>
void sinusoidal_positions(int max_len, int d, T* table) {
  PN_RUN(T, sinusoidal_positions, cuda::sinusoidal_positions(max_len, d, table, s), max_len, d,
         table);
}
template <class T>
void embedding_forward(const int32_t* tok, int rows, int seq_len, const T* E, const T* P, int d,
                       T scale, T* y) {
  PN_RUN(T, embedding_forward, cuda::embedding_forward(tok, rows, seq_len, E, P, d, scale, y, s),
         tok, rows, seq_len, E, P, d, scale, y);
}
template <class T>
void embedding_backward(const int32_t* tok, int rows, const T* dy, int d, T scale, T* dE) {
  PN_RUN(T, embedding_backward, cuda::embedding_backward(tok, rows, dy, d, scale, dE, s), tok,
         rows, dy, d, scale, dE);
}

// ---- attention --------------------------------------------------------------------------------
namespace {
// On a GPU whose GEMMs compute in bf16, the causal attention runs fused (kernels/cuda/
// flash_attention.cu: no T x T matrices in memory), unless --attention materialized.
bool fused_attention(int d, int heads) {
#ifdef PN_HAVE_CUDA
  const Context& c = current_context();
  return c.device == Device::CUDA && c.gemm_math == GemmMath::bf16 && c.fused_attention &&
         cuda::flash_attention_supported(d, heads);
#else
  (void)d, (void)heads;
  return false;
#endif
}
}  // namespace

size_t attention_saved_size(int nseq, int seq_len, int d, int heads) {
  const size_t rows = size_t(nseq) * heads * seq_len;
  return fused_attention(d, heads) ? rows : rows * seq_len;
}

template <class T>
void attention_forward(const T* qkv, int nseq, int seq_len, int d, int heads, T* probs, T* ctx) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (fused_attention(d, heads))
      return cuda::flash_attention_forward(qkv, nseq, seq_len, d, heads, probs, ctx, stream());
#endif
  PN_RUN(T, attention_forward,
         cuda::attention_forward(blas(s), qkv, nseq, seq_len, d, heads, probs, ctx), qkv, nseq,
         seq_len, d, heads, probs, ctx);
}
template <class T>
void attention_backward(const T* qkv, const T* probs, const T* ctx, const T* dctx, int nseq,
                        int seq_len, int d, int heads, T* dqkv, T* scratch) {
#ifdef PN_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (fused_attention(d, heads))
      return cuda::flash_attention_backward(qkv, probs, ctx, dctx, nseq, seq_len, d, heads, dqkv,
                                            scratch, stream());
#endif
  PN_RUN(T, attention_backward,
         cuda::attention_backward(blas(s), qkv, probs, dctx, nseq, seq_len, d, heads, dqkv,
                                  scratch),
         qkv, probs, ctx, dctx, nseq, seq_len, d, heads, dqkv, scratch);
}
template <class T>
void mha_forward(const T* q, int ldq, const T* k, const T* v, int ldkv, int nseq, int tq, int tk,
                 int d, int heads, bool causal, const uint8_t* key_mask, const uint8_t* keep,
                 float p, T* probs, T* probs_drop, T* ctx) {
  PN_RUN(T, mha_forward,
         cuda::mha_forward(blas(s), q, ldq, k, v, ldkv, nseq, tq, tk, d, heads, causal, key_mask,
                           keep, p, probs, probs_drop, ctx),
         q, ldq, k, v, ldkv, nseq, tq, tk, d, heads, causal, key_mask, keep, p, probs, probs_drop,
         ctx);
}
template <class T>
void mha_backward(const T* q, int ldq, const T* k, const T* v, int ldkv, int nseq, int tq, int tk,
                  int d, int heads, bool causal, const uint8_t* key_mask, const uint8_t* keep,
                  float p, const T* probs, const T* probs_drop, const T* dctx, T* dq, T* dk, T* dv,
                  T* scratch) {
  PN_RUN(T, mha_backward,
         cuda::mha_backward(blas(s), q, ldq, k, v, ldkv, nseq, tq, tk, d, heads, causal, key_mask,
                            keep, p, probs, probs_drop, dctx, dq, dk, dv, scratch),
         q, ldq, k, v, ldkv, nseq, tq, tk, d, heads, causal, key_mask, keep, p, probs, probs_drop,
         dctx, dq, dk, dv, scratch);
}
template <class T>
void attention_step(const T* q, int ldq, const T* k, const T* v, int ldkv, size_t seq_stride,
                    int N, int len, int d, int heads, const uint8_t* key_mask, int mask_stride,
                    T* ctx) {
  PN_RUN(T, attention_step,
         cuda::attention_step(q, ldq, k, v, ldkv, seq_stride, N, len, d, heads, key_mask,
                              mask_stride, ctx, s),
         q, ldq, k, v, ldkv, seq_stride, N, len, d, heads, key_mask, mask_stride, ctx);
}
template <class T>
void log_softmax_rows(T* x, int rows, int cols) {
  PN_RUN(T, log_softmax_rows, cuda::log_softmax_rows(x, rows, cols, s), x, rows, cols);
}

// ---- LayerNorm ----------------------------------------------------------------------------------
template <class T>
void layernorm_forward(const T* x, int rows, int d, const T* gamma, const T* beta, T eps, T* y,
                       T* mean, T* rstd) {
  PN_RUN(T, layernorm_forward,
         cuda::layernorm_forward(x, rows, d, gamma, beta, eps, y, mean, rstd, s), x, rows, d,
         gamma, beta, eps, y, mean, rstd);
}
template <class T>
void layernorm_backward(const T* x, const T* dy, const T* mean, const T* rstd, const T* gamma,
                        const uint8_t* mask, int rows, int d, T* dx, T* dgamma, T* dbeta) {
  PN_RUN(T, layernorm_backward,
         cuda::layernorm_backward(x, dy, mean, rstd, gamma, mask, rows, d, dx, dgamma, dbeta, s),
         x, dy, mean, rstd, gamma, mask, rows, d, dx, dgamma, dbeta);
}

// ---- loss ---------------------------------------------------------------------------------------
template <class T>
void softmax_xent_acc(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, T label_smoothing, T grad_scale, double* sums) {
  PN_RUN(T, softmax_xent_acc,
         cuda::softmax_xent_acc(logits, target, mask, rows, V, ld, label_smoothing, grad_scale,
                                sums, s),
         logits, target, mask, rows, V, ld, label_smoothing, grad_scale, sums);
}
template <class T>
void softmax_xent_eval_acc(const T* logits, const int32_t* target, const uint8_t* mask, int rows,
                           int V, int ld, T label_smoothing, double* sums) {
  PN_RUN(T, softmax_xent_eval_acc,
         cuda::softmax_xent_eval_acc(logits, target, mask, rows, V, ld, label_smoothing, sums, s),
         logits, target, mask, rows, V, ld, label_smoothing, sums);
}
template <class T>
LossSums softmax_xent(T* logits, const int32_t* target, const uint8_t* mask, int rows, int V,
                      int ld, T label_smoothing, T grad_scale) {
  if (current_device() == Device::CPU)
    return cpu::softmax_xent<T>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale);
  const auto s = fetch_sums<3>([&](double* dev) {
    softmax_xent_acc<T>(logits, target, mask, rows, V, ld, label_smoothing, grad_scale, dev);
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

// ---- optimizer and reductions -------------------------------------------------------------------
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t t) {
  run<float>("adam_update", cpu::adam_update,
             PN_CUDA(cuda::adam_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, s)),
             p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}
template <class T>
void grad_stats_acc(const T* x, size_t n, double* out) {
  PN_RUN(T, grad_stats_acc, cuda::grad_stats_acc(x, n, out, s), x, n, out);
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

// ---- normalization family ---------------------------------------------------------------------
template <class T>
void column_stats(const T* x, const uint8_t* mask, int rows, int d, const double* shift,
                  double* count, double* sum, double* sumsq) {
  PN_RUN(T, column_stats, cuda::column_stats(x, mask, rows, d, shift, count, sum, sumsq, s), x,
         mask, rows, d, shift, count, sum, sumsq);
}
template <class T>
void column_dot(const T* a, const T* b, const uint8_t* mask, int rows, int d, const double* shift,
                double* sum_a, double* sum_ab) {
  PN_RUN(T, column_dot, cuda::column_dot(a, b, mask, rows, d, shift, sum_a, sum_ab, s), a, b,
         mask, rows, d, shift, sum_a, sum_ab);
}
template <class T>
void column_affine(const T* x, int rows, int d, const double* shift, const double* scale,
                   const T* gamma, const T* beta, T* y) {
  PN_RUN(T, column_affine, cuda::column_affine(x, rows, d, shift, scale, gamma, beta, y, s), x,
         rows, d, shift, scale, gamma, beta, y);
}
template <class T>
void column_norm_backward(const T* x, const T* dy, const uint8_t* mask, int rows, int d,
                          const double* shift, const double* scale, const T* gamma,
                          const double* a, const double* b, T* dx) {
  PN_RUN(T, column_norm_backward,
         cuda::column_norm_backward(x, dy, mask, rows, d, shift, scale, gamma, a, b, dx, s), x,
         dy, mask, rows, d, shift, scale, gamma, a, b, dx);
}
template <class T>
void rowgroup_rms_forward(const T* x, int rows, int d, int G, T eps, const T* gamma, T* y,
                          T* rinv) {
  PN_RUN(T, rowgroup_rms_forward, cuda::rowgroup_rms_forward(x, rows, d, G, eps, gamma, y, rinv, s),
         x, rows, d, G, eps, gamma, y, rinv);
}
template <class T>
void rowgroup_rms_backward(const T* x, const T* dy, const T* rinv, const T* gamma,
                           const uint8_t* mask, int rows, int d, int G, T* dx, T* dgamma) {
  PN_RUN(T, rowgroup_rms_backward,
         cuda::rowgroup_rms_backward(x, dy, rinv, gamma, mask, rows, d, G, dx, dgamma, s), x, dy,
         rinv, gamma, mask, rows, d, G, dx, dgamma);
}
template <class T>
void rowgroup_norm_forward(const T* x, int rows, int d, int G, T eps, const T* gamma,
                           const T* beta, T* y, T* mean, T* rstd) {
  PN_RUN(T, rowgroup_norm_forward,
         cuda::rowgroup_norm_forward(x, rows, d, G, eps, gamma, beta, y, mean, rstd, s), x, rows,
         d, G, eps, gamma, beta, y, mean, rstd);
}
template <class T>
void rowgroup_norm_backward(const T* x, const T* dy, const T* mean, const T* rstd,
                            const T* gamma, const uint8_t* mask, int rows, int d, int G, T* dx,
                            T* dgamma, T* dbeta) {
  PN_RUN(T, rowgroup_norm_backward,
         cuda::rowgroup_norm_backward(x, dy, mean, rstd, gamma, mask, rows, d, G, dx, dgamma,
                                      dbeta, s),
         x, dy, mean, rstd, gamma, mask, rows, d, G, dx, dgamma, dbeta);
}

// ---- per-column state steps -------------------------------------------------------------------
// Double state on every device: the CUDA twins take float gamma and gradients, the rest doubles.
void batch_absorb(const double* stats, int d, double eps, double alpha, double* running_mean,
                  double* running_var, double* mean, double* rstd, double* var_b) {
  run<float>("batch_absorb", cpu::batch_absorb,
             PN_CUDA(cuda::batch_absorb(stats, d, eps, alpha, running_mean, running_var, mean,
                                        rstd, var_b, s)),
             stats, d, eps, alpha, running_mean, running_var, mean, rstd, var_b);
}
template <class T>
void batch_param_grads(const double* count, const double* sums, int d, const double* rstd,
                       T* dgamma, T* dbeta) {
  PN_RUN(T, batch_param_grads, cuda::batch_param_grads(count, sums, d, rstd, dgamma, dbeta, s),
         count, sums, d, rstd, dgamma, dbeta);
}
template <class T>
void batch_backward_coeffs(const double* count, const double* sums, int d, const T* gamma,
                           const double* rstd, double* a, double* b) {
  PN_RUN(T, batch_backward_coeffs,
         cuda::batch_backward_coeffs(count, sums, d, gamma, rstd, a, b, s), count, sums, d,
         gamma, rstd, a, b);
}
void power_v_absorb(const double* stats, int d, double eps, double alpha, double* running_psi2,
                    double* inv_s) {
  run<float>("power_v_absorb", cpu::power_v_absorb,
             PN_CUDA(cuda::power_v_absorb(stats, d, eps, alpha, running_psi2, inv_s, s)), stats,
             d, eps, alpha, running_psi2, inv_s);
}
void pn_forward_scale(const double* t, int64_t warmup, int d, double eps,
                      const double* running_psi2, double* inv_s) {
  run<float>("pn_forward_scale", cpu::pn_forward_scale,
             PN_CUDA(cuda::pn_forward_scale(t, warmup, d, eps, running_psi2, inv_s, s)), t,
             warmup, d, eps, running_psi2, inv_s);
}
void pn_absorb(const double* stats, double* t, int64_t warmup, int d, double eps,
               double alpha_fwd, bool authors_rule, double* running_psi2, double* inv_s,
               double* sum_x2) {
  run<float>("pn_absorb", cpu::pn_absorb,
             PN_CUDA(cuda::pn_absorb(stats, t, warmup, d, eps, alpha_fwd, authors_rule,
                                     running_psi2, inv_s, sum_x2, s)),
             stats, t, warmup, d, eps, alpha_fwd, authors_rule, running_psi2, inv_s, sum_x2);
}
void pn_authors_coeffs(const double* count, const double* sum_x2, const double* nu,
                       const double* inv_s, int d, double eps, double alpha_bkw, double* inv_s_b,
                       double* nu_coef) {
  run<float>("pn_authors_coeffs", cpu::pn_authors_coeffs,
             PN_CUDA(cuda::pn_authors_coeffs(count, sum_x2, nu, inv_s, d, eps, alpha_bkw, inv_s_b,
                                             nu_coef, s)),
             count, sum_x2, nu, inv_s, d, eps, alpha_bkw, inv_s_b, nu_coef);
}
template <class T>
void psi_param_grads(const double* count, const double* sums, int d, const double* inv_s,
                     const T* gamma, T* dgamma, T* dbeta, double* g_xh) {
  PN_RUN(T, psi_param_grads,
         cuda::psi_param_grads(count, sums, d, inv_s, gamma, dgamma, dbeta, g_xh, s), count, sums,
         d, inv_s, gamma, dgamma, dbeta, g_xh);
}
void mean_over_count(const double* count, const double* sums, int d, double* b) {
  run<float>("mean_over_count", cpu::mean_over_count,
             PN_CUDA(cuda::mean_over_count(count, sums, d, b, s)), count, sums, d, b);
}
void pn_nu_update(const double* count, const double* sum_x2, const double* g_xh,
                  const double* inv_s, int d, double alpha_bkw, double lambda_coef, double* nu) {
  run<float>("pn_nu_update", cpu::pn_nu_update,
             PN_CUDA(cuda::pn_nu_update(count, sum_x2, g_xh, inv_s, d, alpha_bkw, lambda_coef, nu,
                                        s)),
             count, sum_x2, g_xh, inv_s, d, alpha_bkw, lambda_coef, nu);
}
void inverse_sqrt_eps(const double* var, int d, double eps, double* inv) {
  run<float>("inverse_sqrt_eps", cpu::inverse_sqrt_eps,
             PN_CUDA(cuda::inverse_sqrt_eps(var, d, eps, inv, s)), var, d, eps, inv);
}

// ---- instantiations -----------------------------------------------------------------------------
// Every templated operation, from the one list of kernels/instantiate.inc.
#define PN_INSTANTIATE(T)                                                                        \
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int); \
  PN_ELEMENTWISE_OPS(T)                                                                          \
  PN_ATTENTION_OPS(T)                                                                            \
  PN_MHA_OPS(T)                                                                                  \
  PN_LOSS_OPS(T)                                                                                 \
  PN_ROWNORM_OPS(T)                                                                              \
  PN_NORM_OPS(T)                                                                                 \
  PN_NORM_STATE_OPS(T)
PN_INSTANTIATE(float)
PN_INSTANTIATE(double)

}  // namespace pn::k
