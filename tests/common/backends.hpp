// The backends a test runs on, each with a dispatcher over one private kernel cache (a temporary directory
// removed at exit) and a stream: the host target (kiln built with host_jit) and the CUDA device (when one is
// usable). Created on first use, shared by the whole test program.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jit/dispatcher.hpp"
#include "runtime/backend.hpp"

namespace kiln::test {

struct TestBackend {
    std::string name;  // "host", "cuda"
    std::unique_ptr<runtime::Backend> backend;
    std::unique_ptr<jit::Dispatcher> disp;
    std::unique_ptr<runtime::Stream> stream;
};

// Null when the target is not available here.
TestBackend* host_backend();
TestBackend* cuda_backend();
// Those available, host first; `only` ("host", "cuda", "" for all) narrows the list.
std::vector<TestBackend*> available_backends(const std::string& only = "");

}  // namespace kiln::test
