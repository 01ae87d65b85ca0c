// Publishing files safely: write to a temp file next to the target, fsync, rename into place,
// fsync the directory. A crash leaves either the old file or the new one, never a partial one.
#pragma once

#include <string>
#include <string_view>

namespace kiln::cache {

// "<dir>/.<name>.tmp-<pid>-<random>", in the same directory as `path` (same filesystem).
std::string temp_sibling(const std::string& path);

void fsync_path(const std::string& path);  // a file or a directory; throws IoError
void publish_file(const std::string& tmp, const std::string& path);  // fsync tmp, rename, fsync dir
void write_file_atomic(const std::string& path, std::string_view bytes, unsigned mode = 0644);
std::string read_file(const std::string& path);  // throws IoError naming the file

}  // namespace kiln::cache
