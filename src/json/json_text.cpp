// Step 1 of loading a graph from JSON: size and depth limits, syntax errors and duplicate keys.
#include "json/json_text.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "json/json_messages.h"
#include "json/json_util.h"

namespace kiln::json_detail {

namespace {

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

// One pass over the text (nlohmann's SAX parser) that builds the document and names each duplicate key by
// its path (nlohmann's own DOM parser keeps the last value silently), keeping the first syntax error. It
// replaced two passes (one finding duplicates with a set of keys per object, one building the document):
// half of a warm start's graph loading went there. nlohmann's parser callbacks are not used: they take time
// quadratic in the length of an array of objects.
struct DocumentBuilder {
  struct Frame {
    json* container = nullptr;
    std::string key;  // objects: the key whose value comes next
  };
  json root;
  std::vector<Frame> stack;
  std::vector<std::string> duplicates;
  std::optional<size_t> error_offset;
  std::string error;

  // Puts `v` where the document is: the root, the next element of an array, or the pending key's value.
  json* put(json&& v) {
    if (stack.empty()) {
      root = std::move(v);
      return &root;
    }
    Frame& top = stack.back();
    if (top.container->is_array()) {
      top.container->push_back(std::move(v));
      return &top.container->back();
    }
    json& slot = (*top.container)[top.key];
    slot = std::move(v);
    return &slot;
  }
  bool value(json&& v) {
    put(std::move(v));
    return true;
  }
  bool open(json&& empty) {
    json* c = put(std::move(empty));
    stack.push_back({c, {}});
    return true;
  }
  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
  bool string(json::string_t& v) { return value(json(std::move(v))); }
  bool binary(json::binary_t&) { return true; }  // not produced by JSON text
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() {
    stack.pop_back();
    return true;
  }
  bool end_array() {
    stack.pop_back();
    return true;
  }
  bool key(json::string_t& k) {
    Frame& top = stack.back();
    if (top.container->contains(k) && duplicates.size() < kMaxErrorLines) {
      // Each enclosing container's place in its parent (an array's current element is its last), then the key.
      std::string path;
      for (size_t i = 0; i + 1 < stack.size(); ++i) {
        const Frame& f = stack[i];
        path += f.container->is_array() ? fmt::format("/{}", f.container->size() - 1) : "/" + pointer_token(f.key);
      }
      duplicates.push_back(fmt::format("{}/{}: duplicate key '{}' in an object", path, pointer_token(k), k));
    }
    top.key = std::move(k);
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

}  // namespace

Result<json> parse_text(std::string_view text, std::string_view source, const JsonLoadOptions& options) {
  if (static_cast<int64_t>(text.size()) > options.max_bytes) {
    return invalid_argument(
        fmt::format("{}: {} bytes is over the limit of {} bytes for a graph", source, text.size(), options.max_bytes));
  }
  KILN_RETURN_IF_ERROR(prescan(text, source, options.max_depth));

  DocumentBuilder doc;
  json::sax_parse(text.begin(), text.end(), &doc, nlohmann::detail::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  if (doc.error_offset) {
    size_t offset = *doc.error_offset;
    if (offset < text.size() && text[offset] == '\0') return nul_byte(source, offset);
    return invalid_argument(
        fmt::format("{}: invalid JSON at byte offset {}: {}", source, offset, printable(doc.error)));
  }
  // nlohmann takes a NUL byte for the end of the input: whatever follows one would be ignored.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) return nul_byte(source, nul);
  if (!doc.duplicates.empty()) return invalid_argument(fmt::format("{}", fmt::join(doc.duplicates, "\n")));
  return std::move(doc.root);
}

}  // namespace kiln::json_detail
