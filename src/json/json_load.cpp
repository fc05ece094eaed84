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
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "json/json_util.h"
#include "kiln/json.h"
#include "ops/registry.h"

namespace kiln {

namespace {

using json = nlohmann::json;
using json_detail::pointer_token;

constexpr size_t kMaxErrorLines = 50;
// An attribute no op has: added to a node with problems so that its shape is not inferred.
constexpr std::string_view kBrokenAttr = "#kiln-json-load-error";

// ---- small text helpers -------------------------------------------------------------------------------
// Escapes control bytes and bytes outside ASCII (text of unknown encoding, such as nlohmann's "last read").
std::string printable(std::string_view s) {
  std::string r;
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f) {
      r += fmt::format("\\x{:02x}", c);
    } else {
      r += static_cast<char>(c);
    }
  }
  return r;
}

// A JSON value as it appears in "got ..." (compact, at most ~60 characters).
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 60;
  if (s.size() > kMax) {
    size_t cut = kMax - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    s = s.substr(0, cut) + "...";
  }
  return s;
}

std::string quoted_list(const std::vector<std::string_view>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += fmt::format("{}'{}'", i ? ", " : "", names[i]);
  return s;
}

std::string valid_layouts() {
  std::vector<std::string_view> v;
  for (int i = 0; i < kLayoutCount; ++i) v.push_back(layout_name(static_cast<Layout>(i)));
  return quoted_list(v);
}

std::string valid_dtypes() {
  std::vector<std::string_view> v;
  for (int i = 0; i < kDTypeCount; ++i) v.push_back(dtype_name(static_cast<DType>(i)));
  return quoted_list(v);
}

// Whether a JSON value has the kind of value an attribute takes (an integer where an int is expected,
// any number where a float is, ...); list lengths and string choices are not looked at.
bool json_kind_fits(const AttrSpec& s, const json& v) {
  auto all = [&](auto pred) { return std::all_of(v.begin(), v.end(), pred); };
  switch (s.type) {
    case AttrType::int_: return v.is_number_integer();
    case AttrType::float_: return v.is_number();
    case AttrType::bool_: return v.is_boolean();
    case AttrType::string: return v.is_string();
    case AttrType::ints:
      return v.is_number_integer() || (v.is_array() && all([](const json& e) { return e.is_number_integer(); }));
    case AttrType::floats: return v.is_number() || (v.is_array() && all([](const json& e) { return e.is_number(); }));
  }
  return true;
}

// An integer JSON value as int64_t, or why it is not one.
std::optional<int64_t> as_int64(const json& v, std::string* why) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *why = fmt::format("{} does not fit in a 64-bit signed integer", u);
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // nlohmann reads integers beyond 64 bits as floats.
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) >= 9.2e18) {
      *why = fmt::format("{} does not fit in a 64-bit signed integer", shown(v));
      return std::nullopt;
    }
  }
  *why = fmt::format("expected an integer, got {}", shown(v));
  return std::nullopt;
}

// A JSON attribute value as an AttrValue; on failure `why` says why and `where` gets the path suffix of
// the offending part ("" or "/<k>" for a list element).
std::optional<AttrValue> to_attr_value(const json& v, std::string* why, std::string* where) {
  switch (v.type()) {
    case json::value_t::boolean: return AttrValue{v.get<bool>()};
    case json::value_t::string: return AttrValue{v.get<std::string>()};
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: {
      auto i = as_int64(v, why);
      if (!i) return std::nullopt;
      return AttrValue{*i};
    }
    case json::value_t::number_float: return AttrValue{v.get<double>()};
    case json::value_t::array: {
      std::vector<int64_t> ints;
      std::vector<double> floats;
      bool any_float = false;
      for (size_t k = 0; k < v.size(); ++k) {
        const json& e = v[k];
        if (e.is_number_float()) {
          any_float = true;
          floats.push_back(e.get<double>());
          continue;
        }
        if (e.is_number()) {
          auto i = as_int64(e, why);
          if (!i) {
            *where = fmt::format("/{}", k);
            return std::nullopt;
          }
          ints.push_back(*i);
          floats.push_back(static_cast<double>(*i));
          continue;
        }
        *why = fmt::format("expected a list of numbers, got {} at index {}", shown(e), k);
        *where = fmt::format("/{}", k);
        return std::nullopt;
      }
      if (any_float) return AttrValue{std::move(floats)};
      return AttrValue{std::move(ints)};
    }
    default: break;
  }
  *why = fmt::format("expected a number, true or false, a string or a list of numbers, got {}", shown(v));
  return std::nullopt;
}

// ---- step 1: the text ---------------------------------------------------------------------------------
// Refuses nesting deeper than `max_depth`, counting brackets outside strings.
Status prescan(std::string_view text, std::string_view source, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return invalid_argument(
            fmt::format("{}: nesting deeper than {} levels at byte offset {} (a kiln graph needs "
                        "fewer than 10)",
                        source, max_depth, i));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return {};
}

// A SAX handler that builds nothing: it follows the position in the document to name each duplicate key
// by its path, and keeps the first syntax error.
struct DuplicateKeyFinder {
  struct Frame {
    bool array = false;
    size_t index = 0;
    std::string key;
    std::set<std::string> keys;
  };
  std::vector<Frame> stack;
  std::vector<std::string> duplicates;
  std::optional<size_t> error_offset;
  std::string error;

  bool element() {
    if (!stack.empty() && stack.back().array) ++stack.back().index;
    return true;
  }
  bool open(bool array) {
    stack.emplace_back();
    stack.back().array = array;
    return true;
  }
  bool close() {
    if (!stack.empty()) stack.pop_back();
    return element();
  }
  bool null() { return element(); }
  bool boolean(bool) { return element(); }
  bool number_integer(json::number_integer_t) { return element(); }
  bool number_unsigned(json::number_unsigned_t) { return element(); }
  bool number_float(json::number_float_t, const json::string_t&) { return element(); }
  bool string(json::string_t&) { return element(); }
  bool binary(json::binary_t&) { return element(); }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (stack.empty()) return true;
    Frame& top = stack.back();
    top.key = k;
    if (!top.keys.insert(k).second && duplicates.size() < kMaxErrorLines) {
      std::string path;
      for (const Frame& f : stack) path += fmt::format("/{}", f.array ? std::to_string(f.index) : pointer_token(f.key));
      duplicates.push_back(fmt::format("{}: duplicate key '{}' in an object", path, k));
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." -> from "parse error".
    std::string what = e.what();
    size_t at = what.find("parse error");
    error = at == std::string::npos ? what : what.substr(at);
    error_offset = position > 0 ? position - 1 : 0;
    return false;
  }
};

Status nul_byte(std::string_view source, size_t offset) {
  return invalid_argument(
      fmt::format("{}: a NUL byte at byte offset {}: not JSON text (binary data?)", source, offset));
}

Result<json> parse_text(std::string_view text, std::string_view source, const JsonLoadOptions& options) {
  if (static_cast<int64_t>(text.size()) > options.max_bytes) {
    return invalid_argument(
        fmt::format("{}: {} bytes is over the limit of {} bytes for a graph", source, text.size(), options.max_bytes));
  }
  KILN_RETURN_IF_ERROR(prescan(text, source, options.max_depth));

  // First pass, without building anything: syntax errors with their byte offsets, and duplicate keys
  // (nlohmann keeps the last one silently; kiln reports them). nlohmann's parser callbacks are not used
  // for this: they take time quadratic in the length of an array of objects.
  DuplicateKeyFinder finder;
  json::sax_parse(text.begin(), text.end(), &finder, nlohmann::detail::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  if (finder.error_offset) {
    size_t offset = *finder.error_offset;
    if (offset < text.size() && text[offset] == '\0') return nul_byte(source, offset);
    return invalid_argument(
        fmt::format("{}: invalid JSON at byte offset {}: {}", source, offset, printable(finder.error)));
  }
  // nlohmann takes a NUL byte for the end of the input: whatever follows one would be ignored.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) return nul_byte(source, nul);
  if (!finder.duplicates.empty()) return invalid_argument(fmt::format("{}", fmt::join(finder.duplicates, "\n")));

  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
  if (root.is_discarded()) return invalid_argument(fmt::format("{}: invalid JSON", source));  // not reached
  return root;
}

// ---- steps 2-4: the document --------------------------------------------------------------------------
struct InputRef {
  std::string tensor;
  std::string path_suffix;  // "" for a single name, "/<k>" for an element of a list
};

struct PortRefs {
  std::string port;
  std::vector<InputRef> refs;
  bool ok = true;
};

struct NodeSpec {
  std::string op = "?";  // "?" when the op is missing (reported)
  std::string name;      // "" = named automatically
  std::vector<PortRefs> inputs;
  std::vector<std::pair<std::string, std::string>> outputs;
  Attrs attrs;
  bool outputs_read = false;  // "outputs" was an object
  bool broken = false;        // a problem was reported: do not infer its shape
};

// One problem, sorted by where it is in the document and formatted once the graph is built.
struct Problem {
  int section = 0;     // 0 top level, 1 tensors, 2 nodes, 3 outputs
  int64_t index = -1;  // tensor, node or output index; -1 for the section as a whole
  std::string path;    // JSON pointer
  int32_t node = -1;   // a node's problems are worded by Graph::format_diagnostic (naming node and op)
  std::string field;
  std::string message;
};

class Loader {
 public:
  Result<Graph> load(const json& root) {
    if (!root.is_object()) {
      return invalid_argument(fmt::format(
          "/: expected a JSON object {{\"format\": \"kiln.graph\", \"version\": 1, ...}}, got {}", shown(root)));
    }
    if (!read_header(root)) return finish();
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

 private:
  // ---- recording problems ----
  void top_problem(std::string path, std::string msg) {
    problems_.push_back({0, -1, std::move(path), -1, "", std::move(msg)});
  }
  void tensor_problem(size_t i, std::string path, std::string msg) {
    problems_.push_back({1, static_cast<int64_t>(i), std::move(path), -1, "", std::move(msg)});
  }
  void node_problem(size_t i, std::string field, std::string path, std::string msg) {
    problems_.push_back(
        {2, static_cast<int64_t>(i), std::move(path), static_cast<int32_t>(i), std::move(field), std::move(msg)});
  }
  void output_problem(int64_t k, std::string path, std::string msg) {
    problems_.push_back({3, k, std::move(path), -1, "", std::move(msg)});
  }

  // ---- the top level ----
  bool read_header(const json& root) {
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
    static const std::vector<std::string_view> keys{"format", "version", "name", "tensors", "nodes", "outputs"};
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

  const json* section(const json& root, const char* key, const char* what) {
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

  // ---- tensors ----
  void read_tensors(const json& list) {
    static const std::vector<std::string_view> keys{"name", "shape", "dtype", "layout", "kind"};
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      const std::string path = fmt::format("/tensors/{}", i);
      bool broken = false;
      std::string name;
      std::vector<int64_t> dims;
      DType dtype = DType::f32;
      std::optional<Layout> layout;
      TensorKind kind = TensorKind::input;
      auto fail = [&](std::string p, std::string msg) {
        tensor_problem(i, std::move(p), std::move(msg));
        broken = true;
      };
      if (!t.is_object()) {
        fail(path, fmt::format(
                       "expected a tensor declaration {{\"name\", \"shape\", \"dtype\", \"layout\", \"kind\"}}, got {}",
                       shown(t)));
      } else {
        auto n = t.find("name");
        if (n == t.end()) {
          fail(path + "/name", "missing key 'name' (the tensor's name)");
        } else if (!n->is_string()) {
          fail(path + "/name", fmt::format("expected the tensor's name (a string), got {}", shown(*n)));
        } else {
          name = n->get<std::string>();
        }
        const std::string who = name.empty() ? "" : fmt::format("tensor '{}': ", name);
        for (const auto& [key, value] : t.items()) {
          if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
            tensor_problem(i, fmt::format("{}/{}", path, pointer_token(key)),
                           fmt::format("{}unknown key '{}'; valid keys: {}", who, key, quoted_list(keys)));
          }
        }
        auto s = t.find("shape");
        if (s == t.end()) {
          fail(path + "/shape", fmt::format("{}missing key 'shape' (a list of positive integers)", who));
        } else if (!s->is_array()) {
          fail(path + "/shape",
               fmt::format("{}expected the dims, a list of positive integers, got {}", who, shown(*s)));
        } else {
          for (size_t k = 0; k < s->size(); ++k) {
            std::string why;
            auto d = as_int64((*s)[k], &why);
            if (!d) {
              fail(fmt::format("{}/shape/{}", path, k), fmt::format("{}dim {}: {}", who, k, why));
            } else {
              dims.push_back(*d);
            }
          }
        }
        if (auto d = t.find("dtype"); d != t.end()) {
          std::optional<DType> parsed = d->is_string() ? parse_dtype(d->get<std::string>()) : std::nullopt;
          if (!parsed) {
            fail(path + "/dtype", fmt::format("{}unknown dtype {}; valid dtypes: {}", who, shown(*d), valid_dtypes()));
          } else {
            dtype = *parsed;
          }
        }
        if (auto l = t.find("layout"); l != t.end()) {
          std::optional<Layout> parsed = l->is_string() ? parse_layout(l->get<std::string>()) : std::nullopt;
          if (!parsed) {
            fail(path + "/layout",
                 fmt::format("{}unknown layout {}; valid layouts: {}", who, shown(*l), valid_layouts()));
          } else {
            layout = parsed;
          }
        }
        if (auto k = t.find("kind"); k != t.end()) {
          std::optional<TensorKind> parsed = k->is_string() ? parse_tensor_kind(k->get<std::string>()) : std::nullopt;
          if (!parsed) {
            fail(path + "/kind", fmt::format("{}unknown kind {}; valid kinds: 'input', 'parameter'", who, shown(*k)));
          } else {
            kind = *parsed;
          }
        }
      }
      // Every entry is declared, so that tensor i of the graph is /tensors/i. A broken one gets an invalid
      // shape: its shape is unknown, so nothing that reads it is reported again.
      if (broken) {
        broken_tensors_.insert(static_cast<int64_t>(i));
        dims = {0};
        layout.reset();
      }
      declared_.insert(name);
      if (kind == TensorKind::parameter) {
        g_.parameter(name, Shape(std::move(dims)), dtype, layout);
      } else {
        g_.input(name, Shape(std::move(dims)), dtype, layout);
      }
    }
  }

  // ---- nodes: reading ----
  std::vector<NodeSpec> read_nodes(const json& list) {
    static const std::vector<std::string_view> keys{"op", "name", "inputs", "outputs", "attrs"};
    std::vector<NodeSpec> specs(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& n = list[i];
      NodeSpec& spec = specs[i];
      const std::string path = fmt::format("/nodes/{}", i);
      auto fail = [&](std::string field, std::string p, std::string msg) {
        node_problem(i, std::move(field), std::move(p), std::move(msg));
        spec.broken = true;
      };
      if (!n.is_object()) {
        fail("", path,
             fmt::format("expected a node {{\"op\", \"name\", \"inputs\", \"outputs\", \"attrs\"}}, got {}", shown(n)));
        suppress_.insert({static_cast<int32_t>(i), "op"});
        continue;
      }
      for (const auto& [key, value] : n.items()) {
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
          node_problem(i, "", fmt::format("{}/{}", path, pointer_token(key)),
                       fmt::format("unknown key '{}'; valid keys: {}", key, quoted_list(keys)));
        }
      }
      auto op = n.find("op");
      if (op == n.end() || !op->is_string()) {
        fail("op", path + "/op",
             op == n.end() ? "missing key 'op' (the op's name, such as \"conv2d\")"
                           : fmt::format("expected the op's name (a string), got {}", shown(*op)));
        suppress_.insert({static_cast<int32_t>(i), "op"});
      } else {
        spec.op = op->get<std::string>();
      }
      const OpDef* def = find_op(spec.op);
      if (auto nm = n.find("name"); nm != n.end()) {
        if (!nm->is_string() || nm->get_ref<const std::string&>().empty()) {
          fail("name", path + "/name",
               fmt::format("expected the node's name (a non-empty string), got {}", shown(*nm)));
        } else {
          spec.name = nm->get<std::string>();
        }
      }
      read_node_inputs(n, i, spec);
      read_node_outputs(n, i, spec);
      if (auto a = n.find("attrs"); a != n.end()) {
        if (!a->is_object()) {
          fail("attrs", path + "/attrs", fmt::format("expected an object {{attribute: value}}, got {}", shown(*a)));
        } else {
          for (const auto& [key, value] : a->items()) {
            std::string why, where;
            auto v = to_attr_value(value, &why, &where);
            const AttrSpec* as = def ? def->attr(key) : nullptr;
            if (v && (!as || json_kind_fits(*as, value))) {
              spec.attrs[key] = std::move(*v);
              continue;
            }
            // A value of the wrong JSON kind is shown as written (2.0, not 2); list lengths and string
            // choices are left to the registry's check.
            if (as && (v || where.empty())) {
              why = fmt::format("expected {}, got {}", describe_attr_spec(*as), shown(value));
              where.clear();
            }
            fail("attrs/" + key, fmt::format("{}/attrs/{}{}", path, pointer_token(key), where),
                 fmt::format("attribute '{}': {}", key, why));
            suppress_.insert({static_cast<int32_t>(i), "attrs/" + key});  // not "missing" as well
          }
        }
      }
      for (const auto& [port, tname] : spec.outputs) producer_.emplace(tname, static_cast<int32_t>(i));
    }
    return specs;
  }

  void read_node_inputs(const json& n, size_t i, NodeSpec& spec) {
    const std::string path = fmt::format("/nodes/{}/inputs", i);
    auto fail = [&](std::string field, std::string p, std::string msg) {
      node_problem(i, std::move(field), std::move(p), std::move(msg));
      spec.broken = true;
    };
    auto in = n.find("inputs");
    if (in == n.end() || !in->is_object()) {
      fail("inputs", path,
           in == n.end() ? "missing key 'inputs' (an object {port: tensor name})"
                         : fmt::format("expected an object {{port: tensor name}}, got {}", shown(*in)));
      suppress_inputs_.insert(static_cast<int32_t>(i));  // every port is missing: reported once, here
      return;
    }
    for (const auto& [port, value] : in->items()) {
      PortRefs refs{port, {}, true};
      const std::string field = "inputs/" + port;
      const std::string ppath = fmt::format("{}/{}", path, pointer_token(port));
      auto bad_name = [&](const json& v, std::string suffix) {
        fail(field, ppath + suffix, fmt::format("expected a tensor name (a non-empty string), got {}", shown(v)));
        refs.ok = false;
      };
      if (value.is_string()) {
        if (value.get_ref<const std::string&>().empty()) {
          bad_name(value, "");
        } else {
          refs.refs.push_back({value.get<std::string>(), ""});
        }
      } else if (value.is_array()) {
        for (size_t k = 0; k < value.size(); ++k) {
          const json& e = value[k];
          if (!e.is_string() || e.get_ref<const std::string&>().empty()) {
            bad_name(e, fmt::format("/{}", k));
          } else {
            refs.refs.push_back({e.get<std::string>(), fmt::format("/{}", k)});
          }
        }
      } else {
        std::string hint =
            value.is_number()
                ? fmt::format("; a constant operand is an attribute: \"attrs\": {{\"{}\": {}}}", port, shown(value))
                : "";
        fail(field, ppath,
             fmt::format("expected a tensor name or a list of tensor names, got {}{}", shown(value), hint));
        refs.ok = false;
      }
      if (!refs.ok) suppress_.insert({static_cast<int32_t>(i), field});
      spec.inputs.push_back(std::move(refs));
    }
  }

  void read_node_outputs(const json& n, size_t i, NodeSpec& spec) {
    const std::string path = fmt::format("/nodes/{}/outputs", i);
    auto out = n.find("outputs");
    if (out == n.end() || !out->is_object()) {
      node_problem(i, "outputs", path,
                   out == n.end() ? "missing key 'outputs' (an object {port: tensor name}, such as {\"y\": \"t1\"})"
                                  : fmt::format("expected an object {{port: tensor name}}, got {}", shown(*out)));
      spec.broken = true;
      outputs_unreadable_ = true;
      return;
    }
    spec.outputs_read = true;
    for (const auto& [port, value] : out->items()) {
      if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
        node_problem(i, "outputs/" + port, fmt::format("{}/{}", path, pointer_token(port)),
                     fmt::format("expected a tensor name (a non-empty string), got {}", shown(value)));
        spec.broken = true;
        outputs_unreadable_ = true;
        continue;
      }
      spec.outputs.emplace_back(port, value.get<std::string>());
    }
  }

  // ---- nodes: building ----
  std::string display_name(const std::vector<NodeSpec>& specs, int32_t j) const {
    const NodeSpec& s = specs[static_cast<size_t>(j)];
    return s.name.empty() ? fmt::format("{}_{}", s.op, j) : s.name;
  }

  // Nodes that each node reads from (by the names of its inputs); computed when first needed.
  const std::vector<std::vector<int32_t>>& deps(const std::vector<NodeSpec>& specs) {
    if (deps_.size() == specs.size()) return deps_;
    deps_.assign(specs.size(), {});
    for (size_t k = 0; k < specs.size(); ++k) {
      for (const PortRefs& p : specs[k].inputs) {
        for (const InputRef& ref : p.refs) {
          if (declared_.count(ref.tensor)) continue;
          auto it = producer_.find(ref.tensor);
          if (it != producer_.end()) deps_[k].push_back(it->second);
        }
      }
    }
    return deps_;
  }

  // A chain from node `from` to node `to` following what each node reads; empty when there is none.
  std::vector<int32_t> dependency_chain(const std::vector<NodeSpec>& specs, int32_t from, int32_t to) {
    const std::vector<std::vector<int32_t>>& d = deps(specs);
    constexpr int32_t kUnseen = -2;
    std::vector<int32_t> parent(specs.size(), kUnseen);
    parent[static_cast<size_t>(from)] = -1;
    std::vector<int32_t> stack{from};
    while (!stack.empty()) {
      int32_t k = stack.back();
      stack.pop_back();
      if (k == to) {
        std::vector<int32_t> chain;
        for (int32_t c = to; c != -1; c = parent[static_cast<size_t>(c)]) chain.push_back(c);
        std::reverse(chain.begin(), chain.end());
        return chain;
      }
      for (int32_t n : d[static_cast<size_t>(k)]) {
        if (parent[static_cast<size_t>(n)] == kUnseen) {
          parent[static_cast<size_t>(n)] = k;
          stack.push_back(n);
        }
      }
    }
    return {};
  }

  std::string unknown_tensor(const std::string& tname) const {
    return fmt::format("unknown tensor '{}': it is not declared in /tensors and no node produces it{}", tname,
                       outputs_unreadable_ ? " (the outputs of some node could not be read)" : "");
  }

  std::optional<Tensor> resolve(const std::vector<NodeSpec>& specs, size_t i, const std::string& field,
                                const std::string& path, const std::string& tname) {
    if (auto t = g_.find_tensor(tname)) return *t;
    auto it = producer_.find(tname);
    const int32_t self = static_cast<int32_t>(i);
    if (it != producer_.end() && it->second < self) {
      // An earlier node names it as an output, but could not make it (an unknown port, a name taken):
      // that node's problem is reported already.
      return std::nullopt;
    }
    if (it == producer_.end()) {
      node_problem(i, field, path, unknown_tensor(tname));
      return std::nullopt;
    }
    const int32_t j = it->second;
    if (j == self) {
      node_problem(
          i, field, path,
          fmt::format("tensor '{}' is this node's own output: a node cannot read what it writes (a cycle)", tname));
      return std::nullopt;
    }
    // j reads (through the chain) from i. Looked for while the messages are still shown (it is linear in
    // the graph's size, and a large file may hold many such mistakes).
    std::vector<int32_t> chain;
    if (problems_.size() < kMaxErrorLines) chain = dependency_chain(specs, j, self);
    if (!chain.empty()) {
      std::string cycle;
      for (auto c = chain.rbegin(); c != chain.rend(); ++c) cycle += fmt::format("'{}' -> ", display_name(specs, *c));
      cycle += fmt::format("'{}'", display_name(specs, self));
      node_problem(i, field, path,
                   fmt::format("tensor '{}' comes from node '{}' (/nodes/{}), which depends on this node: a cycle {}",
                               tname, display_name(specs, j), j, cycle));
      return std::nullopt;
    }
    node_problem(i, field, path,
                 fmt::format("tensor '{}' is used before it is produced: node '{}' (/nodes/{}) produces it later; list "
                             "each node after the nodes that produce its inputs",
                             tname, display_name(specs, j), j));
    return std::nullopt;
  }

  void build_nodes(std::vector<NodeSpec>& specs) {
    for (size_t i = 0; i < specs.size(); ++i) {
      NodeSpec& spec = specs[i];
      const int32_t self = static_cast<int32_t>(i);
      const std::string path = fmt::format("/nodes/{}", i);
      PortInputs inputs;
      for (const PortRefs& p : spec.inputs) {
        if (!p.ok) continue;
        const std::string field = "inputs/" + p.port;
        std::vector<Tensor> ts;
        bool ok = true;
        for (const InputRef& ref : p.refs) {
          auto t = resolve(specs, i, field, fmt::format("{}/inputs/{}{}", path, pointer_token(p.port), ref.path_suffix),
                           ref.tensor);
          if (t) {
            ts.push_back(*t);
          } else {
            ok = false;
          }
        }
        if (!ok) {
          spec.broken = true;
          suppress_.insert({self, field});
          continue;
        }
        inputs.emplace_back(p.port, std::move(ts));
      }
      if (const OpDef* def = find_op(spec.op)) {
        for (const PortSpec& out : def->outputs) {
          bool given =
              std::any_of(spec.outputs.begin(), spec.outputs.end(), [&](const auto& o) { return o.first == out.name; });
          if (!given && spec.outputs_read) {
            node_problem(
                i, fmt::format("outputs/{}", out.name), fmt::format("{}/outputs", path),
                fmt::format("missing: give the name of the tensor it writes, as in {{\"{}\": \"t1\"}}", out.name));
            spec.broken = true;
          }
        }
        if (spec.broken) {
          spec.attrs[std::string(kBrokenAttr)] = true;
          suppress_.insert({self, fmt::format("attrs/{}", kBrokenAttr)});
        }
      }
      g_.add_node(spec.op, inputs, std::move(spec.attrs), spec.name, spec.outputs);
    }
  }

  // ---- outputs ----
  void read_outputs(const json& list) {
    for (size_t k = 0; k < list.size(); ++k) {
      const json& o = list[k];
      const std::string path = fmt::format("/outputs/{}", k);
      const int64_t idx = static_cast<int64_t>(k);
      std::string name;
      std::optional<Layout> layout;
      bool ok = true;
      if (o.is_string()) {
        name = o.get<std::string>();
      } else if (o.is_object()) {
        static const std::vector<std::string_view> keys{"name", "layout"};
        for (const auto& [key, value] : o.items()) {
          if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
            output_problem(idx, fmt::format("{}/{}", path, pointer_token(key)),
                           fmt::format("unknown key '{}'; valid keys: {}", key, quoted_list(keys)));
          }
        }
        auto n = o.find("name");
        if (n == o.end() || !n->is_string()) {
          output_problem(idx, path + "/name",
                         n == o.end() ? "missing key 'name' (the output tensor's name)"
                                      : fmt::format("expected a tensor name (a string), got {}", shown(*n)));
          ok = false;
        } else {
          name = n->get<std::string>();
        }
        if (auto l = o.find("layout"); l != o.end()) {
          std::optional<Layout> parsed = l->is_string() ? parse_layout(l->get<std::string>()) : std::nullopt;
          if (!parsed) {
            output_problem(idx, path + "/layout",
                           fmt::format("unknown layout {}; valid layouts: {}", shown(*l), valid_layouts()));
            ok = false;
          }
          layout = parsed;
        }
      } else {
        output_problem(idx, path,
                       fmt::format("expected a tensor name or {{\"name\": ..., \"layout\": ...}}, got {}", shown(o)));
        ok = false;
      }
      std::optional<Tensor> t;
      if (ok) {
        t = g_.find_tensor(name);
        // A name some node gives an output it could not make was reported at that node.
        if (!t && !producer_.count(name))
          output_problem(idx, o.is_object() ? path + "/name" : path, unknown_tensor(name));
        ok = t.has_value();
      }
      if (!ok) {
        output_problems_ = true;
        continue;
      }
      output_index_.push_back(idx);
      g_.output(*t, {}, layout);
    }
  }

  // ---- the graph's own checks ----
  bool suppressed(const Diagnostic& d) const {
    if (suppress_.count({d.node, d.field})) return true;
    return suppress_inputs_.count(d.node) && d.field.rfind("inputs/", 0) == 0;
  }

  static std::string field_path(const std::string& field) {
    if (field.empty()) return "";
    size_t slash = field.find('/');
    if (slash == std::string::npos) return fmt::format("/{}", field);
    return fmt::format("/{}/{}", field.substr(0, slash), pointer_token(field.substr(slash + 1)));
  }

  void check() {
    for (Diagnostic& d : g_.check()) {
      if (d.node >= 0) {
        if (suppressed(d)) continue;
        std::string path = fmt::format("/nodes/{}{}", d.node, field_path(d.field));
        problems_.push_back({2, d.node, std::move(path), d.node, d.field, std::move(d.message)});
        continue;
      }
      // Graph-level: "tensors/<i>/<part>", "outputs/<k>", "outputs", ...
      unsigned long long index = 0;
      char rest[2] = {};
      if (std::sscanf(d.field.c_str(), "tensors/%llu%1s", &index, rest) >= 1) {
        if (broken_tensors_.count(static_cast<int64_t>(index))) continue;
        problems_.push_back(
            {1, static_cast<int64_t>(index), fmt::format("/{}", d.field), -1, "", std::move(d.message)});
      } else if (std::sscanf(d.field.c_str(), "outputs/%llu", &index) == 1) {
        int64_t k = index < output_index_.size() ? output_index_[index] : static_cast<int64_t>(index);
        problems_.push_back({3, k, fmt::format("/outputs/{}", k), -1, "", std::move(d.message)});
      } else if (d.field == "outputs") {
        if (output_problems_) continue;  // every output was already reported
        problems_.push_back({3, -1, "/outputs", -1, "", std::move(d.message)});
      } else {
        problems_.push_back({0, -1, fmt::format("/{}", d.field), -1, "", std::move(d.message)});
      }
    }
  }

  Result<Graph> finish() {
    if (problems_.empty()) return std::move(g_);
    std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) {
      return std::pair(a.section, a.index) < std::pair(b.section, b.index);
    });
    std::string msg;
    for (size_t k = 0; k < problems_.size() && k < kMaxErrorLines; ++k) {
      const Problem& p = problems_[k];
      std::string text = p.message;
      if (p.node >= 0 && static_cast<size_t>(p.node) < g_.nodes().size()) {
        text = Graph::format_diagnostic(g_, Diagnostic{p.node, p.field, p.message});
      }
      msg += fmt::format("{}{}: {}", k ? "\n" : "", p.path, text);
    }
    if (problems_.size() > kMaxErrorLines) {
      msg += fmt::format("\n... and {} more problems", problems_.size() - kMaxErrorLines);
    }
    return invalid_argument(std::move(msg));
  }

  Graph g_;
  std::vector<Problem> problems_;
  std::set<int64_t> broken_tensors_;                    // tensor entries with a reported problem
  std::set<std::string> declared_;                      // names in /tensors
  std::map<std::string, int32_t> producer_;             // tensor name -> first node that names it as output
  std::set<std::pair<int32_t, std::string>> suppress_;  // (node, field) already reported by the loader
  std::set<int32_t> suppress_inputs_;                   // nodes whose whole "inputs" was reported
  std::vector<int64_t> output_index_;                   // graph output k -> /outputs index
  std::vector<std::vector<int32_t>> deps_;              // see deps()
  bool output_problems_ = false;
  bool outputs_unreadable_ = false;
};

}  // namespace

Result<Graph> graph_from_json(std::string_view text, std::string_view source, const JsonLoadOptions& options) {
  KILN_ASSIGN_OR_RETURN(json root, parse_text(text, source, options));
  return Loader().load(root);
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
