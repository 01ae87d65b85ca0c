// Per-request latencies the engine measures, handed to an observer when a request ends (every way it
// ends: finished, cancelled, failed, dropped at shutdown). Times are taken on the engine's thread when
// it commits a step's tokens, so they exclude the HTTP layer's delivery. `kiln bench serve` and logs
// read these; the HTTP /metrics histograms measure at the HTTP edge from GenerationEvents instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"

namespace kiln::serving {

struct RequestTiming {
    using Clock = std::chrono::steady_clock;

    std::string id;
    RequestHandle handle = 0;
    Clock::time_point arrival;          // GenerationRequest::arrival
    Clock::time_point first_scheduled;  // the first step with one of its sequences launched (unset: never)
    Clock::time_point first_token;      // its first token committed (unset: none)
    Clock::time_point finished;         // its last sequence's final event
    uint32_t sequences = 1;
    uint64_t prompt_tokens = 0;
    uint64_t cached_tokens = 0;         // summed over its sequences' first admissions
    uint64_t output_tokens = 0;         // summed over its sequences
    uint32_t preemptions = 0;           // of its sequences
    FinishReason finish = FinishReason::stop;  // sequence 0's
    std::vector<double> inter_token_seconds;   // between consecutive tokens of each sequence

    static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
    bool scheduled() const { return first_scheduled != Clock::time_point{}; }
    bool has_token() const { return first_token != Clock::time_point{}; }
    double queue_seconds() const { return scheduled() ? seconds(first_scheduled - arrival) : seconds(finished - arrival); }
    double ttft_seconds() const { return has_token() ? seconds(first_token - arrival) : 0.0; }
    double e2e_seconds() const { return seconds(finished - arrival); }
};

// Called on the engine's thread once per request, after its last event; must not block or call into
// the engine.
using RequestObserver = std::function<void(const RequestTiming&)>;

}  // namespace kiln::serving
