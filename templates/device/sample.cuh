// The device sampler (contract and semantics: templates/common/sample_params.h). One CTA of kThreads per
// sequence, every step a pass over the row in thread-strided order with a CTA reduction:
//   max and the nonfinite check; the log-sum-exp (when logprobs are asked); the penalty counts (global
//   atomics into the sequence's `counts` row); then greedy argmax, or: max z, the top-k threshold (a
//   4-pass radix select on the order-preserving bits of z, 8 bits a pass, counts), the min-p threshold,
//   the top-p threshold (the same radix walk over exp(z - zmax) masses), and the Gumbel-max draw; the top
//   logprobs (one argmax pass per entry, each below the previous in (value, id) order); the counts cleared.
#pragma once

#include "device/dense_common.cuh"
#include "common/philox.h"
#include "common/sample_params.h"

namespace kiln_dev {

__device__ __forceinline__ u32 sample_key(float f) {
    const u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float sample_unkey(u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) sample(const kiln_params::SampleParams p) {
    __shared__ float red[32];
    __shared__ int redi[32];
    __shared__ u32 hist[256];
    __shared__ float mhist[256];
    __shared__ int s_bin;
    __shared__ float s_remain;
    __shared__ int s_remain_i;
    const int s = blockIdx.x;
    if (s >= p.num_seqs) return;
    const int tid = threadIdx.x, V = p.vocab;
    const kiln_params::SampleSeq q = p.seqs[s];
    const float* __restrict__ l = p.logits + i64(s) * p.logits_stride;
    kiln_params::SampleOut* o = p.out + s;

    // 1. max, nonfinite
    float mx = -KILN_DEV_INF;
    int bad = 0;
    for (int i = tid; i < V; i += kThreads) {
        const float v = l[i];
        if (!isfinite(v)) bad = 1;
        else mx = fmaxf(mx, v);
    }
    if (__syncthreads_or(bad)) {
        if (tid == 0) {
            o->token = -1;
            o->logprob = 0.0f;
            o->nonfinite = 1;
            o->top_count = 0;
            p.tokens_out[s] = -1;
        }
        return;
    }
    mx = block_max<kThreads>(mx, red);
    // 2. log-sum-exp of the raw logits
    const int ntop = min(max(q.logprobs, 0), KILN_SAMPLE_MAX_TOP);
    float lse = 0.0f;
    if ((q.flags & 1) || ntop > 0) {
        float sum = 0.0f;
        for (int i = tid; i < V; i += kThreads) sum += expf(l[i] - mx);
        lse = mx + logf(block_sum<kThreads>(sum, red));
    }
    // 3. penalty counts: bit 31 marks a prompt token, the rest counts generated occurrences
    const bool pen = p.counts != nullptr && (q.repetition != 1.0f || q.frequency != 0.0f || q.presence != 0.0f);
    u32* cnt = p.counts + i64(s) * V;
    const int fed = q.feed_src >= 0 && q.feed_src < p.prev_count ? p.prev_tokens[q.feed_src] : -1;
    if (pen) {
        for (int j = tid; j < q.gen_count; j += kThreads) {
            const int t = p.penalty_tokens[q.gen_begin + j];
            if (t >= 0 && t < V) atomicAdd(&cnt[t], 1u);
        }
        if (q.repetition != 1.0f)
            for (int j = tid; j < q.prompt_count; j += kThreads) {
                const int t = p.penalty_tokens[q.prompt_begin + j];
                if (t >= 0 && t < V) atomicOr(&cnt[t], 0x80000000u);
            }
        if (tid == 0 && fed >= 0 && fed < V) atomicAdd(&cnt[fed], 1u);
        __syncthreads();
    }
    auto adjusted = [&](int i) -> float {
        float v = l[i];
        if (!pen) return v;
        const u32 c = cnt[i];
        if (c == 0) return v;
        // Explicitly rounded operations: every pass must compute the same z for the same token.
        const float n = float(c & 0x7fffffffu);
        if (q.repetition != 1.0f) v = v > 0.0f ? __fdiv_rn(v, q.repetition) : __fmul_rn(v, q.repetition);
        return __fsub_rn(__fsub_rn(v, __fmul_rn(q.frequency, n)), n > 0.0f ? q.presence : 0.0f);
    };

    int token;
    if (!(q.temperature > 0.0f)) {
        // 4. greedy
        float bv = -KILN_DEV_INF;
        int bi = 0x7fffffff;
        for (int i = tid; i < V; i += kThreads) {
            const float v = adjusted(i);
            if (better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        block_argmax<kThreads>(bv, bi, red, redi);
        token = bi;
    } else {
        // 5. the kept set
        const float inv_t = 1.0f / q.temperature;
        float zmax = -KILN_DEV_INF;
        for (int i = tid; i < V; i += kThreads) zmax = fmaxf(zmax, __fmul_rn(adjusted(i), inv_t));
        zmax = block_max<kThreads>(zmax, red);
        float lo = -KILN_DEV_INF;
        if (q.min_p > 0.0f) lo = zmax + logf(q.min_p);
        if (q.top_k > 0 && q.top_k < V) {
            u32 prefix = 0, mask = 0;
            int remain = q.top_k;
            for (int shift = 24; shift >= 0; shift -= 8) {
                for (int b = tid; b < 256; b += kThreads) hist[b] = 0;
                __syncthreads();
                for (int i = tid; i < V; i += kThreads) {
                    const u32 k = sample_key(__fmul_rn(adjusted(i), inv_t));
                    if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
                }
                __syncthreads();
                if (tid == 0) {
                    int cum = 0, b = 255;
                    for (; b > 0; --b) {
                        if (hist[b] > 0 && cum + int(hist[b]) >= remain) break;
                        cum += int(hist[b]);
                    }
                    s_bin = b;
                    s_remain_i = remain - cum;
                }
                __syncthreads();
                prefix |= u32(s_bin) << shift;
                mask |= 255u << shift;
                remain = s_remain_i;
            }
            lo = fmaxf(lo, sample_unkey(prefix));
        }
        if (q.top_p < 1.0f) {
            float total = 0.0f;
            for (int i = tid; i < V; i += kThreads) {
                const float z = __fmul_rn(adjusted(i), inv_t);
                if (z >= lo) total += expf(z - zmax);
            }
            total = block_sum<kThreads>(total, red);
            u32 prefix = 0, mask = 0;
            float remain = q.top_p * total;
            for (int shift = 24; shift >= 0; shift -= 8) {
                for (int b = tid; b < 256; b += kThreads) mhist[b] = 0.0f;
                __syncthreads();
                for (int i = tid; i < V; i += kThreads) {
                    const float z = __fmul_rn(adjusted(i), inv_t);
                    const u32 k = sample_key(z);
                    if (z >= lo && (k & mask) == prefix) atomicAdd(&mhist[(k >> shift) & 255u], expf(z - zmax));
                }
                __syncthreads();
                if (tid == 0) {
                    float cum = 0.0f;
                    int sel = -1, lowest = -1;
                    for (int b = 255; b >= 0; --b) {
                        const float h = mhist[b];
                        if (h > 0.0f) {
                            lowest = b;
                            if (cum + h >= remain) {
                                sel = b;
                                break;
                            }
                            cum += h;
                        }
                    }
                    if (sel < 0) {  // rounding left a little mass unreached: the last non-empty bin
                        sel = lowest;
                        cum -= mhist[lowest];
                    }
                    s_bin = sel;
                    s_remain = remain - cum;
                }
                __syncthreads();
                prefix |= u32(s_bin) << shift;
                mask |= 255u << shift;
                remain = s_remain;
            }
            lo = fmaxf(lo, sample_unkey(prefix));
        }
        // 6. Gumbel-max draw over the kept set
        float bv = -KILN_DEV_INF;
        int bi = 0x7fffffff;
        for (int i = tid; i < V; i += kThreads) {
            const float z = __fmul_rn(adjusted(i), inv_t);
            if (z >= lo) {
                const float u = kiln_params::sample_uniform(q.seed, q.step, u32(i));
                const float v = z - logf(-logf(u));
                if (better(v, i, bv, bi)) {
                    bv = v;
                    bi = i;
                }
            }
        }
        block_argmax<kThreads>(bv, bi, red, redi);
        token = bi;
    }

    // top logprobs of the raw logits
    float pv = KILN_DEV_INF;
    int pi = -1;
    for (int r = 0; r < ntop; ++r) {
        float bv = -KILN_DEV_INF;
        int bi = 0x7fffffff;
        for (int i = tid; i < V; i += kThreads) {
            const float v = l[i];
            if ((v < pv || (v == pv && i > pi)) && better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        block_argmax<kThreads>(bv, bi, red, redi);
        if (tid == 0) {
            o->top[r].token = bi;
            o->top[r].logprob = bv - lse;
        }
        pv = bv;
        pi = bi;
    }

    if (pen) {  // clear what was counted
        __syncthreads();
        for (int j = tid; j < q.gen_count; j += kThreads) {
            const int t = p.penalty_tokens[q.gen_begin + j];
            if (t >= 0 && t < V) cnt[t] = 0u;
        }
        for (int j = tid; j < q.prompt_count && q.repetition != 1.0f; j += kThreads) {
            const int t = p.penalty_tokens[q.prompt_begin + j];
            if (t >= 0 && t < V) cnt[t] = 0u;
        }
        if (tid == 0 && fed >= 0 && fed < V) cnt[fed] = 0u;
    }
    if (tid == 0) {
        o->token = token;
        o->logprob = (q.flags & 1) ? l[token] - lse : 0.0f;
        o->nonfinite = 0;
        o->top_count = ntop;
        p.tokens_out[s] = token;
    }
}

}  // namespace kiln_dev
