// `kiln cache ...`: inspect and maintain the kernel cache (ls, show, stats, verify, prune, clear, export,
// import, keygen), human tables by default and --json for machines.
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/prebuilt_layer.hpp"
#include "cache/signing.hpp"
#include "cache/store.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/human_format.hpp"
#include "serving/cli/store_flags.hpp"

namespace kiln::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln::cache;

namespace {

struct CliState {
    StoreFlags flags;
    bool json = false;
    std::string key;
    std::string prune_size;
    std::string file;
    std::string sign_key;
    std::string keygen_out;
};

json to_json(const ArtifactInfo& a) {
    return json{{"key", a.key.hex()},
                {"kind", to_string(a.kind)},
                {"family", a.family},
                {"mode", a.mode},
                {"m", a.m},
                {"n", a.n},
                {"k", a.k},
                {"experts", a.experts},
                {"weight_format", a.weight_format},
                {"act_dtype", a.act_dtype},
                {"target", a.target},
                {"config", a.config},
                {"kernel_name", a.kernel_name},
                {"compiler", a.compiler},
                {"bytes", a.bytes},
                {"sha256", a.sha256},
                {"compile_ms", a.compile_ms},
                {"hits", a.hits},
                {"created_at", a.created_at},
                {"last_used", a.last_used},
                {"layer", a.layer}};
}

std::string layer_label(const std::string& layer) {
    return layer == "user" ? layer : fs::path(layer).filename().string();
}

void cmd_ls(CliState& st) {
    Store store(st.flags.options());
    auto items = store.list();
    if (st.json) {
        json out = json::array();
        for (const auto& a : items) out.push_back(to_json(a));
        fmt::print("{}\n", out.dump(2));
        return;
    }
    if (items.empty()) {
        fmt::print("no cached kernels ({})\n", store.user_db_path());
        return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& a : items)
        rows.push_back({a.key.hex().substr(0, 12), a.family, a.mode, fmt::format("{}", a.m), fmt::format("{}", a.n),
                        fmt::format("{}", a.k), fmt::format("{}", a.experts), a.target, to_string(a.kind),
                        human_bytes(a.bytes), fmt::format("{:.1f} ms", a.compile_ms), fmt::format("{}", a.hits),
                        human_time(a.last_used), layer_label(a.layer), a.config.empty() ? "-" : a.config});
    print_table({"KEY", "FAMILY", "MODE", "M", "N", "K", "E", "TARGET", "KIND", "SIZE", "COMPILE", "HITS", "LAST USED",
                 "LAYER", "CONFIG"},
                rows, {false, false, false, true, true, true, true, false, false, true, true, true, false, false, false});
}

void cmd_show(CliState& st) {
    Store store(st.flags.options());
    auto a = store.find(st.key);
    if (!a) throw NotFound(fmt::format("no cached kernel with key '{}'", st.key));
    if (st.json) {
        fmt::print("{}\n", to_json(*a).dump(2));
        return;
    }
    auto row = [](const char* k, const std::string& v) { fmt::print("{:<14} {}\n", k, v.empty() ? "-" : v); };
    row("key", a->key.hex());
    row("kind", to_string(a->kind));
    row("family", a->family);
    row("mode", a->mode);
    row("shape", fmt::format("m={} n={} k={} experts={}", a->m, a->n, a->k, a->experts));
    row("weight_format", a->weight_format);
    row("act_dtype", a->act_dtype);
    row("target", a->target);
    row("config", a->config);
    row("kernel_name", a->kernel_name);
    row("compiler", a->compiler);
    row("size", fmt::format("{} ({} bytes)", human_bytes(a->bytes), a->bytes));
    row("sha256", a->sha256);
    row("compile_time", fmt::format("{:.1f} ms", a->compile_ms));
    row("created", human_time(a->created_at));
    row("last_used", human_time(a->last_used));
    row("hits", fmt::format("{}", a->hits));
    row("layer", a->layer);
}

void cmd_stats(CliState& st) {
    Store store(st.flags.options());
    Store::Stats s = store.stats();
    if (st.json) {
        json layers = json::array();
        for (const auto& l : s.layers)
            layers.push_back({{"name", l.name},
                              {"path", l.path},
                              {"trust", l.trust},
                              {"signer", l.signer},
                              {"entries", l.entries},
                              {"bytes", l.bytes},
                              {"file_bytes", l.file_bytes}});
        json targets = json::object();
        for (const auto& [t, b] : s.by_target) targets[t] = b;
        json out{{"entries", s.entries},
                 {"bytes", s.bytes},
                 {"hits", s.hits},
                 {"by_target", targets},
                 {"layers", layers},
                 {"caching_enabled", s.caching_enabled},
                 {"disabled_reason", s.disabled_reason},
                 {"max_bytes", s.max_bytes}};
        fmt::print("{}\n", out.dump(2));
        return;
    }
    fmt::print("kernels   {} ({}), {} hits\n", s.entries, human_bytes(s.bytes), s.hits);
    fmt::print("cap       {} (user cache, LRU)\n", human_bytes(s.max_bytes));
    fmt::print("caching   {}\n", s.caching_enabled ? "enabled" : "disabled: " + s.disabled_reason);
    if (!s.by_target.empty()) {
        fmt::print("\n");
        std::vector<std::vector<std::string>> rows;
        for (const auto& [t, b] : s.by_target) rows.push_back({t, human_bytes(b)});
        print_table({"TARGET", "SIZE"}, rows, {false, true});
    }
    fmt::print("\n");
    std::vector<std::vector<std::string>> rows;
    for (const auto& l : s.layers)
        rows.push_back({l.name == "user" ? "user" : "prebuilt", l.path,
                        l.signer.empty() ? l.trust : fmt::format("{} ({})", l.trust, l.signer),
                        fmt::format("{}", l.entries), human_bytes(l.bytes), human_bytes(l.file_bytes)});
    print_table({"LAYER", "FILE", "TRUST", "KERNELS", "SIZE", "ON DISK"}, rows,
                {false, false, false, true, true, true});
}

void cmd_verify(CliState& st) {
    Store store(st.flags.options());
    Store::VerifyReport r = store.verify();
    if (st.json) {
        fmt::print("{}\n", json{{"checked", r.checked}, {"problems", r.problems}}.dump(2));
    } else {
        for (const auto& p : r.problems) fmt::print("problem: {}\n", p);
        fmt::print("checked {} artifacts: {}\n", r.checked,
                   r.problems.empty() ? "all ok" : fmt::format("{} problems", r.problems.size()));
    }
    if (!r.problems.empty()) throw CacheError(fmt::format("cache verification found {} problems", r.problems.size()));
}

void cmd_prune(CliState& st) {
    StoreOptions o = st.flags.options();
    const uint64_t given = st.prune_size.empty() ? 0 : parse_size_flag("--max-size", st.prune_size);
    Store store(o);
    uint64_t cap = st.prune_size.empty() ? store.stats().max_bytes : given;
    uint64_t before = store.stats().layers.back().bytes;
    uint64_t freed = store.prune(cap);
    if (st.json) {
        fmt::print("{}\n", json{{"max_bytes", cap}, {"bytes_before", before}, {"freed_bytes", freed}}.dump(2));
        return;
    }
    fmt::print("pruned {} (user cache {} -> {}, cap {})\n", human_bytes(freed), human_bytes(before),
               human_bytes(before - freed), human_bytes(cap));
}

void cmd_clear(CliState& st) {
    Store store(st.flags.options());
    Store::Stats s = store.stats();
    uint64_t entries = s.layers.back().entries, bytes = s.layers.back().bytes;
    store.clear();
    if (st.json) {
        fmt::print("{}\n", json{{"removed_entries", entries}, {"removed_bytes", bytes}, {"db", store.user_db_path()}}.dump(2));
        return;
    }
    fmt::print("removed {} kernels ({}) from {}; prebuilt caches are untouched\n", entries, human_bytes(bytes),
               store.user_db_path());
}

void cmd_export(CliState& st) {
    Store store(st.flags.options());
    store.export_layer(st.file, st.sign_key);
    std::vector<PublicKey> none;
    PrebuiltLayer check(st.file, none);  // re-open what was written: proves it reads back and verifies
    std::string signer = check.signer() ? check.signer()->fingerprint() : "";
    if (st.json) {
        fmt::print("{}\n", json{{"file", st.file},
                                {"entries", check.entries()},
                                {"bytes", check.file_bytes()},
                                {"signed", check.signer().has_value()},
                                {"signer", signer}}
                               .dump(2));
        return;
    }
    fmt::print("wrote {}: {} kernels, {}, {}\n", st.file, check.entries(), human_bytes(check.file_bytes()),
               signer.empty() ? "unsigned" : "signed by " + signer);
}

void cmd_import(CliState& st) {
    Store store(st.flags.options());
    uint64_t n = store.import_layer(st.file);
    if (st.json) {
        fmt::print("{}\n", json{{"file", st.file}, {"imported", n}, {"db", store.user_db_path()}}.dump(2));
        return;
    }
    fmt::print("imported {} kernels from {} into {}\n", n, st.file, store.user_db_path());
}

void cmd_keygen(CliState& st) {
    std::error_code ec;
    if (fs::exists(st.keygen_out, ec))
        throw InvalidArgument(fmt::format("{} exists; refusing to overwrite a key (remove it first)", st.keygen_out));
    SigningKey key = SigningKey::generate();
    key.write_pair(st.keygen_out);
    std::string fp = key.public_key().fingerprint();
    if (st.json) {
        fmt::print("{}\n", json{{"private_key", st.keygen_out}, {"public_key", st.keygen_out + ".pub"}, {"fingerprint", fp}}
                               .dump(2));
        return;
    }
    fmt::print("wrote {} (private, keep it secret) and {}.pub (give it to servers with --trusted-key)\n"
               "fingerprint {}\n",
               st.keygen_out, st.keygen_out, fp);
}

}  // namespace

void add_cache_command(CLI::App& app) {
    auto st = std::make_shared<CliState>();
    CLI::App* cache = app.add_subcommand("cache", "Inspect and maintain the kernel cache");
    cache->require_subcommand(1);
    cache->fallthrough();
    add_store_flags(*cache, st->flags);
    add_json_flag(*cache, st->json, "Machine-readable output");

    auto sub = [&](const char* name, const char* help, void (*fn)(CliState&)) {
        CLI::App* c = cache->add_subcommand(name, help);
        c->fallthrough();
        c->callback([st, fn] { fn(*st); });
        return c;
    };
    sub("ls", "List cached kernels (all layers)", cmd_ls);
    sub("show", "Show one kernel by key or unique key prefix", cmd_show)
        ->add_option("key", st->key, "Content key or a unique prefix of one")
        ->required();
    sub("stats", "Totals per target and per layer", cmd_stats);
    sub("verify", "integrity_check, re-hash every blob, check manifests and signatures", cmd_verify);
    sub("prune", "Evict least recently used kernels until the user cache fits", cmd_prune)
        ->add_option("--max-size", st->prune_size, "Target size, e.g. 2G (default: the cache cap)")
        ->envname("KILN_CACHE_MAX_SIZE");
    sub("clear", "Remove every kernel from the user cache (prebuilt files are untouched)", cmd_clear);
    CLI::App* exp = sub("export", "Write the user cache as a prebuilt cache file with a manifest", cmd_export);
    exp->add_option("file", st->file, "Output file (.kcache)")->required();
    exp->add_option("--sign-key", st->sign_key, "Ed25519 private key (PEM) to sign the manifest with")
        ->envname("KILN_SIGN_KEY");
    sub("import", "Copy the verified kernels of a prebuilt cache file into the user cache", cmd_import)
        ->add_option("file", st->file, "Prebuilt cache file (.kcache)")
        ->required();
    add_cache_build_command(*cache);
    sub("keygen", "Create an Ed25519 signing key pair (KEY.pem and KEY.pem.pub)", cmd_keygen)
        ->add_option("--out", st->keygen_out, "Private key file to write; the public key goes to <out>.pub")
        ->envname("KILN_KEYGEN_OUT")
        ->required();
}

}  // namespace kiln::cli
