// `kiln info [--json]`: what kiln sees on this machine: version and features, the CUDA driver and
// devices, the chosen compile target, NVRTC and the CUDA headers, the kernel-key compiler identity,
// templates, and the kernel cache locations and sizes. Never fails for a missing GPU or toolkit: it
// reports what is missing.
#pragma once

namespace CLI {
class App;
}

namespace kiln::serving {

void add_info_command(CLI::App& app);

}  // namespace kiln::serving
