// Step 1 of loading a graph from JSON: size and depth limits, syntax errors and duplicate keys.
#include "json/json_text.h"

#include <cstdint>
#include <optional>
#include <set>
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

}  // namespace

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

}  // namespace kiln::json_detail
