// Family `moe_w4a16_route`: the routing of one moe_w4a16 call (templates/device/moe_w4a16_routing.cuh,
// templates/host/moe_w4a16.hpp, parameters templates/common/moe_w4a16_route_params.h). Top-k ids -> each
// local expert's rows in m-blocks of block_m, the m-block count, each m-block's (expert, first row), the
// token and router weight of every sorted row, and optionally each slot's sorted row. Bakes in block_m and
// (host) the expert count; one CTA of 1024 threads up to 4095 routed slots, then one per 2048 (at most 32).
#pragma once

#include <cstdint>
#include <span>

#include "common/moe_w4a16_route_params.h"
#include "jit/families/moe_w4a16_common.hpp"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MoeW4A16RouteConfig {
    uint16_t block_m = 0;  // rows per m-block: 8, 16, 32, 64; device also 128, 192 (default 8)
};

class MoeW4A16RouteFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16_route";
    using Config = MoeW4A16RouteConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "moe_w4a16 routing: top-k ids -> per-expert m-blocks"; }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "experts"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int experts, int block_m, Target target);
};

// CTAs of the device launch for `slots` routed slots.
int moe_w4a16_route_ctas(int64_t slots);
// Throws InvalidArgument for a kernel of another family or an expert count it was not built for.
void launch_moe_w4a16_route(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::RoutingParams& p);

}  // namespace kiln::jit
