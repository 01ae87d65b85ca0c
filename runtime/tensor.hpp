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

enum class DType : uint8_t { none = 0, bf16 = 1, f16 = 2, f32 = 3, i32 = 4, u8 = 5, i64 = 6 };

constexpr size_t dtype_size(DType t) {
    switch (t) {
        case DType::bf16: case DType::f16: return 2;
        case DType::f32: case DType::i32: return 4;
        case DType::u8: return 1;
        case DType::i64: return 8;
        case DType::none: return 0;
    }
    return 0;
}
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
