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

Status write_file_atomic(const std::filesystem::path& path, std::string_view bytes, const AtomicWriteOptions& options) {
  std::filesystem::path tmp;
  int fd = -1;
  // O_EXCL never opens someone else's file; a clash of the unique suffix is practically impossible, but
  // costs nothing to survive.
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
    tmp = path;
    tmp += unique_temp_suffix();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(options.mode));
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return io_error(
        fmt::format("cannot write '{}': cannot create '{}': {}", path.string(), tmp.string(), std::strerror(errno)));
  }
  Status s = write_all(fd, bytes);
  if (s.ok() && options.fsync && ::fsync(fd) != 0) s = io_error(std::strerror(errno));
  // close() can report a delayed write error (NFS): it must succeed before the rename publishes the file.
  if (::close(fd) != 0 && s.ok()) s = io_error(std::strerror(errno));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = io_error(std::strerror(errno));
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return io_error(fmt::format("cannot write '{}': {}", path.string(), s.message()));
  }
  return {};
}

}  // namespace kiln::support
