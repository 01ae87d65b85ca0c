// Family sample: one token per sequence from fp32 logits [S, vocab], on the device, results in a small
// array the host downloads. Per sequence s (row s of logits, `seqs[s]`), in this order:
//  1. nonfinite: any NaN or inf in the row sets out.nonfinite, token -1, and nothing else is computed.
//  2. logprobs are of the RAW logits: log_softmax(l)[i] (before penalties, temperature and truncation).
//  3. penalties give l': over the generated tokens (penalty_tokens[gen_begin, +gen_count), plus
//     prev_tokens[feed_src] when feed_src >= 0: the fed token the list lacks) with n_i occurrences and the
//     prompt tokens: repetition r != 1 divides a positive logit by r and multiplies a negative one by r for
//     every token in the prompt or generated; then l' -= frequency·n_i + presence·[n_i > 0].
//  4. temperature <= 0: greedy, argmax l' (ties to the lower id).
//  5. otherwise z = l' / T and the kept set is: z >= the top_k-th largest z (top_k > 0; ties with it are
//     kept) and p >= min_p · p_max (min_p > 0); then top_p < 1 keeps, of those, the tokens with z >= the
//     largest threshold whose kept mass reaches top_p of the set's mass (ties kept).
//  6. the draw: argmax over the kept set of z_i + g_i, g_i = -log(-log u_i), u_i = sample_uniform(seed,
//     step, i) (common/philox.h): an exact sample of softmax(z) restricted to the set, the same token for
//     the same seed and step on every backend.
// `counts` is a u32 [S, vocab] workspace that must be zero before a launch and is zero again after it
// (the kernel counts the penalty tokens there and clears what it counted); without it (null) no penalty
// is applied, so the host gives it whenever a sequence has one.
#pragma once

#include "common/kiln_params.h"

#define KILN_SAMPLE_MAX_TOP 20

namespace kiln_params {

struct SampleSeq {
    float temperature;  // <= 0: greedy
    float top_p;        // >= 1: off
    float min_p;        // <= 0: off
    float presence;
    float frequency;
    float repetition;   // 1: off
    i32 top_k;          // <= 0: off
    i32 logprobs;       // top entries wanted, 0 .. KILN_SAMPLE_MAX_TOP
    u64 seed;
    u64 step;           // tokens generated before this one (the RNG counter)
    i32 gen_begin, gen_count;        // generated tokens in penalty_tokens
    i32 prompt_begin, prompt_count;  // prompt tokens in penalty_tokens (repetition only)
    i32 feed_src;       // >= 0: prev_tokens[feed_src] is one more generated token
    i32 flags;          // bit 0: the chosen token's logprob
};
KILN_PARAMS_SIZE(SampleSeq, 72);
KILN_PARAMS_OFFSET(SampleSeq, seed, 32);
KILN_PARAMS_OFFSET(SampleSeq, flags, 68);

struct SampleTop {
    i32 token;
    float logprob;
};

struct SampleOut {
    i32 token;      // -1 when nonfinite
    float logprob;  // the chosen token's (flags bit 0), else 0
    i32 nonfinite;
    i32 top_count;
    SampleTop top[KILN_SAMPLE_MAX_TOP];  // most likely first (raw logits; ties to the lower id)
};
KILN_PARAMS_SIZE(SampleOut, 176);

struct SampleParams {
    const float* logits;  // [num_seqs, logits_stride]
    i64 logits_stride;
    const SampleSeq* seqs;        // [num_seqs]
    const i32* penalty_tokens;    // packed token lists
    const i32* prev_tokens;       // the previous step's sampled tokens [prev_count]
    i32 prev_count;
    i32 num_seqs;
    u32* counts;                  // [num_seqs, vocab] workspace, zero before and after
    SampleOut* out;               // [num_seqs]
    i32* tokens_out;              // [num_seqs]: the tokens alone (what the next step's feed map reads)
    i32 vocab;
    i32 reserved;
};
KILN_PARAMS_SIZE(SampleParams, 80);
KILN_PARAMS_OFFSET(SampleParams, counts, 48);
KILN_PARAMS_OFFSET(SampleParams, vocab, 72);

}  // namespace kiln_params
