// Minimal leveled logging to stderr. KILN_LOG_LEVEL = error|warn|info|debug (default warn).
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace kiln::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

Level level();
void set_level(Level l);
void write(Level l, std::string_view msg);

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
    if (level() >= Level::error) write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
    if (level() >= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
    if (level() >= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
    if (level() >= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kiln::log
