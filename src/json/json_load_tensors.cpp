// Loading a graph from JSON: /tensors, one declaration each (see json_loader.h).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "json/json_attr_values.h"
#include "json/json_loader.h"
#include "json/json_messages.h"
#include "json/json_util.h"

namespace kiln::json_detail {

void Loader::read_tensors(const json& list) {
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
      fail(path,
           fmt::format("expected a tensor declaration {{\"name\", \"shape\", \"dtype\", \"layout\", \"kind\"}}, got {}",
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
        fail(path + "/shape", fmt::format("{}expected the dims, a list of positive integers, got {}", who, shown(*s)));
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

}  // namespace kiln::json_detail
