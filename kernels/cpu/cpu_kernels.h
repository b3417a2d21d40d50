// The CPU implementations of every operation of kernels/ops.inc: the reference the CUDA twins
// are tested against, the fallback, and (through the stand-in device) the math of the wiring
// tests. Templates instantiated for float (training) and double (gradient checks). Called only
// by the dispatch in kernels/dispatch.cpp and by tests that compare a device with the CPU.
#pragma once
#include "kernels/kernels.h"

namespace pn::k::cpu {
#include "kernels/ops.inc"
}  // namespace pn::k::cpu
