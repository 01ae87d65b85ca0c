#include "model/weights/moe_w4a16.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/bf16.hpp"
#include "runtime/error.hpp"

namespace kiln::model::weights {

namespace {

constexpr int kGroup = 32;

int round_up(int v, int m) { return (v + m - 1) / m * m; }

uint32_t load_u32(const std::byte* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint16_t load_u16(const std::byte* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// Raw 4-bit code of element (row, col) and its raw scale (bf16 bits or e8m0 byte).
unsigned code_at(W4Format f, const CheckpointMatrix& m, int k, int row, int col) {
    if (f == W4Format::int4_g32_bf16) {
        const uint32_t w = load_u32(m.packed.data() + (static_cast<size_t>(row) * (k / 8) + col / 8) * 4);
        return (w >> (4 * (col % 8))) & 0xFu;
    }
    const uint8_t b = static_cast<uint8_t>(m.packed[static_cast<size_t>(row) * (k / 2) + col / 2]);
    return (col & 1) ? (b >> 4) : (b & 0xFu);
}
unsigned scale_at(W4Format f, const CheckpointMatrix& m, int k, int row, int group) {
    if (f == W4Format::int4_g32_bf16)
        return load_u16(m.scale.data() + (static_cast<size_t>(row) * (k / kGroup) + group) * 2);
    return static_cast<uint8_t>(m.scale[static_cast<size_t>(row) * (k / kGroup) + group]);
}

std::string shape_text(int n, int k) { return "[" + std::to_string(n) + ", " + std::to_string(k) + "]"; }

void check_matrix(W4Format f, const CheckpointMatrix& m, int n, int k, int expert, int part) {
    const size_t want_packed = f == W4Format::int4_g32_bf16 ? static_cast<size_t>(n) * (k / 8) * 4
                                                            : static_cast<size_t>(n) * (k / 2);
    const size_t want_scale = static_cast<size_t>(n) * (k / kGroup) * (f == W4Format::int4_g32_bf16 ? 2 : 1);
    if (m.packed.size() != want_packed || m.scale.size() != want_scale) {
        throw InvalidArgument("moe_w4a16: expert " + std::to_string(expert) + " part " + std::to_string(part) +
                              " of shape " + shape_text(n, k) + " in " + std::string(to_string(f)) + " needs " +
                              std::to_string(want_packed) + " packed and " + std::to_string(want_scale) +
                              " scale bytes, got " + std::to_string(m.packed.size()) + " and " +
                              std::to_string(m.scale.size()));
    }
}

// Logical source of layout row r: (part, row) or part = -1 for padding.
struct RowSource {
    int part;
    int row;
};
RowSource row_source(bool gate_up, int n, int r) {
    if (!gate_up) return {r < n ? 0 : -1, r};
    const int block = r / 16, j = r % 16;
    const int i = block * 8 + (j % 8);
    if (i >= n) return {-1, 0};
    return {j / 8, i};
}

}  // namespace

std::string_view to_string(W4Layout l) {
    switch (l) {
        case W4Layout::decode_mma16: return "decode_mma16";
        case W4Layout::prefill_mma16: return "prefill_mma16";
    }
    return "unknown";
}

int layout_superblock_rows(W4Layout l) { return l == W4Layout::decode_mma16 ? 128 : 64; }
int layout_scale_bytes_per_block(W4Format f) { return f == W4Format::int4_g32_bf16 ? 64 : 32; }
int layout_record_bytes(W4Format f, W4Layout l) {
    const int blocks = layout_superblock_rows(l) / 16;
    return blocks * 512 + blocks * layout_scale_bytes_per_block(f);
}

namespace {
// Bits of the word that hold the low element's E2M1 fields m0, e0, e1, sign for element m (the
// placement of templates/device/moe_w4a16_common.cuh); the high element's sit 16 bits higher, mod 32.
constexpr int kMxfp4Bit[4][4] = {{6, 7, 8, 15}, {2, 3, 4, 11}, {28, 29, 30, 5}, {0, 25, 26, 1}};

// MXFP4 code (sign << 3 | e1 e0 m0) of element m, half h (0 low, 1 high) placed in a word, and back.
uint32_t mxfp4_place(unsigned code, int m, int h) {
    uint32_t word = 0;
    for (int f = 0; f < 4; ++f) word |= uint32_t{(code >> f) & 1u} << ((kMxfp4Bit[m][f] + 16 * h) % 32);
    return word;
}
unsigned mxfp4_code(uint32_t word, int m, int h) {
    unsigned code = 0;
    for (int f = 0; f < 4; ++f) code |= ((word >> ((kMxfp4Bit[m][f] + 16 * h) % 32)) & 1u) << f;
    return code;
}
}  // namespace

float e2m1_value(unsigned nibble) {
    static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = kMag[nibble & 7u];
    return (nibble & 8u) ? -v : v;
}

float int4_value(std::span<const std::byte> packed, std::span<const std::byte> scale, int k, int row, int col) {
    const CheckpointMatrix m{packed, scale};
    const int code = static_cast<int>(code_at(W4Format::int4_g32_bf16, m, k, row, col));
    const float s = runtime::bf16_to_float(static_cast<uint16_t>(scale_at(W4Format::int4_g32_bf16, m, k, row, col / kGroup)));
    return static_cast<float>(code - 8) * s;
}

float mxfp4_value(std::span<const std::byte> packed, std::span<const std::byte> scale, int k, int row, int col) {
    const CheckpointMatrix m{packed, scale};
    const unsigned code = code_at(W4Format::mxfp4_g32_e8m0, m, k, row, col);
    const unsigned s = scale_at(W4Format::mxfp4_g32_e8m0, m, k, row, col / kGroup);
    if (s == 255) return std::nanf("");
    return std::ldexp(e2m1_value(code), static_cast<int>(s) - 127);
}

PreparedMoeWeights moe_weights_layout(W4Format format, W4Layout layout, bool gate_up, int experts, int n, int k,
                                      bool wide_scales) {
    if (format != W4Format::int4_g32_bf16 && format != W4Format::mxfp4_g32_e8m0)
        throw InvalidArgument("moe_w4a16: unknown weight format");
    if (layout != W4Layout::decode_mma16 && layout != W4Layout::prefill_mma16)
        throw InvalidArgument("moe_w4a16: unknown weight layout");
    if (experts <= 0 || n <= 0 || k <= 0)
        throw InvalidArgument("moe_w4a16: empty expert weights (experts " + std::to_string(experts) + ", shape " +
                              shape_text(n, k) + ")");
    if (k % kGroup != 0)
        throw InvalidArgument("moe_w4a16: the input size K = " + std::to_string(k) +
                              " is not a multiple of the quantisation group (32)");
    if (static_cast<long long>(n) * k >= (1LL << 31))
        throw InvalidArgument("moe_w4a16: expert matrix " + shape_text(n, k) + " is too large");

    const int sbr = layout_superblock_rows(layout);
    PreparedMoeWeights w;
    w.format = format;
    w.layout = layout;
    w.gate_up = gate_up;
    w.wide_scales = wide_scales;
    w.experts = experts;
    w.n = n;
    w.k = k;
    w.n_pad = gate_up ? 2 * round_up(n, 64) : round_up(n, sbr);  // gate_up: the intermediate covers the down K_pad
    w.k_pad = round_up(k, 64);
    w.expert_stride = static_cast<uint64_t>(w.n_pad / sbr) * (w.k_pad / 64) * layout_record_bytes(format, layout);
    return w;
}

PreparedMoeWeights prepare_moe_weights(W4Format format, W4Layout layout, bool gate_up, int experts, int n, int k,
                                       const MatrixSource& source) {
    PreparedMoeWeights w = moe_weights_layout(format, layout, gate_up, experts, n, k);
    const int sbr = layout_superblock_rows(layout);
    const int q_count = w.k_pad / 64;
    const int sb_count = w.n_pad / sbr;
    const int blocks = sbr / 16;
    const int rec = layout_record_bytes(format, layout);
    const int scb = layout_scale_bytes_per_block(format);
    w.expert_stride = static_cast<uint64_t>(sb_count) * q_count * rec;
    w.bytes.assign(w.expert_stride * experts, std::byte{0});

    const bool int4 = format == W4Format::int4_g32_bf16;
    std::atomic<int> next{0};
    std::atomic<bool> wide{false};
    std::exception_ptr error;
    std::mutex error_mu;

    auto work = [&]() {
        try {
            for (int e = next.fetch_add(1); e < experts; e = next.fetch_add(1)) {
                CheckpointMatrix parts[2];
                const int nparts = gate_up ? 2 : 1;
                for (int part = 0; part < nparts; ++part) {
                    parts[part] = source(e, part);
                    check_matrix(format, parts[part], n, k, e, part);
                }
                std::byte* base = w.bytes.data() + w.expert_stride * e;
                for (int sb = 0; sb < sb_count; ++sb) {
                    for (int q = 0; q < q_count; ++q) {
                        std::byte* recp = base + (static_cast<size_t>(sb) * q_count + q) * rec;
                        for (int blk = 0; blk < blocks; ++blk) {
                            const int rb = sb * blocks + blk;
                            for (int lane = 0; lane < 32; ++lane) {
                                const int g = lane / 4, t = lane % 4;
                                for (int s = 0; s < 4; ++s) {
                                    uint32_t word = 0;
                                    for (int m = 0; m < 4; ++m) {
                                        const int row = rb * 16 + g + ((m & 1) ? 8 : 0);
                                        const RowSource src = row_source(gate_up, n, row);
                                        for (int half = 0; half < 2; ++half) {
                                            const int col = q * 64 + 16 * s + 2 * t + ((m & 2) ? 8 : 0) + half;
                                            unsigned code;
                                            if (src.part < 0 || col >= k)
                                                code = int4 ? 8u : 0u;
                                            else
                                                code = code_at(format, parts[src.part], k, src.row, col);
                                            if (int4) {
                                                word |= code << (4 * m + 16 * half);
                                            } else {
                                                word |= mxfp4_place(code, m, half);
                                            }
                                        }
                                    }
                                    std::memcpy(recp + blk * 512 + lane * 16 + s * 4, &word, 4);
                                }
                            }
                            std::byte* sc = recp + blocks * 512 + blk * scb;
                            for (int g = 0; g < 8; ++g) {
                                for (int slot = 0; slot < 4; ++slot) {
                                    const int row = rb * 16 + g + ((slot & 1) ? 8 : 0);
                                    const int group = 2 * q + (slot >> 1);
                                    const RowSource src = row_source(gate_up, n, row);
                                    const bool pad = src.part < 0 || group >= k / kGroup;
                                    if (int4) {
                                        const uint16_t v = pad ? uint16_t{0x3F80}
                                                               : static_cast<uint16_t>(scale_at(format, parts[src.part], k,
                                                                                                src.row, group));
                                        std::memcpy(sc + g * 8 + slot * 2, &v, 2);
                                    } else {
                                        const unsigned v = pad ? 127u : scale_at(format, parts[src.part], k, src.row, group);
                                        if (v == 255u)
                                            throw InvalidArgument("moe_w4a16: expert " + std::to_string(e) +
                                                                  " has a NaN MXFP4 scale (E8M0 255) at row " +
                                                                  std::to_string(src.row) + ", group " +
                                                                  std::to_string(group));
                                        if (v > 128u) wide.store(true, std::memory_order_relaxed);
                                        sc[g * 4 + slot] = static_cast<std::byte>(v);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mu);
            if (!error) error = std::current_exception();
            next.store(experts);
        }
    };

    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const int nthreads = static_cast<int>(std::min<unsigned>(hw, static_cast<unsigned>(experts)));
    if (nthreads <= 1) {
        work();
    } else {
        std::vector<std::thread> pool;
        pool.reserve(nthreads);
        for (int i = 0; i < nthreads; ++i) pool.emplace_back(work);
        for (auto& th : pool) th.join();
    }
    if (error) std::rethrow_exception(error);
    w.wide_scales = wide.load();
    return w;
}

void require_layout(const PreparedMoeWeights& w, W4Layout expected, W4Format format, std::string_view kernel) {
    if (w.layout != expected) {
        throw InvalidArgument("moe_w4a16: the " + std::string(kernel) + " kernel reads weights packed as " +
                              std::string(to_string(expected)) + ", but these were packed as " +
                              std::string(to_string(w.layout)) + " (choose the layout before packing)");
    }
    if (w.format != format) {
        throw InvalidArgument("moe_w4a16: the " + std::string(kernel) + " kernel was built for " +
                              std::string(to_string(format)) + " weights, got " + std::string(to_string(w.format)));
    }
}

void dequantize_prepared(const PreparedMoeWeights& w, int expert, std::span<float> out) {
    const int rows = w.gate_up ? 2 * w.n : w.n;
    if (expert < 0 || expert >= w.experts)
        throw InvalidArgument("moe_w4a16: expert " + std::to_string(expert) + " out of range");
    if (out.size() != static_cast<size_t>(rows) * w.k)
        throw InvalidArgument("moe_w4a16: dequantize_prepared needs " + std::to_string(static_cast<size_t>(rows) * w.k) +
                              " floats");
    const int sbr = layout_superblock_rows(w.layout);
    const int blocks = sbr / 16;
    const int q_count = w.k_pad / 64;
    const int rec = layout_record_bytes(w.format, w.layout);
    const int scb = layout_scale_bytes_per_block(w.format);
    const bool int4 = w.format == W4Format::int4_g32_bf16;
    const std::byte* base = w.bytes.data() + w.expert_stride * expert;
    for (int r = 0; r < w.n_pad; ++r) {
        const RowSource src = row_source(w.gate_up, w.n, r);
        if (src.part < 0) continue;
        const int out_row = src.part * w.n + src.row;
        const int rb = r / 16, j = r % 16, g = j % 8, hi_row = j / 8;
        const int sb = rb / blocks, blk = rb % blocks;
        for (int col = 0; col < w.k; ++col) {
            const int q = col / 64, kk = col % 64;
            const int s = kk / 16, within = kk % 16;
            const int hi_k = within >= 8 ? 1 : 0;
            const int t = (within % 8) / 2, half = within % 2;
            const int m = hi_row + 2 * hi_k;
            const int lane = g * 4 + t;
            const std::byte* recp = base + (static_cast<size_t>(sb) * q_count + q) * rec;
            const uint32_t word = load_u32(recp + blk * 512 + lane * 16 + s * 4);
            const int slot = hi_row + 2 * (kk / 32);
            float v;
            if (int4) {
                const unsigned code = (word >> (4 * m + 16 * half)) & 0xFu;
                const float sc = runtime::bf16_to_float(load_u16(recp + blocks * 512 + blk * scb + g * 8 + slot * 2));
                v = static_cast<float>(static_cast<int>(code) - 8) * sc;
            } else {
                const unsigned code = mxfp4_code(word, m, half);
                const unsigned sc = static_cast<uint8_t>(recp[blocks * 512 + blk * scb + g * 4 + slot]);
                v = std::ldexp(e2m1_value(code), static_cast<int>(sc) - 127);
            }
            out[static_cast<size_t>(out_row) * w.k + col] = v;
        }
    }
}

}  // namespace kiln::model::weights
