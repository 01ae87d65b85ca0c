// `kiln serve`: the OpenAI-compatible HTTP server over the serving engine.
//
//   kiln serve [--model DIR | --preset k3-tiny] [--host H] [--port P] [--api-key K] [engine and limit flags]
//
// Loads the model (k3-tiny when none is given), builds the forward executor, starts the engine and serves
// until SIGTERM or SIGINT, which drain: in-flight requests finish (up to --shutdown-timeout), then it exits.
#include <csignal>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/forward/reference_executor.hpp"
#include "model/reference/loaded_model.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/model_source.hpp"
#include "serving/engine/serving_engine.hpp"
#include "serving/http/server.hpp"

namespace kiln::cli {

namespace {

struct ServeArgs {
    model::reference::ModelSource source;
    std::string forward = "reference";
    serving::EngineOptions engine;
    serving::http::ServerOptions server;
    uint32_t page_size = 16;
    std::string memory;  // --memory: a size; empty: derived
    bool no_prefix_cache = false, no_overlap = false;
};

void on_signal(int) { serving::http::request_drain(); }

void run_serve(ServeArgs& a) {
    if (!a.memory.empty()) a.engine.memory_bytes = parse_size_flag("--memory", a.memory);
    a.engine.enable_prefix_cache = !a.no_prefix_cache;
    a.engine.overlap_schedule = !a.no_overlap;
    a.engine.page_size = a.page_size;

    model::reference::LoadedModel m = model::reference::load_model(a.source, true);
    if (!m.tokenizer) throw InvalidArgument(fmt::format("{}: no tiktoken.model: kiln serve needs the model's tokenizer", m.name));
    model::forward::ReferenceExecutorOptions xo;
    xo.page_size = int32_t(a.page_size);
    xo.max_tokens = int32_t(a.engine.max_batch_tokens);
    xo.max_seqs = int32_t(a.engine.max_running);
    model::forward::ReferenceExecutor executor(*m.model, xo);
    serving::ServingEngine engine(executor, *m.tokenizer, a.engine, m.name);
    fmt::print(stderr, "kiln: {} loaded in {:.2f} s ({} forward, page size {}, {} memory)\n", m.name, m.load_seconds,
               a.forward, a.page_size, a.engine.enable_unified_memory ? "unified" : "split");

    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    serving::http::run_server(a.server, engine);
    engine.drain();
    engine.shutdown();
}

template <typename T>
CLI::Option* number(CLI::App* cmd, const char* flag, T& field, const char* env, const char* help, T lo, T hi) {
    return cmd->add_option(flag, field, help)->envname(env)->capture_default_str()->transform(in_range<T>(lo, hi));
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    auto* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API (k3-tiny by default)");
    add_reference_source_options(*cmd, a->source);
    cmd->add_option("--forward", a->forward, "the forward pass: reference (the fp32 reference model on the host)")
        ->envname("KILN_FORWARD")
        ->capture_default_str()
        ->check(CLI::IsMember({"reference"}));

    // HTTP.
    auto& s = a->server;
    cmd->add_option("--host", s.host, "address to bind (loopback unless told otherwise)")->envname("KILN_HOST")->capture_default_str();
    number(cmd, "--port", s.port, "KILN_PORT", "port to bind (0: any free port)", 0, 65535);
    cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' on every /v1 route")->envname("KILN_API_KEY");
    cmd->add_option("--served-model-name", s.served_model_names, "names clients may ask for (default: the model's)")
        ->envname("KILN_SERVED_MODEL_NAME");
    number<size_t>(cmd, "--max-request-bytes", s.max_body_bytes, "KILN_MAX_REQUEST_BYTES", "largest request body (413 beyond)",
                   1024, size_t(1) << 32);
    number<size_t>(cmd, "--http-threads", s.threads, "KILN_HTTP_THREADS", "connections served at once", 1, 65536);
    number(cmd, "--shutdown-timeout", s.shutdown_timeout_s, "KILN_SHUTDOWN_TIMEOUT",
           "seconds SIGTERM lets in-flight requests finish before cancelling them", 0.0, 86400.0);
    number<uint32_t>(cmd, "--max-n", s.limits.max_n, "KILN_MAX_N", "largest n (sequences per prompt)", 1, 1024);
    number<uint32_t>(cmd, "--max-logprobs", s.limits.max_logprobs, "KILN_MAX_LOGPROBS", "largest logprobs / top_logprobs", 0, 1024);
    number<size_t>(cmd, "--max-prompts", s.limits.max_prompts, "KILN_MAX_PROMPTS", "prompts per /v1/completions request", 1, 65536);
    number<size_t>(cmd, "--max-prompt-tokens", s.limits.max_prompt_tokens, "KILN_MAX_PROMPT_TOKENS",
                   "longest prompt in tokens (0: the context is the limit)", 0, size_t(1) << 31);
    cmd->add_flag("--enable-prompt-tokens-details", s.limits.prompt_tokens_details, "report usage.prompt_tokens_details")
        ->envname("KILN_ENABLE_PROMPT_TOKENS_DETAILS");

    // Engine.
    auto& e = a->engine;
    number<uint32_t>(cmd, "--max-batch-tokens", e.max_batch_tokens, "KILN_MAX_BATCH_TOKENS", "new tokens per step", 1, 1u << 20);
    number<uint32_t>(cmd, "--max-running", e.max_running, "KILN_MAX_RUNNING", "sequences running at once", 1, 1u << 16);
    number<uint32_t>(cmd, "--max-waiting", e.max_waiting, "KILN_MAX_WAITING", "requests queued before 429", 0, 1u << 24);
    number<uint32_t>(cmd, "--prefill-chunk", e.prefill_chunk, "KILN_PREFILL_CHUNK",
                     "prefill tokens per sequence per step (0: the whole budget)", 0, 1u << 20);
    cmd->add_flag("--no-overlap-schedule", a->no_overlap, "plan each step only after the previous one finished")
        ->envname("KILN_NO_OVERLAP_SCHEDULE");
    cmd->add_option("--memory", a->memory, "bytes of state slots and KV pages, e.g. 2G (default: derived from --max-running)")
        ->envname("KILN_MEMORY");
    cmd->add_flag("--enable-unified-memory", e.enable_unified_memory, "state slots and KV pages share one two-ended pool")
        ->envname("KILN_ENABLE_UNIFIED_MEMORY");
    number(cmd, "--state-memory-fraction", e.state_memory_fraction, "KILN_STATE_MEMORY_FRACTION",
           "split pools: the share of --memory given to state slots", 0.01, 0.99);
    number<uint32_t>(cmd, "--page-size", a->page_size, "KILN_PAGE_SIZE", "KV tokens per page", 1, 1024);
    number<uint32_t>(cmd, "--max-model-len", e.max_model_len, "KILN_MAX_MODEL_LEN",
                     "prompt + generated tokens per sequence (0: the model's context)", 0, 1u << 30);
    cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "turn the radix prefix cache off")->envname("KILN_NO_PREFIX_CACHE");
    number<uint32_t>(cmd, "--track-interval", e.track_interval, "KILN_TRACK_INTERVAL",
                     "decode: a KDA checkpoint every this many positions (0: none)", 0, 1u << 20);
    number<uint32_t>(cmd, "--max-checkpoints-per-path", e.max_checkpoints_per_path, "KILN_MAX_CHECKPOINTS_PER_PATH",
                     "KDA checkpoints kept per prefix path (0: no cap)", 0, 1u << 20);
    cmd->callback([a] { run_serve(*a); });
}

}  // namespace kiln::cli
