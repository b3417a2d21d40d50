// A program's first step (pntrain, pnbench): OpenBLAS's kernels for this CPU, where OpenBLAS's
// own table would take slower ones.
#pragma once
#include <string>

namespace pn {

// OpenBLAS chooses its kernels when it loads, by its own table of CPUs unless OPENBLAS_CORETYPE
// names them. A CPU newer than the table gets a pre-AVX2 core (Debian's 0.3.21 runs its SSE3
// "Prescott" kernels on Intel's family 6 model 207, a third of the AVX-512 ones' speed). The
// core this CPU's instructions call for (SkylakeX with AVX-512, Haswell with AVX2) where
// OpenBLAS fell back to an older one and OPENBLAS_CORETYPE is unset; else "".
std::string openblas_better_core();
// The same for a core name as openblas_get_corename() gives it (any case).
std::string better_core_than(const std::string& openblas_core);
// Called first in a program's main: where openblas_better_core() names a core, runs the program
// again (execv of its own path, the same arguments, process and name) with OPENBLAS_CORETYPE set to
// it, once; returns where it did not or could not. device_summary() then says so (it reads
// PN_OPENBLAS_FALLBACK, the core OpenBLAS chose first, which the rerun sets).
void rerun_with_openblas_core(char** argv);

}  // namespace pn
