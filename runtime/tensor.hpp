// TensorView: a non-owning description of a tensor (dtype, shape, strides in elements, data pointer,
// host or device). Kernel launch helpers take views and check dtype, rank, shape, location and
// contiguity before anything reaches the device.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace kiln::runtime {

// Every element type kiln meets: kernel tensors and checkpoint tensors alike (model/dtype.hpp spells them
// as safetensors does).
enum class DType : uint8_t {
    none = 0, bf16 = 1, f16 = 2, f32 = 3, i32 = 4, u8 = 5, i64 = 6,
    boolean = 7, i8 = 8, u16 = 9, i16 = 10, u32 = 11, u64 = 12, f64 = 13, f8_e4m3 = 14, f8_e5m2 = 15, f8_e8m0 = 16,
};

constexpr size_t dtype_size(DType t) {
    switch (t) {
        case DType::bf16: case DType::f16: case DType::u16: case DType::i16: return 2;
        case DType::f32: case DType::i32: case DType::u32: return 4;
        case DType::u8: case DType::i8: case DType::boolean: case DType::f8_e4m3: case DType::f8_e5m2:
        case DType::f8_e8m0: return 1;
        case DType::i64: case DType::u64: case DType::f64: return 8;
        case DType::none: return 0;
    }
    return 0;
}
// bf16, f16, f32, f64.
constexpr bool is_float(DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32 || t == DType::f64; }
const char* to_string(DType t);         // "bf16", ..., "none"
DType parse_dtype(std::string_view s);  // throws InvalidArgument

enum class Location : uint8_t { host = 0, device = 1 };

struct TensorView {
    static constexpr int k_max_rank = 6;

    void* data = nullptr;
    DType dtype = DType::none;
    Location location = Location::host;
    int device = 0;  // ordinal when location == device
    int rank = 0;
    std::array<int64_t, k_max_rank> shape{};
    std::array<int64_t, k_max_rank> strides{};  // in elements

    // Row-major contiguous view; throws InvalidArgument for rank > k_max_rank or negative extents.
    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                 Location loc = Location::host, int device = 0);

    int64_t size(int dim) const { return shape[dim]; }
    int64_t numel() const;
    size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
    bool is_contiguous() const;
    std::string describe() const;  // "bf16[4, 128] device:0"

    template <typename T>
    T* ptr() const { return static_cast<T*>(data); }
};

// Argument checks for launch helpers: throw InvalidArgument naming `what` and the mismatch.
void expect_tensor(const TensorView& t, std::string_view what, DType dtype, int rank, Location loc);
void expect_shape(const TensorView& t, std::string_view what, std::initializer_list<int64_t> shape);

}  // namespace kiln::runtime
