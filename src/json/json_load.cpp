// Loading graphs from JSON: text -> checked nlohmann value -> Graph, every problem named by its JSON path.
//
// Loading goes in four steps:
//   1. the raw text: size limit, a pre-scan of the bracket depth (so deep input cannot exhaust the stack),
//      then nlohmann's parser (exceptions caught here) while recording duplicate object keys;
//   2. the document's structure: format/version, known keys, JSON types, names of dtypes, layouts, kinds,
//      attribute values; input names resolved to tensors already known (use-before-producer, cycles);
//   3. the graph, built by Graph::input/parameter and Graph::add_node in file order (node i == /nodes/i);
//   4. Graph::check(), whose diagnostics are turned into JSON paths.
// Problems found in step 2 keep the graph from repeating them: a node with a problem is built so that
// its shape is not inferred (nothing downstream of it is reported), and the Graph's diagnostics on the
// same fields are dropped.
//
// The steps live in one file each: json_text.cpp (step 1), json_loader.h (steps 2-4: the Loader, whose
// parts are listed there), json_messages.h and json_attr_values.h (values as shown in messages and as read
// into attributes).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "json/json_attr_values.h"
#include "json/json_loader.h"
#include "json/json_messages.h"
#include "json/json_text.h"
#include "json/json_util.h"
#include "kiln/json.h"

namespace kiln {

namespace json_detail {

Result<Graph> Loader::load(const json& root) {
  if (!root.is_object()) {
    return invalid_argument(fmt::format(
        "/: expected a JSON object {{\"format\": \"kiln.graph\", \"version\": 1, ...}}, got {}", shown(root)));
  }
  if (!read_header(root)) return finish();
  if (auto d = root.find("dims"); d != root.end()) read_dims(*d);
  const json* tensors = section(root, "tensors", "a list of tensor declarations");
  const json* nodes = section(root, "nodes", "a list of nodes");
  const json* outputs = section(root, "outputs", "a list of output tensor names");
  if (!tensors || !nodes || !outputs) return finish();
  read_tensors(*tensors);
  std::vector<NodeSpec> specs = read_nodes(*nodes);
  build_nodes(specs);
  read_outputs(*outputs);
  check();
  return finish();
}

// ---- the top level ----
bool Loader::read_header(const json& root) {
  bool ok = true;
  auto f = root.find("format");
  if (f == root.end()) {
    top_problem("/format", fmt::format("missing key 'format': expected \"{}\"", json_detail::kFormatName));
    ok = false;
  } else if (!f->is_string() || f->get_ref<const std::string&>() != json_detail::kFormatName) {
    top_problem("/format", fmt::format("expected \"{}\", got {}", json_detail::kFormatName, shown(*f)));
    ok = false;
  }
  auto v = root.find("version");
  if (v == root.end()) {
    top_problem("/version", fmt::format("missing key 'version': expected {}", json_detail::kFormatVersion));
    ok = false;
  } else if (!v->is_number_integer()) {
    top_problem("/version", fmt::format("expected {}, got {}", json_detail::kFormatVersion, shown(*v)));
    ok = false;
  } else if ((v->is_number_unsigned() && v->get<uint64_t>() != static_cast<uint64_t>(json_detail::kFormatVersion)) ||
             (!v->is_number_unsigned() && v->get<int64_t>() != json_detail::kFormatVersion)) {
    top_problem("/version", fmt::format("unsupported version {}: this kiln reads version {}", shown(*v),
                                        json_detail::kFormatVersion));
    ok = false;
  }
  static const std::vector<std::string_view> keys{"format", "version", "name", "dims", "tensors", "nodes", "outputs"};
  for (const auto& [key, value] : root.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      top_problem(fmt::format("/{}", pointer_token(key)),
                  fmt::format("unknown key '{}'; valid keys: {}", key, quoted_list(keys)));
    }
  }
  if (!ok) return false;  // a document of another format or version: do not read on
  if (auto n = root.find("name"); n != root.end()) {
    if (n->is_string()) {
      g_.set_name(n->get<std::string>());
    } else {
      top_problem("/name", fmt::format("expected the graph's name (a string), got {}", shown(*n)));
    }
  }
  return true;
}

// "dims": {"N": [1, 64], ...}: the symbols input shapes may use, with their ranges.
void Loader::read_dims(const json& dims) {
  if (!dims.is_object()) {
    top_problem("/dims", fmt::format("expected the symbolic dims, {{\"N\": [min, max], ...}}, got {}", shown(dims)));
    return;
  }
  for (const auto& [name, range] : dims.items()) {
    const std::string path = "/dims/" + pointer_token(name);
    std::string why;
    std::optional<int64_t> lo, hi;
    if (range.is_array() && range.size() == 2) lo = as_int64(range[0], &why), hi = as_int64(range[1], &why);
    if (!lo || !hi) {
      top_problem(path,
                  fmt::format("dim '{}': expected its range [min, max] (two integers), got {}", name, shown(range)));
      continue;
    }
    g_.dim(name, *lo, *hi);  // a bad name or range is the graph's to report (at /dims/<name>)
  }
}

const json* Loader::section(const json& root, const char* key, const char* what) {
  auto it = root.find(key);
  if (it == root.end()) {
    top_problem(fmt::format("/{}", key), fmt::format("missing key '{}': expected {}", key, what));
    return nullptr;
  }
  if (!it->is_array()) {
    top_problem(fmt::format("/{}", key), fmt::format("expected {}, got {}", what, shown(*it)));
    return nullptr;
  }
  return &*it;
}

}  // namespace json_detail

Result<Graph> graph_from_json(std::string_view text, std::string_view source, const JsonLoadOptions& options) {
  KILN_ASSIGN_OR_RETURN(json_detail::json root, json_detail::parse_text(text, source, options));
  return json_detail::Loader().load(root);
}

Result<Graph> load_graph(const std::string& path, const JsonLoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found || path.empty()) return not_found(fmt::format("{}: no such file", path));
  if (ec) return io_error(fmt::format("{}: cannot read: {}", path, ec.message()));
  if (fs::is_directory(st)) return io_error(fmt::format("{}: is a directory, not a graph file", path));
  if (!fs::is_regular_file(st)) return io_error(fmt::format("{}: not a regular file", path));
  uintmax_t size = fs::file_size(path, ec);
  if (ec) return io_error(fmt::format("{}: cannot read: {}", path, ec.message()));
  if (size > static_cast<uintmax_t>(options.max_bytes)) {
    return invalid_argument(
        fmt::format("{}: {} bytes is over the limit of {} bytes for a graph", path, size, options.max_bytes));
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open: {}", path, errno ? std::strerror(errno) : "unknown error"));
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (in.bad()) return io_error(fmt::format("{}: read failed", path));
  text.resize(static_cast<size_t>(in.gcount()));
  return graph_from_json(text, path, options);
}

}  // namespace kiln
