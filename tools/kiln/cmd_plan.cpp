// `kiln plan GRAPH.json`: plans a graph and prints the plan (text, JSON or Graphviz), or the graph after one
// pass of the planner (--dump-after=PASS).
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "graphviz.h"
#include "kiln/json.h"
#include "kiln/plan.h"
#include "kiln/profile.h"
#include "kiln/target.h"
#include "layout_option.h"

namespace kiln::cli {
namespace {

std::string pass_list() {
  std::string s;
  for (std::string_view p : pass_names()) s += (s.empty() ? "" : ", ") + std::string(p);
  return s;
}

// The planner's options from the command line.
std::optional<UsageError> parse_plan_options(const Args& args, PlanOptions& options) {
  if (auto layout = args.get("--layout")) {
    auto p = parse_layout_policy(*layout);
    if (!p) return UsageError{layout_usage_message(*layout)};
    options.layout = *p;
  }
  if (auto cap = args.get("--max-group-ops")) {
    int value = 0;
    auto [end, ec] = std::from_chars(cap->data(), cap->data() + cap->size(), value);
    if (ec != std::errc() || end != cap->data() + cap->size() || value < 1) {
      return UsageError{fmt::format("bad --max-group-ops '{}': expected an integer of at least 1", *cap)};
    }
    options.max_group_ops = value;
  }
  if (auto t = args.get("--target")) {
    auto target = target_named(*t);
    if (!target.ok()) return UsageError{fmt::format("plan: {}", target.status().message())};
    options.target = *target;
  }
  return std::nullopt;
}

// What to print: --format, --explain, the dot switches and --dump-after, which exclude one another in part.
std::optional<UsageError> check_output_flags(const Args& args, const std::string& format) {
  if (format != "text" && format != "json" && format != "dot" && format != "svg") {
    return UsageError{fmt::format("unknown format '{}': expected text, json, dot or svg", format)};
  }
  for (const char* sw : {"--dot-no-params", "--dot-kernels-only", "--heat"}) {
    if (args.has(sw) && format != "dot" && format != "svg") {
      return UsageError{fmt::format("{} is an option of the drawing: it needs --format dot or svg", sw)};
    }
  }
  if (args.has("--explain") && format != "text") {
    return UsageError{fmt::format(
        "--explain prints text: it takes no --format {} (the JSON form always has the reasons, in 'separations')",
        format)};
  }
  if (auto dump_after = args.get("--dump-after")) {
    bool known = false;
    for (std::string_view p : pass_names()) known = known || p == *dump_after;
    if (!known) return UsageError{fmt::format("unknown pass '{}': expected one of {}", *dump_after, pass_list())};
    if (args.get("--format")) {
      return UsageError{"--dump-after prints the graph after a pass: it takes no --format"};
    }
    if (args.has("--explain")) return UsageError{"--dump-after prints the graph after a pass: it takes no --explain"};
  }
  return std::nullopt;
}

CommandResult plan(const Args& args) {
  const std::string format = args.get("--format").value_or("text");
  if (auto e = check_output_flags(args, format)) return {kExitUsage, e};
  PlanOptions options;
  if (auto e = parse_plan_options(args, options)) return {kExitUsage, e};
  std::optional<std::string> dump_after = args.get("--dump-after");

  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  std::optional<DimBindings> dims;
  if (auto e = parse_graph_dims(args, dims)) return {kExitUsage, e};
  const std::string& path = args.positional[0];
  auto g = load_graph_file(path, onnx, dims ? &*dims : nullptr);
  if (!g.ok()) {
    print_error(g.status(), path);
    return {kExitInvalid, {}};
  }
  std::string dump;
  bool dumped = false;
  if (dump_after) {
    options.after_pass = [&](std::string_view pass, const Graph& graph) {
      if (pass == *dump_after && !dumped) {
        dump = dump_graph(graph);
        dumped = true;
      }
    };
  }
  auto plan = plan_graph(*g, options);
  if (!plan.ok()) {
    print_error(plan.status(), path);
    return {kExitInvalid, {}};
  }
  if (dump_after) {
    if (!dumped) {
      print_error(fmt::format("internal error: the planner did not report pass '{}'", *dump_after));
      return {kExitInvalid, {}};
    }
    if (!dump.empty() && dump.back() != '\n') dump += '\n';
    fmt::print("{}", dump);
  } else if (format == "json") {
    fmt::print("{}", plan_to_json(*plan));
  } else if (format == "dot" || format == "svg") {
    DotOptions dot;
    dot.parameters = !args.has("--dot-no-params");
    dot.kernels_only = args.has("--dot-kernels-only");
    if (args.has("--heat")) {
      // kiln profile's estimate without the emulated counters (they take minutes on a large graph): the
      // planned bytes and FLOPs against the target's ceilings, with ptxas's resources for occupancy.
      auto prof = profile_plan(*plan, nullptr);
      if (!prof.ok()) {
        print_error(prof.status(), path);
        return {kExitInvalid, {}};
      }
      for (const KernelProfileRow& r : prof->kernels) dot.group_us[r.group] += r.estimate.us;
      for (const std::string& w : prof->warnings) fmt::print(stderr, "warning: --heat: {}\n", w);
    }
    std::string drawing = plan_to_dot(*plan, dot);
    if (format == "svg") {
      auto svg = render_dot_svg(drawing);
      if (!svg.ok()) {
        print_error(svg.status());
        return {kExitInvalid, {}};
      }
      drawing = std::move(svg).value();
    }
    fmt::print("{}", drawing);
  } else if (args.has("--explain")) {
    fmt::print("{}", plan_explanation(*plan));
  } else {
    fmt::print("{}", plan_to_text(*plan));
  }
  return {};
}

}  // namespace

CommandSpec plan_command() {
  return {.name = "plan",
          .summary = "plan a graph: its fused groups (kernels), buffers and memory traffic",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options =
              {{"--format", "F",
                "text (default), json, dot (Graphviz: one cluster per group, coloured by kind) or svg (the dot form "
                "drawn by Graphviz's dot)"},
               {"--layout", "L", "auto (default: NHWC between convolutions, norms and pools), nchw or nhwc"},
               {"--max-group-ops", "N", "at most N ops per fused group (default 32; 1 disables fusion)"},
               {"--target", "T", "plan for device T (h200 by default; h100, a100, a10, l4, or an arch such as sm_80)"},
               {"--dump-after", "PASS", "print the graph after PASS (verify, canonicalize, ...) instead of the plan"},
               {"--explain", "",
                "instead of the plan, one line per tensor between two kernels: the fusion rule that kept its producer "
                "and consumer apart (text only; the JSON form has them as 'separations')"},
               {"--dot-no-params", "", "with --format dot: leave out parameters and weight transforms"},
               {"--dot-kernels-only", "",
                "with --format dot: one box per kernel (id, kind, family, op count), tensors between kernels as edges"},
               {"--heat", "",
                "with --format dot or svg: fill each kernel by its share of the estimated time (kiln profile's model, "
                "without counters) and give the time in its label"},
               kShapeOption,
               {"--dim-range", "NAME=LO..HI",
                "ONNX: the range of an open dim the model names (default 1..1024), e.g. batch=1..64"},
               kDimsOption},
          .run = plan};
}

}  // namespace kiln::cli
