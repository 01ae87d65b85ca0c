// Errors raised by the artifact cache. CacheError messages name the file and, where one is
// involved, the key, so the CLI can print them as one line.
#pragma once

#include "runtime/error.hpp"

namespace kiln::cache {

// A cache file is unusable or refused: a tampered blob or manifest, a bad signature, a lock that
// could not be taken in time, a prebuilt layer that cannot be opened.
class CacheError : public Error {
public:
    using Error::Error;
};

}  // namespace kiln::cache
