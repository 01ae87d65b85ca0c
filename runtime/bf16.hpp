// The 16-bit float formats on the host (bit patterns as uint16_t): bfloat16 <-> float, round-to-nearest-even
// like the device's __float2bfloat16_rn, NaN stays NaN; and IEEE half to float, exact.
#pragma once

#include <cmath>
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

inline float f16_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        const float mag = std::ldexp(float(man), -24);  // zero or subnormal, exact in fp32
        return sign ? -mag : mag;
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace kiln::runtime
