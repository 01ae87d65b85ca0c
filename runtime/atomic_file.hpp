// Publishing files safely: write to a temp file next to the target, fsync, rename into place,
// fsync the directory. A crash leaves either the old file or the new one, never a partial one.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// "<dir>/.<name>.tmp-<pid>-<random>", in the same directory as `path` (same filesystem). First removes
// the temp siblings of `path` (and their SQLite -journal/-wal/-shm files) that processes of this
// machine left when they were killed: those whose pid is no longer running.
std::string temp_sibling(const std::string& path);

// The removal alone; returns how many files went.
size_t remove_stale_temp_siblings(const std::string& path);

void fsync_path(const std::string& path);  // a file or a directory; throws IoError
void publish_file(const std::string& tmp, const std::string& path);  // fsync tmp, rename, fsync dir
void write_file_atomic(const std::string& path, std::string_view bytes, unsigned mode = 0644);
std::string read_file(const std::string& path);  // throws IoError naming the file

}  // namespace kiln
