// File-system pieces of the kernel cache: whole-file reads, atomic publication by rename, directory scans.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln::cache_files {

namespace fs = std::filesystem;

// Creates `dir` and any missing parents with mode 0700: compiled kernels are code that this user's
// processes will run, so no one else may plant files there.
Status make_dirs(const fs::path& dir);

enum class ReadResult { ok, missing, unreadable };
// The whole file, its mtime (seconds) and inode. `missing` only for a file that does not exist.
ReadResult read_file(const fs::path& path, std::string& bytes, int64_t& mtime_s, uint64_t* inode = nullptr);

// Writes `bytes` to a uniquely named temporary file in `final_path`'s directory, closes it, then renames it
// over `final_path`. Readers see the old file, no file or the whole new file; never a partial one.
Status write_atomic(const fs::path& final_path, std::string_view bytes, bool fsync);

// Temporary files are "<final name>.tmp.<pid>.<unique>"; entries end in ".kbin".
bool is_temp_name(std::string_view name);

struct FileInfo {
  fs::path path;
  int64_t bytes = 0;
  int64_t mtime_s = 0;
};
// Every regular file (not symlinks, not directories) in the shard directories of `kernels_dir`
// (<kernels_dir>/<2 hex>/...), split into entry files (anything that is not a temporary file) and
// temporary files. A missing directory is empty.
void scan(const fs::path& kernels_dir, std::vector<FileInfo>& entries, std::vector<FileInfo>* temps);

int64_t now_s();
// Sets the mtime (and atime) to now; errors are ignored (a stale LRU clock only misorders eviction).
void touch(const fs::path& path);
// Removes a file; true if it was there and is gone. Errors are swallowed: another process may have
// removed or replaced it first, which is fine.
bool remove_file(const fs::path& path);
// Removes `path` only if it is still the file with `inode`: a bad file that another process has just
// replaced with a fresh entry (rename gives it a new inode) is left alone.
bool remove_if_same(const fs::path& path, uint64_t inode);

}  // namespace kiln::cache_files
