#include "jit/moe_w4a16_bench.hpp"

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
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/moe_w4a16.hpp"
#include "runtime/bf16.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/error.hpp"
#include "runtime/cuda/stream.hpp"

namespace kiln::jit {

namespace {

using moe::W4Format;

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
// `copies` back to back on the device.
runtime::DeviceBuffer random_layout_weights(const moe::PreparedMoeWeights& m, int copies, uint64_t seed) {
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
    runtime::DeviceBuffer d(one * copies);
    runtime::copy_h2d(d.ptr(), host.data(), one);
    for (int c = 1; c < copies; ++c) runtime::copy_d2d(d.ptr() + one * c, d.ptr(), one);
    return d;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// One fused decode call with the completion stamps on (MoeW4A16::set_fused_trace), written as JSON:
// per item its kind (0 gate_up, 1 down) and completion time, per CTA its start, the end of its routing
// and its end, in µs from the earliest start; plus the bytes of each kind of item. `call()` runs one forward().
void write_fused_trace(const std::string& path, MoeW4A16& layer, const moe::PreparedMoeWeights& gu,
                       const moe::PreparedMoeWeights& dn, const std::vector<int>& counts, int sm_count,
                       const std::function<void()>& call, runtime::Stream& stream) {
    const int bm = 8 * layer.tiles();
    int nmb = 0;
    for (int c : counts) nmb += (c + bm - 1) / bm;
    const int nsb = gu.n_pad / 128, nsb2 = dn.n_pad / 128;
    const int n_gu = nmb * nsb, n_dn = nmb * nsb2;
    const int claims = n_gu + n_dn;
    runtime::DeviceBuffer buf(static_cast<size_t>(claims + 3 * sm_count) * 8);
    runtime::fill_u32(buf.ptr(), 0, buf.size() / 4);
    layer.set_fused_trace(buf.ptr());
    call();
    stream.synchronize();
    layer.set_fused_trace(0);
    const std::vector<uint64_t> t = runtime::to_host<uint64_t>(buf);
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

struct BenchOptions {
    std::string scenario;
    int iters = 60;
    std::string json_path;
    std::string routing_dir;
    std::string trace_dir;
    int warm_ms = 0;        // forward() back to back for this long before timing (the board at its power limit)
    MoeW4A16Options layer;  // schedule, K chunk, claim order, combine path (the rest is per scenario)
};

void run_bench(const BenchOptions& o) {
    cache::StoreOptions so = cache::store_options_from_env();
    std::unique_ptr<cache::Store> store;
    try {
        store = std::make_unique<cache::Store>(so);
    } catch (const Error&) {
        store.reset();  // benchmark without a persistent cache
    }
    runtime::Context ctx(0);  // the device's primary context, current on this thread for allocations
    ctx.make_current();
    DispatcherOptions dopt;
    dopt.store = store.get();
    Dispatcher disp(dopt);
    const Target target = disp.device_target();
    const runtime::DeviceProps props = runtime::device_props(0);
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
        runtime::DeviceBuffer wgu = random_layout_weights(gu, copies, seed * 3 + 1);
        runtime::DeviceBuffer wdn = random_layout_weights(dn, copies, seed * 3 + 2);
        const uint64_t gu_set = gu.expert_stride * gu.experts, dn_set = dn.expert_stride * dn.experts;

        MoeW4A16Options opt = o.layer;
        opt.act = sc.act;
        opt.topk = sc.topk;
        opt.max_tokens = std::max(1, r.tokens);
        opt.tiles = sc.tiles;
        if (std::string(sc.routing) == "ep") opt.ep_size = 8;  // the other ranks' slots are skipped here
        MoeW4A16 layer(disp, gu, dn, opt);

        std::vector<uint16_t> x(static_cast<size_t>(r.tokens) * sc.hidden);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (auto& v : x) v = runtime::float_to_bf16(nd(rng));
        runtime::DeviceBuffer dx = runtime::to_device(x), dids = runtime::to_device(r.ids),
                              dw = runtime::to_device(r.weights);
        runtime::DeviceBuffer dout(static_cast<size_t>(std::max(1, r.tokens)) * sc.hidden * 2);
        const int64_t m = r.tokens;
        const runtime::TensorView vx = dx.view(runtime::DType::bf16, {m, sc.hidden});
        const runtime::TensorView vids = dids.view(runtime::DType::i32, {m, sc.topk});
        const runtime::TensorView vw = dw.view(runtime::DType::f32, {m, sc.topk});
        const runtime::TensorView vout = dout.view(runtime::DType::bf16, {m, sc.hidden});

        runtime::Stream stream;
        for (int it = 0; it < 3; ++it)
            layer.forward(wgu.ptr() + gu_set * (it % copies), wdn.ptr() + dn_set * (it % copies), vx, vids, vw, vout,
                          stream.handle());
        stream.synchronize();
        if (o.warm_ms > 0) {
            // Sustained state first: under back-to-back load the board reaches its power limit and lowers the
            // SM clock (perf notes §21); the loops below then time that state.
            const auto t0 = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(o.warm_ms)) {
                for (int c = 0; c < copies; ++c)
                    layer.forward(wgu.ptr() + gu_set * c, wdn.ptr() + dn_set * c, vx, vids, vw, vout, stream.handle());
                stream.synchronize();
            }
        }
        // Per-stage events (the headline `us` and its route / gate_up / down columns): the three launches of
        // a call, each between two events, `iters` calls over the rotating weight sets.
        std::vector<runtime::Event> ev;
        ev.reserve(4 * o.iters);
        for (int i = 0; i < 4 * o.iters; ++i) ev.emplace_back(true);
        std::vector<double> tt, tr, tg, td;
        const auto stage_loop = [&]() {
            for (int it = 0; it < o.iters; ++it) {
                const int c = it % copies;
                ev[4 * it].record(stream);
                layer.launch_routing(vids, vw, stream.handle());
                ev[4 * it + 1].record(stream);
                layer.launch_gate_up(wgu.ptr() + gu_set * c, wdn.ptr() + dn_set * c, vx, vout, stream.handle());
                ev[4 * it + 2].record(stream);
                layer.launch_down(wdn.ptr() + dn_set * c, vout, stream.handle());
                ev[4 * it + 3].record(stream);
            }
            stream.synchronize();
            tt.clear(), tr.clear(), tg.clear(), td.clear();
            for (int it = 0; it < o.iters; ++it) {
                tt.push_back(1e3 * runtime::Event::elapsed_ms(ev[4 * it], ev[4 * it + 3]));
                tr.push_back(1e3 * runtime::Event::elapsed_ms(ev[4 * it], ev[4 * it + 1]));
                tg.push_back(1e3 * runtime::Event::elapsed_ms(ev[4 * it + 1], ev[4 * it + 2]));
                td.push_back(1e3 * runtime::Event::elapsed_ms(ev[4 * it + 2], ev[4 * it + 3]));
            }
        };
        stage_loop();
        const double us = median(tt), us_route = median(tr), us_gate_up = median(tg), us_down = median(td);
        // One forward() per timed iteration between two events (do_bench style for the whole layer call; no
        // events between its launches), right after the per-stage loop so that both see the board in the same
        // state (timed after the back-to-back loop below it read up to 15% slower: perf notes §20).
        std::vector<double> tc;
        {
            std::vector<runtime::Event> ce;
            ce.reserve(2 * o.iters);
            for (int i = 0; i < 2 * o.iters; ++i) ce.emplace_back(true);
            for (int it = 0; it < o.iters; ++it) {
                const int c = it % copies;
                ce[2 * it].record(stream);
                layer.forward(wgu.ptr() + gu_set * c, wdn.ptr() + dn_set * c, vx, vids, vw, vout, stream.handle());
                ce[2 * it + 1].record(stream);
            }
            stream.synchronize();
            for (int it = 0; it < o.iters; ++it) tc.push_back(1e3 * runtime::Event::elapsed_ms(ce[2 * it], ce[2 * it + 1]));
        }
        const double us_call = median(tc);
        // forward() back to back (no events between its launches, so programmatic dependent launch can
        // overlap them): batches of `copies` calls over the rotating weight sets, per-call median over as
        // many batches as timed iterations (fewer batches left this column 10% noisy on large calls).
        std::vector<double> tf;
        {
            runtime::Event f0(true), f1(true);
            for (int b = 0; b < std::max(3, o.iters); ++b) {
                f0.record(stream);
                for (int c = 0; c < copies; ++c)
                    layer.forward(wgu.ptr() + gu_set * c, wdn.ptr() + dn_set * c, vx, vids, vw, vout, stream.handle());
                f1.record(stream);
                stream.synchronize();
                tf.push_back(1e3 * runtime::Event::elapsed_ms(f0, f1) / copies);
            }
        }
        const double us_fwd = median(tf);
        // The per-stage loop again, right after that sustained load: back-to-back calls bring the board to its
        // power limit, which lowers the SM clock (perf notes §21), as a serving process sees it.
        stage_loop();
        const double us_sustained = median(tt);
        if (!o.trace_dir.empty() && layer.uses_fused()) {
            const auto call = [&]() { layer.forward(wgu.ptr(), wdn.ptr(), vx, vids, vw, vout, stream.handle()); };
            write_fused_trace(o.trace_dir + "/" + sc.name + ".trace.json", layer, gu, dn, counts, props.sm_count, call,
                              stream);
        }
        const double abytes = static_cast<double>(r.tokens) * sc.hidden * 2 * 2 + static_cast<double>(rows) * sc.inter * 2 * 2;
        const double bytes = touched + abytes;
        const double floor_us = bytes / k_hbm_floor * 1e6;
        const double flops = 2.0 * rows * (3.0 * sc.inter * sc.hidden);
        // The configuration the timed calls ran: the prefill GEMMs (with their block_m), the fused decode kernel
        // (its time is the gate_up column; down is then the combine alone), or the decode kernels with
        // their schedules (gate_up/down) and combine path.
        const uint32_t pf = layer.uses_prefill() ? layer.gate_up_kernel().desc.config.flags : 0u;
        const std::string variant =
            layer.uses_prefill() ? fmt::format("prefill {}bm={}+rows",
                                               (pf & MoeW4A16Family::k_flag_wgmma)
                                                   ? ((pf & MoeW4A16Family::k_flag_wide) ? "wgmma wide " : "wgmma ")
                                                   : "",
                                               layer.prefill_block_m_in_flight())
            : layer.uses_fused() ? fmt::format("decode bm={} fused+rows{}", 8 * layer.tiles(),
                                               layer.fused_k_groups_in_flight() > 1
                                                   ? fmt::format(" kg{}", layer.fused_k_groups_in_flight())
                                                   : "")
                                 : fmt::format("decode bm={} {}/{}{}", 8 * layer.tiles(),
                                               layer.gate_up_dynamic() ? "dyn" : "static",
                                               layer.down_dynamic() ? "dyn" : "static", layer.uses_rows_path() ? "+rows" : "");
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
                           {"variant", variant}, {"prefill", layer.uses_prefill()},
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
}

}  // namespace

void add_moe_bench(CLI::App& bench) {
    auto opts = std::make_shared<BenchOptions>();
    CLI::App* cmd = bench.add_subcommand("moe", "W4A16 MoE layer (routing + gate_up + down) on the decode and "
                                                "prefill scenarios: us, bytes, TB/s, % of the HBM floor, TFLOP/s");
    cmd->add_option("--scenario", opts->scenario, "only scenarios whose name contains this")
        ->envname("KILN_BENCH_MOE_SCENARIO");
    cmd->add_option("--iters", opts->iters, "timed iterations per scenario (median reported)")
        ->envname("KILN_BENCH_MOE_ITERS")
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--json", opts->json_path, "also write the results to this JSON file")->envname("KILN_BENCH_MOE_JSON");
    cmd->add_option("--routing-dir", opts->routing_dir,
                    "write each scenario's routing (NAME.ids, NAME.weights, NAME.json) here for "
                    "scripts/bench-humming.py")
        ->envname("KILN_BENCH_MOE_ROUTING_DIR");
    cmd->add_option("--trace-dir", opts->trace_dir,
                    "write NAME.trace.json here for each fused decode scenario: one call's per-item completion "
                    "times (globaltimer)")
        ->envname("KILN_BENCH_MOE_TRACE_DIR");
    cmd->add_option("--warm-ms", opts->warm_ms,
                    "run each scenario back to back for this many milliseconds before timing it (0: time a fresh "
                    "board; under sustained load the GPU reaches its power limit and lowers its SM clock)")
        ->envname("KILN_BENCH_MOE_WARM_MS")
        ->check(CLI::Range(0, 600000));
    auto schedules = std::make_shared<std::array<std::string, 2>>(std::array<std::string, 2>{"auto", "auto"});
    cmd->add_option("--gate-up-schedule", (*schedules)[0],
                    "gate_up work distribution: auto (measured best per problem), static (equal shares per SM) or "
                    "dynamic (items claimed at run time)")
        ->envname("KILN_BENCH_MOE_GATE_UP_SCHEDULE")
        ->check(CLI::IsMember({"auto", "static", "dynamic"}));
    cmd->add_option("--down-schedule", (*schedules)[1], "down work distribution: auto, static or dynamic")
        ->envname("KILN_BENCH_MOE_DOWN_SCHEDULE")
        ->check(CLI::IsMember({"auto", "static", "dynamic"}));
    cmd->add_option("--gate-up-k-chunk", opts->layer.gate_up_k_chunk,
                    "dynamic gate_up: 64-wide records per work item along K (-1 automatic, 0 whole K)")
        ->envname("KILN_BENCH_MOE_GATE_UP_K_CHUNK")
        ->check(CLI::Range(-1, 1 << 20));
    cmd->add_option("--down-k-chunk", opts->layer.down_k_chunk,
                    "dynamic down with atomics: 64-wide records per work item along K (-1 automatic, 0 whole K)")
        ->envname("KILN_BENCH_MOE_DOWN_K_CHUNK")
        ->check(CLI::Range(-1, 1 << 20));
    cmd->add_option("--order-window", opts->layer.order_window,
                    "dynamic schedule: claim order, m-blocks per window (1: each expert matrix in order)")
        ->envname("KILN_BENCH_MOE_ORDER_WINDOW")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--rows-combine-min", opts->layer.rows_combine_min,
                    "routed slots (tokens x top-k) from which down writes rows and a combine kernel sums them "
                    "(-1 never: fp32 atomics)")
        ->envname("KILN_BENCH_MOE_ROWS_COMBINE_MIN")
        ->check(CLI::Range(int64_t(-1), int64_t(1) << 40));
    cmd->add_option("--prefill-min", opts->layer.prefill_min,
                    "routed slots per local expert (tokens x top-k / experts) from which the layer runs the prefill "
                    "GEMMs (block_m per --prefill-block-m, rows + combine); -1 never, 0 always")
        ->envname("KILN_BENCH_MOE_PREFILL_MIN")
        ->check(CLI::Range(int64_t(-1), int64_t(1) << 40));
    cmd->add_option("--prefill-wgmma", opts->layer.prefill_wgmma,
                    "prefill GEMMs as warpgroup MMAs on sm_90a (false: the mma.sync version)")
        ->envname("KILN_BENCH_MOE_PREFILL_WGMMA");
    cmd->add_option("--prefill-wide", opts->layer.prefill_wide,
                    "wgmma prefill GEMMs with K >= 2048: two 128-row super-blocks side by side per CTA (one CTA per SM)")
        ->envname("KILN_BENCH_MOE_PREFILL_WIDE");
    cmd->add_option("--prefill-block-m", opts->layer.prefill_block_m,
                    "rows per m-block of the prefill GEMMs: 64, 128 or 192 (the warp-specialised wgmma kernel, "
                    "sm_90a); 0 = from the expected rows per expert")
        ->envname("KILN_BENCH_MOE_PREFILL_BLOCK_M")
        ->check(CLI::IsMember({0, 64, 128, 192}));
    cmd->add_option("--fuse", opts->layer.fuse,
                    "decode from --fused-min routed slots: gate_up and down (dynamic, rows + combine) in one persistent launch")
        ->envname("KILN_BENCH_MOE_FUSE");
    cmd->add_option("--fused-min", opts->layer.fused_min,
                    "routed slots (tokens x top-k) from which decode calls run the fused kernel; -1 never")
        ->envname("KILN_BENCH_MOE_FUSED_MIN")
        ->check(CLI::Range(int64_t(-1), int64_t(1) << 40));
    cmd->add_option("--decode-stages", opts->layer.decode_stages,
                    "fused decode kernel: pipeline stages per warp group (0: the deepest ring that fits)")
        ->envname("KILN_BENCH_MOE_DECODE_STAGES")
        ->check(CLI::Range(0, 16));
    cmd->add_option("--decode-block-k", opts->layer.decode_block_k,
                    "decode kernels: inputs per pipeline stage, 64, 128 or 256 (0: 256 where the shapes and a "
                    "two-stage ring allow, else 128 or 64; the unfused kernels take it where it divides their K)")
        ->envname("KILN_BENCH_MOE_DECODE_BLOCK_K")
        ->check(CLI::IsMember({0, 64, 128, 256}));
    cmd->add_option("--fused-k-groups", opts->layer.fused_k_groups,
                    "fused decode kernel: warp groups sharing each work item, each streaming a part of its K (1, 2 "
                    "or 4; fewer where K or the shared memory do not allow)")
        ->envname("KILN_BENCH_MOE_FUSED_K_GROUPS")
        ->check(CLI::IsMember({1, 2, 4}));
    cmd->add_option("--fused-k-groups-max-slots", opts->layer.fused_k_groups_max_slots,
                    "routed slots (tokens x top-k) up to which fused calls share items among --fused-k-groups warp "
                    "groups (larger calls: one group per item); -1 never")
        ->envname("KILN_BENCH_MOE_FUSED_K_GROUPS_MAX_SLOTS")
        ->check(CLI::Range(int64_t(-1), int64_t(1) << 40));
    cmd->callback([opts, schedules]() {
        const auto pick = [](const std::string& s) {
            return s == "dynamic" ? MoeW4A16SchedulePick::dynamic
                   : s == "static" ? MoeW4A16SchedulePick::static_shares
                                   : MoeW4A16SchedulePick::automatic;
        };
        opts->layer.gate_up_schedule = pick((*schedules)[0]);
        opts->layer.down_schedule = pick((*schedules)[1]);
        run_bench(*opts);
    });
}

}  // namespace kiln::jit
