// KILN_* environment variables. Every CLI flag has one; these helpers read them uniformly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::env {

// Value of `name` if set and non-empty.
std::optional<std::string> get(const char* name);

// "1/true/yes/on" and "0/false/no/off" (case-insensitive); anything else throws InvalidArgument.
bool get_bool(const char* name, bool fallback);

// Decimal integer; a malformed value throws InvalidArgument naming the variable.
int64_t get_int(const char* name, int64_t fallback);

// Sizes such as "512M", "2G", "1.5GiB", "100000" (bytes). Throws InvalidArgument on junk.
uint64_t parse_size(const std::string& text);

}  // namespace kiln::env
