// The HTTP server over real sockets (cpp-httplib on loopback), with no engine attached: the side
// endpoints, validation before generation, 503 until a model is ready, auth on /v1 only, body
// limits, raw malformed requests, and shutdown.
#include "tests/serving/http_test_support.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <fmt/format.h>

#include "kiln_config.h"
#include "model/tokenizer/chat_k3.hpp"
#include "serving/http/server.hpp"

using namespace kiln::serving;
using namespace kiln::serving::http;
using namespace kiln::serving::http::test;

namespace {

ServerOptions options() {
    ServerOptions o;
    o.port = 0;
    o.threads = 8;
    o.shutdown_timeout_s = 5;
    return o;
}

struct Running {
    explicit Running(ServerOptions o = options()) : server(std::move(o), k3_model()) {
        server.start();
        client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
        client->set_read_timeout(10, 0);
    }
    Server server;
    std::unique_ptr<httplib::Client> client;
};

Json body_of(const httplib::Result& r) {
    REQUIRE(r);
    return Json::parse(r->body);
}

void check_error(const httplib::Result& r, int status, const std::string& param, const std::string& code = {}) {
    REQUIRE(r);
    CAPTURE(r->body);
    CHECK(r->status == status);
    CHECK(r->get_header_value("Content-Type") == "application/json");
    const Json j = Json::parse(r->body);
    REQUIRE(j.contains("error"));
    const Json& e = j["error"];
    CHECK(e["message"].is_string());
    CHECK(e["type"] == (status == 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error"));
    CHECK(e["param"] == (param.empty() ? Json() : Json(param)));
    CHECK(e["code"] == (code.empty() ? Json() : Json(code)));
}

// How raw_exchange reads: one whole response (headers and a Content-Length body), or half-closing at
// once (which the server takes as the client leaving) and reading until it closes.
enum class Read { one_response, half_close };

// Sends raw bytes on a fresh connection and returns what the server answers.
std::string raw_exchange(int port, const std::string& bytes, Read mode = Read::one_response) {
    const bool answer = mode == Read::one_response;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t off = 0;
    while (off < bytes.size()) {
        const ssize_t w = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
        if (w <= 0) break;  // the server may answer and close before reading everything
        off += size_t(w);
    }
    if (mode == Read::half_close) ::shutdown(fd, SHUT_WR);
    std::string out;
    char buf[4096];
    for (ssize_t r; (r = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
        out.append(buf, size_t(r));
        const size_t head = out.find("\r\n\r\n");
        if (!answer || head == std::string::npos) continue;
        size_t length = 0;
        if (const size_t cl = out.find("Content-Length: "); cl != std::string::npos && cl < head)
            length = std::stoul(out.substr(cl + 16));
        if (out.size() >= head + 4 + length) break;
    }
    ::close(fd);
    return out;
}

const char* chat_body = R"({"model": "k3-tiny", "messages": [{"role": "user", "content": "hi"}]})";

}  // namespace

TEST_CASE("side endpoints answer without an engine") {
    Running s;
    httplib::Client& c = *s.client;

    check_error(c.Get("/health"), 503, "", "model_not_ready");
    CHECK(c.Get("/health")->get_header_value("Retry-After") == "1");

    auto v = c.Get("/version");
    REQUIRE(v);
    CHECK(v->status == 200);
    CHECK(body_of(v) == Json{{"version", KILN_VERSION}});

    const Json models = body_of(c.Get("/v1/models"));
    CHECK(models["object"] == "list");
    REQUIRE(models["data"].size() == 1);
    CHECK(models["data"][0]["id"] == "k3-tiny");
    CHECK(models["data"][0]["object"] == "model");
    CHECK(models["data"][0]["owned_by"] == "kiln");
    CHECK(models["data"][0]["max_model_len"] == 4096);
    CHECK(body_of(c.Get("/v1/models/k3-tiny"))["id"] == "k3-tiny");
    check_error(c.Get("/v1/models/gpt-4"), 404, "model", "model_not_found");

    auto m = c.Get("/metrics");
    REQUIRE(m);
    CHECK(m->status == 200);
    CHECK(m->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
    CHECK(m->body.rfind("# HELP kiln:num_requests_running ", 0) == 0);
    CHECK(m->body.find("kiln:num_requests_waiting{model_name=\"k3-tiny\"} 0\n") != std::string::npos);

    check_error(c.Get("/no/such/route"), 404, "");
    CHECK(body_of(c.Get("/no/such/route"))["error"]["message"] == "Invalid URL (GET /no/such/route)");
    check_error(c.Post("/v1/embeddings", "{}", "application/json"), 404, "");
}

TEST_CASE("/tokenize and /detokenize in vLLM's shapes") {
    Running s;
    httplib::Client& c = *s.client;
    CHECK(body_of(c.Post("/tokenize", R"({"prompt": "Hi"})", "application/json")) ==
          Json::parse(R"({"count": 2, "max_model_len": 4096, "tokens": [72, 105], "token_strs": null})"));
    CHECK(body_of(c.Post("/tokenize", R"({"model": "k3-tiny", "prompt": "Hi", "return_token_strs": true,
                                          "add_special_tokens": true})",
                         "application/json"))["token_strs"] == Json::array({"H", "i"}));
    // Special-token strings in a prompt are recognised, as in the generation endpoints.
    CHECK(body_of(c.Post("/tokenize", R"({"prompt": "<|end_of_msg|>"})", "application/json"))["tokens"] ==
          Json::array({3842}));
    const Json chat = body_of(c.Post("/tokenize", R"({"messages": [{"role": "user", "content": "hi"}],
                                                      "chat_template_kwargs": {"thinking": false}})",
                                     "application/json"));
    kiln::model::K3ChatOptions o;
    o.thinking = false;
    const auto want = k3_tokenizer().encode_segments(
        kiln::model::render_k3_chat(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), o));
    CHECK(chat["tokens"].get<std::vector<TokenId>>() == want);
    CHECK(chat["count"] == want.size());

    check_error(c.Post("/tokenize", R"({})", "application/json"), 400, "prompt");
    check_error(c.Post("/tokenize", R"({"prompt": 5})", "application/json"), 400, "prompt");
    check_error(c.Post("/tokenize", R"({"prompt": "a", "messages": []})", "application/json"), 400, "prompt");
    check_error(c.Post("/tokenize", R"({"messages": [{"role": "x"}]})", "application/json"), 400, "messages[0].role");
    check_error(c.Post("/tokenize", R"({"prompt": "a", "model": "other"})", "application/json"), 404, "model",
                "model_not_found");

    CHECK(body_of(c.Post("/detokenize", R"({"tokens": [72, 105]})", "application/json")) == Json{{"prompt", "Hi"}});
    check_error(c.Post("/detokenize", R"({"tokens": [72, 4096]})", "application/json"), 400, "tokens");
    check_error(c.Post("/detokenize", R"({"tokens": [-1]})", "application/json"), 400, "tokens");
    check_error(c.Post("/detokenize", R"({"tokens": "72"})", "application/json"), 400, "tokens");
    check_error(c.Post("/detokenize", R"({})", "application/json"), 400, "tokens");
}

TEST_CASE("generation requests are validated first, then answered 503 until a model is ready") {
    Running s;
    httplib::Client& c = *s.client;
    auto r =
        c.Post("/v1/chat/completions", httplib::Headers{{"X-Request-Id", "abc-123"}}, chat_body, "application/json");
    check_error(r, 503, "", "model_not_ready");
    CHECK(r->get_header_value("X-Request-Id") == "abc-123");
    CHECK(r->get_header_value("Retry-After") == "1");
    // An unusable X-Request-Id is replaced by a fresh one.
    r = c.Post("/v1/completions", httplib::Headers{{"X-Request-Id", "bad id\twith spaces"}},
               R"({"prompt": "hi", "stream": true})", "application/json");
    check_error(r, 503, "", "model_not_ready");
    CHECK(r->get_header_value("X-Request-Id").size() == 32);

    check_error(c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 2})",
                       "application/json"),
                400, "top_p");
    check_error(c.Post("/v1/completions", R"({"prompt": "hi", "logprobs": 50})", "application/json"), 400, "logprobs");
    check_error(c.Post("/v1/completions", R"({"prompt": "hi", "model": "gpt-4"})", "application/json"), 404, "model",
                "model_not_found");
    check_error(c.Post("/v1/completions", R"({"prompt": "hi",)", "application/json"), 400, "");
    check_error(c.Post("/v1/completions", "", "application/json"), 400, "");
    check_error(c.Post("/v1/completions", "[]", "application/json"), 400, "");
    check_error(c.Post("/v1/completions", std::string(5000, '['), "application/json"), 400, "");
    check_error(c.Post("/v1/completions", "{\"prompt\": \"\xff\"}", "application/json"), 400, "");
    CHECK(s.server.in_flight() == 0);
}

TEST_CASE("the API key guards /v1 and nothing else") {
    ServerOptions o = options();
    o.api_key = "sk-kiln-test";
    Running s(o);
    httplib::Client& c = *s.client;
    auto r = c.Get("/v1/models");
    check_error(r, 401, "", "invalid_api_key");
    CHECK(r->get_header_value("WWW-Authenticate") == "Bearer");
    check_error(c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer sk-kiln-wrong"}}), 401, "",
                "invalid_api_key");
    check_error(c.Get("/v1/models", httplib::Headers{{"Authorization", "sk-kiln-test"}}), 401, "", "invalid_api_key");
    check_error(c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer sk-kiln-tes"}}), 401, "",
                "invalid_api_key");
    check_error(c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer sk-kiln-test2"}}), 401, "",
                "invalid_api_key");
    check_error(c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer "}}), 401, "", "invalid_api_key");
    CHECK(c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer sk-kiln-test"}})->status == 200);
    CHECK(c.Get("/v1/models", httplib::Headers{{"Authorization", "bearer sk-kiln-test"}})->status == 200);
    // A refused POST is answered without reading its body; the connection closes and the next one works.
    check_error(c.Post("/v1/chat/completions", chat_body, "application/json"), 401, "", "invalid_api_key");
    check_error(c.Post("/v1/completions", httplib::Headers{{"Authorization", "Bearer nope"}}, std::string(100000, 'x'),
                       "application/json"),
                401, "", "invalid_api_key");
    check_error(c.Post("/v1/chat/completions", httplib::Headers{{"Authorization", "Bearer sk-kiln-test"}}, chat_body,
                       "application/json"),
                503, "", "model_not_ready");
    // Outside /v1 no key is needed (as vLLM).
    check_error(c.Get("/health"), 503, "", "model_not_ready");
    CHECK(c.Get("/version")->status == 200);
    CHECK(c.Get("/metrics")->status == 200);
    CHECK(c.Post("/tokenize", R"({"prompt": "x"})", "application/json")->status == 200);
    CHECK(c.Get("/v1x")->status == 404);  // not a /v1 route
}

TEST_CASE("request bodies over the limit get 413 and the server carries on") {
    ServerOptions o = options();
    o.max_body_bytes = 2048;
    Running s(o);
    httplib::Client& c = *s.client;
    std::string big = R"({"prompt": ")" + std::string(4096, 'a') + R"("})";
    auto r = c.Post("/v1/completions", big, "application/json");
    check_error(r, 413, "");
    CHECK(body_of(r)["error"]["message"] == "the request body is larger than 2048 bytes");
    // Chunked bodies are limited too. The server stops reading at the limit, so its answer may be
    // lost to the reset that closing with unread data causes; it is never a success.
    const std::string chunked =
        raw_exchange(s.server.port(),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     "Content-Type: application/json\r\n\r\n1000\r\n" +
                         std::string(4096, 'a') + "\r\n0\r\n\r\n");
    CAPTURE(chunked);
    CHECK((chunked.empty() || chunked.rfind("HTTP/1.1 413", 0) == 0));
    // Under the limit, chunked bodies are read whole.
    const std::string small = R"({"prompt": "hi"})";
    const std::string ok = raw_exchange(
        s.server.port(), fmt::format("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                     "Content-Type: application/json\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                                     small.size(), small));
    CHECK(ok.rfind("HTTP/1.1 503", 0) == 0);  // valid, and no model is loaded
    check_error(c.Post("/v1/completions", R"({"prompt": "hi"})", "application/json"), 503, "", "model_not_ready");
}

TEST_CASE("malformed HTTP never brings the server down") {
    Running s;
    const int port = s.server.port();
    // One line each, so that the server has read everything when it answers.
    CHECK(raw_exchange(port, "garbage\r\n").rfind("HTTP/1.1 400", 0) == 0);
    CHECK(raw_exchange(port, "GET /health\r\n").rfind("HTTP/1.1 400", 0) == 0);
    raw_exchange(port, "", Read::half_close);
    raw_exchange(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro",
                 Read::half_close);  // body cut short
    raw_exchange(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n", Read::half_close);
    raw_exchange(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                 Read::half_close);
    raw_exchange(port, std::string(100000, 'A'), Read::half_close);
    raw_exchange(port, "GET /" + std::string(20000, 'x') + " HTTP/1.1\r\n\r\n", Read::half_close);
    raw_exchange(port, "GET /health HTTP/1.1\r\n" + std::string(10000, 'h') + ": v\r\n\r\n", Read::half_close);
    std::string binary;
    for (int i = 0; i < 4096; ++i) binary.push_back(char((i * 131 + 7) & 0xff));
    raw_exchange(port, binary, Read::half_close);
    const std::string ok = raw_exchange(port, "GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(ok.find(KILN_VERSION) != std::string::npos);
}

TEST_CASE("drain stops the server; binding a taken port fails cleanly") {
    auto s = std::make_unique<Running>();
    const int port = s->server.port();
    CHECK(port > 0);
    CHECK(s->server.url() == "http://127.0.0.1:" + std::to_string(port));

    ServerOptions taken = options();
    taken.port = port;
    Server second(taken, k3_model());
    CHECK_THROWS_AS(second.start(), kiln::IoError);

    CHECK_FALSE(s->server.draining());
    request_drain();  // no run_server running: nothing happens
    CHECK_FALSE(s->server.draining());
    s->server.request_drain();
    s->server.request_drain();  // idempotent
    CHECK(s->server.draining());
    s->server.wait();
    httplib::Client after("127.0.0.1", port);
    after.set_connection_timeout(2, 0);
    CHECK_FALSE(after.Get("/version"));
    s.reset();  // destroying a stopped server is fine
}
