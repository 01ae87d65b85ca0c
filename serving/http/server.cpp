// The only translation unit that includes cpp-httplib.
#include "serving/http/server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "kiln_config.h"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/log.hpp"
#include "serving/http/api_error.hpp"
#include "serving/http/api_key.hpp"
#include "serving/http/client_connection.hpp"
#include "serving/http/generation.hpp"
#include "serving/http/generation_request.hpp"
#include "serving/http/metrics.hpp"
#include "serving/http/openai_response.hpp"
#include "serving/http/tokenize_api.hpp"

namespace kiln::serving::http {

using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* json_type = "application/json";

// X-Request-Id when it is short and plain, else a fresh one.
std::string request_id_of(const httplib::Request& req) {
    const std::string h = req.get_header_value("X-Request-Id");
    const bool ok = !h.empty() && h.size() <= 128 && std::all_of(h.begin(), h.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':';
    });
    return ok ? h : random_request_id();
}

ApiError error_for_finish(const GenerationEvent& e) {
    if (*e.finish == FinishReason::abort)
        return ApiError(503, e.error.empty() ? "the request was aborted" : "the request was aborted: " + e.error, {},
                        "request_aborted");
    return ApiError(500, e.error.empty() ? "generation failed" : "generation failed: " + e.error);
}

}  // namespace

struct Server::Impl {
    ServerOptions opt;
    ServedModel model;
    ApiKey key;
    ServingMetrics metrics;
    std::atomic<Engine*> engine{nullptr};
    httplib::Server http;
    int bound_port = -1;

    std::thread listener, monitor;
    int control[2] = {-1, -1};  // request_drain / stop write one byte; the monitor reads it
    std::atomic<bool> draining{false};
    std::atomic<bool> started{false};

    std::mutex mu;
    std::condition_variable cv;
    std::set<std::shared_ptr<GenerationJob>> jobs;
    bool stopped = false;

    Impl(ServerOptions o, ServedModel m)
        : opt(std::move(o)), model(std::move(m)), key(opt.api_key), metrics(model.max_model_len) {
        if (!opt.served_model_names.empty()) model.names = opt.served_model_names;
        if (model.names.empty()) throw InvalidArgument("the served model has no name");
        if (!model.tokenizer) throw InvalidArgument("the served model has no tokenizer");
        if (::pipe2(control, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
        routes();
    }

    ~Impl() {
        ::close(control[0]);
        ::close(control[1]);
    }

    // ---- request plumbing ----

    void send_error(httplib::Response& res, const ApiError& e, const httplib::Request& req) {
        res.status = e.status();
        res.set_content(e.body(), json_type);
        if (e.status() == 429 || e.status() == 503) res.set_header("Retry-After", std::to_string(opt.retry_after_s));
        // Internal failures are errors; refusals (4xx, 503 not ready / draining) are routine.
        if (e.status() >= 500 && e.status() != 503)
            log::error("http: {} {} -> {}: {}", req.method, req.path, e.status(), e.what());
        else
            log::info("http: {} {} -> {}: {}", req.method, req.path, e.status(), e.what());
    }

    // Runs a handler with every exception turned into an OpenAI error.
    template <typename F>
    void guarded(const httplib::Request& req, httplib::Response& res, F&& f) {
        try {
            f();
        } catch (const ApiError& e) {
            send_error(res, e, req);
        } catch (const InvalidRequest& e) {
            send_error(res, ApiError(400, e.what(), e.param()), req);
        } catch (const Overloaded& e) {
            send_error(res, ApiError(429, fmt::format("the server is overloaded: {}", e.what()), {}, "queue_full"),
                       req);
        } catch (const Unavailable& e) {
            send_error(res, ApiError(503, e.what(), {}, "unavailable"), req);
        } catch (const InvalidArgument& e) {
            send_error(res, ApiError(400, e.what()), req);
        } catch (const std::bad_alloc&) {
            send_error(res, ApiError(503, "out of memory while handling the request"), req);
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())), req);
        } catch (...) {
            send_error(res, ApiError(500, "internal error"), req);
        }
    }

    Engine& ready_engine() {
        if (draining) throw ApiError(503, "the server is shutting down", {}, "shutting_down");
        Engine* e = engine.load();
        if (!e || !e->ready()) throw ApiError(503, "the model is not loaded yet", {}, "model_not_ready");
        return *e;
    }

    // Registers a job for draining; refused once draining started.
    void add_job(const std::shared_ptr<GenerationJob>& job) {
        std::lock_guard lock(mu);
        if (draining) throw ApiError(503, "the server is shutting down", {}, "shutting_down");
        jobs.insert(job);
    }

    void remove_job(const std::shared_ptr<GenerationJob>& job) {
        std::lock_guard lock(mu);
        jobs.erase(job);
        cv.notify_all();
    }

    // ---- generation ----

    void generate(Api api, const httplib::Request& req, const std::string& body, httplib::Response& res) {
        const auto arrival = Clock::now();
        const std::string rid = request_id_of(req);
        res.set_header("X-Request-Id", rid);

        PreparedGeneration g = prepare_generation(api, parse_json_object(body), model, opt.limits, rid, arrival);
        const ApiRequest& ar = g.request;
        const ResponseContext& ctx = g.response;

        Engine& engine_ref = ready_engine();
        auto job = std::make_shared<GenerationJob>(engine_ref, metrics, std::move(g.engine_requests));
        add_job(job);
        // Unregisters the job when the response is done with it (also on exceptions).
        auto registration = std::shared_ptr<void>(nullptr, [this, job](void*) { remove_job(job); });
        job->submit();

        const ClientConnection conn =
            ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);

        if (!ar.stream) {
            ResponseAccumulator acc(ctx);
            std::optional<ApiError> failure;
            const auto status = job->pump(conn, [&](uint32_t choice, const GenerationEvent& e) {
                if (e.finish && (*e.finish == FinishReason::abort || *e.finish == FinishReason::error)) {
                    failure = error_for_finish(e);
                    return false;
                }
                acc.event(choice, e);
                return true;
            });
            if (failure) throw *failure;
            if (status == GenerationJob::Status::cancelled)
                throw ApiError(503, "the server is shutting down; the request was cancelled", {}, "shutting_down");
            if (status == GenerationJob::Status::client_gone) {
                log::info("http: {} {}: the client disconnected; request {} cancelled", req.method, req.path, rid);
                return;
            }
            res.set_content(dump_json(acc.build()), json_type);
            return;
        }

        struct Stream {
            std::shared_ptr<GenerationJob> job;
            std::shared_ptr<void> registration;
            StreamEncoder encoder;
            ClientConnection conn;
            std::string path, rid;
        };
        auto st = std::make_shared<Stream>(Stream{job, registration, StreamEncoder(ctx), conn, req.path, rid});
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [st](size_t, httplib::DataSink& sink) {
                auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
                try {
                    if (!write(st->encoder.begin())) {
                        st->job->cancel_engine_requests();
                        return false;
                    }
                    std::optional<ApiError> failure;
                    const auto status = st->job->pump(st->conn, [&](uint32_t choice, const GenerationEvent& e) {
                        if (e.finish && (*e.finish == FinishReason::abort || *e.finish == FinishReason::error)) {
                            failure = error_for_finish(e);
                            return false;
                        }
                        return write(st->encoder.event(choice, e));
                    });
                    if (failure) {
                        log::error("http: POST {}: request {}: {}", st->path, st->rid, failure->what());
                        write(StreamEncoder::error(*failure));
                    } else if (status == GenerationJob::Status::cancelled) {
                        write(StreamEncoder::error(ApiError(
                            503, "the server is shutting down; the request was cancelled", {}, "shutting_down")));
                    } else if (status == GenerationJob::Status::client_gone) {
                        log::info("http: POST {}: the client disconnected; request {} cancelled", st->path, st->rid);
                        return false;
                    } else {
                        write(st->encoder.end());
                    }
                    sink.done();
                    return true;
                } catch (const std::exception& e) {
                    log::error("http: POST {}: request {}: internal error: {}", st->path, st->rid, e.what());
                } catch (...) {
                    log::error("http: POST {}: request {}: internal error", st->path, st->rid);
                }
                st->job->cancel_engine_requests();
                write(StreamEncoder::error(ApiError(500, "internal error")));
                sink.done();
                return true;
            },
            [st](bool) {
                if (!st->job->finished()) st->job->cancel_engine_requests();
            });
    }

    // ---- routes ----

    void routes() {
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            const bool v1 = req.path == "/v1" || req.path.rfind("/v1/", 0) == 0;
            if (!v1 || key.allows(req.get_header_value("Authorization")))
                return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, ApiError(401, "Incorrect API key provided", {}, "invalid_api_key"), req);
            res.set_header("WWW-Authenticate", "Bearer");
            res.set_header("Connection", "close");  // the body was not read
            return httplib::Server::HandlerResponse::Handled;
        });
        http.set_error_handler(
            httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
                if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
                std::string msg;
                switch (res.status) {
                    case 404: msg = fmt::format("Invalid URL ({} {})", req.method, req.path); break;
                    case 413: msg = fmt::format("the request body is larger than {} bytes", opt.max_body_bytes); break;
                    case 414: msg = "the request URI is too long"; break;
                    case 400: msg = "malformed HTTP request"; break;
                    default: msg = fmt::format("HTTP error {}", res.status); break;
                }
                res.set_content(ApiError(res.status, msg).body(), json_type);
                return httplib::Server::HandlerResponse::Handled;
            }));
        // One access line per answered request (info level: KILN_LOG_LEVEL=info shows them).
        http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
            log::info("http: {}:{} \"{} {}\" {}", req.remote_addr, req.remote_port, req.method, req.path, res.status);
        });
        http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
                if (ep) std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = fmt::format("internal error: {}", e.what());
            } catch (...) {
            }
            send_error(res, ApiError(500, what), req);
        });

        post("/v1/chat/completions", [this](const httplib::Request& req, const std::string& body,
                                            httplib::Response& res) { generate(Api::chat, req, body, res); });
        post("/v1/completions", [this](const httplib::Request& req, const std::string& body, httplib::Response& res) {
            generate(Api::completions, req, body, res);
        });
        http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(req, res, [&] {
                res.set_content(dump_json(models_json(model.names, model.root, model.created, model.max_model_len)),
                                json_type);
            });
        });
        http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(req, res, [&] {
                const std::string id = req.matches[1];
                model.check_requested(id);
                Json card = models_json({id}, model.root, model.created, model.max_model_len)["data"][0];
                res.set_content(dump_json(card), json_type);
            });
        });
        http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(req, res, [&] {
                ready_engine();
                res.status = 200;
            });
        });
        http.Get("/version", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(req, res, [&] { res.set_content(dump_json(Json{{"version", KILN_VERSION}}), json_type); });
        });
        http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(req, res, [&] {
                Engine* e = engine.load();
                const EngineStats stats = e ? e->stats() : EngineStats{};
                res.set_content(metrics.render(model.name(), stats), "text/plain; version=0.0.4; charset=utf-8");
            });
        });
        post("/tokenize", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
            res.set_content(dump_json(tokenize(model, parse_json_object(body))), json_type);
        });
        post("/detokenize", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
            res.set_content(dump_json(detokenize(model, parse_json_object(body))), json_type);
        });
    }

    // A POST route whose body is read here, within max_body_bytes: cpp-httplib 0.11 checks a
    // Content-Length against its limit but reads chunked bodies without one.
    template <typename F>
    void post(const char* pattern, F handler) {
        http.Post(pattern, [this, handler](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& reader) {
            std::string body;
            bool too_big = false;
            if (req.has_header("Content-Length")) {
                const std::string cl = req.get_header_value("Content-Length");
                too_big = std::strtoull(cl.c_str(), nullptr, 10) > opt.max_body_bytes;
            }
            const bool complete = !too_big && reader([&](const char* data, size_t n) {
                if (body.size() + n > opt.max_body_bytes) {
                    too_big = true;
                    return false;
                }
                body.append(data, n);
                return true;
            });
            if (too_big || !complete) {
                res.set_header("Connection", "close");  // the rest of the body is not read
                send_error(
                    res,
                    too_big ? ApiError(413, fmt::format("the request body is larger than {} bytes", opt.max_body_bytes))
                            : ApiError(400, "the request body could not be read"),
                    req);
                return;
            }
            guarded(req, res, [&] { handler(req, body, res); });
        });
    }

    // ---- lifecycle ----

    void monitor_loop() {
        char c = 0;
        for (;;) {
            const ssize_t r = ::read(control[0], &c, 1);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || c == 'q') return;
            if (c == 'd') {
                draining = true;
                std::unique_lock lock(mu);
                log::warn("http: draining {} in-flight request(s) (up to {} s)", jobs.size(), opt.shutdown_timeout_s);
                const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                         std::chrono::duration<double>(opt.shutdown_timeout_s));
                cv.wait_until(lock, deadline, [&] { return jobs.empty(); });
            }
            // 'd' past its deadline, or 's': cancel what is left, give the handlers a moment to answer.
            draining = true;
            std::unique_lock lock(mu);
            if (!jobs.empty()) log::warn("http: cancelling {} request(s)", jobs.size());
            for (const auto& j : jobs) j->cancel();
            cv.wait_for(lock, std::chrono::seconds(5), [&] { return jobs.empty(); });
            lock.unlock();
            http.stop();
            return;
        }
    }

    void signal_control(char c) {
        // write(2) is async-signal-safe; a full pipe means a request is already pending.
        [[maybe_unused]] ssize_t w = ::write(control[1], &c, 1);
    }
};

Server::Server(ServerOptions options, ServedModel model)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(model))) {}

Server::~Server() {
    if (impl_->started) {
        stop();
        wait();
    }
}

void Server::attach(Engine& engine) { impl_->engine = &engine; }

void Server::start() {
    Impl& s = *impl_;
    if (s.started) throw InvalidArgument("the server is already started");
    // A client that resets its connection must not kill the process with SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    const size_t threads = std::max<size_t>(s.opt.threads, 2);
    s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s.http.set_payload_max_length(s.opt.max_body_bytes);
    s.http.set_keep_alive_max_count(100000);
    s.http.set_tcp_nodelay(true);
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second server bind
    // the same port and silently take half of the connections.
    s.http.set_socket_options([](int sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    s.bound_port = s.opt.port == 0 ? s.http.bind_to_any_port(s.opt.host)
                                   : (s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1);
    if (s.bound_port < 0)
        throw IoError(
            fmt::format("cannot listen on {}:{} (address in use, not permitted, or not an address of "
                        "this machine)",
                        s.opt.host, s.opt.port));
    s.started = true;
    s.listener = std::thread([&s] {
        s.http.listen_after_bind();
        std::lock_guard lock(s.mu);
        s.stopped = true;
        s.cv.notify_all();
    });
    // A stop() that reached cpp-httplib before the listener entered its accept loop would be lost, and the
    // loop would then run forever: return only once it runs.
    while (!s.http.is_running()) {
        {
            std::lock_guard lock(s.mu);
            if (s.stopped) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    s.monitor = std::thread([&s] { s.monitor_loop(); });
}

int Server::port() const { return impl_->bound_port; }

std::string Server::url() const {
    const std::string& h = impl_->opt.host;
    const bool v6 = h.find(':') != std::string::npos;
    return fmt::format("http://{}{}{}:{}", v6 ? "[" : "", h, v6 ? "]" : "", impl_->bound_port);
}

void Server::request_drain() {
    impl_->draining.store(true);
    impl_->signal_control('d');
}

bool Server::draining() const { return impl_->draining; }

void Server::stop() {
    impl_->draining.store(true);
    impl_->signal_control('s');
}

void Server::wait() {
    Impl& s = *impl_;
    if (!s.started) return;
    {
        std::unique_lock lock(s.mu);
        s.cv.wait(lock, [&] { return s.stopped; });
    }
    if (s.listener.joinable()) s.listener.join();
    s.signal_control('q');
    if (s.monitor.joinable()) s.monitor.join();
}

size_t Server::in_flight() const {
    std::lock_guard lock(impl_->mu);
    return impl_->jobs.size();
}

namespace {
std::atomic<Server*> running_server{nullptr};
}

void run_server(const ServerOptions& options, Engine& engine) {
    const EngineInfo info = engine.info();
    ServedModel model = make_served_model({info.model_name}, info.model_name, info.max_model_len, engine.tokenizer());
    Server server(options, std::move(model));
    server.attach(engine);
    server.start();
    running_server = &server;
    fmt::print(stderr, "kiln: serving {} at {}{}\n", info.model_name, server.url(),
               options.api_key.empty() ? "" : " (API key required)");
    server.wait();
    running_server = nullptr;
}

void request_drain() {
    if (Server* s = running_server.load()) s->request_drain();
}

}  // namespace kiln::serving::http
