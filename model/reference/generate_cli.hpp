// `kiln generate` and `kiln bench reference`: text generation and speed on the fp32 reference path.
//
//   kiln generate [--model DIR | --preset k3-tiny] [--max-tokens N] [--temperature T] [--top-p P]
//                 [--seed S] [--ids 1,2,3] [--print-ids] [--ignore-eos] "prompt"
//       greedy (T = 0, the default) or sampled decoding; the completion is streamed to stdout as tokens
//       come, a one-line summary (tokens, tokens/s) goes to stderr. Without a model, k3-tiny is built in
//       memory (random weights from the fixed make-model seed). The prompt is tokenized as plain text.
//   kiln bench reference [--model DIR | --preset k3-tiny] [--prompt-tokens N] [--decode-tokens N] [--json]
//       prefill tokens/s (one call: chunked KDA, plain MLA) and decode tokens/s (one token per call:
//       recurrent KDA, absorbed MLA).
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::model::reference {

void add_reference_commands(CLI::App& app, CLI::App& bench);

}  // namespace kiln::model::reference
