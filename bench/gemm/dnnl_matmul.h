// oneDNN's matmul primitive on the row-major GEMMs of pnbench_gemm; only built when oneDNN is
// found (PN_HAVE_DNNL), so that the benchmark still measures OpenBLAS alone without it.
#pragma once

#include <memory>
#include <string>

#include "bench/gemm/model_gemms.h"

namespace pnbench {

// C = op(A) op(B) (beta 0) on fixed buffers: A and B in f32, or in bf16 (uint16_t) with
// bf16 = true; C always f32. A transposed operand is a memory descriptor with swapped strides,
// so nothing is copied; the primitive is created once here and reused by every run().
class DnnlMatmul {
 public:
  // Throws std::runtime_error with oneDNN's status and message when no implementation fits.
  DnnlMatmul(const Gemm& g, bool bf16, const void* a, const void* b, float* c);
  ~DnnlMatmul();
  void run();
  const std::string& impl() const;  // oneDNN's implementation name, e.g. "gemm:jit"

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// "oneDNN 2.6.3 (hash N/A), CPU runtime OpenMP, effective ISA cpu_isa_avx2"
std::string dnnl_version_line();
std::string dnnl_isa();  // the ISA oneDNN's JIT targets on this CPU, e.g. "cpu_isa_avx2"

}  // namespace pnbench
