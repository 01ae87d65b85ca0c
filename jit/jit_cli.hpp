// `kiln jit ...` (families, compile) and `kiln bench jit`.
//
//   kiln jit families [--json]
//   kiln jit compile --family F [--arch A] [--mode MODE] [--m M --n N --k K --experts E --topk T]
//                    [--block-m BM] [--warps W] [--descriptor TEXT] [store flags] [--json]
//       compiles one descriptor into the user kernel cache (no GPU needed; --arch defaults to the
//       device's target) and prints its content key; when it is already cached, says "cache hit".
//   kiln bench jit [--iters N] [--json]
//       cold NVRTC compile and load per kernel, warm load from the SQLite cache, and the host overhead
//       of a cache-hit dispatch over a bare cuLaunchKernelEx (in a private temporary cache).
// Store flags (--cache-dir, --kernel-cache, --trusted-key, ...) are the ones `kiln cache` takes.
#pragma once

namespace CLI {
class App;
}

namespace kiln::jit {

void add_jit_commands(CLI::App& app);
void add_jit_bench(CLI::App& bench);

}  // namespace kiln::jit
