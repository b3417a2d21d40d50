#include <cstdlib>
#include <cstring>

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

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host) {
#ifdef PN_HAVE_NCCL
  return make_nccl_communicator(std::move(host));
#else
  return host;
#endif
}

}  // namespace pn
