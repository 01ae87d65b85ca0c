// The reference decoding loop: prefill the prompt in one forward call, then decode one token per call
// (recurrent KDA, absorbed MLA) until max_tokens or a stop id. on_token sees each id as it is chosen
// (a stop id included), so callers can stream. Wall-clock times are reported for information only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "model/reference/forward.hpp"
#include "model/reference/sampling.hpp"

namespace kiln::model::reference {

struct GenerateResult {
    std::vector<uint32_t> ids;      // generated ids (a final stop id included)
    bool stopped = false;           // ended on a stop id
    double prefill_seconds = 0;
    double decode_seconds = 0;      // for ids.size() - 1 decode steps
};

GenerateResult generate(const ReferenceModel& model, std::span<const uint32_t> prompt, size_t max_tokens,
                        const SamplingParams& sampling, std::span<const uint32_t> stop_ids,
                        const std::function<void(uint32_t)>& on_token = {});

}  // namespace kiln::model::reference
