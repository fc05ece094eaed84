// The emu compiler: kernel text + the host side of the prelude -> a shared object built by the host C++
// compiler, cached on disk under a stable hash of everything that changes it, loaded with dlopen.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kiln/emu.h"
#include "runtime/emu/hash.h"
#include "runtime/emu/module.h"
#include "runtime/emu/templates.h"

extern char** environ;

namespace kiln::emu {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Part of every key: bump when the way a shared object is built changes.
constexpr const char* kFormat = "kiln-emu-so-v1";
const std::vector<std::string> kFlags = {"-std=c++20",         "-O2", "-fPIC", "-shared", "-fno-strict-aliasing",
                                         "-fvisibility=hidden"};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.{}.{}", getpid(), std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000,
                     counter++);
}

// Writes `content` to `path` through a temporary file in the same directory and a rename.
Status write_atomically(const fs::path& path, std::string_view content) {
  fs::path tmp = path;
  tmp += ".tmp." + unique_suffix();
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!f) return io_error(fmt::format("emu: cannot write {}", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return io_error(fmt::format("emu: cannot rename into {}", path.string()));
  }
  return {};
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (looked up in PATH) with its output captured in `log`.
Result<RunResult> run(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return Status(StatusCode::unsupported,
                  fmt::format("emu: cannot run the host C++ compiler '{}': {} (set KILN_HOST_CXX to a C++20 "
                              "compiler such as g++ or clang++)",
                              argv[0], std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.output = slurp(log);
  std::error_code ec;
  fs::remove(log, ec);
  return r;
}

std::mutex g_mu;
std::map<std::string, std::string> g_identities;                     // compiler -> its --version output
std::map<std::string, std::shared_ptr<const ModuleImpl>> g_modules;  // key -> loaded module

fs::path scratch_dir() {
  std::error_code ec;
  fs::path d = fs::temp_directory_path(ec);
  return ec ? fs::path("/tmp") : d;
}

Result<std::string> identity(const std::string& cxx) {
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_identities.find(cxx); it != g_identities.end()) return it->second;
  }
  KILN_ASSIGN_OR_RETURN(RunResult r, run({cxx, "--version"}, scratch_dir() / ("kiln-emu-version." + unique_suffix())));
  if (r.exit_code != 0) {
    return Status(StatusCode::unsupported, fmt::format("emu: the host C++ compiler '{}' failed to run ('{} --version' "
                                                       "exited with {}); set KILN_HOST_CXX",
                                                       cxx, cxx, r.exit_code));
  }
  std::lock_guard lock(g_mu);
  g_identities[cxx] = r.output;
  return r.output;
}

const std::string& templates_hash() {
  static const std::string h = [] {
    Hash128 hash;
    for (size_t i = 0; i < kEmbeddedTemplateCount; ++i) {
      const EmbeddedFile& f = kEmbeddedTemplates[i];
      hash.field(f.path).field(std::string_view(reinterpret_cast<const char*>(f.data), f.size));
    }
    return hash.hex();
  }();
  return h;
}

// The embedded templates, written once per template version under <cache>/include/<hash>/.
Result<fs::path> include_dir(const fs::path& cache) {
  fs::path dir = cache / "include" / templates_hash();
  std::error_code ec;
  for (size_t i = 0; i < kEmbeddedTemplateCount; ++i) {
    const EmbeddedFile& f = kEmbeddedTemplates[i];
    fs::path p = dir / f.path;
    std::string_view content(reinterpret_cast<const char*>(f.data), f.size);
    if (fs::exists(p, ec) && slurp(p) == content) continue;
    fs::create_directories(p.parent_path(), ec);
    KILN_RETURN_IF_ERROR(write_atomically(p, content));
  }
  return dir;
}

bool valid_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

Result<std::shared_ptr<const ModuleImpl>> load(const fs::path& so, const std::vector<std::string>& kernels,
                                               bool cached) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return io_error(fmt::format("emu: cannot load {}: {}", so.string(), dlerror()));
  auto m = std::make_shared<ModuleImpl>();
  m->handle = h;
  m->path = so.string();
  m->cached = cached;
  auto set_api = reinterpret_cast<void (*)(const kiln_emu_api*)>(dlsym(h, "kiln_emu_set_api"));
  if (!set_api) return io_error(fmt::format("emu: {} has no kiln_emu_set_api", so.string()));
  for (const auto& k : kernels) {
    KernelEntry e;
    e.invoke = reinterpret_cast<InvokeFn>(dlsym(h, ("kiln_emu_invoke_" + k).c_str()));
    e.params = reinterpret_cast<ParamsFn>(dlsym(h, ("kiln_emu_params_" + k).c_str()));
    if (!e.invoke || !e.params) return io_error(fmt::format("emu: {} lacks the entry of kernel '{}'", so.string(), k));
    m->kernels[k] = e;
  }
  set_api(runtime_api());
  return std::shared_ptr<const ModuleImpl>(std::move(m));
}

}  // namespace
}  // namespace detail

std::string host_compiler() {
  const char* v = std::getenv("KILN_HOST_CXX");
  return v && *v ? v : "c++";
}

Status check_host_compiler(const std::string& cxx) {
  auto id = detail::identity(cxx.empty() ? host_compiler() : cxx);
  return id.ok() ? Status{} : id.status();
}

std::string cache_dir() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return (fs::path(d) / "emu").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (fs::path(d) / "kiln" / "emu").string();
  if (const char* d = std::getenv("HOME"); d && *d) return (fs::path(d) / ".cache" / "kiln" / "emu").string();
  return (detail::scratch_dir() / "kiln-cache" / "emu").string();
}

Result<std::shared_ptr<const Module>> compile(const std::string& source, const std::vector<std::string>& kernels,
                                              const CompileOptions& options) {
  using namespace detail;
  namespace fs = std::filesystem;
  if (kernels.empty()) return invalid_argument("emu: compile needs at least one kernel name");
  for (const auto& k : kernels) {
    if (!valid_identifier(k)) return invalid_argument(fmt::format("emu: '{}' is not a kernel name", k));
  }
  if (options.source_name.find_first_of("\"\n\\") != std::string::npos) {
    return invalid_argument(
        fmt::format("emu: source name '{}' may not hold quotes, backslashes or newlines", options.source_name));
  }
  const std::string cxx = options.host_cxx.empty() ? host_compiler() : options.host_cxx;
  KILN_ASSIGN_OR_RETURN(std::string id, identity(cxx));

  std::string tu = fmt::format("#line 1 \"{}\"\n{}\n#line 1 \"kiln-emu-entries\"\nKILN_EMU_SET_API()\n",
                               options.source_name, source);
  for (const auto& k : kernels) tu += fmt::format("KILN_EMU_ENTRY({})\n", k);
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), options.extra_flags.begin(), options.extra_flags.end());

  Hash128 h;
  h.field(kFormat).field(std::to_string(KILN_EMU_ABI_VERSION)).field(templates_hash()).field(cxx).field(id);
  for (const auto& f : flags) h.field(f);
  h.field(tu);
  const std::string key = h.hex();

  {
    std::lock_guard lock(g_mu);
    if (auto it = g_modules.find(key); it != g_modules.end()) return std::shared_ptr<const Module>(it->second);
  }

  const fs::path cache = options.cache_dir.empty() ? fs::path(cache_dir()) : fs::path(options.cache_dir);
  const fs::path shard = cache / key.substr(0, 2);
  const fs::path so = shard / (key + ".so");
  std::error_code ec;
  fs::create_directories(shard, ec);
  if (ec) return io_error(fmt::format("emu: cannot create the cache directory {}: {}", shard.string(), ec.message()));

  std::shared_ptr<const ModuleImpl> module;
  if (fs::exists(so, ec)) {
    auto loaded = load(so, kernels, true);
    if (loaded.ok()) {
      module = *loaded;
    } else {
      fs::remove(so, ec);  // a bad entry is a miss
    }
  }
  if (!module) {
    KILN_ASSIGN_OR_RETURN(fs::path inc, include_dir(cache));
    const std::string suffix = unique_suffix();
    const fs::path src = shard / (key + ".tmp." + suffix + ".cpp");
    const fs::path tmp_so = shard / (key + ".tmp." + suffix + ".so");
    KILN_RETURN_IF_ERROR(write_atomically(src, tu));
    std::vector<std::string> argv{cxx};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"-I", inc.string(), "-o", tmp_so.string(), src.string()});
    auto r = run(argv, shard / (key + ".tmp." + suffix + ".log"));
    fs::remove(src, ec);
    if (!r.ok()) return r.status();
    if (r->exit_code != 0) {
      fs::remove(tmp_so, ec);
      std::string out = r->output.size() > 6000 ? r->output.substr(0, 6000) + "\n[...]" : r->output;
      return invalid_argument(
          fmt::format("emu: the host compiler failed on {} (exit {}):\n{}", options.source_name, r->exit_code, out));
    }
    fs::rename(tmp_so, so, ec);
    if (ec) return io_error(fmt::format("emu: cannot rename into {}: {}", so.string(), ec.message()));
    KILN_ASSIGN_OR_RETURN(module, load(so, kernels, false));
  }
  std::lock_guard lock(g_mu);
  auto [it, inserted] = g_modules.emplace(key, module);
  return std::shared_ptr<const Module>(it->second);
}

}  // namespace kiln::emu
