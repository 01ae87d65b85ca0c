// A ForwardExecutor for engine tests whose memory holds, instead of tensors, stamps of what each block
// represents (the position-stamped harness): a KDA state slot holds the number of tokens its state
// has consumed and the hash of that token prefix; a KV page holds, per token, its position, the token
// and the hash of the prefix up to and including it. Blocks live at the arena offsets ForwardBatch
// defines (state slot i at i x slot_bytes, KV page j at (j + 1) x page_bytes below the end); a write
// erases every stamp it overlaps, a move or copy carries stamps, and a move leaves nothing behind, so
// a block read at the wrong place, before it was written or after another kind overwrote it, is
// caught. Every step is checked before it runs: each sequence's working slot must hold the state after
// exactly `start` tokens (restored, snapshotted, donated or computed by it), its pages the KV of
// positions [0, start) chaining to that state's hash, and, when the step carries the prompt, of exactly
// its own tokens. Tokens are sampled deterministically from the prefix hash (and the seed), so a run
// with the prefix cache must generate what a run without it does. A violation is recorded and thrown.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "model/forward/executor.hpp"

namespace kiln::test {

class StampedExecutor final : public model::forward::ForwardExecutor {
public:
    struct Config {
        int32_t page_size = 16;
        uint64_t token_bytes = 64;      // KV bytes per token: page_bytes = page_size x token_bytes
        uint64_t slot_bytes = 64 * 64;  // one state slot
        int32_t max_tokens = 4096;
        int32_t max_seqs = 256;
        int32_t max_position = 4096;
        int32_t vocab = 4096;
        int32_t token_range = 3840;     // sampled tokens lie in [0, token_range), or are EOS
        std::vector<int32_t> eos;
        uint32_t eos_period = 0;        // about one sampled token in eos_period is eos[0] (0: never)
        int32_t poison = -1;            // a sequence step carrying this token samples a non-finite result
    };

    explicit StampedExecutor(Config config);

    const model::forward::MemorySpec& memory() const override { return spec_; }
    void reserve(uint64_t arena_bytes) override;
    Ticket launch(const model::forward::ForwardBatch& batch) override;
    model::forward::StepResult wait(Ticket t) override;

    // The token sampled after a prefix with this hash (seed: Sampling::seed when seeded, else 0).
    int32_t next_token(uint64_t prefix_hash, uint64_t seed) const;
    static uint64_t empty_hash();
    static uint64_t extend(uint64_t hash, int32_t token);

    const std::vector<std::string>& violations() const { return violations_; }
    struct Counts {
        uint64_t steps = 0, seqs = 0, tokens = 0, copies = 0, moves = 0, snapshots = 0, feeds = 0;
        uint64_t fresh = 0, resumed = 0;   // sequence steps starting from the zero state / a stored state
        uint64_t mixed_steps = 0;          // steps with both a multi-token chunk and a one-token decode
        uint64_t identity_checks = 0;      // steps whose tokens were checked against the prompt and output
        uint64_t max_seqs = 0;
    };
    const Counts& counts() const { return counts_; }

private:
    struct KvEntry {
        int32_t pos = -1;
        int32_t token = 0;
        uint64_t hash = 0;
    };
    struct Region {
        uint64_t bytes = 0;
        bool state = false;
        int32_t pos = 0;      // state: tokens consumed
        uint64_t hash = 0;    // state: hash of those tokens
        std::vector<KvEntry> kv;
    };

    [[noreturn]] void fail(const std::string& what);
    uint64_t slot_offset(int32_t slot, const char* what);
    uint64_t page_offset(int32_t page, const char* what);
    const Region* find(uint64_t offset, uint64_t bytes, bool state) const;
    void write(uint64_t offset, Region region);
    void check_shape(const model::forward::ForwardBatch& batch);

    Config cfg_;
    model::forward::MemorySpec spec_;
    uint64_t arena_ = 0;
    std::map<uint64_t, Region> mem_;
    std::vector<int32_t> last_sampled_;
    std::deque<std::pair<Ticket, model::forward::StepResult>> pending_;
    Ticket next_ticket_ = 1;
    std::vector<std::string> violations_;
    Counts counts_;
};

}  // namespace kiln::test
