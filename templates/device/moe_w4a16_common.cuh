// Shared pieces of the moe_w4a16 kernels (sm_90): PTX wrappers, the fused W4 -> bf16 dequantisers for
// the kernel weight layout, and the GLU activations.
//
// Kernel weight layouts "*_mma16" (written by model/weights/moe_w4a16.cpp, read here). One expert matrix
// [N_pad, K_pad] (N_pad a multiple of the super-block, K_pad % 64 == 0) is a sequence of records,
// super-block major (decode: 128-row super-blocks, prefill: 64-row):
//   for sb in N_pad/R (R output rows = R/16 row-blocks of 16), for q in K_pad/64 (64 inputs):
//     weights: R/16 row-blocks x 32 lanes x 16 bytes   (lane L = 4g + t owns rows g and g+8 of its block)
//     scales:  R/16 row-blocks x 8 g x (INT4: 4 bf16 | MXFP4: 4 e8m0 bytes)
//                 = [row g grp 2q, row g+8 grp 2q, row g grp 2q+1, row g+8 grp 2q+1]
// A lane's 16 bytes are four 32-bit words, one per k16 step s of the record. Word s holds the lane's
// m16n8k16 A fragment {a0, a1, a2, a3} (a0: row g, k 2t,2t+1; a1: row g+8, same k; a2: row g, k 2t+8,
// 2t+9; a3: row g+8, same k; k relative to 64q + 16s) as eight 4-bit codes. The high element of
// each pair sits 16 bits above the low one (mod 32):
//   INT4:  nibble m of each half (bits 4m..4m+3) is a_m's code (q + 8, as in the checkpoint).
//   MXFP4: a_m's E2M1 code (sign s, exponent e1 e0, mantissa m0) of the low element sits at these bits:
//            a0: m0 e0 e1 = bits 6, 7, 8,    s = bit 15   (in place: one lop3)
//            a1: bits 2, 3, 4,               s = bit 11   (one shift left by 4, one lop3)
//            a2: bits 28, 29, 30,            s = bit 5    (one rotation by 10, one lop3)
//            a3: m0 = bit 0, e0 e1 = bits 25, 26, s = bit 1   (shift left by 6, rotation by 14, two lop3)
//          so that the masked bits land on a bf16's sign, exponent bits 0-1 and mantissa bit 6: nine
//          integer operations per word, five of them lop3 (the placement within 16-bit halves needed 11,
//          eight of them on the integer ALU, which bounds the MXFP4 consumers).
// Shifts, rotations and lop3s turn a word into the bf16x2 register of each a_m (INT4: one shift, one lop3).
//
// Dequantisation preserves the unfused rounding order exactly:
//   INT4:  bf16(q + 128) - 136 (exact) then * scale (one bf16 rounding) == bf16((code - 8) * scale)
//   MXFP4: the E2M1 bits placed in a bf16 give e2m1 * 2^-126 exactly; one multiply by 2^(s-1)
//          gives bf16(e2m1 * 2^(s-127)) (one rounding) for scale bytes s <= 128. Larger scales take
//          two exact multiplies (kWideScale).
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"

namespace kiln_dev {
namespace moe {

enum : int { kFormatInt4 = 0, kFormatMxfp4 = 1 };
enum : int { kActSiluGlu = 0, kActSituGlu = 1 };

// A compile-time int handed to a generic lambda (decltype(arg)::value).
template <int N>
struct IntTag {
    static constexpr int value = N;
};

// ---- PTX wrappers ----------------------------------------------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared, L1 bypassed. src_bytes < 16 zero-fills the rest.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
// Streaming variant for weights: evict-first in L2 (each byte is read once per launch).
__device__ __forceinline__ void cp_async16_stream(u32 dst, const void* src, u64 policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "l"(policy)
                 : "memory");
}
__device__ __forceinline__ u64 evict_first_policy() {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- mbarrier + bulk async copies (sm_90) ----
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// Arrive on the mbarrier once this thread's earlier cp.async copies have landed (counts as one of the
// arrivals the barrier was initialised with).
__device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Bulk copy global -> shared completing on an mbarrier (bytes and addresses multiples of 16).
__device__ __forceinline__ void bulk_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void bulk_g2s_hint(u32 dst, const void* src, u32 bytes, u32 bar, u64 policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
}

// Bulk copy shared -> global in this thread's bulk async-group (bytes and addresses multiples of 16); the
// writers of the shared source fence it with fence_proxy_async first.
__device__ __forceinline__ void bulk_s2g(void* dst, u32 src, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most N of this thread's bulk groups still reading their shared source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// At most N of this thread's bulk groups not complete (their writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Programmatic dependent launch (sm_90): wait until the previous kernel in the stream has completed and
// its writes are visible (a no-op when the kernel was not launched as a dependent).
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// Nanoseconds of the device's global timer (measurement traces).
__device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

__device__ __forceinline__ void named_barrier(int id, int nthreads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}
// Arrive at a named barrier without waiting (its other participants wait with named_barrier).
__device__ __forceinline__ void named_barrier_arrive(int id, int nthreads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

// Ring positions of the pipelines: the next slot of n, and (with a phase) the mbarrier parity that
// flips each time the ring wraps.
__device__ __forceinline__ int ring_next(int slot, int n) { return slot + 1 == n ? 0 : slot + 1; }
__device__ __forceinline__ void ring_advance(int& slot, u32& phase, int n) {
    if (++slot == n) {
        slot = 0;
        phase ^= 1u;
    }
}

__device__ __forceinline__ uint4 lds128(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr));
    return v;
}
__device__ __forceinline__ uint2 lds64(u32 addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}
__device__ __forceinline__ u32 lds32(u32 addr) {
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// D = A * B + D, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                               u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (a & b) | c
__device__ __forceinline__ u32 and_or(u32 a, u32 b, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ u32 bf16x2_sub(u32 a, u32 b) {
    u32 d;
    asm("sub.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// a * (the low / high half of s in both halves): the half selection folds into the multiply's operand
// (HMUL2 ... R.H0_H0 / R.H1_H1), so scales need no duplicating instruction.
__device__ __forceinline__ u32 bf16x2_mul_lo(u32 a, u32 s) {
    u32 d;
    asm("{\n.reg .b16 l, h;\n.reg .b32 t;\nmov.b32 {l, h}, %2;\nmov.b32 t, {l, l};\nmul.rn.bf16x2 %0, %1, t;\n}\n"
        : "=r"(d)
        : "r"(a), "r"(s));
    return d;
}
__device__ __forceinline__ u32 bf16x2_mul_hi(u32 a, u32 s) {
    u32 d;
    asm("{\n.reg .b16 l, h;\n.reg .b32 t;\nmov.b32 {l, h}, %2;\nmov.b32 t, {h, h};\nmul.rn.bf16x2 %0, %1, t;\n}\n"
        : "=r"(d)
        : "r"(a), "r"(s));
    return d;
}

__device__ __forceinline__ void red_add_f32(float* p, float v) {
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
}
// Four consecutive fp32 adds in one request (16-byte aligned address; sm_90).
__device__ __forceinline__ void red_add_v4_f32(float* p, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}
__device__ __forceinline__ float4 ldcg_f4(const float* p) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<u32*>(&v);
}

// ---- scales -----------------------------------------------------------------------------------------

// Scale words below follow one contract: the multiplier of row g sits in the LOW half of its word, the
// multiplier of row g + 8 in the HIGH half of its word (the other halves are not read).

// MXFP4: bytes I and I + 1 of w (E8M0 exponents s) as the bf16 multipliers 2^(s-1) in the low and high
// half (s <= 128).
template <int I>
__device__ __forceinline__ u32 e8m0_mult_pair(u32 w) {
    // byte I into byte 0, byte I + 1 into byte 2, zeros elsewhere (selector 4: byte 0 of the zero operand)
    constexpr u32 sel = (u32)I | (4u << 4) | ((u32)(I + 1) << 8) | (4u << 12);
    u32 b = __byte_perm(w, 0, sel);
    return b * 128u + 0x3F003F00u;  // ((s + 126) << 7) in each half
}
// Wide-scale form: 2^(s-127) as bf16x2 (s = 0 is the subnormal 2^-127).
template <int I>
__device__ __forceinline__ u32 e8m0_exact(u32 w) {
    u32 s = (w >> (8 * I)) & 0xFFu;
    u32 h = s ? (s << 7) : 0x0040u;
    return h | (h << 16);
}

// ---- fused dequantisation of one layout word into the four A registers ------------------------------

// INT4. sg / sg8: bf16 scales of rows g (low half) and g+8 (high half).
__device__ __forceinline__ void dequant_int4_word(u32 w, u32 sg, u32 sg8, u32 (&a)[4]) {
    constexpr u32 kMask = 0x000F000Fu, kMagic = 0x43004300u /* 128.0 */, kBias = 0x43084308u /* 136.0 */;
    u32 v0 = and_or(w, kMask, kMagic);
    u32 v1 = and_or(w >> 4, kMask, kMagic);
    u32 v2 = and_or(w >> 8, kMask, kMagic);
    u32 v3 = and_or(w >> 12, kMask, kMagic);
    a[0] = bf16x2_mul_lo(bf16x2_sub(v0, kBias), sg);
    a[1] = bf16x2_mul_hi(bf16x2_sub(v1, kBias), sg8);
    a[2] = bf16x2_mul_lo(bf16x2_sub(v2, kBias), sg);
    a[3] = bf16x2_mul_hi(bf16x2_sub(v3, kBias), sg8);
}

// MXFP4 codes of one word as bf16x2 holding e2m1 * 2^-126 (exact).
__device__ __forceinline__ void mxfp4_bits(u32 w, u32 (&v)[4]) {
    constexpr u32 kField = 0x81C081C0u;  // sign bit 15, bits 6-8 of each half
    v[0] = w & kField;
    v[1] = (w << 4) & kField;
    v[2] = __funnelshift_l(w, w, 10) & kField;
    v[3] = and_or(__funnelshift_l(w, w, 14), 0x81808180u, (w << 6) & 0x00400040u);
}

// MXFP4, scale bytes s <= 128. mg / mg8: 2^(s-1) multipliers of rows g (low half) and g+8 (high half).
__device__ __forceinline__ void dequant_mxfp4_word(u32 w, u32 mg, u32 mg8, u32 (&a)[4]) {
    u32 v[4];
    mxfp4_bits(w, v);
    a[0] = bf16x2_mul_lo(v[0], mg);
    a[1] = bf16x2_mul_hi(v[1], mg8);
    a[2] = bf16x2_mul_lo(v[2], mg);
    a[3] = bf16x2_mul_hi(v[3], mg8);
}

// MXFP4, any scale byte: exact e2m1 first (x 2^126), then x 2^(s-127).
__device__ __forceinline__ void dequant_mxfp4_word_wide(u32 w, u32 xg, u32 xg8, u32 (&a)[4]) {
    constexpr u32 k2p126 = 0x7E807E80u;  // 2^126 in each half
    u32 v[4];
    mxfp4_bits(w, v);
    a[0] = bf16x2_mul_lo(bf16x2_mul(v[0], k2p126), xg);
    a[1] = bf16x2_mul_hi(bf16x2_mul(v[1], k2p126), xg8);
    a[2] = bf16x2_mul_lo(bf16x2_mul(v[2], k2p126), xg);
    a[3] = bf16x2_mul_hi(bf16x2_mul(v[3], k2p126), xg8);
}

// Scales of one lane for one record, as the per-row multipliers for the two k32 halves (contract
// above): m[0] = row g grp 2q, m[1] = row g+8 grp 2q, m[2] = row g grp 2q+1, m[3] = row g+8 grp 2q+1.
template <int kFormat, bool kWideScale>
__device__ __forceinline__ void expand_scales(uint2 raw, u32 (&m)[4]) {
    if constexpr (kFormat == kFormatInt4) {  // the raw words already are [row g | row g+8] per group
        m[0] = m[1] = raw.x;
        m[2] = m[3] = raw.y;
    } else if constexpr (!kWideScale) {
        m[0] = m[1] = e8m0_mult_pair<0>(raw.x);
        m[2] = m[3] = e8m0_mult_pair<2>(raw.x);
    } else {
        m[0] = e8m0_exact<0>(raw.x);
        m[1] = e8m0_exact<1>(raw.x);
        m[2] = e8m0_exact<2>(raw.x);
        m[3] = e8m0_exact<3>(raw.x);
    }
}

// One lane's part of one 16-row block of a record in shared memory: its four weight words (one per
// k16 step) and its scales expanded to multipliers (expand_scales). w_addr / s_addr: the lane's weight
// bytes and scale bytes of the block.
template <int kFormat, bool kWideScale>
__device__ __forceinline__ void load_block(u32 w_addr, u32 s_addr, u32 (&words)[4], u32 (&m)[4]) {
    const uint4 wv = lds128(w_addr);
    words[0] = wv.x;
    words[1] = wv.y;
    words[2] = wv.z;
    words[3] = wv.w;
    uint2 sv;
    if constexpr (kFormat == kFormatInt4) {
        sv = lds64(s_addr);
    } else {
        sv.x = lds32(s_addr);
        sv.y = 0;
    }
    expand_scales<kFormat, kWideScale>(sv, m);
}

template <int kFormat, bool kWideScale>
__device__ __forceinline__ void dequant_word(u32 w, u32 mg, u32 mg8, u32 (&a)[4]) {
    if constexpr (kFormat == kFormatInt4) {
        dequant_int4_word(w, mg, mg8, a);
    } else if constexpr (!kWideScale) {
        dequant_mxfp4_word(w, mg, mg8, a);
    } else {
        dequant_mxfp4_word_wide(w, mg, mg8, a);
    }
}

// Bytes of one record (a super-block of kBlocks row-blocks x 64 inputs): weights, then scales.
template <int kFormat, int kBlocks>
struct LayoutBytes {
    static constexpr int kScaleBytesPerBlock = kFormat == kFormatInt4 ? 64 : 32;
    static constexpr int kWeightBytes = kBlocks * 512;
    static constexpr int kRecordBytes = kBlocks * (512 + kScaleBytesPerBlock);
};

// ---- activations (fp32) -------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float tanh_f(float x) {
    // tanh(x) = 1 - 2 / (exp(2x) + 1); saturates cleanly for large |x|.
    return 1.0f - 2.0f / (__expf(2.0f * x) + 1.0f);
}

template <int kAct>
__device__ __forceinline__ float glu(float gate, float up) {
    if constexpr (kAct == kActSiluGlu) {
        return gate * sigmoid_f(gate) * up;
    } else {
        // SiTU-GLU, beta = 4, beta_lin = 25.
        return (4.0f * tanh_f(gate * 0.25f) * sigmoid_f(gate)) * (25.0f * tanh_f(up * 0.04f));
    }
}

}  // namespace moe
}  // namespace kiln_dev
