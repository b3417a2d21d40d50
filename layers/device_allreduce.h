// Sums over every rank of memory on the current device: the one place that chooses how. On the
// CPU through the communicator's host all-reduce (MPI); on a GPU through its device collectives
// (NCCL) where it has them; elsewhere (ranks sharing one GPU) staged through the host,
// blocking. The norms' statistics and the trainer's gradient buckets both
// come here. It lives beside the layers rather than in comm/ because staging needs the device's
// copies (kernels/device.h), which the communicators do not know.
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

// Blocking, in stream order: buf holds the sum for every later kernel on the current stream.
template <class T>
void allreduce_sum_here(Communicator& comm, T* buf, size_t n) {
  if (comm.size() == 1) return;  // one rank's sum is its own (and a CUDA graph may hold this)
  const Context& ctx = current_context();
  if (ctx.device == Device::CPU) return comm.allreduce_sum(buf, n);
  if (ctx.device == Device::CUDA && comm.device_collectives())
    return comm.allreduce_sum_device(buf, n, ctx.stream);
  allreduce_staged(comm, buf, n);
}

// Started now, finished by finish_sum: a host request (MPI), a device one (NCCL on the
// communicator's own stream, after the work queued so far), or done already (staged). none:
// not started (again after finish_sum).
struct PendingSum {
  enum class Kind { none, host, device, done } kind = Kind::none;
  Communicator::Request host;
  Communicator::DeviceRequest device;
};

inline PendingSum start_allreduce_sum_here(Communicator& comm, float* buf, size_t n) {
  const Context& ctx = current_context();
  PendingSum p;
  if (ctx.device == Device::CPU) {
    p.host = comm.iallreduce_sum(buf, n);
    p.kind = PendingSum::Kind::host;
  } else if (ctx.device == Device::CUDA && comm.device_collectives()) {
    p.device = comm.iallreduce_sum_device(buf, n, ctx.stream);
    p.kind = PendingSum::Kind::device;
  } else {
    allreduce_staged(comm, buf, n);
    p.kind = PendingSum::Kind::done;
  }
  return p;
}

// The host waits for a host request; later work on the current stream waits for a device one
// (CUDA events, no host wait).
inline void finish_sum(Communicator& comm, PendingSum* p) {
  if (p->kind == PendingSum::Kind::host) comm.wait(p->host);
  if (p->kind == PendingSum::Kind::device) comm.wait_device(p->device, current_context().stream);
  p->kind = PendingSum::Kind::none;
}

}  // namespace pn
