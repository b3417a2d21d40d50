// The NCCL communicator: device-memory sums over NCCL for ranks that each own one GPU.
//
// It wraps a host communicator (MPI under mpirun, or the single-process one), which keeps every
// host-memory collective, the bootstrap (rank 0's ncclUniqueId is broadcast through it) and
// abort(). The GPU is chosen by node-local rank (local_rank mod the visible devices) and made
// current. Statistics sums run on the caller's stream (allreduce_sum_device); gradient buckets
// on the communicator's own stream through a second NCCL communicator split from the first,
// ordered by events (iallreduce_sum_device / wait_device).
// split(color) (the statistics groups of --sync-group-size) splits the host communicator and both
// NCCL communicators (ncclCommSplit) alike; the split's host time counts in this communicator,
// whose device_error() and abort() also cover its live splits (the watchdog knows only this one).
// When two ranks share one GPU (NCCL refuses a communicator with two ranks on one device),
// found by comparing device UUIDs across ranks, device sums fall back to copying through pinned
// host memory and the host communicator, with a warning: correct, not fast.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace pn {

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host);

}  // namespace pn
