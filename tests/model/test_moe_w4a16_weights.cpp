// moe_w4a16 weight formats and repacking (model/weights/moe_w4a16): the layout is an exact permutation of the
// checkpoint (every element dequantises to the same value), layouts and formats are checked before a kernel
// reads them, bad inputs are refused, and the bit tricks of the fused dequantisation reproduce the unfused
// bf16 rounding for every code and scale.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/weights/moe_w4a16.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::weights;

namespace {

struct RandomMatrix {
    std::vector<std::byte> packed, scale;
    CheckpointMatrix view() const { return {packed, scale}; }
};

RandomMatrix random_matrix(W4Format f, int n, int k, std::mt19937& rng, bool wide = false) {
    RandomMatrix m;
    std::uniform_int_distribution<int> byte(0, 255);
    const size_t packed_bytes = f == W4Format::int4_g32_bf16 ? size_t(n) * (k / 8) * 4 : size_t(n) * (k / 2);
    m.packed.resize(packed_bytes);
    for (auto& b : m.packed) b = std::byte(byte(rng));
    const size_t groups = size_t(n) * (k / 32);
    if (f == W4Format::int4_g32_bf16) {
        m.scale.resize(groups * 2);
        std::uniform_real_distribution<float> sd(0.002f, 0.05f);
        for (size_t i = 0; i < groups; ++i) {
            float v = sd(rng);
            uint32_t u;
            std::memcpy(&u, &v, 4);
            const uint16_t b = static_cast<uint16_t>(u >> 16);
            std::memcpy(m.scale.data() + 2 * i, &b, 2);
        }
    } else {
        m.scale.resize(groups);
        std::uniform_int_distribution<int> sd(wide ? 110 : 100, wide ? 140 : 128);
        for (auto& b : m.scale) b = std::byte(sd(rng));
    }
    return m;
}

float checkpoint_value(W4Format f, const RandomMatrix& m, int k, int row, int col) {
    return f == W4Format::int4_g32_bf16 ? int4_value(m.packed, m.scale, k, row, col)
                                        : mxfp4_value(m.packed, m.scale, k, row, col);
}

void check_round_trip(W4Format f, W4Layout l, bool gate_up, int experts, int n, int k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<RandomMatrix> mats;
    const int parts = gate_up ? 2 : 1;
    for (int i = 0; i < experts * parts; ++i) mats.push_back(random_matrix(f, n, k, rng));
    const PreparedMoeWeights w = prepare_moe_weights(
        f, l, gate_up, experts, n, k, [&](int e, int part) { return mats[e * parts + part].view(); });
    const int sbr = layout_superblock_rows(l);
    CHECK(w.n_pad % sbr == 0);
    CHECK(w.n_pad >= (gate_up ? 2 * n : n));
    CHECK(w.k_pad % 64 == 0);
    CHECK(w.k_pad >= k);
    CHECK(w.expert_stride == uint64_t(w.n_pad / sbr) * (w.k_pad / 64) * layout_record_bytes(f, l));
    CHECK(w.bytes.size() == w.expert_stride * experts);
    std::vector<float> out(size_t(parts) * n * k);
    for (int e = 0; e < experts; ++e) {
        std::fill(out.begin(), out.end(), std::nanf(""));
        dequantize_prepared(w, e, out);
        int mismatches = 0;
        for (int part = 0; part < parts; ++part)
            for (int r = 0; r < n; ++r)
                for (int c = 0; c < k; ++c) {
                    const float want = checkpoint_value(f, mats[e * parts + part], k, r, c);
                    const float got = out[(size_t(part) * n + r) * k + c];
                    if (std::memcmp(&want, &got, 4) != 0) ++mismatches;
                }
        CHECK(mismatches == 0);
    }
}

// ---- bf16 emulation for the dequantisation algebra ----

float bf16_to_float(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round a double (exactly representable product or difference of bf16 values) to bf16, nearest-even,
// with subnormals and overflow to infinity.
uint16_t double_to_bf16(double x) {
    if (std::isnan(x)) return 0x7FC0;
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    double a = std::fabs(x);
    if (a == 0.0) return sign;
    int exp;
    std::frexp(a, &exp);  // a = f * 2^exp, f in [0.5, 1)
    // bf16 has 8 significant bits; normal exponents of the leading bit down to -126.
    int lead = exp - 1;
    int quantum_exp = std::max(lead, -126) - 7;  // value of the last mantissa bit
    double q = std::ldexp(a, -quantum_exp);      // integer part = mantissa with implicit bit
    double r = std::nearbyint(q);                // default rounding mode: nearest-even
    double v = std::ldexp(r, quantum_exp);
    if (v >= std::ldexp(1.0, 128)) return sign | 0x7F80;
    float fv = static_cast<float>(v);  // exact: v has at most 8 significant bits in float range
    uint32_t u;
    std::memcpy(&u, &fv, 4);
    return sign | static_cast<uint16_t>((u >> 16) & 0x7FFF);
}

uint16_t bf16_mul(uint16_t a, uint16_t b) { return double_to_bf16(double(bf16_to_float(a)) * double(bf16_to_float(b))); }
uint16_t bf16_sub(uint16_t a, uint16_t b) { return double_to_bf16(double(bf16_to_float(a)) - double(bf16_to_float(b))); }

}  // namespace

TEST_CASE("moe_w4a16: repacking is an exact permutation of the checkpoint") {
    for (W4Format f : {W4Format::int4_g32_bf16, W4Format::mxfp4_g32_e8m0}) {
        for (W4Layout l : {W4Layout::decode_mma16, W4Layout::prefill_mma16}) {
            CAPTURE(to_string(f));
            CAPTURE(to_string(l));
            check_round_trip(f, l, false, 3, 128, 192, 1);   // aligned
            check_round_trip(f, l, true, 2, 64, 128, 2);     // gate_up, aligned
            check_round_trip(f, l, false, 2, 72, 96, 3);     // odd N and K (padding)
            check_round_trip(f, l, true, 2, 40, 160, 4);     // odd intermediate, odd K
            check_round_trip(f, l, false, 1, 7168 / 16, 2048 / 8, 5);  // a slice of the K2 down shape
        }
    }
}

TEST_CASE("moe_w4a16: padding is zero weights") {
    std::mt19937 rng(7);
    for (W4Format f : {W4Format::int4_g32_bf16, W4Format::mxfp4_g32_e8m0}) {
        const RandomMatrix m = random_matrix(f, 8, 32, rng);
        const PreparedMoeWeights w =
            prepare_moe_weights(f, W4Layout::decode_mma16, false, 1, 8, 32, [&](int, int) { return m.view(); });
        const int blocks = layout_superblock_rows(W4Layout::decode_mma16) / 16;
        CHECK(w.n_pad == blocks * 16);
        CHECK(w.k_pad == 64);
        // Every layout element outside [8, 32) decodes to zero: check through a wider logical view by
        // re-preparing with the padded shape's zero matrix would need a second source; instead decode
        // the raw words: all padded nibbles are the zero code.
        const int rec = layout_record_bytes(f, W4Layout::decode_mma16);
        CHECK(w.bytes.size() == size_t(rec));
        int nonzero_pad = 0;
        for (int blk = 1; blk < blocks; ++blk)  // rows 16.. are padding
            for (int i = 0; i < 512; i += 4) {
                uint32_t word;
                std::memcpy(&word, w.bytes.data() + blk * 512 + i, 4);
                const uint32_t zero = f == W4Format::int4_g32_bf16 ? 0x88888888u : 0u;
                if (word != zero) ++nonzero_pad;
            }
        CHECK(nonzero_pad == 0);
    }
}

TEST_CASE("moe_w4a16: layouts and formats are checked at dispatch") {
    std::mt19937 rng(9);
    const RandomMatrix m = random_matrix(W4Format::int4_g32_bf16, 64, 64, rng);
    const PreparedMoeWeights w = prepare_moe_weights(W4Format::int4_g32_bf16, W4Layout::prefill_mma16, false, 1, 64,
                                                     64, [&](int, int) { return m.view(); });
    CHECK_NOTHROW(require_layout(w, W4Layout::prefill_mma16, W4Format::int4_g32_bf16, "prefill"));
    try {
        require_layout(w, W4Layout::decode_mma16, W4Format::int4_g32_bf16, "decode");
        FAIL("prefill-packed weights were accepted by the decode kernel");
    } catch (const kiln::InvalidArgument& e) {
        const std::string msg = e.what();
        CHECK(msg.find("decode_mma16") != std::string::npos);
        CHECK(msg.find("prefill_mma16") != std::string::npos);
    }
    CHECK_THROWS_AS(require_layout(w, W4Layout::prefill_mma16, W4Format::mxfp4_g32_e8m0, "prefill"),
                    kiln::InvalidArgument);
}

TEST_CASE("moe_w4a16: bad inputs are refused") {
    std::mt19937 rng(11);
    const RandomMatrix good = random_matrix(W4Format::int4_g32_bf16, 16, 64, rng);
    auto src = [&](int, int) { return good.view(); };
    CHECK_THROWS_AS(prepare_moe_weights(W4Format::int4_g32_bf16, W4Layout::decode_mma16, false, 1, 16, 48, src),
                    kiln::InvalidArgument);  // K % 32
    CHECK_THROWS_AS(prepare_moe_weights(W4Format::int4_g32_bf16, W4Layout::decode_mma16, false, 1, 16, 96, src),
                    kiln::InvalidArgument);  // byte sizes do not match the shape
    CHECK_THROWS_AS(prepare_moe_weights(W4Format::int4_g32_bf16, W4Layout::decode_mma16, false, 0, 16, 64, src),
                    kiln::InvalidArgument);
    RandomMatrix nan_scale = random_matrix(W4Format::mxfp4_g32_e8m0, 16, 64, rng);
    nan_scale.scale[5] = std::byte{255};
    CHECK_THROWS_AS(prepare_moe_weights(W4Format::mxfp4_g32_e8m0, W4Layout::decode_mma16, false, 1, 16, 64,
                                        [&](int, int) { return nan_scale.view(); }),
                    kiln::InvalidArgument);
}

TEST_CASE("moe_w4a16: wide MXFP4 scales are detected") {
    std::mt19937 rng(13);
    RandomMatrix m = random_matrix(W4Format::mxfp4_g32_e8m0, 16, 64, rng);
    for (auto& b : m.scale) b = std::byte{120};
    auto prep = [&]() {
        return prepare_moe_weights(W4Format::mxfp4_g32_e8m0, W4Layout::decode_mma16, false, 1, 16, 64,
                                   [&](int, int) { return m.view(); });
    };
    CHECK_FALSE(prep().wide_scales);
    m.scale[3] = std::byte{128};
    CHECK_FALSE(prep().wide_scales);
    m.scale[3] = std::byte{129};
    CHECK(prep().wide_scales);
}

TEST_CASE("moe_w4a16: INT4 subtract-then-scale trick equals the unfused bf16 dequantisation") {
    // Kernel: bf16(128 + code) via bit OR, minus 136 (exact), times the scale (one rounding).
    // Unfused: bf16 of (code - 8) * scale. Every code against every finite bf16 scale.
    int mismatches = 0;
    for (unsigned code = 0; code < 16; ++code) {
        const uint16_t magic = static_cast<uint16_t>(0x4300 | code);
        const uint16_t centred = bf16_sub(magic, 0x4308);
        CHECK(bf16_to_float(centred) == float(int(code) - 8));
        for (uint32_t s = 0; s < 0x10000; ++s) {
            const float sf = bf16_to_float(static_cast<uint16_t>(s));
            if (!std::isfinite(sf)) continue;
            const uint16_t fused = bf16_mul(centred, static_cast<uint16_t>(s));
            const uint16_t unfused = double_to_bf16(double(int(code) - 8) * double(sf));
            if (fused != unfused && !(bf16_to_float(fused) == 0.0f && bf16_to_float(unfused) == 0.0f)) ++mismatches;
        }
    }
    CHECK(mismatches == 0);
}

TEST_CASE("moe_w4a16: MXFP4 exponent-placement trick equals the unfused bf16 dequantisation") {
    int mismatches = 0;
    for (unsigned code = 0; code < 16; ++code) {
        // The kernel's bits: magnitude at bf16 bits 6..8, sign at bit 15.
        const uint16_t bits = static_cast<uint16_t>(((code & 7u) << 6) | ((code & 8u) << 12));
        CHECK(double(bf16_to_float(bits)) == std::ldexp(double(e2m1_value(code)), -126));
        for (unsigned s = 0; s < 255; ++s) {
            const uint16_t unfused = double_to_bf16(std::ldexp(double(e2m1_value(code)), int(s) - 127));
            if (s <= 128) {  // one multiply by 2^(s-1)
                const uint16_t mult = static_cast<uint16_t>((s + 126) << 7);
                if (bf16_mul(bits, mult) != unfused) ++mismatches;
            }
            // wide path (any scale): x 2^126, then x 2^(s-127) (s = 0 is the subnormal 2^-127)
            const uint16_t exact = bf16_mul(bits, 0x7E80);
            const uint16_t pow2 = s ? static_cast<uint16_t>(s << 7) : uint16_t{0x0040};
            if (bf16_mul(exact, pow2) != unfused) ++mismatches;
        }
    }
    CHECK(mismatches == 0);
}
