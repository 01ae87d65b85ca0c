#include "model/tokenizer/stream_decoder.hpp"

#include "model/tokenizer/utf8.hpp"

namespace kiln::model {

std::string StreamDecoder::push(uint32_t id) {
    const std::string_view bytes = tok_.token_bytes(id);  // throws on an unknown id, state unchanged
    if (skip_special_ && tok_.is_special(id)) return {};
    pending_ += bytes;
    utf8::Decoded d = utf8::decode_lossy(pending_, false);
    pending_.erase(0, d.consumed);
    return std::move(d.text);
}

std::string StreamDecoder::finish() {
    utf8::Decoded d = utf8::decode_lossy(pending_, true);
    pending_.clear();
    return std::move(d.text);
}

}  // namespace kiln::model
