#include "model/bench/moe_w4a16_bench.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "autotune/heuristics/moe_w4a16.hpp"
#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "model/layers/moe_w4a16.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/bf16.hpp"
#include "runtime/cuda/backend.hpp"
#include "runtime/error.hpp"

namespace kiln::model::bench {

namespace {

namespace moe = kiln::model::weights;
using moe::W4Format;
using MoeActivation = jit::moe::Activation;
using layers::MoeW4A16;
using layers::MoeW4A16Path;

constexpr double k_hbm_floor = 4.8e12;  // H200 datasheet HBM bandwidth, bytes/s

struct Scenario {
    const char* name;
    W4Format fmt;
    MoeActivation act;
    int hidden, inter, experts, topk;
    const char* routing;  // "ep": busiest of 8 ranks, B tokens; "uniform"; "balanced"
    int tokens;
    int tiles;    // token tiles per m-block (the tok_e rule for this routing)
    bool decode;  // the decode goal (>= 90% of the floor) applies
};

const std::vector<Scenario>& scenarios() {
    using F = W4Format;
    const auto silu = MoeActivation::silu_glu, situ = MoeActivation::situ_glu;
    static const std::vector<Scenario> s = {
        {"k2_ep8_decode_1", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 8, 1, true},
        {"k2_ep8_decode_20", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 160, 1, true},
        {"k2_ep8_decode_50", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 400, 2, true},
        {"k2_grouped_decode_8", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "balanced", 48, 1, true},
        {"k2_ep8_prefill_2048", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 2048, 4, false},
        {"k2_tp8_8192", F::int4_g32_bf16, silu, 7168, 256, 384, 8, "uniform", 8192, 4, false},
        {"k3_ep8_decode_1", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 1, 1, true},
        {"k3_ep8_decode_8", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 8, 1, true},
        {"k3_ep8_decode_32", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 32, 1, true},
        {"k3_ep8_decode_128", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 128, 1, true},
    };
    return s;
}

struct Routing {
    int tokens = 0, topk = 0, experts = 0;
    std::vector<int32_t> ids;     // [tokens, topk], -1 = expert of another rank
    std::vector<float> weights;   // [tokens, topk]
};

void fill_weights(Routing& r, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> wd(0.05f, 1.0f);
    r.weights.resize(static_cast<size_t>(r.tokens) * r.topk);
    for (int t = 0; t < r.tokens; ++t) {
        float s = 0;
        for (int j = 0; j < r.topk; ++j) s += (r.weights[t * r.topk + j] = wd(rng));
        for (int j = 0; j < r.topk; ++j) r.weights[t * r.topk + j] /= s;
    }
}

std::vector<int> pick_distinct(std::mt19937_64& rng, int n, int k) {
    std::vector<int> out;
    std::set<int> seen;
    std::uniform_int_distribution<int> d(0, n - 1);
    while (static_cast<int>(out.size()) < k) {
        const int e = d(rng);
        if (seen.insert(e).second) out.push_back(e);
    }
    return out;
}

// Uniform or balanced routing over the local experts.
Routing local_routing(const std::string& kind, int tokens, int topk, int experts, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Routing r{tokens, topk, experts, {}, {}};
    r.ids.resize(static_cast<size_t>(tokens) * topk);
    if (kind == "balanced") {  // every expert gets tokens * topk / experts rows
        std::vector<int> perm(experts);
        for (int e = 0; e < experts; ++e) perm[e] = e;
        std::shuffle(perm.begin(), perm.end(), rng);
        const int stride = experts / topk;
        for (int t = 0; t < tokens; ++t)
            for (int j = 0; j < topk; ++j) r.ids[t * topk + j] = perm[(t + j * stride) % experts];
    } else {
        for (int t = 0; t < tokens; ++t) {
            const std::vector<int> p = pick_distinct(rng, experts, topk);
            for (int j = 0; j < topk; ++j) r.ids[t * topk + j] = p[j];
        }
    }
    fill_weights(r, rng);
    return r;
}

// Expert parallelism over 8 ranks: B tokens pick topk of 8 * local experts uniformly; the rank with the
// most distinct experts is simulated, with the tokens that reach it (others are not dispatched to it).
Routing ep_routing(int tokens, int topk, int local, uint64_t seed) {
    constexpr int ranks = 8;
    std::mt19937_64 rng(seed);
    std::vector<std::vector<int>> picks(tokens);
    for (auto& p : picks) p = pick_distinct(rng, local * ranks, topk);
    int best = 0, best_count = -1;
    for (int rk = 0; rk < ranks; ++rk) {
        std::set<int> s;
        for (const auto& p : picks)
            for (int e : p)
                if (e / local == rk) s.insert(e);
        if (static_cast<int>(s.size()) > best_count) best_count = static_cast<int>(s.size()), best = rk;
    }
    Routing all{tokens, topk, local, {}, {}};
    all.ids.assign(static_cast<size_t>(tokens) * topk, -1);
    for (int t = 0; t < tokens; ++t)
        for (int j = 0; j < topk; ++j) {
            const int e = picks[t][j];
            if (e / local == best) all.ids[t * topk + j] = e % local;
        }
    fill_weights(all, rng);
    Routing r{0, topk, local, {}, {}};
    for (int t = 0; t < tokens; ++t) {
        bool any = false;
        for (int j = 0; j < topk; ++j) any |= all.ids[t * topk + j] >= 0;
        if (!any) continue;
        r.ids.insert(r.ids.end(), all.ids.begin() + t * topk, all.ids.begin() + (t + 1) * topk);
        r.weights.insert(r.weights.end(), all.weights.begin() + t * topk, all.weights.begin() + (t + 1) * topk);
        ++r.tokens;
    }
    return r;
}

// Layout metadata for `experts` matrices of one kind (from a one-expert preparation of zeros).
moe::PreparedMoeWeights layout_meta(W4Format fmt, bool gate_up, int experts, int n, int k) {
    const bool int4 = fmt == W4Format::int4_g32_bf16;
    std::vector<std::byte> packed(int4 ? static_cast<size_t>(n) * (k / 8) * 4 : static_cast<size_t>(n) * (k / 2));
    std::vector<std::byte> scale(static_cast<size_t>(n) * (k / 32) * (int4 ? 2 : 1));
    moe::PreparedMoeWeights m = moe::prepare_moe_weights(fmt, moe::W4Layout::decode_mma16, gate_up, 1, n, k,
                                                         [&](int, int) { return moe::CheckpointMatrix{packed, scale}; });
    m.bytes.clear();
    m.experts = experts;
    return m;
}

// Random bytes in the kernel layout with sane scales (INT4 bf16 in [0.004, 0.012), E8M0 117..121),
// `copies` back to back in the backend's memory.
runtime::Buffer random_layout_weights(runtime::Backend& backend, runtime::Stream& s, const moe::PreparedMoeWeights& m,
                                      int copies, uint64_t seed) {
    const size_t one = m.expert_stride * m.experts;
    std::vector<std::byte> host(one);
    const int rec = moe::layout_record_bytes(m.format, m.layout);
    const int wbytes = 8 * 512, sbytes = rec - wbytes;
    const bool int4 = m.format == W4Format::int4_g32_bf16;
    const size_t records = one / rec;
    const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < nt; ++w)
        pool.emplace_back([&, w]() {
            uint64_t x = seed * 0x9E3779B97F4A7C15ull + w + 1;
            for (size_t r = w; r < records; r += nt) {
                std::byte* p = host.data() + r * rec;
                for (int i = 0; i < wbytes; i += 8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    std::memcpy(p + i, &x, 8);
                }
                for (int i = 0; i < sbytes; i += int4 ? 2 : 1) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if (int4) {
                        const uint16_t b = runtime::float_to_bf16(0.004f + 0.008f * static_cast<float>(x >> 40) / 16777216.0f);
                        std::memcpy(p + wbytes + i, &b, 2);
                    } else {
                        p[wbytes + i] = static_cast<std::byte>(117 + (x >> 61) % 5);
                    }
                }
            }
        });
    for (auto& t : pool) t.join();
    runtime::Buffer d = backend.alloc(one * copies);
    backend.upload(d.addr(), host.data(), one);
    for (int c = 1; c < copies; ++c) s.copy(d.addr() + one * c, d.addr(), one);
    s.synchronize();
    return d;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// One fused decode call with the completion stamps on (MoeW4A16::set_fused_trace), written as JSON:
// per item its kind (0 gate_up, 1 down) and completion time, per CTA its start, the end of its routing
// and its end, in µs from the earliest start; plus the bytes of each kind of item. `call()` runs one call.
void write_fused_trace(const std::string& path, MoeW4A16& layer, const moe::PreparedMoeWeights& gu,
                       const moe::PreparedMoeWeights& dn, const std::vector<int>& counts, int sm_count,
                       const std::function<void()>& call, runtime::Backend& backend, runtime::Stream& stream) {
    const int bm = 8 * layer.tiles();
    int nmb = 0;
    for (int c : counts) nmb += (c + bm - 1) / bm;
    const int nsb = gu.n_pad / 128, nsb2 = dn.n_pad / 128;
    const int n_gu = nmb * nsb, n_dn = nmb * nsb2;
    const int claims = n_gu + n_dn;
    runtime::Buffer buf = backend.alloc(static_cast<size_t>(claims + 3 * sm_count) * 8);
    stream.fill_u32(buf.addr(), 0, buf.size() / 4);
    layer.set_fused_trace(buf.addr());
    call();
    stream.synchronize();
    layer.set_fused_trace(0);
    std::vector<uint64_t> t(buf.size() / 8);
    backend.download(t.data(), buf.addr(), buf.size());
    uint64_t t0 = ~uint64_t(0);
    for (int i = claims; i < claims + sm_count; ++i) t0 = std::min(t0, t[i]);
    auto rel = [&](uint64_t v) { return v ? (static_cast<double>(v) - static_cast<double>(t0)) * 1e-3 : -1.0; };
    nlohmann::json j;
    j["gate_up_item_bytes"] = static_cast<double>(gu.expert_stride) / nsb;
    j["down_item_bytes"] = static_cast<double>(dn.expert_stride) / nsb2;
    j["n_gate_up"] = n_gu;
    j["n_down"] = n_dn;
    std::vector<int> kind(claims);
    std::vector<double> done(claims), start(sm_count), routed(sm_count), end(sm_count);
    for (int i = 0; i < claims; ++i) {
        kind[i] = i < n_gu ? 0 : 1;
        done[i] = rel(t[i]);
    }
    for (int i = 0; i < sm_count; ++i) {
        start[i] = rel(t[claims + i]);
        routed[i] = rel(t[claims + sm_count + i]);
        end[i] = rel(t[claims + 2 * sm_count + i]);
    }
    j["kind"] = kind;
    j["done_us"] = done;
    j["start_us"] = start;
    j["routed_us"] = routed;  // each CTA's routing done
    j["end_us"] = end;        // each CTA's last warp done (combine included)
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << j.dump() << "\n";
    std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

std::vector<std::string> moe_bench_scenarios() {
    std::vector<std::string> out;
    for (const Scenario& s : scenarios()) out.emplace_back(s.name);
    return out;
}

nlohmann::json run_moe_bench(const MoeBenchOptions& o) {
    cache::StoreOptions so = cache::store_options_from_env();
    std::unique_ptr<cache::Store> store;
    try {
        store = std::make_unique<cache::Store>(so);
    } catch (const Error&) {
        store.reset();  // benchmark without a persistent cache
    }
    runtime::CudaBackend backend(0);
    backend.make_current();
    jit::DispatcherOptions dopt;
    dopt.store = store.get();
    jit::Dispatcher disp(dopt);
    const jit::Target target = disp.device_target();
    const runtime::DeviceProps& props = backend.props();
    auto stream_owner = backend.create_stream();
    runtime::Stream& stream = *stream_owner;
    fmt::print("device {} ({} SMs, L2 {} MB), target {}\n", props.name, props.sm_count, props.l2_bytes >> 20,
               to_string(target));

    nlohmann::json results = nlohmann::json::array();
    int ran = 0;
    for (const Scenario& sc : scenarios()) {
        if (!o.scenario.empty() && std::string(sc.name).find(o.scenario) == std::string::npos) continue;
        ++ran;
        const uint64_t seed = std::hash<std::string>{}(sc.name) & 0xFFFFFF;
        const Routing r = std::string(sc.routing) == "ep" ? ep_routing(sc.tokens, sc.topk, sc.experts, seed)
                                                          : local_routing(sc.routing, sc.tokens, sc.topk, sc.experts, seed);
        std::vector<int> counts(sc.experts, 0);
        for (int v : r.ids)
            if (v >= 0) ++counts[v];
        int active = 0, rows = 0, max_rows = 0;
        for (int c : counts) {
            active += c > 0;
            rows += c;
            max_rows = std::max(max_rows, c);
        }
        const moe::PreparedMoeWeights gu = layout_meta(sc.fmt, true, sc.experts, sc.inter, sc.hidden);
        const moe::PreparedMoeWeights dn = layout_meta(sc.fmt, false, sc.experts, sc.hidden, sc.inter);
        const double touched = static_cast<double>(active) * static_cast<double>(gu.expert_stride + dn.expert_stride);
        const int copies = std::clamp(static_cast<int>(std::ceil(2.0e9 / std::max(1.0, touched))), 2, 12);
        runtime::Buffer wgu = random_layout_weights(backend, stream, gu, copies, seed * 3 + 1);
        runtime::Buffer wdn = random_layout_weights(backend, stream, dn, copies, seed * 3 + 2);
        const uint64_t gu_set = gu.expert_stride * gu.experts, dn_set = dn.expert_stride * dn.experts;

        layers::MoeW4A16Shape shape;
        shape.act = sc.act;
        shape.topk = sc.topk;
        shape.max_tokens = std::max(1, r.tokens);
        if (std::string(sc.routing) == "ep") shape.ep_size = 8;  // the other ranks' slots are skipped here
        autotune::MoeW4A16Tuning tuning = autotune::default_moe_w4a16_tuning(sc.fmt);
        tuning.tiles = sc.tiles;
        for (const auto& [name, value] : o.set) autotune::set_tuning_field(tuning, name, value);
        MoeW4A16 layer(disp, backend, gu, dn, shape, tuning);
        const layers::MoeW4A16Plan plan = layer.plan(r.tokens);

        std::vector<uint16_t> x(static_cast<size_t>(r.tokens) * sc.hidden);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (auto& v : x) v = runtime::float_to_bf16(nd(rng));
        runtime::Buffer dx = runtime::upload_buffer(backend, x.data(), x.size() * 2);
        runtime::Buffer dids = runtime::upload_buffer(backend, r.ids.data(), r.ids.size() * 4);
        runtime::Buffer dw = runtime::upload_buffer(backend, r.weights.data(), r.weights.size() * 4);
        runtime::Buffer dout = backend.alloc(static_cast<size_t>(std::max(1, r.tokens)) * sc.hidden * 2);
        const int64_t m = r.tokens;
        layers::MoeW4A16Tensors t;
        t.x = dx.view(runtime::DType::bf16, {m, sc.hidden});
        t.topk_ids = dids.view(runtime::DType::i32, {m, sc.topk});
        t.topk_weights = dw.view(runtime::DType::f32, {m, sc.topk});
        t.out = dout.view(runtime::DType::bf16, {m, sc.hidden});
        // the tensors of a call over weight copy c
        const auto on = [&](int c) {
            layers::MoeW4A16Tensors tc = t;
            tc.gate_up = wgu.addr() + gu_set * c;
            tc.down = wdn.addr() + dn_set * c;
            return tc;
        };
        const auto call = [&](int c) { layer.run(plan, on(c), stream); };

        for (int it = 0; it < 3; ++it) call(it % copies);
        stream.synchronize();
        if (o.warm_ms > 0) {
            // Sustained state first: under back-to-back load the board reaches its power limit and lowers the
            // SM clock; the loops below then time that state.
            const auto t0 = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(o.warm_ms)) {
                for (int c = 0; c < copies; ++c) call(c);
                stream.synchronize();
            }
        }
        // Per-stage events (the headline `us` and its route / gate_up / down columns): the three launches of
        // a call, each between two events, `iters` calls over the rotating weight sets.
        std::vector<std::unique_ptr<runtime::Event>> ev;
        for (int i = 0; i < 4 * o.iters; ++i) ev.push_back(backend.create_event());
        const auto elapsed_us = [](const runtime::Event& a, const runtime::Event& b) { return 1e3 * b.elapsed_ms_since(a); };
        std::vector<double> tt, tr, tg, td;
        const auto stage_loop = [&]() {
            for (int it = 0; it < o.iters; ++it) {
                const int c = it % copies;
                const layers::MoeW4A16Tensors tc = on(c);
                stream.record(*ev[4 * it]);
                layer.run_route(plan, tc, stream);
                stream.record(*ev[4 * it + 1]);
                layer.run_gate_up(plan, tc, stream);
                stream.record(*ev[4 * it + 2]);
                layer.run_down(plan, tc, stream);
                stream.record(*ev[4 * it + 3]);
            }
            stream.synchronize();
            tt.clear(), tr.clear(), tg.clear(), td.clear();
            for (int it = 0; it < o.iters; ++it) {
                tt.push_back(elapsed_us(*ev[4 * it], *ev[4 * it + 3]));
                tr.push_back(elapsed_us(*ev[4 * it], *ev[4 * it + 1]));
                tg.push_back(elapsed_us(*ev[4 * it + 1], *ev[4 * it + 2]));
                td.push_back(elapsed_us(*ev[4 * it + 2], *ev[4 * it + 3]));
            }
        };
        stage_loop();
        const double us = median(tt), us_route = median(tr), us_gate_up = median(tg), us_down = median(td);
        // One call per timed iteration between two events (do_bench style for the whole layer call; no events
        // between its launches), right after the per-stage loop so that both see the board in the same state (the
        // back-to-back loop below heats the board).
        std::vector<double> tc;
        for (int it = 0; it < o.iters; ++it) {
            stream.record(*ev[2 * it]);
            call(it % copies);
            stream.record(*ev[2 * it + 1]);
        }
        stream.synchronize();
        for (int it = 0; it < o.iters; ++it) tc.push_back(elapsed_us(*ev[2 * it], *ev[2 * it + 1]));
        const double us_call = median(tc);
        // Calls back to back (no events between their launches, so programmatic dependent launch can overlap
        // them): batches of `copies` calls over the rotating weight sets, per-call median over as many batches
        // as timed iterations (fewer batches leave this column noisy on large calls).
        std::vector<double> tf;
        for (int b = 0; b < std::max(3, o.iters); ++b) {
            stream.record(*ev[0]);
            for (int c = 0; c < copies; ++c) call(c);
            stream.record(*ev[1]);
            stream.synchronize();
            tf.push_back(elapsed_us(*ev[0], *ev[1]) / copies);
        }
        const double us_fwd = median(tf);
        // The per-stage loop again, right after that sustained load: back-to-back calls bring the board to its
        // power limit, which lowers the SM clock, as a serving process sees it.
        stage_loop();
        const double us_sustained = median(tt);
        if (!o.trace_dir.empty() && plan.path == MoeW4A16Path::fused)
            write_fused_trace(o.trace_dir + "/" + sc.name + ".trace.json", layer, gu, dn, counts, props.sm_count,
                              [&]() { call(0); }, backend, stream);
        const double abytes = static_cast<double>(r.tokens) * sc.hidden * 2 * 2 + static_cast<double>(rows) * sc.inter * 2 * 2;
        const double bytes = touched + abytes;
        const double floor_us = bytes / k_hbm_floor * 1e6;
        const double flops = 2.0 * rows * (3.0 * sc.inter * sc.hidden);
        // The configuration the timed calls ran: the prefill GEMMs (with their block_m), the fused decode kernel
        // (its time is the gate_up column; down is then the combine alone), or the decode kernels with
        // their schedules (gate_up/down) and combine path.
        const auto pf = plan.path == MoeW4A16Path::prefill ? plan.gate_up->desc.config.as<jit::MoeW4A16PrefillConfig>()
                                                           : jit::MoeW4A16PrefillConfig{};
        const std::string variant =
            plan.path == MoeW4A16Path::prefill
                ? fmt::format("prefill {}bm={}+rows", pf.mma ? (pf.wide ? "wgmma wide " : "wgmma ") : "", plan.block_m)
            : plan.path == MoeW4A16Path::fused
                ? fmt::format("decode bm={} fused+rows{}", plan.block_m,
                              plan.k_groups > 1 ? fmt::format(" kg{}", plan.k_groups) : "")
                : fmt::format("decode bm={} {}/{}{}", plan.block_m, plan.gate_up_dynamic ? "dyn" : "static",
                              plan.down_dynamic ? "dyn" : "static", plan.rows() ? "+rows" : "");
        fmt::print("{:<22} M={:5} rows={:6} active={:4} rows/E={:6.2f} {:<24} | {:8.1f} us (route {:5.1f}, "
                   "gate_up {:8.1f}, down {:8.1f}) | {:8.1f} MB {:5.2f} TB/s {:5.1f}% of 4.8 floor ({:7.1f} us) | "
                   "{:6.1f} TFLOP/s | call {:8.1f} us {:5.1f}% | forward {:8.1f} us | sustained {:8.1f} us\n",
                   sc.name, r.tokens, rows, active, active ? static_cast<double>(rows) / active : 0.0, variant, us,
                   us_route, us_gate_up, us_down, bytes / 1e6, bytes / us / 1e6, 100.0 * floor_us / us, floor_us,
                   flops / us / 1e6, us_call, 100.0 * floor_us / us_call, us_fwd, us_sustained);
        std::fflush(stdout);
        results.push_back({{"name", sc.name}, {"format", std::string(moe::to_string(sc.fmt))}, {"M", r.tokens},
                           {"topk", sc.topk}, {"E", sc.experts}, {"H", sc.hidden}, {"I", sc.inter}, {"rows", rows},
                           {"active", active}, {"max_rows", max_rows}, {"tiles", layer.tiles()}, {"copies", copies},
                           {"variant", variant}, {"prefill", plan.path == MoeW4A16Path::prefill},
                           {"tuning", autotune::describe(tuning)},
                           {"us", us}, {"us_route", us_route}, {"us_gate_up", us_gate_up}, {"us_down", us_down}, {"us_forward", us_fwd}, {"us_call", us_call},
                           {"us_sustained", us_sustained}, {"warm_ms", o.warm_ms},
                           {"bytes", bytes}, {"floor_us", floor_us}, {"flops", flops}, {"decode", sc.decode}});
        if (!o.routing_dir.empty()) {
            const std::string base = o.routing_dir + "/" + sc.name;
            std::ofstream(base + ".ids", std::ios::binary)
                .write(reinterpret_cast<const char*>(r.ids.data()), static_cast<std::streamsize>(r.ids.size() * 4));
            std::ofstream(base + ".weights", std::ios::binary)
                .write(reinterpret_cast<const char*>(r.weights.data()), static_cast<std::streamsize>(r.weights.size() * 4));
            nlohmann::json meta = {{"name", sc.name}, {"format", std::string(moe::to_string(sc.fmt))},
                                   {"act", static_cast<int>(sc.act)}, {"M", r.tokens}, {"topk", sc.topk},
                                   {"E", sc.experts}, {"H", sc.hidden}, {"I", sc.inter}};
            std::ofstream(base + ".json") << meta.dump() << "\n";
        }
    }
    if (ran == 0) throw InvalidArgument(fmt::format("kiln bench moe: no scenario matches '{}'", o.scenario));
    if (!o.json_path.empty()) {
        const std::string tmp = o.json_path + ".tmp";
        std::ofstream(tmp) << results.dump(1) << "\n";
        std::rename(tmp.c_str(), o.json_path.c_str());
    }
    return results;
}

}  // namespace kiln::model::bench
