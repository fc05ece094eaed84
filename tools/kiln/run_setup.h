// What `kiln run` and `kiln bench` share: the graph from GRAPH, its inputs (random, from --inputs, weights
// from --weights), and the engine of --device, every option checked before the graph is read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "cli.h"
#include "kiln/engine.h"
#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/plan.h"

namespace kiln::cli {

struct RunSetup {
  std::string path;  // GRAPH as given
  Graph graph;
  DeviceKind device = DeviceKind::ref;  // as asked for (automatic stays automatic; engine->device() says)
  LayoutPolicy layout = LayoutPolicy::automatic;
  uint64_t seed = 0;
  std::optional<std::string> inputs_dir;
  TensorMap inputs;
  std::optional<Engine> engine;  // every device but ref
};

// --seed S: a non-negative integer below 2^64 (kiln run, bench, train).
std::optional<uint64_t> parse_seed(std::string_view s);

// The options of both commands, for their CommandSpecs.
std::vector<OptionSpec> run_setup_options(bool device_required);

// Parses the options (a missing --device is `fallback`, or a usage error without one), loads the graph and
// the inputs, and opens the engine. A CommandResult when something is wrong (its error printed already).
std::variant<RunSetup, CommandResult> prepare_run(const Args& args, std::string_view command,
                                                  std::optional<DeviceKind> fallback);

}  // namespace kiln::cli
