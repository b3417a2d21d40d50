// What a run records of where it ran: the commit and build it came from, the device and the
// libraries it computed with, precision, ranks, threads and host. pntrain writes it at the start
// of every attempt (a fresh run or a resume) into the --metrics file and into each checkpoint.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "comm/communicator.h"
#include "trainer/options.h"

namespace pn {

// The provenance object of this process's run (rank 0's host), for the current device context.
// Keys: commit, tree_clean, build_type, build_flags, device, cpu_model, cpu_isa, blas, gpu_name,
// gpu_driver, cuda, cudnn, nccl (null off a GPU), precision, ranks, threads, host.
nlohmann::json run_provenance(const Options& opt, const Communicator& comm);
// The startup line: "build: commit 1a2b3c4 (clean tree), Release, OpenBLAS ... core Haswell".
std::string provenance_summary(const nlohmann::json& provenance);
// Now in UTC, ISO 8601 to the second: "2026-12-01T21:40:03Z".
std::string utc_now();

}  // namespace pn
