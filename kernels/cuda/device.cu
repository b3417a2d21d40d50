// CUDA device discovery. The CUDA twins of kernels/cpu land here (issue 6); until then the
// CUDA build only reports the visible devices and every kernel runs on the CPU path.
#include <cuda_runtime.h>

namespace pn::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace pn::cuda
