// Tensor files by tensor name (include/kiln/npy.h): `<dir>/<name>.npy` for each tensor of a map or each
// input and parameter of a graph. One file's bytes are npy.cpp's.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/graph.h"
#include "kiln/npy.h"

namespace kiln {

namespace fs = std::filesystem;

Result<std::string> npy_path(const std::string& dir, std::string_view tensor_name) {
  // '/' separates directories (a training graph's `grad/<parameter>` is grad/<parameter>.npy); every part must
  // be a file name of its own, so that no name reaches outside `dir`.
  fs::path path(dir);
  size_t start = 0;
  while (true) {
    const size_t slash = tensor_name.find('/', start);
    const std::string_view part =
        tensor_name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == ".." ||
        part.find_first_of(std::string_view("\\\0", 2)) != std::string_view::npos) {
      return invalid_argument(fmt::format("tensor '{}': its name cannot be used as a file name", tensor_name));
    }
    if (slash == std::string_view::npos) return (path / fmt::format("{}.npy", part)).string();
    path /= std::string(part);
    start = slash + 1;
  }
}

Status save_tensors(const std::string& dir, const TensorMap& tensors) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error(fmt::format("{}: cannot create the directory: {}", dir, ec.message()));
  if (!fs::is_directory(dir, ec)) return io_error(fmt::format("{}: not a directory", dir));
  for (const auto& [name, t] : tensors) {
    KILN_ASSIGN_OR_RETURN(std::string path, npy_path(dir, name));
    const fs::path parent = fs::path(path).parent_path();  // a name with '/': its directories
    if (!fs::is_directory(parent, ec) && (fs::create_directories(parent, ec), ec))
      return io_error(fmt::format("{}: cannot create the directory: {}", parent.string(), ec.message()));
    KILN_RETURN_IF_ERROR(save_npy(path, t));
  }
  return {};
}

Result<TensorMap> load_inputs(const std::string& dir, const Graph& g) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec)) return io_error(fmt::format("{}: not a directory", dir));
    return not_found(fmt::format("{}: directory not found", dir));
  }
  TensorMap out;
  std::vector<Status> errors;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    auto path = npy_path(dir, info.name);
    if (!path.ok()) {
      errors.push_back(path.status());
      continue;
    }
    auto loaded = load_npy(*path, info.dtype, info.shape, info.name);
    if (!loaded.ok()) {
      if (const HostTensor* v = g.value(info.name); v && loaded.status().code() == StatusCode::not_found) {
        out.emplace(info.name, *v);  // no file: the graph's own value
        continue;
      }
      if (loaded.status().code() == StatusCode::not_found) {
        errors.push_back(
            not_found(fmt::format("{}: missing file for {} '{}' ({} {})", *path, tensor_kind_name(info.kind), info.name,
                                  info.shape.to_string(), dtype_name(info.dtype))));
      } else {
        errors.push_back(loaded.status());
      }
      continue;
    }
    out.emplace(info.name, std::move(loaded).value());
  }
  if (!errors.empty()) {
    std::string msg;
    for (const Status& s : errors) {
      if (!msg.empty()) msg += '\n';
      msg += s.message();
    }
    return Status(errors.front().code(), std::move(msg));
  }
  return out;
}

}  // namespace kiln
