#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "runtime/bf16.hpp"
#include "runtime/error.hpp"
#include "runtime/tensor.hpp"

using namespace kiln::runtime;

TEST_CASE("contiguous views: strides, sizes, description") {
    int dummy = 0;
    TensorView v = TensorView::contiguous(&dummy, DType::bf16, {3, 4, 5}, Location::device, 1);
    CHECK(v.rank == 3);
    CHECK(v.strides[0] == 20);
    CHECK(v.strides[1] == 5);
    CHECK(v.strides[2] == 1);
    CHECK(v.numel() == 60);
    CHECK(v.bytes() == 120);
    CHECK(v.is_contiguous());
    CHECK(v.describe() == "bf16[3, 4, 5] device:1");
    v.strides[0] = 40;
    CHECK_FALSE(v.is_contiguous());
    CHECK_THROWS_AS(TensorView::contiguous(&dummy, DType::f32, {1, 2, 3, 4, 5, 6, 7}), kiln::InvalidArgument);
    CHECK_THROWS_AS(TensorView::contiguous(&dummy, DType::f32, {-1}), kiln::InvalidArgument);
}

TEST_CASE("dtype names and sizes round trip") {
    for (DType t : {DType::bf16, DType::f16, DType::f32, DType::i32, DType::u8, DType::i64}) {
        CHECK(parse_dtype(to_string(t)) == t);
        CHECK(dtype_size(t) > 0);
    }
    CHECK(dtype_size(DType::i64) == 8);
    CHECK(dtype_size(DType::u8) == 1);
    CHECK_THROWS_AS(parse_dtype("float"), kiln::InvalidArgument);
}

TEST_CASE("argument checks name the tensor and the mismatch") {
    int dummy = 0;
    TensorView v = TensorView::contiguous(&dummy, DType::i32, {8, 4}, Location::device);
    CHECK_NOTHROW(expect_tensor(v, "ids", DType::i32, 2, Location::device));
    CHECK_NOTHROW(expect_shape(v, "ids", {-1, 4}));
    try {
        expect_tensor(v, "ids", DType::bf16, 2, Location::device);
        FAIL("expected InvalidArgument");
    } catch (const kiln::InvalidArgument& e) {
        std::string m = e.what();
        CHECK(m.find("ids") != std::string::npos);
        CHECK(m.find("i32[8, 4]") != std::string::npos);
    }
    CHECK_THROWS_AS(expect_tensor(v, "ids", DType::i32, 2, Location::host), kiln::InvalidArgument);
    CHECK_THROWS_AS(expect_shape(v, "ids", {8, 5}), kiln::InvalidArgument);
    CHECK_THROWS_AS(expect_shape(v, "ids", {8}), kiln::InvalidArgument);
    TensorView null_view = TensorView::contiguous(nullptr, DType::i32, {2}, Location::device);
    CHECK_THROWS_AS(expect_tensor(null_view, "x", DType::i32, 1, Location::device), kiln::InvalidArgument);
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN") {
    CHECK(float_to_bf16(1.0f) == 0x3f80);
    CHECK(bf16_to_float(0x3f80) == 1.0f);
    CHECK(bf16_to_float(float_to_bf16(-2.5f)) == -2.5f);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
    CHECK(float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
    CHECK(float_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
    CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}
