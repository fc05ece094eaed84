// run_plan_emu: generate, compile and launch a Plan's kernels on the emulator (include/kiln/emu_plan.h).
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "codegen/kernel_builder.h"
#include "kiln/emu_plan.h"
#include "kiln/reference.h"

namespace kiln {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Calls f(logical_index, memory_offset) for every element of a tensor stored with `strides`.
template <class F>
void for_each_element(const Shape& shape, const std::vector<int64_t>& strides, F f) {
  const int r = shape.rank();
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < shape.numel(); ++i) {
    f(i, off);
    for (int d = r - 1; d >= 0; --d) {
      const auto du = static_cast<size_t>(d);
      if (++idx[du] < shape[d]) {
        off += strides[du];
        break;
      }
      off -= strides[du] * (shape[d] - 1);
      idx[du] = 0;
    }
  }
}

void put(unsigned char* p, DType t, double v) {
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::f16: {
      const uint16_t h = f32_to_f16_bits(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::bf16: {
      const uint16_t h = f32_to_bf16_bits(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
  }
}

double get(const unsigned char* p, DType t) {
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_bits_to_f32(h);
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_bits_to_f32(h);
    }
  }
  return 0;
}

}  // namespace

std::vector<unsigned char> to_device_bytes(const HostTensor& t, Layout layout) {
  const int64_t es = dtype_size(t.dtype);
  std::vector<unsigned char> bytes(static_cast<size_t>(t.numel() * es));
  for_each_element(t.shape, codegen::layout_strides(t.shape, layout), [&](int64_t i, int64_t off) {
    put(bytes.data() + off * es, t.dtype, t.data[static_cast<size_t>(i)]);
  });
  return bytes;
}

HostTensor from_device_bytes(const unsigned char* bytes, const Shape& shape, DType dtype, Layout layout) {
  HostTensor t(shape, dtype);
  const int64_t es = dtype_size(dtype);
  for_each_element(shape, codegen::layout_strides(shape, layout), [&](int64_t i, int64_t off) {
    t.data[static_cast<size_t>(i)] = get(bytes + off * es, dtype);
  });
  return t;
}

Result<TensorMap> run_plan_emu(const Plan& p, const TensorMap& inputs, const EmuPlanOptions& options,
                               EmuPlanReport* report) {
  const Graph& g = p.graph;
  KILN_RETURN_IF_ERROR(check_bindings(g, inputs));
  EmuPlanReport rep;

  // Kernels, one per kernel group; identical groups give identical kernels and are compiled once.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<codegen::Kernel> kernels;
  std::vector<int> kernel_of_group(p.groups.size(), -1);
  std::map<std::string, int> by_entry;
  std::string unit;
  std::vector<std::string> entries;
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel() && grp.kind != GroupKind::weight_transform) continue;
    KILN_ASSIGN_OR_RETURN(codegen::Kernel k, codegen::generate_kernel(p, grp));
    auto [it, fresh] = by_entry.emplace(k.entry, static_cast<int>(kernels.size()));
    if (fresh) {
      unit += k.source + "\n";
      entries.push_back(k.entry);
    }
    kernel_of_group[static_cast<size_t>(grp.id)] = static_cast<int>(kernels.size());
    kernels.push_back(std::move(k));
  }
  rep.distinct_kernels = static_cast<int>(entries.size());
  rep.generate_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const emu::Module> module;
  if (!entries.empty()) {
    emu::CompileOptions co;
    co.source_name = g.name() + ".kernels.cu";
    KILN_ASSIGN_OR_RETURN(module, emu::compile(unit, entries, co));
    rep.compiled = !module->from_disk_cache();
  }
  rep.compile_ms = ms_since(t0);

  // Memory: bound tensors in their declared layouts, graph outputs and the workspace poisoned.
  std::map<int32_t, std::vector<unsigned char>> owned;
  std::set<int32_t> is_output;
  for (Tensor t : g.outputs()) is_output.insert(t.id);
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const TensorInfo& ti = g.tensors()[i];
    const auto id = static_cast<int32_t>(i);
    if (ti.kind != TensorKind::intermediate) {
      owned[id] = to_device_bytes(inputs.find(ti.name)->second, ti.layout);
    } else if (is_output.count(id)) {
      owned[id].assign(static_cast<size_t>(ti.shape.numel() * dtype_size(ti.dtype)), 0xff);
    }
  }
  std::vector<unsigned char> workspace(static_cast<size_t>(p.workspace_bytes), 0xff);
  std::map<int32_t, const BufferPlacement*> placement;
  for (const BufferPlacement& b : p.buffers) placement[b.tensor.id] = &b;

  auto address = [&](Tensor t) -> Result<std::pair<unsigned char*, size_t>> {
    if (auto it = owned.find(t.id); it != owned.end()) return std::pair{it->second.data(), it->second.size()};
    if (auto it = placement.find(t.id); it != placement.end() && !it->second->alias_of.valid()) {
      return std::pair{workspace.data() + it->second->offset, static_cast<size_t>(it->second->bytes)};
    }
    return Status(StatusCode::internal, fmt::format("tensor '{}' has no memory in the plan", g.tensor(t).name));
  };

  t0 = std::chrono::steady_clock::now();
  for (const Group& grp : p.groups) {
    const int k = kernel_of_group[static_cast<size_t>(grp.id)];
    if (k < 0) continue;
    const codegen::Kernel& kern = kernels[static_cast<size_t>(k)];
    std::vector<emu::Arg> args;
    for (const codegen::KernelParam& prm : kern.params) {
      KILN_ASSIGN_OR_RETURN(auto mem, address(prm.tensor));
      args.push_back(emu::Arg::buffer(mem.first, mem.second, g.tensor(prm.tensor).name));
    }
    Status s = emu::launch(*module, kern.entry, {kern.grid.x, kern.grid.y, kern.grid.z},
                           {kern.block.x, kern.block.y, kern.block.z}, kern.dynamic_smem, args, options.launch);
    if (!s.ok()) {
      return Status(s.code(), fmt::format("group {} ({}): {}", grp.id, kern.entry, s.message()));
    }
    ++rep.kernels_launched;
    rep.entries.push_back(kern.entry);
  }
  rep.run_ms = ms_since(t0);

  TensorMap out;
  for (Tensor t : g.outputs()) {
    const TensorInfo& ti = g.tensor(t);
    KILN_ASSIGN_OR_RETURN(auto mem, address(t));
    out[ti.name] = from_device_bytes(mem.first, ti.shape, ti.dtype, ti.layout);
  }
  if (report) *report = std::move(rep);
  return out;
}

}  // namespace kiln
