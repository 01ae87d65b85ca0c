#include "model/tokenizer/chunking.hpp"

#include "model/tokenizer/utf8.hpp"

namespace kiln::model {

std::vector<std::string_view> split_for_encode(std::string_view text, size_t max_chars, size_t max_run) {
    std::vector<std::string_view> out;
    size_t pos = 0;
    while (pos < text.size()) {
        // One chunk of at most max_chars code points, split like _split_whitespaces_or_nonwhitespaces.
        size_t slice_start = pos;
        size_t chars = 0;
        size_t run = 0;
        bool run_is_space = false;
        while (pos < text.size() && chars < max_chars) {
            const size_t at = pos;
            const bool space = utf8::python_isspace(utf8::next(text, pos));
            if (chars == 0) run_is_space = space;
            ++chars;
            if (space != run_is_space) {
                run = 1;
                run_is_space = space;
            } else if (++run > max_run) {
                out.push_back(text.substr(slice_start, at - slice_start));
                slice_start = at;
                run = 1;
            }
        }
        out.push_back(text.substr(slice_start, pos - slice_start));
    }
    return out;
}

}  // namespace kiln::model
