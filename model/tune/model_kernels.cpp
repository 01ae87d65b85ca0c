#include "model/tune/model_kernels.hpp"

#include <unordered_set>

#include "model/layers/moe_w4a16.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/error.hpp"

namespace kiln::model::tune {

ModelKernels model_kernels(const ModelConfig& config, const autotune::TunedTables& tables, jit::Target target,
                           int max_tokens, int ep_size) {
    namespace w = kiln::model::weights;
    ModelKernels out;
    std::unordered_set<jit::KernelDescriptor, jit::DescriptorHash> seen;
    const std::vector<MoeLayerShape> shapes = moe_layer_shapes(config, ep_size);
    if (shapes.empty())
        throw InvalidArgument("the model has no layer whose kernels kiln plans (moe_w4a16 needs INT4 or MXFP4 experts)");
    for (const MoeLayerShape& s : shapes) {
        const auto windows = autotune::moe_w4a16_windows(tables, s.key(), s.format, max_tokens);
        for (const autotune::MoeW4A16Window& win : windows) {
            ++out.windows;
            out.tuned_windows += win.tuned;
            layers::MoeW4A16Shape ls;
            ls.act = s.act;
            ls.topk = s.topk;
            ls.max_tokens = win.max_tokens;
            ls.ep_size = s.ep_size;
            for (bool wide : {false, true}) {
                if (wide && s.format != jit::WeightFormat::mxfp4_g32_e8m0) continue;
                const auto gu = w::moe_weights_layout(s.format, w::W4Layout::decode_mma16, true, s.experts,
                                                      s.intermediate, s.hidden, wide);
                const auto dn = w::moe_weights_layout(s.format, w::W4Layout::decode_mma16, false, s.experts, s.hidden,
                                                      s.intermediate, wide);
                for (const jit::KernelDescriptor& d : layers::moe_w4a16_kernel_set(gu, dn, ls, win.tuning, target).all())
                    if (seen.insert(d).second) out.kernels.push_back(d);
            }
        }
    }
    return out;
}

}  // namespace kiln::model::tune
