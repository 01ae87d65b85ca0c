#include "model/tokenizer/tiktoken_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "model/tokenizer/tokenizer_error.hpp"

namespace kiln::model {

namespace {

constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_reverse() {
    std::array<int8_t, 256> r{};
    for (auto& v : r) v = -1;
    for (int i = 0; i < 64; ++i) r[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return r;
}
constexpr auto reverse = make_reverse();

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

std::string base64_encode(std::string_view in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const uint32_t v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                           static_cast<unsigned char>(in[i + 2]);
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += alphabet[v & 63];
    }
    if (i + 1 == in.size()) {
        const uint32_t v = static_cast<unsigned char>(in[i]) << 16;
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        const uint32_t v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

std::string base64_decode(std::string_view in) {
    if (in.size() % 4 != 0) throw TokenizerError(fmt::format("bad base64 length {}", in.size()));
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (size_t i = 0; i < in.size(); i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; ++k) {
            const char c = in[i + k];
            if (c == '=' && i + 4 == in.size() && k >= 2) {
                v[k] = 0;
                ++pad;
                continue;
            }
            if (pad > 0) throw TokenizerError("bad base64 padding");
            v[k] = reverse[static_cast<unsigned char>(c)];
            if (v[k] < 0) throw TokenizerError(fmt::format("bad base64 character '{}'", c));
        }
        const uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
        out += static_cast<char>(w >> 16);
        if (pad < 2) out += static_cast<char>((w >> 8) & 0xFF);
        if (pad < 1) out += static_cast<char>(w & 0xFF);
    }
    return out;
}

std::vector<std::string> parse_tiktoken(std::string_view contents, std::string_view source) {
    std::vector<std::string> by_rank;
    std::vector<size_t> line_of;  // line that defined each rank, 0 = not yet defined
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < contents.size()) {
        size_t eol = contents.find('\n', pos);
        if (eol == std::string_view::npos) eol = contents.size();
        std::string_view line = contents.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        // Split on blanks into exactly two fields; blank lines are skipped (as tiktoken does).
        std::string_view fields[3];
        int nf = 0;
        size_t i = 0;
        while (i < line.size()) {
            while (i < line.size() && is_blank(line[i])) ++i;
            if (i >= line.size()) break;
            const size_t start = i;
            while (i < line.size() && !is_blank(line[i])) ++i;
            if (nf < 3) fields[nf] = line.substr(start, i - start);
            ++nf;
        }
        if (nf == 0) continue;
        auto fail = [&](const std::string& why) {
            return TokenizerError(fmt::format("{}:{}: {}", source, line_no, why));
        };
        if (nf != 2) throw fail(fmt::format("expected `base64 rank`, found {} field{}", nf, nf == 1 ? "" : "s"));
        std::string bytes;
        try {
            bytes = base64_decode(fields[0]);
        } catch (const TokenizerError& e) {
            throw fail(e.what());
        }
        if (bytes.empty()) throw fail("empty token");
        uint64_t rank = 0;
        const auto [end, ec] = std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), rank);
        if (ec != std::errc() || end != fields[1].data() + fields[1].size()) {
            throw fail(fmt::format("rank '{}' is not a non-negative integer", fields[1]));
        }
        if (rank >= (1u << 30)) throw fail(fmt::format("rank {} is too large", rank));
        if (rank >= by_rank.size()) {
            by_rank.resize(rank + 1);
            line_of.resize(rank + 1, 0);
        }
        if (line_of[rank] != 0) throw fail(fmt::format("rank {} already defined on line {}", rank, line_of[rank]));
        by_rank[rank] = std::move(bytes);
        line_of[rank] = line_no;
    }
    if (by_rank.empty()) throw TokenizerError(fmt::format("{}: no tokens", source));
    for (size_t r = 0; r < by_rank.size(); ++r) {
        if (line_of[r] == 0) {
            throw TokenizerError(fmt::format("{}: rank {} is missing (ranks must be 0..{} without gaps)", source, r,
                                             by_rank.size() - 1));
        }
    }
    return by_rank;
}

std::vector<std::string> read_tiktoken_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw kiln::IoError(fmt::format("cannot open vocabulary file {}: {}", path.string(), std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw kiln::IoError(fmt::format("cannot read vocabulary file {}", path.string()));
    return parse_tiktoken(ss.str(), path.string());
}

std::string format_tiktoken(const std::vector<std::string>& tokens) {
    std::string out;
    for (size_t r = 0; r < tokens.size(); ++r) {
        out += base64_encode(tokens[r]);
        out += ' ';
        out += std::to_string(r);
        out += '\n';
    }
    return out;
}

// write_file_atomic() is defined once, in model/safetensors.cpp (same contract: temp file, fsync, rename).

}  // namespace kiln::model
