// A rank's default CPU threads, from what its allocation gives it rather than the node's cores.
#pragma once
#include <string>

#include "comm/communicator.h"

namespace pn {

struct ThreadChoice {
  int threads = 1;
  std::string source;  // where the number came from, for the device line
};

// --threads N when given (> 0); else OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK (each a per-rank
// count); else the CPUs of this rank's affinity mask (sched_getaffinity), at most its cgroup's
// CPU limit (v2 cpu.max, v1 cpu.cfs_quota_us), divided among the ranks of this node that share
// that mask. Collective over `comm` (every rank calls it).
ThreadChoice choose_threads(int flag_threads, Communicator& comm);

// The CPU limit of this process's cgroup and its ancestors in whole CPUs (rounded up), 0 when
// none is set.
int cgroup_cpu_limit();

}  // namespace pn
