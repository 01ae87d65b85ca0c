#include "model/reference/generate_cli.hpp"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln_config.h"
#include "model/checkpoint.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "model/reference/forward.hpp"
#include "model/reference/generate.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tiny_vocab.hpp"
#include "model/tokenizer/tokenizer.hpp"
#endif

namespace kiln::model::reference {

namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// CPU time of the calling thread: unlike wall time, not inflated when other processes share the cores.
double thread_cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Source {
    std::string model_dir;
    std::string preset;
};

void add_source_options(CLI::App& cmd, Source& s) {
    cmd.add_option("--model", s.model_dir, "checkpoint directory (config.json + safetensors)")->envname("KILN_MODEL");
    cmd.add_option("--preset", s.preset, "built-in random-weight model instead of a directory (k3-tiny)")
        ->envname("KILN_PRESET");
}

// A temporary directory removed when it goes out of scope.
class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-preset-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw IoError(fmt::format("cannot create a temporary directory under {}", tmpl));
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

struct Loaded {
    std::string name;
    std::unique_ptr<ReferenceModel> model;
#if KILN_HAVE_TOKENIZER
    std::optional<Tokenizer> tokenizer;
#endif
    double load_seconds = 0;
};

// Loads the model, and its tokenizer when `with_tokenizer`.
Loaded load(const Source& s, bool with_tokenizer) {
    if (!s.model_dir.empty() && !s.preset.empty()) throw InvalidArgument("give either --model or --preset, not both");
    Loaded out;
    auto t0 = clock::now();
    if (!s.model_dir.empty()) {
        out.name = s.model_dir;
        ModelFiles files = open_model(s.model_dir);
        out.model = std::make_unique<ReferenceModel>(files.config, files.checkpoint);
#if KILN_HAVE_TOKENIZER
        const bool has_vocab = std::filesystem::exists(std::filesystem::path(s.model_dir) / "tiktoken.model");
        if (with_tokenizer && has_vocab) {
            out.tokenizer = Tokenizer::load(s.model_dir);
        } else if (with_tokenizer && uint32_t(files.config.vocab_size) == tiny_vocab_size) {
            log::info("{}: no tiktoken.model; using the k3-tiny vocabulary", s.model_dir);
            out.tokenizer = make_tiny_tokenizer();
        }
#endif
    } else {
        std::string preset = s.preset.empty() ? "k3-tiny" : s.preset;
        if (preset != "k3-tiny")
            throw InvalidArgument(fmt::format("preset '{}' is too large for the fp32 reference path; use k3-tiny", preset));
        out.name = preset;
        ModelConfig c = preset_config(preset);
        TempDir dir;
        write_model(c, dir.path() / "model");
        Checkpoint ck = Checkpoint::open(dir.path() / "model");
        out.model = std::make_unique<ReferenceModel>(c, ck);
#if KILN_HAVE_TOKENIZER
        if (with_tokenizer) out.tokenizer = make_tiny_tokenizer();
#endif
    }
    out.load_seconds = seconds_since(t0);
    return out;
}

std::vector<uint32_t> parse_ids(const std::string& text, size_t vocab) {
    std::vector<uint32_t> ids;
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        size_t used = 0;
        unsigned long long v = 0;
        try {
            v = std::stoull(cur, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != cur.size() || v >= vocab)
            throw InvalidArgument(fmt::format("--ids: '{}' is not a token id below {}", cur, vocab));
        ids.push_back(uint32_t(v));
        cur.clear();
    };
    for (char ch : text) {
        if (ch == ',' || ch == ' ') flush();
        else cur += ch;
    }
    flush();
    return ids;
}

void write_stdout(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

struct GenerateArgs {
    Source source;
    size_t max_tokens = 32;
    float temperature = 0.0f;
    float top_p = 1.0f;
    uint64_t seed = 0;
    std::string ids;
    bool print_ids = false;
    bool ignore_eos = false;
    std::string prompt;
};

void run_generate(const GenerateArgs& a) {
    SamplingParams sampling{a.temperature, a.top_p, a.seed};
    sampling.validate();
    if (a.ids.empty() && a.prompt.empty()) throw InvalidArgument("give a prompt (or --ids)");
    if (!a.ids.empty() && !a.prompt.empty()) throw InvalidArgument("give either a prompt or --ids, not both");
    Loaded m = load(a.source, a.ids.empty() || !a.print_ids);
    const ModelConfig& c = m.model->config();

    std::vector<uint32_t> prompt;
    if (!a.ids.empty()) {
        prompt = parse_ids(a.ids, m.model->vocab_size());
    } else {
#if KILN_HAVE_TOKENIZER
        if (!m.tokenizer) throw InvalidArgument(fmt::format("{}: no tiktoken.model to encode the prompt; use --ids", m.name));
        prompt = m.tokenizer->encode(a.prompt, SpecialTokens::text);
#else
        throw InvalidArgument("this kiln was built without the tokenizer (PCRE2): use --ids");
#endif
    }
    if (prompt.empty()) throw InvalidArgument("the prompt encodes to no tokens");

    std::vector<uint32_t> stops;
    if (!a.ignore_eos)
        for (int64_t e : c.eos_token_ids)
            if (e >= 0) stops.push_back(uint32_t(e));

    bool text_out = !a.print_ids;
#if KILN_HAVE_TOKENIZER
    std::optional<StreamDecoder> decoder;
    if (text_out && m.tokenizer) decoder.emplace(*m.tokenizer);
    text_out = decoder.has_value();
#else
    text_out = false;
#endif
    bool first = true;
    auto on_token = [&](uint32_t id) {
#if KILN_HAVE_TOKENIZER
        if (text_out) {
            write_stdout(decoder->push(id));
            return;
        }
#endif
        write_stdout(fmt::format("{}{}", first ? "" : " ", id));
        first = false;
    };
    GenerateResult r = generate(*m.model, prompt, a.max_tokens, sampling, stops, on_token);
#if KILN_HAVE_TOKENIZER
    if (text_out) write_stdout(decoder->finish());
#endif
    write_stdout("\n");
    size_t steps = r.ids.empty() ? 0 : r.ids.size() - 1;
    fmt::print(stderr, "[{}] prompt {} tokens, generated {}{}; prefill {:.1f} tok/s, decode {:.1f} tok/s (load {:.2f} s)\n",
               m.name, prompt.size(), r.ids.size(), r.stopped ? " (stop token)" : "",
               double(prompt.size()) / std::max(r.prefill_seconds, 1e-9),
               steps ? double(steps) / std::max(r.decode_seconds, 1e-9) : 0.0, m.load_seconds);
}

struct BenchArgs {
    Source source;
    size_t prompt_tokens = 256;
    size_t decode_tokens = 64;
    bool json = false;
};

void run_bench(const BenchArgs& a) {
    if (a.prompt_tokens == 0) throw InvalidArgument("--prompt-tokens must be positive");
    Loaded m = load(a.source, false);
    const ReferenceModel& model = *m.model;
    // A fixed pseudo-random prompt over the whole vocabulary.
    std::mt19937_64 rng(1234);
    std::vector<uint32_t> prompt(a.prompt_tokens);
    for (auto& id : prompt) id = uint32_t(rng() % model.vocab_size());

    RequestState st = model.new_request();
    auto t0 = clock::now();
    double c0 = thread_cpu_seconds();
    Matrix logits = model.forward(st, prompt);
    double prefill_s = seconds_since(t0), prefill_cpu = thread_cpu_seconds() - c0;

    Sampler greedy(SamplingParams{});
    uint32_t next = greedy.next(logits.row_span(logits.rows - 1));
    auto t1 = clock::now();
    double c1 = thread_cpu_seconds();
    for (size_t i = 0; i < a.decode_tokens; ++i) {
        logits = model.forward(st, std::span<const uint32_t>(&next, 1));
        next = greedy.next(logits.row_span(0));
    }
    double decode_s = seconds_since(t1), decode_cpu = thread_cpu_seconds() - c1;
    auto rate = [](size_t n, double s) { return n ? double(n) / std::max(s, 1e-9) : 0.0; };
    const double prefill_tps = rate(a.prompt_tokens, prefill_s), decode_tps = rate(a.decode_tokens, decode_s);
    const double prefill_cpu_tps = rate(a.prompt_tokens, prefill_cpu), decode_cpu_tps = rate(a.decode_tokens, decode_cpu);

    if (a.json) {
        nlohmann::json j{{"model", m.name},
                         {"load_seconds", m.load_seconds},
                         {"prompt_tokens", a.prompt_tokens},
                         {"prefill_seconds", prefill_s},
                         {"prefill_tokens_per_second", prefill_tps},
                         {"prefill_tokens_per_cpu_second", prefill_cpu_tps},
                         {"decode_tokens", a.decode_tokens},
                         {"decode_seconds", decode_s},
                         {"decode_tokens_per_second", decode_tps},
                         {"decode_tokens_per_cpu_second", decode_cpu_tps},
                         {"state_bytes", st.bytes()}};
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("reference forward (fp32 CPU, single thread) on {}\n", m.name);
    fmt::print("  load + fp32 conversion {:>10.2f} s\n", m.load_seconds);
    fmt::print("  {:<22} {:>10} {:>14}\n", "", "tok/s", "tok/cpu-s");
    fmt::print("  prefill {:>5} tokens  {:>10.1f} {:>14.1f}   one call: chunked KDA, plain MLA\n", a.prompt_tokens,
               prefill_tps, prefill_cpu_tps);
    fmt::print("  decode  {:>5} tokens  {:>10.1f} {:>14.1f}   one token per call: recurrent KDA, absorbed MLA\n",
               a.decode_tokens, decode_tps, decode_cpu_tps);
    fmt::print("  request state          {:>10.1f} KiB at {} tokens\n", double(st.bytes()) / 1024, st.position());
}

}  // namespace

void add_reference_commands(CLI::App& app, CLI::App& bench) {
    {
        auto a = std::make_shared<GenerateArgs>();
        auto* cmd = app.add_subcommand("generate", "Generate text on the fp32 reference forward pass (k3-tiny by default)");
        add_source_options(*cmd, a->source);
        cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate at most")
            ->envname("KILN_GENERATE_MAX_TOKENS")
            ->capture_default_str();
        cmd->add_option("--temperature", a->temperature, "0 = greedy; > 0 samples")
            ->envname("KILN_GENERATE_TEMPERATURE")
            ->capture_default_str();
        cmd->add_option("--top-p", a->top_p, "nucleus sampling mass in (0, 1]")
            ->envname("KILN_GENERATE_TOP_P")
            ->capture_default_str();
        cmd->add_option("--seed", a->seed, "sampling seed")->envname("KILN_GENERATE_SEED")->capture_default_str();
        cmd->add_option("--ids", a->ids, "prompt as token ids (comma or space separated) instead of text")
            ->envname("KILN_GENERATE_IDS");
        cmd->add_flag("--print-ids", a->print_ids, "print generated token ids instead of text")
            ->envname("KILN_GENERATE_PRINT_IDS");
        cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens")
            ->envname("KILN_GENERATE_IGNORE_EOS");
        cmd->add_option("prompt", a->prompt, "prompt text (plain text, no chat template)")->envname("KILN_PROMPT");
        cmd->callback([a] { run_generate(*a); });
    }
    {
        auto a = std::make_shared<BenchArgs>();
        auto* cmd = bench.add_subcommand("reference", "Prefill and decode speed of the fp32 reference forward pass");
        add_source_options(*cmd, a->source);
        cmd->add_option("--prompt-tokens", a->prompt_tokens, "prompt length for the prefill measurement")
            ->envname("KILN_BENCH_PROMPT_TOKENS")
            ->capture_default_str();
        cmd->add_option("--decode-tokens", a->decode_tokens, "tokens decoded one per call")
            ->envname("KILN_BENCH_DECODE_TOKENS")
            ->capture_default_str();
        cmd->add_flag("--json", a->json, "print JSON")->envname("KILN_JSON");
        cmd->callback([a] { run_bench(*a); });
    }
}

}  // namespace kiln::model::reference
