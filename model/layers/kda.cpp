#include "model/layers/kda.hpp"

#include <fmt/format.h>

#include "jit/families/kda_chunk.hpp"
#include "jit/families/kda_decode.hpp"
#include "jit/families/kda_out_norm.hpp"
#include "jit/families/kda_prep.hpp"
#include "runtime/error.hpp"

namespace kiln::model::layers {

using runtime::DType;
using runtime::TensorView;

namespace {

// A [rows, cols] view whose columns are contiguous; its row stride in elements.
int64_t rows_view(const TensorView& t, std::string_view what, DType dt, int64_t rows, int64_t cols, runtime::Location loc) {
    runtime::expect_tensor(t, what, dt, 2, loc);
    runtime::expect_shape(t, what, {rows, cols});
    if (t.strides[1] != 1 || t.strides[0] < cols)
        throw InvalidArgument(fmt::format("kda: {} ({}) needs contiguous rows", what, t.describe()));
    return t.strides[0];
}

void vector_view(const TensorView& t, std::string_view what, int64_t at_least, runtime::Location loc, bool exact) {
    runtime::expect_tensor(t, what, DType::f32, 1, loc);
    if (exact ? t.shape[0] != at_least : t.shape[0] < at_least)
        throw InvalidArgument(fmt::format("kda: {} is {}, needs {}{} values", what, t.describe(), exact ? "" : "at least ", at_least));
    if (!t.is_contiguous()) throw InvalidArgument(fmt::format("kda: {} must be contiguous", what));
}

}  // namespace

KdaLayer::KdaLayer(jit::Dispatcher& disp, runtime::Backend& backend, const KdaLayerDims& dims,
                   const forward::MemoryLayout& layout, int kda_layer, const autotune::KdaTuning& tuning)
    : backend_(backend), dims_(dims), tuning_(tuning) {
    if (dims.heads < 1) throw InvalidArgument(fmt::format("kda: {} heads", dims.heads));
    if (dims.head_dim != 32 && dims.head_dim != 64 && dims.head_dim != 128)
        throw InvalidArgument(fmt::format("kda: head dim {} (built for 32, 64 and 128)", dims.head_dim));
    if (dims.conv_size != 4) throw InvalidArgument(fmt::format("kda: short conv size {} (built for 4)", dims.conv_size));
    if (dims.max_tokens < 1) throw InvalidArgument(fmt::format("kda: max_tokens={} must be positive", dims.max_tokens));
    if (dims.gate_lower_bound && !(*dims.gate_lower_bound < 0.0f))
        throw InvalidArgument(fmt::format("kda: gate lower bound {} must be negative", *dims.gate_lower_bound));
    if (layout.kda_heads != dims.heads || layout.kda_head_dim != dims.head_dim || layout.conv_size != dims.conv_size)
        throw InvalidArgument(fmt::format("kda: layout of {} heads of {} (conv {}) does not hold {} heads of {} (conv {})",
                                          layout.kda_heads, layout.kda_head_dim, layout.conv_size, dims.heads,
                                          dims.head_dim, dims.conv_size));
    if (kda_layer < 0 || kda_layer >= static_cast<int>(layout.kda_state_offset.size()))
        throw InvalidArgument(fmt::format("kda: layer {} outside the layout's {} KDA layers", kda_layer,
                                          layout.kda_state_offset.size()));
    slot_bytes_ = layout.slot_bytes;
    state_offset_ = layout.kda_state_offset[kda_layer];
    conv_offset_ = layout.kda_conv_offset[kda_layer];
    const jit::Target target =
        backend.kind() == runtime::BackendKind::host ? jit::Target::host_target() : disp.device_target();
    const int K = dims.head_dim;
    const bool host = target.is_host();
    prep_ = &disp.get(jit::KdaPrepFamily::descriptor(K, target, host ? 0 : tuning.prep_tile));
    chunk_ = &disp.get(jit::KdaChunkFamily::descriptor(K, target));
    if (tuning.decode_kernel) decode_ = &disp.get(jit::KdaDecodeFamily::descriptor(K, target, host ? 0 : tuning.decode_v_split));
    norm_ = &disp.get(jit::KdaOutNormFamily::descriptor(K, target));
    const size_t rows = static_cast<size_t>(dims.max_tokens);
    const size_t width = static_cast<size_t>(dims.heads) * K;
    q_ = backend.alloc(rows * width * 4);
    k_ = backend.alloc(rows * width * 4);
    v_ = backend.alloc(rows * width * 4);
    g_ = backend.alloc(rows * width * 4);
    o_ = backend.alloc(rows * width * 4);
    beta_ = backend.alloc(rows * static_cast<size_t>(dims.heads) * 4);
}

KdaPlan KdaLayer::plan(const forward::StepIndexHost& x) const {
    if (x.num_tokens < 1 || x.num_seqs < 1)
        throw InvalidArgument(fmt::format("kda: a step of {} sequences and {} tokens", x.num_seqs, x.num_tokens));
    if (x.num_tokens > dims_.max_tokens)
        throw InvalidArgument(fmt::format("kda: {} new tokens exceed the layer's workspace of {}", x.num_tokens, dims_.max_tokens));
    KdaPlan p;
    p.num_seqs = x.num_seqs;
    p.num_tokens = x.num_tokens;
    p.num_decodes = x.num_decodes;
    if (decode_ != nullptr && x.num_decodes > 0) {
        p.decode = true;
        p.chunk = x.num_decodes < x.num_seqs;
        p.chunk_skips_single = true;
    } else {
        p.chunk = true;
    }
    return p;
}

void KdaLayer::check(const KdaPlan& p, const KdaTensors& t, const kiln_params::StepIndex& idx, const runtime::Stream& s) const {
    if (&s.backend() != &backend_) throw InvalidArgument("kda: the stream belongs to another backend than the layer");
    if (idx.num_seqs != p.num_seqs || idx.num_tokens != p.num_tokens)
        throw InvalidArgument(fmt::format("kda: the step index ({} sequences, {} tokens) is not the plan's ({}, {})",
                                          idx.num_seqs, idx.num_tokens, p.num_seqs, p.num_tokens));
    if (idx.slot_bytes != slot_bytes_)
        throw InvalidArgument(fmt::format("kda: the step index's slots of {} bytes are not the layout's {}", idx.slot_bytes, slot_bytes_));
    const auto loc = backend_.location();
    const int64_t T = p.num_tokens, H = dims_.heads, K = dims_.head_dim, HK = H * K;
    const int64_t qs = rows_view(t.q_raw, "q_raw", DType::bf16, T, HK, loc);
    if (rows_view(t.k_raw, "k_raw", DType::bf16, T, HK, loc) != qs || rows_view(t.v_raw, "v_raw", DType::bf16, T, HK, loc) != qs)
        throw InvalidArgument("kda: q_raw, k_raw and v_raw must share one row stride");
    rows_view(t.z, "z", DType::bf16, T, HK, loc);
    rows_view(t.beta_raw, "beta_raw", DType::bf16, T, H, loc);
    rows_view(t.gate, "gate", DType::bf16, T, HK, loc);
    rows_view(t.out, "out", DType::bf16, T, HK, loc);
    for (auto [v, name] : {std::pair{&t.q_conv, "q_conv"}, {&t.k_conv, "k_conv"}, {&t.v_conv, "v_conv"}}) {
        runtime::expect_tensor(*v, name, DType::f32, 2, loc);
        runtime::expect_shape(*v, name, {HK, 4});
        if (!v->is_contiguous()) throw InvalidArgument(fmt::format("kda: {} must be contiguous", name));
    }
    vector_view(t.dt_bias, "dt_bias", HK, loc, true);
    vector_view(t.a_log, "A_log", H, loc, false);
    vector_view(t.o_norm, "o_norm", K, loc, true);
}

void KdaLayer::run(const KdaPlan& plan, const KdaTensors& t, const kiln_params::StepIndex& idx, runtime::Stream& s) {
    check(plan, t, idx, s);
    const int H = dims_.heads;
    float* q = q_.as<float>();
    float* k = k_.as<float>();
    float* v = v_.as<float>();
    float* g = g_.as<float>();
    float* beta = beta_.as<float>();
    float* o = o_.as<float>();

    kiln_params::KdaPrepParams pp{};
    pp.idx = idx;
    pp.q_raw = t.q_raw.ptr<const uint16_t>();
    pp.k_raw = t.k_raw.ptr<const uint16_t>();
    pp.v_raw = t.v_raw.ptr<const uint16_t>();
    pp.z = t.z.ptr<const uint16_t>();
    pp.beta_raw = t.beta_raw.ptr<const uint16_t>();
    pp.q_conv = t.q_conv.ptr<const float>();
    pp.k_conv = t.k_conv.ptr<const float>();
    pp.v_conv = t.v_conv.ptr<const float>();
    pp.dt_bias = t.dt_bias.ptr<const float>();
    pp.a_log = t.a_log.ptr<const float>();
    pp.q = q;
    pp.k = k;
    pp.v = v;
    pp.g = g;
    pp.beta = beta;
    pp.conv_offset = conv_offset_;
    pp.raw_stride = static_cast<int32_t>(t.q_raw.strides[0]);
    pp.z_stride = static_cast<int32_t>(t.z.strides[0]);
    pp.beta_stride = static_cast<int32_t>(t.beta_raw.strides[0]);
    pp.heads = H;
    pp.lower_bound = dims_.gate_lower_bound.value_or(0.0f);
    pp.softplus_gate = dims_.gate_lower_bound ? 0 : 1;
    jit::launch_kda_prep(*prep_, s, pp);

    if (plan.decode) {
        kiln_params::KdaDecodeParams dp{};
        dp.idx = idx;
        dp.q = q;
        dp.k = k;
        dp.v = v;
        dp.g = g;
        dp.beta = beta;
        dp.o = o;
        dp.state_offset = state_offset_;
        dp.heads = H;
        jit::launch_kda_decode(*decode_, s, dp);
    }
    if (plan.chunk) {
        kiln_params::KdaChunkParams cp{};
        cp.idx = idx;
        cp.q = q;
        cp.k = k;
        cp.v = v;
        cp.g = g;
        cp.beta = beta;
        cp.o = o;
        cp.state_offset = state_offset_;
        cp.heads = H;
        cp.skip_single = plan.chunk_skips_single ? 1 : 0;
        jit::launch_kda_chunk(*chunk_, s, cp);
    }

    kiln_params::KdaOutNormParams np{};
    np.o = o;
    np.gate = t.gate.ptr<const uint16_t>();
    np.o_norm = t.o_norm.ptr<const float>();
    np.out = t.out.ptr<uint16_t>();
    np.gate_stride = static_cast<int32_t>(t.gate.strides[0]);
    np.out_stride = static_cast<int32_t>(t.out.strides[0]);
    np.num_tokens = plan.num_tokens;
    np.heads = H;
    np.eps = dims_.norm_eps;
    jit::launch_kda_out_norm(*norm_, s, np);
}

}  // namespace kiln::model::layers
