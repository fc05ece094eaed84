// Directories only this user may enter: the kernel cache (whose files are code this user's processes will
// run, so no one else may plant files there) and private scratch space.
#pragma once

#include <filesystem>
#include <string>
#include <utility>

#include "kiln/status.h"

namespace kiln::support {

// Creates `dir` and any missing parents with mode 0700 (existing directories are left as they are).
// Errors name `what` ("kernel cache") and the directory.
Status make_private_dirs(const std::filesystem::path& dir, std::string_view what);

// A fresh directory of mode 0700 under $TMPDIR (else /tmp), removed with everything in it when the
// object is destroyed. For work that must leave nothing behind (a compile with the cache disabled).
class ScratchDir {
 public:
  // `prefix` starts the directory's name ("kiln-emu-").
  static Result<ScratchDir> create(std::string_view prefix);
  ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScratchDir& operator=(ScratchDir&&) = delete;
  ScratchDir(const ScratchDir&) = delete;
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  // Keeps the directory (it is no longer removed) and gives its path: a fresh, unpredictable, private place
  // for files meant to outlive the process (a failed kernel's source).
  std::filesystem::path keep() { return std::exchange(path_, {}); }

 private:
  explicit ScratchDir(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

}  // namespace kiln::support
