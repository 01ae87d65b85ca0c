#include "model/reference/generate.hpp"

#include <algorithm>
#include <chrono>

#include "runtime/error.hpp"

namespace kiln::model::reference {

GenerateResult generate(const ReferenceModel& model, std::span<const uint32_t> prompt, size_t max_tokens,
                        const SamplingParams& sampling, std::span<const uint32_t> stop_ids,
                        const std::function<void(uint32_t)>& on_token) {
    if (prompt.empty()) throw InvalidArgument("generate: the prompt has no tokens");
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
        uint32_t id = sampler.next(last);
        r.ids.push_back(id);
        if (on_token) on_token(id);
        if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) {
            r.stopped = true;
            break;
        }
        if (r.ids.size() >= max_tokens) break;
        logits = model.forward(state, std::span<const uint32_t>(&r.ids.back(), 1));
        last = logits.row_span(0);
    }
    r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return r;
}

}  // namespace kiln::model::reference
