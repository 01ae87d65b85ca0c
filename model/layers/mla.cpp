#include "model/layers/mla.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/mla_absorb_params.h"
#include "common/mla_attention_params.h"
#include "common/mla_cache_append_params.h"
#include "common/mla_combine_params.h"
#include "jit/families/mla_absorb.hpp"
#include "jit/families/mla_cache_append.hpp"
#include "jit/families/mla_combine.hpp"
#include "jit/families/mla_common.hpp"
#include "jit/families/mla_decode.hpp"
#include "jit/families/mla_prefill.hpp"
#include "runtime/error.hpp"

namespace kiln::model::layers {

using runtime::DType;
using runtime::TensorView;

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A bf16 [rows, cols] view whose rows may be strided (elements contiguous within a row); returns the stride.
int64_t expect_rows(const TensorView& t, const char* what, int64_t rows, int64_t cols, runtime::Location where) {
    if (t.dtype != DType::bf16 || t.rank != 2 || t.location != where)
        throw InvalidArgument(fmt::format("mla {}: expected a bf16 2-d {} tensor, got {}", what,
                                          where == runtime::Location::device ? "device" : "host", t.describe()));
    if (t.shape[0] != rows || t.shape[1] != cols)
        throw InvalidArgument(fmt::format("mla {}: expected shape [{}, {}], got {}", what, rows, cols, t.describe()));
    if (t.strides[1] != 1 || (rows > 1 && t.strides[0] < cols))
        throw InvalidArgument(fmt::format("mla {}: rows must be contiguous and not overlap, got {}", what, t.describe()));
    if (t.data == nullptr && rows > 0) throw InvalidArgument(fmt::format("mla {}: null data pointer", what));
    return rows > 1 ? t.strides[0] : cols;
}

}  // namespace

MlaWorkspace::MlaWorkspace(runtime::Backend& backend, const MlaDims& dims, int max_tokens,
                           const autotune::MlaTuning& tuning)
    : backend_(backend), dims_(dims), max_tokens_(max_tokens) {
    if (max_tokens < 1 || dims.heads < 1 || dims.kv_lora_rank < 1 || dims.qk_rope < 0)
        throw InvalidArgument(fmt::format("mla workspace: max_tokens={}, heads={}, d_c={} must be positive", max_tokens,
                                          dims.heads, dims.kv_lora_rank));
    const size_t rows = size_t(max_tokens) * size_t(dims.heads);
    qt = backend.alloc(rows * size_t(dims.cache_dim()) * 2);
    latent_out = backend.alloc(rows * size_t(dims.kv_lora_rank) * 2);
    if (tuning.partial_rows > 0 && tuning.max_splits > 1) {
        partial_rows_ = tuning.partial_rows;
        part_o = backend.alloc(size_t(tuning.partial_rows) * size_t(dims.kv_lora_rank) * 4);
        part_lse = backend.alloc(size_t(tuning.partial_rows) * 4);
    }
}

MlaLayer::MlaLayer(jit::Dispatcher& disp, runtime::Backend& backend, const MlaDims& dims,
                   const forward::MemoryLayout& layout, int mla_layer, int max_tokens, const autotune::MlaTuning& tuning,
                   std::shared_ptr<MlaWorkspace> workspace)
    : backend_(backend), dims_(dims), tuning_(tuning), max_tokens_(max_tokens), ws_(std::move(workspace)) {
    autotune::validate(tuning);
    if (dims.heads < 1 || dims.qk_nope < 1 || dims.v_head < 1 || dims.qk_nope > jit::mla::k_max_latent ||
        dims.v_head > jit::mla::k_max_latent)
        throw InvalidArgument(fmt::format("mla: heads={}, qk_nope={}, v_head={} out of range", dims.heads, dims.qk_nope,
                                          dims.v_head));
    if (max_tokens < 1) throw InvalidArgument(fmt::format("mla: max_tokens={} must be positive", max_tokens));
    if (layout.cache_dim != dims.cache_dim())
        throw InvalidArgument(fmt::format("mla: the memory layout holds {} values per token, the layer {} (d_c {} + d_r {})",
                                          layout.cache_dim, dims.cache_dim(), dims.kv_lora_rank, dims.qk_rope));
    if (mla_layer < 0 || mla_layer >= static_cast<int>(layout.mla_offset.size()))
        throw InvalidArgument(fmt::format("mla: MLA layer {} outside the layout's {} MLA layers", mla_layer,
                                          layout.mla_offset.size()));
    layer_offset_ = layout.mla_offset[size_t(mla_layer)];
    page_bytes_ = layout.page_bytes;
    page_size_ = layout.page_size;
    compute_units_ = std::max(1, backend.compute_units());

    const bool host = backend.kind() == runtime::BackendKind::host;
    const jit::Target target = host ? jit::Target::host_target() : disp.device_target();
    const int dc = dims.kv_lora_rank, dr = dims.qk_rope;
    k_append_ = &disp.get(jit::MlaCacheAppendFamily::descriptor(target));
    k_absorb_q_ = &disp.get(jit::MlaAbsorbFamily::descriptor(jit::MlaAbsorbMode::q, target));
    k_absorb_out_ = &disp.get(jit::MlaAbsorbFamily::descriptor(jit::MlaAbsorbMode::out, target));
    const bool mma_ok = !host && (dc + dr) % 16 == 0;  // the tensor-core kernels' k-steps
    k_decode_ = &disp.get(jit::MlaDecodeFamily::descriptor(dc, dr, target, tuning.decode_heads_per_cta,
                                                           tuning.decode_mma && mma_ok));
    k_prefill_ = &disp.get(jit::MlaPrefillFamily::descriptor(dc, dr, target, tuning.prefill_tokens_per_cta,
                                                             tuning.prefill_heads_per_cta, tuning.prefill_mma && mma_ok));
    k_combine_ = &disp.get(jit::MlaCombineFamily::descriptor(target));

    if (!ws_) {
        ws_ = std::make_shared<MlaWorkspace>(backend, dims, max_tokens, tuning);
    } else {
        const MlaDims& w = ws_->dims_;
        if (&ws_->backend_ != &backend)
            throw InvalidArgument("mla: the shared workspace belongs to another backend");
        if (w.heads != dims.heads || w.kv_lora_rank != dims.kv_lora_rank || w.qk_rope != dims.qk_rope)
            throw InvalidArgument(fmt::format("mla: the shared workspace is for {} heads, d_c {}, d_r {}; the layer has "
                                              "{}, {}, {}",
                                              w.heads, w.kv_lora_rank, w.qk_rope, dims.heads, dims.kv_lora_rank,
                                              dims.qk_rope));
        const int64_t want_rows = tuning.max_splits > 1 ? tuning.partial_rows : 0;
        if (ws_->max_tokens_ < max_tokens || ws_->partial_rows_ < want_rows)
            throw InvalidArgument(fmt::format("mla: the shared workspace holds {} tokens and {} partial rows, the layer "
                                              "needs {} and {}",
                                              ws_->max_tokens_, ws_->partial_rows_, max_tokens, want_rows));
    }
}

MlaPlan MlaLayer::plan(const forward::StepIndexHost& idx) const {
    if (idx.num_tokens < 1 || idx.num_tokens > max_tokens_)
        throw InvalidArgument(fmt::format("mla: a step of {} tokens (the layer holds 1 to {})", idx.num_tokens, max_tokens_));
    MlaPlan p;
    p.tokens = idx.num_tokens;
    p.seqs = idx.num_seqs;
    p.decode = idx.num_decodes > 0;
    p.prefill = idx.num_decodes < idx.num_seqs;
    const int64_t hb_d = ceil_div(dims_.heads, tuning_.decode_heads_per_cta);
    const int64_t hb_p = ceil_div(dims_.heads, tuning_.prefill_heads_per_cta);
    int64_t ctas = 0;
    for (int32_t s = 0; s < idx.num_seqs; ++s) {
        const int64_t n = idx.cu_seqlens[size_t(s) + 1] - idx.cu_seqlens[size_t(s)];
        p.max_kv = std::max<int64_t>(p.max_kv, idx.seq_start[size_t(s)] + n);
        ctas += n == 1 ? hb_d : ceil_div(n, tuning_.prefill_tokens_per_cta) * hb_p;
    }
    const int64_t rows = int64_t(idx.num_tokens) * dims_.heads;
    autotune::MlaTuning t = tuning_;
    if (!ws_->part_o) t.max_splits = 1;
    const autotune::MlaSplit split = autotune::choose_mla_split(t, p.max_kv, ctas, rows, compute_units_);
    p.splits = split.splits;
    p.split_keys = split.split_keys;
    p.combine = p.splits > 1;
    return p;
}

void MlaLayer::check(const MlaPlan& p, const MlaTensors& t, const kiln_params::StepIndex& idx,
                     const runtime::Stream& s) const {
    if (&s.backend() != &backend_) throw InvalidArgument("mla: the stream belongs to another backend");
    if (idx.num_tokens != p.tokens || idx.num_seqs != p.seqs)
        throw InvalidArgument(fmt::format("mla: the step index has {} tokens in {} sequences, the plan {} in {}",
                                          idx.num_tokens, idx.num_seqs, p.tokens, p.seqs));
    if (idx.page_size != page_size_ || idx.page_bytes != page_bytes_)
        throw InvalidArgument(fmt::format("mla: the step index has pages of {} tokens / {} bytes, the layout {} / {}",
                                          idx.page_size, idx.page_bytes, page_size_, page_bytes_));
    if (p.splits < 1 || p.splits > tuning_.max_splits || int64_t(p.splits) * p.split_keys < p.max_kv ||
        (p.splits > 1 && int64_t(p.tokens) * dims_.heads * p.splits > tuning_.partial_rows))
        throw InvalidArgument("mla: the plan's context pieces do not fit this layer (a plan of another layer?)");
    const auto where = backend_.location();
    const int64_t T = p.tokens, H = dims_.heads;
    runtime::expect_tensor(t.q, "mla q", DType::bf16, 2, where);
    runtime::expect_shape(t.q, "mla q", {T, H * dims_.qk_head()});
    runtime::expect_tensor(t.kv_b, "mla kv_b", DType::bf16, 2, where);
    runtime::expect_shape(t.kv_b, "mla kv_b", {H * (dims_.qk_nope + dims_.v_head), dims_.kv_lora_rank});
    runtime::expect_tensor(t.out, "mla out", DType::bf16, 2, where);
    runtime::expect_shape(t.out, "mla out", {T, H * dims_.v_head});
    if (t.gate.data) {
        runtime::expect_tensor(t.gate, "mla gate", DType::bf16, 2, where);
        runtime::expect_shape(t.gate, "mla gate", {T, H * dims_.v_head});
    }
    expect_rows(t.latent, "latent", T, dims_.kv_lora_rank, where);
    expect_rows(t.k_rope, "k_rope", T, dims_.qk_rope, where);
}

void MlaLayer::run(const MlaPlan& p, const MlaTensors& t, const kiln_params::StepIndex& idx, runtime::Stream& s) {
    check(p, t, idx, s);
    const auto where = backend_.location();
    const int H = dims_.heads, dc = dims_.kv_lora_rank, dr = dims_.qk_rope, dn = dims_.qk_nope, dv = dims_.v_head;
    const int cd = dims_.cache_dim();

    kiln_params::mla::CacheAppendParams ap{};
    ap.idx = idx;
    ap.latent = t.latent.ptr<const uint16_t>();
    ap.k_rope = t.k_rope.ptr<const uint16_t>();
    ap.layer_offset = layer_offset_;
    ap.latent_stride = static_cast<int32_t>(expect_rows(t.latent, "latent", p.tokens, dc, where));
    ap.rope_stride = static_cast<int32_t>(expect_rows(t.k_rope, "k_rope", p.tokens, dr, where));
    ap.d_c = dc;
    ap.d_r = dr;

    kiln_params::mla::AbsorbParams qp{};
    qp.x = t.q.ptr<const uint16_t>();
    qp.kv_b = t.kv_b.ptr<const uint16_t>();
    qp.y = ws_->qt.as<uint16_t>();
    qp.num_tokens = p.tokens;
    qp.heads = H;
    qp.x_stride = H * dims_.qk_head();
    qp.out_stride = H * cd;
    qp.d_n = dn;
    qp.d_r = dr;
    qp.d_v = dv;
    qp.d_c = dc;

    kiln_params::mla::AttentionParams at{};
    at.idx = idx;
    at.q = ws_->qt.as<const uint16_t>();
    at.out = ws_->latent_out.as<uint16_t>();
    at.part_o = ws_->part_o ? ws_->part_o.as<float>() : nullptr;
    at.part_lse = ws_->part_lse ? ws_->part_lse.as<float>() : nullptr;
    at.layer_offset = layer_offset_;
    at.scale = static_cast<float>(1.0 / std::sqrt(double(dims_.qk_head())));
    at.heads = H;
    at.splits = p.splits;
    at.split_keys = p.split_keys;

    kiln_params::mla::AbsorbParams op = qp;
    op.x = ws_->latent_out.as<const uint16_t>();
    op.gate = t.gate.data ? t.gate.ptr<const uint16_t>() : nullptr;
    op.y = t.out.ptr<uint16_t>();
    op.x_stride = H * dc;
    op.out_stride = H * dv;

    jit::launch_mla_cache_append(*k_append_, s, ap);
    jit::launch_mla_absorb(*k_absorb_q_, s, qp);
    if (p.decode) {
        at.only = p.prefill ? 1 : 0;
        jit::launch_mla_decode(*k_decode_, s, at);
    }
    if (p.prefill) {
        at.only = p.decode ? 2 : 0;
        jit::launch_mla_prefill(*k_prefill_, s, at);
    }
    if (p.combine) {
        kiln_params::mla::CombineParams cp{};
        cp.token_pos = idx.token_pos;
        cp.part_o = at.part_o;
        cp.part_lse = at.part_lse;
        cp.out = ws_->latent_out.as<uint16_t>();
        cp.num_tokens = p.tokens;
        cp.heads = H;
        cp.splits = p.splits;
        cp.split_keys = p.split_keys;
        cp.d_c = dc;
        jit::launch_mla_combine(*k_combine_, s, cp);
    }
    jit::launch_mla_absorb(*k_absorb_out_, s, op);
}

std::vector<const jit::LoadedKernel*> MlaLayer::kernels() const {
    return {k_append_, k_absorb_q_, k_decode_, k_prefill_, k_combine_, k_absorb_out_};
}

}  // namespace kiln::model::layers
