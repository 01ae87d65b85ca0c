#include "jit/family.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "jit/family_moe_w4a16.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

HostSource Family::host_source(const KernelDescriptor&) const {
    throw NotFound(fmt::format("kernel family '{}' has no host-target implementation", name()));
}

void FamilyRegistry::add(std::unique_ptr<Family> f) {
    if (find(f->name()) != nullptr) throw InvalidArgument(fmt::format("kernel family '{}' registered twice", f->name()));
    if (!f->has_host_source())
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

void register_builtin_families(FamilyRegistry& r) {
    r.add(std::make_unique<MoeRoutingFamily>());
    r.add(std::make_unique<DequantGemvFamily>());
    r.add(std::make_unique<MoeW4A16Family>());
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
