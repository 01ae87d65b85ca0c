#include "model/tokenizer/bpe_trainer.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "model/tokenizer/utf8.hpp"

namespace kiln::model {

namespace {

using Pair = uint64_t;
Pair make_pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
uint32_t left_of(Pair p) { return static_cast<uint32_t>(p >> 32); }
uint32_t right_of(Pair p) { return static_cast<uint32_t>(p); }

struct Candidate {
    int64_t count;
    Pair pair;
    // Max-heap: higher count first, then the lower pair key.
    bool operator<(const Candidate& o) const {
        if (count != o.count) return count < o.count;
        return pair > o.pair;
    }
};

}  // namespace

std::vector<std::string> train_bpe(std::string_view corpus, size_t num_tokens) {
    if (num_tokens < 256) throw TokenizerError("a byte-level BPE vocabulary needs at least 256 tokens");
    utf8::validate(corpus, "training corpus");

    // Unique pieces with their counts, in first-seen order (deterministic).
    std::vector<std::vector<uint32_t>> words;
    std::vector<int64_t> counts;
    {
        std::unordered_map<std::string_view, uint32_t> index;
        PreTokenizer pre;
        pre.for_each_piece(corpus, [&](std::string_view piece) {
            auto [it, fresh] = index.emplace(piece, static_cast<uint32_t>(words.size()));
            if (fresh) {
                std::vector<uint32_t> w;
                w.reserve(piece.size());
                for (char c : piece) w.push_back(static_cast<unsigned char>(c));
                words.push_back(std::move(w));
                counts.push_back(0);
            }
            ++counts[it->second];
        });
    }

    std::vector<std::string> tokens(256);
    for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, static_cast<char>(b));
    std::unordered_map<std::string, uint32_t> by_bytes;
    for (uint32_t i = 0; i < 256; ++i) by_bytes.emplace(tokens[i], i);

    std::unordered_map<Pair, int64_t> pair_count;
    std::unordered_map<Pair, std::vector<uint32_t>> pair_words;
    for (uint32_t w = 0; w < words.size(); ++w) {
        const auto& s = words[w];
        for (size_t i = 0; i + 1 < s.size(); ++i) {
            const Pair p = make_pair_key(s[i], s[i + 1]);
            pair_count[p] += counts[w];
            pair_words[p].push_back(w);
        }
    }
    std::priority_queue<Candidate> heap;
    {
        // Push in key order so the heap's contents do not depend on hash iteration order.
        std::vector<std::pair<Pair, int64_t>> init(pair_count.begin(), pair_count.end());
        std::sort(init.begin(), init.end());
        for (const auto& [p, c] : init) heap.push({c, p});
    }

    std::vector<uint32_t> merged;
    while (tokens.size() < num_tokens) {
        if (heap.empty()) {
            throw TokenizerError(fmt::format("training corpus ran out of pairs at {} of {} tokens", tokens.size(),
                                             num_tokens));
        }
        const Candidate top = heap.top();
        heap.pop();
        const auto pc = pair_count.find(top.pair);
        if (pc == pair_count.end() || pc->second != top.count || top.count <= 0) continue;  // stale

        const uint32_t a = left_of(top.pair), b = right_of(top.pair);
        std::string bytes = tokens[a] + tokens[b];
        uint32_t id;
        if (auto it = by_bytes.find(bytes); it != by_bytes.end()) {
            id = it->second;  // same bytes reached through another split: reuse the token
        } else {
            id = static_cast<uint32_t>(tokens.size());
            tokens.push_back(bytes);
            by_bytes.emplace(std::move(bytes), id);
        }

        std::vector<uint32_t> affected = std::move(pair_words[top.pair]);
        pair_words.erase(top.pair);
        std::sort(affected.begin(), affected.end());
        affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
        std::unordered_map<Pair, int64_t> changed;
        for (uint32_t w : affected) {
            auto& s = words[w];
            bool has = false;
            for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == b;
            if (!has) continue;
            const int64_t c = counts[w];
            for (size_t i = 0; i + 1 < s.size(); ++i) changed[make_pair_key(s[i], s[i + 1])] -= c;
            merged.clear();
            for (size_t i = 0; i < s.size();) {
                if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
                    merged.push_back(id);
                    i += 2;
                } else {
                    merged.push_back(s[i]);
                    i += 1;
                }
            }
            s.assign(merged.begin(), merged.end());
            for (size_t i = 0; i + 1 < s.size(); ++i) {
                const Pair p = make_pair_key(s[i], s[i + 1]);
                changed[p] += c;
                // Pairs without the new token were already adjacent (and listed) before the merge.
                if (s[i] == id || s[i + 1] == id) pair_words[p].push_back(w);
            }
        }
        std::vector<std::pair<Pair, int64_t>> deltas(changed.begin(), changed.end());
        std::sort(deltas.begin(), deltas.end());  // deterministic heap pushes
        for (const auto& [p, delta] : deltas) {
            if (delta == 0) continue;
            int64_t& cur = pair_count[p];
            cur += delta;
            if (cur > 0) heap.push({cur, p});
        }
        pair_count.erase(top.pair);
    }
    return tokens;
}

}  // namespace kiln::model
