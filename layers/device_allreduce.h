// Sums of device memory over every rank where the communicator has no device collectives
// (ranks sharing one GPU, the CPU stand-in device): through the host, blocking. The one place
// that stages; the norms' statistics and the trainer's gradient buckets both come here.
#pragma once
#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "kernels/device.h"

namespace pn {

template <class T>
void allreduce_staged(Communicator& comm, T* buf, size_t n) {
  std::vector<T> host(n);
  copy_to_host(host.data(), buf, n * sizeof(T));
  synchronize();
  comm.allreduce_sum(host.data(), n);
  copy_to_device(buf, host.data(), n * sizeof(T));
}

}  // namespace pn
