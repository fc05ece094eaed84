// The Chrome trace event format ("Trace Event Format", the JSON object form): complete events ("ph": "X")
// with "ts" and "dur" in microseconds, one "tid" per track, and metadata events ("ph": "M") naming the
// process and its tracks. Perfetto's UI and chrome://tracing both read it.
#include "trace.h"

#include <map>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/kernel.h"
#include "kiln/kernel_kinds.h"

namespace kiln::cli {

namespace {

constexpr int kPid = 1, kRunsTrack = 1, kStreamTrack = 2;

Json metadata(std::string_view what, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"args", {{"name", name}}}};
}

// What the plan says of a group's kernel: its kind, family, planned bytes and FLOPs (0 for the families
// that do not count them: everything but the GEMMs).
Json group_args(const Plan* plan, int group, std::map<int, Json>& memo) {
  if (!plan || group < 0 || group >= static_cast<int>(plan->groups.size())) return Json::object();
  if (auto it = memo.find(group); it != memo.end()) return it->second;
  const Group& g = plan->group(group);
  double flops = 0;
  if (auto config = codegen::plan_kernel(*plan, g); config.ok())
    flops = codegen::kernel_family(config->family).flops(*config);
  Json j{{"group", group},
         {"kind", group_kind_name(g.kind)},
         {"family", kernel_family_name(g.family)},
         {"bytes", g.bytes_read + g.bytes_written},
         {"flops", flops}};
  return memo[group] = j;
}

}  // namespace

Json trace_document(const TraceInfo& info, const Plan* plan, const std::vector<TracedRun>& runs) {
  const std::string clock = info.gpu ? "GPU time (CUDA events); start: host clock at launch"
                                     : "CPU wall time (the kernels emulated on the CPU, not a GPU's time)";
  Json events = Json::array();
  events.push_back(
      metadata("process_name", 0, fmt::format("kiln {}: {} on {}", info.command, info.graph_name, info.device_name)));
  events.push_back(metadata("thread_name", kRunsTrack, "runs (host wall time)"));
  events.push_back(metadata("thread_name", kStreamTrack,
                            info.gpu ? "stream 0: kernels (GPU time)" : "stream 0: kernels (CPU wall time, emulated)"));
  std::map<int, Json> memo;
  for (size_t r = 0; r < runs.size(); ++r) {
    const TracedRun& run = runs[r];
    events.push_back({{"name", fmt::format("run {}", r + 1)},
                      {"cat", "run"},
                      {"ph", "X"},
                      {"ts", run.start_ms * 1000},
                      {"dur", run.ms * 1000},
                      {"pid", kPid},
                      {"tid", kRunsTrack},
                      {"args", {{"run", r + 1}, {"kernels_timed", run.kernels.size()}}}});
    for (size_t k = 0; k < run.kernels.size(); ++k) {
      const KernelTime& kt = run.kernels[k];
      Json args = group_args(plan, kt.group, memo);
      args["launch"] = k;
      args["grid"] = kt.grid;
      args["block"] = kt.block;
      args["clock"] = clock;
      events.push_back({{"name", kt.entry},
                        {"cat", "kernel"},
                        {"ph", "X"},
                        {"ts", (run.start_ms + kt.start_ms) * 1000},
                        {"dur", kt.ms * 1000},
                        {"pid", kPid},
                        {"tid", kStreamTrack},
                        {"args", std::move(args)}});
    }
  }
  Json doc{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  doc["otherData"] = {{"schema", "kiln.trace/1"},
                      {"kiln", KILN_VERSION},
                      {"command", info.command},
                      {"graph", info.graph_path},
                      {"device", info.device},
                      {"device_name", info.device_name},
                      {"clock", clock}};
  return doc;
}

}  // namespace kiln::cli
