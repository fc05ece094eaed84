// The `kiln` command-line program: shared pieces of its commands.
//
// Exit codes: 0 ok, 1 invalid input (a bad graph, bad tensor files, a failed run), 2 usage error. Results go
// to stdout, errors to stderr; every error line starts with "error: ".
#pragma once

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

// A command line that kiln cannot make sense of; main prints it with a hint to run `kiln --help`.
struct UsageError {
  std::string message;
};

// The arguments of one command after its name: positional arguments and `--flag VALUE` / `--flag=VALUE`
// options. `help` is set when `--help` or `-h` appears anywhere.
struct Args {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;  // flag (with its dashes) and value
  bool help = false;

  std::optional<std::string> get(std::string_view flag) const;
  bool has(std::string_view flag) const { return get(flag).has_value(); }
};

// Parses `argv` against the flags that `command` accepts: `value_flags` take one value, `switches` none
// (`has` tells whether one was given). Unknown flags, a missing value, a value for a switch and a repeated
// flag are usage errors.
std::optional<UsageError> parse_args(std::string_view command, const std::vector<std::string>& argv,
                                     const std::vector<std::string_view>& value_flags, Args& out,
                                     const std::vector<std::string_view>& switches = {});

// --shape NAME=D0xD1x...[,NAME=...] (the shapes of ONNX inputs a model leaves open) into `out`.
std::optional<UsageError> parse_shape_option(const Args& args, OnnxOptions& out);
// A GRAPH argument: an ONNX model when its name ends in .onnx (imported with `onnx`), else a kiln JSON graph.
Result<Graph> load_graph_file(const std::string& path, const OnnxOptions& onnx);

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

// The commands. Each returns an exit code, or a UsageError for main to print.
struct CommandResult {
  int code = kExitOk;
  std::optional<UsageError> usage;
};
CommandResult cmd_validate(const std::vector<std::string>& argv);
CommandResult cmd_run(const std::vector<std::string>& argv);
CommandResult cmd_plan(const std::vector<std::string>& argv);
CommandResult cmd_cache(const std::vector<std::string>& argv);    // cmd_cache.cpp: the kernel cache
CommandResult cmd_prewarm(const std::vector<std::string>& argv);  // cmd_prewarm.cpp: fill the kernel cache
CommandResult cmd_import(const std::vector<std::string>& argv);   // cmd_import.cpp: ONNX -> JSON + .npy weights

// The help text (printed by `kiln --help` and `kiln COMMAND --help`).
std::string_view help_text();

}  // namespace kiln::cli
