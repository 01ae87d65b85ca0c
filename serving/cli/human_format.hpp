// Numbers and tables for people: sizes in binary units, local times, plain text tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

// "512 B", "1.5 KiB", "2.0 GiB".
std::string human_bytes(uint64_t n);

// Unix seconds as local "YYYY-MM-DD HH:MM"; "-" for 0 (never).
std::string human_time(int64_t unix_seconds);

// Prints a table to stdout: columns padded to their widest cell, those marked in `right` right-aligned,
// two spaces between columns, no trailing blanks.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& right);

}  // namespace kiln::cli
