// GET /metrics: Prometheus text exposition (format 0.0.4) with vLLM's metric names under `kiln:`
// and vLLM's histogram buckets, every series labelled model_name="...".
//
//   gauges      kiln:num_requests_running, kiln:num_requests_waiting, kiln:kv_cache_usage_perc,
//               kiln:state_cache_usage_perc (KDA state slots, 0..1)             from EngineStats
//   counters    kiln:prefix_cache_queries_total, kiln:prefix_cache_hits_total (tokens),
//               kiln:num_preemptions_total, kiln:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total
//                                                                                  from EngineStats
//               kiln:prompt_tokens_total, kiln:generation_tokens_total,
//               kiln:request_success_total{finished_reason=stop|length|abort|error}   counted here
//   histograms  kiln:time_to_first_token_seconds, kiln:inter_token_latency_seconds (one sample per
//               engine step), kiln:e2e_request_latency_seconds, kiln:request_prompt_tokens,
//               kiln:request_generation_tokens (1-2-5 buckets up to max_model_len)  measured here
// Latencies are measured from the request's arrival at the HTTP layer, so they include queueing.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"

namespace kiln::serving::http {

const std::vector<double>& ttft_buckets();
const std::vector<double>& inter_token_buckets();
const std::vector<double>& e2e_buckets();
// 1, 2, 5, 10, 20, 50, ... up to and including the last value <= max (vLLM's build_1_2_5_buckets).
std::vector<double> one_two_five_buckets(double max);

class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double v);
    const std::vector<double>& bounds() const { return bounds_; }
    // Cumulative counts per bound, then the +Inf count.
    std::vector<uint64_t> cumulative() const;
    double sum() const { return sum_; }
    uint64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket (non-cumulative), last = above every bound
    double sum_ = 0;
    uint64_t count_ = 0;
};

// What the HTTP layer measures. Thread-safe.
class ServingMetrics {
public:
    explicit ServingMetrics(uint32_t max_model_len);

    void observe_ttft(double seconds);
    void observe_inter_token(double seconds);
    // One finished sequence (vLLM counts each of n sequences); latency and lengths are per request.
    void sequence_finished(FinishReason reason);
    // A request's end: e2e latency when every sequence completed (unset when it was cancelled).
    void request_finished(std::optional<double> e2e_seconds, uint64_t prompt_tokens, uint64_t generation_tokens);

    // The whole exposition, engine gauges and counters included.
    std::string render(const std::string& model_name, const EngineStats& engine) const;

private:
    mutable std::mutex mu_;
    Histogram ttft_, itl_, e2e_, prompt_len_, gen_len_;
    uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
    uint64_t finished_[4] = {0, 0, 0, 0};  // by FinishReason
};

// Prometheus label value escaping (backslash, double quote, newline).
std::string prometheus_escape(const std::string& s);

}  // namespace kiln::serving::http
