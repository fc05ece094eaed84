// File-system pieces of the kernel cache: whole-file reads, directory scans, touches and removals. Atomic
// writes and private directories are support/'s (support/atomic_file.h, support/private_dir.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache.h"
#include "kiln/status.h"

namespace kiln::cache_files {

namespace fs = std::filesystem;

// Creates `dir` and any missing parents with mode 0700: compiled kernels are code that this user's
// processes will run, so no one else may plant files there.
Status make_dirs(const fs::path& dir);

// The bytes of every file the cache creates: 0600, for the same reason.
inline constexpr unsigned kFileMode = 0600;

enum class ReadResult { ok, missing, unreadable };
// The whole file, its mtime (seconds) and inode. `missing` only for a file that does not exist.
ReadResult read_file(const fs::path& path, std::string& bytes, int64_t& mtime_s, uint64_t* inode = nullptr);

struct FileInfo {
  fs::path path;
  int64_t bytes = 0;
  int64_t mtime_s = 0;
  CacheKind kind = CacheKind::nvrtc;  // entries and temps: the kind directory they are in
};
// Every regular file (never following symlinks) under `kernels_dir`:
//   entries  kernels/<kind>/<shard>/<name> that are not temporary files (their names are checked later),
//   temps    temporary files of a store in flight (or of a killed process) in the same places,
//   strays   files anywhere else under kernels/: an older kiln's layout (kernels/<shard>/...), unknown
//            directories. They can never be looked up; eviction and verify remove them.
// A missing directory is empty.
struct Scan {
  std::vector<FileInfo> entries, temps, strays;
};
Scan scan(const fs::path& kernels_dir);

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
