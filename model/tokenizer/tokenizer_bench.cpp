#include "model/tokenizer/tokenizer_bench.hpp"

#include <chrono>
#include <string>

#include "model/tokenizer/training_corpus.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/error.hpp"

namespace kiln::model {

TokenizerBenchResult run_tokenizer_bench(const Tokenizer& tok, size_t bytes) {
    std::string text(embedded_corpus());
    text += generate_corpus(/*seed=*/11, bytes > text.size() ? bytes - text.size() : 0);
    using clock = std::chrono::steady_clock;
    tok.encode("warm up the pattern and the JIT stack", SpecialTokens::text);
    const double c0 = thread_cpu_seconds();
    const auto t0 = clock::now();
    const auto ids = tok.encode(text, SpecialTokens::text);
    const auto t1 = clock::now();
    const double cpu = thread_cpu_seconds() - c0;
    const std::string back = tok.decode_bytes(ids);
    const auto t2 = clock::now();
    if (back != text) throw kiln::Error("bench tokenizer: decode(encode(text)) differs from the text");
    TokenizerBenchResult r;
    r.text_bytes = text.size();
    r.tokens = ids.size();
    r.encode_seconds = std::chrono::duration<double>(t1 - t0).count();
    r.encode_cpu_seconds = cpu;
    r.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
    return r;
}

}  // namespace kiln::model
