#include "support/dir_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

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
