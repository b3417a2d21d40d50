#include "kernels/device.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <thread>

#ifdef PN_HAVE_CUDA
namespace pn::cuda {
int device_count();
}
#endif

namespace pn {

bool cuda_built() {
#ifdef PN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef PN_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::string device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

void set_num_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

int hardware_cores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : int(std::thread::hardware_concurrency());
}

}  // namespace pn
