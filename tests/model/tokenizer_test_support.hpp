// Shared helpers for the tokenizer tests: temp directories (tests/common/sandbox.hpp) and the
// environment meson passes.
#pragma once

#include <cstdlib>
#include <string>

#include <doctest/doctest.h>

#include "tests/common/sandbox.hpp"

namespace kiln::test {

inline std::string env_or_fail(const char* name) {
    const char* v = std::getenv(name);
    REQUIRE_MESSAGE(v != nullptr, (std::string(name) + " is not set: run the tests through meson test"));
    return v;
}

}  // namespace kiln::test
