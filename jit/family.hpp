// Kernel families: each turns a KernelDescriptor into the source of one kernel and knows how to launch
// it. Modelled on template JITs: the generated translation unit is tiny (it includes a template from
// templates/ and names one instantiation); the template bytes it includes go into the content key.
//
// A family provides:
//   canonicalize(d)   fill its default config, zero the fields it does not bake in, reject what it
//                     cannot build (InvalidArgument, naming the field);
//   device_source(d)  the NVRTC translation unit + the name expression of the kernel;
//   host_source(d)    the same kernel for the host target (templates/host/*.hpp, compiled by the
//                     in-process clang); families without one yet report has_host_source() == false;
//   max_dynamic_smem  bytes of dynamic shared memory its kernel needs (the dispatcher opts in at load);
// and, in its own header, a typed launch helper taking TensorViews.
//
// Registration is explicit: register_builtin_families() adds the families shipped with kiln to a
// registry; nothing registers itself from a static initialiser. Every family must have a host
// implementation (kiln runs without a GPU): FamilyRegistry::add refuses a family whose
// has_host_source() is false.
#pragma once

#include <memory>
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
// `entry` is the extern "C" kiln_host_entry symbol (runtime/host_kernel_abi.h); `scratch_bytes` is the
// scratch memory a launch must provide (the host analogue of dynamic shared memory).
struct HostSource {
    std::string file_name;
    std::string source;
    std::string entry;
    uint64_t scratch_bytes = 0;
};

class Family {
public:
    virtual ~Family() = default;

    virtual std::string_view name() const = 0;
    virtual std::string_view summary() const = 0;
    virtual std::vector<std::string> modes() const = 0;
    // Which descriptor fields the family bakes into its kernel, for `kiln jit families`.
    virtual std::string_view dims() const = 0;

    virtual KernelDescriptor canonicalize(const KernelDescriptor& d) const = 0;
    virtual DeviceSource device_source(const KernelDescriptor& d) const = 0;
    virtual uint32_t max_dynamic_smem(const KernelDescriptor& d) const = 0;

    virtual bool has_host_source() const { return false; }
    // Throws NotFound unless has_host_source().
    virtual HostSource host_source(const KernelDescriptor& d) const;
};

class FamilyRegistry {
public:
    // Throws InvalidArgument if a family of that name is already registered, or if the family has no
    // host-target implementation (a host template).
    void add(std::unique_ptr<Family> f);
    const Family* find(std::string_view name) const;
    // Throws NotFound listing the registered families.
    const Family& get(std::string_view name) const;
    std::vector<const Family*> list() const;  // sorted by name

private:
    std::vector<std::unique_ptr<Family>> families_;
};

// Adds kiln's built-in families (moe_routing, dequant_gemv, moe_w4a16) to `r`.
void register_builtin_families(FamilyRegistry& r);

// A process-wide registry holding the built-in families, built on first use.
const FamilyRegistry& builtin_families();

}  // namespace kiln::jit
