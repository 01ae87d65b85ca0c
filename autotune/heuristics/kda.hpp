// The choices of the KDA layer (model/layers/kda.hpp), as named fields; defaults in docs/perf/kda.md.
//   decode_kernel   single-token sequences go to kda_decode (else kda_chunk runs every sequence)
//   prep_tile       kda_prep's new tokens per warp (device; 0: the family's default)
//   decode_v_split  kda_decode's CTAs per (sequence, head) (device; 0: the family's default)
#pragma once

namespace kiln::autotune {

struct KdaTuning {
    bool decode_kernel = true;
    int prep_tile = 0;
    int decode_v_split = 0;
};

}  // namespace kiln::autotune
