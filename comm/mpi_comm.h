#pragma once
#include <memory>

#include "comm/communicator.h"

namespace pn {
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);
}
