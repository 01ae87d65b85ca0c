#include "model/tokenizer/bpe.hpp"

#include <queue>

namespace kiln::model {

namespace {
constexpr uint32_t none = ByteRankTable::missing;
}

void byte_pair_encode_scan(const ByteRankTable& ranks, std::string_view piece, std::vector<uint32_t>& out) {
    const size_t n = piece.size();
    if (n == 1) {
        out.push_back(ranks.find(piece));
        return;
    }
    struct Part {
        uint32_t start;
        uint32_t rank;  // rank of the pair starting here
    };
    thread_local std::vector<Part> parts;
    parts.clear();
    parts.reserve(n + 1);
    for (size_t i = 0; i + 1 < n; ++i) parts.push_back({static_cast<uint32_t>(i), ranks.find(piece.substr(i, 2))});
    parts.push_back({static_cast<uint32_t>(n - 1), none});
    parts.push_back({static_cast<uint32_t>(n), none});

    auto pair_rank = [&](size_t i) -> uint32_t {
        // parts[i+1] has not been removed yet, hence i+3.
        if (i + 3 < parts.size()) return ranks.find(piece.substr(parts[i].start, parts[i + 3].start - parts[i].start));
        return none;
    };
    for (;;) {
        uint32_t best = none;
        size_t at = 0;
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
            if (parts[i].rank < best) {
                best = parts[i].rank;
                at = i;
            }
        }
        if (best == none) break;
        if (at > 0) parts[at - 1].rank = pair_rank(at - 1);
        parts[at].rank = pair_rank(at);
        parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        out.push_back(ranks.find(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start)));
    }
}

void byte_pair_encode_heap(const ByteRankTable& ranks, std::string_view piece, std::vector<uint32_t>& out) {
    const uint32_t n = static_cast<uint32_t>(piece.size());
    if (n == 1) {
        out.push_back(ranks.find(piece));
        return;
    }
    // Node i starts at byte i; nodes only ever absorb their right neighbour, so starts never move and
    // (rank, node) orders candidates exactly like the leftmost-lowest scan.
    std::vector<uint32_t> next(n), prev(n), rank(n);
    std::vector<uint8_t> alive(n, 1);
    for (uint32_t i = 0; i < n; ++i) {
        next[i] = i + 1;
        prev[i] = i == 0 ? none : i - 1;
    }
    auto pair_rank = [&](uint32_t i) -> uint32_t {
        const uint32_t j = next[i];
        if (j >= n) return none;
        return ranks.find(piece.substr(i, next[j] - i));
    };
    using Entry = std::pair<uint32_t, uint32_t>;  // (rank, node)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (uint32_t i = 0; i + 1 < n; ++i) {
        rank[i] = ranks.find(piece.substr(i, 2));
        if (rank[i] != none) heap.push({rank[i], i});
    }
    rank[n - 1] = none;
    while (!heap.empty()) {
        const auto [r, i] = heap.top();
        heap.pop();
        if (!alive[i] || rank[i] != r) continue;  // stale entry
        const uint32_t j = next[i];
        next[i] = next[j];
        if (next[j] < n) prev[next[j]] = i;
        alive[j] = 0;
        rank[i] = pair_rank(i);
        if (rank[i] != none) heap.push({rank[i], i});
        if (prev[i] != none) {
            const uint32_t p = prev[i];
            rank[p] = pair_rank(p);
            if (rank[p] != none) heap.push({rank[p], p});
        }
    }
    for (uint32_t i = 0; i < n; i = next[i]) out.push_back(ranks.find(piece.substr(i, next[i] - i)));
}

void byte_pair_encode(const ByteRankTable& ranks, std::string_view piece, std::vector<uint32_t>& out) {
    if (piece.empty()) return;
    const uint32_t whole = ranks.find(piece);
    if (whole != none) {
        out.push_back(whole);
        return;
    }
    if (piece.size() > bpe_heap_threshold) {
        byte_pair_encode_heap(ranks, piece, out);
    } else {
        byte_pair_encode_scan(ranks, piece, out);
    }
}

}  // namespace kiln::model
