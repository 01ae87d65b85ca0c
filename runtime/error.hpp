// Typed errors shared by every layer. Modules derive their own kinds from kiln::Error;
// the CLI and HTTP edges catch kiln::Error and print what() as one line.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The caller passed something malformed (a flag, a shape, a file).
class InvalidArgument : public Error {
public:
    using Error::Error;
};

// A file or directory could not be read or written.
class IoError : public Error {
public:
    using Error::Error;
};

// Something asked for is absent (a cache key, a tensor, a family).
class NotFound : public Error {
public:
    using Error::Error;
};

}  // namespace kiln
