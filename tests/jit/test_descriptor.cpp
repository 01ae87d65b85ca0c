// KernelDescriptor canonicalisation and content keys.
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <thread>
#include <unordered_map>

#include "jit/descriptor.hpp"
#include "jit/descriptor_map.hpp"
#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "jit/kernel_key.hpp"
#include "runtime/error.hpp"

using namespace kiln::jit;
using kiln::cache::ContentKey;

static const Target k_h200 = Target::sm(90, 'a');

TEST_CASE("descriptor text round trips") {
    KernelDescriptor a = MoeRoutingFamily::descriptor(384, 8, k_h200, 64);
    KernelDescriptor b = DequantGemvFamily::descriptor(4, 7168, 2048, Target::sm(89), 16);
    for (const KernelDescriptor& d : {a, b}) {
        std::string t = to_string(d);
        CHECK(parse_descriptor(t) == d);
        CHECK(to_string(parse_descriptor(t)) == t);
    }
    CHECK(to_string(a) ==
          "moe_routing/indexed m=0 n=0 k=0 e=384 topk=8 w=none a=i32 target=sm_90a "
          "cfg=bm=64,bn=0,bk=0,st=0,cta=0,wp=32,fl=0");
}

TEST_CASE("malformed descriptor text is refused with the offending part named") {
    auto msg = [](const char* t) {
        try {
            parse_descriptor(t);
        } catch (const kiln::InvalidArgument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(msg("moe_routing e=3").find("family/mode") != std::string::npos);
    CHECK(msg("moe_routing/indexed e=x").find("e=x") != std::string::npos);
    CHECK(msg("moe_routing/indexed q=1").find("'q'") != std::string::npos);
    CHECK(msg("moe_routing/indexed target=sm90").find("sm90") != std::string::npos);
    CHECK(msg("Bad/indexed").find("a-z") != std::string::npos);
    CHECK(msg("moe_routing/indexed cfg=bm=70000").find("bm=70000") != std::string::npos);
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
    vary([](KernelDescriptor& d) { d.config.block_m = 1; });
    vary([](KernelDescriptor& d) { d.config.block_n = 1; });
    vary([](KernelDescriptor& d) { d.config.block_k = 1; });
    vary([](KernelDescriptor& d) { d.config.stages = 1; });
    vary([](KernelDescriptor& d) { d.config.ctas_per_sm = 1; });
    vary([](KernelDescriptor& d) { d.config.warps = 1; });
    vary([](KernelDescriptor& d) { d.config.flags = 1; });
    std::set<std::string> texts{to_string(base)};
    std::set<size_t> hashes{h(base)};
    for (const auto& v : variants) {
        CHECK_FALSE(v == base);
        texts.insert(to_string(v));
        hashes.insert(h(v));
    }
    CHECK(texts.size() == variants.size() + 1);
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
    CHECK(c.config.block_m == 64);
    CHECK(c.config.warps == 32);
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

    // Headers are the transitive closure of the kiln templates the source includes.
    REQUIRE(r.headers.size() == 2);
    CHECK(r.headers[0].first == "device/moe_routing.cuh");
    CHECK(r.headers[1].first == "device/prelude.cuh");

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
    changed([](KernelRecipe& m) { m.headers[1].second += "\n"; });
    changed([](KernelRecipe& m) { m.headers[1].first = "device/prelude2.cuh"; });
    changed([](KernelRecipe& m) { m.options.push_back("-lineinfo"); });
    changed([](KernelRecipe& m) { m.desc.target = Target::sm(90); });
    changed([](KernelRecipe& m) { m.desc.family = ShortName("dequant_gemv"); });
    CHECK(keys.size() == 10);

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
