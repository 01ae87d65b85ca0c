// Small string helpers shared by every layer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// "a, b, c" for join({"a","b","c"}, ", "). (fmt::join trips a GCC 12 false-positive warning.)
inline std::string join(const std::vector<std::string>& v, std::string_view sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) s += sep;
        s += v[i];
    }
    return s;
}

}  // namespace kiln
