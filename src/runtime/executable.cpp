// Executable: a Plan with its kernels loaded on a device, run against the caller's bindings.
//
// Where each kernel parameter's memory comes from (a bound tensor, a range of the workspace for intermediates
// at their planned offsets, or the converted-weight store) is decided once, when the Executable is made; a
// run only looks each binding up once and adds offsets. Weight transforms write the store, so they run
// only when their source weight's binding changed since they last ran (or invalidate_weights() was called);
// every other kernel runs on every run, in plan order, on the caller's stream.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "codegen/kernel_builder.h"
#include "kiln/emu_plan.h"
#include "runtime/device.h"
#include "runtime/kernel_provider.h"
#include "support/stopwatch.h"

namespace kiln {

namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// A graph input, parameter or output: what a binding must look like.
struct Port {
  std::string name;
  Tensor tensor;
  TensorKind kind = TensorKind::input;
  bool output = false;
  size_t bytes = 0;
  std::string what;  // "f16 [1, 64, 56, 56] NHWC"
};

// The memory of one kernel parameter: the binding of port `index`, or `bytes` at `offset` in the workspace
// or the converted-weight store; or, for an int parameter (a batch or a size), the value itself.
struct ArgSource {
  enum class From : uint8_t { port, workspace, weights, value } from = From::port;
  int32_t value = 0;
  size_t index = 0;
  int64_t offset = 0;
  size_t bytes = 0;
  std::string_view name;  // the tensor's (for the emulator's bounds reports)
};

// One kernel of a run.
struct Launch {
  int32_t group = 0;
  int distinct = 0;             // index into the loaded kernels
  codegen::Kernel spec;         // this group's kernel: its tensors, launch configuration
  std::vector<ArgSource> args;  // per kernel parameter
  int weight_slot = -1;         // a weight transform: its slot
};

// A converted weight: `dst`, in `mem`, computed from the binding of port `src_port`.
struct WeightSlot {
  size_t src_port = 0;
  Tensor dst;
  std::shared_ptr<runtime::ConvertedWeight> mem;
};

// The workspace range of a group's scratch parameter (Group::scratch).
ArgSource scratch_arg(const Group::Scratch& sc, codegen::KernelParam::Scratch which) {
  const bool counters = which == codegen::KernelParam::Scratch::counters;
  ArgSource a;
  a.from = ArgSource::From::workspace;
  a.offset = counters ? sc.counters_offset : sc.partials_offset;
  a.bytes = static_cast<size_t>(counters ? sc.counters_bytes : sc.partials_bytes);
  a.name = counters ? "scratch counters" : "scratch partial sums";
  return a;
}

}  // namespace

struct Executable::Impl {
  std::shared_ptr<runtime::Device> device;
  Plan plan;
  CompileOptions options;
  CompileReport report;
  std::vector<Port> ports;  // sorted by name, as Bindings are
  std::vector<Launch> launches;
  std::vector<WeightSlot> weights;
  std::unique_ptr<runtime::LoadedKernels> loaded;

  void* workspace = nullptr;
  size_t workspace_size = 0;
  bool owns_workspace = false;
  void* weight_store = nullptr;  // the converted weights not shared with other Executables

  // cuda_graph: the bound addresses the captured graph was recorded with.
  bool captured = false;
  std::vector<const void*> captured_addresses;

  ~Impl() {
    loaded.reset();
    if (owns_workspace && workspace) device->release(workspace);
    if (weight_store) device->release(weight_store);
  }

  // The binding of every port, in port order, after checking them all.
  Result<std::vector<Binding>> resolve(const Bindings& b) const;
  Status run_ref(const std::vector<Binding>& bound);
  // `ms`: time the launch (launch_timed) and say how long it took.
  Status launch(const Launch& l, const std::vector<Binding>& bound, Stream stream, double* ms = nullptr);
  Status run(const Bindings& b, Stream stream, RunReport& rep, const RunOptions& run_options);
};

Result<std::vector<Binding>> Executable::Impl::resolve(const Bindings& b) const {
  std::vector<Binding> bound(ports.size());
  // Ports and bindings are both sorted by name: one merged walk pairs them.
  auto it = b.begin();
  size_t i = 0;
  while (it != b.end() || i < ports.size()) {
    const int order = it == b.end() ? 1 : i == ports.size() ? -1 : it->first.compare(ports[i].name);
    if (order < 0) {
      std::string known;
      for (const Port& p : ports) known += (known.empty() ? "" : ", ") + p.name;
      return invalid_argument(
          fmt::format("unknown binding '{}': graph '{}' has no input, parameter or output of "
                      "that name (expected one of: {})",
                      it->first, plan.graph.name(), known));
    }
    const Port& p = ports[i];
    if (order > 0) {
      const char* kind = p.output ? "output" : p.kind == TensorKind::parameter ? "parameter" : "input";
      return invalid_argument(fmt::format("{} '{}' ({}) is not bound", kind, p.name, p.what));
    }
    const Binding& binding = it->second;
    if (!binding.data) return invalid_argument(fmt::format("binding '{}' is a null pointer", p.name));
    if (reinterpret_cast<uintptr_t>(binding.data) % 16 != 0) {
      return invalid_argument(
          fmt::format("binding '{}': address {} is not 16-byte aligned (kiln's kernels load "
                      "16 bytes at a time; cudaMalloc'd memory is 256-byte aligned)",
                      p.name, binding.data));
    }
    if (binding.bytes != p.bytes) {
      return invalid_argument(
          fmt::format("binding '{}': expected {} bytes ({}), got {}", p.name, p.bytes, p.what, binding.bytes));
    }
    bound[i] = binding;
    ++it;
    ++i;
  }
  // An output sharing memory with another binding would be read after kiln overwrote it: a wrong answer.
  for (size_t o = 0; o < ports.size(); ++o) {
    if (!ports[o].output) continue;
    const auto* lo = static_cast<const unsigned char*>(bound[o].data);
    for (size_t q = 0; q < ports.size(); ++q) {
      const auto* plo = static_cast<const unsigned char*>(bound[q].data);
      if (q != o && lo < plo + ports[q].bytes && plo < lo + ports[o].bytes) {
        return invalid_argument(
            fmt::format("output '{}' overlaps the memory bound to '{}': outputs need memory of their own",
                        ports[o].name, ports[q].name));
      }
    }
  }
  return bound;
}

Status Executable::Impl::run_ref(const std::vector<Binding>& bound) {
  const Graph& g = plan.graph;
  TensorMap inputs;
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i].output) continue;
    const TensorInfo& ti = g.tensor(ports[i].tensor);
    inputs[ports[i].name] =
        from_device_bytes(static_cast<const unsigned char*>(bound[i].data), ti.shape, ti.dtype, ti.layout);
  }
  KILN_ASSIGN_OR_RETURN(TensorMap out, run_plan_reference(plan, inputs));
  for (size_t i = 0; i < ports.size(); ++i) {
    if (!ports[i].output) continue;
    const std::vector<unsigned char> bytes = to_device_bytes(out.at(ports[i].name), g.tensor(ports[i].tensor).layout);
    std::memcpy(bound[i].data, bytes.data(), bytes.size());
  }
  return {};
}

Status Executable::Impl::launch(const Launch& l, const std::vector<Binding>& bound, Stream stream, double* ms) {
  std::vector<runtime::KernelArg> args;
  args.reserve(l.args.size());
  for (const ArgSource& a : l.args) {
    switch (a.from) {
      case ArgSource::From::port: args.push_back({bound[a.index].data, bound[a.index].bytes, a.name}); break;
      case ArgSource::From::workspace:
        args.push_back({static_cast<unsigned char*>(workspace) + a.offset, a.bytes, a.name});
        break;
      case ArgSource::From::weights: args.push_back({weights[a.index].mem->data, a.bytes, a.name}); break;
      case ArgSource::From::value: args.push_back({nullptr, 0, a.name, true, a.value}); break;
    }
  }
  Status s = ms ? loaded->launch_timed(l.distinct, l.spec, args, stream, *ms)
                : loaded->launch(l.distinct, l.spec, args, stream);
  if (!s.ok()) return Status(s.code(), fmt::format("group {} ({}): {}", l.group, l.spec.entry, s.message()));
  return {};
}

Status Executable::Impl::run(const Bindings& b, Stream stream, RunReport& rep, const RunOptions& run_options) {
  const support::Stopwatch since_start;  // KernelTime::start_ms
  KILN_ASSIGN_OR_RETURN(const std::vector<Binding> bound, resolve(b));
  if (device->kind() == DeviceKind::ref) return run_ref(bound);
  if (plan.workspace_bytes > 0 && !workspace) {
    return invalid_argument(
        fmt::format("graph '{}' needs a workspace of {} bytes: give one with "
                    "Executable::set_workspace (compiled with allocate_workspace = false)",
                    plan.graph.name(), plan.workspace_bytes));
  }

  // Weight transforms whose source binding changed (or every one after invalidate_weights()).
  for (const Launch& l : launches) {
    if (l.weight_slot < 0) continue;
    WeightSlot& w = weights[static_cast<size_t>(l.weight_slot)];
    const void* src = bound[w.src_port].data;
    if (w.mem->converted_from == src) continue;
    w.mem->converted_from = nullptr;  // a failed launch leaves it invalid
    KILN_RETURN_IF_ERROR(launch(l, bound, stream));
    w.mem->converted_from = src;
    ++rep.weight_transforms_run;
  }

  // The scratch counters start every run at zero (reduction epilogues and split-K count their blocks in them).
  auto zero_scratch = [&](Stream st) -> Status {
    if (plan.zeroed_bytes == 0) return {};
    return device->fill(static_cast<unsigned char*>(workspace) + plan.zeroed_offset, 0,
                        static_cast<size_t>(plan.zeroed_bytes), st);
  };
  if (options.cuda_graph && loaded->can_capture() && !run_options.time_kernels) {
    std::vector<const void*> addresses{workspace, weight_store};
    for (const Binding& p : bound) addresses.push_back(p.data);
    if (!captured || addresses != captured_addresses) {
      captured = false;
      KILN_ASSIGN_OR_RETURN(Stream capture, loaded->begin_capture());
      Status s = zero_scratch(capture);
      for (const Launch& l : launches) {
        if (!s.ok()) break;
        if (l.weight_slot >= 0) continue;
        s = launch(l, bound, capture);
        if (!s.ok()) break;
      }
      Status e = loaded->end_capture();
      KILN_RETURN_IF_ERROR(s);
      KILN_RETURN_IF_ERROR(e);
      captured = true;
      captured_addresses = std::move(addresses);
    } else {
      rep.graph_replayed = true;
    }
    KILN_RETURN_IF_ERROR(loaded->replay(stream));
    rep.kernels_launched = report.launches;
    return {};
  }
  KILN_RETURN_IF_ERROR(zero_scratch(stream));
  for (const Launch& l : launches) {
    if (l.weight_slot >= 0) continue;
    if (run_options.time_kernels) {
      double ms = 0;
      const double start_ms = since_start.ms();
      KILN_RETURN_IF_ERROR(launch(l, bound, stream, &ms));
      rep.kernel_times.push_back({l.group,
                                  l.spec.entry,
                                  ms,
                                  start_ms,
                                  {l.spec.grid.x, l.spec.grid.y, l.spec.grid.z},
                                  {l.spec.block.x, l.spec.block.y, l.spec.block.z}});
    } else {
      KILN_RETURN_IF_ERROR(launch(l, bound, stream));
    }
    ++rep.kernels_launched;
  }
  return {};
}

Executable::Executable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
Executable::~Executable() = default;

Status Executable::run(const Bindings& bindings, Stream stream, RunReport* report) {
  return run(bindings, stream, report, RunOptions{});
}

Status Executable::run(const Bindings& bindings, Stream stream, RunReport* report, const RunOptions& options) {
  RunReport rep;
  Status s = impl_->run(bindings, stream, rep, options);
  if (report) *report = std::move(rep);
  return s;
}

Status Executable::set_workspace(void* data, size_t bytes) {
  Impl& m = *impl_;
  if (bytes < static_cast<size_t>(m.plan.workspace_bytes)) {
    return invalid_argument(fmt::format("workspace of {} bytes given; graph '{}' needs {}", bytes, m.plan.graph.name(),
                                        m.plan.workspace_bytes));
  }
  if (m.plan.workspace_bytes > 0 && (!data || reinterpret_cast<uintptr_t>(data) % kWorkspaceAlignment != 0)) {
    return invalid_argument(fmt::format("workspace at {} is not {}-byte aligned", data, kWorkspaceAlignment));
  }
  if (m.owns_workspace && m.workspace) m.device->release(m.workspace);
  m.workspace = data;
  m.workspace_size = bytes;
  m.owns_workspace = false;
  m.captured = false;
  return {};
}

int64_t Executable::workspace_bytes() const { return impl_->plan.workspace_bytes; }
void Executable::invalidate_weights() {
  for (WeightSlot& w : impl_->weights) w.mem->converted_from = nullptr;
}
const Plan& Executable::plan() const { return impl_->plan; }
const CompileReport& Executable::report() const { return impl_->report; }

Result<size_t> Executable::binding_bytes(std::string_view name) const {
  for (const Port& p : impl_->ports) {
    if (p.name == name) return p.bytes;
  }
  return not_found(fmt::format("graph '{}' has no input, parameter or output '{}'", impl_->plan.graph.name(), name));
}

namespace runtime {

namespace {

// What a caller binds: every input, parameter and output, sorted by name.
std::vector<Port> bound_ports(const Graph& g) {
  std::vector<Port> ports;
  std::set<int32_t> outputs;
  for (Tensor t : g.outputs()) outputs.insert(t.id);
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const TensorInfo& ti = g.tensors()[i];
    const bool out = outputs.count(static_cast<int32_t>(i)) > 0;
    if (ti.kind == TensorKind::intermediate && !out) continue;
    ports.push_back({ti.name, Tensor{static_cast<int32_t>(i)}, ti.kind, out,
                     static_cast<size_t>(ti.shape.numel() * dtype_size(ti.dtype)),
                     fmt::format("{} {} {}", dtype_name(ti.dtype), ti.shape.to_string(), layout_name(ti.layout))});
  }
  std::sort(ports.begin(), ports.end(), [](const Port& a, const Port& b) { return a.name < b.name; });
  return ports;
}

// Where kernel parameter `prm` of launch `l` comes from: an int by value (the batch or a size), the group's scratch, a
// binding, the converted-weight store or the workspace.
Result<ArgSource> arg_source(const Executable::Impl& m, const Launch& l, const codegen::KernelParam& prm,
                             const std::map<int32_t, size_t>& port_of,
                             const std::map<int32_t, const BufferPlacement*>& placement) {
  ArgSource a;
  if (prm.is_value()) {
    a.from = ArgSource::From::value;
    a.value = prm.value;
    a.name = prm.size ? "size" : "batch";
    return a;
  }
  if (prm.scratch != codegen::KernelParam::Scratch::none)
    return scratch_arg(m.plan.group(l.group).scratch, prm.scratch);
  const TensorInfo& ti = m.plan.graph.tensor(prm.tensor);
  a.name = ti.name;
  const auto w = std::find_if(m.weights.begin(), m.weights.end(),
                              [&](const WeightSlot& ws) { return ws.dst.id == prm.tensor.id; });
  if (auto it = port_of.find(prm.tensor.id); it != port_of.end()) {
    a.from = ArgSource::From::port;
    a.index = it->second;
  } else if (w != m.weights.end()) {
    a.from = ArgSource::From::weights;
    a.index = static_cast<size_t>(w - m.weights.begin());
    a.bytes = static_cast<size_t>(w->mem->bytes);
  } else if (auto pl = placement.find(prm.tensor.id); pl != placement.end() && !pl->second->alias_of.valid()) {
    a.from = ArgSource::From::workspace;
    a.offset = pl->second->offset;
    a.bytes = static_cast<size_t>(pl->second->bytes);
  } else {
    return Status(StatusCode::internal, fmt::format("tensor '{}' has no memory in the plan", ti.name));
  }
  return a;
}

}  // namespace

std::vector<const codegen::Kernel*> kernels_to_load(const PlanKernels& pk, std::vector<codegen::Kernel>& widened) {
  std::vector<const codegen::Kernel*> out;
  widened.reserve(pk.distinct.size());  // the pointers below stay valid
  for (size_t j = 0; j < pk.distinct.size(); ++j) {
    const codegen::Kernel& first = pk.launches[static_cast<size_t>(pk.distinct[j])];
    if (pk.distinct_smem[j] > first.dynamic_smem) {
      widened.push_back(first);
      widened.back().dynamic_smem = pk.distinct_smem[j];
      out.push_back(&widened.back());
    } else {
      out.push_back(&first);
    }
  }
  return out;
}

Result<Executable> make_executable(std::shared_ptr<Device> device, PlannedKernels planned,
                                   const CompileOptions& options, SharedWeights* shared) {
  auto m = std::make_unique<Executable::Impl>();
  m->device = std::move(device);
  m->plan = std::move(planned.plan);
  m->options = options;
  CompileReport& rep = m->report;
  rep.device = m->device->kind();
  rep.plan_ms = planned.plan_ms;
  rep.codegen_ms = planned.codegen_ms;
  rep.plan_cached = planned.cached;
  if (!planned.warning.empty()) rep.warnings.push_back(std::move(planned.warning));
  rep.groups = static_cast<int>(m->plan.groups.size());
  rep.workspace_bytes = m->plan.workspace_bytes;
  const Graph& g = m->plan.graph;

  m->ports = bound_ports(g);
  if (rep.device == DeviceKind::ref) return Executable(std::move(m));
  std::map<int32_t, size_t> port_of;  // tensor id -> index into ports
  for (size_t i = 0; i < m->ports.size(); ++i) port_of[m->ports[i].tensor.id] = i;
  std::map<int32_t, const BufferPlacement*> placement;
  for (const BufferPlacement& b : m->plan.buffers) placement[b.tensor.id] = &b;

  // Kernels: one per kernel group and weight transform; identical groups share one compiled kernel
  // (identical: the same entry and the whole same source, plan_kernel_launches).
  PlanKernels pk = std::move(planned.kernels);
  std::vector<codegen::Kernel> widened;
  const std::vector<const codegen::Kernel*> distinct = kernels_to_load(pk, widened);
  rep.distinct_kernels = static_cast<int>(distinct.size());
  rep.arch = options.arch.empty() ? m->device->arch() : options.arch;
  support::Stopwatch sw;
  KILN_ASSIGN_OR_RETURN(m->loaded, m->device->load(distinct, rep.arch, g.name(), rep));
  rep.load_ms = sw.ms() - rep.obtain_ms;

  int64_t weight_bytes = 0;                                    // of the store: the weights not shared
  std::vector<std::pair<ConvertedWeight*, int64_t>> in_store;  // and where each is in it
  for (size_t i = 0; i < pk.launches.size(); ++i) {
    Launch l;
    l.group = pk.group[i];
    l.distinct = pk.distinct_of[i];
    l.spec = std::move(pk.launches[i]);
    const Group& grp = m->plan.group(l.group);
    if (grp.kind == GroupKind::weight_transform) {
      WeightSlot w;
      w.src_port = port_of.at(grp.inputs.at(0).id);
      w.dst = grp.outputs.at(0);
      const TensorInfo& dst = g.tensor(w.dst);
      const int64_t bytes = dst.shape.numel() * dtype_size(dst.dtype);
      if (shared) {
        const std::string key = fmt::format("{}|{}|{}", dst.name, l.spec.entry, bytes);
        if (auto it = shared->find(key); it != shared->end()) {
          w.mem = it->second;
        } else {
          KILN_ASSIGN_OR_RETURN(void* data, m->device->allocate(static_cast<size_t>(bytes)));
          w.mem = std::make_shared<ConvertedWeight>();
          w.mem->device = m->device, w.mem->data = data, w.mem->bytes = bytes;
          (*shared)[key] = w.mem;
          rep.weight_bytes += bytes;
        }
      } else {
        w.mem = std::make_shared<ConvertedWeight>();
        w.mem->bytes = bytes;
        in_store.emplace_back(w.mem.get(), weight_bytes);
        weight_bytes = align_up(weight_bytes + bytes, kWorkspaceAlignment);
      }
      l.weight_slot = static_cast<int>(m->weights.size());
      m->weights.push_back(w);
      ++rep.weight_transforms;
    } else {
      ++rep.launches;
    }
    rep.entries.push_back(l.spec.entry);
    m->launches.push_back(std::move(l));
  }
  rep.weight_bytes += weight_bytes;

  // Every kernel parameter's memory: a binding, the converted-weight store or the workspace.
  for (Launch& l : m->launches) {
    for (const codegen::KernelParam& prm : l.spec.params) {
      KILN_ASSIGN_OR_RETURN(ArgSource a, arg_source(*m, l, prm, port_of, placement));
      l.args.push_back(a);
    }
  }
  if (weight_bytes > 0) {
    KILN_ASSIGN_OR_RETURN(m->weight_store, m->device->allocate(static_cast<size_t>(weight_bytes)));
    for (auto [mem, offset] : in_store) mem->data = static_cast<unsigned char*>(m->weight_store) + offset;
  }
  if (options.allocate_workspace && m->plan.workspace_bytes > 0) {
    KILN_ASSIGN_OR_RETURN(m->workspace, m->device->allocate(static_cast<size_t>(m->plan.workspace_bytes)));
    m->workspace_size = static_cast<size_t>(m->plan.workspace_bytes);
    m->owns_workspace = true;
  }
  return Executable(std::move(m));
}

}  // namespace runtime

}  // namespace kiln
