// POSIX calls directly (not std::ofstream): O_EXCL, a file mode, fsync and close's error all matter here.
#include "support/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "support/dir_fd.h"

namespace kiln::support {
namespace {

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

std::string unique_temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  static std::atomic<uint64_t> threads{0};
  thread_local const uint64_t thread_number = threads.fetch_add(1);
  thread_local std::mt19937_64 random{std::random_device{}() ^ (uint64_t{static_cast<uint32_t>(::getpid())} << 32)};
  return fmt::format(".tmp.{}.{}.{}.{:06x}", ::getpid(), thread_number, counter.fetch_add(1), random() & 0xffffff);
}

bool is_temp_name(std::string_view file_name) { return file_name.find(".tmp.") != std::string_view::npos; }

Status write_file_atomic_at(int dir_fd, const std::string& name, std::string_view bytes,
                            const AtomicWriteOptions& options, const std::filesystem::path& shown) {
  std::string tmp;
  int fd = -1;
  // O_EXCL never opens someone else's file (nor follows a link planted at the name); a clash of the unique
  // suffix is practically impossible, but costs nothing to survive.
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
    tmp = name + unique_temp_suffix();
    fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  static_cast<mode_t>(options.mode));
    if (fd < 0 && errno != EEXIST) break;
  }
  const std::filesystem::path tmp_shown = shown.parent_path() / tmp;
  if (fd < 0) {
    return io_error(fmt::format("cannot write '{}': cannot create '{}': {}", shown.string(), tmp_shown.string(),
                                std::strerror(errno)));
  }
  Status s = write_all(fd, bytes);
  if (s.ok() && options.fsync && ::fsync(fd) != 0) s = io_error(std::strerror(errno));
  // close() can report a delayed write error (NFS): it must succeed before the rename publishes the file.
  if (::close(fd) != 0 && s.ok()) s = io_error(std::strerror(errno));
  // renameat replaces whatever is at the name (a link too, never what it points to).
  if (s.ok() && ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) s = io_error(std::strerror(errno));
  if (!s.ok()) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return io_error(fmt::format("cannot write '{}': {}", shown.string(), s.message()));
  }
  return {};
}

Status write_file_atomic(const std::filesystem::path& path, std::string_view bytes, const AtomicWriteOptions& options) {
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : ".";
  const int dir = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    return io_error(
        fmt::format("cannot write '{}': cannot open '{}': {}", path.string(), parent.string(), std::strerror(errno)));
  }
  // The rename would replace whatever is at the name: a FIFO or a device node (as root, `-o /dev/full`) must
  // not silently become a regular file. A link is followed for this check: one to a device is refused too.
  struct stat st {};
  Status s;
  if (::fstatat(dir, path.filename().c_str(), &st, 0) == 0 && !S_ISREG(st.st_mode)) {
    s = io_error(fmt::format("cannot write '{}': it is {}, not a regular file (kiln replaces only regular files)",
                             path.string(), file_type_name(st)));
  } else {
    s = write_file_atomic_at(dir, path.filename().string(), bytes, options, path);
  }
  ::close(dir);
  return s;
}

}  // namespace kiln::support
