// The emu compiler: kernel text + the host side of the prelude -> a shared object built by the host C++
// compiler, kept in the kernel cache (include/kiln/cache.h, kind emu) and loaded with dlopen.
//
// A cached shared object is an ordinary cache entry: its bytes are read and checked (length, key, XXH3-128
// checksum) by KernelCache::lookup, and exactly those checked bytes are what dlopen maps: they are copied
// into an anonymous memory file (memfd) and loaded from /proc/self/fd/<n>, so a truncated or corrupted
// file in the cache directory is never mapped (mapping one used to kill every later run with SIGBUS) and
// nothing can change between the check and the load. Compiles happen in a private scratch directory that
// is removed afterwards: the cache directory only ever holds whole entries.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/cache.h"
#include "kiln/emu.h"
#include "runtime/emu/module.h"
#include "runtime/emu/templates.h"
#include "support/atomic_file.h"
#include "support/cache_root.h"
#include "support/env.h"
#include "support/hash.h"
#include "support/private_dir.h"
#include "support/stopwatch.h"

extern char** environ;

namespace kiln::emu {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Part of every key: bump when the way a shared object is built changes.
constexpr const char* kFormat = "kiln-emu-so-v2";
// The machine the shared objects run on, also part of every key: a cache shared between an x86-64 and an
// aarch64 host (an NFS home) holds both, where the compilers' --version output is often the same text.
#if defined(__x86_64__)
constexpr const char* kHostArch = "x86_64";
#elif defined(__aarch64__)
constexpr const char* kHostArch = "aarch64";
#else
constexpr const char* kHostArch = "unknown";
#endif
const std::vector<std::string> kFlags = {"-std=c++20",         "-O2", "-fPIC", "-shared", "-fno-strict-aliasing",
                                         "-fvisibility=hidden"};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (looked up in PATH) with its output captured in `log`.
Result<RunResult> run(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
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

// A loaded module with the translation unit it was built from: the in-process map is keyed by the cache
// key, and a hit also compares the whole unit, so even a hash collision cannot hand out the wrong code.
struct Loaded {
  std::string unit;
  std::shared_ptr<const ModuleImpl> module;
};

std::mutex g_mu;
std::map<std::string, std::string> g_identities;  // compiler -> its --version output
std::map<std::string, Loaded> g_modules;          // key hex -> loaded module

Result<std::string> identity(const std::string& cxx) {
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_identities.find(cxx); it != g_identities.end()) return it->second;
  }
  KILN_ASSIGN_OR_RETURN(support::ScratchDir scratch, support::ScratchDir::create("kiln-emu-"));
  KILN_ASSIGN_OR_RETURN(RunResult r, run({cxx, "--version"}, scratch.path() / "version.log"));
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
    support::Hasher hash;
    for (size_t i = 0; i < kEmbeddedTemplateCount; ++i) {
      const EmbeddedFile& f = kEmbeddedTemplates[i];
      hash.field(f.path).field(std::string_view(reinterpret_cast<const char*>(f.data), f.size));
    }
    return hash.digest().hex();
  }();
  return h;
}

// The embedded templates, written under `dir` for one compile.
Status write_templates(const fs::path& dir) {
  for (size_t i = 0; i < kEmbeddedTemplateCount; ++i) {
    const EmbeddedFile& f = kEmbeddedTemplates[i];
    const fs::path p = dir / f.path;
    KILN_RETURN_IF_ERROR(support::make_private_dirs(p.parent_path(), "emu"));
    KILN_RETURN_IF_ERROR(
        support::write_file_atomic(p, std::string_view(reinterpret_cast<const char*>(f.data), f.size)));
  }
  return {};
}

bool valid_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// dlopen + the entry points of `kernels`. `shown` is the path reported (so_path(), error messages).
Result<std::shared_ptr<const ModuleImpl>> load(const fs::path& so, const std::vector<std::string>& kernels, bool cached,
                                               const std::string& shown, std::string warning = {}) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return io_error(fmt::format("emu: cannot load {}: {}", shown, dlerror()));
  auto m = std::make_shared<ModuleImpl>();
  m->handle = h;
  m->path = shown;
  m->cached = cached;
  m->warning = std::move(warning);
  auto set_api = reinterpret_cast<void (*)(const kiln_emu_api*)>(dlsym(h, "kiln_emu_set_api"));
  if (!set_api) return io_error(fmt::format("emu: {} has no kiln_emu_set_api", shown));
  for (const auto& k : kernels) {
    KernelEntry e;
    e.invoke = reinterpret_cast<InvokeFn>(dlsym(h, ("kiln_emu_invoke_" + k).c_str()));
    e.params = reinterpret_cast<ParamsFn>(dlsym(h, ("kiln_emu_params_" + k).c_str()));
    if (!e.invoke || !e.params) return io_error(fmt::format("emu: {} lacks the entry of kernel '{}'", shown, k));
    m->kernels[k] = e;
  }
  set_api(runtime_api());
  return std::shared_ptr<const ModuleImpl>(std::move(m));
}

Status write_fd(int fd, const std::vector<uint8_t>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(fmt::format("emu: cannot write a shared object to memory: {}", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return {};
}

// Loads a checked cache entry's shared object from memory. The memory file stays open for the life of
// the process, as modules do: were it closed, a later memfd could reuse its number, and dlopen of the same
// "/proc/self/fd/<n>" name would return the old library. Without memfd (or /proc), a private scratch copy.
Result<std::shared_ptr<const ModuleImpl>> load_entry(const CacheEntry& e, const std::vector<std::string>& kernels) {
  std::error_code ec;
  if (int fd = static_cast<int>(::memfd_create("kiln-emu-so", MFD_CLOEXEC)); fd >= 0) {
    if (fs::exists("/proc/self/fd", ec)) {
      Status w = write_fd(fd, e.cubin);
      auto m = w.ok() ? load(fmt::format("/proc/self/fd/{}", fd), kernels, true, e.path)
                      : Result<std::shared_ptr<const ModuleImpl>>(w);
      if (!m.ok()) ::close(fd);
      return m;
    }
    ::close(fd);
  }
  KILN_ASSIGN_OR_RETURN(support::ScratchDir scratch, support::ScratchDir::create("kiln-emu-"));
  const fs::path so = scratch.path() / "module.so";
  KILN_RETURN_IF_ERROR(support::write_file_atomic(
      so, std::string_view(reinterpret_cast<const char*>(e.cubin.data()), e.cubin.size()), {.mode = 0600}));
  return load(so, kernels, true, e.path);  // the mapping outlives the scratch copy
}

// The compiler run: `tu` -> a shared object in `scratch`, its bytes in `so_bytes`.
Status build(const std::string& cxx, const std::vector<std::string>& flags, const std::string& tu,
             const std::string& source_name, const fs::path& scratch, std::string& so_bytes) {
  const fs::path inc = scratch / "include", src = scratch / "unit.cpp", so = scratch / "module.so";
  KILN_RETURN_IF_ERROR(write_templates(inc));
  KILN_RETURN_IF_ERROR(support::write_file_atomic(src, tu, {.mode = 0600}));
  std::vector<std::string> argv{cxx};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-I", inc.string(), "-o", so.string(), src.string()});
  KILN_ASSIGN_OR_RETURN(RunResult r, run(argv, scratch / "compiler.log"));
  if (r.exit_code != 0) {
    std::string out = r.output.size() > 6000 ? r.output.substr(0, 6000) + "\n[...]" : r.output;
    return invalid_argument(
        fmt::format("emu: the host compiler failed on {} (exit {}):\n{}", source_name, r.exit_code, out));
  }
  so_bytes = slurp(so);
  if (so_bytes.empty())
    return io_error(fmt::format("emu: the host compiler wrote no shared object for {}", source_name));
  return {};
}

}  // namespace
}  // namespace detail

std::string host_compiler() { return support::env_string("KILN_HOST_CXX").value_or("c++"); }

Status check_host_compiler(const std::string& cxx) {
  auto id = detail::identity(cxx.empty() ? host_compiler() : cxx);
  return id.ok() ? Status{} : id.status();
}

std::string cache_dir() { return support::cache_root().value_or(""); }

namespace {

Status check_request(const std::vector<std::string>& kernels, const CompileOptions& options) {
  if (kernels.empty()) return invalid_argument("emu: compile needs at least one kernel name");
  std::set<std::string> seen;
  for (const auto& k : kernels) {
    if (!detail::valid_identifier(k)) return invalid_argument(fmt::format("emu: '{}' is not a kernel name", k));
    // Two entries of one name in one unit would be one symbol: one kernel silently run for the other.
    if (!seen.insert(k).second) return invalid_argument(fmt::format("emu: kernel '{}' is named twice", k));
  }
  if (options.source_name.find_first_of("\"\n\\") != std::string::npos) {
    return invalid_argument(
        fmt::format("emu: source name '{}' may not hold quotes, backslashes or newlines", options.source_name));
  }
  return {};
}

// Everything that changes the shared object, in one fixed order (docs/cache.md, "Keys").
KeyManifest manifest_of(const std::string& cxx, const std::string& id, const std::vector<std::string>& flags,
                        const std::string& tu) {
  KeyManifest m;
  m.add("emu-format", detail::kFormat);
  m.add("emu-abi", std::to_string(KILN_EMU_ABI_VERSION));
  m.add("host-arch", detail::kHostArch);
  m.add("templates", detail::templates_hash());
  m.add("cxx", cxx);
  m.add_hashed("cxx-version", id);
  std::string all;
  for (const auto& f : flags) all += f + " ";
  m.add("flags", all);
  m.add_hashed("unit", tu);
  return m;
}

}  // namespace

Result<std::shared_ptr<const Module>> compile(const std::string& source, const std::vector<std::string>& kernels,
                                              const CompileOptions& options) {
  using namespace detail;
  KILN_RETURN_IF_ERROR(check_request(kernels, options));
  const std::string cxx = options.host_cxx.empty() ? host_compiler() : options.host_cxx;
  KILN_ASSIGN_OR_RETURN(std::string id, identity(cxx));

  std::string tu = fmt::format("#line 1 \"{}\"\n{}\n#line 1 \"kiln-emu-entries\"\nKILN_EMU_SET_API()\n",
                               options.source_name, source);
  for (const auto& k : kernels) tu += fmt::format("KILN_EMU_ENTRY({})\n", k);
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  const KeyManifest manifest = manifest_of(cxx, id, flags, tu);
  const CacheKey key = manifest.key();
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_modules.find(key.hex()); it != g_modules.end() && it->second.unit == tu) {
      return std::shared_ptr<const Module>(it->second.module);
    }
  }

  KILN_ASSIGN_OR_RETURN(CacheConfig config, CacheConfig::from_env(options.cache_dir));
  KILN_ASSIGN_OR_RETURN(KernelCache cache, KernelCache::open(std::move(config)));
  std::shared_ptr<const ModuleImpl> module;
  if (std::optional<CacheEntry> hit = cache.lookup(key, CacheKind::emu)) {
    auto loaded = load_entry(*hit, kernels);
    if (loaded.ok()) {
      module = *loaded;
    } else {
      cache.remove_bad(key, CacheKind::emu);  // intact bytes that do not load (or lack an entry): rebuild
    }
  }
  if (!module) {
    if (cache.config().assert_hit) return cache.miss_error(options.source_name, key);
    if (cache.config().save_source) KILN_RETURN_IF_ERROR(cache.save_source(key, tu));
    KILN_ASSIGN_OR_RETURN(support::ScratchDir scratch, support::ScratchDir::create("kiln-emu-"));
    const support::Stopwatch compile_time;
    std::string so_bytes;
    KILN_RETURN_IF_ERROR(build(cxx, flags, tu, options.source_name, scratch.path(), so_bytes));
    CacheEntry e;
    e.kernel_name = options.source_name;
    e.arch = kHostArch;
    e.cubin.assign(so_bytes.begin(), so_bytes.end());
    e.info.compile_ms = compile_time.ms();
    e.manifest = manifest.text();
    // A store that fails (a full disk, a directory without write permission or not private) costs later
    // runs a compile, not this one its kernels: the module is loaded all the same, with a warning.
    const Status store = cache.store(key, e, CacheKind::emu);
    // Read-only: nothing is stored, but a directory the lookup could not use is worth a warning too.
    const std::string problem = !store.ok() ? store.message() : cache.config().read_only ? cache.problem() : "";
    std::string warning;
    if (!problem.empty()) {
      warning = fmt::format("emu: {} was compiled but not cached ({}): later runs compile it again",
                            options.source_name, problem);
    }
    // Loaded from the scratch file it was built as (the mapping outlives the file); reported as the cache
    // entry when there is one.
    const bool stored = store.ok() && !cache.config().read_only && !cache.config().disabled;
    const fs::path so = scratch.path() / "module.so";
    KILN_ASSIGN_OR_RETURN(
        module, load(so, kernels, false, stored ? cache.entry_path(key, CacheKind::emu) : so.string(), warning));
  }
  std::lock_guard lock(g_mu);
  auto [it, inserted] = g_modules.try_emplace(key.hex(), Loaded{tu, module});
  return std::shared_ptr<const Module>(it->second.unit == tu ? it->second.module : module);
}

}  // namespace kiln::emu
