#include "bench/gemm/dnnl_matmul.h"

#include <oneapi/dnnl/dnnl_debug.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <unordered_map>

namespace pnbench {
namespace {

using dt = dnnl::memory::data_type;

// One CPU engine and in-order stream for every primitive of the run.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Context& context() {
  static Context c;
  return c;
}

// Logical [rows, cols]; a transposed operand is stored [cols, rows] with leading dimension ld.
dnnl::memory::desc operand(int rows, int cols, int ld, bool trans, dt type) {
  const dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

}  // namespace

struct DnnlMatmul::State {
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;
  std::string impl;
};

DnnlMatmul::DnnlMatmul(const Gemm& g, bool bf16, const void* a, const void* b, float* c)
    : s_(std::make_unique<State>()) {
  const dt in = bf16 ? dt::bf16 : dt::f32;
  dnnl::engine& eng = context().engine;
  try {
    const auto a_md = operand(g.m, g.k, g.lda(), g.ta, in);
    const auto b_md = operand(g.k, g.n, g.ldb(), g.tb, in);
    const auto c_md = operand(g.m, g.n, g.ldc(), false, dt::f32);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    s_->prim = dnnl::matmul(pd);
    s_->impl = pd.impl_info_str();
    s_->args = {{DNNL_ARG_SRC, dnnl::memory(a_md, eng, const_cast<void*>(a))},
                {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, const_cast<void*>(b))},
                {DNNL_ARG_DST, dnnl::memory(c_md, eng, c)}};
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("status ") + dnnl_status2str(e.status) + ": " + e.what());
  }
}

DnnlMatmul::~DnnlMatmul() = default;

void DnnlMatmul::run() {
  s_->prim.execute(context().stream, s_->args);
  context().stream.wait();
}

const std::string& DnnlMatmul::impl() const { return s_->impl; }

std::string dnnl_version_line() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (hash " + v->hash + "), CPU runtime " +
         dnnl_runtime2str(v->cpu_runtime) + ", effective ISA " + dnnl_isa();
}

std::string dnnl_isa() { return dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()); }

}  // namespace pnbench
