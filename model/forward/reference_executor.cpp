#include "model/forward/reference_executor.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "runtime/bf16.hpp"
#include "runtime/error.hpp"
#include "runtime/host/thread_pool.hpp"

namespace kiln::model::forward {

namespace {
void to_bf16(const float* src, size_t n, uint8_t* dst) {
    auto* d = reinterpret_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = runtime::float_to_bf16(src[i]);
}
void from_bf16(const uint8_t* src, size_t n, float* dst) {
    const auto* s = reinterpret_cast<const uint16_t*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = runtime::bf16_to_float(s[i]);
}
}  // namespace

ReferenceExecutor::ReferenceExecutor(const reference::ReferenceModel& model, const ReferenceExecutorOptions& o)
    : model_(model), opts_(o), layout_(memory_layout(model.config(), o.page_size)) {
    if (o.max_tokens < 1 || o.max_seqs < 1)
        throw InvalidArgument(fmt::format("reference executor: max_tokens {} and max_seqs {} must be positive", o.max_tokens, o.max_seqs));
    const ModelConfig& c = model.config();
    spec_.slot_bytes = std::max<uint64_t>(layout_.slot_bytes, 256);
    spec_.page_bytes = std::max<uint64_t>(layout_.page_bytes, 256);
    spec_.page_size = o.page_size;
    spec_.chunk = 64;
    spec_.max_tokens = o.max_tokens;
    spec_.max_seqs = o.max_seqs;
    spec_.max_position = int32_t(std::min<int64_t>(c.max_position_embeddings > 0 ? c.max_position_embeddings : (1 << 20), 1 << 30));
    spec_.vocab = int32_t(c.vocab_size);
    for (int64_t e : c.eos_token_ids)
        if (e >= 0) spec_.eos.push_back(int32_t(e));
    int k = 0, m = 0;
    for (int l = 0; l < c.num_layers; ++l) {
        kda_index_.push_back(c.is_kda(l) ? k++ : -1);
        mla_index_.push_back(c.is_mla(l) ? m++ : -1);
    }
    rng_.seed(o.seed ? o.seed : std::random_device{}());
}

void ReferenceExecutor::reserve(uint64_t bytes) {
    if (arena_) throw InvalidArgument("reference executor: the arena is already reserved");
    if (bytes < spec_.slot_bytes + spec_.page_bytes)
        throw InvalidArgument(fmt::format("reference executor: an arena of {} bytes holds no slot and page", bytes));
    arena_.reset(new uint8_t[bytes]);
    arena_bytes_ = bytes;
    limits_.num_slots = int32_t(std::min<uint64_t>(bytes / spec_.slot_bytes, INT32_MAX));
    limits_.num_pages = int32_t(std::min<uint64_t>(bytes / spec_.page_bytes, INT32_MAX));
    limits_.page_size = spec_.page_size;
    limits_.chunk = spec_.chunk;
    limits_.max_tokens = spec_.max_tokens;
    limits_.max_seqs = spec_.max_seqs;
    limits_.max_position = spec_.max_position;
    limits_.vocab = spec_.vocab;
}

void ReferenceExecutor::load_slot(const uint8_t* base, reference::RequestState& st) {
    const ModelConfig& c = model_.config();
    const size_t W = size_t(layout_.kda_heads) * layout_.kda_head_dim, taps = size_t(layout_.conv_size - 1);
    for (int l = 0; l < c.num_layers; ++l) {
        if (kda_index_[l] < 0) continue;
        const int i = kda_index_[l];
        reference::KdaState& ks = st.kda(size_t(l));
        std::memcpy(ks.S.data(), base + layout_.kda_state_offset[i], ks.S.size() * 4);
        for (int j = 0; j < 3; ++j) from_bf16(base + layout_.kda_conv_offset[i] + j * taps * W * 2, taps * W, ks.conv[j].data.data());
    }
}

void ReferenceExecutor::load_kv(const SequenceStep& q, reference::RequestState& st) {
    const ModelConfig& c = model_.config();
    const size_t D = size_t(layout_.cache_dim);
    for (int l = 0; l < c.num_layers; ++l) {
        if (mla_index_[l] < 0) continue;
        const int i = mla_index_[l];
        reference::MlaCache& mc = st.mla(size_t(l));
        mc.rows.resize(size_t(q.start) * D);
        for (int32_t p = 0; p < q.start; ++p) {
            const uint8_t* row = page(q.pages[p / spec_.page_size]) + layout_.mla_offset[i] + size_t(p % spec_.page_size) * D * 2;
            from_bf16(row, D, mc.rows.data() + size_t(p) * D);
        }
    }
    st.set_position(size_t(q.start));
}

void ReferenceExecutor::store_state(reference::RequestState& st, uint8_t* base) {
    const ModelConfig& c = model_.config();
    const size_t W = size_t(layout_.kda_heads) * layout_.kda_head_dim, taps = size_t(layout_.conv_size - 1);
    for (int l = 0; l < c.num_layers; ++l) {
        if (kda_index_[l] < 0) continue;
        const int i = kda_index_[l];
        reference::KdaState& ks = st.kda(size_t(l));
        std::memcpy(base + layout_.kda_state_offset[i], ks.S.data(), ks.S.size() * 4);
        for (int j = 0; j < 3; ++j) to_bf16(ks.conv[j].data.data(), taps * W, base + layout_.kda_conv_offset[i] + j * taps * W * 2);
    }
}

void ReferenceExecutor::store_kv(const SequenceStep& q, reference::RequestState& st, int32_t from, int32_t to) {
    const ModelConfig& c = model_.config();
    const size_t D = size_t(layout_.cache_dim);
    for (int l = 0; l < c.num_layers; ++l) {
        if (mla_index_[l] < 0) continue;
        const int i = mla_index_[l];
        reference::MlaCache& mc = st.mla(size_t(l));
        for (int32_t p = from; p < to; ++p) {
            uint8_t* row = page(q.pages[p / spec_.page_size]) + layout_.mla_offset[i] + size_t(p % spec_.page_size) * D * 2;
            to_bf16(mc.row(size_t(p)), D, row);
            // What later steps read back is the bf16 value: keep this step's own attention consistent with it.
            from_bf16(row, D, mc.rows.data() + size_t(p) * D);
        }
    }
}

SequenceResult ReferenceExecutor::run_sequence(const SequenceStep& q, double u) {
    reference::RequestState st = model_.new_request();
    if (q.fresh_state) std::memset(slot(q.slot), 0, spec_.slot_bytes);
    load_slot(slot(q.slot), st);
    load_kv(q, st);
    std::vector<uint32_t> ids(q.tokens.begin(), q.tokens.end());
    std::vector<int32_t> cuts;
    for (const Snapshot& s : q.snapshots) cuts.push_back(s.position);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    const int32_t end = q.start + int32_t(ids.size());
    if (cuts.empty() || cuts.back() != end) cuts.push_back(end);
    int32_t at = q.start;
    reference::Matrix logits;
    for (int32_t cut : cuts) {
        std::span<const uint32_t> part(ids.data() + (at - q.start), size_t(cut - at));
        logits = model_.forward(st, part);
        store_kv(q, st, at, cut);
        at = cut;
        const uint8_t* snapped = nullptr;
        for (const Snapshot& s : q.snapshots)
            if (s.position == cut) {
                store_state(st, slot(s.slot));
                snapped = slot(s.slot);
            }
        // Continue from what the snapshot holds, so resuming from it computes exactly what this step does.
        if (snapped && cut != end) load_slot(snapped, st);
    }
    store_state(st, slot(q.slot));
    SequenceResult r;
    if (!q.sample) return r;
    auto last = logits.row_span(logits.rows - 1);
    reference::SampledToken t = reference::sample_token(last, q.sampling, q.prompt, q.output, u);
    r.nonfinite = t.nonfinite;
    r.token = t.token;
    r.chosen = t.chosen;
    r.top = std::move(t.top);
    return r;
}

ForwardExecutor::Ticket ReferenceExecutor::launch(const ForwardBatch& batch) {
    if (!arena_) throw InvalidArgument("reference executor: launch before reserve");
    build_step_index(batch, limits_);  // validates everything before any memory changes
    for (const StateCopy& c : batch.copies)
        if (c.src_slot < 0 || c.dst_slot < 0 || c.src_slot >= limits_.num_slots || c.dst_slot >= limits_.num_slots)
            throw InvalidArgument(fmt::format("state copy {} -> {} names a slot outside [0, {})", c.src_slot, c.dst_slot, limits_.num_slots));
    for (const Move& m : batch.moves)
        if (m.src + m.bytes > arena_bytes_ || m.dst + m.bytes > arena_bytes_)
            throw InvalidArgument(fmt::format("memory move of {} bytes at {} -> {} leaves the arena", m.bytes, m.src, m.dst));
    for (const SequenceStep& q : batch.seqs)
        if (q.feed_from >= int32_t(last_tokens_.size()) || (q.feed_from >= 0 && last_tokens_[q.feed_from] < 0))
            throw InvalidArgument(fmt::format("sequence fed from entry {} of a previous step that sampled nothing there", q.feed_from));

    for (const Move& m : batch.moves) std::memmove(arena_.get() + m.dst, arena_.get() + m.src, m.bytes);
    for (const StateCopy& c : batch.copies) std::memcpy(slot(c.dst_slot), slot(c.src_slot), spec_.slot_bytes);

    std::vector<SequenceStep> seqs = batch.seqs;
    for (SequenceStep& q : seqs)
        if (q.feed_from >= 0) {
            q.tokens[0] = last_tokens_[q.feed_from];
            if (!q.output.empty() || q.sampling.seeded || q.sampling.presence_penalty != 0 ||
                q.sampling.frequency_penalty != 0 || q.sampling.repetition_penalty != 1)
                q.output.push_back(q.tokens[0]);
        }
    std::vector<double> draws(seqs.size());
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    for (double& d : draws) d = uni(rng_);

    StepResult res;
    res.seqs.resize(seqs.size());
    runtime::HostThreadPool::global().parallel_for(int64_t(seqs.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) res.seqs[size_t(i)] = run_sequence(seqs[size_t(i)], draws[size_t(i)]);
    });
    last_tokens_.clear();
    for (const SequenceResult& r : res.seqs) last_tokens_.push_back(r.token);
    const Ticket t = next_++;
    done_.emplace_back(t, std::move(res));
    return t;
}

StepResult ReferenceExecutor::wait(Ticket t) {
    while (!done_.empty() && done_.front().first < t) done_.pop_front();
    if (done_.empty() || done_.front().first != t) throw InvalidArgument(fmt::format("reference executor: no step with ticket {}", t));
    StepResult r = std::move(done_.front().second);
    done_.pop_front();
    return r;
}

}  // namespace kiln::model::forward
