#include "cache/warnings.hpp"

#include "runtime/log.hpp"

namespace kiln::cache {

void WarningSink::warn(const std::string& message) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        messages_.push_back(message);
    }
    log::warn("{}", message);
}

void WarningSink::warn_once(const std::string& topic, const std::string& message) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!topics_.insert(topic).second) return;
    }
    warn(message);
}

std::vector<std::string> WarningSink::all() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
}

}  // namespace kiln::cache
