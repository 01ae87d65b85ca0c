#include "cache/manifest.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cache/digest.hpp"
#include "cache/schema.hpp"

namespace kiln::cache {

ManifestEntry ManifestEntry::from(const ArtifactInfo& a) {
    ManifestEntry e;
    e.key = a.key;
    e.kind = a.kind;
    e.sha256 = a.sha256;
    e.size = a.bytes;
    e.family = a.family;
    e.mode = a.mode;
    e.m = a.m;
    e.n = a.n;
    e.k = a.k;
    e.experts = a.experts;
    e.weight_format = a.weight_format;
    e.act_dtype = a.act_dtype;
    e.target = a.target;
    e.config = a.config;
    e.kernel_name = a.kernel_name;
    e.compiler = a.compiler;
    return e;
}

void ManifestEntry::apply_to(ArtifactInfo& a) const {
    a.key = key;
    a.kind = kind;
    a.sha256 = sha256;
    a.bytes = size;
    a.family = family;
    a.mode = mode;
    a.m = m;
    a.n = n;
    a.k = k;
    a.experts = experts;
    a.weight_format = weight_format;
    a.act_dtype = act_dtype;
    a.target = target;
    a.config = config;
    a.kernel_name = kernel_name;
    a.compiler = compiler;
}

std::string ManifestEntry::mismatch(const ArtifactInfo& a) const {
    if (a.key != key) return "key";
    if (a.kind != kind) return "kind";
    if (a.sha256 != sha256) return "sha256";
    if (a.bytes != size) return "size";
    if (a.family != family) return "family";
    if (a.mode != mode) return "mode";
    if (a.m != m || a.n != n || a.k != k || a.experts != experts) return "shape";
    if (a.weight_format != weight_format) return "weight_format";
    if (a.act_dtype != act_dtype) return "act_dtype";
    if (a.target != target) return "target";
    if (a.config != config) return "config";
    if (a.kernel_name != kernel_name) return "kernel_name";
    if (a.compiler != compiler) return "compiler";
    return "";
}

static void escaped(std::string& out, const std::string& s) {
    for (char c : s) {
        switch (c) {
        case '\\': out += "\\\\"; break;
        case '\t': out += "\\t"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        default: out += c;
        }
    }
}

std::string canonical_manifest(std::vector<ManifestEntry> entries) {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    std::string out = fmt::format("kiln-prebuilt-manifest\tschema={}\tkey-schema={}\tentries={}\n", k_schema_version,
                                  k_key_schema_version, entries.size());
    for (const auto& e : entries) {
        out += e.key.hex();
        out += fmt::format("\t{}\t{}\t{}\t", static_cast<int>(e.kind), e.sha256, e.size);
        for (const std::string* s : {&e.family, &e.mode}) {
            escaped(out, *s);
            out += '\t';
        }
        out += fmt::format("{}\t{}\t{}\t{}", e.m, e.n, e.k, e.experts);
        for (const std::string* s : {&e.weight_format, &e.act_dtype, &e.target, &e.config, &e.kernel_name, &e.compiler}) {
            out += '\t';
            escaped(out, *s);
        }
        out += '\n';
    }
    return out;
}

void create_manifest_tables(Db& db) {
    db.exec(R"sql(
CREATE TABLE IF NOT EXISTS manifest(
  key           TEXT PRIMARY KEY,
  kind          INTEGER NOT NULL,
  sha256        TEXT NOT NULL,
  size          INTEGER NOT NULL,
  family        TEXT NOT NULL,
  mode          TEXT NOT NULL,
  m             INTEGER NOT NULL,
  n             INTEGER NOT NULL,
  k             INTEGER NOT NULL,
  experts       INTEGER NOT NULL,
  weight_format TEXT NOT NULL,
  act_dtype     TEXT NOT NULL,
  target        TEXT NOT NULL,
  config        TEXT NOT NULL,
  kernel_name   TEXT NOT NULL,
  compiler      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS signature(
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  algorithm  TEXT NOT NULL,
  public_key TEXT NOT NULL,
  signature  TEXT NOT NULL,
  signed_at  INTEGER NOT NULL
);
)sql");
}

void write_manifest(Db& db, const std::vector<ManifestEntry>& entries) {
    db.exec("DELETE FROM manifest");
    Stmt s = db.prepare(
        "INSERT INTO manifest(key, kind, sha256, size, family, mode, m, n, k, experts, weight_format, act_dtype, "
        "target, config, kernel_name, compiler) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16)");
    for (const auto& e : entries) {
        s.bind(1, e.key.hex())
            .bind(2, static_cast<int64_t>(e.kind))
            .bind(3, e.sha256)
            .bind(4, static_cast<int64_t>(e.size))
            .bind(5, e.family)
            .bind(6, e.mode)
            .bind(7, e.m)
            .bind(8, e.n)
            .bind(9, e.k)
            .bind(10, e.experts)
            .bind(11, e.weight_format)
            .bind(12, e.act_dtype)
            .bind(13, e.target)
            .bind(14, e.config)
            .bind(15, e.kernel_name)
            .bind(16, e.compiler);
        s.run();
    }
}

bool has_manifest(const Db& db) {
    return db.scalar_i64("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'manifest'") > 0;
}

std::vector<ManifestEntry> read_manifest(const Db& db) {
    std::vector<ManifestEntry> out;
    if (!has_manifest(db)) return out;
    Stmt s = db.prepare(
        "SELECT key, kind, sha256, size, family, mode, m, n, k, experts, weight_format, act_dtype, target, config, "
        "kernel_name, compiler FROM manifest");
    while (s.step()) {
        ManifestEntry e;
        try {
            e.key = ContentKey::parse(s.text(0));
        } catch (const InvalidArgument&) {
            throw CacheError(fmt::format("{}: malformed key '{}' in the manifest", db.file(), s.text(0)));
        }
        e.kind = kind_from_int(s.i64(1), db.file());
        e.sha256 = s.text(2);
        e.size = static_cast<uint64_t>(s.i64(3));
        e.family = s.text(4);
        e.mode = s.text(5);
        e.m = s.i64(6);
        e.n = s.i64(7);
        e.k = s.i64(8);
        e.experts = s.i64(9);
        e.weight_format = s.text(10);
        e.act_dtype = s.text(11);
        e.target = s.text(12);
        e.config = s.text(13);
        e.kernel_name = s.text(14);
        e.compiler = s.text(15);
        out.push_back(std::move(e));
    }
    return out;
}

void write_signature(Db& db, const SignatureRecord& sig) {
    Stmt s = db.prepare(
        "INSERT OR REPLACE INTO signature(id, algorithm, public_key, signature, signed_at) VALUES(1, ?1, ?2, ?3, ?4)");
    s.bind(1, sig.algorithm).bind(2, sig.key.hex()).bind(3, to_hex(sig.signature)).bind(4, sig.signed_at);
    s.run();
}

std::optional<SignatureRecord> read_signature(const Db& db) {
    if (db.scalar_i64("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'signature'") == 0)
        return std::nullopt;
    Stmt s = db.prepare("SELECT algorithm, public_key, signature, signed_at FROM signature WHERE id = 1");
    if (!s.step()) return std::nullopt;
    SignatureRecord r;
    r.algorithm = s.text(0);
    if (r.algorithm != "ed25519")
        throw CacheError(fmt::format("{}: manifest signed with unsupported algorithm '{}'", db.file(), r.algorithm));
    try {
        r.key = PublicKey::from_hex(s.text(1));
        std::string sig = from_hex(s.text(2));
        if (sig.size() != r.signature.size()) throw InvalidArgument("bad signature length");
        std::copy(sig.begin(), sig.end(), r.signature.begin());
    } catch (const InvalidArgument&) {
        throw CacheError(fmt::format("{}: malformed manifest signature record", db.file()));
    }
    r.signed_at = s.i64(3);
    return r;
}

}  // namespace kiln::cache
