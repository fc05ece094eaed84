// DynamicExecutable: a graph with symbolic dims run at whatever binding of them its bindings give
// (include/kiln/engine.h). One Executable per binding of the symbols, made on first use; they share the
// converted weights (runtime::SharedWeights) and one workspace, grown when a binding needs more.
#include <chrono>
#include <future>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "runtime/device.h"
#include "support/log.h"

namespace kiln {

struct DynamicExecutable::Impl {
  std::shared_ptr<runtime::Device> device;
  Graph graph;
  CompileOptions options;
  std::shared_ptr<KernelCache> plan_cache;  // may be null
  runtime::SharedWeights weights;
  // unique_ptr: prepare() hands out addresses that later preparations must not move.
  std::map<DimBindings, std::unique_ptr<Executable>> by_dims;
  // Specialize::in_background: bindings running the generic kernels while their own compile, and the
  // Executables a swap replaced (kept: prepare() promised their addresses stay valid).
  struct Specialization {
    runtime::PlannedKernels own;   // the binding's own plan and kernels, made into its Executable at the swap
    std::future<Status> compiled;  // the background compile of those kernels into the caches
  };
  std::map<DimBindings, Specialization> pending;
  std::vector<std::unique_ptr<Executable>> retired;
  void* workspace = nullptr;
  size_t workspace_size = 0;
  std::map<const Executable*, void*> given;  // the workspace each Executable was last given

  ~Impl() {
    by_dims.clear();
    if (workspace) device->release(workspace);
  }

  Result<Executable*> prepare(const DimBindings& dims);
  // Specialize::in_background: the binding's Executable made from the generic plan with its own compiling in
  // the background, or nullptr where its own plan needs no kernel the generic one lacks.
  Result<Executable*> prepare_generic_first(const DimBindings& dims, const Graph& bound);
  // Swaps the binding's own kernels in once their compile is done (with `wait`, after waiting for it).
  Status swap_if_ready(const DimBindings& dims, bool wait);
  Result<Executable*> keep(const DimBindings& dims, Executable exe) {
    auto& slot = by_dims[dims];
    if (slot) retired.push_back(std::move(slot));
    slot = std::make_unique<Executable>(std::move(exe));
    return slot.get();
  }
  CompileOptions binding_options() const {
    CompileOptions co = options;
    co.allocate_workspace = false;
    return co;
  }
  // Gives `exe` the shared workspace, growing it (after the device is idle) when `exe` needs more.
  Status give_workspace(Executable& exe, Stream stream);
};

namespace {

std::string shape_text(const std::vector<DimExpr>& dims) {
  std::string s;
  for (const DimExpr& d : dims) s += (s.empty() ? "" : ", ") + d.to_string();
  return "[" + s + "]";
}

}  // namespace

Result<Executable*> DynamicExecutable::Impl::prepare(const DimBindings& dims) {
  if (auto it = by_dims.find(dims); it != by_dims.end()) return it->second.get();
  Graph bound;
  if (graph.is_symbolic()) {
    KILN_ASSIGN_OR_RETURN(bound, graph.bind(dims));
  } else {
    if (!dims.empty()) {
      return invalid_argument(fmt::format("graph '{}' has no symbolic dims, but a value was given for '{}'",
                                          graph.name(), dims.begin()->first));
    }
    bound = graph;
  }
  if (options.specialize == CompileOptions::Specialize::in_background && graph.is_symbolic() &&
      device->kind() != DeviceKind::ref && !options.plan.tiles) {
    KILN_ASSIGN_OR_RETURN(Executable * generic, prepare_generic_first(dims, bound));
    if (generic) return generic;
  }
  // As Engine::compile plans: for this device, through the plan cache.
  KILN_ASSIGN_OR_RETURN(Executable exe,
                        runtime::compile_graph(device, plan_cache.get(), bound, binding_options(), &weights));
  return keep(dims, std::move(exe));
}

namespace {

// Whether `own` launches a kernel (by entry and whole source) that `generic` does not.
bool needs_other_kernels(const PlanKernels& own, const PlanKernels& generic) {
  std::set<std::pair<std::string_view, std::string_view>> have;
  for (int i : generic.distinct) {
    const codegen::Kernel& k = generic.launches[static_cast<size_t>(i)];
    have.insert({k.entry, k.source});
  }
  for (int i : own.distinct) {
    const codegen::Kernel& k = own.launches[static_cast<size_t>(i)];
    if (!have.count({k.entry, k.source})) return true;
  }
  return false;
}

}  // namespace

Result<Executable*> DynamicExecutable::Impl::prepare_generic_first(const DimBindings& dims, const Graph& bound) {
  PlanOptions po = options.plan;
  po.target = device->target();
  po.require_kernels = true;
  KILN_ASSIGN_OR_RETURN(runtime::PlannedKernels own, runtime::plan_with_cache(plan_cache.get(), bound, po));
  po.tiles = TilePolicy::generic_only;
  KILN_ASSIGN_OR_RETURN(runtime::PlannedKernels generic, runtime::plan_with_cache(plan_cache.get(), bound, po));
  if (!needs_other_kernels(own.kernels, generic.kernels)) {
    KILN_ASSIGN_OR_RETURN(Executable exe,
                          runtime::make_executable(device, std::move(own), binding_options(), &weights));
    return keep(dims, std::move(exe));
  }
  KILN_ASSIGN_OR_RETURN(Executable exe,
                        runtime::make_executable(device, std::move(generic), binding_options(), &weights));
  // The compile loads the kernels on the device, which fills the caches, and lets them go: the swap's load of
  // the same kernels then compiles nothing. It holds its own copies of all it reads.
  const std::string arch = options.arch.empty() ? device->arch() : options.arch;
  auto compile = [dev = device, kernels = own.kernels, arch, name = bound.name()]() -> Status {
    std::vector<codegen::Kernel> widened;
    const std::vector<const codegen::Kernel*> distinct = runtime::kernels_to_load(kernels, widened);
    CompileReport report;
    return dev->load(distinct, arch, name, report).status();
  };
  KILN_LOG(info, "graph '{}' at {}: the batch-generic kernels serve while the binding's own compile", graph.name(),
           bindings_text(dims));
  try {
    pending[dims] = {std::move(own), std::async(std::launch::async, std::move(compile))};
  } catch (const std::system_error& e) {  // no thread to be had: the generic kernels stay
    KILN_LOG(warn, "graph '{}' at {}: no thread for the binding's own compile ({}); the generic kernels stay",
             graph.name(), bindings_text(dims), e.what());
  }
  return keep(dims, std::move(exe));
}

Status DynamicExecutable::Impl::swap_if_ready(const DimBindings& dims, bool wait) {
  auto it = pending.find(dims);
  if (it == pending.end()) return {};
  if (!wait && it->second.compiled.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return {};
  const Status compiled = it->second.compiled.get();
  runtime::PlannedKernels own = std::move(it->second.own);
  pending.erase(it);
  if (!compiled.ok()) {
    KILN_LOG(warn, "graph '{}' at {}: the binding's own kernels did not compile, the generic ones stay: {}",
             graph.name(), bindings_text(dims), compiled.message());
    return compiled;
  }
  Result<Executable> exe = runtime::make_executable(device, std::move(own), binding_options(), &weights);
  if (!exe.ok()) {
    KILN_LOG(warn, "graph '{}' at {}: the binding's own kernels compiled but did not load, the generic ones stay: {}",
             graph.name(), bindings_text(dims), exe.status().message());
    return exe.status();
  }
  KILN_LOG(info, "graph '{}' at {}: the binding's own kernels swapped in", graph.name(), bindings_text(dims));
  return keep(dims, std::move(exe).value()).status();
}

Status DynamicExecutable::Impl::give_workspace(Executable& exe, Stream stream) {
  const size_t need = static_cast<size_t>(exe.workspace_bytes());
  if (need == 0) return {};
  if (need > workspace_size) {
    // Runs of other bindings may still be using the old one (one stream at a time, but enqueued).
    if (workspace) {
      KILN_RETURN_IF_ERROR(device->synchronize(stream));
      device->release(workspace);
      workspace = nullptr, workspace_size = 0;
    }
    KILN_ASSIGN_OR_RETURN(workspace, device->allocate(need));
    workspace_size = need;
    given.clear();
  }
  if (given[&exe] == workspace) return {};
  KILN_RETURN_IF_ERROR(exe.set_workspace(workspace, workspace_size));
  given[&exe] = workspace;
  return {};
}

DynamicExecutable::DynamicExecutable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DynamicExecutable::DynamicExecutable(DynamicExecutable&&) noexcept = default;
DynamicExecutable& DynamicExecutable::operator=(DynamicExecutable&&) noexcept = default;
DynamicExecutable::~DynamicExecutable() = default;

Result<DimBindings> DynamicExecutable::dims_of(const Bindings& bindings) const {
  const Graph& g = impl_->graph;
  if (!g.is_symbolic()) return DimBindings{};
  std::map<std::string, Shape, std::less<>> shapes;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& ti = g.tensor(t);
    const std::optional<std::vector<DimExpr>> dims = g.symbolic_shape(t);
    if (ti.kind != TensorKind::input || !dims) continue;
    const std::string what = fmt::format("{} {}", shape_text(*dims), dtype_name(ti.dtype));
    auto b = bindings.find(ti.name);
    if (b == bindings.end()) return invalid_argument(fmt::format("input '{}' ({}) is not bound", ti.name, what));
    int open = -1, opens = 0;
    int64_t fixed = dtype_size(ti.dtype);
    for (size_t k = 0; k < dims->size(); ++k) {
      if (auto c = (*dims)[k].constant()) {
        fixed *= *c;
      } else {
        open = static_cast<int>(k), ++opens;
      }
    }
    if (opens != 1) continue;  // none open, or several: other inputs must give their symbols
    const int64_t bytes = static_cast<int64_t>(b->second.bytes);
    if (fixed <= 0 || bytes <= 0 || bytes % fixed != 0) {
      return invalid_argument(fmt::format(
          "input '{}' ({}): its binding of {} bytes is no whole number of {}-byte steps of dim {} ({}), so it "
          "gives no value of {}",
          ti.name, what, bytes, fixed, open, (*dims)[static_cast<size_t>(open)].to_string(),
          (*dims)[static_cast<size_t>(open)].to_string()));
    }
    std::vector<int64_t> values;
    for (const DimExpr& d : *dims) values.push_back(d.constant().value_or(bytes / fixed));
    shapes[ti.name] = Shape(values);
  }
  auto found = g.dims_from_shapes(shapes);
  if (!found.ok()) {
    return invalid_argument(fmt::format("the bindings' sizes (read as the symbolic inputs' shapes): {}{}",
                                        found.status().message(),
                                        found.status().message().starts_with("no value")
                                            ? "; or give the values: DynamicExecutable::run(dims, bindings)"
                                            : ""));
  }
  return found;
}

Status DynamicExecutable::run(const Bindings& bindings, Stream stream, RunReport* report, const RunOptions& options) {
  KILN_ASSIGN_OR_RETURN(const DimBindings dims, dims_of(bindings));
  return run(dims, bindings, stream, report, options);
}

Status DynamicExecutable::run(const DimBindings& dims, const Bindings& bindings, Stream stream, RunReport* report,
                              const RunOptions& options) {
  (void)impl_->swap_if_ready(dims, false);  // a failed background compile was logged: the generic kernels stay
  KILN_ASSIGN_OR_RETURN(Executable * exe, impl_->prepare(dims));
  KILN_RETURN_IF_ERROR(impl_->give_workspace(*exe, stream));
  return exe->run(bindings, stream, report, options);
}

Result<const Executable*> DynamicExecutable::prepare(const DimBindings& dims) {
  KILN_ASSIGN_OR_RETURN(Executable * exe, impl_->prepare(dims));
  return static_cast<const Executable*>(exe);
}

const Executable* DynamicExecutable::executable(const DimBindings& dims) const {
  auto it = impl_->by_dims.find(dims);
  return it == impl_->by_dims.end() ? nullptr : it->second.get();
}

int DynamicExecutable::bindings_prepared() const { return static_cast<int>(impl_->by_dims.size()); }

bool DynamicExecutable::specializing(const DimBindings& dims) const { return impl_->pending.count(dims) > 0; }

Status DynamicExecutable::wait_specialized(const DimBindings& dims) {
  KILN_RETURN_IF_ERROR(impl_->prepare(dims).status());
  return impl_->swap_if_ready(dims, true);
}

void DynamicExecutable::invalidate_weights() {
  for (auto& [key, w] : impl_->weights) w->converted_from = nullptr;
}

const Graph& DynamicExecutable::graph() const { return impl_->graph; }

namespace runtime {

Result<DynamicExecutable> make_dynamic_executable(std::shared_ptr<Device> device, const Graph& graph,
                                                  const CompileOptions& options,
                                                  std::shared_ptr<KernelCache> plan_cache) {
  auto m = std::make_unique<DynamicExecutable::Impl>();
  m->graph = graph;
  KILN_RETURN_IF_ERROR(m->graph.verify());
  m->device = std::move(device);
  m->options = options;
  m->plan_cache = std::move(plan_cache);
  return DynamicExecutable(std::move(m));
}

}  // namespace runtime

}  // namespace kiln
