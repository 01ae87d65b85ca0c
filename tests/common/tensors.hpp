// Test data on any backend: seeded random host tensors (never zeros), copies to and from a backend's memory,
// and poisoning (NaN bytes) of outputs before a run, so a kernel that skips an element is caught.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/backend.hpp"
#include "runtime/bf16.hpp"

namespace kiln::test {

// N(0, stddev) values as bf16 bit patterns / as floats.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float stddev = 1.0f);
std::vector<float> random_f32(size_t n, uint64_t seed, float lo, float hi);

template <typename T>
runtime::Buffer upload(runtime::Backend& b, const std::vector<T>& host) {
    return runtime::upload_buffer(b, host.data(), host.size() * sizeof(T));
}

template <typename T>
std::vector<T> download(runtime::Backend& b, const runtime::Buffer& buf, size_t count) {
    std::vector<T> out(count);
    if (count) b.download(out.data(), buf.addr(), count * sizeof(T));
    return out;
}

// 0xFF bytes: NaN in bf16 and fp32, -1 in integers.
void poison(runtime::Stream& s, const runtime::Buffer& buf);

}  // namespace kiln::test
