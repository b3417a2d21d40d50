// Shared state of the multi-rank test binary (tests/mpi/main.cpp): the world communicator.
// Tests must call every collective unconditionally (EXPECT_, not ASSERT_, before a
// collective), or a failing rank would leave the others waiting.
#pragma once
#include "comm/communicator.h"

namespace pn::test {
Communicator& world();
}
