#include "serving/engine/engine_options.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::serving {

namespace {

[[noreturn]] void bad(const char* flag, const std::string& what) {
    throw InvalidArgument(fmt::format("--{}: {}", flag, what));
}

}  // namespace

ResolvedOptions resolve_options(const EngineOptions& o, const model::forward::MemorySpec& spec) {
    if (spec.page_size < 1 || spec.chunk < 1 || spec.max_tokens < 1 || spec.max_seqs < 1 || spec.max_position < 2 ||
        spec.slot_bytes == 0 || spec.page_bytes == 0)
        throw InvalidArgument("engine: the executor's memory spec is incomplete");
    ResolvedOptions r;
    r.options = o;
    if (o.page_size != 0 && o.page_size != static_cast<uint32_t>(spec.page_size))
        bad("page-size", fmt::format("the executor was built with pages of {} tokens, not {}", spec.page_size, o.page_size));
    r.page_size = static_cast<uint32_t>(spec.page_size);
    r.grid = static_cast<uint32_t>(std::lcm(static_cast<uint64_t>(spec.chunk), static_cast<uint64_t>(spec.page_size)));
    r.track_interval = o.track_interval == 0 ? 0 : (o.track_interval + r.grid - 1) / r.grid * r.grid;

    r.max_model_len = o.max_model_len == 0 ? static_cast<uint32_t>(spec.max_position) : o.max_model_len;
    if (r.max_model_len < 2 || r.max_model_len > static_cast<uint32_t>(spec.max_position))
        bad("max-model-len", fmt::format("{} is outside [2, {}] (the model's context)", r.max_model_len, spec.max_position));

    if (o.max_batch_tokens == 0) bad("max-batch-tokens", "must be at least 1");
    r.max_batch_tokens = std::min(o.max_batch_tokens, static_cast<uint32_t>(spec.max_tokens));
    if (o.max_running == 0) bad("max-running", "must be at least 1");
    r.max_running = std::min({o.max_running, static_cast<uint32_t>(spec.max_seqs), r.max_batch_tokens});
    if (o.max_waiting == 0) bad("max-waiting", "must be at least 1");
    if (!(o.state_memory_fraction > 0.0 && o.state_memory_fraction < 1.0))
        bad("state-memory-fraction", fmt::format("{} is outside (0, 1)", o.state_memory_fraction));
    return r;
}

}  // namespace kiln::serving
