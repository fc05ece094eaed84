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

namespace {

// A dim: an integer, or a string holding a symbolic dim (a declared symbol or an expression over them).
std::optional<DimExpr> read_dim(const json& dim, std::string* why) {
  if (dim.is_string()) {
    auto e = DimExpr::parse(dim.get<std::string>());
    if (!e.ok()) {
      *why = e.status().message();
      return std::nullopt;
    }
    if (e->is_constant()) {  // "3": a number written as a string is a mistake, not a dim that varies
      *why = fmt::format("expected an integer, or a symbolic dim over the graph's dims, got the number {} as a string",
                         shown(dim));
      return std::nullopt;
    }
    return *e;
  }
  auto d = as_int64(dim, why);
  if (!d) return std::nullopt;
  return DimExpr(*d);
}

}  // namespace

void Loader::read_tensors(const json& list) {
  static const std::vector<std::string_view> keys{"name", "shape", "dtype", "layout", "kind"};
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string path = fmt::format("/tensors/{}", i);
    bool broken = false;
    std::string name;
    std::vector<DimExpr> dims;
    bool symbolic = false;
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
          auto d = read_dim((*s)[k], &why);
          if (!d) {
            fail(fmt::format("{}/shape/{}", path, k), fmt::format("{}dim {}: {}", who, k, why));
          } else {
            symbolic = symbolic || !d->is_constant();
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
    if (!broken && symbolic && kind == TensorKind::parameter) {
      fail(path + "/shape",
           fmt::format("tensor '{}': a parameter's dims are fixed numbers (only inputs take symbolic dims)", name));
    }
    if (broken) {
      broken_tensors_.insert(static_cast<int64_t>(i));
      dims = {DimExpr(0)};
      symbolic = false;
      layout.reset();
    }
    declared_.insert(name);
    declare(name, dims, symbolic, dtype, layout, kind);
  }
}

void Loader::declare(const std::string& name, const std::vector<DimExpr>& dims, bool symbolic, DType dtype,
                     std::optional<Layout> layout, TensorKind kind) {
  if (symbolic) {
    g_.symbolic_input(name, dims, dtype, layout);
    return;
  }
  std::vector<int64_t> numbers;
  for (const DimExpr& d : dims) numbers.push_back(d.constant().value_or(0));
  if (kind == TensorKind::parameter) {
    g_.parameter(name, Shape(std::move(numbers)), dtype, layout);
  } else {
    g_.input(name, Shape(std::move(numbers)), dtype, layout);
  }
}

}  // namespace kiln::json_detail
