// Directories walked by file descriptor, never through a symbolic link: for trees such as the kernel cache,
// where a link planted below the root must not lead a read, a write or a delete out of it. The root is
// opened by its name (a link there is the user's own choice); every step below it is an openat() with
// O_NOFOLLOW, and files are then created, read, renamed and removed relative to the directory's descriptor.
#pragma once

#include <sys/stat.h>

#include <string>
#include <string_view>
#include <utility>

#include "kiln/status.h"

namespace kiln::support {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// openat(parent, name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); with `create`, a missing directory is made
// first with mode 0700. Fails (errno set, an invalid Fd) for a symbolic link, a non-directory or a missing
// name without `create`.
Fd open_subdir(int parent_fd, const std::string& name, bool create);

// Opens the regular file `relative` (a relative path, '/'-separated) beneath the directory `root` for
// reading, never leaving it: every component is opened with O_NOFOLLOW, so a symbolic link anywhere below
// `root` (to a file or through a folder) is refused rather than followed, as are "..", an absolute path,
// and a final name that is not a regular file (a FIFO is opened non-blocking, so it cannot hang the read).
// The error says which component is what ("'data/w.bin': 'data' is a symbolic link").
Result<Fd> open_regular_beneath(const std::string& root, std::string_view relative);

// What kind of file `st` is, for messages: "a symbolic link", "a FIFO", "a directory", ...
std::string file_type_name(const struct stat& st);

}  // namespace kiln::support
