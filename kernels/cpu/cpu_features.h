// What this CPU's instruction set offers, by the flag names of /proc/cpuinfo (avx2,
// avx512_bf16, amx_bf16, ...), so that a run that needs one is refused before any work, naming it.
#pragma once
#include <string>

namespace pn {

// True when the kernel lists `flag` for this CPU and PN_CPU_WITHOUT (a comma-separated list of
// flags, e.g. "avx512_bf16") does not mask it: the mask shows, on any machine, what a CPU
// without the flag gets.
bool cpu_has(const std::string& flag);

// The CPU's model name, for messages ("AMD EPYC 9454", or "this CPU").
std::string cpu_model_name();

// The vector and matrix extensions this CPU offers among those the kernels or OpenBLAS may use,
// comma-separated in /proc/cpuinfo's names ("avx2,fma,avx512f,...,amx_bf16"; "" when none).
std::string cpu_isa();

}  // namespace pn
