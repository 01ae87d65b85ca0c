// What `kiln bench tokenizer` measures: encode and decode throughput on the embedded mixed-script
// corpus extended with generated text to the requested size. Decoding must give the text back
// (Error otherwise).
#pragma once

#include <cstddef>

#include "model/tokenizer/tokenizer.hpp"

namespace kiln::model {

struct TokenizerBenchResult {
    size_t text_bytes = 0;
    size_t tokens = 0;
    double encode_seconds = 0, encode_cpu_seconds = 0;  // wall and thread CPU time
    double decode_seconds = 0;
};

TokenizerBenchResult run_tokenizer_bench(const Tokenizer& tok, size_t bytes);

}  // namespace kiln::model
