// The NVRTC wrapper (codegen/nvrtc.h): dlopen'ed NVRTC, in-memory headers, one fixed option preamble,
// ptxas-info parsing, failed sources saved for debugging.
#include "codegen/nvrtc.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <regex>
#include <shared_mutex>

#include <fmt/format.h>

#include "codegen/embedded_headers.h"
#include "support/atomic_file.h"
#include "support/env.h"
#include "support/hash.h"
#include "support/private_dir.h"

#ifdef KILN_HAVE_NVRTC_HEADER
#include <nvrtc.h>  // types and enum values only: the functions come from dlsym
#endif

namespace kiln::codegen {
namespace {

namespace fs = std::filesystem;

std::string_view view(const EmbeddedFile& f) { return {reinterpret_cast<const char*>(f.data), f.size}; }

// (The helpers below serve the NVRTC compile path only: a build without the CUDA toolkit leaves them unused.)

// Keeps the head of a long log (the first errors matter; later ones are mostly consequences), without
// NVRTC's "creating/using precompiled header file" notes.
[[maybe_unused]] std::string trim_log(std::string_view full, size_t max_lines = 40, size_t max_chars = 6000) {
  std::string kept;
  for (size_t pos = 0; pos < full.size();) {
    size_t nl = full.find('\n', pos);
    nl = nl == std::string_view::npos ? full.size() : nl + 1;
    std::string_view line = full.substr(pos, nl - pos);
    if (line.find("precompiled header file") == std::string_view::npos) kept += line;
    pos = nl;
  }
  std::string_view log = kept;
  while (!log.empty() && (log.back() == '\n' || log.back() == '\0' || log.back() == ' ')) log.remove_suffix(1);
  size_t lines = 0, pos = 0;
  while (pos < log.size() && lines < max_lines && pos < max_chars) {
    size_t nl = log.find('\n', pos);
    pos = nl == std::string_view::npos ? log.size() : nl + 1;
    ++lines;
  }
  if (pos >= log.size()) return std::string(log);
  pos = std::min(pos, max_chars);
  size_t rest = static_cast<size_t>(std::count(log.begin() + static_cast<std::ptrdiff_t>(pos), log.end(), '\n')) + 1;
  return fmt::format("{}... ({} more lines)", log.substr(0, pos), rest);
}

// "sm_" + 2 or 3 digits + an optional 'a' (arch-specific) or 'f' (family) suffix: the syntax alone, checked
// before NVRTC is loaded. The number is checked against NVRTC's list after.
[[maybe_unused]] bool parse_arch(const std::string& arch, int* sm, char* suffix) {
  static const std::regex re("sm_([0-9]{2,3})([af]?)");
  std::smatch m;
  if (!std::regex_match(arch, m, re)) return false;
  *sm = std::stoi(m[1]);
  *suffix = m[2].length() ? m[2].str()[0] : '\0';
  return true;
}

[[maybe_unused]] Status bad_arch(const std::string& arch, const std::string& why) {
  return invalid_argument(
      fmt::format("NVRTC arch '{}': {}; expected an exact sm_XX such as sm_80, sm_86, sm_89, "
                  "sm_90 or sm_90a (kiln kernels need sm_80 or newer)",
                  arch, why));
}

}  // namespace

// ---- ptxas info -----------------------------------------------------------------------------------------

std::vector<PtxasFunctionInfo> parse_ptxas_info(std::string_view log) {
  // Formats (NVRTC 12.x/13.x):
  //   ptxas info    : Compiling entry function 'k' for 'sm_80'
  //   ptxas info    : Function properties for k
  //       16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
  //   ptxas info    : Used 30 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]
  // "Function properties" also appears for non-entry functions; "Used" follows its entry's "Compiling".
  static const std::regex compiling(R"(Compiling entry function '([^']+)' for '([^']+)')");
  static const std::regex properties(R"(Function properties for (\S+))");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::vector<PtxasFunctionInfo> out;
  ptrdiff_t entry = -1, props = -1;  // the entry being compiled, the function whose properties follow
  auto find = [&](const std::string& name) -> ptrdiff_t {
    for (size_t i = out.size(); i-- > 0;)
      if (out[i].name == name) return static_cast<ptrdiff_t>(i);
    return -1;
  };
  size_t pos = 0;
  while (pos < log.size()) {
    size_t nl = log.find('\n', pos);
    if (nl == std::string_view::npos) nl = log.size();
    const std::string line(log.substr(pos, nl - pos));
    pos = nl + 1;
    std::smatch m;
    if (std::regex_search(line, m, compiling)) {
      entry = find(m[1]);
      if (entry < 0 || !out[static_cast<size_t>(entry)].arch.empty()) {
        out.push_back({m[1], "", true});
        entry = static_cast<ptrdiff_t>(out.size()) - 1;
      }
      out[static_cast<size_t>(entry)].arch = m[2];
      out[static_cast<size_t>(entry)].entry = true;
    } else if (std::regex_search(line, m, properties)) {
      props = find(m[1]);
      if (props < 0) {
        out.push_back({m[1], "", false});
        props = static_cast<ptrdiff_t>(out.size()) - 1;
      }
    } else if (std::regex_search(line, m, frame)) {
      if (props >= 0) {
        auto& f = out[static_cast<size_t>(props)];
        f.stack_bytes = std::stoi(m[1]);
        f.spill_store_bytes = std::stoi(m[2]);
        f.spill_load_bytes = std::stoi(m[3]);
      }
      props = -1;
    } else if (std::regex_search(line, m, used)) {
      if (entry >= 0) {
        auto& f = out[static_cast<size_t>(entry)];
        f.registers = std::stoi(m[1]);
        if (std::regex_search(line, m, smem)) f.shared_bytes = std::stoi(m[1]);
      }
      entry = -1;
    }
  }
  return out;
}

// ---- hashes and versions --------------------------------------------------------------------------------

std::string templates_hash() {
  static const std::string hash = [] {
    support::Hasher h;  // each field with its length first, so ("ab", "c") and ("a", "bc") differ
    for (const auto* table : {kEmbeddedTemplates, kEmbeddedCudaHeaders}) {
      for (const EmbeddedFile* f = table; f->path; ++f) h.field(f->path).field(view(*f));
    }
    return h.digest().hex();
  }();
  return hash;
}

std::string nvrtc_build_version() {
#ifdef KILN_NVRTC_BUILD_VERSION
  return KILN_NVRTC_BUILD_VERSION;
#else
  return "none";
#endif
}

std::vector<std::string> nvrtc_preamble(const std::string& arch) {
  // Same options, same order, for every kernel: automatic PCH is reused only across identical option sets.
  // No --use_fast_math: numerics stay IEEE except where a kernel calls __expf & co. explicitly.
  return {"-arch=" + arch,      "-std=c++20", "-default-device",    "-lineinfo",
          "--ptxas-options=-v", "-pch",       "--pch-verbose=false"};
}

#ifndef KILN_HAVE_NVRTC_HEADER

bool nvrtc_loaded() { return false; }
Result<std::string> nvrtc_version_string() { return unsupported("kiln was built without the CUDA toolkit (NVRTC)"); }
std::vector<std::string> supported_archs() { return {}; }
Result<CompiledKernel> nvrtc_compile(std::string_view, const NvrtcOptions&) {
  return unsupported("kiln was built without the CUDA toolkit: NVRTC compilation is not available");
}

#else

// ---- loading --------------------------------------------------------------------------------------------
namespace {

// The NVRTC functions kiln calls, resolved with dlsym.
struct Api {
  // One function per line, by hand: clang-format reflows this list differently on every run.
  // clang-format off
#define KILN_NVRTC_FUNCTIONS(X)  \
  X(nvrtcVersion)                \
  X(nvrtcGetNumSupportedArchs)   \
  X(nvrtcGetSupportedArchs)      \
  X(nvrtcCreateProgram)          \
  X(nvrtcDestroyProgram)         \
  X(nvrtcCompileProgram)         \
  X(nvrtcGetPTXSize)             \
  X(nvrtcGetPTX)                 \
  X(nvrtcGetCUBINSize)           \
  X(nvrtcGetCUBIN)               \
  X(nvrtcGetProgramLogSize)      \
  X(nvrtcGetProgramLog)          \
  X(nvrtcGetErrorString)         \
  X(nvrtcGetPCHHeapSize)         \
  X(nvrtcSetPCHHeapSize)         \
  X(nvrtcGetPCHCreateStatus)     \
  X(nvrtcGetPCHHeapSizeRequired)
  // clang-format on
#define KILN_NVRTC_MEMBER(f) decltype(&::f) f = nullptr;
  KILN_NVRTC_FUNCTIONS(KILN_NVRTC_MEMBER)
#undef KILN_NVRTC_MEMBER
  std::vector<int> archs;  // nvrtcGetSupportedArchs: 75, 80, 86, ...
  std::string version;     // "13.0"
};

std::once_flag g_load_once;
std::atomic<bool> g_loaded{false};
Api g_api;
Status g_load_status;
// Compiles hold it shared; growing the PCH heap, which frees the old heap, holds it exclusively.
std::shared_mutex g_pch_mu;

// Opens one candidate and resolves every function; an empty string on success, else why not.
std::string try_open(const std::string& path, Api* api) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return e ? e : "dlopen failed";
  }
#define KILN_NVRTC_RESOLVE(f)                                \
  api->f = reinterpret_cast<decltype(&::f)>(dlsym(h, #f));   \
  if (!api->f) {                                             \
    dlclose(h);                                              \
    return "has no " #f " (kiln needs NVRTC 12.8 or newer)"; \
  }
  KILN_NVRTC_FUNCTIONS(KILN_NVRTC_RESOLVE)
#undef KILN_NVRTC_RESOLVE
  return "";  // kept open for the life of the process
}

void load() {
  std::vector<std::string> candidates;
  if (auto env = support::env_string("KILN_NVRTC_LIBRARY")) candidates.push_back(*env);
  candidates.push_back(KILN_NVRTC_LIBRARY_PATH);
  candidates.push_back(KILN_NVRTC_SONAME);
  candidates.push_back("libnvrtc.so");
  std::string tried;
  for (const auto& c : candidates) {
    Api api;
    std::string why = try_open(c, &api);
    if (why.empty()) {
      int major = 0, minor = 0, n = 0;
      api.nvrtcVersion(&major, &minor);
      api.version = fmt::format("{}.{}", major, minor);
      if (api.nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
        api.archs.resize(static_cast<size_t>(n));
        api.nvrtcGetSupportedArchs(api.archs.data());
      }
      g_api = std::move(api);
      g_loaded = true;
      return;
    }
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", c, why);
  }
  g_load_status =
      unsupported(fmt::format("NVRTC not found: tried {}; set KILN_NVRTC_LIBRARY to the path of "
                              "libnvrtc.so (CUDA 12.8 or newer)",
                              tried));
}

Result<const Api*> api() {
  std::call_once(g_load_once, load);
  if (!g_loaded) return g_load_status;
  return &g_api;
}

// The embedded headers as NVRTC wants them: parallel arrays of names and NUL-terminated contents.
struct Headers {
  std::vector<const char*> names, contents;
};
const Headers& headers() {
  static const Headers h = [] {
    Headers r;
    for (const auto* table : {kEmbeddedTemplates, kEmbeddedCudaHeaders}) {
      for (const EmbeddedFile* f = table; f->path; ++f) {
        r.names.push_back(f->path);
        r.contents.push_back(reinterpret_cast<const char*>(f->data));
      }
    }
    return r;
  }();
  return h;
}

// Writes the failing source (and the full log) where a developer can find them; the path, or why not. The
// place is a fresh directory of mode 0700 under $TMPDIR (kiln-failed-XXXXXX/, mkdtemp): a predictable
// name in a shared /tmp could be taken, or linked elsewhere, by another user first, and the source is this
// user's to read.
std::string save_failed(std::string_view source, const std::vector<std::string>& opts, std::string_view log) {
  std::string all(source);
  for (const auto& o : opts) all += '\0' + o;
  auto dir = support::ScratchDir::create("kiln-failed-");
  if (!dir.ok()) return "(could not save the source: " + dir.status().message() + ")";
  const fs::path path = dir->keep() / fmt::format("{}.cu", support::xxh3_128(all).hex());
  auto write = [](const fs::path& p, std::string_view content) {
    return support::write_file_atomic(p, content, {.mode = 0600}).ok();
  };
  std::string log_text = "options:";
  for (const auto& o : opts) log_text += " " + o;
  log_text += "\n" + std::string(log);
  if (!write(path, source)) return "(could not save the source under " + path.parent_path().string() + ")";
  fs::path log_path = path;
  log_path.replace_extension(".log");
  write(log_path, log_text);
  return path.string();
}

// nvrtcDestroyProgram on every path out.
struct ProgramGuard {
  const Api* a;
  nvrtcProgram p = nullptr;
  ~ProgramGuard() {
    if (p) a->nvrtcDestroyProgram(&p);
  }
};

}  // namespace

bool nvrtc_loaded() { return g_loaded.load(); }

Result<std::string> nvrtc_version_string() {
  KILN_ASSIGN_OR_RETURN(const Api* a, api());
  return a->version;
}

std::vector<std::string> supported_archs() {
  auto a = api();
  if (!a.ok()) return {};
  std::vector<std::string> out;
  for (int sm : (*a)->archs) {
    if (sm < 80) continue;
    out.push_back(fmt::format("sm_{}", sm));
    if (sm >= 90) out.push_back(fmt::format("sm_{}a", sm));
  }
  return out;
}

Result<CompiledKernel> nvrtc_compile(std::string_view source, const NvrtcOptions& opts) {
  int sm = 0;
  char suffix = 0;
  if (!parse_arch(opts.arch, &sm, &suffix)) return bad_arch(opts.arch, "not of the form sm_XX");
  if (sm < 80) return bad_arch(opts.arch, "older than sm_80");
  if ((suffix == 'a' && sm < 90) || (suffix == 'f' && sm < 100)) return bad_arch(opts.arch, "no such variant");
  KILN_ASSIGN_OR_RETURN(const Api* a, api());
  if (std::find(a->archs.begin(), a->archs.end(), sm) == a->archs.end()) {
    return bad_arch(opts.arch, fmt::format("not supported by NVRTC {}", a->version));
  }

  std::vector<std::string> options = nvrtc_preamble(opts.arch);
  options.insert(options.end(), opts.extra.begin(), opts.extra.end());
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  const std::string src(source);  // NUL-terminated
  const Headers& hs = headers();

  const auto t0 = std::chrono::steady_clock::now();
  ProgramGuard prog{a};
  CompiledKernel out;
  size_t pch_heap_needed = 0;
  {
    std::shared_lock lock(g_pch_mu);
    nvrtcResult rc = a->nvrtcCreateProgram(&prog.p, src.c_str(), opts.source_name.c_str(),
                                           static_cast<int>(hs.names.size()), hs.contents.data(), hs.names.data());
    if (rc != NVRTC_SUCCESS) {
      return Status(StatusCode::internal, fmt::format("nvrtcCreateProgram: {}", a->nvrtcGetErrorString(rc)));
    }
    rc = a->nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());
    size_t n = 0;
    a->nvrtcGetProgramLogSize(prog.p, &n);
    out.log.resize(n);
    if (n) a->nvrtcGetProgramLog(prog.p, out.log.data());
    while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
    if (rc == NVRTC_ERROR_INVALID_OPTION) {
      return invalid_argument(
          fmt::format("NVRTC rejected the options [{}]: {}", fmt::join(options, " "), trim_log(out.log)));
    }
    if (rc != NVRTC_SUCCESS) {
      return Status(StatusCode::internal, fmt::format("NVRTC failed to compile {} for {} ({}):\n{}\nsource saved to {}",
                                                      opts.source_name, opts.arch, a->nvrtcGetErrorString(rc),
                                                      trim_log(out.log), save_failed(source, options, out.log)));
    }
    if (a->nvrtcGetPCHCreateStatus(prog.p) == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
      a->nvrtcGetPCHHeapSizeRequired(prog.p, &pch_heap_needed);
    }
    a->nvrtcGetPTXSize(prog.p, &n);
    out.ptx.resize(n);
    a->nvrtcGetPTX(prog.p, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
    a->nvrtcGetCUBINSize(prog.p, &n);
    out.cubin.resize(n);
    a->nvrtcGetCUBIN(prog.p, reinterpret_cast<char*>(out.cubin.data()));
  }
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // The PCH did not fit: grow the heap so that the next compile with this prelude creates it. This kernel's
  // output is complete, so it is not recompiled (NVRTC would only redo the same work to create the PCH).
  if (pch_heap_needed) {
    std::unique_lock lock(g_pch_mu);
    size_t current = 0;
    a->nvrtcGetPCHHeapSize(&current);
    if (pch_heap_needed > current) a->nvrtcSetPCHHeapSize(pch_heap_needed);
  }

  for (const auto& f : parse_ptxas_info(out.log)) {
    if (!f.entry) continue;
    out.registers = std::max(out.registers, f.registers);
    out.shared_bytes = std::max(out.shared_bytes, f.shared_bytes);
    out.stack_bytes = std::max(out.stack_bytes, f.stack_bytes);
    out.spill_store_bytes = std::max(out.spill_store_bytes, f.spill_store_bytes);
    out.spill_load_bytes = std::max(out.spill_load_bytes, f.spill_load_bytes);
  }
  return out;
}

#endif  // KILN_HAVE_NVRTC_HEADER

}  // namespace kiln::codegen
