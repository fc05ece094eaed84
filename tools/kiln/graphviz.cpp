// Graphviz as a program, not a library: kiln's drawing stays a text format (DOT) that any Graphviz reads,
// and only `--format svg` needs `dot` installed. The source and the picture go through files in a fresh
// private directory, so no pipe can fill up and block either side.
#include "graphviz.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "support/env.h"

extern char** environ;

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A directory only this process uses, removed with everything in it when done.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "kiln-dot-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

Result<std::string> render_dot_svg(const std::string& dot_source) {
  const std::string dot = support::env_string("KILN_DOT").value_or("dot");
  ScratchDir dir;
  if (dir.path.empty())
    return Status(StatusCode::io_error, fmt::format("--format svg: cannot make a temporary "
                                                    "directory: {}",
                                                    std::strerror(errno)));
  const fs::path in = dir.path / "plan.dot", out = dir.path / "plan.svg", log = dir.path / "dot.log";
  {
    std::ofstream f(in, std::ios::binary);
    f << dot_source;
    if (!f) return Status(StatusCode::io_error, fmt::format("--format svg: cannot write '{}'", in.string()));
  }
  std::vector<std::string> argv{dot, "-Tsvg", in.string(), "-o", out.string()};
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return Status(StatusCode::unsupported,
                  fmt::format("--format svg needs Graphviz's '{}' program: {} (install the graphviz package, or "
                              "print --format dot and draw it elsewhere)",
                              dot, std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status(StatusCode::internal, fmt::format("'{} -Tsvg' failed on kiln's plan drawing: {}", dot, slurp(log)));
  }
  return slurp(out);
}

}  // namespace kiln::cli
