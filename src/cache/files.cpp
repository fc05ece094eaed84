// POSIX calls behind the cache's file handling. std::filesystem is used for paths and directory walks;
// open/write/rename/utimensat directly, because the cache needs O_EXCL, fsync and exact error handling.
#include "cache/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

namespace kiln::cache_files {

Status make_dirs(const fs::path& dir) {
  if (dir.empty()) return invalid_argument("the kernel cache directory is empty (set KILN_CACHE_DIR)");
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return io_error(fmt::format("kernel cache: '{}' exists and is not a directory", dir.string()));
  }
  if (dir.has_parent_path() && dir.parent_path() != dir) KILN_RETURN_IF_ERROR(make_dirs(dir.parent_path()));
  // EEXIST: another process created it first.
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return io_error(fmt::format("kernel cache: cannot create '{}': {}", dir.string(), std::strerror(errno)));
  }
  return {};
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

bool is_temp_name(std::string_view name) { return name.find(".tmp.") != std::string_view::npos; }

namespace {

std::string unique_suffix() {
  // pid + per-process counter + random bits: unique across processes, threads and a reused pid.
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format(".tmp.{}.{}{:x}", ::getpid(), counter.fetch_add(1), salt & 0xffffff);
}

Status write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(std::strerror(n < 0 ? errno : EIO));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

}  // namespace

Status write_atomic(const fs::path& final_path, std::string_view bytes, bool fsync) {
  fs::path tmp = final_path;
  tmp += unique_suffix();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return io_error(fmt::format("kernel cache: cannot create '{}': {}", tmp.string(), std::strerror(errno)));
  }
  Status s = write_all(fd, bytes);
  if (s.ok() && fsync && ::fsync(fd) != 0) s = io_error(std::strerror(errno));
  // close() can report a delayed write error (NFS): it must succeed before the rename publishes the file.
  if (::close(fd) != 0 && s.ok()) s = io_error(std::strerror(errno));
  if (s.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) s = io_error(std::strerror(errno));
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return io_error(fmt::format("kernel cache: cannot write '{}': {}", final_path.string(), s.message()));
  }
  return {};
}

void scan(const fs::path& kernels_dir, std::vector<FileInfo>& entries, std::vector<FileInfo>* temps) {
  std::error_code ec;
  for (fs::directory_iterator shard(kernels_dir, ec), end; !ec && shard != end; shard.increment(ec)) {
    std::error_code ec2;
    if (!shard->is_directory(ec2)) continue;
    for (fs::directory_iterator f(shard->path(), ec2); !ec2 && f != end; f.increment(ec2)) {
      struct stat st;
      // lstat: a symlink is never followed, so it cannot make the cache read or delete files elsewhere.
      if (::lstat(f->path().c_str(), &st) != 0) continue;  // removed meanwhile by another process
      if (!S_ISREG(st.st_mode)) continue;
      FileInfo info{f->path(), static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtime)};
      if (is_temp_name(f->path().filename().native())) {
        if (temps) temps->push_back(std::move(info));
      } else {
        entries.push_back(std::move(info));
      }
    }
  }
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
