// The one error format of the command line: `kiln: error: MESSAGE`, one line on stderr, exit status 1.
// An exception that is not a kiln::Error (a bug) is `kiln: internal error: MESSAGE`, exit status 2.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace kiln::cli {

// "kiln: error: MESSAGE\n", line breaks inside MESSAGE folded into "; ".
std::string error_line(std::string_view message);

// Prints the line for `e` and returns the exit status (1 for kiln::Error, 2 otherwise).
int report_error(const std::exception& e);

}  // namespace kiln::cli
