// profile_plan and rebatch_graph (include/kiln/profile.h): a plan's kernels with their ptxas resources,
// occupancy, waves, the emulator's counters and a roofline estimate.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "codegen/kernel.h"
#include "ir/id_tables.h"
#include "kiln/emu_plan.h"
#include "kiln/host_tensor.h"
#include "ops/registry.h"
#include "profile/profile_internal.h"
#include "runtime/kernel_provider.h"

namespace kiln {

namespace {

using profile_detail::KernelShape;

// Registers, spills and static shared memory of every distinct kernel, from the cache or NVRTC.
std::map<std::string, KernelInfo> ptxas_info(const std::vector<codegen::Kernel>& distinct, const std::string& arch,
                                             std::vector<std::string>& warnings) {
  std::map<std::string, KernelInfo> out;
  auto config = CacheConfig::from_env();
  if (!config.ok()) {
    warnings.push_back("no registers: " + config.status().message());
    return out;
  }
  auto cache = KernelCache::open(*config);
  if (!cache.ok()) {
    warnings.push_back("no registers: " + cache.status().message());
    return out;
  }
  ObtainOptions oo;
  oo.archs = {arch};
  const ObtainResult r = obtain_kernels(*cache, distinct, oo);
  for (size_t i = 0; i < distinct.size() && i < r.entries.size(); ++i) {
    if (!r.entries[i].cubin.empty()) out[distinct[i].entry] = r.entries[i].info;
  }
  if (r.failed > 0) {
    warnings.push_back(fmt::format("no registers for {} of {} kernels (NVRTC could not compile them for {}): {}",
                                   r.failed, r.total, arch, r.errors.empty() ? "" : r.errors.front()));
  }
  return out;
}

// The groups of two plans correspond one for one: the same kinds, families and order.
bool same_groups(const Plan& a, const Plan& b) {
  if (a.groups.size() != b.groups.size()) return false;
  for (size_t i = 0; i < a.groups.size(); ++i) {
    if (a.groups[i].kind != b.groups[i].kind || a.groups[i].family != b.groups[i].family) return false;
  }
  return true;
}

// What must agree for one plan's counters to describe another's kernel, per group (empty for a group that
// runs no kernel): the kernel (its entry names its source) and the block; the grid scales with the batch, and so
// may a generic kernel's residency, which the counters per block do not depend on.
Result<std::vector<std::string>> kernel_identities(const Plan& p) {
  std::vector<std::string> out(p.groups.size());
  for (const Group& g : p.groups) {
    if (!g.is_kernel()) continue;
    KILN_ASSIGN_OR_RETURN(const codegen::Kernel k, codegen::generate_kernel(p, g));
    out[static_cast<size_t>(g.id)] = fmt::format("{} {}x{}x{}", k.entry, k.block.x, k.block.y, k.block.z);
  }
  return out;
}

// Groups of two plans with the same groups (same_groups) whose kernels differ, by their kernel_identities.
std::vector<int32_t> differing_kernels(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) out.push_back(static_cast<int32_t>(i));
  return out;
}

// The emulated run's counters by group of `small`: each record is matched to the next launch of its entry.
Result<std::map<int32_t, emu::KernelProfile>> emulate(const Plan& small, const ProfileOptions& options) {
  EmuPlanOptions eo;
  eo.launch = options.launch;
  eo.launch.profile = true;
  EmuPlanReport report;
  KILN_RETURN_IF_ERROR(run_plan_emu(small, random_inputs(small.graph, options.seed), eo, &report).status());
  KILN_ASSIGN_OR_RETURN(PlanKernels pk, plan_kernel_launches(small));
  std::map<std::string, std::vector<int32_t>> groups_of;  // entry -> its launches' groups, in order
  for (size_t i = 0; i < pk.launches.size(); ++i) groups_of[pk.launches[i].entry].push_back(pk.group[i]);
  std::map<std::string, size_t> used;
  std::map<int32_t, emu::KernelProfile> out;
  for (EmuLaunchRecord& r : report.launches) {
    auto it = groups_of.find(r.entry);
    if (it == groups_of.end()) continue;
    const size_t n = used[r.entry]++;
    if (n < it->second.size()) out[it->second[n]] = std::move(r.profile);
  }
  return out;
}

}  // namespace

Result<PlanProfile> profile_plan(const Plan& plan, const Plan* emulated, const ProfileOptions& options) {
  PlanProfile out;
  out.target = plan.target;
  out.peaks = device_peaks(plan.target);
  KILN_ASSIGN_OR_RETURN(PlanKernels pk, plan_kernel_launches(plan));
  std::vector<codegen::Kernel> distinct;
  for (int d : pk.distinct) distinct.push_back(pk.launches[static_cast<size_t>(d)]);
  const std::map<std::string, KernelInfo> info = ptxas_info(distinct, plan.target.arch, out.warnings);

  std::map<int32_t, emu::KernelProfile> counters;
  if (emulated && !same_groups(plan, *emulated)) {
    out.warnings.push_back(
        "no counters: the emulated plan's groups differ from the profiled plan's (another fusion or family at "
        "that batch)");
  } else if (emulated) {
    KILN_ASSIGN_OR_RETURN(counters, emulate(*emulated, options));
    KILN_ASSIGN_OR_RETURN(const std::vector<std::string> mine, kernel_identities(plan));
    KILN_ASSIGN_OR_RETURN(const std::vector<std::string> theirs, kernel_identities(*emulated));
    for (int32_t g : differing_kernels(mine, theirs)) {
      counters.erase(g);
      out.warnings.push_back(fmt::format("no counters for group {}: the emulated run's kernel is {}, not {}", g,
                                         theirs[static_cast<size_t>(g)], mine[static_cast<size_t>(g)]));
    }
  }

  for (size_t i = 0; i < pk.launches.size(); ++i) {
    const codegen::Kernel& k = pk.launches[i];
    const int32_t gi = pk.group[i];
    const Group& g = plan.group(gi);
    if (!g.is_kernel()) continue;  // weight transforms run once per bound weight, not per run
    KernelProfileRow row;
    row.group = gi;
    row.entry = k.entry;
    row.family = std::string(kernel_family_name(k.family));
    row.grid = {k.grid.x, k.grid.y, k.grid.z};
    row.block = {k.block.x, k.block.y, k.block.z};
    row.dynamic_smem = k.dynamic_smem;
    KILN_ASSIGN_OR_RETURN(const codegen::KernelConfig config, codegen::plan_kernel(plan, g));
    const KernelShape shape = profile_detail::kernel_shape(config);
    row.config = shape.config;
    row.flops = shape.flops;
    row.tensor_cores = shape.tensor_cores;
    if (auto it = info.find(k.entry); it != info.end()) {
      row.registers = it->second.registers;
      row.static_smem = it->second.shared_bytes;
      row.spill_bytes = it->second.spill_store_bytes + it->second.spill_load_bytes;
    }
    const int threads = static_cast<int>(k.block.x * k.block.y * k.block.z);
    row.occupancy = occupancy(plan.target, threads, row.registers.value_or(0), row.static_smem + row.dynamic_smem);
    row.waves = waves(plan.target, int64_t{k.grid.x} * k.grid.y * k.grid.z, row.occupancy.blocks_per_sm);
    row.planned_bytes = g.bytes_read + g.bytes_written;
    if (auto it = counters.find(gi); it != counters.end()) {
      row.counters = std::move(it->second);
      const Group& eg = emulated->group(gi);
      row.emulated_planned_bytes = eg.bytes_read + eg.bytes_written;
    }
    profile_detail::estimate(out.peaks, row);
    out.estimated_us += row.estimate.us;
    out.planned_bytes += row.planned_bytes;
    out.flops += row.flops;
    out.kernels.push_back(std::move(row));
  }
  return out;
}

Result<Plan> plan_for_counters(const Graph& g, const Plan& full, const PlanOptions& options, int64_t from,
                               int64_t* batch) {
  int64_t own = 0;
  for (const Tensor& t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    if (info.kind == TensorKind::input && info.shape.rank() > 0) {
      own = info.shape[0];
      break;
    }
  }
  std::vector<std::string> full_ids;  // made once, at the first batch whose groups agree
  for (int64_t b = std::max<int64_t>(from, 1); own > 0 && b < own; b *= 2) {
    KILN_ASSIGN_OR_RETURN(Graph small, rebatch_graph(g, b));
    KILN_ASSIGN_OR_RETURN(Plan p, plan_graph(std::move(small), options));
    if (!same_groups(full, p)) continue;
    if (full_ids.empty()) {
      KILN_ASSIGN_OR_RETURN(full_ids, kernel_identities(full));
    }
    KILN_ASSIGN_OR_RETURN(const std::vector<std::string> ids, kernel_identities(p));
    if (differing_kernels(full_ids, ids).empty()) {
      if (batch) *batch = b;
      return p;
    }
  }
  if (batch) *batch = own;
  return full;
}

Result<Graph> rebatch_graph(const Graph& g, int64_t batch) {
  if (batch < 1) return invalid_argument(fmt::format("batch {}: expected a positive batch", batch));
  // The same graph rebuilt through the builder, its inputs' leading dim replaced: every shape rule runs
  // again at the new batch, and a node whose attributes pin the old one (a reshape to [32, 2048]) fails
  // verify, naming itself. Bound tensors keep their layouts; outputs keep theirs where it differs from
  // what the rebuilt producer gives (a layout the user asked for).
  Graph r(g.name());
  r.reserve(g.tensors().size(), g.nodes().size());
  PerTensor<Tensor> to(g.tensors().size());
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    Shape shape = info.shape;
    if (info.kind == TensorKind::input && shape.rank() > 0) {
      shape[0] = batch;
      to[t] = r.input(info.name, shape, info.dtype, info.layout);
    } else {
      to[t] = r.parameter(info.name, shape, info.dtype, info.layout);
    }
  }
  for (const Node& n : g.nodes()) {
    const OpDef& def = op_def(*n.op);
    PortInputs ins;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k].empty()) continue;
      std::vector<Tensor> ts;
      for (Tensor t : n.inputs[k]) ts.push_back(to[t]);
      ins.emplace_back(std::string(def.inputs[k].name), std::move(ts));
    }
    std::vector<std::pair<std::string, std::string>> names;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      names.emplace_back(std::string(def.outputs[k].name), g.tensor(n.outputs[k]).name);
    }
    const std::vector<Tensor> outs = r.add_node(def.name, ins, n.attrs, n.name, names);
    for (size_t k = 0; k < outs.size() && k < n.outputs.size(); ++k) to[n.outputs[k]] = outs[k];
  }
  for (Tensor t : g.outputs()) {
    const Layout want = g.tensor(t).layout;
    const bool own = to[t].valid() && r.tensor(to[t]).layout != want;
    r.output(to[t], {}, own ? std::optional<Layout>(want) : std::nullopt);
  }
  if (Status s = r.verify(); !s.ok()) {
    return invalid_argument(fmt::format("cannot run '{}' at batch {}: {}", g.name(), batch, s.message()));
  }
  for (const auto& [name, value] : g.values()) {
    if (auto t = r.find_tensor(name)) KILN_RETURN_IF_ERROR(r.set_value(*t, value));
  }
  // A binding of a symbolic graph at another batch is still one: planned with the same generic tiles.
  r.mark_binding(g.is_binding());
  return r;
}

}  // namespace kiln
