#include "serving/cli/human_format.hpp"

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

namespace kiln::cli {

std::string human_bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = static_cast<double>(n);
    int u = 0;
    while (x >= 1024 && u < 4) {
        x /= 1024;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", x, units[u]);
}

std::string human_time(int64_t unix_seconds) {
    if (unix_seconds <= 0) return "-";
    std::time_t t = static_cast<std::time_t>(unix_seconds);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
    return buf;
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& right) {
    std::vector<size_t> w(header.size());
    for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
    for (const auto& r : rows)
        for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
    auto line = [&](const std::vector<std::string>& r) {
        std::string out;
        for (size_t c = 0; c < r.size(); ++c) {
            if (c > 0) out += "  ";
            out += right[c] ? fmt::format("{:>{}}", r[c], w[c]) : fmt::format("{:<{}}", r[c], w[c]);
        }
        while (!out.empty() && out.back() == ' ') out.pop_back();
        fmt::print("{}\n", out);
    };
    line(header);
    for (const auto& r : rows) line(r);
}

}  // namespace kiln::cli
