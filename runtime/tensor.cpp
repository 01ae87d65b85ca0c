#include "runtime/tensor.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::runtime {

namespace {
constexpr DType k_all[] = {DType::none, DType::bf16, DType::f16, DType::f32, DType::i32, DType::u8,
                           DType::i64, DType::boolean, DType::i8, DType::u16, DType::i16, DType::u32,
                           DType::u64, DType::f64, DType::f8_e4m3, DType::f8_e5m2, DType::f8_e8m0};
}  // namespace

const char* to_string(DType t) {
    switch (t) {
        case DType::bf16: return "bf16";
        case DType::f16: return "f16";
        case DType::f32: return "f32";
        case DType::i32: return "i32";
        case DType::u8: return "u8";
        case DType::i64: return "i64";
        case DType::none: return "none";
        case DType::boolean: return "bool";
        case DType::i8: return "i8";
        case DType::u16: return "u16";
        case DType::i16: return "i16";
        case DType::u32: return "u32";
        case DType::u64: return "u64";
        case DType::f64: return "f64";
        case DType::f8_e4m3: return "f8_e4m3";
        case DType::f8_e5m2: return "f8_e5m2";
        case DType::f8_e8m0: return "f8_e8m0";
    }
    return "?";
}

DType parse_dtype(std::string_view s) {
    for (DType t : k_all)
        if (s == to_string(t)) return t;
    std::string names;
    for (DType t : k_all) names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(t));
    throw InvalidArgument(fmt::format("unknown dtype '{}' ({})", s, names));
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Location loc,
                                  int device) {
    if (shape.size() > static_cast<size_t>(k_max_rank))
        throw InvalidArgument(fmt::format("tensor rank {} exceeds {}", shape.size(), k_max_rank));
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.location = loc;
    v.device = device;
    v.rank = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t e : shape) {
        if (e < 0) throw InvalidArgument(fmt::format("negative tensor extent {}", e));
        v.shape[i++] = e;
    }
    int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
        v.strides[d] = stride;
        stride *= v.shape[d];
    }
    return v;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
}

bool TensorView::is_contiguous() const {
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
        if (shape[d] != 1 && strides[d] != stride) return false;
        stride *= shape[d];
    }
    return true;
}

std::string TensorView::describe() const {
    std::string dims;
    for (int d = 0; d < rank; ++d) dims += fmt::format("{}{}", d ? ", " : "", shape[d]);
    return fmt::format("{}[{}] {}", to_string(dtype), dims,
                       location == Location::device ? fmt::format("device:{}", device) : std::string("host"));
}

void expect_tensor(const TensorView& t, std::string_view what, DType dtype, int rank, Location loc) {
    if (t.dtype != dtype || t.rank != rank || t.location != loc)
        throw InvalidArgument(fmt::format("{}: expected a {} {}-d {} tensor, got {}", what, to_string(dtype), rank,
                                          loc == Location::device ? "device" : "host", t.describe()));
    if (!t.is_contiguous()) throw InvalidArgument(fmt::format("{}: tensor {} must be contiguous", what, t.describe()));
    if (t.data == nullptr && t.numel() > 0) throw InvalidArgument(fmt::format("{}: null data pointer", what));
}

void expect_shape(const TensorView& t, std::string_view what, std::initializer_list<int64_t> shape) {
    bool ok = static_cast<int>(shape.size()) == t.rank;
    int d = 0;
    for (int64_t e : shape) {
        if (ok && e >= 0 && t.shape[d] != e) ok = false;
        ++d;
    }
    if (!ok) {
        std::string want;
        d = 0;
        for (int64_t e : shape) want += fmt::format("{}{}", d++ ? ", " : "", e < 0 ? std::string("*") : fmt::format("{}", e));
        throw InvalidArgument(fmt::format("{}: expected shape [{}], got {}", what, want, t.describe()));
    }
}

}  // namespace kiln::runtime
