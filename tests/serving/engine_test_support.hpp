// What the engine tests share: the k3-tiny tokenizer, a sink that records every event, the token
// sequence the stamped executor generates after a prompt, and an EngineCore on that executor run to
// completion with the invariant checker after every step.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/tiny_vocab.hpp"
#include "serving/engine/engine_core.hpp"
#include "tests/serving/stamped_executor.hpp"

namespace kiln::test {

using serving::FinishReason;
using serving::GenerationEvent;
using serving::GenerationRequest;
using serving::TokenId;

inline const model::Tokenizer& tiny_tokenizer() {
    static const model::Tokenizer t = model::make_tiny_tokenizer();
    return t;
}

inline int32_t tiny_eos() { return static_cast<int32_t>(*tiny_tokenizer().special_id("[EOS]")); }

struct SequenceRecord {
    std::vector<TokenId> tokens;
    std::string text;
    size_t logprobs = 0;
    std::optional<FinishReason> finish;
    std::optional<std::string> stop_string;
    std::optional<TokenId> stop_token;
    std::string error;
    uint32_t cached = 0;
    int finals = 0;
    int after_final = 0;  // events after the final one: must stay 0
};

// Records events; thread-safe enough for one engine thread writing and the test reading after the end.
class Recorder : public serving::EventSink {
public:
    explicit Recorder(uint32_t n) : seqs(n) {}
    void on_event(GenerationEvent&& e) override {
        if (e.index >= seqs.size()) {
            ++bad_index;
            return;
        }
        SequenceRecord& s = seqs[e.index];
        if (s.finals) {
            ++s.after_final;
            return;
        }
        s.tokens.insert(s.tokens.end(), e.tokens.begin(), e.tokens.end());
        s.text += e.text;
        s.logprobs += e.logprobs.size();
        if (e.finish) {
            ++s.finals;
            s.finish = e.finish;
            s.stop_string = e.stop_string;
            s.stop_token = e.stop_token;
            s.error = e.error;
            s.cached = e.cached_prompt_tokens;
        }
    }
    bool done() const {
        for (const SequenceRecord& s : seqs)
            if (s.finals == 0) return false;
        return true;
    }
    std::vector<SequenceRecord> seqs;
    int bad_index = 0;
};

inline uint64_t prefix_hash(const std::vector<TokenId>& tokens) {
    uint64_t h = StampedExecutor::empty_hash();
    for (TokenId t : tokens) h = StampedExecutor::extend(h, static_cast<int32_t>(t));
    return h;
}

// The first `n` tokens the executor generates after `prompt` with this device seed.
inline std::vector<TokenId> reference_tokens(const StampedExecutor& ex, const std::vector<TokenId>& prompt, uint64_t seed,
                                             size_t n) {
    uint64_t h = prefix_hash(prompt);
    std::vector<TokenId> out;
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = ex.next_token(h, seed);
        out.push_back(static_cast<TokenId>(t));
        h = StampedExecutor::extend(h, t);
    }
    return out;
}

inline uint64_t device_seed(const serving::SamplingParams& p, uint32_t index) {
    return p.seed ? static_cast<uint64_t>(*p.seed) + index : 0;
}

inline GenerationRequest make_request(std::vector<TokenId> prompt, serving::SamplingParams sampling) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling = std::move(sampling);
    r.arrival = std::chrono::steady_clock::now();
    return r;
}

struct Rig {
    StampedExecutor ex;
    serving::EngineCore core;
    serving::RequestHandle next = 1;

    Rig(const StampedExecutor::Config& c, const serving::EngineOptions& o, serving::RequestObserver obs = {})
        : ex(c), core(ex, tiny_tokenizer(), o, std::move(obs)) {}

    std::shared_ptr<Recorder> submit(const GenerationRequest& r, serving::RequestHandle* handle = nullptr) {
        auto rec = std::make_shared<Recorder>(r.sampling.n);
        core.check_request(r);
        if (handle) *handle = next;
        core.submit(next++, r, rec);
        return rec;
    }
    void step() {
        core.step();
        core.check_invariants();
        if (!ex.violations().empty()) FAIL(ex.violations().front());
    }
    void run(size_t max_steps = 200000) {
        for (size_t k = 0; !core.idle(); ++k) {
            REQUIRE(k < max_steps);
            step();
        }
    }
    // After the last request: the cache cleared, no page or slot is left allocated.
    void check_empty() {
        REQUIRE(core.idle());
        core.clear_prefix_cache();
        core.check_invariants();
        const auto& m = core.scheduler().memory();
        CHECK(m.kv().used() == 0);
        CHECK(m.state().used() == 0);
    }
};

inline std::vector<TokenId> random_tokens(std::mt19937_64& rng, size_t n, uint32_t range = 3840) {
    std::vector<TokenId> t(n);
    for (TokenId& x : t) x = static_cast<TokenId>(rng() % range);
    return t;
}

}  // namespace kiln::test
