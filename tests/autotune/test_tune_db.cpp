// The tune DB (autotune/tune_db.hpp): schema and version, SKU refusal, measurements and windows, resume of
// an interrupted sweep driven on the host backend, and the flat tables dispatch reads (tuned_tables.hpp).
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "autotune/sweep.hpp"
#include "autotune/tune_db.hpp"
#include "autotune/tuned_tables.hpp"
#include "cache/sqlite_db.hpp"
#include "runtime/error.hpp"
#include "runtime/host/stream.hpp"
#include "tests/common/sandbox.hpp"

using namespace kiln::autotune;
using kiln::test::TempDir;

namespace {

SkuIdentity sku_a() {
    SkuIdentity s;
    s.kind = "cuda";
    s.name = "NVIDIA H200";
    s.compute_units = 132;
    s.memory_bytes = uint64_t(141) << 30;
    s.target = "sm_90a";
    s.driver = "13.0";
    s.nvrtc = "13.0";
    s.clock_khz = 1980000;
    return s;
}

const ShapeKey k_shape{"moe_w4a16", "layer", 256, 96, 16, 4, "mxfp4_g32_e8m0/situ_glu"};

// Host work whose cost grows with M and the config's factor: fills of a buffer on the host stream.
class FillRun final : public SweepRun {
public:
    FillRun(kiln::runtime::Backend& b, size_t words, int copies) : words_(words), copies_(copies) {
        buf_ = b.alloc(words * 4 * static_cast<size_t>(copies));
    }
    int copies() const override { return copies_; }
    void enqueue(kiln::runtime::Stream& s, int copy) override {
        s.fill_u32(buf_.addr() + static_cast<uint64_t>(copy) * words_ * 4, 7u, words_);
    }
    double bytes() const override { return static_cast<double>(words_) * 4; }

private:
    size_t words_;
    int copies_;
    kiln::runtime::Buffer buf_;
};

SweepCase fill_case(kiln::runtime::Backend& backend, std::map<std::string, int>& prepared) {
    SweepCase c;
    c.shape = k_shape;
    c.ms = {1, 2, 4, 8};
    c.candidates = {{"tiles=1", 8, "decode"}, {"tiles=4", 32, "decode"}, {"prefill_min=0", 64, "prefill"}};
    c.prepare = [&backend, &prepared](const SweepCandidate& cand, int64_t m) -> std::unique_ptr<SweepRun> {
        ++prepared[cand.config];
        if (cand.schedule == "prefill" && m < 4) return nullptr;  // cannot run below 4
        const size_t factor = cand.config == "tiles=1" ? 1 : 8;
        return std::make_unique<FillRun>(backend, 32768 * static_cast<size_t>(m) * factor, 2);
    };
    return c;
}

}  // namespace

TEST_CASE("a new tune DB records its schema and SKU; an existing file is not overwritten") {
    TempDir dir("tunedb");
    const std::string path = dir / "h200.tune.db";
    {
        TuneDb db = TuneDb::create(path, sku_a());
        CHECK(db.sku().name == "NVIDIA H200");
        CHECK(db.sku().compute_units == 132);
        CHECK(db.meta("kiln_version") != "");
    }
    CHECK_THROWS_AS(TuneDb::create(path, sku_a()), kiln::InvalidArgument);
    kiln::cache::Db raw(path, SQLITE_OPEN_READONLY, path);
    CHECK(raw.scalar_i64("PRAGMA user_version") == k_tune_schema_version);
    CHECK(raw.scalar_i64("PRAGMA application_id") == 0x6B6C7475);
    const TuneDb ro = TuneDb::open_read(path);
    CHECK(ro.sku().driver == "13.0");
    CHECK(ro.sku().memory_bytes == uint64_t(141) << 30);
}

TEST_CASE("a DB of another SKU is refused with both SKUs and the differing field named") {
    TempDir dir("tunedb");
    const std::string path = dir / "h200.tune.db";
    TuneDb::create(path, sku_a());
    SkuIdentity h100 = sku_a();
    h100.name = "NVIDIA H100 80GB HBM3";
    try {
        TuneDb::resume(path, h100);
        FAIL("another SKU was accepted");
    } catch (const TuneDbError& e) {
        const std::string what = e.what();
        CHECK(what.find("NVIDIA H200") != std::string::npos);
        CHECK(what.find("NVIDIA H100 80GB HBM3") != std::string::npos);
        CHECK(what.find("device") != std::string::npos);
    }
    SkuIdentity fewer = sku_a();
    fewer.compute_units = 114;
    CHECK_THROWS_WITH_AS(TunedTables::load(path, fewer), doctest::Contains("SM count 132 vs 114"), TuneDbError);
    // a driver or NVRTC update is the same SKU
    SkuIdentity updated = sku_a();
    updated.driver = "13.1";
    updated.nvrtc = "13.1";
    updated.clock_khz = 1000;
    CHECK_NOTHROW(TuneDb::resume(path, updated));
}

TEST_CASE("files that are not tune DBs, or of a newer schema, are refused") {
    TempDir dir("tunedb");
    const std::string junk = dir / "junk.db";
    std::ofstream(junk) << "not a database at all, just text that is long enough to not be empty";
    CHECK_THROWS_AS(TuneDb::open_read(junk), TuneDbError);
    const std::string other = dir / "other.db";
    {
        kiln::cache::Db db(other, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, other);
        db.exec("CREATE TABLE t(x); PRAGMA application_id = 7;");
    }
    CHECK_THROWS_WITH_AS(TuneDb::open_read(other), doctest::Contains("not a kiln tune DB"), TuneDbError);
    const std::string newer = dir / "newer.db";
    TuneDb::create(newer, sku_a());
    {
        kiln::cache::Db db(newer, SQLITE_OPEN_READWRITE, newer);
        db.exec("PRAGMA user_version = 99");
    }
    CHECK_THROWS_WITH_AS(TuneDb::resume(newer, sku_a()), doctest::Contains("schema version 99"), TuneDbError);
    CHECK_THROWS_AS(TuneDb::open_read(dir / "missing.db"), kiln::NotFound);
}

TEST_CASE("measurements, windows and the verify_cost table round-trip") {
    TempDir dir("tunedb");
    const std::string path = dir / "t.tune.db";
    TuneDb db = TuneDb::create(path, sku_a());
    Measurement m;
    m.shape = k_shape;
    m.m = 8;
    m.config = "tiles=2";
    m.block_m = 16;
    m.schedule = "decode";
    m.median_us = 12.5;
    m.min_us = 11;
    m.max_us = 15;
    m.reps = 9;
    m.bytes = 1e6;
    db.put_measurement(m);
    CHECK(db.has_measurement(k_shape, 8, "tiles=2"));
    CHECK_FALSE(db.has_measurement(k_shape, 8, "tiles=4"));
    CHECK_FALSE(db.has_measurement(k_shape, 16, "tiles=2"));
    const auto all = db.measurements();
    REQUIRE(all.size() == 1);
    CHECK(all[0].shape == k_shape);
    CHECK(all[0].block_m == 16);
    CHECK(all[0].median_us == 12.5);
    CHECK(all[0].reps == 9);

    const auto w = fit_m_windows(all, 0.03);
    db.put_windows(w, toke_windows(w));
    db.put_windows(w, toke_windows(w));  // replaces, never duplicates
    REQUIRE(db.m_windows().size() == 1);
    CHECK(db.m_windows()[0].m_hi == 8);
    REQUIRE(db.toke_windows().size() == 1);
    CHECK(db.toke_windows()[0].tok_hi == doctest::Approx(2.0));

    VerifyCostTable t;
    t.requests = {1, 8};
    t.tokens = {1, 2, 4};
    t.measured_ms = {1, 1.2, 1.1, 2, 2.5, 3};
    force_monotone(t);
    db.put_verify_cost(t);
    const auto back = TuneDb::open_read(path).verify_cost();
    REQUIRE(back.has_value());
    CHECK(back->requests == t.requests);
    CHECK(back->tokens == t.tokens);
    CHECK(back->ms == t.ms);
    CHECK(back->measured_ms == t.measured_ms);
}

TEST_CASE("an interrupted sweep resumes from its finished points and fits the windows") {
    TempDir dir("tunedb");
    const std::string path = dir / "host.tune.db";
    kiln::runtime::HostBackend backend;
    const SkuIdentity sku = host_sku(backend.compute_units());
    std::map<std::string, int> prepared;
    const std::vector<SweepCase> cases = {fill_case(backend, prepared)};
    SweepOptions o;
    o.warmup = 1;
    o.reps = 5;
    {
        TuneDb db = TuneDb::create(path, sku);
        int seen = 0;
        auto stop_after_five = [&](const SweepProgress& p) {
            CHECK(p.total == 12);
            if (++seen == 5) throw std::runtime_error("interrupted");
        };
        CHECK_THROWS_WITH(run_sweep(db, backend, cases, o, stop_after_five), "interrupted");
        CHECK(db.meta("sweep.state") == "running");
    }
    // 5 points visited; the prefill candidate cannot run at M=1 so 4 of them are measured
    CHECK(TuneDb::open_read(path).measurements().size() == 4);
    const int before = prepared["tiles=1"] + prepared["tiles=4"] + prepared["prefill_min=0"];
    CHECK(before == 5);

    TuneDb db = TuneDb::resume(path, sku);
    size_t last_resumed = 0;
    const SweepSummary s = run_sweep(db, backend, cases, o, [&](const SweepProgress& p) { last_resumed = p.resumed; });
    CHECK(s.resumed == 4);
    CHECK(last_resumed == 4);
    CHECK(s.measured + s.unsupported == 8);
    CHECK(s.unsupported == 2);  // prefill at M = 1 (again: unsupported points are not stored) and 2
    const int after = prepared["tiles=1"] + prepared["tiles=4"] + prepared["prefill_min=0"];
    CHECK(after - before == 8);
    CHECK(db.meta("sweep.state") == "complete");
    CHECK(db.measurements().size() == 10);
    // tiles=1 moves 8x fewer bytes: it wins at every M
    REQUIRE(s.windows.size() == 1);
    CHECK(s.windows[0].config == "tiles=1");
    CHECK(s.windows[0].m_lo == 1);
    CHECK(s.windows[0].m_hi == 8);
    for (const Measurement& m : db.measurements()) {
        CHECK(m.reps == 5);
        CHECK(m.min_us <= m.median_us);
        CHECK(m.median_us <= m.max_us);
    }

    // the flat tables dispatch reads
    const TunedTables tables = TunedTables::load(path, sku);
    CHECK(tables.windows(k_shape).size() == 1);
    ShapeKey other = k_shape;
    other.n = 512;
    CHECK(tables.windows(other).empty());
    CHECK(tables.in_force(k_shape).find("tuned") == 0);
    CHECK(tables.in_force(other).find("heuristics") == 0);
    CHECK(TunedTables().in_force(k_shape) == "heuristics (no tune DB)");
}

TEST_CASE("moe_w4a16 windows apply the DB's configs and fall back to the heuristics") {
    TempDir dir("tunedb");
    const std::string path = dir / "t.tune.db";
    const ShapeKey shape = moe_w4a16_shape_key(256, 96, 16, 4, kiln::jit::WeightFormat::mxfp4_g32_e8m0, "situ_glu");
    {
        TuneDb db = TuneDb::create(path, sku_a());
        std::vector<MWindow> w(2);
        w[0].shape = w[1].shape = shape;
        w[0].m_lo = 1, w[0].m_hi = 15, w[0].config = "tiles=1,prefill_min=-1";
        w[1].m_lo = 16, w[1].m_hi = 64, w[1].config = "tiles=4,prefill_min=0";
        db.put_windows(w, toke_windows(w));
    }
    const TunedTables t = TunedTables::load(path, sku_a());
    const auto fmt = kiln::jit::WeightFormat::mxfp4_g32_e8m0;
    auto ws = moe_w4a16_windows(t, shape, fmt, 256);
    REQUIRE(ws.size() == 2);
    CHECK(ws[0].tuned);
    CHECK(ws[0].max_tokens == 15);
    CHECK(ws[0].tuning.tiles == 1);
    CHECK(ws[0].tuning.prefill_min == -1);
    CHECK(ws[1].m_hi == 256);  // the last window reaches the server's largest call
    CHECK(ws[1].tuning.tiles == 4);
    CHECK(ws[1].tuning.gate_up_dynamic_max_slots == default_moe_w4a16_tuning(fmt).gate_up_dynamic_max_slots);
    ws = moe_w4a16_windows(t, shape, fmt, 8);
    REQUIRE(ws.size() == 1);
    CHECK(ws[0].max_tokens == 8);
    ShapeKey other = shape;
    other.e = 32;
    ws = moe_w4a16_windows(t, other, fmt, 64);
    REQUIRE(ws.size() == 1);
    CHECK_FALSE(ws[0].tuned);
    CHECK(kiln::autotune::describe(ws[0].tuning) == kiln::autotune::describe(default_moe_w4a16_tuning(fmt)));
    CHECK_THROWS_AS(moe_w4a16_windows(t, shape, fmt, 0), kiln::InvalidArgument);
    MoeW4A16Tuning x;
    CHECK_THROWS_AS(apply_tuning_text(x, "no_such_field=1"), kiln::InvalidArgument);
}
