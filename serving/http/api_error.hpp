// Errors the HTTP API answers, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": null}}
// `type` follows the status (400/404/405/413 invalid_request_error, 401 invalid_request_error with code
// invalid_api_key, 429 rate_limit_error, 5xx server_error); `param` names the offending field or is
// null; `code` is a short string (context_length_exceeded, model_not_found, ...) or null.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"

namespace kiln::serving::http {

class ApiError : public Error {
public:
    ApiError(int status, const std::string& message, std::string param = {}, std::string code = {});

    int status() const { return status_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }
    const char* type() const;

    nlohmann::ordered_json to_json() const;
    std::string body() const;  // to_json() serialised

    // 400 naming `param`.
    static ApiError bad_request(const std::string& message, std::string param = {});

private:
    int status_;
    std::string param_;
    std::string code_;
};

// One JSON document on one line, invalid UTF-8 (which the API never produces) replaced.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace kiln::serving::http
