// Files the commands write beside their stdout (--plot, --trace): checked before the command's work, so that
// a bad path fails in a moment rather than after minutes of profiling, and written whole or not at all.
#include "output_file.h"

#include <sys/stat.h>

#include <filesystem>

#include <fmt/format.h>

#include "support/atomic_file.h"
#include "support/dir_fd.h"

namespace kiln::cli {

std::string output_file_problem(std::string_view flag, const std::string& path,
                                const std::vector<std::string>& inputs) {
  if (path.empty()) return fmt::format("{} needs a file name", flag);
  struct stat out_st = {};
  if (::stat(path.c_str(), &out_st) != 0) {
    // A new file: its directory must exist (write_file_atomic would say so too, but only at the end).
    const std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      return fmt::format("{} '{}': the directory '{}' does not exist", flag, path, dir.string());
    return {};
  }
  if (!S_ISREG(out_st.st_mode)) {
    return fmt::format("{} '{}' is {}, not a regular file (only a regular file is replaced)", flag, path,
                       support::file_type_name(out_st));
  }
  for (const std::string& in : inputs) {
    struct stat in_st = {};
    if (::stat(in.c_str(), &in_st) == 0 && in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino)
      return fmt::format("{} '{}' is the input '{}': writing it would overwrite the input", flag, path, in);
  }
  return {};
}

Status write_output_file(const std::string& path, std::string_view bytes) {
  return support::write_file_atomic(path, bytes);
}

}  // namespace kiln::cli
