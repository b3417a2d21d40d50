// pnbench_norms --device cuda: every norm layer's forward and backward on the GPU (make_norm's
// layers in a CUDA context: the kernels training runs), beside a device copy (bench/README.md).
#pragma once
#include <string>
#include <vector>

namespace pn::bench {

// Prints the table of each (d, tokens) for the kinds given; returns the exit status: 0, or 1
// where no GPU is visible (which it says, and which gpu-check's PN_CUDA_REQUIRED=1 fails on).
int norm_bench_cuda(const std::vector<std::string>& kinds, const std::vector<int>& dims,
                    const std::vector<int>& tokens, int groups, int reps);

}  // namespace pn::bench
