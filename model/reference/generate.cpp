#include "model/reference/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace kiln::model::reference {

namespace {

// Throws NonFiniteLogits when any logit is NaN or infinite; `produced` tokens were generated before.
void require_finite(std::span<const float> logits, size_t produced, size_t position) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < logits.size(); ++i)
        if (!std::isfinite(logits[i]) && bad++ == 0) first = i;
    if (bad == 0) return;
    throw NonFiniteLogits(fmt::format(
        "generation stopped: the logits at position {} are not finite ({} of {} values NaN or infinite, the first "
        "at id {}: {}); {} token{} had been generated",
        position, bad, logits.size(), first, logits[first], produced, produced == 1 ? "" : "s"));
}

}  // namespace

GenerateResult generate(const ReferenceModel& model, std::span<const uint32_t> prompt, size_t max_tokens,
                        const SamplingParams& sampling, std::span<const uint32_t> stop_ids,
                        const std::function<void(uint32_t)>& on_token) {
    if (prompt.empty()) throw InvalidArgument("generate: the prompt has no tokens");
    const int64_t context = model.config().max_position_embeddings;  // 0: not limited
    if (context > 0 && int64_t(prompt.size()) > context)
        throw InvalidArgument(fmt::format("generate: the prompt has {} tokens, more than the model's context of {} "
                                          "(max_position_embeddings)",
                                          prompt.size(), context));
    using clock = std::chrono::steady_clock;
    Sampler sampler(sampling);
    GenerateResult r;
    if (max_tokens == 0) return r;
    RequestState state = model.new_request();

    auto t0 = clock::now();
    Matrix logits = model.forward(state, prompt);
    auto t1 = clock::now();
    r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

    std::span<const float> last = logits.row_span(logits.rows - 1);
    while (true) {
        require_finite(last, r.ids.size(), state.position() - 1);
        uint32_t id = sampler.next(last);
        r.ids.push_back(id);
        if (on_token) on_token(id);
        if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) {
            r.stopped = true;
            break;
        }
        if (r.ids.size() >= max_tokens) break;
        if (context > 0 && int64_t(prompt.size() + r.ids.size()) >= context) {
            r.context_full = true;
            break;
        }
        logits = model.forward(state, std::span<const uint32_t>(&r.ids.back(), 1));
        last = logits.row_span(0);
    }
    r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return r;
}

}  // namespace kiln::model::reference
