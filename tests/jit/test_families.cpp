// Family registry, the families' config field tables, generated sources and the CPU references the op
// harness checks kernels against.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>

#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/family.hpp"
#include "jit/kernel_key.hpp"
#include "runtime/bf16.hpp"
#include "runtime/error.hpp"
#include "tests/jit/family_samples.hpp"

using namespace kiln::jit;

TEST_CASE("registry: explicit registration, lookup, duplicates refused") {
    FamilyRegistry r;
    CHECK(r.list().empty());
    CHECK_THROWS_AS(r.get("moe_routing"), kiln::NotFound);
    register_builtin_families(r);
    CHECK(r.list().size() == 24);
    CHECK(r.list()[0]->name() == "attn_res");
    CHECK(r.list()[20]->name() == "moe_w4a16_route");
    CHECK(r.list()[23]->name() == "sample");
    CHECK(r.get("moe_routing").name() == "moe_routing");
    CHECK_THROWS_AS(r.add(std::make_unique<MoeRoutingFamily>()), kiln::InvalidArgument);
    try {
        r.get("moe_grouped");
        FAIL("expected NotFound");
    } catch (const kiln::NotFound& e) {
        CHECK(std::string(e.what()).find("(registered: attn_res, dequant_gemv, embedding, glu, kda_chunk, kda_decode, kda_out_norm, kda_prep, linear, mla_absorb, mla_cache_append, mla_combine, mla_decode, mla_prefill, moe_routing, moe_w4a16_combine, moe_w4a16_decode, moe_w4a16_decode_fused, moe_w4a16_dequant, moe_w4a16_prefill, moe_w4a16_route, rmsnorm, router, sample)") != std::string::npos);
    }
    // Every family has a host implementation unless it is a device-only fusion of families that do (a family
    // with neither is refused at registration).
    for (const Family* f : r.list()) {
        CAPTURE(std::string(f->name()));
        CHECK(f->has_host_source() != f->device_only());
        CHECK(f->device_only() == (f->name() == "moe_w4a16_decode_fused"));
        if (f->device_only())
            CHECK_THROWS_AS(f->host_source(kiln::test::sample_descriptors(f->name(), Target::sm(90, 'a')).at(0)),
                            kiln::NotFound);
    }
    HostSource hs = r.get("moe_routing").host_source(MoeRoutingFamily::descriptor(8, 2, Target::host_target()));
    CHECK(hs.source.find("#include \"host/moe_routing.hpp\"") != std::string::npos);
    CHECK(hs.entry == "kiln_moe_routing_indexed");
}

TEST_CASE("config field tables: named, in range, inside the config, not overlapping") {
    for (const Family* f : builtin_families().list()) {
        CAPTURE(std::string(f->name()));
        std::set<std::string_view> names;
        std::vector<bool> used(KernelConfig::k_capacity, false);
        for (const ConfigField& field : f->config_fields()) {
            CAPTURE(std::string(field.name));
            CHECK(names.insert(field.name).second);
            CHECK(f->field(field.name) == &field);
            CHECK_FALSE(field.help.empty());
            REQUIRE((field.size == 1 || field.size == 2 || field.size == 4));
            REQUIRE(field.offset + field.size <= KernelConfig::k_capacity);
            for (int b = field.offset; b < field.offset + field.size; ++b) {
                CHECK_FALSE(used[b]);
                used[b] = true;
            }
            CHECK(field.min >= 0);
            CHECK(field.min <= field.max);
            CHECK(field.max < (int64_t(1) << (8 * field.size)));
            if (!field.choices.empty()) {
                CHECK(field.min == 0);
                CHECK(field.max + 1 == static_cast<int64_t>(field.choices.size()));
            }
            // the bounds themselves are accepted, one past them refused
            KernelConfig c;
            set_config_value(c, field, field.max);
            CHECK(config_value(c, field) == field.max);
            CHECK(parse_config_value(field, config_value_text(c, field)) == field.max);
            CHECK_THROWS_AS(set_config_value(c, field, field.max + 1), kiln::InvalidArgument);
            if (field.min > 0) CHECK_THROWS_AS(set_config_value(c, field, field.min - 1), kiln::InvalidArgument);
        }
        // A canonical descriptor's config holds nothing the fields do not name.
        for (const Target t : {Target::sm(90, 'a'), Target::host_target()})
            for (const KernelDescriptor& d : kiln::test::sample_descriptors(f->name(), t))
                for (size_t b = 0; b < KernelConfig::k_capacity; ++b)
                    if (!used[b]) CHECK(d.config.bytes[b] == 0);
    }
}

TEST_CASE("generated sources are tiny and name one instantiation") {
    KernelDescriptor d = MoeRoutingFamily::descriptor(112, 16, Target::sm(90, 'a'), 8, 16);
    DeviceSource s = builtin_families().get("moe_routing").device_source(d);
    CHECK(s.name_expr == "&kiln_dev::moe_routing_indexed<112, 16, 8, 16>");
    CHECK(s.source.find("#include \"device/moe_routing.cuh\"") != std::string::npos);
    CHECK(s.source.size() < 400);
    CHECK(MoeRoutingFamily().max_dynamic_smem(d) == (16 * 112 + 2 * 112 + 16 + 1) * 4);

    KernelDescriptor g = DequantGemvFamily::descriptor(8, 7168, 2048, Target::sm(90, 'a'));
    DeviceSource gs = builtin_families().get("dequant_gemv").device_source(g);
    CHECK(gs.name_expr == "&kiln_dev::dequant_gemv_int4_g32<7168, 2048, 8, 8>");
    auto headers = collect_template_headers(gs.source, TemplateStore::instance());
    CHECK(headers.size() == 4);  // the template, the prelude, the parameter struct and the shared types
    CHECK(std::find_if(headers.begin(), headers.end(), [](const auto& h) {
              return h.first == "common/dequant_gemv_params.h";
          }) != headers.end());
}

TEST_CASE("missing templates are reported by name") {
    TemplateStore ts("");
    CHECK_THROWS_AS(collect_template_headers("#include \"device/nope.cuh\"\n", ts), kiln::NotFound);
    // Angle includes are toolkit headers, not templates.
    CHECK(collect_template_headers("#include <cuda_bf16.h>\n", ts).empty());
}

TEST_CASE("routing capacity bound covers the worst case") {
    // Every token on its own expert: each of min(E, n) experts pads block_m - 1 rows.
    CHECK(moe_routing_capacity(1, 8, 64, 16) == 8 * 16);
    CHECK(moe_routing_capacity(100, 8, 64, 16) == 800 + 64 * 15 + 0);
    CHECK(moe_routing_capacity(3, 1, 4, 8) == 24);
}

TEST_CASE("routing reference on a hand-checked example") {
    // 3 tokens, top-2, 4 experts, block_m 2. Flat ids: e(0)=[1,3], e(1)=[1,1], e(2)=[0,-1].
    std::vector<int32_t> ids = {1, 3, 1, 1, 0, -1};
    int64_t cap = moe_routing_capacity(3, 2, 4, 2);
    MoeRoutingResult r = moe_routing_reference(ids, 3, 2, 4, 2, cap, cap / 2);
    CHECK(r.tokens_per_expert == std::vector<int32_t>{1, 3, 0, 1});
    // expert 0: [4, pad]; expert 1: [0, 2, 3, pad]; expert 3: [1, pad]; sentinel = 6.
    std::vector<int32_t> want = {4, 6, 0, 2, 3, 6, 1, 6};
    want.resize(cap, 6);
    CHECK(r.sorted_ids == want);
    CHECK(r.total_padded == 8);
    std::vector<int32_t> blocks = {0, 1, 1, 3};
    blocks.resize(cap / 2, -1);
    CHECK(r.block_expert == blocks);
}

TEST_CASE("dequant GEMV reference on a hand-checked example") {
    // One row, K = 32: codes 0..15 twice (q = code - 8), scale 0.5; x = 1 for k < 16, 2 after.
    std::vector<int32_t> packed(4);
    for (int w = 0; w < 4; ++w) {
        uint32_t word = 0;
        for (int j = 0; j < 8; ++j) word |= static_cast<uint32_t>((w * 8 + j) % 16) << (4 * j);
        packed[w] = static_cast<int32_t>(word);
    }
    std::vector<uint16_t> scale = {kiln::runtime::float_to_bf16(0.5f)};
    std::vector<uint16_t> x(32);
    for (int k = 0; k < 32; ++k) x[k] = kiln::runtime::float_to_bf16(k < 16 ? 1.f : 2.f);
    std::vector<double> y = dequant_gemv_reference(x, 1, packed, scale, 1, 32);
    // sum_{c=0..15} (c - 8) = -8; first half * 1 + second half * 2 = -8 * 0.5 * 3 = -12.
    CHECK(y[0] == doctest::Approx(-12.0));
}
