#include "model/reference/attn_res.hpp"

#include <cmath>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::reference {

void attn_res_mix(const float* const* candidates, size_t count, size_t d, const AttnResSite& site, float eps,
                  float* out) {
    if (site.proj.size() != d || site.norm.size() != d)
        throw InvalidArgument(fmt::format("attn_res: site weights must have {} values", d));
    std::vector<float> score(count);
    for (size_t i = 0; i < count; ++i) {
        const float* v = candidates[i];
        double inv = 1.0 / std::sqrt(dot(v, v, d) / double(d) + double(eps));
        double s = 0;
        for (size_t c = 0; c < d; ++c) s += double(v[c]) * inv * double(site.norm[c]) * double(site.proj[c]);
        score[i] = static_cast<float>(s);
    }
    softmax_inplace(score.data(), count);
    for (size_t c = 0; c < d; ++c) {
        double s = 0;
        for (size_t i = 0; i < count; ++i) s += double(score[i]) * candidates[i][c];  // raw values
        out[c] = static_cast<float>(s);
    }
}

ResidualStream::ResidualStream(Matrix embedding, std::optional<size_t> block_size, float eps)
    : block_size_(block_size), eps_(eps), partial_(std::move(embedding)) {
    if (block_size_ && *block_size_ == 0) throw InvalidArgument("attn_res_block_size must be positive");
}

Matrix ResidualStream::mix(const AttnResSite& site) const {
    Matrix out(partial_.rows, partial_.cols);
    std::vector<const float*> cand(blocks_.size() + 1);
    for (size_t t = 0; t < partial_.rows; ++t) {
        for (size_t i = 0; i < blocks_.size(); ++i) cand[i] = blocks_[i].row(t);
        cand[blocks_.size()] = partial_.row(t);
        attn_res_mix(cand.data(), cand.size(), partial_.cols, site, eps_, out.row(t));
    }
    return out;
}

void ResidualStream::add(const Matrix& m) {
    if (m.rows != partial_.rows || m.cols != partial_.cols) throw InvalidArgument("residual stream: shape mismatch");
    if (partial_empty_) {
        partial_ = m;
        partial_empty_ = false;
        return;
    }
    for (size_t i = 0; i < m.data.size(); ++i) partial_.data[i] += m.data[i];
}

Matrix ResidualStream::mixer_input(size_t layer, const AttnResSite& site) {
    if (!block_size_) return partial_;
    Matrix x = blocks_.empty() ? partial_ : mix(site);
    if (layer % *block_size_ == 0) {
        blocks_.push_back(partial_);  // bank the raw prefix sum
        partial_empty_ = true;        // P = None: the next add starts the new block
    }
    return x;
}

Matrix ResidualStream::ffn_input(const Matrix& mixer_out, const AttnResSite& site) {
    add(mixer_out);
    return block_size_ ? mix(site) : partial_;
}

void ResidualStream::add_ffn(const Matrix& ffn_out) { add(ffn_out); }

Matrix ResidualStream::output(const AttnResSite& site) const { return block_size_ ? mix(site) : partial_; }

}  // namespace kiln::model::reference
