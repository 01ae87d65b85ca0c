// The case files of tests/ops, one per family (and one for the moe_w4a16 and mla layers as a whole).
#pragma once

#include "tests/ops/op_case.hpp"

namespace kiln::ops {

void add_dequant_gemv_cases(CaseList& out);
void add_moe_routing_cases(CaseList& out);
void add_moe_w4a16_route_cases(CaseList& out);
void add_moe_w4a16_decode_cases(CaseList& out);
void add_moe_w4a16_decode_fused_cases(CaseList& out);
void add_moe_w4a16_prefill_cases(CaseList& out);
void add_moe_w4a16_combine_cases(CaseList& out);
void add_moe_w4a16_dequant_cases(CaseList& out);
void add_moe_w4a16_cases(CaseList& out);
void add_rmsnorm_cases(CaseList& out);
void add_glu_cases(CaseList& out);
void add_embedding_cases(CaseList& out);
void add_attn_res_cases(CaseList& out);
void add_router_cases(CaseList& out);
void add_linear_cases(CaseList& out);
void add_sample_cases(CaseList& out);
void add_linear_layer_cases(CaseList& out);
void add_mla_cache_append_cases(CaseList& out);
void add_mla_absorb_cases(CaseList& out);
void add_mla_decode_cases(CaseList& out);
void add_mla_prefill_cases(CaseList& out);
void add_mla_combine_cases(CaseList& out);
void add_mla_layer_cases(CaseList& out);
void add_kda_prep_cases(CaseList& out);
void add_kda_chunk_cases(CaseList& out);
void add_kda_decode_cases(CaseList& out);
void add_kda_out_norm_cases(CaseList& out);
void add_kda_cases(CaseList& out);

}  // namespace kiln::ops
