// The OpenAI-compatible HTTP server (cpp-httplib), serving one model through an Engine.
//
//   POST /v1/chat/completions, /v1/completions   generation; SSE when "stream": true      (API key)
//   GET  /v1/models, /v1/models/{id}             the served model card                  (API key)
//   GET  /health     200 (empty) once the engine is ready; 503 before and while draining
//   GET  /version    {"version": "..."}
//   POST /tokenize, /detokenize                  vLLM's shapes (tokenize_api.hpp)
//   GET  /metrics    Prometheus text (metrics.hpp)
//
// Without an attached engine the server answers everything that needs no generation, validates
// generation requests (400s) and answers valid ones 503 (model_not_ready): `kiln serve` can listen
// while the weights load. Overload is answered, never queued without bound: 429 with Retry-After when
// the engine's queue is full, 503 while not ready or draining; connections beyond `threads` wait in
// the kernel's accept backlog. A client that disconnects cancels its request at once (engine.cancel).
// Every handler catches everything: bad input gets a 4xx in OpenAI's shape and one log line, never a
// crash. Errors the server itself logs go through kiln::log (4xx at info, 5xx at error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"
#include "serving/http/generation_request.hpp"
#include "serving/http/served_model.hpp"

namespace kiln::serving::http {

// Each field is meant to be a `kiln serve` flag with a KILN_* variable (named in brackets).
struct ServerOptions {
    std::string host = "127.0.0.1";         // --host (KILN_HOST): loopback unless told otherwise
    int port = 8000;                        // --port (KILN_PORT); 0: any free port
    std::string api_key;                    // --api-key (KILN_API_KEY); empty: /v1 is open
    std::vector<std::string> served_model_names;  // --served-model-name; empty: the engine's name
    size_t max_body_bytes = 16u << 20;      // --max-request-bytes; larger bodies get 413
    RequestLimits limits;                   // --max-prompt-tokens, --max-logprobs, --max-n, ...
    size_t threads = 512;                   // --http-threads: connections served at once
    double shutdown_timeout_s = 300;        // --shutdown-timeout: drain limit before cancelling
    int retry_after_s = 1;                  // Retry-After on 429 / 503
};

class Server {
public:
    // `model.tokenizer` must outlive the server. Empty served_model_names keep model.names.
    Server(ServerOptions options, ServedModel model);
    ~Server();  // stops (cancelling what is in flight) and joins
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Generation and /health use `engine` from now on; it must outlive the server.
    void attach(Engine& engine);

    // Binds and starts serving on background threads. Throws IoError when the address cannot be bound.
    void start();
    int port() const;         // the bound port (after start)
    std::string url() const;  // http://host:port

    // Stops taking generation requests (503, /health 503), lets in-flight ones finish for up to
    // shutdown_timeout_s, cancels the rest, then closes the listener. Async-signal-safe; idempotent.
    void request_drain();
    bool draining() const;
    // Closes at once: in-flight requests are cancelled (their clients get an error event / 503).
    void stop();
    // Blocks until the server has stopped (after request_drain or stop).
    void wait();

    size_t in_flight() const;  // generation requests being served

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The server `kiln serve` runs: the model card from `engine` (info() and tokenizer()), bound, the URL
// logged, blocking until request_drain() (below) or stop. Throws IoError when it cannot bind.
void run_server(const ServerOptions& options, Engine& engine);

// Drains the server run_server is running (no-op when none). Async-signal-safe: the CLI may call it
// from a SIGTERM / SIGINT handler.
void request_drain();

}  // namespace kiln::serving::http
