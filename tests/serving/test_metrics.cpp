// The /metrics exposition: exact text for the gauges, counters and a histogram, vLLM's bucket
// boundaries, and a structural check of every line against the Prometheus text format.
#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "serving/http/metrics.hpp"

using namespace kiln::serving;
using namespace kiln::serving::http;

namespace {

// The lines of `text` from "# HELP <name> " through the last line of that metric family.
std::string family(const std::string& text, const std::string& name) {
    const size_t start = text.find("# HELP " + name + " ");
    REQUIRE(start != std::string::npos);
    size_t end = text.find("# HELP ", start + 1);
    if (end == std::string::npos) end = text.size();
    return text.substr(start, end - start);
}

// The `le` bounds of a histogram family, in order, without +Inf.
std::vector<double> bounds_of(const std::string& fam) {
    std::vector<double> b;
    static const std::regex le(R"(le="([^"]+)\")");
    for (std::sregex_iterator it(fam.begin(), fam.end(), le), end; it != end; ++it)
        if ((*it)[1] != "+Inf") b.push_back(std::stod((*it)[1]));
    return b;
}

EngineStats stats() {
    EngineStats s;
    s.running = 3;
    s.waiting = 7;
    s.kv_usage = 0.25;
    s.state_usage = 0.5;
    s.prefix_cache_queries = 1000;
    s.prefix_cache_hits = 640;
    s.preemptions = 2;
    s.spec_drafts = 10;
    s.spec_draft_tokens = 30;
    s.spec_accepted_tokens = 21;
    return s;
}

}  // namespace

TEST_CASE("gauges and counters, exactly") {
    ServingMetrics m(100);
    m.sequence_finished(FinishReason::stop);
    m.sequence_finished(FinishReason::stop);
    m.sequence_finished(FinishReason::abort);
    m.request_finished(1.5, 12, 30);
    m.request_finished(std::nullopt, 8, 2);
    const std::string text = m.render("k3-tiny", stats());
    const std::string head = text.substr(0, text.find("# HELP kiln:time_to_first_token_seconds"));
    CHECK(head ==
          "# HELP kiln:num_requests_running Sequences in the running batch.\n"
          "# TYPE kiln:num_requests_running gauge\n"
          "kiln:num_requests_running{model_name=\"k3-tiny\"} 3\n"
          "# HELP kiln:num_requests_waiting Sequences waiting to be scheduled.\n"
          "# TYPE kiln:num_requests_waiting gauge\n"
          "kiln:num_requests_waiting{model_name=\"k3-tiny\"} 7\n"
          "# HELP kiln:kv_cache_usage_perc Fraction of KV-cache pages in use (1 = full).\n"
          "# TYPE kiln:kv_cache_usage_perc gauge\n"
          "kiln:kv_cache_usage_perc{model_name=\"k3-tiny\"} 0.25\n"
          "# HELP kiln:state_cache_usage_perc Fraction of recurrent-state slots in use (1 = full).\n"
          "# TYPE kiln:state_cache_usage_perc gauge\n"
          "kiln:state_cache_usage_perc{model_name=\"k3-tiny\"} 0.5\n"
          "# HELP kiln:prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
          "# TYPE kiln:prefix_cache_queries_total counter\n"
          "kiln:prefix_cache_queries_total{model_name=\"k3-tiny\"} 1000\n"
          "# HELP kiln:prefix_cache_hits_total Prompt tokens served from the prefix cache.\n"
          "# TYPE kiln:prefix_cache_hits_total counter\n"
          "kiln:prefix_cache_hits_total{model_name=\"k3-tiny\"} 640\n"
          "# HELP kiln:num_preemptions_total Sequences preempted by the scheduler.\n"
          "# TYPE kiln:num_preemptions_total counter\n"
          "kiln:num_preemptions_total{model_name=\"k3-tiny\"} 2\n"
          "# HELP kiln:spec_decode_num_drafts_total Speculative decoding verify rounds.\n"
          "# TYPE kiln:spec_decode_num_drafts_total counter\n"
          "kiln:spec_decode_num_drafts_total{model_name=\"k3-tiny\"} 10\n"
          "# HELP kiln:spec_decode_num_draft_tokens_total Speculative tokens proposed.\n"
          "# TYPE kiln:spec_decode_num_draft_tokens_total counter\n"
          "kiln:spec_decode_num_draft_tokens_total{model_name=\"k3-tiny\"} 30\n"
          "# HELP kiln:spec_decode_num_accepted_tokens_total Speculative tokens accepted.\n"
          "# TYPE kiln:spec_decode_num_accepted_tokens_total counter\n"
          "kiln:spec_decode_num_accepted_tokens_total{model_name=\"k3-tiny\"} 21\n"
          "# HELP kiln:prompt_tokens_total Prompt tokens of finished requests.\n"
          "# TYPE kiln:prompt_tokens_total counter\n"
          "kiln:prompt_tokens_total{model_name=\"k3-tiny\"} 20\n"
          "# HELP kiln:generation_tokens_total Generated tokens of finished requests.\n"
          "# TYPE kiln:generation_tokens_total counter\n"
          "kiln:generation_tokens_total{model_name=\"k3-tiny\"} 32\n"
          "# HELP kiln:request_success_total Finished sequences by finish reason.\n"
          "# TYPE kiln:request_success_total counter\n"
          "kiln:request_success_total{model_name=\"k3-tiny\",finished_reason=\"stop\"} 2\n"
          "kiln:request_success_total{model_name=\"k3-tiny\",finished_reason=\"length\"} 0\n"
          "kiln:request_success_total{model_name=\"k3-tiny\",finished_reason=\"abort\"} 1\n"
          "kiln:request_success_total{model_name=\"k3-tiny\",finished_reason=\"error\"} 0\n");

    // Token histograms: 1-2-5 up to max_model_len; le is inclusive.
    CHECK(family(text, "kiln:request_prompt_tokens") ==
          "# HELP kiln:request_prompt_tokens Prompt tokens per request.\n"
          "# TYPE kiln:request_prompt_tokens histogram\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"1\"} 0\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"2\"} 0\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"5\"} 0\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"10\"} 1\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"20\"} 2\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"50\"} 2\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"100\"} 2\n"
          "kiln:request_prompt_tokens_bucket{model_name=\"k3-tiny\",le=\"+Inf\"} 2\n"
          "kiln:request_prompt_tokens_sum{model_name=\"k3-tiny\"} 20\n"
          "kiln:request_prompt_tokens_count{model_name=\"k3-tiny\"} 2\n");
    // A cancelled request counts its tokens but adds no end-to-end latency.
    CHECK(family(text, "kiln:e2e_request_latency_seconds")
              .find("kiln:e2e_request_latency_seconds_count{model_name=\"k3-tiny\"} 1\n") != std::string::npos);
}

TEST_CASE("latency histograms use vLLM's buckets") {
    ServingMetrics m(4096);
    m.observe_ttft(0.001);  // on a bound: counted in that bucket
    m.observe_ttft(0.0011);
    m.observe_ttft(5000);  // above every bound: only +Inf
    m.observe_inter_token(0.02);
    const std::string text = m.render("m", EngineStats{});
    const std::string ttft = family(text, "kiln:time_to_first_token_seconds");
    CHECK(bounds_of(ttft) == ttft_buckets());
    CHECK(ttft_buckets() == std::vector<double>{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                                1,     2.5,   5,    7.5,  10,   20,   40,   80,  160,  640, 2560});
    CHECK(ttft.find("le=\"0.001\"} 1\n") != std::string::npos);
    CHECK(ttft.find("le=\"0.005\"} 2\n") != std::string::npos);
    CHECK(ttft.find("le=\"2560\"} 2\n") != std::string::npos);
    CHECK(ttft.find("le=\"+Inf\"} 3\n") != std::string::npos);
    CHECK(ttft.find("kiln:time_to_first_token_seconds_count{model_name=\"m\"} 3\n") != std::string::npos);
    CHECK(bounds_of(family(text, "kiln:inter_token_latency_seconds")) == inter_token_buckets());
    CHECK(inter_token_buckets() == std::vector<double>{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1,
                                                       2.5, 5, 7.5, 10, 20, 40, 80});
    CHECK(bounds_of(family(text, "kiln:e2e_request_latency_seconds")) == e2e_buckets());
    CHECK(e2e_buckets() == std::vector<double>{0.3, 0.5, 0.8, 1,  1.5, 2,   2.5, 5,   10,   15,  20,
                                               30,  40,  50,  60, 120, 240, 480, 960, 1920, 7680});
    CHECK(one_two_five_buckets(4096) == std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000});
    CHECK(one_two_five_buckets(1) == std::vector<double>{1});
}

TEST_CASE("every line is well-formed Prometheus text and histograms are cumulative") {
    ServingMetrics m(1000);
    for (int i = 1; i <= 50; ++i) {
        m.observe_ttft(0.003 * i);
        m.observe_inter_token(0.002 * i);
        m.request_finished(0.1 * i, uint64_t(i), uint64_t(2 * i));
    }
    const std::string text = m.render("we\"ird\\name\n", stats());
    std::istringstream in(text);
    std::string line;
    const std::regex comment(R"(# (HELP|TYPE) kiln:[a-z0-9_:]+ .+)");
    const std::regex sample(
        R"~(kiln:[a-z0-9_:]+\{model_name="we\\"ird\\\\name\\n"(,[a-z_]+="[^"]*")*\} [-+0-9.eInf]+)~");
    std::map<std::string, uint64_t> last;  // per histogram: the previous cumulative count
    size_t samples = 0;
    while (std::getline(in, line)) {
        CAPTURE(line);
        if (line.rfind("#", 0) == 0) {
            CHECK(std::regex_match(line, comment));
            continue;
        }
        CHECK(std::regex_match(line, sample));
        ++samples;
        const size_t b = line.find("_bucket{");
        if (b != std::string::npos) {
            const std::string name = line.substr(0, b);
            const uint64_t v = std::stoull(line.substr(line.rfind(' ') + 1));
            CHECK(v >= last[name]);
            last[name] = v;
        }
    }
    CHECK(samples > 100);
    CHECK(last["kiln:time_to_first_token_seconds"] == 50);
    CHECK(last["kiln:request_generation_tokens"] == 50);
    CHECK(prometheus_escape("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}
