// Loading a graph from JSON: /outputs, names or {"name", "layout"} (see json_loader.h).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "json/json_loader.h"
#include "json/json_messages.h"
#include "json/json_util.h"

namespace kiln::json_detail {

void Loader::read_outputs(const json& list) {
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

}  // namespace kiln::json_detail
