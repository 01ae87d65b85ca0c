// Incremental detokenisation for streaming responses. push(id) returns the text that became
// complete with this token; bytes of a UTF-8 character split across tokens are held back until the
// character completes, so no chunk ever ends mid-character. Ill-formed bytes become U+FFFD as soon
// as they are known to be ill-formed; finish() flushes a trailing incomplete character as one
// U+FFFD. The concatenation of all chunks therefore equals Tokenizer::decode of the whole sequence.
// Special tokens decode to their names unless skip_special is set.
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer.hpp"

namespace kiln::model {

class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
        : tok_(tokenizer), skip_special_(skip_special) {}

    std::string push(uint32_t id);
    std::string finish();
    size_t pending_bytes() const { return pending_.size(); }

private:
    const Tokenizer& tok_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace kiln::model
