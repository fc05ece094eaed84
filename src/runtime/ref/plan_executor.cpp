// The reference backend's second mode: a Plan run group by group, every intermediate that crosses a
// group boundary living in one workspace at its planned offset. Values stay f64 (a slot per byte of the
// planned workspace), so the results equal run_reference exactly when the plan preserves meaning, and a
// memory plan that lets two live buffers overlap corrupts them.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ir/id_tables.h"
#include "kiln/plan.h"
#include "kiln/reference.h"
#include "ops/registry.h"

namespace kiln {

namespace {

class PlanRunner {
 public:
  PlanRunner(const Plan& p, const TensorMap& inputs) : p_(p), g_(p.graph), inputs_(inputs) {
    ws_.assign(static_cast<size_t>(p.workspace_bytes), std::numeric_limits<double>::quiet_NaN());
    buffer_of_.assign(g_.tensors().size(), -1);
    for (size_t i = 0; i < p.buffers.size(); ++i) {
      buffer_of_[p.buffers[i].tensor] = static_cast<int32_t>(i);
      slices_.push_back(slice_of(p.buffers[i]));
    }
    is_output_.assign(g_.tensors().size(), false);
    for (Tensor t : g_.outputs()) {
      is_output_[t] = true;
      HostTensor h(g_.tensor(t).shape, g_.tensor(t).dtype);
      std::fill(h.data.begin(), h.data.end(), std::numeric_limits<double>::quiet_NaN());
      results_.emplace(g_.tensor(t).name, std::move(h));
    }
  }

  TensorMap run() {
    for (const Group& grp : p_.groups) {
      if (grp.kind == GroupKind::concat_elided) continue;  // its producers wrote their slices
      std::map<int32_t, HostTensor> local;
      for (int32_t n : grp.nodes) run_node(g_.node(n), local);
      for (Tensor t : grp.outputs) store(t, local.at(t.id));
    }
    for (auto& [name, t] : results_) {
      for (double& v : t.data) v = round_to_dtype(v, t.dtype);
    }
    return std::move(results_);
  }

 private:
  // Element i of a workspace tensor sits in the slot of its first byte.
  size_t slot(const BufferPlacement& b, int64_t i) const {
    return static_cast<size_t>(b.offset + i * dtype_size(g_.tensor(b.tensor).dtype));
  }

  HostTensor load(Tensor t) {
    const TensorInfo& info = g_.tensor(t);
    if (info.kind != TensorKind::intermediate) {
      HostTensor h = inputs_.find(info.name)->second;
      for (double& v : h.data) v = round_to_dtype(v, info.dtype);
      return h;
    }
    HostTensor h(info.shape, info.dtype);
    for (int64_t i = 0; i < h.numel(); ++i) h.data[static_cast<size_t>(i)] = element(t, i);
    return h;
  }

  // Where element i (row-major) of intermediate t lives: in a graph output or in the workspace; a tensor
  // aliasing a slice of an elided concat's output (an input written in place, or a view) lives there.
  double& element(Tensor t, int64_t i) {
    if (is_output_[t]) return results_.at(g_.tensor(t).name).data[static_cast<size_t>(i)];
    const int32_t b = buffer_of_[t];
    KILN_CHECK(b >= 0, fmt::format("plan uses '{}', which no buffer holds", g_.tensor(t).name));
    const BufferPlacement& bp = p_.buffers[static_cast<size_t>(b)];
    if (!bp.alias_of.valid()) return ws_[slot(bp, i)];
    // outer x (extent along the axis) x inner, at an offset along the root's axis.
    const Slice& s = slices_.at(static_cast<size_t>(b));
    const int64_t o = i / (s.extent * s.inner), k = i / s.inner % s.extent, j = i % s.inner;
    return element(bp.alias_of, (o * s.root_extent + bp.alias_axis_offset + k) * s.inner + j);
  }

  // The geometry of a buffer aliasing a slice of a concat's output along the concat's axis.
  struct Slice {
    int64_t extent = 0, root_extent = 0, inner = 1;  // along the axis in the slice and the root; below it
  };
  Slice slice_of(const BufferPlacement& bp) const {
    Slice s;
    if (!bp.alias_of.valid()) return s;
    const Node& c = g_.node(g_.tensor(bp.alias_of).producer);
    const Shape& out = g_.tensor(bp.alias_of).shape;
    const int axis = *normalize_axis(std::get<int64_t>(c.attrs.at("axis")), out.rank());
    for (int d = axis + 1; d < out.rank(); ++d) s.inner *= out[d];
    s.extent = g_.tensor(bp.tensor).shape[axis];
    s.root_extent = out[axis];
    return s;
  }

  void store(Tensor t, const HostTensor& v) {
    for (int64_t i = 0; i < v.numel(); ++i) element(t, i) = v.data[static_cast<size_t>(i)];
  }

  void run_node(const Node& n, std::map<int32_t, HostTensor>& local) {
    const OpDef& def = op_def(*n.op);
    std::vector<HostTensor> loaded;  // stable storage for inputs read from memory
    loaded.reserve(16);
    RefCtx ctx{n, {}, {}};
    std::vector<std::vector<const HostTensor*>> ports;
    for (const auto& port : n.inputs) {
      std::vector<const HostTensor*> ts;
      for (Tensor t : port) {
        auto it = local.find(t.id);
        if (it != local.end()) {
          ts.push_back(&it->second);
        } else {
          loaded.push_back(load(t));
          ts.push_back(nullptr);  // patched below: `loaded` may still grow
        }
      }
      ports.push_back(std::move(ts));
    }
    size_t next = 0;
    for (size_t p = 0; p < n.inputs.size(); ++p) {
      for (size_t k = 0; k < n.inputs[p].size(); ++k) {
        if (!ports[p][k]) ports[p][k] = &loaded[next++];
      }
    }
    ctx.inputs = std::move(ports);
    for (Tensor t : n.outputs) {
      local[t.id] = HostTensor(g_.tensor(t).shape, g_.tensor(t).dtype);
    }
    for (Tensor t : n.outputs) ctx.outputs.push_back(&local[t.id]);
    def.ref(def, ctx);
  }

  const Plan& p_;
  const Graph& g_;
  const TensorMap& inputs_;
  std::vector<double> ws_;
  PerTensor<int32_t> buffer_of_;
  std::vector<Slice> slices_;  // per buffer
  PerTensor<bool> is_output_;
  TensorMap results_;
};

}  // namespace

Result<TensorMap> run_plan_reference(const Plan& p, const TensorMap& inputs) {
  KILN_RETURN_IF_ERROR(check_bindings(p.graph, inputs));
  return PlanRunner(p, inputs).run();
}

}  // namespace kiln
