// POSIX calls behind the cache's file handling. std::filesystem is used for paths and directory walks;
// open/read/utimensat/unlink directly, because the cache needs exact error handling and never follows a
// symlink it finds in its directory.
#include "cache/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "support/atomic_file.h"
#include "support/private_dir.h"

namespace kiln::cache_files {

Status make_dirs(const fs::path& dir) {
  if (dir.empty()) return invalid_argument("the kernel cache directory is empty (set KILN_CACHE_DIR)");
  return support::make_private_dirs(dir, "kernel cache");
}

ReadResult read_file(const fs::path& path, std::string& bytes, int64_t& mtime_s, uint64_t* inode) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ReadResult::missing : ReadResult::unreadable;
  struct stat st;
  ReadResult r = ReadResult::unreadable;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    mtime_s = st.st_mtime;
    if (inode) *inode = st.st_ino;
    // Read to end of file rather than trusting st_size: the length check in the header catches a file
    // that is shorter or longer than its writer meant.
    bytes.clear();
    bytes.reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      if (n == 0) {
        r = ReadResult::ok;
        break;
      }
      bytes.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return r;
}

namespace {

// A regular file's size and mtime by lstat: a symlink is never followed, so it cannot make the cache read
// or delete files elsewhere. Nothing for anything else, or for a file removed meanwhile.
std::optional<FileInfo> regular_file(const fs::path& p) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileInfo{p, static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtime)};
}

// Every regular file below `dir` (no symlinked directories followed), as strays.
void collect_strays(const fs::path& dir, std::vector<FileInfo>& strays) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto f = regular_file(it->path())) strays.push_back(std::move(*f));
  }
}

std::optional<CacheKind> kind_named(std::string_view name) {
  for (CacheKind k : kCacheKinds) {
    if (name == cache_kind_name(k)) return k;
  }
  return std::nullopt;
}

void scan_kind(const fs::path& kind_dir, CacheKind kind, Scan& out) {
  std::error_code ec;
  for (fs::directory_iterator shard(kind_dir, ec), end; !ec && shard != end; shard.increment(ec)) {
    std::error_code ec2;
    if (!shard->is_directory(ec2) || shard->is_symlink(ec2)) {
      if (auto f = regular_file(shard->path())) out.strays.push_back(std::move(*f));
      continue;
    }
    for (fs::directory_iterator f(shard->path(), ec2); !ec2 && f != end; f.increment(ec2)) {
      std::error_code ec3;
      if (f->is_directory(ec3) && !f->is_symlink(ec3)) {
        collect_strays(f->path(), out.strays);
        continue;
      }
      auto info = regular_file(f->path());
      if (!info) continue;
      info->kind = kind;
      (support::is_temp_name(f->path().filename().native()) ? out.temps : out.entries).push_back(std::move(*info));
    }
  }
}

}  // namespace

Scan scan(const fs::path& kernels_dir) {
  Scan out;
  std::error_code ec;
  for (fs::directory_iterator sub(kernels_dir, ec), end; !ec && sub != end; sub.increment(ec)) {
    std::error_code ec2;
    const bool dir = sub->is_directory(ec2) && !sub->is_symlink(ec2);
    if (auto kind = kind_named(sub->path().filename().native()); kind && dir) {
      scan_kind(sub->path(), *kind, out);
    } else if (dir) {
      collect_strays(sub->path(), out.strays);
    } else if (auto f = regular_file(sub->path())) {
      out.strays.push_back(std::move(*f));
    }
  }
  return out;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void touch(const fs::path& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

bool remove_file(const fs::path& path) { return ::unlink(path.c_str()) == 0; }

bool remove_if_same(const fs::path& path, uint64_t inode) {
  struct stat st;
  // A small window remains between lstat and unlink; closing it would need a lock, and losing the race
  // only costs one recompile.
  return ::lstat(path.c_str(), &st) == 0 && st.st_ino == inode && remove_file(path);
}

}  // namespace kiln::cache_files
