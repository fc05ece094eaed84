// The `kiln` command-line program: shared pieces of its commands.
//
// Exit codes: 0 ok, 1 invalid input (a bad graph, bad tensor files, a failed run), 2 usage error. Results go
// to stdout, errors to stderr; every error line starts with "error: ".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/text_table.h"  // group_digits, human_bytes, render_table
#include "kiln/graph.h"
#include "kiln/onnx.h"
#include "kiln/status.h"

namespace kiln::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;
inline constexpr int kExitUsage = 2;

// A command line that kiln cannot make sense of; main prints it with a hint to run `kiln COMMAND --help`.
struct UsageError {
  std::string message;
};

// A command's arguments after CLI11 has parsed them (main.cpp): the positional arguments and every option
// given, under its long name ("--device"), switches with an empty value.
struct Args {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;  // flag (with its dashes) and value

  std::optional<std::string> get(std::string_view flag) const;
  bool has(std::string_view flag) const { return get(flag).has_value(); }
};

// One option of a command: `names` as CLI11 takes them ("-o,--output"), `value` the placeholder shown in the
// help ("DIR"; empty for a switch), `help` its line in `kiln COMMAND --help`.
struct OptionSpec {
  std::string_view names;
  std::string_view value;
  std::string_view help;
};

struct CommandResult {
  int code = 0;
  std::optional<UsageError> usage;
};

// A command: its name ("run", or "cache stats" for a subcommand of `cache`), what it does, its positional
// arguments (`positional` names them, "GRAPH"; `positionals` is how many: 1, 0, or -1 for one or more),
// its options, a footer for its help, and the function that runs it.
struct CommandSpec {
  std::string_view name{};
  std::string_view summary{};
  std::string_view positional{};
  std::string_view positional_help{};
  int positionals = 1;
  std::vector<OptionSpec> options{};
  std::string_view footer{};
  CommandResult (*run)(const Args&) = nullptr;
};

// Every command of the program, in the order `kiln --help` lists them (main.cpp).
const std::vector<CommandSpec>& commands();

// The options every command takes (-v, -q, --log-level, --json where it has one): set by main before the
// command runs.
struct GlobalOptions {
  bool json = false;         // --json: one JSON document on stdout instead of text (docs/cli.md, "JSON")
  bool quiet = false;        // -q: errors only, no progress
  bool no_progress = false;  // --no-progress
};
GlobalOptions& global_options();

// --shape NAME=D0xD1x...[,NAME=...] (the shapes of ONNX inputs a model leaves open) into `out`.
std::optional<UsageError> parse_shape_option(const Args& args, OnnxOptions& out);
// --dims NAME=VALUE[,NAME=VALUE...] (values of a graph's symbolic dims); a bare value continues the list of
// the name before it and LO..HI is every value between (N=1,8,32 or N=1..64: kiln prewarm's lists).
using DimValues = std::map<std::string, std::vector<int64_t>, std::less<>>;
std::optional<UsageError> parse_dims_option(const Args& args, DimValues& out);
// One value per dim (every command but prewarm).
std::optional<UsageError> single_dims(const DimValues& values, DimBindings& out);
// --dims with one value per dim into `out` (left empty without --dims).
std::optional<UsageError> parse_graph_dims(const Args& args, std::optional<DimBindings>& out);
// The options every command that reads a GRAPH has for its symbolic dims.
// What every command taking a graph says of it, and of the ONNX option fixing an open input shape.
inline constexpr const char* kGraphHelp = "a kiln graph (.json) or an ONNX model (.onnx)";
inline constexpr OptionSpec kShapeOption{"--shape", "NAME=DIMS",
                                         "ONNX: fix the dims of an input the model leaves open (1x3x224x224)"};
inline constexpr OptionSpec kDimsOption{"--dims", "NAME=VALUE",
                                        "values of the graph's symbolic dims, e.g. N=8 (docs/graph-format.md)"};

// A GRAPH argument: an ONNX model when its name ends in .onnx (imported with `onnx`), else a kiln JSON graph.
// With `dims`, its symbolic dims bound to those values (Graph::bind).
Result<Graph> load_graph_file(const std::string& path, const OnnxOptions& onnx, const DimBindings* dims = nullptr);

// Prints each line of a failed Status to stderr as "error: <line>". With a `source` (the graph file), lines
// that do not start with "<source>: " get it, so that every line names the file (`error: g.json: /nodes/3:
// ...`), as a compiler's messages do.
void print_error(const Status& s, std::string_view source = {});
void print_error(std::string_view message, std::string_view source = {});

// Prints rows as columns separated by two spaces, each line indented by `indent` and trimmed on the right.
void print_table(const std::vector<std::vector<std::string>>& rows, int indent);

// Prints a verified graph's summary to stdout: name, counts, every input, parameter and output with shape,
// dtype and layout, the count of each op and the total parameter size.
void print_graph_summary(const Graph& g);

// The commands (one file each).
CommandSpec validate_command();
CommandSpec run_command();
CommandSpec bench_command();  // cmd_bench.cpp: time a graph's kernels
CommandSpec plan_command();
std::vector<CommandSpec> cache_commands();  // cmd_cache.cpp: stats, ls, verify, prune, clear
CommandSpec prewarm_command();              // cmd_prewarm.cpp: fill the kernel cache
CommandSpec import_command();               // cmd_import.cpp: ONNX -> JSON + .npy weights
CommandSpec grad_command();                 // cmd_grad.cpp: the training graph (kiln::backward)
CommandSpec train_command();                // cmd_train.cpp: training steps on .npy data (TrainingSession)
CommandSpec profile_command();              // cmd_profile.cpp: counters, occupancy, roofline estimate

// The overview `kiln --help` prints.
std::string_view help_text();

}  // namespace kiln::cli
