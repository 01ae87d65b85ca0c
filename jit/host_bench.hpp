// `kiln bench host`: the host target's numbers on this machine.
//   - cold compile per host kernel (clang front end, O3, codegen, object size) into a fresh cache;
//   - warm load of the same kernels from SQLite by a new loader (no clang);
//   - speed of the JIT-compiled, shape-specialised kernels against the families' plain reference
//     implementations and a plain fp32 loop, on 1 thread and on the whole pool.
// Only present when kiln is built with host_jit.
#pragma once

namespace CLI {
class App;
}

namespace kiln::jit {

void add_host_bench(CLI::App& bench);

}  // namespace kiln::jit
