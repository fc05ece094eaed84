// File-system pieces of the kernel cache: whole-file reads, atomic writes, directory scans, touches and
// removals, every one relative to the cache's root and never through a symbolic link.
//
// The root (KILN_CACHE_DIR and the like) is opened by its name: a link there is the user's own choice.
// Below it, each directory is opened with openat(O_NOFOLLOW) from its parent's descriptor, and files are
// read, created, renamed, touched and removed relative to their directory's descriptor, so a link planted
// anywhere in the cache (kernels/emu/ab -> /elsewhere) is never followed out of it for reading, writing or
// deleting: it is a bad file that verify reports and removes (the link, not what it points to). Every
// directory on the way, and every entry read, must be trusted (trust_problem): the entries are code this
// user's processes will run.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache.h"
#include "kiln/status.h"
#include "support/dir_fd.h"

namespace kiln::cache_files {

namespace fs = std::filesystem;

// The bytes of every file the cache creates: 0600, and directories 0700 (support::open_subdir).
inline constexpr unsigned kFileMode = 0600;

// Why a directory or file may hold what another user put there, or "" when it cannot: owned by another
// user (root excepted; any owner with `any_owner`, for a secondary directory, which its owner ships) or
// writable by group or others.
std::string trust_problem(const struct stat& st, bool any_owner = false);

// Directory `rel` ("" for the root itself, else relative components) below `root`, opened as described
// above and checked with trust_problem at every step. With `create`, missing directories are made (mode
// 0700). Errors ("'<dir>' <why>") name the directory: not_found when a part is missing, else io_error.
Result<support::Fd> open_dir(const fs::path& root, const fs::path& rel, bool create, bool any_owner = false);

struct ReadResult {
  enum Code {
    ok,
    missing,   // no file at the name, or a directory on the way is missing
    bad,       // something is at the name but is no readable, trusted regular file: remove it
    unusable,  // a directory on the way is a link, unreadable or untrusted: nothing below it is used
  } code = missing;
  std::string why;  // bad, unusable: what is wrong
  int64_t mtime_s = 0;
  uint64_t inode = 0;  // ok, bad: the file read (for remove_file's check)
};
// The whole file `rel` below `root`. Never blocks: a FIFO or device at the name is bad, not opened.
ReadResult read_file(const fs::path& root, const fs::path& rel, std::string& bytes, bool any_owner = false);

// Publishes `bytes` at `rel` (support::write_file_atomic_at, mode 0600), creating directories on the way.
// Errors say "cannot write '<path>': <why>".
Status write_file(const fs::path& root, const fs::path& rel, std::string_view bytes, bool fsync);

// Removes the name `rel` (a link itself, never what it points to); true if it was there and is gone. With
// `inode`, only while it is still that file: a bad file that another process has just replaced with a
// fresh entry (rename gives it a new inode) is left alone. Errors are swallowed (another process may
// have removed it first, which is fine).
bool remove_file(const fs::path& root, const fs::path& rel, std::optional<uint64_t> inode = std::nullopt);
// Sets the mtime (and atime) to now; errors are ignored (a stale LRU clock only misorders eviction).
void touch(const fs::path& root, const fs::path& rel);
// Whether root/rel is a regular file (directories opened as read_file opens them; the file is not read).
bool is_regular_file(const fs::path& root, const fs::path& rel);
// Removes `rel` and everything below it without following links; Ok when it is not there.
Status remove_tree(const fs::path& root, const fs::path& rel);

struct FileInfo {
  fs::path rel;   // below the root: kernels/<kind>/<shard>/<name>
  fs::path path;  // root / rel, for people
  int64_t bytes = 0;
  int64_t mtime_s = 0;
  CacheKind kind = CacheKind::nvrtc;  // entries and temps: the kind directory they are in
  std::string why;                    // odd and untrusted: what is wrong
};
// Everything under <root>/kernels, walked without following links:
//   entries    regular files kernels/<kind>/<shard>/<name> that are not temporary (names checked later),
//   temps      temporary files of a store in flight (or of a killed process) in the same places,
//   strays     regular files anywhere else: an older kiln's layout (kernels/<shard>/...), unknown
//              directories. They can never be looked up; eviction and verify remove them,
//   odd        links, FIFOs, sockets and devices anywhere: never followed or opened; removable (the name),
//   untrusted  directories (kernels/ itself included) that another user may have written (trust_problem):
//              not walked, not removed.
// A missing directory is empty.
struct Scan {
  std::vector<FileInfo> entries, temps, strays, odd, untrusted;
};
Scan scan(const fs::path& root);

int64_t now_s();

}  // namespace kiln::cache_files
