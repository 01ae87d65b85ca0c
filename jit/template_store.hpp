// Kernel templates: embedded into the binary at build time (templates/), or read from
// KILN_TEMPLATE_DIR when set (development: edit a template, re-run, no rebuild).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::jit {

struct EmbeddedTemplate {
    const char* name;  // path relative to templates/, e.g. "device/routing_prep.cuh"
    const char* data;
    size_t size;
};

namespace detail {
extern const EmbeddedTemplate k_embedded_templates[];  // terminated by {nullptr, nullptr, 0}
}

class TemplateStore {
public:
    // Reads KILN_TEMPLATE_DIR once; embedded templates otherwise.
    static const TemplateStore& instance();

    explicit TemplateStore(std::string override_dir);

    // Contents of `name`; throws NotFound naming the template and where it looked.
    std::string read(std::string_view name) const;
    bool contains(std::string_view name) const;
    std::vector<std::string> names() const;
    const std::string& override_dir() const { return dir_; }

private:
    std::string dir_;
};

}  // namespace kiln::jit
