// bfloat16 <-> float on the host (bit patterns as uint16_t), round-to-nearest-even like the device's
// __float2bfloat16_rn; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::runtime {

inline float bf16_to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

}  // namespace kiln::runtime
