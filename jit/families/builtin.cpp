// The families shipped with kiln.
#include <memory>

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
#include "jit/family.hpp"

namespace kiln::jit {

void register_builtin_families(FamilyRegistry& r) {
    r.add(std::make_unique<DequantGemvFamily>());
    r.add(std::make_unique<MoeRoutingFamily>());
    r.add(std::make_unique<MoeW4A16RouteFamily>());
    r.add(std::make_unique<MoeW4A16DecodeFamily>());
    r.add(std::make_unique<MoeW4A16DecodeFusedFamily>());
    r.add(std::make_unique<MoeW4A16PrefillFamily>());
    r.add(std::make_unique<MoeW4A16CombineFamily>());
    r.add(std::make_unique<MoeW4A16DequantFamily>());
    r.add(std::make_unique<RmsNormFamily>());
    r.add(std::make_unique<GluFamily>());
    r.add(std::make_unique<EmbeddingFamily>());
    r.add(std::make_unique<AttnResFamily>());
    r.add(std::make_unique<RouterFamily>());
    r.add(std::make_unique<LinearFamily>());
    r.add(std::make_unique<SampleFamily>());
    r.add(std::make_unique<MlaCacheAppendFamily>());
    r.add(std::make_unique<MlaAbsorbFamily>());
    r.add(std::make_unique<MlaDecodeFamily>());
    r.add(std::make_unique<MlaPrefillFamily>());
    r.add(std::make_unique<MlaCombineFamily>());
    r.add(std::make_unique<KdaPrepFamily>());
    r.add(std::make_unique<KdaChunkFamily>());
    r.add(std::make_unique<KdaDecodeFamily>());
    r.add(std::make_unique<KdaOutNormFamily>());
}

}  // namespace kiln::jit
