// The MPI test binary's world: created by its main (the only world object), read by tests.
#pragma once

#include "loom/comm/process_group.hpp"

namespace loom::testing {

comm::ProcessGroup& world();

}  // namespace loom::testing
