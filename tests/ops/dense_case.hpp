// What the op cases of the dense families share: the target of a test backend, bf16 <-> double
// conversions, and a case base that owns its buffers (teardown frees them) and poisons its outputs.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "jit/descriptor.hpp"
#include "runtime/bf16.hpp"
#include "tests/common/backends.hpp"
#include "tests/common/tensors.hpp"
#include "tests/common/tolerance.hpp"
#include "tests/ops/op_case.hpp"

namespace kiln::ops {

inline jit::Target target_of(const test::TestBackend& b) {
    return b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
}

inline std::vector<float> to_f32(const std::vector<uint16_t>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = runtime::bf16_to_float(v[i]);
    return out;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = runtime::float_to_bf16(v[i]);
    return out;
}

class DenseCase : public OpCase {
public:
    void poison(test::TestBackend& b) override {
        for (runtime::Buffer* buf : outputs_) test::poison(*b.stream, *buf);
    }
    void teardown(test::TestBackend&) override {
        for (runtime::Buffer* buf : owned_) buf->reset();
        owned_.clear();
        outputs_.clear();
    }

protected:
    template <typename T>
    void input(runtime::Buffer& buf, runtime::Backend& be, const std::vector<T>& host) {
        buf = test::upload(be, host);
        owned_.push_back(&buf);
    }
    void output(runtime::Buffer& buf, runtime::Backend& be, size_t bytes) {
        buf = be.alloc(bytes);
        owned_.push_back(&buf);
        outputs_.push_back(&buf);
    }
    // "what: <error>" unless within the bound.
    static void expect_within(std::vector<std::string>& bad, const std::string& what, const test::OutputError& e,
                              double bound) {
        if (!e.within(bound)) bad.push_back(what + ": " + e.describe() + " (bound " + std::to_string(bound) + ")");
    }

private:
    std::vector<runtime::Buffer*> owned_, outputs_;
};

}  // namespace kiln::ops
