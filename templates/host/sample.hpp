// The sampler on the host target (contract and semantics: templates/common/sample_params.h): sequences in
// parallel, each the device kernel's steps in index order on one thread (the same radix thresholds and
// Gumbel-max draw, so the same seed and step give the same token as on the device).
#pragma once

#include "host/dense_common.hpp"
#include "common/philox.h"
#include "common/sample_params.h"

namespace kiln_host {

inline u32 sample_key(float f) {
    u32 b;
    __builtin_memcpy(&b, &f, 4);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
inline float sample_unkey(u32 k) {
    const u32 b = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    __builtin_memcpy(&f, &b, 4);
    return f;
}

inline void sample_one(const kiln_params::SampleParams& p, i64 s) {
    const i64 V = p.vocab;
    const kiln_params::SampleSeq q = p.seqs[s];
    const float* l = p.logits + s * p.logits_stride;
    kiln_params::SampleOut* o = p.out + s;
    float mx = -k_inf;
    for (i64 i = 0; i < V; ++i) {
        if (!finite_(l[i])) {
            o->token = -1;
            o->logprob = 0.0f;
            o->nonfinite = 1;
            o->top_count = 0;
            p.tokens_out[s] = -1;
            return;
        }
        mx = l[i] > mx ? l[i] : mx;
    }
    int ntop = q.logprobs < 0 ? 0 : q.logprobs;
    if (ntop > KILN_SAMPLE_MAX_TOP) ntop = KILN_SAMPLE_MAX_TOP;
    float lse = 0.0f;
    if ((q.flags & 1) || ntop > 0) {
        float sum = 0.0f;
        for (i64 i = 0; i < V; ++i) sum += expf_(l[i] - mx);
        lse = mx + logf_(sum);
    }
    const bool pen = p.counts != nullptr && (q.repetition != 1.0f || q.frequency != 0.0f || q.presence != 0.0f);
    u32* cnt = p.counts + s * V;
    const i32 fed = q.feed_src >= 0 && q.feed_src < p.prev_count ? p.prev_tokens[q.feed_src] : -1;
    if (pen) {
        for (i32 j = 0; j < q.gen_count; ++j) {
            const i32 t = p.penalty_tokens[q.gen_begin + j];
            if (t >= 0 && t < V) ++cnt[t];
        }
        if (q.repetition != 1.0f)
            for (i32 j = 0; j < q.prompt_count; ++j) {
                const i32 t = p.penalty_tokens[q.prompt_begin + j];
                if (t >= 0 && t < V) cnt[t] |= 0x80000000u;
            }
        if (fed >= 0 && fed < V) ++cnt[fed];
    }
    auto adjusted = [&](i64 i) -> float {
        float v = l[i];
        if (!pen) return v;
        const u32 c = cnt[i];
        if (c == 0) return v;
        const float n = float(c & 0x7fffffffu);
        if (q.repetition != 1.0f) v = v > 0.0f ? v / q.repetition : v * q.repetition;
        const float f = q.frequency * n;
        return (v - f) - (n > 0.0f ? q.presence : 0.0f);
    };
    i64 token = 0;
    if (!(q.temperature > 0.0f)) {
        float bv = -k_inf;
        token = -1;
        for (i64 i = 0; i < V; ++i) {
            const float v = adjusted(i);
            if (token < 0 || better(v, i, bv, token)) {
                bv = v;
                token = i;
            }
        }
    } else {
        const float inv_t = 1.0f / q.temperature;
        auto zf = [&](i64 i) { return adjusted(i) * inv_t; };
        float zmax = -k_inf;
        for (i64 i = 0; i < V; ++i) {
            const float z = zf(i);
            zmax = z > zmax ? z : zmax;
        }
        float lo = -k_inf;
        if (q.min_p > 0.0f) lo = zmax + logf_(q.min_p);
        if (q.top_k > 0 && q.top_k < V) {
            u32 prefix = 0, mask = 0;
            i64 remain = q.top_k;
            for (int shift = 24; shift >= 0; shift -= 8) {
                u32 hist[256] = {};
                for (i64 i = 0; i < V; ++i) {
                    const u32 k = sample_key(zf(i));
                    if ((k & mask) == prefix) ++hist[(k >> shift) & 255u];
                }
                i64 cum = 0;
                int b = 255;
                for (; b > 0; --b) {
                    if (hist[b] > 0 && cum + i64(hist[b]) >= remain) break;
                    cum += hist[b];
                }
                prefix |= u32(b) << shift;
                mask |= 255u << shift;
                remain -= cum;
            }
            const float t = sample_unkey(prefix);
            lo = t > lo ? t : lo;
        }
        if (q.top_p < 1.0f) {
            float total = 0.0f;
            for (i64 i = 0; i < V; ++i) {
                const float z = zf(i);
                if (z >= lo) total += expf_(z - zmax);
            }
            u32 prefix = 0, mask = 0;
            float remain = q.top_p * total;
            for (int shift = 24; shift >= 0; shift -= 8) {
                float hist[256] = {};
                for (i64 i = 0; i < V; ++i) {
                    const float z = zf(i);
                    const u32 k = sample_key(z);
                    if (z >= lo && (k & mask) == prefix) hist[(k >> shift) & 255u] += expf_(z - zmax);
                }
                float cum = 0.0f;
                int sel = -1, lowest = -1;
                for (int b = 255; b >= 0; --b)
                    if (hist[b] > 0.0f) {
                        lowest = b;
                        if (cum + hist[b] >= remain) {
                            sel = b;
                            break;
                        }
                        cum += hist[b];
                    }
                if (sel < 0) {
                    sel = lowest;
                    cum -= hist[lowest];
                }
                prefix |= u32(sel) << shift;
                mask |= 255u << shift;
                remain -= cum;
            }
            const float t = sample_unkey(prefix);
            lo = t > lo ? t : lo;
        }
        float bv = -k_inf;
        token = -1;
        for (i64 i = 0; i < V; ++i) {
            const float z = zf(i);
            if (z < lo) continue;
            const float u = kiln_params::sample_uniform(q.seed, q.step, u32(i));
            const float v = z - logf_(-logf_(u));
            if (token < 0 || better(v, i, bv, token)) {
                bv = v;
                token = i;
            }
        }
    }
    float pv = k_inf;
    i64 pi = -1;
    for (int r = 0; r < ntop; ++r) {
        float bv = -k_inf;
        i64 bi = -1;
        for (i64 i = 0; i < V; ++i) {
            const float v = l[i];
            if ((v < pv || (v == pv && i > pi)) && (bi < 0 || better(v, i, bv, bi))) {
                bv = v;
                bi = i;
            }
        }
        o->top[r].token = i32(bi);
        o->top[r].logprob = bv - lse;
        pv = bv;
        pi = bi;
    }
    if (pen) {
        for (i32 j = 0; j < q.gen_count; ++j) {
            const i32 t = p.penalty_tokens[q.gen_begin + j];
            if (t >= 0 && t < V) cnt[t] = 0;
        }
        for (i32 j = 0; j < q.prompt_count && q.repetition != 1.0f; ++j) {
            const i32 t = p.penalty_tokens[q.prompt_begin + j];
            if (t >= 0 && t < V) cnt[t] = 0;
        }
        if (fed >= 0 && fed < V) cnt[fed] = 0;
    }
    o->token = i32(token);
    o->logprob = (q.flags & 1) ? l[token] - lse : 0.0f;
    o->nonfinite = 0;
    o->top_count = ntop;
    p.tokens_out[s] = i32(token);
}

inline void sample(const kiln_host_ctx* ctx, const kiln_params::SampleParams& p) {
    for_each(ctx, p.num_seqs, 1, [&](i64 s) { sample_one(p, s); });
}

}  // namespace kiln_host
