// profile_bench: the gpu_bench suites' shapes estimated without a GPU (include/kiln/profile.h): every
// kernel's sector efficiency, bank conflicts, occupancy, waves and roofline estimate, and whether it meets
// the targets kiln holds its kernels to (docs/profile.md, "Targets").
//
//   profile_bench [--suite conv,memory,generic] [--target h200] [--dtype bf16] [--batch 32] [--quick] [--json OUT.json]
//
// conv: the 23 distinct ResNet-50 convolutions at batch 32 (--batch; static facts and the estimate); memory: the
// memory suite at its own size; generic (not in the default): each of the 23 convolutions with its batch's own
// tile and with the batch-generic one (TilePolicy::generic_only), side by side, and which a binding of a
// symbolic graph takes (TilePolicy::generic: the generic kernel unless it estimates more than 10 % slower). Counters
// come from the emulator at the smallest batch (1, 2, 4, ...) at which every kernel is planned as at the full size
// (plan_for_counters). Prints one row per kernel and a summary of the targets met.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/plan.h"
#include "kiln/profile.h"
#include "tools/bench/bench_suites.h"

namespace {

using namespace kiln;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "profile_bench: %s\n", msg.c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().message());
  return std::move(r).value();
}

struct Targets {
  double sectors = 0.90, tail = 0.85, copy = 0.80;
};

struct Row {
  std::string suite, label, family, config, limiters;
  int regs = -1, blocks_per_sm = 0;
  double occupancy = 0, waves = 0, tail = 0, efficiency = 1, dram_ratio = 0, us = 0, ceiling = 0;
  uint64_t wavefronts = 0, ideal_wavefronts = 0;
  std::string bound;
};

std::vector<Row> profile_case(const std::string& suite, const std::string& label, const Graph& g, const Target& target,
                              TilePolicy tiles = TilePolicy::own) {
  PlanOptions po;
  po.target = target;
  po.tiles = tiles;
  Plan full = must(plan_graph(g, po), label);
  int64_t batch = 0;
  Plan small = must(plan_for_counters(g, full, po, 1, &batch), label);
  std::fprintf(stderr, "%s: counters at batch %lld\n", label.c_str(), static_cast<long long>(batch));
  PlanProfile p = must(profile_plan(full, &small), label);
  for (const std::string& w : p.warnings) std::fprintf(stderr, "%s: note: %s\n", label.c_str(), w.c_str());
  std::vector<Row> rows;
  for (const KernelProfileRow& k : p.kernels) {
    Row r;
    r.suite = suite, r.label = label, r.family = k.family, r.config = k.config;
    r.regs = k.registers.value_or(-1);
    r.blocks_per_sm = k.occupancy.blocks_per_sm;
    r.occupancy = k.occupancy.fraction, r.waves = k.waves.waves, r.tail = k.waves.tail_efficiency;
    r.efficiency = k.main_site_efficiency;
    r.dram_ratio = k.planned_bytes ? k.dram_bytes / static_cast<double>(k.planned_bytes) : 0;
    r.us = k.estimate.us, r.ceiling = k.estimate.ceiling_fraction, r.bound = k.estimate.bound;
    if (k.counters) {
      // The tensor-core main loop's shared accesses: ldmatrix and the cp.async stores.
      for (const emu::AccessSite& s : k.counters->sites) {
        if (s.op == emu::AccessOp::ldmatrix || s.op == emu::AccessOp::cp_async_dst) {
          r.wavefronts += s.wavefronts, r.ideal_wavefronts += s.ideal_wavefronts;
        }
      }
    }
    for (const std::string& l : k.estimate.limiters) r.limiters += (r.limiters.empty() ? "" : ",") + l;
    rows.push_back(std::move(r));
  }
  return rows;
}

// The conv kernel's row of a case's rows.
const Row& conv_row(const std::vector<Row>& rows, const std::string& label) {
  for (const Row& r : rows)
    if (r.family == "conv2d") return r;
  die(label + ": no conv2d kernel");
}

// The conv kernel's config in a plan with TilePolicy::generic (what a binding takes): static facts only, no
// emulated run (the choice is made when planning).
std::string binding_conv_config(const Graph& g, const Target& target, const std::string& label) {
  PlanOptions po;
  po.target = target;
  po.tiles = TilePolicy::generic;
  const PlanProfile p = must(profile_plan(must(plan_graph(g, po), label), nullptr), label);
  for (const KernelProfileRow& k : p.kernels)
    if (k.family == "conv2d") return k.config;
  die(label + ": no conv2d kernel");
}

// --suite generic: per convolution, the estimates of its own tile and of the generic one, and the rule's pick.
void generic_suite(const std::vector<bench::ConvShape>& shapes, int64_t batch, DType dt, const Target& target) {
  fmt::print("profile_bench --suite generic on {} ({} SMs), {}, batch {}: estimates, not measurements\n", target.name,
             target.sm_count, dtype_name(dt), batch);
  fmt::print("{:<36} {:<26} {:>8} {:<26} {:>8} {:>8}  {}\n", "case", "own tile", "est us", "generic tile", "est us",
             "gen/own", "binding takes");
  int within = 0, picked_generic = 0, agree = 0;
  for (const bench::ConvShape& s : shapes) {
    const std::string label = bench::conv_label(s, batch, dt);
    std::fprintf(stderr, "%s\n", label.c_str());
    const Graph g = must(bench::conv_graph(s, batch, dt), label);
    const Row own = conv_row(profile_case("generic", label, g, target, TilePolicy::own), label);
    const Row gen = conv_row(profile_case("generic", label, g, target, TilePolicy::generic_only), label);
    const std::string pick = binding_conv_config(g, target, label);
    const double ratio = gen.us / own.us;
    const bool takes_generic = pick.find(" specialized") == std::string::npos;  // a patch conv has one tile
    within += ratio <= 1.10;
    picked_generic += takes_generic;
    agree += takes_generic == (ratio <= 1.10);
    const auto tile = [](std::string c) {
      if (const size_t at = c.find(" shape-generic"); at != std::string::npos) c.erase(at, 14);
      return c.substr(0, c.find(" generic")).substr(0, 26);
    };
    const bool sizes_as_args = pick.find("shape-generic") != std::string::npos;
    fmt::print("{:<36} {:<26} {:>8.1f} {:<26} {:>8.1f} {:>8.2f}  {}{}\n", label.substr(0, 36), tile(own.config), own.us,
               tile(gen.config), gen.us, ratio, takes_generic ? "generic" : "own (specialized)",
               sizes_as_args ? ", sizes as arguments" : "");
  }
  fmt::print("\ngeneric within 10 % of its own tile (the profile's estimate): {} of {}\n", within, shapes.size());
  fmt::print("a binding takes the generic kernel: {} of {}; the rule (tile_cost) agrees with the profile: {} of {}\n",
             picked_generic, shapes.size(), agree, shapes.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string suites = "conv,memory", target_name = "h200", dtype = "bf16", json_out;
  int64_t batch = 32;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--suite") {
      suites = value();
    } else if (a == "--target") {
      target_name = value();
    } else if (a == "--dtype") {
      dtype = value();
    } else if (a == "--batch") {
      batch = std::stoll(value());
      if (batch < 1) die("--batch must be positive");
    } else if (a == "--json") {
      json_out = value();
    } else if (a == "--quick") {
      quick = true;
    } else {
      die("unknown argument '" + a +
          "' (--suite conv,memory,generic --target T --dtype bf16|f16 --batch N --quick --json OUT)");
    }
  }
  const Target target = must(target_named(target_name), "--target");
  const auto dt = parse_dtype(dtype);
  if (!dt || *dt == DType::f32) die("--dtype must be f16 or bf16");
  if (suites.find("generic") != std::string::npos) {
    auto shapes = must(bench::resnet50_conv_shapes(KILN_SOURCE_DIR), "resnet50.json");
    if (quick) shapes.resize(2);
    generic_suite(shapes, batch, *dt, target);
    return 0;
  }
  std::vector<Row> rows;
  if (suites.find("conv") != std::string::npos) {
    auto shapes = must(bench::resnet50_conv_shapes(KILN_SOURCE_DIR), "resnet50.json");
    if (quick) shapes.resize(2);
    for (const bench::ConvShape& s : shapes) {
      const std::string label = bench::conv_label(s, batch, *dt);
      std::fprintf(stderr, "%s\n", label.c_str());
      for (Row& r : profile_case("conv", label, must(bench::conv_graph(s, batch, *dt), label), target))
        rows.push_back(std::move(r));
    }
  }
  if (suites.find("memory") != std::string::npos) {
    for (const std::string& m : bench::memory_cases()) {
      if (quick && m != "add_relu") continue;
      std::string label;
      Graph g = must(bench::memory_graph(m, *dt, &label), m);
      std::fprintf(stderr, "%s\n", label.c_str());
      for (Row& r : profile_case("memory", label, g, target)) rows.push_back(std::move(r));
    }
  }

  const Targets t;
  fmt::print("profile_bench on {} ({} SMs), {}: estimates, not measurements (docs/profile.md)\n", target.name,
             target.sm_count, dtype);
  fmt::print("{:<36} {:<9} {:<22} {:>4} {:>4} {:>5} {:>6} {:>5} {:>5} {:>9} {:>6} {:>9} {:>6} {:>7}  {}\n", "case",
             "family", "config", "regs", "b/SM", "occ", "waves", "tail", "eff", "smem wf", "dram", "est us", "bound",
             "ceiling", "limiters");
  int met_sectors = 0, met_banks = 0, tc_kernels = 0, met_tail = 0, conv_kernels = 0, met_copy = 0, mem_kernels = 0;
  for (const Row& r : rows) {
    fmt::print(
        "{:<36} {:<9} {:<22} {:>4} {:>4} {:>4.0f}% {:>6.2f} {:>5.2f} {:>4.0f}% {:>9} {:>6.2f} {:>9.1f} {:>6} {:>6.0f}% "
        " {}\n",
        r.label.substr(0, 36), r.family, r.config, r.regs, r.blocks_per_sm, 100 * r.occupancy, r.waves, r.tail,
        100 * r.efficiency, fmt::format("{}/{}", r.wavefronts, r.ideal_wavefronts), r.dram_ratio, r.us, r.bound,
        100 * r.ceiling, r.limiters.empty() ? "-" : r.limiters);
    met_sectors += r.efficiency >= t.sectors;
    if (r.config.rfind("tc ", 0) == 0) {
      ++tc_kernels;
      met_banks += r.wavefronts == r.ideal_wavefronts;
    }
    if (r.suite == "conv" && r.family == "conv2d") {
      ++conv_kernels;
      met_tail += r.tail >= t.tail;
    }
    if (r.suite == "memory") {
      ++mem_kernels;
      met_copy += r.bound == "memory" && r.ceiling >= t.copy;
    }
  }
  fmt::print("\ntargets met:\n");
  fmt::print("  main global sites >= {:.0f}% sector efficiency: {} of {} kernels\n", 100 * t.sectors, met_sectors,
             rows.size());
  fmt::print("  tensor-core ldmatrix + cp.async stores without bank conflicts: {} of {} kernels\n", met_banks,
             tc_kernels);
  fmt::print("  batch-{} convolutions with tail-wave efficiency >= {:.2f}: {} of {}\n", batch, t.tail, met_tail,
             conv_kernels);
  fmt::print("  memory suite at >= {:.0f}% of copy bandwidth (estimated): {} of {} kernels\n", 100 * t.copy, met_copy,
             mem_kernels);
  if (!json_out.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      j.push_back({{"suite", r.suite},
                   {"case", r.label},
                   {"family", r.family},
                   {"config", r.config},
                   {"registers", r.regs},
                   {"blocks_per_sm", r.blocks_per_sm},
                   {"occupancy", r.occupancy},
                   {"waves", r.waves},
                   {"tail_efficiency", r.tail},
                   {"main_site_efficiency", r.efficiency},
                   {"main_loop_wavefronts", r.wavefronts},
                   {"main_loop_ideal_wavefronts", r.ideal_wavefronts},
                   {"dram_over_planned", r.dram_ratio},
                   {"estimated_us", r.us},
                   {"bound", r.bound},
                   {"ceiling_fraction", r.ceiling},
                   {"limiters", r.limiters}});
    }
    std::ofstream(json_out) << j.dump(1) << "\n";
  }
  return 0;
}
