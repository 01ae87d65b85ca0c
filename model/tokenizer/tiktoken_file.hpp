// The tiktoken vocabulary format: one `base64(token bytes) rank` line per mergeable token
// (what tiktoken.load.load_tiktoken_bpe reads). Ranks must be exactly 0..N-1, each once, and every
// single byte must be a token (byte-level BPE starts from single bytes).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::model {

// Standard base64 (RFC 4648, with padding). decode throws TokenizerError on malformed input.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);

// Parses a tiktoken file's contents; returns the token bytes indexed by rank. Errors name `source`
// and the 1-based line number.
std::vector<std::string> parse_tiktoken(std::string_view contents, std::string_view source);
std::vector<std::string> read_tiktoken_file(const std::filesystem::path& path);

// Serialises tokens (indexed by rank) in rank order.
std::string format_tiktoken(const std::vector<std::string>& tokens);

// Writes `contents` to `path` atomically: temp file in the same directory, fsync, rename.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace kiln::model
