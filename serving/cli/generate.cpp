// `kiln generate`: text generation on the fp32 reference forward pass.
//
//   kiln generate [--model DIR | --preset k3-tiny] [--max-tokens N] [--temperature T] [--top-p P]
//                 [--seed S] [--ids 1,2,3] [--print-ids] [--ignore-eos] "prompt"
//       greedy (T = 0, the default) or sampled decoding; the completion is streamed to stdout as tokens
//       come, a one-line summary (tokens, tokens/s) goes to stderr. Without a model, k3-tiny is built in
//       memory (random weights from the fixed make-model seed). The prompt is tokenized as plain text.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln_config.h"
#include "model/reference/generate.hpp"
#include "model/reference/loaded_model.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/model_source.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/stream_decoder.hpp"
#endif

namespace kiln::cli {

using namespace kiln::model;
using namespace kiln::model::reference;

namespace {

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

struct GenerateArgs {
    ModelSource source;
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
    LoadedModel m = load_model(a.source, a.ids.empty() || !a.print_ids);
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

#if KILN_HAVE_TOKENIZER
    std::optional<StreamDecoder> decoder;
    if (!a.print_ids && m.tokenizer) decoder.emplace(*m.tokenizer);
    const bool text_out = decoder.has_value();
#else
    const bool text_out = false;
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

}  // namespace

void add_generate_command(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    auto* cmd = app.add_subcommand("generate", "Generate text on the fp32 reference forward pass (k3-tiny by default)");
    add_reference_source_options(*cmd, a->source);
    cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate at most")
        ->envname("KILN_GENERATE_MAX_TOKENS")
        ->capture_default_str()
        ->transform(in_range<size_t>(1, std::numeric_limits<int32_t>::max()));
    cmd->add_option("--temperature", a->temperature, "0 = greedy; > 0 samples")
        ->envname("KILN_GENERATE_TEMPERATURE")
        ->capture_default_str()
        ->transform(in_range(0.0f, 100.0f));
    cmd->add_option("--top-p", a->top_p, "nucleus sampling mass in (0, 1]")
        ->envname("KILN_GENERATE_TOP_P")
        ->capture_default_str()
        ->transform(in_range(0.0f, 1.0f));
    cmd->add_option("--seed", a->seed, "sampling seed")
        ->envname("KILN_GENERATE_SEED")
        ->capture_default_str()
        ->transform(in_range<uint64_t>(0, std::numeric_limits<uint64_t>::max()));
    cmd->add_option("--ids", a->ids, "prompt as token ids (comma or space separated) instead of text")
        ->envname("KILN_GENERATE_IDS");
    cmd->add_flag("--print-ids", a->print_ids, "print generated token ids instead of text")
        ->envname("KILN_GENERATE_PRINT_IDS");
    cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens")
        ->envname("KILN_GENERATE_IGNORE_EOS");
    cmd->add_option("prompt", a->prompt, "prompt text (plain text, no chat template)")->envname("KILN_PROMPT");
    cmd->callback([a] { run_generate(*a); });
}

}  // namespace kiln::cli
