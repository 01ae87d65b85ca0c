#include "jit/descriptor.hpp"

#include <charconv>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include "jit/family.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

ShortName::ShortName(std::string_view s) {
    if (s.empty() || s.size() >= k_capacity)
        throw InvalidArgument(fmt::format("name '{}' must have 1..{} characters", s, k_capacity - 1));
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            throw InvalidArgument(fmt::format("name '{}' may only contain a-z, 0-9 and '_'", s));
    std::memcpy(bytes, s.data(), s.size());
}

const char* to_string(WeightFormat f) {
    switch (f) {
        case WeightFormat::none: return "none";
        case WeightFormat::int4_g32_bf16: return "int4_g32_bf16";
        case WeightFormat::mxfp4_g32_e8m0: return "mxfp4_g32_e8m0";
    }
    return "?";
}

WeightFormat parse_weight_format(std::string_view s) {
    for (WeightFormat f : {WeightFormat::none, WeightFormat::int4_g32_bf16, WeightFormat::mxfp4_g32_e8m0})
        if (s == to_string(f)) return f;
    throw InvalidArgument(fmt::format("unknown weight format '{}' (none, int4_g32_bf16, mxfp4_g32_e8m0)", s));
}

Target Target::sm(int arch, char suffix) {
    if (arch < 50 || arch > 1000) throw InvalidArgument(fmt::format("sm_{}: not a CUDA architecture", arch));
    if (suffix != 0 && suffix != 'a' && suffix != 'f')
        throw InvalidArgument(fmt::format("sm_{}{}: unknown architecture suffix", arch, suffix));
    return Target{device, suffix, static_cast<uint16_t>(arch)};
}

std::string to_string(const Target& t) {
    if (t.is_host()) return "host";
    return t.suffix ? fmt::format("sm_{}{}", t.arch, t.suffix) : fmt::format("sm_{}", t.arch);
}

Target parse_target(std::string_view s) {
    if (s == "host") return Target::host_target();
    auto bad = [&] { return InvalidArgument(fmt::format("'{}' is not a target (examples: sm_90a, sm_89, host)", s)); };
    if (s.substr(0, 3) != "sm_") throw bad();
    std::string_view digits = s.substr(3);
    char suffix = 0;
    if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
        suffix = digits.back();
        digits.remove_suffix(1);
    }
    int arch = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), arch);
    if (ec != std::errc() || p != digits.data() + digits.size() || digits.empty()) throw bad();
    return Target::sm(arch, suffix);
}

size_t DescriptorHash::operator()(const KernelDescriptor& d) const noexcept {
    return static_cast<size_t>(XXH3_64bits(&d, sizeof d));
}

std::string to_string(const KernelDescriptor& d, const FamilyRegistry& families) {
    std::string cfg;
    if (const Family* f = families.find(d.family.view())) {
        cfg = f->config_text(d.config);
    } else {
        cfg = "raw:";
        for (uint8_t b : d.config.bytes) cfg += fmt::format("{:02x}", b);
    }
    return fmt::format("{}/{} m={} n={} k={} e={} topk={} w={} a={} target={} cfg={}", d.family.view(), d.mode.view(),
                       d.m, d.n, d.k, d.experts, d.topk, to_string(d.weight_format), runtime::to_string(d.act_dtype),
                       to_string(d.target), cfg);
}

std::string to_string(const KernelDescriptor& d) { return to_string(d, builtin_families()); }

std::string cache_config_text(const KernelDescriptor& d) {
    const Family* f = builtin_families().find(d.family.view());
    const std::string cfg = f ? f->config_text(d.config) : std::string();
    if (d.topk == 0) return cfg;
    return cfg.empty() ? fmt::format("topk={}", d.topk) : fmt::format("topk={},{}", d.topk, cfg);
}

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(sep, i);
        if (j == std::string_view::npos) j = s.size();
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

template <typename T>
T parse_int(std::string_view text, std::string_view what, int64_t lo, int64_t hi) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size() || v < lo || v > hi)
        throw InvalidArgument(fmt::format("{}={}: expected an integer in [{}, {}]", what, text, lo, hi));
    return static_cast<T>(v);
}

constexpr int64_t k_i32_max = 2147483647;

}  // namespace

KernelDescriptor parse_descriptor(std::string_view text) { return parse_descriptor(text, builtin_families()); }

KernelDescriptor parse_descriptor(std::string_view text, const FamilyRegistry& families) {
    KernelDescriptor d;
    std::string_view cfg;
    std::vector<std::string_view> tokens = split(text, ' ');
    if (tokens.empty()) throw InvalidArgument("empty kernel descriptor");
    size_t slash = tokens[0].find('/');
    if (slash == std::string_view::npos)
        throw InvalidArgument(fmt::format("'{}': a descriptor starts with family/mode", tokens[0]));
    d.family = ShortName(tokens[0].substr(0, slash));
    d.mode = ShortName(tokens[0].substr(slash + 1));
    for (size_t i = 1; i < tokens.size(); ++i) {
        std::string_view t = tokens[i];
        size_t eq = t.find('=');
        if (eq == std::string_view::npos) throw InvalidArgument(fmt::format("'{}': expected key=value", t));
        std::string_view key = t.substr(0, eq), val = t.substr(eq + 1);
        if (key == "m") d.m = parse_int<int32_t>(val, key, 0, k_i32_max);
        else if (key == "n") d.n = parse_int<int32_t>(val, key, 0, k_i32_max);
        else if (key == "k") d.k = parse_int<int32_t>(val, key, 0, k_i32_max);
        else if (key == "e") d.experts = parse_int<int32_t>(val, key, 0, k_i32_max);
        else if (key == "topk") d.topk = parse_int<int32_t>(val, key, 0, k_i32_max);
        else if (key == "w") d.weight_format = parse_weight_format(val);
        else if (key == "a") d.act_dtype = runtime::parse_dtype(val);
        else if (key == "target") d.target = parse_target(val);
        else if (key == "cfg") cfg = val;
        else throw InvalidArgument(fmt::format("unknown descriptor field '{}'", key));
    }
    if (!cfg.empty()) d.config = families.get(d.family.view()).parse_config(cfg);
    return d;
}

}  // namespace kiln::jit
