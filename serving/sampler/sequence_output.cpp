#include "serving/sampler/sequence_output.hpp"

#include <algorithm>

namespace kiln::serving::sampler {

namespace {

bool contains(const std::vector<TokenId>& ids, TokenId t) { return std::find(ids.begin(), ids.end(), t) != ids.end(); }

}  // namespace

SequenceOutput::SequenceOutput(const model::Tokenizer& tokenizer, const SamplingParams& params, std::vector<TokenId> eos)
    : decoder_(tokenizer, params.skip_special_tokens),
      min_tokens_(params.min_tokens),
      max_tokens_(params.max_tokens),
      include_stop_(params.include_stop_str_in_output),
      ignore_eos_(params.ignore_eos),
      eos_(std::move(eos)),
      stop_ids_(params.stop_token_ids),
      stops_(params.stop) {
    for (const std::string& s : stops_) {
        std::vector<uint32_t> f(s.size(), 0);
        for (size_t i = 1, k = 0; i < s.size(); ++i) {
            while (k > 0 && s[i] != s[k]) k = f[k - 1];
            if (s[i] == s[k]) ++k;
            f[i] = static_cast<uint32_t>(k);
        }
        failure_.push_back(std::move(f));
    }
}

// The longest suffix of tail_ that is a proper prefix of some stop string: a KMP run over the last
// |stop| - 1 bytes of the tail ends in exactly that state.
size_t SequenceOutput::held_suffix() const {
    size_t hold = 0;
    for (size_t j = 0; j < stops_.size(); ++j) {
        const std::string& s = stops_[j];
        if (s.size() < 2) continue;
        const size_t window = std::min(tail_.size(), s.size() - 1);
        size_t k = 0;
        for (size_t i = tail_.size() - window; i < tail_.size(); ++i) {
            while (k > 0 && (k == s.size() || tail_[i] != s[k])) k = failure_[j][k - 1];
            if (tail_[i] == s[k]) ++k;
        }
        if (k == s.size()) k = failure_[j][k - 1];
        hold = std::max(hold, k);
    }
    return hold;
}

void SequenceOutput::finish(OutputDelta& d, FinishReason reason) {
    d.text += tail_;
    d.text += decoder_.finish();
    tail_.clear();
    d.finish = reason;
    finished_ = true;
}

OutputDelta SequenceOutput::push(TokenId token, bool context_full) {
    if (finished_) throw InvalidArgument("sequence output: a token after the finish");
    ++generated_;
    OutputDelta d;
    const bool may_stop = generated_ >= min_tokens_;
    if (may_stop && ((!ignore_eos_ && contains(eos_, token)) || contains(stop_ids_, token))) {
        if (include_stop_) tail_ += decoder_.push(token);
        d.stop_token = token;
        finish(d, FinishReason::stop);
        return d;
    }
    tail_ += decoder_.push(token);
    if (may_stop) {
        size_t best = std::string::npos, which = 0;
        for (size_t j = 0; j < stops_.size(); ++j) {
            const size_t at = tail_.find(stops_[j]);
            if (at < best || (at == best && at != std::string::npos && stops_[j].size() > stops_[which].size())) {
                best = at;
                which = j;
            }
        }
        if (best != std::string::npos) {
            d.text = tail_.substr(0, best + (include_stop_ ? stops_[which].size() : 0));
            tail_.clear();
            d.stop_string = stops_[which];
            d.finish = FinishReason::stop;
            finished_ = true;
            return d;
        }
    }
    if (generated_ >= max_tokens_ || context_full) {
        finish(d, FinishReason::length);
        return d;
    }
    const size_t keep = held_suffix();
    if (keep == 0) {
        d.text.swap(tail_);
    } else {
        d.text = tail_.substr(0, tail_.size() - keep);
        tail_.erase(0, tail_.size() - keep);
    }
    return d;
}

}  // namespace kiln::serving::sampler
