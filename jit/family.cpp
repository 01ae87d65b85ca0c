#include "jit/family.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <charconv>
#include <cstring>

#include "runtime/error.hpp"

namespace kiln::jit {

int64_t config_value(const KernelConfig& c, const ConfigField& f) {
    uint32_t v = 0;
    std::memcpy(&v, c.bytes + f.offset, f.size);  // little-endian hosts only (x86-64, AArch64)
    return v;
}

void set_config_value(KernelConfig& c, const ConfigField& f, int64_t v) {
    if (v < f.min || v > f.max)
        throw InvalidArgument(fmt::format("{}={}: expected a value in [{}, {}]", f.name, v, f.min, f.max));
    const uint32_t u = static_cast<uint32_t>(v);
    std::memcpy(c.bytes + f.offset, &u, f.size);
}

std::string config_value_text(const KernelConfig& c, const ConfigField& f) {
    const int64_t v = config_value(c, f);
    if (!f.choices.empty() && v >= 0 && v < static_cast<int64_t>(f.choices.size())) return std::string(f.choices[v]);
    return std::to_string(v);
}

int64_t parse_config_value(const ConfigField& f, std::string_view text) {
    if (!f.choices.empty()) {
        for (size_t i = 0; i < f.choices.size(); ++i)
            if (f.choices[i] == text) return static_cast<int64_t>(i);
        std::string names;
        for (auto n : f.choices) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
        throw InvalidArgument(fmt::format("{}={}: expected one of {}", f.name, text, names));
    }
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size() || v < f.min || v > f.max)
        throw InvalidArgument(fmt::format("{}={}: expected an integer in [{}, {}]", f.name, text, f.min, f.max));
    return v;
}

const ConfigField* Family::field(std::string_view name) const {
    for (const ConfigField& f : config_fields())
        if (f.name == name) return &f;
    return nullptr;
}

std::string Family::config_text(const KernelConfig& c) const {
    std::string out;
    for (const ConfigField& f : config_fields())
        out += fmt::format("{}{}={}", out.empty() ? "" : ",", f.name, config_value_text(c, f));
    return out;
}

KernelConfig Family::parse_config(std::string_view text) const {
    KernelConfig c;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string_view::npos) j = text.size();
        std::string_view kv = text.substr(i, j - i);
        i = j + 1;
        if (kv.empty()) continue;
        const size_t eq = kv.find('=');
        if (eq == std::string_view::npos) throw InvalidArgument(fmt::format("'{}': expected field=value", kv));
        const ConfigField* f = field(kv.substr(0, eq));
        if (f == nullptr) {
            std::string names;
            for (const ConfigField& g : config_fields()) names += fmt::format("{}{}", names.empty() ? "" : ", ", g.name);
            throw InvalidArgument(fmt::format("family {} has no config field '{}' (fields: {})", name(), kv.substr(0, eq),
                                              names.empty() ? "none" : names));
        }
        set_config_value(c, *f, parse_config_value(*f, kv.substr(eq + 1)));
    }
    return c;
}

HostSource Family::host_source(const KernelDescriptor&) const {
    throw NotFound(fmt::format("kernel family '{}' has no host-target implementation", name()));
}

void FamilyRegistry::add(std::unique_ptr<Family> f) {
    if (find(f->name()) != nullptr) throw InvalidArgument(fmt::format("kernel family '{}' registered twice", f->name()));
    if (!f->has_host_source() && !f->device_only())
        throw InvalidArgument(fmt::format("kernel family '{}' has no host template (templates/host/): every family "
                                          "needs a host-target implementation so kiln runs without a GPU",
                                          f->name()));
    families_.push_back(std::move(f));
}

const Family* FamilyRegistry::find(std::string_view name) const {
    for (const auto& f : families_)
        if (f->name() == name) return f.get();
    return nullptr;
}

const Family& FamilyRegistry::get(std::string_view name) const {
    if (const Family* f = find(name)) return *f;
    std::string known;
    for (const Family* f : list()) known += fmt::format("{}{}", known.empty() ? "" : ", ", f->name());
    throw NotFound(fmt::format("unknown kernel family '{}' (registered: {})", name, known.empty() ? "none" : known));
}

std::vector<const Family*> FamilyRegistry::list() const {
    std::vector<const Family*> out;
    for (const auto& f : families_) out.push_back(f.get());
    std::sort(out.begin(), out.end(), [](const Family* a, const Family* b) { return a->name() < b->name(); });
    return out;
}

const FamilyRegistry& builtin_families() {
    static const FamilyRegistry r = [] {
        FamilyRegistry reg;
        register_builtin_families(reg);
        return reg;
    }();
    return r;
}

}  // namespace kiln::jit
