// Launch helpers for host-target kernels: the same argument views as the device launch helpers
// (family_*.hpp), checked the same way but for host tensors, and enqueued on a HostStream in stream
// order. Serving code calls launch_<family>(kernel, args, stream) with a CUstream or a HostStream.
#pragma once

#include <cstdint>

#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "jit/family_moe_w4a16.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/host_executor.hpp"

namespace kiln::jit {

// The argument blocks the host templates read (templates/host/*.hpp declare the same layouts).
struct MoeRoutingHostArgs {
    const int32_t* topk_ids;
    int32_t* sorted_ids;
    int32_t* block_expert;
    int32_t* tokens_per_expert;
    int32_t* total_padded;
    int32_t num_tokens;
    int32_t sorted_capacity;
    int32_t max_blocks;
    int32_t reserved;
};
static_assert(sizeof(MoeRoutingHostArgs) == 56);

struct DequantGemvHostArgs {
    const uint16_t* x;
    const uint32_t* weight_packed;
    const uint16_t* weight_scale;
    uint16_t* y;
    int32_t m;
    int32_t reserved;
};
static_assert(sizeof(DequantGemvHostArgs) == 40);

// Throw InvalidArgument for a kernel that is not a loaded host kernel of that family or for views
// that do not fit it; nothing is enqueued then.
void launch_moe_routing(const LoadedKernel& k, const MoeRoutingArgs& a, runtime::HostStream& stream);
void launch_dequant_gemv(const LoadedKernel& k, const DequantGemvArgs& a, runtime::HostStream& stream);

// moe_w4a16 on the host target: the device parameter blocks with host addresses in the CUdeviceptr
// fields (the host templates read the same layouts as pointers). Same checks as the device launches.
void launch_moe_w4a16_gemm(const LoadedKernel& k, const MoeW4A16DecodeParams& p, runtime::HostStream& stream);
void launch_moe_w4a16_routing(const LoadedKernel& k, const MoeW4A16RoutingParams& p, runtime::HostStream& stream);
void launch_moe_w4a16_dequant(const LoadedKernel& k, const MoeW4A16DequantParams& p, runtime::HostStream& stream);
void launch_moe_w4a16_combine(const LoadedKernel& k, const MoeW4A16CombineParams& p, runtime::HostStream& stream);

// The checks and argument blocks of the launches above, for running a kernel without a stream
// (benchmarks).
MoeRoutingHostArgs pack_moe_routing(const LoadedKernel& k, const MoeRoutingArgs& a);
DequantGemvHostArgs pack_dequant_gemv(const LoadedKernel& k, const DequantGemvArgs& a);

}  // namespace kiln::jit
