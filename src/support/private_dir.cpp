#include "support/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace kiln::support {

Status make_private_dirs(const std::filesystem::path& dir, std::string_view what) {
  if (dir.empty()) return invalid_argument(fmt::format("{}: the directory name is empty", what));
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return io_error(fmt::format("{}: '{}' exists and is not a directory", what, dir.string()));
  }
  if (dir.has_parent_path() && dir.parent_path() != dir)
    KILN_RETURN_IF_ERROR(make_private_dirs(dir.parent_path(), what));
  // EEXIST: another thread or process created it first.
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return io_error(fmt::format("{}: cannot create '{}': {}", what, dir.string(), std::strerror(errno)));
  }
  return {};
}

Result<ScratchDir> ScratchDir::create(std::string_view prefix) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / (std::string(prefix) + "XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {  // mkdtemp makes it 0700
    return io_error(fmt::format("cannot create a scratch directory '{}': {}", tmpl, std::strerror(errno)));
  }
  return ScratchDir(tmpl);
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kiln::support
