// POSIX calls behind the cache's file handling: openat/fstatat/unlinkat/renameat relative to directory
// descriptors, O_NOFOLLOW everywhere below the root, O_NONBLOCK on every open of a file (a FIFO at an
// entry's name must not hang a run). std::filesystem only for composing paths.
#include "cache/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "support/atomic_file.h"
#include "support/private_dir.h"

namespace kiln::cache_files {
namespace {

// A directory that could not be opened: where, why, and whether it simply does not exist.
struct DirError {
  fs::path at;
  std::string why;
  bool missing = false;
};

// Why `name` in `parent_fd` could not be opened as a directory (errno `err`), as "is a symbolic link...".
std::string open_problem(int parent_fd, const std::string& name, int err) {
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return fmt::format("cannot be created: {}", std::strerror(err));  // open_subdir's mkdirat failed
  }
  if (!S_ISDIR(st.st_mode)) {
    return fmt::format("is {}, not a directory (the kernel cache never follows a link)", support::file_type_name(st));
  }
  return fmt::format("cannot be opened: {}", std::strerror(err));
}

std::string untrusted_problem(int fd, bool any_owner) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return fmt::format("cannot be checked: {}", std::strerror(errno));
  std::string why = trust_problem(st, any_owner);
  return why.empty() ? why
                     : fmt::format(
                           "is not private ({}): the kernel cache reads and writes nothing below it "
                           "(make it this user's, mode 0700, or remove it)",
                           why);
}

std::optional<DirError> open_below(const fs::path& root, const fs::path& rel, bool create, bool any_owner,
                                   support::Fd& out) {
  if (root.empty()) return DirError{root, "is empty (set KILN_CACHE_DIR)"};
  support::Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.ok() && errno == ENOENT && create) {
    if (Status s = support::make_private_dirs(root, "kernel cache"); !s.ok()) {
      return DirError{root, fmt::format("cannot be created ({})", s.message())};
    }
    fd = support::Fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!fd.ok()) {
    const int err = errno;
    return DirError{root, fmt::format("cannot be opened: {}", std::strerror(err)), err == ENOENT};
  }
  if (std::string why = untrusted_problem(fd.get(), any_owner); !why.empty()) return DirError{root, why};
  fs::path at = root;
  for (const fs::path& part : rel) {
    at /= part;
    support::Fd sub = support::open_subdir(fd.get(), part.string(), create);
    if (!sub.ok()) {
      const int err = errno;
      return DirError{at, err == ENOENT ? "does not exist" : open_problem(fd.get(), part.string(), err), err == ENOENT};
    }
    if (std::string why = untrusted_problem(sub.get(), any_owner); !why.empty()) return DirError{at, why};
    fd = std::move(sub);
  }
  out = std::move(fd);
  return std::nullopt;
}

// The names in the directory open as `fd`, without "." and "..".
std::vector<std::string> names_in(int fd) {
  std::vector<std::string> out;
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (!d) {
    if (dup >= 0) ::close(dup);
    return out;
  }
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.emplace_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

std::optional<CacheKind> kind_named(const fs::path& name) {
  for (CacheKind k : kCacheKinds) {
    if (name == cache_kind_name(k)) return k;
  }
  return std::nullopt;
}

// A regular file's place: kernels/<kind>/<shard>/<name> is an entry or a temporary file, anything else a
// stray.
void classify(FileInfo f, Scan& out) {
  std::vector<fs::path> parts(f.rel.begin(), f.rel.end());
  std::optional<CacheKind> kind = parts.size() == 4 ? kind_named(parts[1]) : std::nullopt;
  if (!kind) {
    out.strays.push_back(std::move(f));
    return;
  }
  f.kind = *kind;
  (support::is_temp_name(parts[3].native()) ? out.temps : out.entries).push_back(std::move(f));
}

void walk(int dir_fd, const fs::path& root, const fs::path& rel, Scan& out);

// `name` in the directory `dir_fd` (which is root / rel): a regular file classified, a trusted directory
// walked, anything else odd.
void visit(int dir_fd, const fs::path& root, const fs::path& rel, const std::string& name, Scan& out) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // removed meanwhile
  FileInfo f;
  f.rel = rel / name;
  f.path = root / f.rel;
  f.bytes = static_cast<int64_t>(st.st_size);
  f.mtime_s = static_cast<int64_t>(st.st_mtime);
  if (S_ISREG(st.st_mode)) {
    classify(std::move(f), out);
  } else if (S_ISDIR(st.st_mode)) {
    support::Fd sub = support::open_subdir(dir_fd, name, false);
    f.why = sub.ok() ? untrusted_problem(sub.get(), false) : open_problem(dir_fd, name, errno);
    if (f.why.empty()) {
      walk(sub.get(), root, f.rel, out);
    } else {
      out.untrusted.push_back(std::move(f));
    }
  } else {
    f.why = fmt::format("{}, not a regular file (never {})", support::file_type_name(st),
                        S_ISLNK(st.st_mode) ? "followed" : "opened");
    out.odd.push_back(std::move(f));
  }
}

void walk(int dir_fd, const fs::path& root, const fs::path& rel, Scan& out) {
  for (const std::string& name : names_in(dir_fd)) visit(dir_fd, root, rel, name, out);
}

Status remove_at(int dir_fd, const std::string& name, const fs::path& shown) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Status{}
                           : io_error(fmt::format("cannot remove '{}': {}", shown.string(), std::strerror(errno)));
  }
  const bool dir = S_ISDIR(st.st_mode);
  if (!dir) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return io_error(fmt::format("cannot remove '{}': {}", shown.string(), std::strerror(errno)));
    }
    return {};
  }
  // Another process may store into the directory while it is emptied (a cache being cleared is still in
  // use): what appears after the listing makes the rmdir fail with ENOTEMPTY. Those are racing stores,
  // not an error: list again a few times, then leave the directory holding what keeps arriving.
  for (int attempt = 0; attempt < 4; ++attempt) {
    support::Fd sub = support::open_subdir(dir_fd, name, false);
    if (!sub.ok() && errno == ENOENT) return {};
    if (!sub.ok()) return io_error(fmt::format("cannot remove '{}': {}", shown.string(), std::strerror(errno)));
    for (const std::string& child : names_in(sub.get()))
      KILN_RETURN_IF_ERROR(remove_at(sub.get(), child, shown / child));
    if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return {};
    if (errno != ENOTEMPTY && errno != EEXIST) {
      return io_error(fmt::format("cannot remove '{}': {}", shown.string(), std::strerror(errno)));
    }
  }
  return {};
}

// Reads the rest of `fd`; false on a read error (errno set).
// Straight into `bytes` (an entry's cubin and PTX were copied twice on the way: through a stack buffer, then
// out of the entry), sized by fstat; a file that turns out longer or shorter is read to its end all the same.
bool read_all(int fd, std::string& bytes, size_t expected) {
  bytes.resize(expected + 1);  // one more: reading it means the file grew
  size_t got = 0;
  for (;;) {
    if (got == bytes.size()) bytes.resize(bytes.size() * 2);
    ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return true;
}

}  // namespace

std::string trust_problem(const struct stat& st, bool any_owner) {
  const uid_t me = ::geteuid();
  if (!any_owner && st.st_uid != me && st.st_uid != 0)
    return fmt::format("owned by uid {}, not this user's uid {}", st.st_uid, me);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return fmt::format("writable by {} (mode {:04o})", (st.st_mode & S_IWOTH) ? "others" : "its group",
                       st.st_mode & 07777);
  }
  return "";
}

Result<support::Fd> open_dir(const fs::path& root, const fs::path& rel, bool create, bool any_owner) {
  support::Fd fd;
  if (auto e = open_below(root, rel, create, any_owner, fd)) {
    std::string message = fmt::format("'{}' {}", e->at.string(), e->why);
    return e->missing ? not_found(std::move(message)) : io_error(std::move(message));
  }
  return fd;
}

ReadResult read_file(const fs::path& root, const fs::path& rel, std::string& bytes, bool any_owner) {
  ReadResult r;
  support::Fd dir;
  if (auto e = open_below(root, rel.parent_path(), false, any_owner, dir)) {
    if (!e->missing) r.code = ReadResult::unusable, r.why = fmt::format("'{}' {}", e->at.string(), e->why);
    return r;
  }
  const std::string name = rel.filename().string();
  auto fail = [&](ReadResult::Code code, std::string why) {
    r.code = code;
    r.why = std::move(why);
    return r;
  };
  struct stat st;
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? r : fail(ReadResult::bad, fmt::format("unreadable: {}", std::strerror(errno)));
  }
  r.inode = st.st_ino;
  if (!S_ISREG(st.st_mode)) {
    return fail(ReadResult::bad, fmt::format("{}, not a regular file (never {})", support::file_type_name(st),
                                             S_ISLNK(st.st_mode) ? "followed" : "opened"));
  }
  // O_NONBLOCK: were the file swapped for a FIFO after the fstatat, the open still returns at once.
  support::Fd fd(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok()) {
    return errno == ENOENT ? r : fail(ReadResult::bad, fmt::format("unreadable: {}", std::strerror(errno)));
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return fail(ReadResult::bad, "replaced while being read");
  r.inode = st.st_ino;
  r.mtime_s = st.st_mtime;
  if (std::string why = trust_problem(st, any_owner); !why.empty()) return fail(ReadResult::bad, "not private: " + why);
  if (!read_all(fd.get(), bytes, static_cast<size_t>(st.st_size))) {
    return fail(ReadResult::bad, fmt::format("read error: {}", std::strerror(errno)));
  }
  r.code = ReadResult::ok;
  return r;
}

Status write_file(const fs::path& root, const fs::path& rel, std::string_view bytes, bool fsync) {
  auto dir = open_dir(root, rel.parent_path(), /*create=*/true);
  if (!dir.ok()) return io_error(fmt::format("cannot write '{}': {}", (root / rel).string(), dir.status().message()));
  return support::write_file_atomic_at(dir->get(), rel.filename().string(), bytes, {.fsync = fsync, .mode = kFileMode},
                                       root / rel);
}

bool remove_file(const fs::path& root, const fs::path& rel, std::optional<uint64_t> inode) {
  support::Fd dir;
  if (open_below(root, rel.parent_path(), false, false, dir)) return false;
  const std::string name = rel.filename().string();
  struct stat st;
  // A small window remains between fstatat and unlinkat; closing it would need a lock, and losing the race
  // only costs one recompile.
  if (inode && (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_ino != *inode)) return false;
  return ::unlinkat(dir.get(), name.c_str(), 0) == 0;
}

bool is_regular_file(const fs::path& root, const fs::path& rel) {
  support::Fd dir;
  if (open_below(root, rel.parent_path(), false, false, dir)) return false;
  struct stat st;
  return ::fstatat(dir.get(), rel.filename().c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

void touch(const fs::path& root, const fs::path& rel) {
  support::Fd dir;
  if (open_below(root, rel.parent_path(), false, false, dir)) return;
  ::utimensat(dir.get(), rel.filename().c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

Status remove_tree(const fs::path& root, const fs::path& rel) {
  auto dir = open_dir(root, rel.parent_path(), false);
  if (!dir.ok()) return dir.status().code() == StatusCode::not_found ? Status{} : dir.status();
  return remove_at(dir->get(), rel.filename().string(), root / rel);
}

Scan scan(const fs::path& root) {
  Scan out;
  support::Fd dir;
  if (auto e = open_below(root, "", false, false, dir)) {
    if (!e->missing) {
      FileInfo f;
      f.path = e->at;
      f.why = e->why;
      out.untrusted.push_back(std::move(f));
    }
    return out;
  }
  visit(dir.get(), root, "", "kernels", out);  // kernels/ itself may be a link, or a file
  return out;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace kiln::cache_files
