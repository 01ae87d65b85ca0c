// One sequence's output on the host: stop conditions and incremental text.
//
// Tokens arrive one at a time as the engine commits them. A token finishes the sequence with
//   stop    when it is a stop id, or an EOS id without ignore_eos (the token counts and is returned;
//           its text is cut unless include_stop_str_in_output), or when the text now contains a
//           stop string (cut there, or after it with include_stop_str_in_output);
//   length  at max_tokens, or when the caller says the context is full.
// No stop of any kind fires before min_tokens tokens. (The device does not mask EOS before
// min_tokens: such an EOS is an ordinary token of the output.)
// Text comes from model::StreamDecoder, so it never ends inside a UTF-8 character; the longest tail
// that could still grow into a stop string is held back until it cannot, and released at the finish.
// The concatenation of the returned texts is the sequence's final text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/stream_decoder.hpp"
#include "serving/engine/request.hpp"

namespace kiln::serving::sampler {

struct OutputDelta {
    std::string text;                        // made final by this token (may be empty)
    std::optional<FinishReason> finish;      // stop or length
    std::optional<std::string> stop_string;  // finish by a stop string: the one matched
    std::optional<TokenId> stop_token;       // finish by a stop id or EOS: that id
};

class SequenceOutput {
public:
    // `eos`: the model's end-of-sequence ids. The tokenizer must outlive this object.
    SequenceOutput(const model::Tokenizer& tokenizer, const SamplingParams& params, std::vector<TokenId> eos);

    // The next generated token; `context_full`: no position is left after it. Throws InvalidArgument
    // once finished.
    OutputDelta push(TokenId token, bool context_full = false);

    uint32_t generated() const { return generated_; }
    bool finished() const { return finished_; }

private:
    void finish(OutputDelta& d, FinishReason reason);
    size_t held_suffix() const;

    model::StreamDecoder decoder_;
    uint32_t min_tokens_;
    uint32_t max_tokens_;
    bool include_stop_;
    bool ignore_eos_;
    std::vector<TokenId> eos_;
    std::vector<TokenId> stop_ids_;
    std::vector<std::string> stops_;
    std::vector<std::vector<uint32_t>> failure_;  // KMP prefix function of each stop string
    std::string tail_;                            // decoded, not yet returned
    uint32_t generated_ = 0;
    bool finished_ = false;
};

}  // namespace kiln::serving::sampler
