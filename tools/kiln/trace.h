// --trace FILE.json (kiln bench, kiln run): the kernel launches of timed runs in the Chrome trace event
// format, which Perfetto (ui.perfetto.dev) and chrome://tracing open (docs/cli.md, "Timelines").
#pragma once

#include <string>
#include <vector>

#include "json_output.h"
#include "kiln/engine.h"
#include "kiln/plan.h"

namespace kiln::cli {

// One run: when it started (ms from the trace's start), how long it took, and its kernels if timed.
struct TracedRun {
  double start_ms = 0, ms = 0;
  std::vector<KernelTime> kernels;
};

struct TraceInfo {
  std::string command;  // "bench" or "run"
  std::string graph_path, graph_name;
  std::string device, device_name;
  bool gpu = false;  // cuda: kernel times are the GPU's (CUDA events); else the CPU's wall times
};

// The trace document: a track of runs, a track of the stream's kernels (name, group, family, kind,
// grid/block, planned bytes and FLOPs in each event's args), and what the clock is.
Json trace_document(const TraceInfo& info, const Plan* plan, const std::vector<TracedRun>& runs);

}  // namespace kiln::cli
