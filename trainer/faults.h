// --debug-fault KIND@UPDATE[:RANK]: the faults the failure tests inject (a NaN loss, a rank that
// exits or hangs, parameters perturbed on one rank, SIGTERM to a rank or to mpirun, a failed
// save), each at the start of one update on one rank.
#pragma once
#include <cstdint>
#include <string>

namespace pn {

struct Fault {
  std::string kind;  // "" when none
  int64_t update = -1;
  int rank = 0;
};
// Throws std::invalid_argument naming the spec and the forms it may take.
Fault parse_fault(const std::string& spec);

}  // namespace pn
