// Elementwise gates (contract: templates/common/glu_params.h), fp32 math, grid-stride over rows x cols.
// kMode: 0 silu, 1 situ, 2 sigmoid_gate.
#pragma once

#include "device/dense_common.cuh"
#include "common/glu_params.h"

namespace kiln_dev {

template <int kMode, int kThreads>
__global__ void __launch_bounds__(kThreads) glu(const kiln_params::GluParams p) {
    const i64 total = p.rows * p.cols;
    const float beta = p.beta, lin = p.linear_beta;
    for (i64 i = i64(blockIdx.x) * kThreads + threadIdx.x; i < total; i += i64(gridDim.x) * kThreads) {
        const i64 r = i / p.cols;
        const int c = int(i - r * p.cols);
        const float a = to_f32(p.in[r * p.in_stride + c]);
        float v;
        if (kMode == 2) {
            v = a * sigmoid_f32(to_f32(p.gate[r * p.gate_stride + c]));
        } else {
            const float u = to_f32(p.in[r * p.in_stride + p.cols + c]);
            if (kMode == 0) {
                v = a * sigmoid_f32(a) * u;
            } else {
                const float up = lin > 0.0f ? lin * tanhf(u / lin) : u;
                v = beta * tanhf(a / beta) * sigmoid_f32(a) * up;
            }
        }
        p.out[i] = to_bf16(v);
    }
}

}  // namespace kiln_dev
