// Kernel recipes and their content keys.
//
// A recipe is everything that decides a device kernel's bytes and is known without NVRTC or the CUDA
// headers: the generated translation unit, the name expression, every kiln template it includes
// (transitively, by name and bytes), the canonical NVRTC options (include dirs symbolic) and the
// target. The content key is XXH3-128 over the recipe's labelled fields plus the compiler identity.
//
// Compiler identity without touching NVRTC: a cache hit must need neither NVRTC nor the headers, yet
// the NVRTC version is part of the key. compiler_identity() therefore answers, in this order:
//   1. KILN_NVRTC_VERSION (e.g. "13.0"), when set: pins the identity explicitly;
//   2. the version of the NVRTC already loaded in this process (after a compile);
//   3. the CUDA version of the headers kiln was built against (CUDA_VERSION, e.g. 13.0).
// A compile always keys its artifact by the NVRTC that produced it: when that differs from the
// identity used for the lookup, the dispatcher re-keys, re-checks the cache and warns once (set
// KILN_NVRTC_VERSION to avoid loading NVRTC on later runs). The CUDA headers are taken to belong to
// the same toolkit release as NVRTC; a mismatch of major.minor is reported as a warning at compile.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/content_key.hpp"
#include "jit/descriptor.hpp"
#include "jit/family.hpp"
#include "jit/nvrtc.hpp"
#include "jit/template_store.hpp"

namespace kiln::jit {

struct KernelRecipe {
    KernelDescriptor desc;  // canonical
    DeviceSource source;
    std::vector<std::pair<std::string, std::string>> headers;  // kiln templates, sorted by name
    std::vector<std::string> options;                          // canonical_options(desc.target)
};

// Quoted #include "..." lines resolve to kiln templates (recursively); angle includes are toolkit
// headers and are left to NVRTC. Throws NotFound for a missing template.
std::vector<std::pair<std::string, std::string>> collect_template_headers(std::string_view source,
                                                                          const TemplateStore& templates);

// `desc` must already be canonical (Family::canonicalize).
KernelRecipe make_recipe(const Family& family, const KernelDescriptor& desc, const TemplateStore& templates);

cache::ContentKey content_key(const KernelRecipe& r, std::string_view compiler_identity);

// The NVRTC program for a recipe, with the real header directories.
NvrtcProgram nvrtc_program(const KernelRecipe& r, const CudaHeaders& headers);

// "nvrtc-13.0"; see the policy above. Never loads NVRTC or reads CUDA headers.
std::string compiler_identity();
// The identity kiln was built for ("nvrtc-" + CUDA_VERSION of the build's cuda.h).
std::string build_compiler_identity();

}  // namespace kiln::jit
