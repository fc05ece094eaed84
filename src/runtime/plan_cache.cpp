// Plan cache entries (src/runtime/plan_cache.h): the payload's layout, its checks, and the lookup-or-plan.
// Payload: the graph (src/ir/graph_codec.h), the target, the plan's groups, buffers, totals, refusals and
// separations, then the kernels: each distinct kernel's entry name and source once, and per launch its group,
// distinct kernel, launch shape and parameters.
#include "runtime/plan_cache.h"

#include <iterator>

#include <fmt/format.h>

#include "ir/graph_codec.h"
#include "support/log.h"
#include "support/source_id.h"
#include "support/stopwatch.h"

namespace kiln::runtime {
namespace {

using support::ByteReader;
using support::ByteWriter;

constexpr uint32_t kGroupKindCount = static_cast<uint32_t>(std::size(kAllGroupKinds));
#define KILN_X(e, n) +1
constexpr uint32_t kFamilyCount = 0 KILN_KERNEL_FAMILIES(KILN_X);
constexpr uint32_t kRuleCount = 0 KILN_SEPARATION_RULES(KILN_X);
#undef KILN_X

void write_ints(ByteWriter& w, const std::vector<int32_t>& v) {
  w.u64(v.size());
  for (int32_t x : v) w.i32(x);
}
void write_tensors(ByteWriter& w, const std::vector<Tensor>& v) {
  w.u64(v.size());
  for (Tensor t : v) w.i32(t.id);
}

void write_target(ByteWriter& w, const Target& t) {
  w.bytes(t.name), w.bytes(t.arch);
  w.i32(t.sm_count), w.i64(t.smem_per_sm), w.i64(t.smem_per_block), w.i32(t.regs_per_sm);
  w.i32(t.max_threads_per_sm), w.i32(t.max_blocks_per_sm), w.i64(t.l2_bytes);
}

void write_plan(ByteWriter& w, const Plan& p) {
  write_target(w, p.target);
  w.u8(static_cast<uint8_t>(p.tiles));
  w.u64(p.groups.size());
  for (const Group& g : p.groups) {
    w.i32(g.id), w.u8(static_cast<uint8_t>(g.kind)), w.u8(static_cast<uint8_t>(g.family));
    write_ints(w, g.nodes), write_tensors(w, g.inputs), write_tensors(w, g.outputs);
    w.i64(g.bytes_read), w.i64(g.bytes_written), w.i32(g.view_of.id);
    w.i64(g.scratch.counters_offset), w.i64(g.scratch.counters_bytes);
    w.i64(g.scratch.partials_offset), w.i64(g.scratch.partials_bytes);
    const Group::Roles& r = g.roles;
    w.i32(r.anchor), w.i32(r.reduction), w.i32(r.row_norm), w.i32(r.store_view), w.i32(r.prologue_norm);
    write_ints(w, r.prologue);
  }
  w.u64(p.buffers.size());
  for (const BufferPlacement& b : p.buffers) {
    w.i32(b.tensor.id), w.i64(b.offset), w.i64(b.bytes), w.i32(b.first_group), w.i32(b.last_group);
    w.i32(b.alias_of.id), w.i64(b.alias_axis_offset);
  }
  w.i64(p.workspace_bytes), w.i64(p.zeroed_offset), w.i64(p.zeroed_bytes);
  w.i64(p.bytes_moved), w.i64(p.unfused_bytes_moved);
  w.u64(p.refusals.size());
  for (const FusionRefusal& f : p.refusals) {
    w.u8(static_cast<uint8_t>(f.kind));
    w.u64(f.nodes.size());
    for (const std::string& n : f.nodes) w.bytes(n);
    w.bytes(f.reason);
  }
  w.u64(p.separations.size());
  for (const Separation& s : p.separations) {
    w.i32(s.producer_group), w.i32(s.consumer_group), w.i32(s.producer_node), w.i32(s.consumer_node);
    w.i32(s.tensor.id), w.i32(s.concat_node), w.u8(static_cast<uint8_t>(s.rule)), w.i32(s.detail_a);
    w.i32(s.detail_b);
  }
}

void write_kernels(ByteWriter& w, const PlanKernels& pk) {
  w.u64(pk.distinct.size());
  for (size_t j = 0; j < pk.distinct.size(); ++j) {
    const codegen::Kernel& k = pk.launches[static_cast<size_t>(pk.distinct[j])];
    w.bytes(k.entry), w.bytes(k.source), w.u32(pk.distinct_smem[j]);
  }
  w.u64(pk.launches.size());
  for (size_t i = 0; i < pk.launches.size(); ++i) {
    const codegen::Kernel& k = pk.launches[i];
    w.i32(pk.group[i]), w.i32(pk.distinct_of[i]), w.u8(static_cast<uint8_t>(k.family));
    for (uint32_t d : {k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z, k.dynamic_smem}) w.u32(d);
    w.bytes(k.target);
    w.u64(k.params.size());
    for (const codegen::KernelParam& prm : k.params) {
      w.i32(prm.tensor.id), w.boolean(prm.written), w.u8(static_cast<uint8_t>(prm.scratch)), w.i32(prm.value),
          w.boolean(prm.size);
    }
  }
}

// ---- reading: every read checks its range; `bad` says what failed ----------------------------------------

struct PlanReader {
  ByteReader& r;
  size_t nodes = 0, tensors = 0;
  std::string bad;

  bool fail(std::string what) {
    if (bad.empty()) bad = std::move(what);
    return r.fail();
  }
  // An index in [lo, limit): lo is -1 where "none" is allowed.
  bool index(int32_t& v, int32_t lo, size_t limit, std::string_view what) {
    if (!r.i32(v) || v < lo || (v >= 0 && static_cast<size_t>(v) >= limit)) return fail(std::string(what));
    return true;
  }
  bool tensor(Tensor& t, bool optional, std::string_view what) { return index(t.id, optional ? -1 : 0, tensors, what); }
  bool ints(std::vector<int32_t>& v, size_t limit, std::string_view what) {
    uint64_t n = 0;
    if (!r.count(n, 4)) return fail(std::string(what));
    v.resize(n);
    for (int32_t& x : v) {
      if (!index(x, 0, limit, what)) return false;
    }
    return true;
  }
  bool tensor_list(std::vector<Tensor>& v, std::string_view what) {
    uint64_t n = 0;
    if (!r.count(n, 4)) return fail(std::string(what));
    v.resize(n);
    for (Tensor& t : v) {
      if (!tensor(t, false, what)) return false;
    }
    return true;
  }
  template <class E>
  bool enumeration(E& e, uint32_t count, std::string_view what) {
    uint8_t v = 0;
    if (!r.u8(v) || v >= count) return fail(std::string(what));
    e = static_cast<E>(v);
    return true;
  }
  bool non_negative(int64_t& v, std::string_view what) {
    if (!r.i64(v) || v < 0) return fail(std::string(what));
    return true;
  }
};

bool read_target(ByteReader& r, Target& t) {
  return r.bytes(t.name) && r.bytes(t.arch) && r.i32(t.sm_count) && r.i64(t.smem_per_sm) && r.i64(t.smem_per_block) &&
         r.i32(t.regs_per_sm) && r.i32(t.max_threads_per_sm) && r.i32(t.max_blocks_per_sm) && r.i64(t.l2_bytes);
}

bool read_groups(PlanReader& in, Plan& p) {
  ByteReader& r = in.r;
  uint64_t n = 0;
  if (!r.count(n, 64)) return in.fail("group count");
  p.groups.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Group& g = p.groups[i];
    Group::Roles& ro = g.roles;
    const size_t nodes = in.nodes;
    const bool ok = r.i32(g.id) && in.enumeration(g.kind, kGroupKindCount, "group kind") &&
                    in.enumeration(g.family, kFamilyCount, "kernel family") && in.ints(g.nodes, nodes, "group nodes") &&
                    in.tensor_list(g.inputs, "group inputs") && in.tensor_list(g.outputs, "group outputs") &&
                    in.non_negative(g.bytes_read, "bytes read") && in.non_negative(g.bytes_written, "bytes written") &&
                    in.tensor(g.view_of, true, "view_of") && in.non_negative(g.scratch.counters_offset, "scratch") &&
                    in.non_negative(g.scratch.counters_bytes, "scratch") &&
                    in.non_negative(g.scratch.partials_offset, "scratch") &&
                    in.non_negative(g.scratch.partials_bytes, "scratch") && in.index(ro.anchor, -1, nodes, "anchor") &&
                    in.index(ro.reduction, -1, nodes, "reduction") && in.index(ro.row_norm, -1, nodes, "row norm") &&
                    in.index(ro.store_view, -1, nodes, "store view") &&
                    in.index(ro.prologue_norm, -1, nodes, "prologue norm") && in.ints(ro.prologue, nodes, "prologue");
    if (!ok) return false;
    if (g.id != static_cast<int32_t>(i)) return in.fail(fmt::format("group {} numbered {}", i, g.id));
  }
  return true;
}

bool read_plan_rest(PlanReader& in, Plan& p) {
  ByteReader& r = in.r;
  const size_t groups = p.groups.size();
  uint64_t n = 0;
  if (!r.count(n, 40)) return in.fail("buffer count");
  p.buffers.resize(n);
  for (BufferPlacement& b : p.buffers) {
    if (!(in.tensor(b.tensor, false, "buffer tensor") && in.non_negative(b.offset, "buffer offset") &&
          in.non_negative(b.bytes, "buffer bytes") && in.index(b.first_group, 0, groups, "buffer group") &&
          in.index(b.last_group, 0, groups, "buffer group") && in.tensor(b.alias_of, true, "buffer alias") &&
          in.non_negative(b.alias_axis_offset, "buffer alias offset")))
      return false;
  }
  if (!(in.non_negative(p.workspace_bytes, "workspace") && in.non_negative(p.zeroed_offset, "zeroed range") &&
        in.non_negative(p.zeroed_bytes, "zeroed range") && in.non_negative(p.bytes_moved, "totals") &&
        in.non_negative(p.unfused_bytes_moved, "totals") && r.count(n, 17)))
    return in.fail("totals");
  // Every range the executable addresses lies in the workspace (values from a faulty writer must not make it
  // write beyond), and a weight transform reads a bound tensor.
  const auto inside = [&](int64_t offset, int64_t bytes) {
    return offset <= p.workspace_bytes && bytes <= p.workspace_bytes - offset;
  };
  for (const BufferPlacement& b : p.buffers) {
    if (!inside(b.offset, b.bytes)) return in.fail("a buffer beyond the workspace");
  }
  if (!inside(p.zeroed_offset, p.zeroed_bytes)) return in.fail("a zeroed range beyond the workspace");
  for (const Group& g : p.groups) {
    if (!inside(g.scratch.counters_offset, g.scratch.counters_bytes) ||
        !inside(g.scratch.partials_offset, g.scratch.partials_bytes))
      return in.fail("a group's scratch beyond the workspace");
    if (g.kind == GroupKind::weight_transform &&
        (g.inputs.empty() || g.outputs.empty() || p.graph.tensor(g.inputs[0]).kind == TensorKind::intermediate))
      return in.fail("a weight transform that reads no bound tensor");
  }
  p.refusals.resize(n);
  for (FusionRefusal& f : p.refusals) {
    uint64_t names = 0;
    if (!in.enumeration(f.kind, kGroupKindCount, "refusal kind") || !r.count(names, 8)) return in.fail("refusal");
    f.nodes.resize(names);
    for (std::string& s : f.nodes) {
      if (!r.bytes(s)) return in.fail("refusal");
    }
    if (!r.bytes(f.reason)) return in.fail("refusal");
  }
  if (!r.count(n, 33)) return in.fail("separation count");
  p.separations.resize(n);
  for (Separation& s : p.separations) {
    if (!(in.index(s.producer_group, 0, groups, "separation group") &&
          in.index(s.consumer_group, 0, groups, "separation group") &&
          in.index(s.producer_node, 0, in.nodes, "separation node") &&
          in.index(s.consumer_node, 0, in.nodes, "separation node") && in.tensor(s.tensor, false, "separation") &&
          in.index(s.concat_node, -1, in.nodes, "separation concat") &&
          in.enumeration(s.rule, kRuleCount, "separation rule") && r.i32(s.detail_a) && r.i32(s.detail_b)))
      return in.fail("separation");
  }
  return true;
}

bool read_kernels(PlanReader& in, const Plan& p, PlanKernels& pk) {
  ByteReader& r = in.r;
  uint64_t distinct = 0, launches = 0;
  if (!r.count(distinct, 20)) return in.fail("kernel count");
  std::vector<std::string_view> entries(distinct), sources(distinct);
  pk.distinct_smem.resize(distinct);
  for (size_t j = 0; j < distinct; ++j) {
    if (!r.bytes(entries[j]) || !r.bytes(sources[j]) || !r.u32(pk.distinct_smem[j])) return in.fail("kernel");
  }
  if (!r.count(launches, 42)) return in.fail("launch count");
  pk.launches.resize(launches);
  pk.group.resize(launches);
  pk.distinct_of.resize(launches);
  pk.distinct.assign(distinct, -1);
  for (size_t i = 0; i < launches; ++i) {
    codegen::Kernel& k = pk.launches[i];
    uint64_t params = 0;
    if (!(in.index(pk.group[i], 0, p.groups.size(), "launch group") &&
          in.index(pk.distinct_of[i], 0, distinct, "launch kernel") &&
          in.enumeration(k.family, kFamilyCount, "launch family") && r.u32(k.grid.x) && r.u32(k.grid.y) &&
          r.u32(k.grid.z) && r.u32(k.block.x) && r.u32(k.block.y) && r.u32(k.block.z) && r.u32(k.dynamic_smem) &&
          r.bytes(k.target) && r.count(params, 10)))
      return in.fail("launch");
    const auto j = static_cast<size_t>(pk.distinct_of[i]);
    if (pk.distinct[j] < 0) pk.distinct[j] = static_cast<int>(i);
    k.entry = entries[j];
    k.source = sources[j];
    k.params.resize(params);
    for (codegen::KernelParam& prm : k.params) {
      if (!(in.tensor(prm.tensor, true, "kernel parameter") && r.boolean(prm.written) &&
            in.enumeration(prm.scratch, 3, "kernel parameter") && r.i32(prm.value) && r.boolean(prm.size)))
        return in.fail("kernel parameter");
    }
  }
  for (int first : pk.distinct) {
    if (first < 0) return in.fail("a kernel no launch runs");
  }
  return true;
}

}  // namespace

std::optional<KeyManifest> plan_cache_manifest(const Graph& g, const PlanOptions& o) {
  if (o.policy || o.chooser || o.after_pass) return std::nullopt;
  ByteWriter graph;
  if (!GraphCodec::write(g, graph)) return std::nullopt;
  KeyManifest m;
  m.add("kind", "plan");
  m.add("plan-format", std::to_string(kPlanFormatVersion));
  m.add("kiln-source", support::source_id());
  m.add_hashed("graph", graph.out);
  m.add("layout", layout_policy_name(o.layout));
  m.add("max-group-ops", std::to_string(o.max_group_ops));
  m.add("require-kernels", o.require_kernels ? "1" : "0");
  m.add("tiles", o.tiles ? std::to_string(static_cast<int>(*o.tiles)) : "unset");
  // The facts codegen reads (Target::key): a named device and the real GPU with the same facts share plans, as
  // they share kernels; the plan read back takes the caller's target (its name, its L2 size).
  m.add("target", o.target.key());
  return m;
}

std::string encode_plan(const Plan& plan, const PlanKernels& kernels) {
  ByteWriter w;
  const bool ok = GraphCodec::write(plan.graph, w);
  KILN_CHECK(ok, "encode_plan: a plan's graph has symbols or problems");
  write_plan(w, plan);
  write_kernels(w, kernels);
  return std::move(w.out);
}

Result<CachedPlan> decode_plan(std::string_view payload) {
  ByteReader r(payload);
  KILN_ASSIGN_OR_RETURN(Graph graph, GraphCodec::read(r));
  CachedPlan c;
  c.plan.graph = std::move(graph);
  PlanReader in{r, c.plan.graph.nodes().size(), c.plan.graph.tensors().size(), {}};
  const bool ok = (read_target(r, c.plan.target) || in.fail("target")) &&
                  in.enumeration(c.plan.tiles, 3, "tile policy") && read_groups(in, c.plan) &&
                  read_plan_rest(in, c.plan) && read_kernels(in, c.plan, c.kernels) &&
                  (r.at_end() || in.fail("trailing bytes"));
  if (!ok) return invalid_argument(fmt::format("malformed plan entry: {}", in.bad.empty() ? "truncated" : in.bad));
  return c;
}

Result<PlannedKernels> plan_with_cache(KernelCache* cache, const Graph& g, const PlanOptions& options) {
  support::Stopwatch sw;
  std::optional<KeyManifest> manifest;
  if (cache) manifest = plan_cache_manifest(g, options);
  PlannedKernels out;
  const CacheKey key = manifest ? manifest->key() : CacheKey{};
  if (manifest) {
    if (std::optional<CacheEntry> hit = cache->lookup(key, CacheKind::plan)) {
      const auto* b = reinterpret_cast<const char*>(hit->cubin.data());
      Result<CachedPlan> got = decode_plan(std::string_view(b, hit->cubin.size()));
      if (got.ok()) {
        // The test suite re-infers every decoded graph; elsewhere the entry's writer, this kiln, verified it.
        if (!verify_passes_by_default()) {
          GraphCodec::trust(got->plan.graph);
        } else if (Status s = got->plan.graph.verify(); !s.ok()) {
          got = Status(s.code(), "plan entry's graph: " + s.message());
        }
      }
      if (got.ok()) {
        out.plan = std::move(got->plan);
        out.plan.target = options.target;
        out.kernels = std::move(got->kernels);
        out.cached = true;
        out.plan_ms = sw.ms();
        return out;
      }
      // Intact bytes (the checksum held) that do not decode: written by a faulty kiln. Planned anew.
      cache->remove_bad(key, CacheKind::plan);
      out.warning =
          fmt::format("plan entry {} was unusable and is planned anew ({})", key.hex(), got.status().message());
      KILN_LOG(warn, "{}", out.warning);
    }
  }
  KILN_ASSIGN_OR_RETURN(out.plan, plan_graph(g, options));
  out.plan_ms = sw.ms();
  sw.restart();
  KILN_ASSIGN_OR_RETURN(out.kernels, plan_kernel_launches(out.plan));
  out.codegen_ms = sw.ms();
  if (manifest) {
    CacheEntry e;
    e.kernel_name = g.name();
    e.arch = options.target.arch;
    const std::string payload = encode_plan(out.plan, out.kernels);
    e.cubin.assign(payload.begin(), payload.end());
    e.manifest = manifest->text();
    if (Status s = cache->store(key, e, CacheKind::plan); !s.ok()) {
      out.warning = fmt::format("plan of '{}' not cached ({}): later compiles plan it again", g.name(), s.message());
    }
  }
  return out;
}

}  // namespace kiln::runtime
