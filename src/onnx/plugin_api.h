// The ONNX front end is a plugin: libkiln_onnx.so (src/onnx/ and the layers below it, linked with protobuf and
// libonnx) is loaded by src/onnx_loader/ on the first call that reads ONNX, so that no kiln program pays for
// loading those libraries at start (they were two thirds of `kiln --version`'s 2.8 ms). This header is the
// contract between the two: the implementations of include/kiln/onnx.h's functions, and the table of them the
// plugin exports.
//
// The plugin holds its own copy of kiln's graph code and hands the loader C++ objects (a Graph, a HostTensor):
// sound only between a plugin and a loader built from the same sources, which the table's source id lets the
// loader check (support::source_id()). The plugin is never unloaded (the objects it made, a shared_ptr's control
// block among them, may call back into it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/onnx.h"

namespace kiln::onnx_plugin {

inline constexpr int kAbiVersion = 1;

struct Api {
  int abi_version = kAbiVersion;
  const char* source_id = nullptr;
  Result<Graph> (*load_onnx)(const std::string& path, const OnnxOptions& options) = nullptr;
  Result<Graph> (*onnx_from_bytes)(std::string_view bytes, std::string_view source, const OnnxOptions& options,
                                   const std::string& base_dir) = nullptr;
  Result<HostTensor> (*load_onnx_tensor)(const std::string& path, std::string* name) = nullptr;
  std::vector<std::string> (*supported_ops)() = nullptr;
};

// The implementations (src/onnx/), as include/kiln/onnx.h documents them.
Result<Graph> load_onnx(const std::string& path, const OnnxOptions& options);
Result<Graph> onnx_from_bytes(std::string_view bytes, std::string_view source, const OnnxOptions& options,
                              const std::string& base_dir);
Result<HostTensor> load_onnx_tensor(const std::string& path, std::string* name);
std::vector<std::string> onnx_supported_ops();

// The name of the one symbol the plugin exports: extern "C" const Api* kiln_onnx_plugin_api().
inline constexpr const char* kEntrySymbol = "kiln_onnx_plugin_api";

}  // namespace kiln::onnx_plugin
