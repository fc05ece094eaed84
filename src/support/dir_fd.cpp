#include "support/dir_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace kiln::support {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Fd open_subdir(int parent_fd, const std::string& name, bool create) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(parent_fd, name.c_str(), kFlags);
  if (fd < 0 && errno == ENOENT && create) {
    // EEXIST: another thread or process made it first; the open below still refuses a link.
    if (::mkdirat(parent_fd, name.c_str(), 0700) != 0 && errno != EEXIST) return Fd();
    fd = ::openat(parent_fd, name.c_str(), kFlags);
  }
  return Fd(fd);
}

Result<Fd> open_regular_beneath(const std::string& root, std::string_view relative) {
  const std::string shown(relative);
  if (relative.empty() || relative.front() == '/') {
    return invalid_argument(fmt::format("'{}' is not a relative path beneath '{}'", shown, root));
  }
  Fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.ok()) return not_found(fmt::format("cannot open the directory '{}': {}", root, std::strerror(errno)));
  // Why `name` in `parent` could not be opened as what was wanted: its kind when it exists.
  auto refuse = [&](int parent, const std::string& name, const char* wanted) -> Status {
    struct stat st {};
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return not_found(fmt::format("'{}': '{}' does not exist beneath '{}'", shown, name, root));
    }
    return invalid_argument(fmt::format("'{}': '{}' is {}, not {}{}", shown, name, file_type_name(st), wanted,
                                        S_ISLNK(st.st_mode) ? " (links are not followed)" : ""));
  };
  size_t start = 0;
  while (true) {
    const size_t slash = relative.find('/', start);
    const std::string name(relative.substr(start, slash == std::string_view::npos ? relative.npos : slash - start));
    if (name == "..") return invalid_argument(fmt::format("'{}' leaves '{}' ('..')", shown, root));
    if (slash == std::string_view::npos) {
      Fd f(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!f.ok()) return refuse(dir.get(), name, "a regular file");
      struct stat st {};
      if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return invalid_argument(fmt::format("'{}' is {}, not a regular file", shown, file_type_name(st)));
      }
      return f;
    }
    if (!name.empty() && name != ".") {
      Fd sub = open_subdir(dir.get(), name, /*create=*/false);
      if (!sub.ok()) return refuse(dir.get(), name, "a directory");
      dir = std::move(sub);
    }
    start = slash + 1;
  }
}

std::string file_type_name(const struct stat& st) {
  switch (st.st_mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "a file of unknown type";
  }
}

}  // namespace kiln::support
