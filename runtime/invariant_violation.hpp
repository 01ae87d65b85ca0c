// Thrown by the check_invariants() of stateful bookkeeping (memory pools, the prefix cache): the
// structure is inconsistent. The message names the violated rule and the objects involved.
#pragma once

#include "runtime/error.hpp"

namespace kiln {

class InvariantViolation : public Error {
public:
    using Error::Error;
};

}  // namespace kiln
