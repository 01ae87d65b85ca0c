// Canonical descriptors of every built-in family, for the tests that must cover them all (descriptor text
// round trips, host templates that compile): each kernel entry point and template variant a family has on
// `target`, with small shapes. A family without samples here fails those tests, so a new family is added here.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "jit/families/dequant_gemv.hpp"
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
