// Kernel families: each turns a KernelDescriptor into the source of one kernel and knows how to launch
// it. Modelled on template JITs: the generated translation unit is tiny (it includes a template from
// templates/ and names one instantiation); the template bytes it includes go into the content key.
//
// A family is one kernel entry point. It provides:
//   config_fields()   the named fields of its config struct (KernelConfig's bytes): name, place, range;
//   canonicalize(d)   fill its default config, zero the fields it does not bake in, reject what it
//                     cannot build (InvalidArgument, naming the field);
//   device_source(d)  the NVRTC translation unit + the name expression of the kernel;
//   host_source(d)    the same kernel for the host target (templates/host/*.hpp, compiled by the
//                     in-process clang); families without one yet report has_host_source() == false;
//   max_dynamic_smem  bytes of dynamic shared memory its kernel needs (the dispatcher opts in at load);
// and, in its own header, one launch for both targets: launch(kernel, stream, params) with the parameter
// struct of templates/common/<family>_params.h.
//
// Registration is explicit: register_builtin_families() (jit/families/builtin.cpp) adds the families shipped
// with kiln to a registry; nothing registers itself from a static initialiser. Every family must have a host
// implementation (kiln runs without a GPU) unless it is a device-only fusion of families that do:
// FamilyRegistry::add refuses a family with neither.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit/descriptor.hpp"

namespace kiln::jit {

struct DeviceSource {
    std::string file_name;  // e.g. "moe_routing_indexed.cu": NVRTC's name for diagnostics
    std::string source;     // the translation unit
    std::string name_expr;  // e.g. "&kiln_dev::moe_routing_indexed<64, 8, 64, 32>"
};

// Host-target source: a C++ translation unit for the in-process clang (templates/host/*.hpp).
// `entry` is the extern "C" kiln_host_entry symbol (runtime/host/kernel_abi.h); `scratch_bytes` is the
// scratch memory a launch must provide (the host analogue of dynamic shared memory).
struct HostSource {
    std::string file_name;
    std::string source;
    std::string entry;
    uint64_t scratch_bytes = 0;
};

// One named field of a family's config struct: `size` bytes (1, 2 or 4, unsigned) at `offset`, accepted
// values [min, max]; with `choices`, value i is spelled choices[i] in text and on the command line.
struct ConfigField {
    std::string_view name;
    uint8_t offset = 0, size = 0;
    int64_t min = 0, max = 0;
    std::span<const std::string_view> choices = {};
    std::string_view help;
    // Set by canonicalize from other fields or the shape, never by a caller (shown, not accepted as a flag).
    bool derived = false;
};

#define KILN_CONFIG_FIELD(Config, member, lo, hi, text) \
    ::kiln::jit::ConfigField{#member, offsetof(Config, member), sizeof(Config::member), lo, hi, {}, text}
#define KILN_CONFIG_DERIVED(Config, member, lo, hi, text) \
    ::kiln::jit::ConfigField{#member, offsetof(Config, member), sizeof(Config::member), lo, hi, {}, text, true}
#define KILN_CONFIG_CHOICE(Config, member, names, text)                                                      \
    ::kiln::jit::ConfigField{#member, offsetof(Config, member), sizeof(Config::member), 0,                   \
                             static_cast<int64_t>(std::size(names)) - 1, names, text}

int64_t config_value(const KernelConfig& c, const ConfigField& f);
void set_config_value(KernelConfig& c, const ConfigField& f, int64_t v);  // throws InvalidArgument out of range
// "value" or the choice's name.
std::string config_value_text(const KernelConfig& c, const ConfigField& f);
// Parses `text` (a number, or a choice name) for field f; throws InvalidArgument naming the field.
int64_t parse_config_value(const ConfigField& f, std::string_view text);

class Family {
public:
    virtual ~Family() = default;

    virtual std::string_view name() const = 0;
    virtual std::string_view summary() const = 0;
    virtual std::vector<std::string> modes() const = 0;
    // Which descriptor fields the family bakes into its kernel, for `kiln jit families`.
    virtual std::string_view dims() const = 0;

    virtual std::span<const ConfigField> config_fields() const = 0;
    // The config as "name=value,..." (every field), and back (missing fields are zero; throws
    // InvalidArgument for an unknown field or a value out of range).
    std::string config_text(const KernelConfig& c) const;
    KernelConfig parse_config(std::string_view text) const;
    const ConfigField* field(std::string_view name) const;

    virtual KernelDescriptor canonicalize(const KernelDescriptor& d) const = 0;
    virtual DeviceSource device_source(const KernelDescriptor& d) const = 0;
    virtual uint32_t max_dynamic_smem(const KernelDescriptor& d) const = 0;

    virtual bool has_host_source() const { return false; }
    // Throws NotFound unless has_host_source().
    virtual HostSource host_source(const KernelDescriptor& d) const;
    // A device-only kernel (a fusion of others that do have host versions): the host target runs those
    // instead, so every op still runs on both targets.
    virtual bool device_only() const { return false; }
    // Percent of the unified L1 / shared memory the kernel prefers as shared memory (0: the driver's choice);
    // the dispatcher sets it at load.
    virtual uint32_t preferred_smem_carveout(const KernelDescriptor&) const { return 0; }
};

class FamilyRegistry {
public:
    // Throws InvalidArgument if a family of that name is already registered, or if the family has no
    // host-target implementation (a host template) and is not device_only().
    void add(std::unique_ptr<Family> f);
    const Family* find(std::string_view name) const;
    // Throws NotFound listing the registered families.
    const Family& get(std::string_view name) const;
    std::vector<const Family*> list() const;  // sorted by name

private:
    std::vector<std::unique_ptr<Family>> families_;
};

// Adds kiln's built-in families (jit/families/) to `r`.
void register_builtin_families(FamilyRegistry& r);

// A process-wide registry holding the built-in families, built on first use.
const FamilyRegistry& builtin_families();

}  // namespace kiln::jit
