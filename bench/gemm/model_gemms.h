// The GEMMs of one training micro-step (forward and backward) of the models in configs/, as
// layers/linear.cpp and layers/embedding.cpp call them: row-major, tight leading dimensions.
// The model accumulates dW (beta 1); pnbench_gemm times every shape with beta 0.
#pragma once

#include <string>
#include <vector>

namespace pnbench {

struct Gemm {
  std::string name;  // e.g. "attn qkv fwd"; identical shapes of several layers are merged
  const char* kind;  // "attn", "ffn" or "output": the shape class totals are grouped by
  bool ta, tb;       // C[m,n] = op(A)[m,k] op(B)[k,n]; op = transpose when set
  int m, n, k;
  int count;  // how many times one micro-step runs this shape
  int lda() const { return ta ? m : k; }
  int ldb() const { return tb ? k : n; }
  int ldc() const { return n; }
  double flops() const { return 2.0 * m * n * k; }
};

struct ModelGemms {
  std::string name, summary;  // summary: the sizes the shapes come from
  std::vector<Gemm> gemms;
};

// Known names: ptb_small, ptb_wide, iwslt_small. Throws std::invalid_argument otherwise.
ModelGemms model_gemms(const std::string& name);

}  // namespace pnbench
