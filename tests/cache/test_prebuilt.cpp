// Prebuilt layers: export (signed or not), trust policy, tamper detection, import.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <functional>

#include "cache/signing.hpp"
#include "cache/store.hpp"
#include "cache_test_util.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;

namespace {

struct Fixture {
    TempDir dir;
    std::vector<Artifact> cubins;
    Artifact host;
    std::string layer;
    std::string sign_key, pub_key, other_pub;

    // Builds a user cache with three cubins and one host object, and exports it.
    explicit Fixture(bool sign) {
        SigningKey::generate().write_pair(dir / "sign.pem");
        SigningKey::generate().write_pair(dir / "other.pem");
        sign_key = dir / "sign.pem";
        pub_key = dir / "sign.pem.pub";
        other_pub = dir / "other.pem.pub";
        for (uint64_t i = 0; i < 3; ++i) cubins.push_back(make_artifact(i, 30000 + i * 40000));
        host = make_artifact(9, 25000, ArtifactKind::host_object);
        layer = dir / "k3.kcache";
        Store builder(options_in(dir, "builder"));
        for (auto& a : cubins) REQUIRE(builder.put(a));
        REQUIRE(builder.put(host));
        REQUIRE(builder.get(cubins[0].info.key, ArtifactKind::cubin).has_value());  // a hit, not exported
        builder.export_layer(layer, sign ? sign_key : "");
    }

    StoreOptions server(std::vector<std::string> trusted) const {
        StoreOptions o = options_in(dir, "server");
        o.prebuilt = {layer};
        o.trusted_keys = std::move(trusted);
        return o;
    }
};

void exec_sql(const std::string& file, const std::string& sql) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    INFO(sql << ": " << (err ? err : ""));
    sqlite3_free(err);
    sqlite3_close(db);
    REQUIRE(rc == SQLITE_OK);
}

// Flips one byte of `blob` where it sits in the file (raw bytes, as a disk error or an attacker would).
void flip_blob_byte(const std::string& file, const std::vector<uint8_t>& blob) {
    std::string bytes = slurp(file);
    for (size_t off = blob.size() / 2; off + 64 <= blob.size(); off += 97) {
        std::string window(blob.begin() + static_cast<long>(off), blob.begin() + static_cast<long>(off) + 64);
        size_t at = bytes.find(window);
        if (at == std::string::npos) continue;  // straddles an overflow-page boundary
        bytes[at + 32] = static_cast<char>(bytes[at + 32] ^ 0x40);
        spit(file, bytes);
        return;
    }
    FAIL("blob bytes not found in the file");
}

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const CacheError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("a trusted signed layer serves cubins and host objects") {
    Fixture fx(true);
    Store s(fx.server({fx.pub_key}));
    CHECK(s.warnings().empty());
    for (const auto& a : fx.cubins) {
        auto got = s.get(a.info.key, ArtifactKind::cubin);
        REQUIRE(got.has_value());
        CHECK(got->blob == a.blob);
        CHECK(got->info.layer == fx.layer);
        CHECK(got->info.kernel_name == a.info.kernel_name);
        CHECK(got->info.hits == 0);  // the builder's hits are not shipped
    }
    auto h = s.get(fx.host.info.key, ArtifactKind::host_object);
    REQUIRE(h.has_value());
    CHECK(h->blob == fx.host.blob);
    Store::Stats st = s.stats();
    REQUIRE(st.layers.size() == 2);
    CHECK(st.layers[0].trust == "trusted");
    CHECK(st.layers[0].entries == 4);
    CHECK(st.layers[0].signer == PublicKey::load_pem(fx.pub_key).fingerprint());
    CHECK(st.layers[1].entries == 0);  // serving from the prebuilt layer writes nothing to the user layer
    CHECK(s.verify().problems.empty());
    auto listed = s.list();
    CHECK(listed.size() == 4);
    CHECK(s.find(fx.host.info.key.hex().substr(0, 20))->layer == fx.layer);
}

TEST_CASE("the exported file is a compact rollback-journal DB, published without leftovers") {
    Fixture fx(true);
    std::string bytes = slurp(fx.layer);
    REQUIRE(bytes.size() > 100);
    CHECK(bytes.compare(0, 16, std::string("SQLite format 3\0", 16)) == 0);
    CHECK(bytes[18] == 1);  // journal_mode=DELETE (2 would be WAL)
    CHECK(bytes[19] == 1);
    for (auto& e : fs::directory_iterator(fx.dir.path)) {
        std::string name = e.path().filename().string();
        CHECK(name.find(".tmp-") == std::string::npos);
        CHECK(name.find("-wal") == std::string::npos);
        CHECK(name.find("-journal") == std::string::npos);
    }
    // Re-exporting over the same path replaces it.
    Store builder(options_in(fx.dir, "builder"));
    builder.export_layer(fx.layer, "");
    Store s(fx.server({}));
    CHECK(contains(s.warnings(), "is not signed"));
}

TEST_CASE("without trusted keys, an unsigned layer serves cubins with a warning but never host objects") {
    Fixture fx(false);
    Store s(fx.server({}));
    CHECK(contains(s.warnings(), fx.layer + " is not signed"));
    for (const auto& a : fx.cubins) {
        auto got = s.get(a.info.key, ArtifactKind::cubin);
        REQUIRE(got.has_value());
        CHECK(got->blob == a.blob);
    }
    CHECK_FALSE(s.get(fx.host.info.key, ArtifactKind::host_object).has_value());
    CHECK(contains(s.warnings(), "ignoring its host object code"));
    // The user's own cache may hold the same host object: that one is served.
    REQUIRE(s.put(fx.host));
    auto h = s.get(fx.host.info.key, ArtifactKind::host_object);
    REQUIRE(h.has_value());
    CHECK(h->info.layer == "user");
    CHECK(s.stats().layers[0].trust == "unsigned");
}

TEST_CASE("without trusted keys, a layer signed by an unknown key is treated like an unsigned one") {
    Fixture fx(true);
    Store s(fx.server({}));
    CHECK(contains(s.warnings(), "which is not trusted"));
    CHECK(contains(s.warnings(), PublicKey::load_pem(fx.pub_key).fingerprint()));
    CHECK(s.get(fx.cubins[1].info.key, ArtifactKind::cubin).has_value());
    CHECK_FALSE(s.get(fx.host.info.key, ArtifactKind::host_object).has_value());
    CHECK(s.stats().layers[0].trust == "untrusted signer");
}

TEST_CASE("with trusted keys (or require_signed), a layer not signed by one of them is refused whole") {
    Fixture signed_layer(true), unsigned_layer(false);
    const std::string fp = PublicKey::load_pem(signed_layer.pub_key).fingerprint();
    std::string what = message_of([&] { Store s(signed_layer.server({signed_layer.other_pub})); });
    CHECK(what.find(signed_layer.layer) != std::string::npos);
    CHECK(what.find("signed by key " + fp + ", which is not trusted; refusing it") != std::string::npos);
    what = message_of([&] { Store s(unsigned_layer.server({unsigned_layer.pub_key})); });
    CHECK(what.find(unsigned_layer.layer + " is not signed; refusing it") != std::string::npos);
    for (const Fixture* fx : {&signed_layer, &unsigned_layer}) {
        StoreOptions o = fx->server({});
        o.require_signed = true;
        what = message_of([&] { Store s(o); });
        CHECK(what.find("refusing it: --require-signed") != std::string::npos);
    }
    // The signer's key is accepted, with or without require_signed.
    StoreOptions o = signed_layer.server({signed_layer.other_pub, signed_layer.pub_key});
    o.require_signed = true;
    Store s(o);
    CHECK(s.stats().layers[0].trust == "trusted");
    CHECK(s.warnings().empty());
    // Import follows the same policy.
    StoreOptions strict = options_in(signed_layer.dir, "strict");
    strict.trusted_keys = {signed_layer.other_pub};
    Store importer(strict);
    CHECK(message_of([&] { (void)importer.import_layer(signed_layer.layer); }).find("refusing it") != std::string::npos);
    CHECK(importer.list().empty());
}

TEST_CASE("a tampered blob is refused with an error naming the file and key") {
    Fixture fx(true);
    flip_blob_byte(fx.layer, fx.cubins[2].blob);
    Store s(fx.server({fx.pub_key}));  // the manifest is intact, so the layer opens
    std::string what = message_of([&] { (void)s.get(fx.cubins[2].info.key, ArtifactKind::cubin); });
    CHECK(what.find(fx.layer) != std::string::npos);
    CHECK(what.find(fx.cubins[2].info.key.hex()) != std::string::npos);
    CHECK(what.find("SHA-256") != std::string::npos);
    // Untouched entries are still served.
    CHECK(s.get(fx.cubins[0].info.key, ArtifactKind::cubin)->blob == fx.cubins[0].blob);
    auto report = s.verify();
    REQUIRE(report.problems.size() == 1);
    CHECK(report.problems[0].find(fx.cubins[2].info.key.hex()) != std::string::npos);
}

TEST_CASE("a blob replaced through SQL (same size) is refused") {
    Fixture fx(false);
    exec_sql(fx.layer, "UPDATE artifacts SET blob = randomblob(length(blob)) WHERE key = '" +
                           fx.cubins[0].info.key.hex() + "'");
    Store s(fx.server({}));
    std::string what = message_of([&] { (void)s.get(fx.cubins[0].info.key, ArtifactKind::cubin); });
    CHECK(what.find(fx.cubins[0].info.key.hex()) != std::string::npos);
    CHECK(what.find("does not match the manifest") != std::string::npos);
}

TEST_CASE("a row that disagrees with the manifest is refused") {
    Fixture fx(true);
    exec_sql(fx.layer, "UPDATE artifacts SET kernel_name = 'other_entry' WHERE key = '" + fx.cubins[1].info.key.hex() + "'");
    Store s(fx.server({fx.pub_key}));
    std::string what = message_of([&] { (void)s.get(fx.cubins[1].info.key, ArtifactKind::cubin); });
    CHECK(what.find(fx.cubins[1].info.key.hex()) != std::string::npos);
    CHECK(what.find("kernel_name") != std::string::npos);
}

TEST_CASE("a tampered manifest is refused at open") {
    Fixture fx(true);
    // An attacker swaps a blob and updates the manifest to match: the signature no longer verifies.
    std::string key = fx.cubins[0].info.key.hex();
    exec_sql(fx.layer, "UPDATE artifacts SET blob = zeroblob(1000), size = 1000 WHERE key = '" + key +
                           "'; UPDATE manifest SET size = 1000, sha256 = '" +
                           std::string("541b3e9daa09b20bf85fa273e5cbd3e80185aa4ec298e765db87742b70138a53") +
                           "' WHERE key = '" + key + "'");
    std::string what = message_of([&] { Store s(fx.server({fx.pub_key})); });
    CHECK(what.find(fx.layer) != std::string::npos);
    CHECK(what.find("signature does not verify") != std::string::npos);
    // Also without trusting anyone: a broken signature is tampering, not a trust question.
    CHECK_THROWS_AS(Store(fx.server({})), CacheError);
}

TEST_CASE("editing any manifest field breaks the signature") {
    for (const char* edit : {"kernel_name = 'x'", "target = 'sm_100a'", "m = m + 1", "kind = 1 - kind"}) {
        Fixture fx(true);
        exec_sql(fx.layer, std::string("UPDATE manifest SET ") + edit + " WHERE key = '" + fx.cubins[1].info.key.hex() + "'");
        CHECK_THROWS_AS(Store(fx.server({fx.pub_key})), CacheError);
    }
}

TEST_CASE("stripping the signature cannot downgrade a layer past the trusted keys") {
    Fixture fx(true);
    // The attack: drop the signature row, swap cubin 0 for cubin 1 and rewrite cubin 0's manifest entry
    // to match, so an unsigned layer would serve cubin 1's code for cubin 0's descriptor.
    const std::string k0 = fx.cubins[0].info.key.hex(), k1 = fx.cubins[1].info.key.hex();
    exec_sql(fx.layer, "DELETE FROM signature; "
                       "UPDATE artifacts SET blob = (SELECT blob FROM artifacts WHERE key = '" + k1 + "'), "
                       "size = (SELECT size FROM artifacts WHERE key = '" + k1 + "'), "
                       "sha256 = (SELECT sha256 FROM artifacts WHERE key = '" + k1 + "') WHERE key = '" + k0 + "'; "
                       "UPDATE manifest SET size = (SELECT size FROM manifest WHERE key = '" + k1 + "'), "
                       "sha256 = (SELECT sha256 FROM manifest WHERE key = '" + k1 + "') WHERE key = '" + k0 + "'");
    {
        // With no trust anchor there is nothing to check authorship against: the swap is served (the
        // README's trust model), with the unsigned warning.
        Store open(fx.server({}));
        CHECK(contains(open.warnings(), "is not signed"));
        CHECK(open.get(fx.cubins[0].info.key, ArtifactKind::cubin)->blob == fx.cubins[1].blob);
    }
    std::string what = message_of([&] { Store s(fx.server({fx.pub_key})); });
    CHECK(what.find(fx.layer + " is not signed; refusing it") != std::string::npos);
    StoreOptions o = fx.server({});
    o.require_signed = true;
    CHECK(message_of([&] { Store s(o); }).find("refusing it") != std::string::npos);
}

TEST_CASE("files that are not prebuilt layers are refused with a clear error") {
    Fixture fx(true);
    StoreOptions o = fx.server({});
    o.prebuilt = {fx.dir / "missing.kcache"};
    CHECK(message_of([&] { Store s(o); }).find("no such file") != std::string::npos);
    o.prebuilt = {fx.dir / "builder/kernels.db"};
    CHECK(message_of([&] { Store s(o); }).find("not a prebuilt layer") != std::string::npos);
    spit(fx.dir / "junk.kcache", std::string(5000, 'j'));
    o.prebuilt = {fx.dir / "junk.kcache"};
    CHECK(message_of([&] { Store s(o); }).find("junk.kcache") != std::string::npos);
}

TEST_CASE("prebuilt layers are searched before the user layer") {
    Fixture fx(true);
    Store s(fx.server({fx.pub_key}));
    REQUIRE(s.put(fx.cubins[0]));  // the same key in the user layer
    CHECK(s.get(fx.cubins[0].info.key, ArtifactKind::cubin)->info.layer == fx.layer);
    CHECK(s.list().size() == 5);
    CHECK(s.stats().entries == 4);  // each key counted once
}

TEST_CASE("clear empties the user layer and leaves prebuilt files alone") {
    Fixture fx(true);
    std::string before = slurp(fx.layer);
    Store s(fx.server({fx.pub_key}));
    REQUIRE(s.put(make_artifact(50)));
    s.clear();
    CHECK(s.stats().layers[1].entries == 0);
    CHECK(slurp(fx.layer) == before);
    CHECK(s.get(fx.cubins[0].info.key, ArtifactKind::cubin).has_value());
}

TEST_CASE("import copies verified rows; host objects only from a trusted layer") {
    Fixture fx(true);
    {
        Store s(options_in(fx.dir, "a"));
        StoreOptions o = options_in(fx.dir, "a");
        o.trusted_keys = {fx.pub_key};
        Store trusting(o);
        CHECK(trusting.import_layer(fx.layer) == 4);
        CHECK(trusting.get(fx.host.info.key, ArtifactKind::host_object)->blob == fx.host.blob);
        CHECK(trusting.import_layer(fx.layer) == 0);  // already there
    }
    Store untrusting(options_in(fx.dir, "b"));
    CHECK(untrusting.import_layer(fx.layer) == 3);
    CHECK_FALSE(untrusting.get(fx.host.info.key, ArtifactKind::host_object).has_value());
    CHECK(contains(untrusting.warnings(), "skipped 1 host object"));
}

TEST_CASE("importing a tampered layer fails and imports nothing") {
    Fixture fx(true);
    flip_blob_byte(fx.layer, fx.cubins[1].blob);
    Store s(options_in(fx.dir, "c"));
    std::string what = message_of([&] { (void)s.import_layer(fx.layer); });
    CHECK(what.find(fx.cubins[1].info.key.hex()) != std::string::npos);
    CHECK(s.list().empty());
}

TEST_CASE("export leaves out rows whose blob no longer matches its digest") {
    Fixture fx(true);
    exec_sql(fx.dir / "builder/kernels.db", "UPDATE artifacts SET blob = randomblob(length(blob)) WHERE key = '" +
                                                fx.cubins[2].info.key.hex() + "'");
    Store builder(options_in(fx.dir, "builder"));
    builder.export_layer(fx.dir / "clean.kcache", fx.sign_key);
    CHECK(contains(builder.warnings(), fx.cubins[2].info.key.hex()));
    StoreOptions o = fx.server({fx.pub_key});
    o.prebuilt = {fx.dir / "clean.kcache"};
    Store s(o);
    CHECK(s.stats().layers[0].entries == 3);
    CHECK_FALSE(s.get(fx.cubins[2].info.key, ArtifactKind::cubin).has_value());
    CHECK(s.verify().problems.empty());
}
