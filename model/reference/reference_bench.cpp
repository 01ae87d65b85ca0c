#include "model/reference/reference_bench.hpp"

#include <chrono>
#include <random>
#include <vector>

#include "model/reference/sampling.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/error.hpp"

namespace kiln::model::reference {

ReferenceBenchResult run_reference_bench(const ReferenceModel& model, size_t prompt_tokens, size_t decode_tokens) {
    if (prompt_tokens == 0) throw InvalidArgument("reference bench: the prompt needs at least one token");
    using clock = std::chrono::steady_clock;
    auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    std::mt19937_64 rng(1234);
    std::vector<uint32_t> prompt(prompt_tokens);
    for (auto& id : prompt) id = uint32_t(rng() % model.vocab_size());

    ReferenceBenchResult r;
    r.prompt_tokens = prompt_tokens;
    r.decode_tokens = decode_tokens;
    RequestState st = model.new_request();
    auto t0 = clock::now();
    double c0 = thread_cpu_seconds();
    Matrix logits = model.forward(st, prompt);
    r.prefill_seconds = seconds_since(t0);
    r.prefill_cpu_seconds = thread_cpu_seconds() - c0;

    Sampler greedy(SamplingParams{});
    uint32_t next = greedy.next(logits.row_span(logits.rows - 1));
    auto t1 = clock::now();
    double c1 = thread_cpu_seconds();
    for (size_t i = 0; i < decode_tokens; ++i) {
        logits = model.forward(st, std::span<const uint32_t>(&next, 1));
        next = greedy.next(logits.row_span(0));
    }
    r.decode_seconds = seconds_since(t1);
    r.decode_cpu_seconds = thread_cpu_seconds() - c1;
    r.state_bytes = st.bytes();
    r.state_position = st.position();
    return r;
}

}  // namespace kiln::model::reference
