#include "runtime/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "runtime/env.hpp"

namespace kiln::log {

static Level from_env() {
    auto v = env::get("KILN_LOG_LEVEL");
    if (!v) return Level::warn;
    if (*v == "error") return Level::error;
    if (*v == "info") return Level::info;
    if (*v == "debug") return Level::debug;
    return Level::warn;
}

static std::atomic<int> g_level{static_cast<int>(from_env())};

Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
void set_level(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }

void write(Level l, std::string_view msg) {
    static std::mutex mu;
    static const char* names[] = {"error", "warning", "info", "debug"};
    std::lock_guard<std::mutex> lock(mu);
    std::fprintf(stderr, "kiln: %s: %.*s\n", names[static_cast<int>(l)], static_cast<int>(msg.size()), msg.data());
}

}  // namespace kiln::log
