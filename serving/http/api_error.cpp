#include "serving/http/api_error.hpp"

namespace kiln::serving::http {

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code)
    : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}

ApiError ApiError::bad_request(const std::string& message, std::string param) {
    return ApiError(400, message, std::move(param));
}

const char* ApiError::type() const {
    if (status_ == 429) return "rate_limit_error";
    if (status_ >= 500) return "server_error";
    return "invalid_request_error";
}

nlohmann::ordered_json ApiError::to_json() const {
    nlohmann::ordered_json e;
    e["message"] = what();
    e["type"] = type();
    e["param"] = param_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param_);
    e["code"] = code_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code_);
    nlohmann::ordered_json j;
    j["error"] = std::move(e);
    return j;
}

std::string ApiError::body() const { return dump_json(to_json()); }

std::string dump_json(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace kiln::serving::http
