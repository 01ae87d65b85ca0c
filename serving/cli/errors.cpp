#include "serving/cli/errors.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::cli {

namespace {

std::string one_line(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
    std::string out;
    for (char c : text) {
        if (c == '\r') continue;
        if (c == '\n') out += "; ";
        else out += c;
    }
    return out;
}

}  // namespace

std::string error_line(std::string_view message) { return fmt::format("kiln: error: {}\n", one_line(message)); }

int report_error(const std::exception& e) {
    if (dynamic_cast<const Error*>(&e) != nullptr) {
        std::fputs(error_line(e.what()).c_str(), stderr);
        return 1;
    }
    fmt::print(stderr, "kiln: internal error: {}\n", one_line(e.what()));
    return 2;
}

}  // namespace kiln::cli
