// Shared by the HTTP-layer tests: the k3-tiny tokenizers (K3 and K2 special names) and served models
// over them, and a helper that reports which field a request body is refused for.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "model/tokenizer/special_tokens.hpp"
#include "model/tokenizer/tiny_vocab.hpp"
#include "serving/http/api_error.hpp"
#include "serving/http/generation_request.hpp"
#include "serving/http/served_model.hpp"

namespace kiln::serving::http::test {

inline const model::Tokenizer& k3_tokenizer() {
    static const model::Tokenizer t = model::make_tiny_tokenizer(model::k3_special_names());
    return t;
}

inline const model::Tokenizer& k2_tokenizer() {
    static const model::Tokenizer t = model::make_tiny_tokenizer(model::k2_special_names());
    return t;
}

inline ServedModel k3_model(uint32_t max_model_len = 4096) {
    return make_served_model({"k3-tiny"}, "presets/k3-tiny", max_model_len, k3_tokenizer());
}

inline ServedModel k2_model(uint32_t max_model_len = 4096) {
    return make_served_model({"k2-tiny"}, "presets/k2-tiny", max_model_len, k2_tokenizer());
}

inline PreparedGeneration prepare(Api api, const std::string& body, const ServedModel& model,
                                  const RequestLimits& limits = {}) {
    return prepare_generation(api, parse_json_object(body), model, limits, "req1", std::chrono::steady_clock::now());
}

struct Refusal {
    int status = 0;  // 0: accepted
    std::string param, message, code;
};

// Runs the body through the whole request path (parse, render, fit, validate).
inline Refusal refusal(Api api, const std::string& body, const ServedModel& model, const RequestLimits& limits = {}) {
    try {
        prepare(api, body, model, limits);
        return {};
    } catch (const ApiError& e) {
        return {e.status(), e.param(), e.what(), e.code()};
    } catch (const InvalidRequest& e) {
        return {400, e.param(), e.what(), ""};
    }
}

}  // namespace kiln::serving::http::test
