#include "jit/families/dense_common.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit::dense {

int mode_index(std::string_view family, const KernelDescriptor& in, std::span<const std::string_view> modes) {
    if (in.mode.empty()) return 0;
    for (size_t i = 0; i < modes.size(); ++i)
        if (in.mode.view() == modes[i]) return static_cast<int>(i);
    std::string list;
    for (std::string_view m : modes) list += fmt::format("{}{}", list.empty() ? "" : ", ", m);
    throw InvalidArgument(fmt::format("{}: unknown mode '{}' (modes: {})", family, in.mode.view(), list));
}

KernelDescriptor base(std::string_view family, int mode, std::span<const std::string_view> modes, Target target) {
    KernelDescriptor d;
    d.family = ShortName(family);
    d.mode = ShortName(modes[static_cast<size_t>(mode)]);
    d.act_dtype = DType::bf16;
    d.target = target;
    return d;
}

uint16_t threads(std::string_view family, int value, int def, const Target& t, int max) {
    if (t.is_host()) return 0;  // host kernels have no CTA
    const int v = value ? value : def;
    if (v < 32 || v > max || v % 32 != 0)
        throw InvalidArgument(fmt::format("{}: threads={} must be a multiple of 32 in [32, {}]", family, v, max));
    return static_cast<uint16_t>(v);
}

void require_bf16(std::string_view family, const KernelDescriptor& in) {
    if (in.act_dtype != DType::none && in.act_dtype != DType::bf16)
        throw InvalidArgument(fmt::format("{}: activations must be bf16 (got {})", family, runtime::to_string(in.act_dtype)));
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument(fmt::format("{}: takes no quantised weights (weight format must be none)", family));
}

HostSource host_entry(const KernelDescriptor& d, std::string_view header, std::string_view entry,
                      std::string_view params, std::string_view call, uint64_t scratch) {
    HostSource s;
    s.file_name = fmt::format("{}_host.cpp", entry);
    s.entry = std::string(entry);
    s.scratch_bytes = scratch;
    s.source = fmt::format(
        "// {}\n"
        "#include \"{}\"\n"
        "extern \"C\" void {}(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, {});\n"
        "    {}(ctx, *static_cast<const kiln_params::{}*>(args));\n"
        "}}\n",
        to_string(d), header, entry, scratch, call, params);
    return s;
}

DeviceSource device_entry(const KernelDescriptor& d, std::string_view header, std::string name_expr) {
    DeviceSource s;
    s.file_name = fmt::format("{}_{}.cu", d.family.view(), d.mode.view());
    s.name_expr = std::move(name_expr);
    s.source = fmt::format("// {}\n#include \"{}\"\n", to_string(d), header);
    return s;
}

void expect_family(const LoadedKernel& k, std::string_view family) {
    if (k.desc.family.view() != family)
        throw InvalidArgument(fmt::format("launch_{}: kernel is {}", family, k.name));
}

}  // namespace kiln::jit::dense
