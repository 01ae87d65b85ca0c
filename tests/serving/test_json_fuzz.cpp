// Bounded fuzzing of the JSON edge: malformed, truncated, huge, deeply nested, wrongly typed and
// invalid-UTF-8 bodies, derived deterministically from valid requests, through the real parser and
// the whole request path (and a sample of them through the real server). The only acceptable
// outcomes are success or a 4xx ApiError / InvalidRequest naming the problem: no other exception,
// no 5xx, no crash.
#include "tests/serving/http_test_support.hpp"

#include <random>

#include <httplib.h>

#include "serving/http/server.hpp"
#include "serving/http/tokenize_api.hpp"

using namespace kiln::serving;
using namespace kiln::serving::http;
using namespace kiln::serving::http::test;

namespace {

const std::vector<std::string>& seeds() {
    static const std::vector<std::string> s = {
        R"({"model": "k3-tiny", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.7, "top_p": 0.9,
            "max_tokens": 16, "stream": true, "stream_options": {"include_usage": true}, "logprobs": true,
            "top_logprobs": 3, "n": 2, "stop": ["\n", "END"], "seed": 7})",
        R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text",
            "text": "a"}]}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}, {"role": "tool", "tool_call_id": "c1",
            "content": "ok"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type":
            "object", "properties": {"x": {"type": "integer"}}}}}], "tool_choice": "auto",
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
            "chat_template_kwargs": {"thinking": false}})",
        R"({"model": "k3-tiny", "prompt": "once upon a time", "max_tokens": 8, "logprobs": 2, "top_k": 40,
            "min_p": 0.1, "repetition_penalty": 1.1, "stop_token_ids": [1, 2], "ignore_eos": true, "min_tokens": 1})",
        R"({"prompt": [[1, 2, 3], [4, 5]], "n": 3, "temperature": 1.0, "presence_penalty": 0.5,
            "frequency_penalty": -0.5, "best_of": 3, "user": "u"})",
        R"({"prompt": "Hi", "return_token_strs": true, "tokens": [72, 105]})",
    };
    return s;
}

// Values of every JSON type, some at the edges of their range.
std::vector<Json> odd_values() {
    std::vector<Json> v = {nullptr, true, false, 0, -1, 1, 4096, 4294967296LL, -9223372036854775807LL - 1,
                           18446744073709551615ULL, 0.5, -0.0, 1e308, -1e308, 1e-320, "", "x", "<|open|>",
                           std::string(70000, 'z'), Json::array(), Json::object(), Json::array({1, "a", nullptr}),
                           Json{{"type", "text"}}, Json{{"role", "user"}}};
    Json deep = Json::array();
    for (int i = 0; i < 60; ++i) deep = Json::array({deep});
    v.push_back(deep);
    Json many = Json::array();
    for (int i = 0; i < 20000; ++i) many.push_back(i);
    v.push_back(many);
    return v;
}

// Every value slot of `j` (objects' values, arrays' items), for structural mutation.
void slots(Json& j, std::vector<Json*>& out) {
    out.push_back(&j);
    if (j.is_object() || j.is_array())
        for (auto& c : j) slots(c, out);
}

class Mutator {
public:
    explicit Mutator(uint64_t seed) : rng_(seed), values_(odd_values()) {}

    std::string next() {
        const std::string& base = seeds()[pick(seeds().size())];
        switch (pick(9)) {
            case 0: return flip_bytes(base);
            case 1: return base.substr(0, pick(base.size() + 1));  // truncated
            case 2: return insert(base, random_bytes(1 + pick(16)));
            case 3: return wrong_type(base);
            case 4: return wrong_type(wrong_type(base));
            case 5: return insert(base, invalid_utf8());
            case 6: return nested(base);
            case 7: return drop_field(base);
            default: return splice(base, seeds()[pick(seeds().size())]);
        }
    }

private:
    size_t pick(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

    std::string random_bytes(size_t n) {
        static const std::string interesting = "{}[]\",:\\ \t\n0123456789.eE-+truefalsnul\x80\xff\xc3\xed";
        std::string s;
        for (size_t i = 0; i < n; ++i) s += pick(2) ? interesting[pick(interesting.size())] : char(pick(256));
        return s;
    }

    std::string flip_bytes(std::string s) {
        for (size_t k = 1 + pick(4); k-- > 0 && !s.empty();) s[pick(s.size())] = char(pick(256));
        return s;
    }

    std::string insert(const std::string& s, const std::string& what) {
        const size_t at = pick(s.size() + 1);
        return s.substr(0, at) + what + s.substr(at);
    }

    // Ill-formed UTF-8 placed inside a string value.
    std::string invalid_utf8() {
        static const char* bad[] = {"\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf5\x80\x80\x80",
                                    "\\ud800", "\\udfff\\ud800", "\x80\x80", "\xf0\x9f\x98"};
        return bad[pick(std::size(bad))];
    }

    std::string wrong_type(const std::string& text) {
        Json j = Json::parse(text, nullptr, false);
        if (j.is_discarded()) return text;
        std::vector<Json*> s;
        slots(j, s);
        *s[pick(s.size())] = values_[pick(values_.size())];
        return j.dump();
    }

    std::string drop_field(const std::string& text) {
        Json j = Json::parse(text, nullptr, false);
        if (!j.is_object() || j.empty()) return text;
        auto it = j.begin();
        std::advance(it, long(pick(j.size())));
        j.erase(it.key());
        return j.dump();
    }

    std::string nested(const std::string& text) {
        const size_t depth = 1 + pick(pick(2) ? 100 : 200000);
        const std::string open(depth, pick(2) ? '[' : '{'), close(pick(2) ? depth : pick(depth + 1), ']');
        return insert(text, open + close);
    }

    std::string splice(const std::string& a, const std::string& b) {
        return a.substr(0, pick(a.size() + 1)) + b.substr(pick(b.size() + 1));
    }

    std::mt19937_64 rng_;
    std::vector<Json> values_;
};

// Runs one body through every request path. Returns "" when the outcome is acceptable, else what went wrong.
std::string exercise(const std::string& body, const ServedModel& model, size_t& accepted) {
    auto acceptable = [&](const auto& fn) -> std::string {
        try {
            fn();
            ++accepted;
        } catch (const ApiError& e) {
            if (e.status() >= 500) return std::string("5xx: ") + e.what();
            if (std::string(e.what()).empty()) return "an error without a message";
        } catch (const InvalidRequest& e) {
            if (e.param().empty()) return std::string("InvalidRequest without a param: ") + e.what();
        } catch (const std::exception& e) {
            return std::string("unexpected exception: ") + e.what();
        } catch (...) {
            return "unexpected non-standard exception";
        }
        return "";
    };
    for (Api api : {Api::chat, Api::completions}) {
        std::string r = acceptable([&] { prepare(api, body, model); });
        if (!r.empty()) return r;
    }
    std::string r = acceptable([&] { tokenize(model, parse_json_object(body)); });
    if (!r.empty()) return r;
    return acceptable([&] { detokenize(model, parse_json_object(body)); });
}

}  // namespace

TEST_CASE("fuzzed bodies through the request path: only 4xx refusals, never a crash") {
    const ServedModel model = k3_model();
    for (const auto& s : seeds()) CHECK_NOTHROW(parse_json_object(s));
    Mutator m(20240611);
    size_t accepted = 0, failures = 0;
    constexpr int iterations = 6000;
    for (int i = 0; i < iterations; ++i) {
        const std::string body = m.next();
        const std::string problem = exercise(body, model, accepted);
        if (!problem.empty()) {
            ++failures;
            if (failures <= 10) FAIL_CHECK(problem << "\n  body: " << body.substr(0, 300));
        }
    }
    MESSAGE(iterations << " fuzzed bodies, " << accepted << " accepted paths, " << failures << " failures");
    CHECK(failures == 0);
    CHECK(accepted > 0);  // the mutations leave some requests valid
}

TEST_CASE("fuzzed bodies through the real server: every answer is a well-formed status, the server stays up") {
    ServerOptions o;
    o.port = 0;
    o.threads = 4;
    o.max_body_bytes = 1 << 20;
    Server server(o, k3_model());
    server.start();
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(30, 0);
    Mutator m(77);
    const char* paths[] = {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"};
    int answered = 0;
    for (int i = 0; i < 400; ++i) {
        const std::string body = m.next();
        const char* path = paths[i % 4];
        auto r = c.Post(path, body, "application/json");
        REQUIRE(r);
        CAPTURE(path);
        CAPTURE(body.substr(0, 300));
        CAPTURE(r->body.substr(0, 300));
        CHECK((r->status == 200 || r->status == 400 || r->status == 404 || r->status == 413 || r->status == 503));
        if (r->status != 200) {
            const Json j = Json::parse(r->body, nullptr, false);
            CHECK((j.is_object() && j.contains("error") && j["error"]["message"].is_string()));
        }
        ++answered;
    }
    CHECK(answered == 400);
    auto v = c.Get("/version");
    REQUIRE(v);
    CHECK(v->status == 200);
    server.stop();
    server.wait();
}
