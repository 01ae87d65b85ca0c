#include "jit/template_store.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace fs = std::filesystem;

const TemplateStore& TemplateStore::instance() {
    static const TemplateStore store(env::get("KILN_TEMPLATE_DIR").value_or(""));
    return store;
}

TemplateStore::TemplateStore(std::string override_dir) : dir_(std::move(override_dir)) {}

static const EmbeddedTemplate* find_embedded(std::string_view name) {
    for (const EmbeddedTemplate* t = detail::k_embedded_templates; t->name != nullptr; ++t)
        if (name == t->name) return t;
    return nullptr;
}

bool TemplateStore::contains(std::string_view name) const {
    if (!dir_.empty() && fs::is_regular_file(fs::path(dir_) / name)) return true;
    return find_embedded(name) != nullptr;
}

std::string TemplateStore::read(std::string_view name) const {
    if (!dir_.empty()) {
        fs::path p = fs::path(dir_) / name;
        if (fs::is_regular_file(p)) {
            std::ifstream in(p, std::ios::binary);
            std::ostringstream ss;
            ss << in.rdbuf();
            if (!in.good() && !in.eof()) throw IoError(fmt::format("cannot read template {}", p.string()));
            return ss.str();
        }
    }
    if (const EmbeddedTemplate* t = find_embedded(name)) return std::string(t->data, t->size);
    throw NotFound(fmt::format("kernel template '{}' not found (embedded set{})", name,
                               dir_.empty() ? "" : fmt::format(", KILN_TEMPLATE_DIR={}", dir_)));
}

std::vector<std::string> TemplateStore::names() const {
    std::vector<std::string> out;
    for (const EmbeddedTemplate* t = detail::k_embedded_templates; t->name != nullptr; ++t) out.emplace_back(t->name);
    return out;
}

}  // namespace kiln::jit
