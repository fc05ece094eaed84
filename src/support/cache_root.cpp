#include "support/cache_root.h"

#include <filesystem>

#include "support/env.h"

namespace kiln::support {

std::optional<std::string> cache_root() {
  namespace fs = std::filesystem;
  if (auto d = env_string("KILN_CACHE_DIR")) return *d;
  if (auto x = env_string("XDG_CACHE_HOME")) return (fs::path(*x) / "kiln").string();
  if (auto h = env_string("HOME")) return (fs::path(*h) / ".cache" / "kiln").string();
  return std::nullopt;
}

}  // namespace kiln::support
