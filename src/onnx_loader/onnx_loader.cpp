// include/kiln/onnx.h for programs: each call that reads ONNX loads the plugin (src/onnx/plugin_api.h says why)
// once, then forwards to it. A kiln built without ONNX (no libonnx-dev / libprotobuf-dev at configure time) has
// no plugin, and says so.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/onnx.h"
#include "onnx/plugin_api.h"
#include "support/source_id.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

#if KILN_HAVE_ONNX
// Where the plugin may be, in order: KILN_ONNX_PLUGIN alone when set; beside the program or library this code
// is in (an installed kiln's bin/ and lib/ are siblings, so also ../lib); where this build tree made it; where
// `install` puts it.
std::vector<std::string> plugin_candidates() {
  if (const char* env = std::getenv("KILN_ONNX_PLUGIN"); env && *env) return {env};
  std::vector<std::string> out;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_candidates), &info) && info.dli_fname) {
    const fs::path here = fs::path(info.dli_fname).parent_path();
    out.push_back((here / "libkiln_onnx.so").string());
    out.push_back((here.parent_path() / "lib" / "libkiln_onnx.so").string());
  }
  out.push_back(KILN_ONNX_PLUGIN_BUILD_PATH);
  out.push_back(KILN_ONNX_PLUGIN_INSTALL_PATH);
  return out;
}

// The plugin's table, or why there is none.
Result<const onnx_plugin::Api*> open_plugin() {
  std::vector<std::string> tried;
  for (const std::string& path : plugin_candidates()) {
    if (!fs::exists(path)) {
      tried.push_back(path + " (absent)");
      continue;
    }
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: see plugin_api.h
    if (!h) {
      const char* e = ::dlerror();
      tried.push_back(fmt::format("{} ({})", path, e ? e : "dlopen failed"));
      continue;
    }
    using Entry = const onnx_plugin::Api* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(h, onnx_plugin::kEntrySymbol));
    const onnx_plugin::Api* api = entry ? entry() : nullptr;
    if (!api) {
      tried.push_back(path + " (not a kiln ONNX plugin: no " + onnx_plugin::kEntrySymbol + ")");
      continue;
    }
    if (api->abi_version != onnx_plugin::kAbiVersion || !api->source_id ||
        std::string_view(api->source_id) != support::source_id()) {
      tried.push_back(fmt::format("{} (built from other sources than this kiln: source id {}, this kiln's {})", path,
                                  api->source_id ? api->source_id : "none", support::source_id()));
      continue;
    }
    return api;
  }
  return Status(StatusCode::unavailable,
                fmt::format("kiln's ONNX front end (libkiln_onnx.so) could not be loaded; tried: {}; set "
                            "KILN_ONNX_PLUGIN to its path",
                            fmt::join(tried, "; ")));
}

Result<const onnx_plugin::Api*> plugin() {
  static const Result<const onnx_plugin::Api*> api = open_plugin();
  return api;
}
#else
Result<const onnx_plugin::Api*> plugin() {
  return unsupported(
      "this kiln was built without ONNX support (install libonnx-dev and libprotobuf-dev: tools/setup.sh, "
      "and configure again)");
}
#endif

}  // namespace

bool onnx_available() { return plugin().ok(); }

Result<Graph> load_onnx(const std::string& path, const OnnxOptions& options) {
  KILN_ASSIGN_OR_RETURN(const onnx_plugin::Api* api, plugin());
  return api->load_onnx(path, options);
}

Result<Graph> onnx_from_bytes(std::string_view bytes, std::string_view source, const OnnxOptions& options,
                              const std::string& base_dir) {
  KILN_ASSIGN_OR_RETURN(const onnx_plugin::Api* api, plugin());
  return api->onnx_from_bytes(bytes, source, options, base_dir);
}

Result<HostTensor> load_onnx_tensor(const std::string& path, std::string* name) {
  KILN_ASSIGN_OR_RETURN(const onnx_plugin::Api* api, plugin());
  return api->load_onnx_tensor(path, name);
}

bool is_onnx_path(std::string_view path) { return path.size() >= 5 && path.substr(path.size() - 5) == ".onnx"; }

std::vector<std::string> onnx_supported_ops() {
  auto api = plugin();
  return api.ok() ? (*api)->supported_ops() : std::vector<std::string>{};
}

}  // namespace kiln
