// Warnings a Store raises: each goes to the log (kiln: warning: ...) and is kept, so callers
// (the CLI, tests) can show or inspect them. warn_once() suppresses repeats of the same topic.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace kiln::cache {

class WarningSink {
public:
    void warn(const std::string& message);
    void warn_once(const std::string& topic, const std::string& message);
    std::vector<std::string> all() const;

private:
    mutable std::mutex mu_;
    std::vector<std::string> messages_;
    std::set<std::string> topics_;
};

}  // namespace kiln::cache
