#include "model/layers/dense_ops.hpp"

#include <cmath>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::layers {

namespace {

void validate(const forward::Sampling& s, size_t seq) {
    auto bad = [&](const char* field, double v, const char* want) {
        throw InvalidArgument(fmt::format("sequence {}: sampling {}={} ({})", seq, field, v, want));
    };
    if (!std::isfinite(s.temperature) || s.temperature < 0) bad("temperature", s.temperature, "finite, >= 0");
    if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) bad("top_p", s.top_p, "in (0, 1]");
    if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) bad("min_p", s.min_p, "in [0, 1]");
    if (s.top_k < 0) bad("top_k", s.top_k, ">= 0");
    if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0)
        bad("repetition_penalty", s.repetition_penalty, "finite, > 0");
    if (!std::isfinite(s.presence_penalty)) bad("presence_penalty", s.presence_penalty, "finite");
    if (!std::isfinite(s.frequency_penalty)) bad("frequency_penalty", s.frequency_penalty, "finite");
    if (s.logprobs > KILN_SAMPLE_MAX_TOP) bad("logprobs", s.logprobs, "at most 20");
}

int32_t prev_row(const std::vector<int32_t>& prev_rows, int32_t feed_from, size_t seq) {
    if (feed_from < 0 || size_t(feed_from) >= prev_rows.size() || prev_rows[size_t(feed_from)] < 0)
        throw InvalidArgument(fmt::format("sequence {}: feed_from {} is not a sampling sequence of the previous step", seq,
                                          feed_from));
    return prev_rows[size_t(feed_from)];
}

}  // namespace

std::vector<int32_t> sample_rows(const forward::ForwardBatch& batch) {
    std::vector<int32_t> rows(batch.seqs.size(), -1);
    int32_t next = 0;
    for (size_t i = 0; i < batch.seqs.size(); ++i)
        if (batch.seqs[i].sample) rows[i] = next++;
    return rows;
}

SampleInputs build_sample_inputs(const forward::ForwardBatch& batch, const std::vector<int32_t>& prev_rows,
                                 uint64_t unseeded) {
    SampleInputs in;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const forward::SequenceStep& st = batch.seqs[i];
        if (!st.sample) continue;
        const forward::Sampling& s = st.sampling;
        validate(s, i);
        kiln_params::SampleSeq q{};
        q.temperature = s.temperature;
        q.top_p = s.top_p;
        q.min_p = s.min_p;
        q.presence = s.presence_penalty;
        q.frequency = s.frequency_penalty;
        q.repetition = s.repetition_penalty;
        q.top_k = s.top_k;
        q.logprobs = static_cast<int32_t>(s.logprobs);
        q.seed = s.seeded ? s.seed : unseeded;
        q.feed_src = st.feed_from >= 0 ? prev_row(prev_rows, st.feed_from, i) : -1;
        q.step = st.output.size() + (st.feed_from >= 0 ? 1 : 0);
        q.flags = s.want_logprobs ? 1 : 0;
        const bool pen = s.repetition_penalty != 1.0f || s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f;
        q.gen_begin = static_cast<int32_t>(in.penalty_tokens.size());
        if (pen) in.penalty_tokens.insert(in.penalty_tokens.end(), st.output.begin(), st.output.end());
        q.gen_count = static_cast<int32_t>(in.penalty_tokens.size()) - q.gen_begin;
        q.prompt_begin = static_cast<int32_t>(in.penalty_tokens.size());
        if (s.repetition_penalty != 1.0f) in.penalty_tokens.insert(in.penalty_tokens.end(), st.prompt.begin(), st.prompt.end());
        q.prompt_count = static_cast<int32_t>(in.penalty_tokens.size()) - q.prompt_begin;
        in.seqs.push_back(q);
        in.batch_index.push_back(static_cast<int32_t>(i));
    }
    if (in.penalty_tokens.empty()) in.penalty_tokens.push_back(0);  // a valid address for the device array
    return in;
}

std::vector<int32_t> build_feed_map(const forward::ForwardBatch& batch, const std::vector<int32_t>& prev_rows) {
    std::vector<int32_t> map;
    int64_t row = 0;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const forward::SequenceStep& st = batch.seqs[i];
        if (st.feed_from >= 0) {
            if (st.tokens.empty())
                throw InvalidArgument(fmt::format("sequence {}: feed_from {} with no new token", i, st.feed_from));
            map.push_back(static_cast<int32_t>(row));
            map.push_back(prev_row(prev_rows, st.feed_from, i));
        }
        row += static_cast<int64_t>(st.tokens.size());
    }
    return map;
}

forward::StepResult step_result(const forward::ForwardBatch& batch, const SampleInputs& in,
                                const std::vector<kiln_params::SampleOut>& out) {
    if (out.size() != in.seqs.size())
        throw InvalidArgument(fmt::format("step_result: {} sampler outputs for {} rows", out.size(), in.seqs.size()));
    forward::StepResult r;
    r.seqs.resize(batch.seqs.size());
    for (size_t j = 0; j < out.size(); ++j) {
        const kiln_params::SampleOut& o = out[j];
        forward::SequenceResult& s = r.seqs[size_t(in.batch_index[j])];
        s.nonfinite = o.nonfinite != 0;
        s.token = s.nonfinite ? -1 : o.token;
        if (s.nonfinite) continue;
        if (in.seqs[j].flags & 1) s.chosen = {o.token, o.logprob};
        const int n = o.top_count < 0 ? 0 : o.top_count > KILN_SAMPLE_MAX_TOP ? KILN_SAMPLE_MAX_TOP : o.top_count;
        for (int k = 0; k < n; ++k) s.top.push_back({o.top[k].token, o.top[k].logprob});
    }
    return r;
}

}  // namespace kiln::model::layers
