// safetensors files: writer → reader round trip, and malformed files refused with errors that name the
// file, the tensor and the problem.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/safetensors.hpp"
#include "model_test_util.hpp"

using namespace kiln::model;
using kiln::model::test::read_file;
using kiln::model::test::ScratchDir;
using kiln::model::test::write_file;

namespace {

// u64 header length + header + data, exactly as given (no padding or checks).
std::string raw_file(const std::string& header, const std::string& data) {
    uint64_t n = header.size();
    std::string s(8, '\0');
    std::memcpy(s.data(), &n, 8);
    return s + header + data;
}

void expect_open_error(const std::filesystem::path& p, std::initializer_list<std::string> words) {
    try {
        SafetensorsFile::open(p);
        FAIL("opened a malformed file");
    } catch (const CheckpointError& e) {
        std::string msg = e.what();
        INFO("message: ", msg);
        CHECK(msg.find(p.filename().string()) != std::string::npos);
        for (const auto& w : words) CHECK(msg.find(w) != std::string::npos);
    }
}

}  // namespace

TEST_CASE("writer → reader round trip, in pieces, with metadata") {
    ScratchDir dir("st");
    std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
    std::vector<uint16_t> b = {0x3F80, 0xC000, 0x7F80};
    {
        SafetensorsWriter w(dir / "x.safetensors",
                            {{"a", DType::f32, {2, 3}}, {"empty", DType::bf16, {0, 4}}, {"b", DType::bf16, {3}}},
                            {{"format", "pt"}});
        auto ab = std::as_bytes(std::span(a));
        w.write("a", ab.first(8));
        w.write("a", ab.subspan(8));
        CHECK_THROWS_AS(w.write("a", ab.first(4)), kiln::InvalidArgument);  // a is complete; b comes next
        w.write("b", std::as_bytes(std::span(b)));
        w.finish();
    }
    auto f = SafetensorsFile::open(dir / "x.safetensors");
    CHECK(f->metadata().at("format") == "pt");
    REQUIRE(f->tensors().size() == 3);
    const TensorInfo* ta = f->find("a");
    REQUIRE(ta);
    CHECK(ta->dtype == DType::f32);
    CHECK(ta->shape == std::vector<int64_t>{2, 3});
    REQUIRE(ta->bytes.size() == 24);
    CHECK(std::memcmp(ta->bytes.data(), a.data(), 24) == 0);
    const TensorInfo* tb = f->find("b");
    REQUIRE(tb);
    CHECK(std::memcmp(tb->bytes.data(), b.data(), 6) == 0);
    CHECK(f->find("empty")->bytes.empty());
    CHECK(f->find("nope") == nullptr);
    // the header is padded so the data section starts 8-byte aligned
    uint64_t n;
    std::memcpy(&n, read_file(dir / "x.safetensors").data(), 8);
    CHECK((8 + n) % 8 == 0);
}

TEST_CASE("an unfinished writer publishes nothing") {
    ScratchDir dir("st");
    {
        SafetensorsWriter w(dir / "y.safetensors", {{"a", DType::u8, {4}}});
        std::byte two[2] = {};
        w.write("a", two);
        CHECK_THROWS_AS(w.finish(), kiln::InvalidArgument);  // 2 of 4 bytes
    }
    CHECK_FALSE(std::filesystem::exists(dir / "y.safetensors"));
    CHECK(std::filesystem::is_empty(dir.path()));  // no temp file left behind either
}

TEST_CASE("malformed safetensors files are refused with clear errors") {
    ScratchDir dir("st");
    const auto p = dir / "bad.safetensors";
    const std::string ok_entry = R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";

    SUBCASE("truncated header length") {
        write_file(p, std::string("\x10\x00\x00", 3));
        expect_open_error(p, {"truncated header", "3 bytes"});
    }
    SUBCASE("header length beyond the file") {
        std::string s = raw_file("{" + ok_entry + "}", std::string(8, '\0'));
        uint64_t huge = 5000;
        std::memcpy(s.data(), &huge, 8);
        write_file(p, s);
        expect_open_error(p, {"truncated header", "5000"});
    }
    SUBCASE("header cut short (not valid JSON)") {
        std::string header = "{" + ok_entry + "}";
        write_file(p, raw_file(header.substr(0, header.size() - 5), ""));
        expect_open_error(p, {"not valid JSON"});
    }
    SUBCASE("unknown dtype") {
        write_file(p, raw_file(R"({"t": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0')));
        expect_open_error(p, {"'t'", "unknown dtype 'Q4_K'"});
    }
    SUBCASE("offsets past the data section") {
        write_file(p, raw_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", std::string(6, '\0')));
        expect_open_error(p, {"'t'", "outside the data section"});
    }
    SUBCASE("byte span does not match shape × dtype") {
        write_file(p, raw_file(R"({"t": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})", std::string(8, '\0')));
        expect_open_error(p, {"'t'", "span 8 bytes", "needs 12"});
    }
    SUBCASE("overlapping tensors") {
        write_file(p, raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                               R"( "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
                               std::string(12, '\0')));
        expect_open_error(p, {"'a'", "'b'", "overlap"});
    }
    SUBCASE("overlap hidden behind an empty tensor") {
        write_file(p, raw_file(R"({"a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},)"
                               R"( "z": {"dtype": "U8", "shape": [0], "data_offsets": [8, 8]},)"
                               R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [10, 12]}})",
                               std::string(16, '\0')));
        expect_open_error(p, {"'a'", "'b'", "overlap"});
    }
    SUBCASE("negative shape") {
        write_file(p, raw_file(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", std::string(8, '\0')));
        expect_open_error(p, {"'t'", "shape"});
    }
    SUBCASE("header that is not an object") {
        write_file(p, raw_file("[1, 2]", ""));
        expect_open_error(p, {"not a JSON object"});
    }
}
