#include "jit/kernel_key.hpp"

#include <algorithm>
#include <map>

#include <cuda.h>
#include <fmt/format.h>

#include "jit/nvrtc.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {

// Names included with #include "name" in `text`.
std::vector<std::string> quoted_includes(std::string_view text) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        size_t i = line.find_first_not_of(" \t");
        if (i == std::string_view::npos || line[i] != '#') continue;
        i = line.find_first_not_of(" \t", i + 1);
        if (i == std::string_view::npos || line.substr(i, 7) != "include") continue;
        i = line.find_first_not_of(" \t", i + 7);
        if (i == std::string_view::npos || line[i] != '"') continue;
        size_t end = line.find('"', i + 1);
        if (end == std::string_view::npos) continue;
        out.emplace_back(line.substr(i + 1, end - i - 1));
    }
    return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> collect_template_headers(std::string_view source,
                                                                          const TemplateStore& templates) {
    std::map<std::string, std::string> found;
    std::vector<std::string> todo = quoted_includes(source);
    while (!todo.empty()) {
        std::string name = std::move(todo.back());
        todo.pop_back();
        if (found.count(name)) continue;
        std::string text = templates.read(name);
        for (auto& inc : quoted_includes(text)) todo.push_back(std::move(inc));
        found.emplace(std::move(name), std::move(text));
    }
    return {found.begin(), found.end()};
}

KernelRecipe make_recipe(const Family& family, const KernelDescriptor& desc, const TemplateStore& templates) {
    KernelRecipe r;
    r.desc = desc;
    r.source = family.device_source(desc);
    r.headers = collect_template_headers(r.source.source, templates);
    r.options = canonical_options(desc.target);
    return r;
}

cache::ContentKey content_key(const KernelRecipe& r, std::string_view compiler_identity) {
    cache::KeyBuilder b;
    b.field("artifact", "cubin");
    b.field("family", r.desc.family.view());
    b.field("target", to_string(r.desc.target));
    b.field("compiler", compiler_identity);
    std::string opts;
    for (const auto& o : r.options) opts += o + '\n';
    b.field("options", opts);
    b.field("file", r.source.file_name);
    b.field("name_expr", r.source.name_expr);
    b.field("source", r.source.source);
    b.field("headers", static_cast<int64_t>(r.headers.size()));
    for (const auto& [name, text] : r.headers) {
        b.field("header_name", name);
        b.field("header_bytes", text);
    }
    return b.finish();
}

NvrtcProgram nvrtc_program(const KernelRecipe& r, const CudaHeaders& headers) {
    NvrtcProgram p;
    p.file_name = r.source.file_name;
    p.source = r.source.source;
    p.headers = r.headers;
    p.name_expr = r.source.name_expr;
    p.options = realize(r.options, headers);
    return p;
}

std::string build_compiler_identity() { return fmt::format("nvrtc-{}.{}", CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10); }

std::string compiler_identity() {
    if (auto v = env::get("KILN_NVRTC_VERSION")) {
        int major = 0, minor = 0;
        char extra = 0;
        if (std::sscanf(v->c_str(), "%d.%d%c", &major, &minor, &extra) != 2 || major <= 0 || minor < 0)
            throw InvalidArgument(fmt::format("KILN_NVRTC_VERSION={}: expected MAJOR.MINOR, e.g. 13.0", *v));
        return fmt::format("nvrtc-{}.{}", major, minor);
    }
    if (Nvrtc::is_loaded()) return Nvrtc::instance().identity();
    return build_compiler_identity();
}

}  // namespace kiln::jit
