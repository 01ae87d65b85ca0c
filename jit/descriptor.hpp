// KernelDescriptor: what a kernel is, as a fixed-size POD. It is the dispatcher's in-process map key
// (compared and hashed as raw bytes: every byte is a field or explicit zero padding, never garbage),
// and its fields become the cache's descriptor columns. The content key, not the descriptor, decides
// cache hits (jit/kernel_key.hpp).
//
// M is the M-bucket (from the autotune windows), never a raw batch size. A family canonicalises a
// descriptor: it fills its default config and zeroes the fields it does not bake into the kernel, so
// equal kernels have equal descriptors.
//
// Canonical text (CLI, logs), e.g.
//   moe_routing/indexed m=0 n=0 k=0 e=64 topk=8 w=none a=i32 target=sm_90a cfg=block_m=64,warps=32
// with the config spelled by the family's field table (jit/family.hpp); parse_descriptor(to_string(d)) == d
// for every valid descriptor of a registered family.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "runtime/tensor.hpp"

namespace kiln::jit {

using runtime::DType;

// A short identifier stored inline, zero-padded (family and mode names): [a-z0-9_], 1..23 chars.
struct ShortName {
    static constexpr size_t k_capacity = 24;
    char bytes[k_capacity] = {};

    ShortName() = default;
    // Throws InvalidArgument for an empty, too long or malformed name.
    explicit ShortName(std::string_view s);
    std::string_view view() const { return std::string_view(bytes, ::strnlen(bytes, k_capacity)); }
    bool empty() const { return bytes[0] == 0; }
    friend bool operator==(const ShortName& a, const ShortName& b) { return std::memcmp(a.bytes, b.bytes, k_capacity) == 0; }
};

enum class WeightFormat : uint8_t {
    none = 0,           // no quantised weights
    int4_g32_bf16 = 1,  // compressed-tensors pack-quantized: int32 [N, K/8] LSB-first, code = q + 8; bf16 [N, K/32]
    mxfp4_g32_e8m0 = 2, // compressed-tensors mxfp4-pack-quantized: uint8 [N, K/2]; e8m0 uint8 [N, K/32]
};
const char* to_string(WeightFormat f);
WeightFormat parse_weight_format(std::string_view s);

// Where a kernel runs. Device: "sm_<arch><suffix>" (sm_90a: arch 90, suffix 'a'). Host: the in-process
// LLVM target of this machine (the triple/CPU/features go into the content key, not the descriptor).
struct Target {
    enum Kind : uint8_t { device = 0, host = 1 };
    uint8_t kind = device;
    char suffix = 0;  // 0, 'a' or 'f'
    uint16_t arch = 0;  // 90 for sm_90a; 0 for host

    static Target sm(int arch, char suffix = 0);
    static Target host_target() { return Target{host, 0, 0}; }
    bool is_host() const { return kind == host; }
    friend bool operator==(const Target&, const Target&) = default;
};
std::string to_string(const Target& t);    // "sm_90a" or "host"
Target parse_target(std::string_view s);   // throws InvalidArgument

// A family's configuration: the bytes of its own config struct (jit/families/*.hpp: named fields, at most
// k_capacity bytes, zero-initialised, no padding), zero past its end. The family's field table names
// every field for the descriptor text, `kiln cache ls` and `kiln jit compile` (jit/family.hpp).
struct KernelConfig {
    static constexpr size_t k_capacity = 24;
    uint8_t bytes[k_capacity] = {};

    template <typename C>
    static KernelConfig of(const C& c) {
        static_assert(std::is_trivially_copyable_v<C> && std::has_unique_object_representations_v<C>,
                      "a family config is a padding-free POD");
        static_assert(sizeof(C) <= k_capacity, "a family config fits KernelConfig");
        KernelConfig k;
        std::memcpy(k.bytes, &c, sizeof c);
        return k;
    }
    template <typename C>
    C as() const {
        static_assert(std::is_trivially_copyable_v<C> && sizeof(C) <= k_capacity);
        C c;
        std::memcpy(&c, bytes, sizeof c);
        return c;
    }
    friend bool operator==(const KernelConfig&, const KernelConfig&) = default;
};

struct KernelDescriptor {
    ShortName family;  // "moe_routing"
    ShortName mode;    // "indexed"
    int32_t m = 0;     // M-bucket
    int32_t n = 0;
    int32_t k = 0;
    int32_t experts = 0;
    int32_t topk = 0;
    WeightFormat weight_format = WeightFormat::none;
    DType act_dtype = DType::none;
    uint8_t reserved0[2] = {};
    Target target;
    KernelConfig config;

    friend bool operator==(const KernelDescriptor& a, const KernelDescriptor& b) {
        return std::memcmp(&a, &b, sizeof(KernelDescriptor)) == 0;
    }
};

static_assert(std::is_trivially_copyable_v<KernelDescriptor>);
static_assert(std::has_unique_object_representations_v<KernelDescriptor>, "KernelDescriptor must have no padding");
static_assert(sizeof(KernelDescriptor) == 100);

// Byte hash for unordered_map (XXH3-64 over the whole struct).
struct DescriptorHash {
    size_t operator()(const KernelDescriptor& d) const noexcept;
};

class FamilyRegistry;

// The canonical text; the config as the family's named fields (raw bytes for a family `families` lacks).
std::string to_string(const KernelDescriptor& d);
std::string to_string(const KernelDescriptor& d, const FamilyRegistry& families);
// The kernel cache's config column (ArtifactInfo::config): the named config fields, after "topk=T," when the
// descriptor bakes in a top-k, e.g. "topk=8,block_m=64,warps=32". The same for cubins and host objects, so
// `kiln cache ls` tells such kernels apart.
std::string cache_config_text(const KernelDescriptor& d);
// Throws InvalidArgument naming the offending token (an unknown family, field or value).
KernelDescriptor parse_descriptor(std::string_view text);
KernelDescriptor parse_descriptor(std::string_view text, const FamilyRegistry& families);

}  // namespace kiln::jit
