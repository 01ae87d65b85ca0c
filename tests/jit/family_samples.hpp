// Canonical descriptors of every built-in family, for the tests that must cover them all (descriptor text
// round trips, host templates that compile): each kernel entry point and template variant a family has on
// `target`, with small shapes. A family without samples here fails those tests, so a new family is added here.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "jit/families/attn_res.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/embedding.hpp"
#include "jit/families/glu.hpp"
#include "jit/families/linear.hpp"
#include "jit/families/mla_absorb.hpp"
#include "jit/families/mla_cache_append.hpp"
#include "jit/families/mla_combine.hpp"
#include "jit/families/mla_decode.hpp"
#include "jit/families/mla_prefill.hpp"
#include "jit/families/kda_chunk.hpp"
#include "jit/families/kda_decode.hpp"
#include "jit/families/kda_out_norm.hpp"
#include "jit/families/kda_prep.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/families/moe_w4a16_combine.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_decode_fused.hpp"
#include "jit/families/moe_w4a16_dequant.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "jit/families/rmsnorm.hpp"
#include "jit/families/router.hpp"
#include "jit/families/sample.hpp"

namespace kiln::test {

// Empty for a device-only family on the host target.
inline std::vector<jit::KernelDescriptor> sample_descriptors(std::string_view family, jit::Target t) {
    using namespace kiln::jit;
    using moe::Activation;
    using moe::Matrix;
    using moe::MatrixShape;
    const bool host = t.is_host();
    const WeightFormat int4 = WeightFormat::int4_g32_bf16, mxfp4 = WeightFormat::mxfp4_g32_e8m0;
    // gate_up of intermediate 96 (rows 2 x 128) over hidden 224 (masked K); down [256, 128]; wide MXFP4 scales
    const MatrixShape gu{int4, 256, 224}, gu4{mxfp4, 256, 224, true}, dn{mxfp4, 256, 128}, dn_int4{int4, 256, 128};
    if (family == DequantGemvFamily::k_name) {
        std::vector<KernelDescriptor> v = {DequantGemvFamily::descriptor(1, 64, 64, t)};
        if (!host) v.push_back(DequantGemvFamily::descriptor(16, 7168, 2048, t, 16));
        return v;
    }
    if (family == MoeRoutingFamily::k_name) {
        std::vector<KernelDescriptor> v = {MoeRoutingFamily::descriptor(8, 2, t)};
        if (!host) v.push_back(MoeRoutingFamily::descriptor(4096, 16, t, 128, 4));
        return v;
    }
    if (family == MoeW4A16RouteFamily::k_name) {
        std::vector<KernelDescriptor> v = {MoeW4A16RouteFamily::descriptor(8, 8, t)};
        if (!host) {
            v.push_back(MoeW4A16RouteFamily::descriptor(112, 64, t));
            v.push_back(MoeW4A16RouteFamily::descriptor(384, 192, t));
        }
        return v;
    }
    if (family == MoeW4A16DecodeFamily::k_name) {
        std::vector<KernelDescriptor> v = {
            MoeW4A16DecodeFamily::descriptor(Matrix::gate_up, gu, Activation::silu_glu, 8, t),
            MoeW4A16DecodeFamily::descriptor(Matrix::down, dn, Activation::silu_glu, 16, t),
            MoeW4A16DecodeFamily::descriptor(Matrix::down, dn_int4, Activation::silu_glu, 32, t, false, true),
        };
        if (!host) {
            v.push_back(MoeW4A16DecodeFamily::descriptor(Matrix::gate_up, gu4, Activation::situ_glu, 16, t, true));
            v.push_back(
                MoeW4A16DecodeFamily::descriptor(Matrix::down, dn, Activation::silu_glu, 8, t, true, true, 128, 3));
        }
        return v;
    }
    if (family == MoeW4A16DecodeFusedFamily::k_name) {
        if (host) return {};
        return {MoeW4A16DecodeFusedFamily::descriptor({int4, 256, 256}, Activation::silu_glu, 8, t),
                MoeW4A16DecodeFusedFamily::descriptor(gu4, Activation::situ_glu, 16, t, 3, 64)};
    }
    if (family == MoeW4A16PrefillFamily::k_name) {
        std::vector<KernelDescriptor> v = {
            MoeW4A16PrefillFamily::descriptor(Matrix::gate_up, gu, Activation::situ_glu, t),
            MoeW4A16PrefillFamily::descriptor(Matrix::down, dn, Activation::silu_glu, t),
        };
        if (!host) {
            v.push_back(
                MoeW4A16PrefillFamily::descriptor(Matrix::gate_up, gu4, Activation::silu_glu, t, MoeMma::wgmma));
            v.push_back(MoeW4A16PrefillFamily::descriptor(Matrix::gate_up, {int4, 4096, 7168}, Activation::silu_glu, t,
                                                          MoeMma::wgmma, true));
            v.push_back(MoeW4A16PrefillFamily::descriptor(Matrix::down, {int4, 7168, 256}, Activation::silu_glu, t,
                                                          MoeMma::wgmma, false, 192));
        }
        return v;
    }
    if (family == MoeW4A16CombineFamily::k_name) return {MoeW4A16CombineFamily::descriptor(t)};
    if (family == MoeW4A16DequantFamily::k_name)
        return {MoeW4A16DequantFamily::descriptor(gu, t), MoeW4A16DequantFamily::descriptor(gu4, t)};
    if (family == RmsNormFamily::k_name)
        return {RmsNormFamily::descriptor(RmsNormMode::rows, t), RmsNormFamily::descriptor(RmsNormMode::add, t),
                RmsNormFamily::descriptor(RmsNormMode::heads, t)};
    if (family == GluFamily::k_name)
        return {GluFamily::descriptor(GluMode::silu, t), GluFamily::descriptor(GluMode::situ, t),
                GluFamily::descriptor(GluMode::sigmoid_gate, t)};
    if (family == EmbeddingFamily::k_name) return {EmbeddingFamily::descriptor(t)};
    if (family == AttnResFamily::k_name) return {AttnResFamily::descriptor(t)};
    if (family == RouterFamily::k_name) {
        std::vector<KernelDescriptor> v = {RouterFamily::descriptor(64, 6, t)};
        if (!host) v.push_back(RouterFamily::descriptor(896, 16, t, 8));
        return v;
    }
    if (family == LinearFamily::k_name) {
        std::vector<KernelDescriptor> v = {LinearFamily::descriptor(LinearOut::bf16, t),
                                           LinearFamily::descriptor(LinearOut::f32, t)};
        if (!host) {
            v.push_back(LinearFamily::descriptor(LinearOut::f32, t, 16, 64, 1, 4));
            v.push_back(LinearFamily::descriptor(LinearOut::bf16, t, 128, 128, 2, 4));
        }
        return v;
    }
    if (family == SampleFamily::k_name) return {SampleFamily::descriptor(t)};
    if (family == MlaCacheAppendFamily::k_name) return {MlaCacheAppendFamily::descriptor(t)};
    if (family == MlaCombineFamily::k_name) return {MlaCombineFamily::descriptor(t)};
    if (family == MlaAbsorbFamily::k_name)
        return {MlaAbsorbFamily::descriptor(MlaAbsorbMode::q, t), MlaAbsorbFamily::descriptor(MlaAbsorbMode::out, t)};
    if (family == MlaDecodeFamily::k_name) {
        std::vector<KernelDescriptor> v = {MlaDecodeFamily::descriptor(64, 16, t)};
        if (!host) {
            v.push_back(MlaDecodeFamily::descriptor(512, 64, t, 32));
            v.push_back(MlaDecodeFamily::descriptor(512, 64, t, 32, true));
        }
        return v;
    }
    if (family == MlaPrefillFamily::k_name) {
        std::vector<KernelDescriptor> v = {MlaPrefillFamily::descriptor(64, 16, t)};
        if (!host) {
            v.push_back(MlaPrefillFamily::descriptor(512, 64, t, 2, 8));
            v.push_back(MlaPrefillFamily::descriptor(512, 64, t, 4, 8, true));
        }
        return v;
    }
    if (family == KdaPrepFamily::k_name) {
        std::vector<KernelDescriptor> v = {KdaPrepFamily::descriptor(128, t), KdaPrepFamily::descriptor(32, t)};
        if (!host) v.push_back(KdaPrepFamily::descriptor(64, t, 4));
        return v;
    }
    if (family == KdaChunkFamily::k_name) return {KdaChunkFamily::descriptor(128, t), KdaChunkFamily::descriptor(32, t)};
    if (family == KdaDecodeFamily::k_name) {
        std::vector<KernelDescriptor> v = {KdaDecodeFamily::descriptor(128, t), KdaDecodeFamily::descriptor(64, t)};
        if (!host) v.push_back(KdaDecodeFamily::descriptor(128, t, 4));
        return v;
    }
    if (family == KdaOutNormFamily::k_name) return {KdaOutNormFamily::descriptor(128, t)};
    FAIL("no sample descriptors for family " << std::string(family) << ": add them to tests/jit/family_samples.hpp");
    return {};
}

}  // namespace kiln::test
