// A ForwardExecutor that runs the fp32 reference model (model/reference) over a host arena laid out as
// every executor lays it out (memory_layout.hpp): KDA recurrent state fp32 and conv state bf16 in state
// slots, the MLA latent bf16 in KV pages. Each sequence's state is read from its slot and pages, advanced by
// the reference forward, split at the snapshot positions asked for, and written back; the token is sampled
// with the reference sampler (token_sampler.hpp). Steps run within launch(), sequences of a step in
// parallel on the host thread pool, so wait() only hands the results over.
//
// It is the serving engine's forward on machines where the JIT'ed host path is not wanted (and the
// engine's end-to-end reference in tests): slow, exact to the reference up to the bf16 rounding of what
// the arena stores.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "model/forward/executor.hpp"
#include "model/forward/memory_layout.hpp"
#include "model/forward/step_index.hpp"
#include "model/reference/forward.hpp"
#include "model/reference/token_sampler.hpp"

namespace kiln::model::forward {

struct ReferenceExecutorOptions {
    int32_t page_size = 16;
    int32_t max_tokens = 2048;  // new tokens per step
    int32_t max_seqs = 256;     // sequences per step
    uint64_t seed = 0;          // draws of unseeded sequences (0: from the system's entropy)
};

class ReferenceExecutor final : public ForwardExecutor {
public:
    // The model must outlive the executor.
    ReferenceExecutor(const reference::ReferenceModel& model, const ReferenceExecutorOptions& options);

    const MemorySpec& memory() const override { return spec_; }
    void reserve(uint64_t arena_bytes) override;
    Ticket launch(const ForwardBatch& batch) override;
    StepResult wait(Ticket t) override;

    const MemoryLayout& layout() const { return layout_; }
    uint64_t arena_bytes() const { return arena_bytes_; }

private:
    uint8_t* slot(int32_t i) { return arena_.get() + uint64_t(i) * spec_.slot_bytes; }
    uint8_t* page(int32_t j) { return arena_.get() + arena_bytes_ - uint64_t(j + 1) * spec_.page_bytes; }
    void load_slot(const uint8_t* slot_base, reference::RequestState& st);
    void load_kv(const SequenceStep& q, reference::RequestState& st);
    void store_state(reference::RequestState& st, uint8_t* slot_base);
    void store_kv(const SequenceStep& q, reference::RequestState& st, int32_t from, int32_t to);
    SequenceResult run_sequence(const SequenceStep& q, double u);

    const reference::ReferenceModel& model_;
    ReferenceExecutorOptions opts_;
    MemoryLayout layout_;
    MemorySpec spec_;
    StepLimits limits_;
    std::vector<int> kda_index_, mla_index_;  // per model layer: its index among KDA / MLA layers (-1)
    std::unique_ptr<uint8_t[]> arena_;
    uint64_t arena_bytes_ = 0;
    std::mt19937_64 rng_;
    Ticket next_ = 1;
    std::deque<std::pair<Ticket, StepResult>> done_;
    std::vector<int32_t> last_tokens_;  // the previous step's sampled tokens (feed_from)
};

}  // namespace kiln::model::forward
