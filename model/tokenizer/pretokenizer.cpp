#include "model/tokenizer/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include <fmt/format.h>

#include "model/tokenizer/tokenizer_error.hpp"
#include "runtime/log.hpp"

namespace kiln::model {

namespace {

// Unicode White_Space: what `\s` matches in the Rust regex engine.
constexpr const char* ws = R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string build_pcre2_pattern() {
    const std::string han = R"(\p{sc:Han})";
    const std::string upper = "(?:(?!" + han + R"()[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]))";
    const std::string lower = "(?:(?!" + han + R"()[\p{Ll}\p{Lm}\p{Lo}\p{M}]))";
    const std::string contractions = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)";
    const std::string s = std::string("[") + ws + "]";
    const std::string not_s = std::string("[^") + ws + "]";
    const std::string alts[] = {
        han + "+",
        R"([^\r\n\p{L}\p{N}]?)" + upper + "*" + lower + "+" + contractions,
        R"([^\r\n\p{L}\p{N}]?)" + upper + "+" + lower + "*" + contractions,
        R"(\p{N}{1,3})",
        std::string(" ?[^") + ws + R"(\p{L}\p{N}]+[\r\n]*)",
        s + R"(*[\r\n]+)",
        s + "+(?!" + not_s + ")",
        s + "+",
    };
    std::string out;
    for (const auto& a : alts) {
        if (!out.empty()) out += '|';
        out += a;
    }
    return out;
}

// One JIT stack per thread, shared by every pattern (a JIT stack is not tied to a pattern).
struct ThreadMatchContext {
    pcre2_match_context* ctx = nullptr;
    pcre2_jit_stack* stack = nullptr;
    ThreadMatchContext() {
        ctx = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
        if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
    }
    ~ThreadMatchContext() {
        if (stack) pcre2_jit_stack_free(stack);
        if (ctx) pcre2_match_context_free(ctx);
    }
};

// Only the overall match is read, so one ovector pair serves every pattern.
struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~MatchData() {
        if (md) pcre2_match_data_free(md);
    }
};

}  // namespace

const std::string& kimi_pattern_original() {
    static const std::string p = std::string(R"([\p{Han}]+)") + "|" +
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)" +
        "|" +
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)" +
        "|" + R"(\p{N}{1,3})" + "|" + R"( ?[^\s\p{L}\p{N}]+[\r\n]*)" + "|" + R"(\s*[\r\n]+)" + "|" +
        R"(\s+(?!\S))" + "|" + R"(\s+)";
    return p;
}

const std::string& kimi_pattern_pcre2() {
    static const std::string p = build_pcre2_pattern();
    return p;
}

PreTokenizer::PreTokenizer(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        throw TokenizerError(fmt::format("pre-tokenizer pattern does not compile at offset {}: {}", off,
                                         reinterpret_cast<const char*>(msg)));
    }
    code_ = code;
    const int jrc = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    jit_ = jrc == 0;
    if (!jit_) log::debug("tokenizer: PCRE2 JIT unavailable ({}), using the interpreter", jrc);
}

PreTokenizer::~PreTokenizer() {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

bool PreTokenizer::next_match(std::string_view text, size_t pos, size_t& begin, size_t& end) const {
    thread_local ThreadMatchContext tctx;
    thread_local MatchData tmd;
    auto* code = static_cast<pcre2_code*>(code_);
    if (!tmd.md || !tctx.ctx) throw std::bad_alloc();
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                               PCRE2_NO_UTF_CHECK, tmd.md, tctx.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw TokenizerError(fmt::format("pre-tokenizer failed at byte {}: {}", pos, reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tmd.md);
    begin = ov[0];
    end = ov[1];
    if (end == begin) {
        // The Kimi pattern never matches empty; guard against custom patterns looping forever.
        throw TokenizerError("pre-tokenizer pattern matched the empty string");
    }
    return true;
}

}  // namespace kiln::model
