// Loading a graph from JSON: the graph's own diagnostics turned into JSON paths, and all problems, sorted
// by where they are in the document, turned into the one message a failed load returns (see json_loader.h).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <cstdio>
#include "json/json_loader.h"

#include "json/json_messages.h"
#include "json/json_util.h"

namespace kiln::json_detail {

bool Loader::suppressed(const Diagnostic& d) const {
  if (suppress_.count({d.node, d.field})) return true;
  return suppress_inputs_.count(d.node) && d.field.rfind("inputs/", 0) == 0;
}

std::string Loader::field_path(const std::string& field) {
  if (field.empty()) return "";
  size_t slash = field.find('/');
  if (slash == std::string::npos) return fmt::format("/{}", field);
  return fmt::format("/{}/{}", field.substr(0, slash), pointer_token(field.substr(slash + 1)));
}

void Loader::check() {
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
      problems_.push_back({1, static_cast<int64_t>(index), fmt::format("/{}", d.field), -1, "", std::move(d.message)});
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

Result<Graph> Loader::finish() {
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

}  // namespace kiln::json_detail
