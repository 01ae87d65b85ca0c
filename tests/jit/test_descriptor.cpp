// KernelDescriptor: its text form with every family's named config fields, byte comparison and hashing,
// canonicalisation, content keys, and the dispatcher's lock-free map.
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <thread>
#include <unordered_map>

#include "jit/descriptor.hpp"
#include "jit/descriptor_map.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/kernel_key.hpp"
#include "runtime/error.hpp"
#include "tests/jit/family_samples.hpp"

using namespace kiln::jit;
using kiln::cache::ContentKey;

static const Target k_h200 = Target::sm(90, 'a');

namespace {

// The message of the InvalidArgument that parsing `t` throws ("no error" when it parses).
std::string parse_error(const std::string& t) {
    try {
        parse_descriptor(t);
    } catch (const kiln::InvalidArgument& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("descriptor text names the config fields and round trips") {
    KernelDescriptor a = MoeRoutingFamily::descriptor(384, 8, k_h200, 64);
    KernelDescriptor b = DequantGemvFamily::descriptor(4, 7168, 2048, Target::sm(89), 16);
    for (const KernelDescriptor& d : {a, b}) {
        std::string t = to_string(d);
        CHECK(parse_descriptor(t) == d);
        CHECK(to_string(parse_descriptor(t)) == t);
    }
    CHECK(to_string(a) ==
          "moe_routing/indexed m=0 n=0 k=0 e=384 topk=8 w=none a=i32 target=sm_90a cfg=block_m=64,warps=32");
    CHECK(to_string(b) ==
          "dequant_gemv/dense m=4 n=7168 k=2048 e=0 topk=0 w=int4_g32_bf16 a=bf16 target=sm_89 cfg=warps=16");
    // Choice fields are spelled by name; the cache's column adds top-k.
    const KernelDescriptor g = MoeW4A16DecodeFamily::descriptor(
        moe::Matrix::gate_up, {WeightFormat::int4_g32_bf16, 256, 224}, moe::Activation::situ_glu, 16, k_h200);
    CHECK(to_string(g).find(" cfg=matrix=gate_up,act=situ_glu,block_m=16,") != std::string::npos);
    CHECK(cache_config_text(a) == "topk=8,block_m=64,warps=32");
    CHECK(cache_config_text(b) == "warps=16");
    // Fields may come in any order and be left out (zero: canonicalisation fills the defaults).
    const KernelDescriptor loose =
        parse_descriptor("moe_routing/indexed e=384 topk=8 target=sm_90a cfg=warps=32,block_m=64");
    CHECK(builtin_families().get("moe_routing").canonicalize(loose) == a);
    CHECK(parse_descriptor("moe_routing/indexed e=384 topk=8 a=i32 target=sm_90a cfg=warps=32,,block_m=64") == a);
}

TEST_CASE("every family's descriptors round trip through their text") {
    int checked = 0;
    for (const Family* f : builtin_families().list()) {
        for (const Target t : {k_h200, Target::host_target()}) {
            for (const KernelDescriptor& d : kiln::test::sample_descriptors(f->name(), t)) {
                const std::string text = to_string(d);
                CAPTURE(text);
                CHECK(d.family.view() == f->name());
                CHECK(f->canonicalize(d) == d);
                const KernelDescriptor back = parse_descriptor(text);
                CHECK(back == d);
                CHECK(to_string(back) == text);
                // every field is spelled, in the family's order
                const std::string cfg = text.substr(text.find(" cfg=") + 5);
                CHECK(cfg == f->config_text(d.config));
                CHECK(f->parse_config(cfg) == d.config);
                for (const ConfigField& field : f->config_fields())
                    CHECK(cfg.find(std::string(field.name) + "=" + config_value_text(d.config, field)) !=
                          std::string::npos);
                ++checked;
            }
        }
    }
    CHECK(checked >= 30);
    // A descriptor of a family the registry does not know keeps its config as raw bytes.
    KernelDescriptor d = MoeRoutingFamily::descriptor(8, 2, k_h200);
    const std::string raw = to_string(d, FamilyRegistry{});
    CHECK(raw.substr(raw.find(" cfg=")) == " cfg=raw:40002000" + std::string(40, '0'));  // block_m 64, warps 32
}

TEST_CASE("malformed descriptor text is refused with the offending part named") {
    CHECK(parse_error("moe_routing e=3").find("family/mode") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed e=x").find("e=x") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed q=1").find("'q'") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed target=sm90").find("sm90") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed w=int8").find("int8") != std::string::npos);
    CHECK(parse_error("Bad/indexed").find("a-z") != std::string::npos);
    CHECK(parse_error("").find("empty") != std::string::npos);
    CHECK_THROWS_AS(parse_descriptor("no_such_family/x cfg=a=1"), kiln::NotFound);
}

TEST_CASE("unknown config fields and values out of range are refused, naming the field") {
    // unknown field: the family's fields are listed
    std::string m = parse_error("moe_routing/indexed e=8 topk=2 cfg=block_m=64,bm=64");
    CHECK(m.find("family moe_routing has no config field 'bm'") != std::string::npos);
    CHECK(m.find("(fields: block_m, warps)") != std::string::npos);
    CHECK(parse_error("moe_w4a16_combine/indexed cfg=block_m=8").find("(fields: none)") != std::string::npos);
    // out of range, or not a number
    CHECK(
        parse_error("moe_routing/indexed cfg=block_m=70000").find("block_m=70000: expected an integer in [0, 1024]") !=
        std::string::npos);
    CHECK(parse_error("moe_routing/indexed cfg=block_m=-1").find("block_m=-1") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed cfg=warps=33").find("warps=33") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed cfg=warps=-1").find("warps=-1") != std::string::npos);
    CHECK(parse_error("moe_routing/indexed cfg=warps=4x").find("warps=4x") != std::string::npos);
    CHECK(parse_error("dequant_gemv/dense cfg=warps=").find("warps=:") != std::string::npos);
    CHECK(parse_error("moe_w4a16_decode/indexed cfg=block_k=512").find("block_k=512") != std::string::npos);
    // a choice field takes one of its names
    m = parse_error("moe_w4a16_decode/indexed cfg=matrix=sideways");
    CHECK(m.find("matrix=sideways: expected one of gate_up, down") != std::string::npos);
    CHECK(parse_error("moe_w4a16_prefill/indexed cfg=mma=1").find("mma=1: expected one of sync, wgmma") !=
          std::string::npos);
    CHECK(parse_error("moe_routing/indexed cfg=warps").find("'warps': expected field=value") != std::string::npos);
    // the same checks when a config is set field by field
    const Family& r = builtin_families().get("moe_routing");
    KernelConfig c;
    CHECK_THROWS_WITH_AS(set_config_value(c, *r.field("block_m"), 2000), doctest::Contains("block_m=2000"),
                         kiln::InvalidArgument);
    set_config_value(c, *r.field("block_m"), 1024);
    CHECK(c.as<MoeRoutingConfig>().block_m == 1024);
    CHECK(r.field("bm") == nullptr);
}

TEST_CASE("descriptors are compared and hashed as bytes; every field matters") {
    KernelDescriptor base = DequantGemvFamily::descriptor(4, 256, 512, k_h200);
    DescriptorHash h;
    std::vector<KernelDescriptor> variants;
    auto vary = [&](auto&& f) {
        KernelDescriptor d = base;
        f(d);
        variants.push_back(d);
    };
    vary([](KernelDescriptor& d) { d.family = ShortName("moe_routing"); });
    vary([](KernelDescriptor& d) { d.mode = ShortName("indexed"); });
    vary([](KernelDescriptor& d) { d.m = 8; });
    vary([](KernelDescriptor& d) { d.n = 257; });
    vary([](KernelDescriptor& d) { d.k = 544; });
    vary([](KernelDescriptor& d) { d.experts = 1; });
    vary([](KernelDescriptor& d) { d.topk = 1; });
    vary([](KernelDescriptor& d) { d.weight_format = WeightFormat::mxfp4_g32_e8m0; });
    vary([](KernelDescriptor& d) { d.act_dtype = DType::f16; });
    vary([](KernelDescriptor& d) { d.target = Target::sm(90); });
    vary([](KernelDescriptor& d) { d.target = Target::sm(100, 'a'); });
    vary([](KernelDescriptor& d) { d.target = Target::host_target(); });
    vary([](KernelDescriptor& d) { d.config = KernelConfig::of(DequantGemvConfig{4}); });  // the family's one field
    // The text spells every field above; the config bytes past the family's struct (zero in every canonical
    // descriptor) are not spelled, but still make a different map key.
    std::set<std::string> texts{to_string(base)};
    for (const auto& v : variants) texts.insert(to_string(v));
    CHECK(texts.size() == variants.size() + 1);
    for (size_t i = 0; i < KernelConfig::k_capacity; ++i)
        vary([i](KernelDescriptor& d) { d.config.bytes[i] ^= 0x40; });
    std::set<size_t> hashes{h(base)};
    for (const auto& v : variants) {
        CHECK_FALSE(v == base);
        hashes.insert(h(v));
    }
    CHECK(hashes.size() == variants.size() + 1);

    KernelDescriptor copy;
    std::memcpy(&copy, &base, sizeof copy);
    CHECK(copy == base);
    CHECK(h(copy) == h(base));
    std::unordered_map<KernelDescriptor, int, DescriptorHash> map;
    map[base] = 1;
    for (size_t i = 0; i < variants.size(); ++i) map[variants[i]] = static_cast<int>(i) + 2;
    CHECK(map.at(copy) == 1);
}

TEST_CASE("families canonicalise: defaults filled, unused fields zeroed, bad input refused") {
    const FamilyRegistry& reg = builtin_families();
    KernelDescriptor d;
    d.family = ShortName("moe_routing");
    d.experts = 64;
    d.topk = 8;
    d.m = 123;  // not baked into the routing kernel
    d.n = 5;
    d.target = k_h200;
    KernelDescriptor c = reg.get("moe_routing").canonicalize(d);
    CHECK(c.m == 0);
    CHECK(c.n == 0);
    CHECK(c.mode.view() == "indexed");
    CHECK(c.config.as<MoeRoutingConfig>().block_m == 64);
    CHECK(c.config.as<MoeRoutingConfig>().warps == 32);
    CHECK(reg.get("moe_routing").canonicalize(c) == c);  // idempotent
    d.m = 7;
    CHECK(reg.get("moe_routing").canonicalize(d) == c);

    d.topk = 0;
    CHECK_THROWS_AS(reg.get("moe_routing").canonicalize(d), kiln::InvalidArgument);
    d.topk = 8;
    d.mode = ShortName("grouped_masked");
    CHECK_THROWS_AS(reg.get("moe_routing").canonicalize(d), kiln::InvalidArgument);

    KernelDescriptor g;
    g.family = ShortName("dequant_gemv");
    g.m = 4;
    g.n = 100;
    g.k = 100;
    g.target = k_h200;
    CHECK_THROWS_AS(reg.get("dequant_gemv").canonicalize(g), kiln::InvalidArgument);  // k % 32
    g.k = 128;
    g.experts = 9;
    KernelDescriptor gc = reg.get("dequant_gemv").canonicalize(g);
    CHECK(gc.experts == 0);
    CHECK(gc.weight_format == WeightFormat::int4_g32_bf16);
    CHECK(gc.act_dtype == DType::bf16);
    CHECK(gc.config.as<DequantGemvConfig>().warps == 8);
    g.target = Target::host_target();
    g.config = KernelConfig::of(DequantGemvConfig{4});
    CHECK(reg.get("dequant_gemv").canonicalize(g).config == KernelConfig{});  // host kernels have no warps
    g.m = 17;
    CHECK_THROWS_AS(reg.get("dequant_gemv").canonicalize(g), kiln::InvalidArgument);
    CHECK_THROWS_AS(reg.get("no_such_family"), kiln::NotFound);
}

TEST_CASE("content keys: same inputs same key, every recipe field changes it, no paths") {
    const Family& f = builtin_families().get("moe_routing");
    const TemplateStore& ts = TemplateStore::instance();
    KernelRecipe r = make_recipe(f, MoeRoutingFamily::descriptor(64, 8, k_h200), ts);
    const std::string id = "nvrtc-13.0";
    ContentKey k0 = content_key(r, id);
    CHECK(content_key(make_recipe(f, MoeRoutingFamily::descriptor(64, 8, k_h200), ts), id) == k0);

    // Headers are the transitive closure of the kiln templates the source includes, sorted by name.
    REQUIRE(r.headers.size() == 4);
    CHECK(r.headers[0].first == "common/kiln_params.h");
    CHECK(r.headers[1].first == "common/moe_routing_params.h");
    CHECK(r.headers[2].first == "device/moe_routing.cuh");
    CHECK(r.headers[3].first == "device/prelude.cuh");

    std::set<ContentKey> keys{k0};
    auto changed = [&](auto&& mutate, std::string identity = "nvrtc-13.0") {
        KernelRecipe m = r;
        mutate(m);
        keys.insert(content_key(m, identity));
    };
    changed([](KernelRecipe&) {}, "nvrtc-13.1");
    changed([](KernelRecipe& m) { m.source.source += " "; });
    changed([](KernelRecipe& m) { m.source.name_expr = "&kiln_dev::moe_routing_indexed<64, 8, 64, 16>"; });
    changed([](KernelRecipe& m) { m.source.file_name = "other.cu"; });
    changed([](KernelRecipe& m) { m.headers[3].second += "\n"; });
    changed([](KernelRecipe& m) { m.headers[3].first = "device/prelude2.cuh"; });
    changed([](KernelRecipe& m) { m.headers[1].second += "\n"; });  // the parameter struct is keyed too
    changed([](KernelRecipe& m) { m.options.push_back("-lineinfo"); });
    changed([](KernelRecipe& m) { m.desc.target = Target::sm(90); });
    changed([](KernelRecipe& m) { m.desc.family = ShortName("dequant_gemv"); });
    CHECK(keys.size() == 11);

    // A different descriptor gives a different source, hence a different key.
    CHECK(content_key(make_recipe(f, MoeRoutingFamily::descriptor(64, 8, k_h200, 32), ts), id) != k0);
    CHECK(content_key(make_recipe(f, MoeRoutingFamily::descriptor(64, 8, Target::sm(80)), ts), id) != k0);

    // Nothing absolute: options are symbolic, header names relative.
    for (const auto& o : r.options) CHECK(o.find('/') == std::string::npos);
    for (const auto& [name, text] : r.headers) CHECK(name.front() != '/');
    CHECK(r.source.source.find('/') == r.source.source.find("//"));  // only the comment marker
}

TEST_CASE("compiler identity: pinned by KILN_NVRTC_VERSION, else the build's, without loading NVRTC") {
    REQUIRE_FALSE(Nvrtc::is_loaded());
    unsetenv("KILN_NVRTC_VERSION");
    CHECK(compiler_identity() == build_compiler_identity());
    CHECK(build_compiler_identity().rfind("nvrtc-", 0) == 0);
    setenv("KILN_NVRTC_VERSION", "12.9", 1);
    CHECK(compiler_identity() == "nvrtc-12.9");
    setenv("KILN_NVRTC_VERSION", "twelve", 1);
    CHECK_THROWS_AS(compiler_identity(), kiln::InvalidArgument);
    unsetenv("KILN_NVRTC_VERSION");
    CHECK_FALSE(Nvrtc::is_loaded());
}

TEST_CASE("descriptor map: lookups while other threads insert and the table grows") {
    DescriptorMap<const int> map;
    std::vector<int> values(2000);
    std::vector<KernelDescriptor> keys;
    for (int i = 0; i < 2000; ++i) {
        values[i] = i;
        keys.push_back(MoeRoutingFamily::descriptor(1 + i % 1000, 1, i < 1000 ? k_h200 : Target::sm(80)));
    }
    CHECK(map.find(keys[0]) == nullptr);
    std::atomic<bool> done{false};
    std::atomic<int> wrong{0};
    std::thread reader([&] {
        while (!done.load()) {
            for (int i = 0; i < 2000; i += 7) {
                const int* v = map.find(keys[i]);
                if (v != nullptr && *v != i) wrong.fetch_add(1);
            }
        }
    });
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w)
        writers.emplace_back([&, w] {
            for (int i = w; i < 2000; i += 2) map.insert(keys[i], &values[i]);
        });
    for (auto& t : writers) t.join();
    done.store(true);
    reader.join();
    CHECK(wrong.load() == 0);
    CHECK(map.size() == 2000);
    int found = 0;
    for (int i = 0; i < 2000; ++i) found += map.find(keys[i]) == &values[i];
    CHECK(found == 2000);
    int other = -1;
    CHECK(map.insert(keys[5], &other) == &values[5]);  // first insert wins
}
