// Helpers of the dense host kernels (rmsnorm, glu, embedding, attn_res, router, sample): math through
// compiler builtins (no system headers), bf16 loads and stores.
#pragma once

#include "host/prelude.hpp"

namespace kiln_host {

inline float ld(const u16* p, i64 i) { return bf16_to_f32(p[i]); }
inline float expf_(float x) { return __builtin_expf(x); }
inline float logf_(float x) { return __builtin_logf(x); }
inline float tanhf_(float x) { return __builtin_tanhf(x); }
inline float sqrtf_(float x) { return __builtin_sqrtf(x); }
inline float sigmoid_(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
inline bool finite_(float x) { return __builtin_isfinite(x); }
constexpr float k_inf = __builtin_inff();

// (value, index) order of an argmax: the larger value, ties to the lower index.
inline bool better(float v, i64 i, float bv, i64 bi) { return v > bv || (v == bv && i < bi); }

// parallel_for over [0, n) with a lambda taking one index.
template <typename F>
inline void for_each(const kiln_host_ctx* ctx, i64 n, i64 grain, F&& f) {
    auto body = [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) f(i);
    };
    if (n <= grain) {
        body(0, n);
        return;
    }
    parallel_for(ctx, n, grain, body);
}

}  // namespace kiln_host
