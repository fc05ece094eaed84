// Declaring a graph's tensors (inputs, parameters) and its outputs.
#include "kiln/graph.h"

#include <fmt/format.h>

#include "ir/names.h"
#include "ops/registry.h"

namespace kiln {

Tensor Graph::declare(std::string name, Shape shape, DType dtype, std::optional<Layout> layout, TensorKind kind) {
  verified_ = false;
  Tensor t{static_cast<int32_t>(tensors_.size())};
  std::string where = fmt::format("tensors/{}", t.id);
  if (name.empty()) graph_errors_.push_back({-1, where + "/name", "a tensor needs a non-empty name"});
  if (std::string p = name_problem(name); !p.empty()) graph_errors_.push_back({-1, where + "/name", "tensor " + p});
  Status st = validate_shape(shape);
  if (!st.ok()) graph_errors_.push_back({-1, where + "/shape", fmt::format("tensor '{}': {}", name, st.message())});
  if (layout && layout_rank(*layout) > 0 && layout_rank(*layout) != shape.rank()) {
    graph_errors_.push_back({-1, where + "/layout",
                             fmt::format("tensor '{}': layout {} needs {} dims, got {}", name, layout_name(*layout),
                                         layout_rank(*layout), shape.to_string())});
  }
  if (!name.empty()) {
    if (tensor_by_name_.find(name, tensors_) >= 0) {
      graph_errors_.push_back({-1, where + "/name", fmt::format("duplicate tensor name '{}'", name)});
    } else {
      tensor_by_name_.insert(NameIndex::hash(name), t.id);
    }
  }
  TensorInfo info;
  info.name = std::move(name);
  info.layout = layout.value_or(default_layout_for_rank(shape.rank()));
  info.shape = std::move(shape);
  info.dtype = dtype;
  info.kind = kind;
  info.inferred = st.ok();
  tensors_.push_back(std::move(info));
  layout_given_.push_back(layout.has_value());
  return t;
}

Tensor Graph::declare_bound(const TensorInfo& info) {
  verified_ = false;
  Tensor t{static_cast<int32_t>(tensors_.size())};
  tensor_by_name_.insert(NameIndex::hash(info.name), t.id);
  tensors_.push_back(info);
  tensors_.back().producer = -1;
  tensors_.back().inferred = true;
  layout_given_.push_back(true);
  return t;
}

Tensor Graph::input(std::string name, Shape shape, DType dtype, std::optional<Layout> layout) {
  return declare(std::move(name), std::move(shape), dtype, layout, TensorKind::input);
}

Tensor Graph::parameter(std::string name, Shape shape, DType dtype, std::optional<Layout> layout) {
  return declare(std::move(name), std::move(shape), dtype, layout, TensorKind::parameter);
}

void Graph::output(Tensor t, std::string rename, std::optional<Layout> layout) {
  verified_ = false;
  std::string where = fmt::format("outputs/{}", outputs_.size());
  if (!t.valid() || static_cast<size_t>(t.id) >= tensors_.size()) {
    graph_errors_.push_back({-1, where, "output is an invalid tensor handle (an earlier builder call failed)"});
    return;
  }
  TensorInfo& info = tensors_[static_cast<size_t>(t.id)];
  if (std::string p = name_problem(rename); !p.empty()) {
    graph_errors_.push_back({-1, where + "/name", "output " + p});
    return;
  }
  if (!rename.empty() && rename != info.name) {
    if (tensor_by_name_.find(rename, tensors_) >= 0) {
      graph_errors_.push_back(
          {-1, where, fmt::format("cannot rename output '{}' to '{}': the name is taken", info.name, rename)});
    } else {
      tensor_by_name_.erase(info.name, tensors_);
      tensor_by_name_.insert(NameIndex::hash(rename), t.id);
      info.name = std::move(rename);
    }
  }
  if (layout) {
    info.layout = *layout;
    layout_given_[static_cast<size_t>(t.id)] = true;
  }
  outputs_.push_back(t);
}

}  // namespace kiln
