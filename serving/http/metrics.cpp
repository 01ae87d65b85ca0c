#include "serving/http/metrics.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kiln::serving::http {

const std::vector<double>& ttft_buckets() {
    static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
    return b;
}

const std::vector<double>& inter_token_buckets() {
    static const std::vector<double> b = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
    return b;
}

const std::vector<double>& e2e_buckets() {
    static const std::vector<double> b = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
    return b;
}

std::vector<double> one_two_five_buckets(double max) {
    std::vector<double> b;
    for (double exp = 1;; exp *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
            if (m * exp > max) return b;
            b.push_back(m * exp);
        }
    }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    // Prometheus buckets are inclusive upper bounds (le).
    const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    ++counts_[i];
    sum_ += v;
    ++count_;
}

std::vector<uint64_t> Histogram::cumulative() const {
    std::vector<uint64_t> c(counts_.size());
    uint64_t run = 0;
    for (size_t i = 0; i < counts_.size(); ++i) c[i] = run += counts_[i];
    return c;
}

ServingMetrics::ServingMetrics(uint32_t max_model_len)
    : ttft_(ttft_buckets()),
      itl_(inter_token_buckets()),
      e2e_(e2e_buckets()),
      prompt_len_(one_two_five_buckets(std::max<double>(max_model_len, 1))),
      gen_len_(one_two_five_buckets(std::max<double>(max_model_len, 1))) {}

void ServingMetrics::observe_ttft(double s) {
    std::lock_guard lock(mu_);
    ttft_.observe(s);
}

void ServingMetrics::observe_inter_token(double s) {
    std::lock_guard lock(mu_);
    itl_.observe(s);
}

void ServingMetrics::sequence_finished(FinishReason reason) {
    std::lock_guard lock(mu_);
    ++finished_[static_cast<size_t>(reason)];
}

void ServingMetrics::request_finished(std::optional<double> e2e_seconds, uint64_t prompt_tokens,
                                      uint64_t generation_tokens) {
    std::lock_guard lock(mu_);
    if (e2e_seconds) e2e_.observe(*e2e_seconds);
    prompt_len_.observe(double(prompt_tokens));
    gen_len_.observe(double(generation_tokens));
    prompt_tokens_ += prompt_tokens;
    generation_tokens_ += generation_tokens;
}

std::string prometheus_escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

namespace {

// Shortest round-trip form; integers without a fraction.
std::string num(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (std::isnan(v)) return "NaN";
    return fmt::format("{}", v);
}

struct Writer {
    std::string out;
    std::string labels;  // model_name="..."

    void header(const char* name, const char* type, const char* help) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    }
    void sample(const char* name, double v, const std::string& extra = {}) {
        out += fmt::format("{}{{{}{}}} {}\n", name, labels, extra, num(v));
    }
    void scalar(const char* name, const char* type, const char* help, double v) {
        header(name, type, help);
        sample(name, v);
    }
    void histogram(const char* name, const char* help, const Histogram& h) {
        header(name, "histogram", help);
        const auto c = h.cumulative();
        for (size_t i = 0; i < h.bounds().size(); ++i)
            out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, num(h.bounds()[i]), c[i]);
        out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, c.back());
        out += fmt::format("{}_sum{{{}}} {}\n", name, labels, num(h.sum()));
        out += fmt::format("{}_count{{{}}} {}\n", name, labels, h.count());
    }
};

}  // namespace

std::string ServingMetrics::render(const std::string& model_name, const EngineStats& e) const {
    Writer w;
    w.labels = fmt::format("model_name=\"{}\"", prometheus_escape(model_name));
    w.scalar("kiln:num_requests_running", "gauge", "Sequences in the running batch.", e.running);
    w.scalar("kiln:num_requests_waiting", "gauge", "Sequences waiting to be scheduled.", e.waiting);
    w.scalar("kiln:kv_cache_usage_perc", "gauge", "Fraction of KV-cache pages in use (1 = full).", e.kv_usage);
    w.scalar("kiln:state_cache_usage_perc", "gauge", "Fraction of recurrent-state slots in use (1 = full).",
             e.state_usage);
    w.scalar("kiln:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
             double(e.prefix_cache_queries));
    w.scalar("kiln:prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.",
             double(e.prefix_cache_hits));
    w.scalar("kiln:num_preemptions_total", "counter", "Sequences preempted by the scheduler.", double(e.preemptions));
    w.scalar("kiln:spec_decode_num_drafts_total", "counter", "Speculative decoding verify rounds.",
             double(e.spec_drafts));
    w.scalar("kiln:spec_decode_num_draft_tokens_total", "counter", "Speculative tokens proposed.",
             double(e.spec_draft_tokens));
    w.scalar("kiln:spec_decode_num_accepted_tokens_total", "counter", "Speculative tokens accepted.",
             double(e.spec_accepted_tokens));

    std::lock_guard lock(mu_);
    w.scalar("kiln:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", double(prompt_tokens_));
    w.scalar("kiln:generation_tokens_total", "counter", "Generated tokens of finished requests.",
             double(generation_tokens_));
    w.header("kiln:request_success_total", "counter", "Finished sequences by finish reason.");
    for (FinishReason r : {FinishReason::stop, FinishReason::length, FinishReason::abort, FinishReason::error})
        w.sample("kiln:request_success_total", double(finished_[size_t(r)]),
                 fmt::format(",finished_reason=\"{}\"", finish_reason_name(r)));
    w.histogram("kiln:time_to_first_token_seconds", "Time from arrival to the first generated token.", ttft_);
    w.histogram("kiln:inter_token_latency_seconds", "Time between consecutive engine steps of a sequence.", itl_);
    w.histogram("kiln:e2e_request_latency_seconds", "Time from arrival to the last token.", e2e_);
    w.histogram("kiln:request_prompt_tokens", "Prompt tokens per request.", prompt_len_);
    w.histogram("kiln:request_generation_tokens", "Generated tokens per request.", gen_len_);
    return std::move(w.out);
}

}  // namespace kiln::serving::http
