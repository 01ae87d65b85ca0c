// Expert weight formats: bit-exact dequantisation of hand-packed INT4 and MXFP4 words, quantise/dequantise
// round trips within each format's error bound, and the scalar conversions they rest on.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "model/dtype.hpp"
#include "model/expert_format.hpp"
#include "runtime/bf16.hpp"

using namespace kiln::model;
namespace runtime = kiln::runtime;

namespace {

std::vector<std::byte> u32_bytes(const std::vector<uint32_t>& words) {
    std::vector<std::byte> b(words.size() * 4);
    std::memcpy(b.data(), words.data(), b.size());
    return b;
}
std::vector<std::byte> u16_bytes(const std::vector<uint16_t>& v) {
    std::vector<std::byte> b(v.size() * 2);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}
std::vector<std::byte> u8_bytes(const std::vector<uint8_t>& v) {
    std::vector<std::byte> b(v.size());
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}
std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

}  // namespace

TEST_CASE("bf16 and f16 scalar conversions") {
    CHECK(runtime::float_to_bf16(1.0f) == 0x3F80);
    CHECK(runtime::float_to_bf16(-2.0f) == 0xC000);
    CHECK(runtime::float_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);  // tie → even
    CHECK(runtime::float_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);  // tie → even (up)
    CHECK(runtime::float_to_bf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);  // above the tie
    CHECK(std::isnan(runtime::bf16_to_float(runtime::float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(runtime::bf16_to_float(0x3F00) == 0.5f);
    CHECK(runtime::bf16_to_float(0xC040) == -3.0f);
    CHECK(runtime::f16_to_float(0x3C00) == 1.0f);
    CHECK(runtime::f16_to_float(0xC000) == -2.0f);
    CHECK(runtime::f16_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
    CHECK(runtime::f16_to_float(0x03FF) == std::ldexp(1023.0f, -24));
    CHECK(runtime::f16_to_float(0x7BFF) == 65504.0f);
    CHECK(std::isinf(runtime::f16_to_float(0xFC00)));
    CHECK(runtime::f16_to_float(0xFC00) < 0);
    CHECK(std::isnan(runtime::f16_to_float(0x7E00)));
}

TEST_CASE("E2M1 and E8M0 code tables") {
    const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (uint8_t i = 0; i < 8; ++i) {
        CHECK(e2m1_value(i) == mags[i]);
        CHECK(e2m1_value(uint8_t(i | 8)) == -mags[i]);
    }
    CHECK(e8m0_value(127) == 1.0f);
    CHECK(e8m0_value(128) == 2.0f);
    CHECK(e8m0_value(120) == 1.0f / 128);
    CHECK(e8m0_value(0) == std::ldexp(1.0f, -127));
    CHECK(std::isnan(e8m0_value(255)));
}

TEST_CASE("INT4 pack-quantized: hand-packed words dequantise bit-exactly") {
    // 2 rows × 64 columns: 8 words per row, 2 scale groups per row.
    std::vector<uint32_t> words = {
        // row 0, group 0 (scale 0.5): LSB-first nibbles F,E,...,8 then 7,...,0, then all 8, then F + seven 0
        0x89ABCDEFu, 0x01234567u, 0x88888888u, 0x0000000Fu,
        // row 0, group 1 (scale 1.0): all zero codes
        0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u,
        // row 1, group 0 (scale 1.0): zero
        0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u,
        // row 1, group 1 (scale 2.0): nibbles 0,F,E,D,C,B,A,9
        0x9ABCDEF0u, 0x88888888u, 0x88888888u, 0x88888888u,
    };
    std::vector<uint16_t> scales = {0x3F00, 0x3F80, 0x3F80, 0x4000};  // 0.5, 1, 1, 2
    std::vector<float> want(128, 0.0f);
    const float r0g0[32] = {3.5f, 3, 2.5f, 2, 1.5f, 1, 0.5f, 0, -0.5f, -1, -1.5f, -2, -2.5f, -3, -3.5f, -4,
                            0, 0, 0, 0, 0, 0, 0, 0, 3.5f, -4, -4, -4, -4, -4, -4, -4};
    for (int k = 0; k < 32; ++k) want[size_t(k)] = r0g0[k];
    const float r1g1[8] = {-16, 14, 12, 10, 8, 6, 4, 2};
    for (int k = 0; k < 8; ++k) want[size_t(64 + 32 + k)] = r1g1[k];

    std::vector<float> out = poisoned(128);
    dequantize_int4_g32(u32_bytes(words), u16_bytes(scales), 2, 64, out);
    for (size_t i = 0; i < 128; ++i) {
        INFO("element ", i);
        CHECK(out[i] == want[i]);
    }
    CHECK_THROWS(dequantize_int4_g32(u32_bytes(words), u16_bytes(scales), 2, 48, out));  // K not a multiple of 32
}

TEST_CASE("MXFP4 pack-quantized: hand-packed bytes dequantise bit-exactly") {
    // 2 rows × 64 columns: 32 bytes per row, 2 E8M0 scales per row.
    std::vector<uint8_t> bytes(64, 0);
    bytes[0] = 0x9A;  // k0 = A (−1), k1 = 9 (−0.5)
    bytes[1] = 0x71;  // k2 = 1 (0.5), k3 = 7 (6)
    bytes[2] = 0xF8;  // k4 = 8 (−0), k5 = F (−6)
    bytes[3] = 0x53;  // k6 = 3 (1.5), k7 = 5 (3)
    bytes[4] = 0x64;  // k8 = 4 (2), k9 = 6 (4)
    bytes[16] = 0x2E;  // row 0, k32 = E (−4), k33 = 2 (1)
    bytes[32 + 31] = 0xB7;  // row 1, k62 = 7 (6), k63 = B (−1.5)
    std::vector<uint8_t> scales = {128, 125, 127, 120};  // ×2, ×1/4, ×1, ×1/128
    std::vector<float> want(128, 0.0f);
    const float r0[10] = {-1, -0.5f, 0.5f, 6, -0.0f, -6, 1.5f, 3, 2, 4};
    for (int k = 0; k < 10; ++k) want[size_t(k)] = r0[k] * 2;
    want[32] = -4 * 0.25f;
    want[33] = 1 * 0.25f;
    want[64 + 62] = 6.0f / 128;
    want[64 + 63] = -1.5f / 128;

    std::vector<float> out = poisoned(128);
    dequantize_mxfp4_g32(u8_bytes(bytes), u8_bytes(scales), 2, 64, out);
    for (size_t i = 0; i < 128; ++i) {
        INFO("element ", i);
        CHECK(out[i] == want[i]);
    }
    CHECK(std::signbit(out[4]));  // −0 decodes as negative zero
}

TEST_CASE("quantisers pack exactly what the hand-written layout says") {
    // Values exactly representable in each format survive bit-exactly, and the packed bytes are the
    // ones computed by hand.
    std::vector<float> w(32, 0.0f);
    w[0] = 7.0f;    // code 15
    w[1] = -8.0f;   // code 0 (not reached by the symmetric scale: clamps at −8 only if scaled so)
    w[2] = -7.0f;   // code 1
    w[3] = 1.0f;    // code 9
    PackedMatrix p = quantize_int4_g32(w, 1, 32);
    REQUIRE(p.scale.size() == 2);
    uint16_t s;
    std::memcpy(&s, p.scale.data(), 2);
    // amax 8 → scale 8/7 rounded to bf16 (0x3F92 = 1.140625); codes round(w / scale)
    CHECK(s == 0x3F92);
    uint32_t word0;
    std::memcpy(&word0, p.packed.data(), 4);
    CHECK((word0 & 0xF) == 8 + 6);         // 7 / 1.140625 = 6.14 → 6
    CHECK(((word0 >> 4) & 0xF) == 8 - 7);  // −8 / 1.140625 = −7.01 → −7
    CHECK(((word0 >> 8) & 0xF) == 8 - 6);  // −6.14 → −6
    CHECK(((word0 >> 12) & 0xF) == 8 + 1); // 0.877 → 1
    CHECK(((word0 >> 16) & 0xF) == 8);     // zeros

    // MXFP4: amax 6 → scale byte 127; the ties 0.25, 0.75, 2.5, 5 go to the even codes 0, 1.0, 2, 4.
    std::vector<float> m(32, 0.0f);
    m[0] = 6.0f;
    m[1] = 0.25f;
    m[2] = 0.75f;
    m[3] = -2.5f;
    m[4] = 5.0f;
    m[5] = -0.3f;
    PackedMatrix q = quantize_mxfp4_g32(m, 1, 32);
    CHECK(uint8_t(q.scale[0]) == 127);
    CHECK(uint8_t(q.packed[0]) == 0x07);  // k0 = 6 (7), k1 = 0.25 → 0
    CHECK(uint8_t(q.packed[1]) == 0xC2);  // k2 = 1.0 (2), k3 = −2 (C)
    CHECK(uint8_t(q.packed[2]) == 0x96);  // k4 = 4 (6), k5 = −0.5 (9)
    // amax 0.75 → e = ceil(log2(0.125)) = −3 → byte 124, and 0.75 · 8 = 6 exactly
    std::vector<float> small(32, 0.0f);
    small[7] = -0.75f;
    PackedMatrix r = quantize_mxfp4_g32(small, 1, 32);
    CHECK(uint8_t(r.scale[0]) == 124);
    CHECK(uint8_t(r.packed[3]) == 0xF0);  // k7 (odd, high nibble) = −6
}

TEST_CASE("quantise → dequantise stays within each format's error bound on random weights") {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t rows = 24, cols = 96;
    std::vector<float> w(size_t(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) {
        float row_scale = std::ldexp(1.0f, int(i / size_t(cols)) % 7 - 3);  // rows span 2^-3 .. 2^3
        w[i] = nd(rng) * row_scale;
    }

    SUBCASE("int4") {
        PackedMatrix p = quantize_int4_g32(w, rows, cols);
        std::vector<float> d = poisoned(w.size());
        dequantize_int4_g32(p.packed, p.scale, rows, cols, d);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t g = 0; g < cols / 32; ++g) {
                uint16_t sb;
                std::memcpy(&sb, p.scale.data() + (r * (cols / 32) + g) * 2, 2);
                float scale = runtime::bf16_to_float(sb);
                CHECK(scale > 0);
                for (int64_t k = g * 32; k < g * 32 + 32; ++k) {
                    float x = w[size_t(r * cols + k)], y = d[size_t(r * cols + k)];
                    REQUIRE(std::isfinite(y));
                    // half a step, plus the clamp at 7 when bf16 rounded the scale down (< 1% of a step)
                    CHECK(std::fabs(x - y) <= 0.51f * scale);
                }
            }
    }
    SUBCASE("mxfp4") {
        PackedMatrix p = quantize_mxfp4_g32(w, rows, cols);
        std::vector<float> d = poisoned(w.size());
        dequantize_mxfp4_g32(p.packed, p.scale, rows, cols, d);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t g = 0; g < cols / 32; ++g) {
                float unit = e8m0_value(uint8_t(p.scale[size_t(r * (cols / 32) + g)]));
                float amax = 0;
                for (int64_t k = g * 32; k < g * 32 + 32; ++k) amax = std::max(amax, std::fabs(w[size_t(r * cols + k)]));
                CHECK(amax <= 6 * unit);      // nothing clips
                CHECK(amax > 3 * unit);       // and the scale is the smallest that fits
                for (int64_t k = g * 32; k < g * 32 + 32; ++k) {
                    float x = w[size_t(r * cols + k)], y = d[size_t(r * cols + k)];
                    REQUIRE(std::isfinite(y));
                    float m = std::fabs(x) / unit;
                    float half_step = m <= 2 ? 0.25f : (m <= 4 ? 0.5f : 1.0f);
                    CHECK(std::fabs(x - y) <= half_step * unit);
                }
            }
    }
}

TEST_CASE("expert format names") {
    CHECK(parse_expert_format("mxfp4") == ExpertFormat::mxfp4_g32);
    CHECK(parse_expert_format("int4") == ExpertFormat::int4_g32);
    CHECK(parse_expert_format("bf16") == ExpertFormat::bf16);
    CHECK_FALSE(parse_expert_format("fp8").has_value());
    CHECK(expert_format_name(ExpertFormat::mxfp4_g32) == "mxfp4");
    CHECK(packed_shape(ExpertFormat::int4_g32, 96, 128) == std::vector<int64_t>{96, 16});
    CHECK(packed_shape(ExpertFormat::mxfp4_g32, 96, 128) == std::vector<int64_t>{96, 64});
    CHECK(scale_shape(96, 128) == std::vector<int64_t>{96, 4});
}
