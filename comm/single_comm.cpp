#include "comm/single_comm.h"

namespace pn {

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

}  // namespace pn
