// `kiln profile GRAPH [--target T] [--batch N] [--no-emulate] [--sites N] [--layout L] [--seed S] [--json]
// [--plot FILE.svg [--measured BENCH.json]]`:
// what Nsight Compute would say about each kernel of the plan that the kernels' access patterns and
// resources determine, and a roofline estimate (include/kiln/profile.h, docs/profile.md). No GPU needed:
// the counters come from running the graph (at batch --batch, 1 by default) on the emulator.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/plan.h"
#include "kiln/profile.h"
#include "kiln/target.h"
#include "layout_option.h"
#include "output_file.h"

namespace kiln::cli {
namespace {

std::string dims(const emu::Dim3& d) {
  if (d.z > 1) return fmt::format("{}x{}x{}", d.x, d.y, d.z);
  if (d.y > 1) return fmt::format("{}x{}", d.x, d.y);
  return std::to_string(d.x);
}

std::string kib(int64_t b) {
  return b == 0 ? "0" : b < 1024 ? fmt::format("{}B", b) : fmt::format("{:.0f}K", b / 1024.0);
}

std::string ratio(uint64_t num, uint64_t den) { return den ? fmt::format("{:.1f}", double(num) / double(den)) : "-"; }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

// The leading dim of the first graph input (the batch by convention), or 0 when there is none.
int64_t graph_batch(const Graph& g) {
  for (const Tensor& t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    if (info.kind == TensorKind::input && info.shape.rank() > 0) return info.shape[0];
  }
  return 0;
}

Json site_json(const emu::AccessSite& s) {
  Json j{{"file", s.file},
         {"line", s.line},
         {"space", s.space == emu::AccessSpace::global ? "global" : "shared"},
         {"op", emu::access_op_name(s.op)},
         {"bytes_per_lane", s.bytes_per_lane},
         {"requests", s.requests},
         {"bytes", s.bytes},
         {"unique_bytes", s.unique_bytes},
         {"waste_bytes", s.waste_bytes()}};
  if (s.space == emu::AccessSpace::global) {
    j["sectors"] = s.sectors;
    j["sectors_per_request"] = s.sectors_per_request();
    j["sector_efficiency"] = s.sector_efficiency();
    j["data_wavefronts"] = s.data_wavefronts;
  } else {
    j["wavefronts"] = s.wavefronts;
    j["ideal_wavefronts"] = s.ideal_wavefronts;
    j["wavefronts_per_request"] = s.wavefronts_per_request();
  }
  return j;
}

Json row_json(const KernelProfileRow& r, size_t sites) {
  Json j{{"group", r.group},
         {"entry", r.entry},
         {"family", r.family},
         {"config", r.config},
         {"grid", {r.grid.x, r.grid.y, r.grid.z}},
         {"block", {r.block.x, r.block.y, r.block.z}},
         {"registers", r.registers ? Json(*r.registers) : Json(nullptr)},
         {"spill_bytes", r.spill_bytes},
         {"static_smem", r.static_smem},
         {"dynamic_smem", r.dynamic_smem},
         {"occupancy",
          {{"blocks_per_sm", r.occupancy.blocks_per_sm},
           {"warps_per_sm", r.occupancy.warps_per_sm},
           {"fraction", r.occupancy.fraction},
           {"limiter", r.occupancy.limiter}}},
         {"waves",
          {{"blocks_per_wave", r.waves.blocks_per_wave},
           {"waves", r.waves.waves},
           {"tail_efficiency", r.waves.tail_efficiency}}},
         {"tensor_cores", r.tensor_cores},
         {"planned_bytes", r.planned_bytes},
         {"flops", r.flops},
         {"dram_bytes", r.dram_bytes}};
  if (r.counters) {
    const emu::KernelProfile& c = *r.counters;
    Json cj{{"blocks", c.blocks},
            {"emulated_planned_bytes", r.emulated_planned_bytes},
            {"dram_bytes", c.dram_bytes()},
            {"load_requests", c.load_requests()},
            {"load_sectors", c.load_sectors()},
            {"load_bytes", c.load_bytes()},
            {"store_requests", c.store_requests()},
            {"store_sectors", c.store_sectors()},
            {"store_bytes", c.store_bytes()},
            {"shared_requests", c.shared_requests()},
            {"shared_wavefronts", c.shared_wavefronts()},
            {"shared_ideal_wavefronts", c.shared_ideal_wavefronts()},
            {"data_stage_wavefronts", c.data_stage_wavefronts()},
            {"mma", c.mma},
            {"main_site_efficiency", r.main_site_efficiency}};
    Json sj = Json::array();
    for (size_t i = 0; i < c.sites.size() && i < sites; ++i) sj.push_back(site_json(c.sites[i]));
    cj["sites"] = std::move(sj);
    j["counters"] = std::move(cj);
  } else {
    j["counters"] = nullptr;
  }
  j["estimate"] = {{"us", r.estimate.us},
                   {"memory_us", r.estimate.memory_us},
                   {"math_us", r.estimate.math_us},
                   {"shared_us", r.estimate.shared_us},
                   {"bound", r.estimate.bound},
                   {"ceiling_fraction", r.estimate.ceiling_fraction},
                   {"limiters", r.estimate.limiters}};
  return j;
}

void print_text(const PlanProfile& p, const std::string& name, int64_t batch, int64_t emulated_batch, size_t sites) {
  fmt::print("graph: {}", name);
  if (batch > 0) fmt::print(" (batch {})", batch);
  if (emulated_batch > 0) {
    fmt::print("; counters from an emulated run at batch {}\n", emulated_batch);
  } else {
    fmt::print("; no emulated run (static facts only)\n");
  }
  fmt::print("target: {} ({}, {} SMs): copy {:.0f} GB/s, mma.sync {:.0f} TFLOP/s, FP32 {:.1f} TFLOP/s\n", p.target.name,
             p.target.arch, p.target.sm_count, p.peaks.copy_bytes_per_s / 1e9, p.peaks.mma_sync_flops / 1e12,
             p.peaks.simt_fp32_flops / 1e12);
  fmt::print("note: estimates from access counts and resources, not measurements (docs/profile.md)\n");
  for (const std::string& w : p.warnings) fmt::print("note: {}\n", w);
  std::vector<std::vector<std::string>> rows{{"#",         "group",      "family",     "config",  "grid",
                                              "block",     "regs",       "smem",       "occ",     "waves",
                                              "tail",      "ld sec/req", "st sec/req", "eff",     "smem wf/req",
                                              "dram/plan", "est us",     "bound",      "ceiling", "limiters"}};
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const KernelProfileRow& r = p.kernels[i];
    const emu::KernelProfile* c = r.counters ? &*r.counters : nullptr;
    rows.push_back({std::to_string(i),
                    std::to_string(r.group),
                    r.family,
                    r.config,
                    dims(r.grid),
                    dims(r.block),
                    r.registers ? std::to_string(*r.registers) + (r.spill_bytes ? "+spill" : "") : "?",
                    kib(r.static_smem + r.dynamic_smem),
                    fmt::format("{:.0f}%", 100 * r.occupancy.fraction),
                    fmt::format("{:.2f}", r.waves.waves),
                    fmt::format("{:.2f}", r.waves.tail_efficiency),
                    c ? ratio(c->load_sectors(), c->load_requests()) : "-",
                    c ? ratio(c->store_sectors(), c->store_requests()) : "-",
                    c ? fmt::format("{:.0f}%", 100 * r.main_site_efficiency) : "-",
                    c && c->shared_requests() ? ratio(c->shared_wavefronts(), c->shared_requests()) +
                                                    (c->shared_wavefronts() > c->shared_ideal_wavefronts() ? "*" : "")
                                              : "-",
                    c ? fmt::format("{:.2f}", r.planned_bytes ? r.dram_bytes / double(r.planned_bytes) : 0.0) : "-",
                    fmt::format("{:.1f}", r.estimate.us),
                    r.estimate.bound,
                    fmt::format("{:.0f}%", 100 * r.estimate.ceiling_fraction),
                    joined(r.estimate.limiters)});
  }
  print_table(rows, 0);
  fmt::print(
      "total: {:.1f} us estimated, {} planned ({:.0f}% of copy bandwidth over the run), {:.2f} GFLOP\n", p.estimated_us,
      human_bytes(p.planned_bytes),
      p.estimated_us > 0 ? 100 * (double(p.planned_bytes) / p.peaks.copy_bytes_per_s * 1e6) / p.estimated_us : 0.0,
      p.flops / 1e9);
  if (sites == 0) return;
  std::vector<std::vector<std::string>> srows{
      {"#", "site", "op", "bytes", "requests", "sec/req", "eff", "wf/req", "waste"}};
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    if (!p.kernels[i].counters) continue;
    const auto& all = p.kernels[i].counters->sites;
    for (size_t k = 0; k < all.size() && k < sites; ++k) {
      const emu::AccessSite& s = all[k];
      const bool global = s.space == emu::AccessSpace::global;
      srows.push_back({std::to_string(i), fmt::format("{}:{}", s.file, s.line),
                       fmt::format("{} {}", global ? "global" : "shared", emu::access_op_name(s.op)),
                       std::to_string(s.bytes_per_lane), std::to_string(s.requests),
                       global ? fmt::format("{:.1f}", s.sectors_per_request()) : "-",
                       global ? fmt::format("{:.0f}%", 100 * s.sector_efficiency()) : "-",
                       global ? "-"
                              : fmt::format("{:.1f}/{:.1f}", s.wavefronts_per_request(),
                                            s.requests ? double(s.ideal_wavefronts) / double(s.requests) : 0.0),
                       human_bytes(static_cast<int64_t>(s.waste_bytes()))});
    }
  }
  fmt::print("access sites, most wasteful first ({} per kernel; at the emulated batch):\n", sites);
  print_table(srows, 2);
}

// The kernel times of `kiln bench --json` run on a GPU, by group, for the roofline's measured points. An
// emulated bench's times are the CPU's and are refused; so is a group that is no kernel of `prof`.
Result<std::vector<MeasuredKernel>> load_measured(const std::string& path, const PlanProfile& prof) {
  std::ifstream in(path);
  if (!in) return invalid_argument(fmt::format("--measured '{}': cannot read it", path));
  const Json doc = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("schema", "") != "kiln.bench/1" || !doc.contains("kernels") ||
      !doc["kernels"].is_array()) {
    return invalid_argument(
        fmt::format("--measured '{}': expected the output of `kiln bench --json` (schema kiln.bench/1)", path));
  }
  if (doc.value("device", "") != "cuda") {
    return invalid_argument(fmt::format(
        "--measured '{}': its times are the CPU's (device {}), not a GPU's: a roofline takes GPU times only", path,
        doc.value("device", "?")));
  }
  std::vector<MeasuredKernel> out;
  for (size_t i = 0; i < doc["kernels"].size(); ++i) {
    const Json& k = doc["kernels"][i];
    const bool shaped = k.is_object() && k.contains("group") && k["group"].is_number_integer() && k.contains("ms") &&
                        k["ms"].is_object() && k["ms"].contains("median") && k["ms"]["median"].is_number() &&
                        k["ms"]["median"].get<double>() > 0;
    if (!shaped) {
      return invalid_argument(fmt::format(
          "--measured '{}': /kernels/{}: expected an integer \"group\" and a positive \"ms\".\"median\"", path, i));
    }
    const int group = k["group"].get<int>();
    const bool known = std::any_of(prof.kernels.begin(), prof.kernels.end(),
                                   [&](const KernelProfileRow& r) { return r.group == group; });
    if (!known) {
      return invalid_argument(fmt::format(
          "--measured '{}': /kernels/{}: group {} is no kernel of this plan (benched from another graph, batch or "
          "target?)",
          path, i, group));
    }
    out.push_back({group, k["ms"]["median"].get<double>() * 1000});
  }
  return out;
}

CommandResult profile(const Args& args) {
  PlanOptions po;
  if (auto layout = args.get("--layout")) {
    auto l = parse_layout_policy(*layout);
    if (!l) return {kExitUsage, UsageError{layout_usage_message(*layout)}};
    po.layout = *l;
  }
  if (auto t = args.get("--target")) {
    auto target = target_named(*t);
    if (!target.ok()) return {kExitUsage, UsageError{fmt::format("profile: {}", target.status().message())}};
    po.target = *target;
  }
  auto number = [&](std::string_view flag, int64_t fallback, int64_t least) -> std::optional<int64_t> {
    auto v = args.get(flag);
    if (!v) return fallback;
    int64_t n = 0;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || end != v->data() + v->size() || n < least) return std::nullopt;
    return n;
  };
  const auto batch_arg = number("--batch", 1, 1);
  if (!batch_arg)
    return {kExitUsage,
            UsageError{fmt::format("invalid --batch '{}': expected a positive integer", *args.get("--batch"))}};
  const auto sites = number("--sites", 5, 0);
  if (!sites)
    return {kExitUsage,
            UsageError{fmt::format("invalid --sites '{}': expected an integer of at least 0", *args.get("--sites"))}};
  const auto seed = number("--seed", 1, 0);
  if (!seed)
    return {kExitUsage,
            UsageError{fmt::format("invalid --seed '{}': expected a non-negative integer", *args.get("--seed"))}};
  if (args.has("--no-emulate") && args.has("--batch")) {
    return {kExitUsage, UsageError{"--batch is the batch of the emulated run: it cannot go with --no-emulate"}};
  }
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  std::optional<DimBindings> dims;
  if (auto e = parse_graph_dims(args, dims)) return {kExitUsage, e};

  const std::string& path = args.positional[0];
  const std::optional<std::string> plot = args.get("--plot");
  if (args.has("--measured") && !plot) return {kExitUsage, UsageError{"--measured goes with --plot FILE.svg"}};
  if (plot) {
    std::vector<std::string> inputs{path};
    if (auto m = args.get("--measured")) inputs.push_back(*m);
    if (std::string problem = output_file_problem("--plot", *plot, inputs); !problem.empty())
      return {kExitUsage, UsageError{problem}};
  }
  auto graph = load_graph_file(path, onnx, dims ? &*dims : nullptr);
  if (!graph.ok()) {
    print_error(graph.status(), path);
    return {kExitInvalid, {}};
  }
  auto full = plan_graph(*graph, po);
  if (!full.ok()) {
    print_error(full.status(), path);
    return {kExitInvalid, {}};
  }
  const int64_t batch = graph_batch(*graph);
  // --batch picks a smaller emulated run of the same graph: one larger than the graph's own batch (or for
  // a graph without one) would silently be ignored.
  if (args.has("--batch") && *batch_arg > 1 && *batch_arg > batch) {
    return {kExitUsage,
            UsageError{batch > 0
                           ? fmt::format("--batch {} is larger than the graph's batch {}: the emulated run is "
                                         "at most the graph itself",
                                         *batch_arg, batch)
                           : fmt::format("--batch {}: the graph has no input with a batch dim to change", *batch_arg)}};
  }
  int64_t emulated_batch = 0;
  std::optional<Plan> small;
  if (!args.has("--no-emulate") && !args.has("--batch") && batch > 1) {
    // The smallest batch at which every kernel is the one estimated (the same tiles).
    auto p = plan_for_counters(*graph, *full, po, 1, &emulated_batch);
    if (!p.ok()) {
      print_error(p.status(), path);
      fmt::print(stderr, "hint: --batch {} emulates the graph as it is (slower), --no-emulate skips the counters\n",
                 batch);
      return {kExitInvalid, {}};
    }
    if (emulated_batch != batch) small.emplace(std::move(p).value());
  } else if (!args.has("--no-emulate")) {
    emulated_batch = batch > 0 ? std::min(*batch_arg, batch) : 0;
    if (emulated_batch > 0 && emulated_batch != batch) {
      auto g = rebatch_graph(*graph, emulated_batch);
      if (!g.ok()) {
        print_error(g.status(), path);
        fmt::print(stderr, "hint: --batch {} emulates the graph as it is (slower), --no-emulate skips the counters\n",
                   batch);
        return {kExitInvalid, {}};
      }
      auto p = plan_graph(*g, po);
      if (!p.ok()) {
        print_error(p.status(), path);
        return {kExitInvalid, {}};
      }
      small.emplace(std::move(p).value());
    } else {
      emulated_batch = batch;
    }
  }
  ProfileOptions opts;
  opts.seed = static_cast<uint64_t>(*seed);
  const Plan* emulated = args.has("--no-emulate") ? nullptr : small ? &*small : &*full;
  auto prof = profile_plan(*full, emulated, opts);
  if (!prof.ok()) {
    print_error(prof.status(), path);
    return {kExitInvalid, {}};
  }
  if (!args.has("--no-emulate") && emulated_batch == 0) emulated_batch = -1;  // no batch dim: as it is
  if (plot) {
    RooflineOptions ro;
    ro.title = batch > 0 ? fmt::format("{} (batch {})", graph->name(), batch) : graph->name();
    if (auto m = args.get("--measured")) {
      auto measured = load_measured(*m, *prof);
      if (!measured.ok()) {
        print_error(measured.status());
        return {kExitInvalid, {}};
      }
      ro.measured = std::move(measured).value();
      ro.measured_source = *m;
    }
    if (Status s = write_output_file(*plot, roofline_svg(*prof, ro)); !s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }
  if (global_options().json) {
    Json doc = json_document("profile");
    doc["graph"] = path;
    doc["name"] = graph->name();
    doc["batch"] = batch;
    doc["emulated_batch"] = emulated ? Json(emulated_batch > 0 ? emulated_batch : batch) : Json(nullptr);
    doc["target"] = {{"name", prof->target.name}, {"arch", prof->target.arch}, {"sm_count", prof->target.sm_count}};
    doc["peaks"] = {{"copy_bytes_per_s", prof->peaks.copy_bytes_per_s},
                    {"tensor_flops", prof->peaks.tensor_flops},
                    {"mma_sync_flops", prof->peaks.mma_sync_flops},
                    {"simt_fp32_flops", prof->peaks.simt_fp32_flops},
                    {"source", prof->peaks.source}};
    doc["warnings"] = prof->warnings;
    Json ks = Json::array();
    for (const KernelProfileRow& r : prof->kernels) ks.push_back(row_json(r, static_cast<size_t>(*sites)));
    doc["kernels"] = std::move(ks);
    doc["estimated_us"] = prof->estimated_us;
    doc["planned_bytes"] = prof->planned_bytes;
    doc["flops"] = prof->flops;
    print_json(doc);
    return {};
  }
  print_text(*prof, graph->name(), batch, emulated ? std::max<int64_t>(emulated_batch, 0) : 0,
             static_cast<size_t>(*sites));
  if (plot) fmt::print("roofline chart: {}\n", *plot);
  return {};
}

}  // namespace

CommandSpec profile_command() {
  return {.name = "profile",
          .summary = "estimate each kernel's memory efficiency, bank conflicts, occupancy and time (no GPU needed)",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options = {{"--target", "T", "the GPU to estimate for (h200 by default; h100, a100, a10, l4, or an arch)"},
                      {"--batch", "N",
                       "emulate the kernels at batch N for the counters (default: the smallest batch, 1, 2, 4, ..., "
                       "at which every kernel has the tiles it has at the graph's batch)"},
                      {"--no-emulate", "", "static facts only: no counters, no emulated run"},
                      {"--sites", "N", "list the N most wasteful access sites of each kernel (default 5; 0: none)"},
                      {"--layout", "L", "auto (default), nchw or nhwc, as kiln plan takes it"},
                      {"--seed", "S", "seed of the emulated run's random inputs (default 1)"},
                      {"--shape", "NAME=DIMS", "ONNX: fix a dim the model leaves open, e.g. x=1x3x224x224"},
                      {"--dim-range", "NAME=LO..HI",
                       "ONNX: the range of an open dim the model names (default 1..1024), e.g. batch=1..64"},
                      kDimsOption,
                      {"--plot", "FILE.svg", "also draw the roofline chart as SVG (docs/profile.md)"},
                      {"--measured", "BENCH.json",
                       "with --plot: add GPU-measured points from `kiln bench --json` run on cuda"},
                      {"--json", "", "the profile as JSON: schema kiln.profile/1 (docs/cli.md)"}},
          .footer =
              "Columns and the estimate's model: docs/profile.md. The estimate is for the graph's own batch;\n"
              "the counters come from the emulator at --batch and are carried over as ratios.",
          .run = profile};
}

}  // namespace kiln::cli
