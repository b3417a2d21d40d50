#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"
#ifdef PN_HAVE_NCCL
#include "comm/nccl_comm.h"
#endif

namespace pn {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PN_FORCE_MPI"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::string sync_group_error(int group_size, int world_size) {
  if (group_size == 0 || (group_size > 0 && world_size % group_size == 0)) return "";
  std::string divisors;
  for (int k = 1; k <= world_size; ++k)
    if (world_size % k == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(k);
  return "--sync-group-size " + std::to_string(group_size) + " does not divide the world size " +
         std::to_string(world_size) + " (ranks): give one of " + divisors +
         ", or leave it out for one group of all ranks";
}

std::unique_ptr<Communicator> make_group_communicator(Communicator& world, int group_size) {
  if (const std::string e = sync_group_error(group_size, world.size()); !e.empty())
    throw std::invalid_argument(e);
  const int k = group_size > 0 ? group_size : world.size();
  return world.split(world.rank() / k);
}

std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv) {
  if (launched_by_mpi()) return make_mpi_communicator(argc, argv);
  return make_single_communicator();
}

std::unique_ptr<Communicator> make_device_communicator(int* argc, char*** argv) {
#ifdef PN_HAVE_NCCL
  return make_nccl_communicator(make_communicator(argc, argv));
#else
  return make_communicator(argc, argv);
#endif
}

#ifndef PN_HAVE_NCCL
std::string nccl_version() { return ""; }  // comm/nccl_comm.cpp's when built with NCCL
#endif

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host) {
#ifdef PN_HAVE_NCCL
  return make_nccl_communicator(std::move(host));
#else
  return host;
#endif
}

}  // namespace pn
