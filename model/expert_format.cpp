#include "model/expert_format.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "model/dtype.hpp"
#include "runtime/error.hpp"
#include "runtime/bf16.hpp"

namespace kiln::model {

namespace {

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

void check_dims(const char* what, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0 || cols % kExpertGroupSize != 0)
        throw InvalidArgument(fmt::format(
            "{}: matrix [{}, {}] needs positive dims and K a multiple of {}", what, rows, cols,
            kExpertGroupSize));
}

void check_size(const char* what, size_t have, size_t want) {
    if (have != want)
        throw InvalidArgument(fmt::format("{}: buffer holds {} bytes, expected {}", what, have, want));
}

template <typename T>
T load_le(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));  // kiln targets little-endian hosts only
    return v;
}

template <typename T>
void store_le(std::byte* p, T v) {
    std::memcpy(p, &v, sizeof(T));
}

// Index (0..7) of the E2M1 magnitude nearest to m ≥ 0; ties go to the even index.
uint8_t nearest_e2m1_index(float m) {
    if (m <= 0.25f) return 0;
    if (m < 0.75f) return 1;
    if (m <= 1.25f) return 2;
    if (m < 1.75f) return 3;
    if (m <= 2.5f) return 4;
    if (m < 3.5f) return 5;
    if (m <= 5.0f) return 6;
    return 7;
}

}  // namespace

std::string_view expert_format_name(ExpertFormat f) {
    switch (f) {
        case ExpertFormat::bf16: return "bf16";
        case ExpertFormat::int4_g32: return "int4";
        case ExpertFormat::mxfp4_g32: return "mxfp4";
    }
    return "?";
}

std::optional<ExpertFormat> parse_expert_format(std::string_view s) {
    if (s == "bf16") return ExpertFormat::bf16;
    if (s == "int4" || s == "int4_g32") return ExpertFormat::int4_g32;
    if (s == "mxfp4" || s == "mxfp4_g32") return ExpertFormat::mxfp4_g32;
    return std::nullopt;
}

float e2m1_value(uint8_t nibble) {
    float mag = kE2M1[nibble & 0x7u];
    return (nibble & 0x8u) ? -mag : mag;
}

float e8m0_value(uint8_t s) {
    if (s == 0xff) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, int(s) - 127);
}

PackedMatrix quantize_int4_g32(std::span<const float> w, int64_t rows, int64_t cols) {
    check_dims("quantize_int4_g32", rows, cols);
    check_size("quantize_int4_g32", w.size(), size_t(rows * cols));
    const int64_t groups = cols / kExpertGroupSize;
    PackedMatrix out;
    out.packed.resize(size_t(rows * (cols / 8)) * 4);
    out.scale.resize(size_t(rows * groups) * 2);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
            const float* x = w.data() + r * cols + g * kExpertGroupSize;
            float amax = 0.0f;
            for (int64_t i = 0; i < kExpertGroupSize; ++i) amax = std::max(amax, std::fabs(x[i]));
            uint16_t sbits = runtime::float_to_bf16(amax / 7.0f);
            float scale = runtime::bf16_to_float(sbits);
            store_le<uint16_t>(out.scale.data() + (r * groups + g) * 2, sbits);
            for (int64_t word = 0; word < kExpertGroupSize / 8; ++word) {
                uint32_t packed = 0;
                for (int64_t j = 0; j < 8; ++j) {
                    float q = scale > 0.0f ? std::nearbyint(x[word * 8 + j] / scale) : 0.0f;
                    q = std::min(7.0f, std::max(-8.0f, q));
                    uint32_t code = uint32_t(int(q) + 8);
                    packed |= code << (4 * j);
                }
                int64_t col_word = (g * kExpertGroupSize) / 8 + word;
                store_le<uint32_t>(out.packed.data() + (r * (cols / 8) + col_word) * 4, packed);
            }
        }
    }
    return out;
}

void dequantize_int4_g32(std::span<const std::byte> packed, std::span<const std::byte> scale,
                         int64_t rows, int64_t cols, std::span<float> out) {
    check_dims("dequantize_int4_g32", rows, cols);
    check_size("dequantize_int4_g32 packed", packed.size(), size_t(rows * (cols / 8)) * 4);
    check_size("dequantize_int4_g32 scale", scale.size(), size_t(rows * (cols / 32)) * 2);
    check_size("dequantize_int4_g32 out", out.size(), size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
            uint32_t word = load_le<uint32_t>(packed.data() + (r * (cols / 8) + k / 8) * 4);
            int code = int((word >> (4 * (k % 8))) & 0xFu);
            float s = runtime::bf16_to_float(load_le<uint16_t>(scale.data() + (r * (cols / 32) + k / 32) * 2));
            out[size_t(r * cols + k)] = float(code - 8) * s;
        }
    }
}

PackedMatrix quantize_mxfp4_g32(std::span<const float> w, int64_t rows, int64_t cols) {
    check_dims("quantize_mxfp4_g32", rows, cols);
    check_size("quantize_mxfp4_g32", w.size(), size_t(rows * cols));
    const int64_t groups = cols / kExpertGroupSize;
    PackedMatrix out;
    out.packed.resize(size_t(rows * (cols / 2)));
    out.scale.resize(size_t(rows * groups));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
            const float* x = w.data() + r * cols + g * kExpertGroupSize;
            float amax = 0.0f;
            for (int64_t i = 0; i < kExpertGroupSize; ++i) amax = std::max(amax, std::fabs(x[i]));
            int e = -127;
            if (amax > 0.0f) {
                // smallest e with amax / 2^e ≤ 6
                e = int(std::ceil(std::log2(amax / 6.0f)));
                while (amax / std::ldexp(1.0f, e) > 6.0f) ++e;
                while (e > -127 && amax / std::ldexp(1.0f, e - 1) <= 6.0f) --e;
                e = std::min(127, std::max(-127, e));
            }
            out.scale[size_t(r * groups + g)] = std::byte(uint8_t(e + 127));
            const float inv = std::ldexp(1.0f, -e);
            for (int64_t i = 0; i < kExpertGroupSize; ++i) {
                float v = x[i] * inv;
                uint8_t nib = nearest_e2m1_index(std::fabs(v));
                if (std::signbit(v) && nib != 0) nib |= 0x8u;
                int64_t k = g * kExpertGroupSize + i;
                auto& byte = out.packed[size_t(r * (cols / 2) + k / 2)];
                byte |= std::byte(k % 2 == 0 ? nib : uint8_t(nib << 4));
            }
        }
    }
    return out;
}

void dequantize_mxfp4_g32(std::span<const std::byte> packed, std::span<const std::byte> scale,
                          int64_t rows, int64_t cols, std::span<float> out) {
    check_dims("dequantize_mxfp4_g32", rows, cols);
    check_size("dequantize_mxfp4_g32 packed", packed.size(), size_t(rows * (cols / 2)));
    check_size("dequantize_mxfp4_g32 scale", scale.size(), size_t(rows * (cols / 32)));
    check_size("dequantize_mxfp4_g32 out", out.size(), size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
            uint8_t byte = uint8_t(packed[size_t(r * (cols / 2) + k / 2)]);
            uint8_t nib = (k % 2 == 0) ? (byte & 0x0Fu) : (byte >> 4);
            uint8_t s = uint8_t(scale[size_t(r * (cols / 32) + k / 32)]);
            out[size_t(r * cols + k)] = e2m1_value(nib) * e8m0_value(s);
        }
    }
}

std::vector<std::byte> to_bf16_bytes(std::span<const float> w) {
    std::vector<std::byte> out(w.size() * 2);
    for (size_t i = 0; i < w.size(); ++i) store_le<uint16_t>(out.data() + 2 * i, runtime::float_to_bf16(w[i]));
    return out;
}

std::vector<std::byte> int4_weight_shape_bytes(int64_t rows, int64_t cols) {
    std::vector<std::byte> out(16);
    store_le<int64_t>(out.data(), rows);
    store_le<int64_t>(out.data() + 8, cols);
    return out;
}

std::vector<int64_t> packed_shape(ExpertFormat f, int64_t rows, int64_t cols) {
    switch (f) {
        case ExpertFormat::bf16: return {rows, cols};
        case ExpertFormat::int4_g32: return {rows, cols / 8};
        case ExpertFormat::mxfp4_g32: return {rows, cols / 2};
    }
    return {};
}

std::vector<int64_t> scale_shape(int64_t rows, int64_t cols) { return {rows, cols / kExpertGroupSize}; }

}  // namespace kiln::model
