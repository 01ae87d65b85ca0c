#include "tests/common/tensors.hpp"

namespace kiln::test {

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float stddev) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, stddev);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = runtime::float_to_bf16(nd(rng));
    return v;
}

std::vector<float> random_f32(size_t n, uint64_t seed, float lo, float hi) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> ud(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = ud(rng);
    return v;
}

void poison(runtime::Stream& s, const runtime::Buffer& buf) {
    if (buf) s.fill_u8(buf.addr(), 0xFF, buf.size());
}

}  // namespace kiln::test
