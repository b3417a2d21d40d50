// The kernels of the normalization family (column statistics of batch-type norms, per-row groups
// of rms, group and pre-scaling, the per-column state steps) are declared with every other
// operation in kernels/ops.inc; this header remains for the code that includes it by this name.
#pragma once
#include "kernels/kernels.h"
