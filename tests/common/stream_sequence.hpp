// One sequence of Stream calls, written against the abstract interface only (runtime/backend.hpp), that every
// backend must run with the same result: allocations, fills (whole and partial), an upload into a staging
// buffer, a copy out of it, a kernel launch between two event records, a second stream that waits on the
// second event and downloads the output, the elapsed time between the events, and the backend's synchronous
// copies. The kernel is the caller's (a trivial host kernel in the runtime suite, a real family through a
// dispatcher in the jit suites); the sequence checks its output against the caller's expectation and that
// nothing around the output was touched. Header-only, so the runtime tests need no other library.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/backend.hpp"

namespace kiln::test {

// A kernel reading `input` (32-bit words at `in`) and writing `expect.size()` words at `out`.
struct SequenceKernel {
    std::string name;
    std::vector<uint32_t> input;
    std::vector<uint32_t> expect;
    std::function<void(runtime::Stream& s, uint64_t in, uint64_t out)> launch;
};

inline void run_stream_sequence(runtime::Backend& b, const SequenceKernel& k) {
    CAPTURE(b.name());
    CAPTURE(k.name);
    constexpr uint32_t k_poison = 0xa5a5a5a5u;
    constexpr size_t k_guard_words = 4;  // past the output: partly filled below, the rest must keep the poison
    const size_t in_bytes = k.input.size() * 4, out_words = k.expect.size(), out_bytes = out_words * 4;
    REQUIRE(in_bytes > 0);
    REQUIRE(out_words > 0);
    b.make_current();
    std::unique_ptr<runtime::Stream> s = b.create_stream(), s2 = b.create_stream();
    REQUIRE(&s->backend() == &b);
    CHECK(s->kind() == b.kind());
    std::unique_ptr<runtime::Event> start = b.create_event(), stop = b.create_event();
    CHECK(start->kind() == b.kind());
    CHECK(start->query());  // never recorded

    runtime::Buffer in = b.alloc(in_bytes), stage = b.alloc(in_bytes), out = b.alloc(out_bytes + 4 * k_guard_words);
    for (const runtime::Buffer* buf : {&in, &stage, &out}) {
        REQUIRE(static_cast<bool>(*buf));
        CHECK(buf->backend() == &b);
    }
    CHECK(in.size() == in_bytes);
    CHECK(in.addr() != stage.addr());

    s->fill_u32(out.addr(), k_poison, out_words + k_guard_words);
    s->fill_u8(stage.addr(), 0x5a, in_bytes);
    // Partial fills write exactly what they are asked to: 3 bytes of guard word 0, guard words 1 and 2.
    s->fill_u8(out.addr() + out_bytes, 0x11, 3);
    s->fill_u32(out.addr() + out_bytes + 4, 0x22334455u, 2);
    s->upload(stage.addr(), k.input.data(), in_bytes);  // over the fill: stream order
    s->copy(in.addr(), stage.addr(), in_bytes);
    s->record(*start);
    k.launch(*s, in.addr(), out.addr());
    s->record(*stop);

    // The second stream is ordered after the kernel by the event alone.
    std::vector<uint32_t> got(out_words + k_guard_words, 0);
    s2->wait(*stop);
    s2->download(got.data(), out.addr(), got.size() * 4);
    s2->synchronize();
    CHECK(stop->query());
    const std::vector<uint32_t> body(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(out_words));
    long wrong = 0;
    for (size_t i = 0; i < out_words; ++i) wrong += body[i] != k.expect[i];
    CHECK_MESSAGE(wrong == 0, wrong << " of " << out_words << " output words differ");
    uint32_t guard0 = 0;
    const uint8_t want0[4] = {0x11, 0x11, 0x11, 0xa5};
    std::memcpy(&guard0, want0, 4);
    CHECK(got[out_words] == guard0);
    CHECK(got[out_words + 1] == 0x22334455u);
    CHECK(got[out_words + 2] == 0x22334455u);
    CHECK(got[out_words + 3] == k_poison);

    s->synchronize();
    stop->synchronize();
    CHECK(stop->elapsed_ms_since(*start) >= 0.0);
    CHECK(start->elapsed_ms_since(*stop) <= 0.0);

    // The copy left its source alone; the backend's synchronous copies round trip.
    std::vector<uint32_t> staged(k.input.size(), 0);
    b.download(staged.data(), stage.addr(), in_bytes);
    CHECK(staged == k.input);
    std::vector<uint32_t> back(k.input.rbegin(), k.input.rend()), again(back.size(), 0);
    b.upload(stage.addr(), back.data(), in_bytes);
    b.download(again.data(), stage.addr(), in_bytes);
    CHECK(again == back);
    runtime::Buffer copy = runtime::upload_buffer(b, k.input.data(), in_bytes);
    std::vector<uint32_t> copied(k.input.size(), 0);
    b.download(copied.data(), copy.addr(), in_bytes);
    CHECK(copied == k.input);
}

}  // namespace kiln::test
