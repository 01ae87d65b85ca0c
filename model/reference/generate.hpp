// The reference decoding loop: prefill the prompt in one forward call, then decode one token per call
// (recurrent KDA, absorbed MLA) until max_tokens, a stop id or the model's context. on_token sees each id
// as it is chosen (a stop id included), so callers can stream. Wall-clock times are reported for
// information only.
//
// The context follows vLLM: with max_position_embeddings set, a prompt longer than it is refused
// (InvalidArgument), and generation finishes ("length") once prompt + generated tokens reach it, so no
// forward call ever runs past the last position. Logits that turn NaN or infinite stop generation with
// NonFiniteLogits (the tokens chosen before were already passed to on_token).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "model/reference/forward.hpp"
#include "model/reference/sampling.hpp"
#include "runtime/error.hpp"

namespace kiln::model::reference {

class NonFiniteLogits : public kiln::Error {
public:
    using Error::Error;
};

struct GenerateResult {
    std::vector<uint32_t> ids;      // generated ids (a final stop id included)
    bool stopped = false;           // ended on a stop id
    bool context_full = false;      // ended because prompt + ids filled max_position_embeddings
    double prefill_seconds = 0;
    double decode_seconds = 0;      // for ids.size() - 1 decode steps

    // OpenAI / vLLM finish_reason: "stop" (a stop id) or "length" (max_tokens or the context).
    std::string_view finish_reason() const { return stopped ? "stop" : "length"; }
};

GenerateResult generate(const ReferenceModel& model, std::span<const uint32_t> prompt, size_t max_tokens,
                        const SamplingParams& sampling, std::span<const uint32_t> stop_ids,
                        const std::function<void(uint32_t)>& on_token = {});

}  // namespace kiln::model::reference
