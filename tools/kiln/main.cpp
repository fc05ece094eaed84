// `kiln`: the command-line program. Parses the command line with CLI11 (Debian's libcli11-dev) from each
// command's CommandSpec, sets the log level, and runs the command; no exception leaves main.
#include <deque>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "kiln/log.h"

namespace kiln::cli {
namespace {

constexpr std::string_view kHelp = R"(kiln - a graph-based CUDA op-fusion engine

usage: kiln [-v|-vv|-q] COMMAND ARGS...      (kiln COMMAND --help: that command's options)
GRAPH is a kiln graph (.json) or an ONNX model (.onnx): a dim the model leaves open is a symbol, bound by
--dims batch=8; --dim-range batch=1..64 sets its range, --shape NAME=1x3x224x224 fixes an input's shape.
  kiln validate GRAPH          check a graph and print its summary
  kiln run GRAPH --device ref|emu|cuda|auto [--check] [--layout L] [--seed S] [--inputs DIR] [--weights DIR]
                               [--save-inputs DIR] [--save-outputs DIR] [--max-memory S]
                               run a graph and print statistics of its outputs
  kiln bench GRAPH [--device auto|cuda|emu|ref] [--iterations N | --duration S] [--warmup N] [--cuda-graph]
                               time a graph's runs and each of its kernels (median, p10, p90), like trtexec
  kiln import MODEL.onnx -o GRAPH.json [--weights DIR] [--shape NAME=DIMS] [--dim-range NAME=LO..HI]
                               convert an ONNX model to a kiln graph and its weights (one .npy per parameter,
                               in DIR, default GRAPH.weights/)
  kiln grad GRAPH --loss NAME -o TRAIN.json
                               write the training graph: the forward, its backward and grad/<parameter> outputs
  kiln train GRAPH --loss NAME --data DIR --steps N [--optimizer sgd|adamw] [--lr X] [-o DIR]
                               train the graph's parameters on .npy data, printing the loss of every step
  kiln prewarm GRAPH... [--arch sm_80,sm_90] [--target h200,a100] [--jobs N] [--layout L] [--allow-uncached]
                               compile every kernel of the graphs into the cache (no GPU needed)
  kiln plan GRAPH [--format text|json|dot] [--layout auto|nchw|nhwc] [--max-group-ops N] [--target T]
                               [--explain] [--dot-no-params] [--dot-kernels-only]
                               plan a graph: its fused groups (kernels), buffers and memory traffic
  kiln plan GRAPH --dump-after=PASS
                               print the graph after one pass of the planner
  kiln profile GRAPH [--target T] [--batch N] [--no-emulate] [--sites N]
                               estimate each kernel without a GPU: sectors per request, bank conflicts,
                               occupancy, waves and a roofline time (counters from the emulator)
  kiln cache stats|ls|verify|clear
                               the kernel cache ($KILN_CACHE_DIR): counters, entries, integrity check, emptying
  kiln cache prune --max-size S
                               remove least recently used kernels until at most S (500M, 2G) remain
  kiln --help                  print this help
  kiln --version               print the version

every command:
  -v, --verbose       log what is planned, compiled and loaded from the cache, and why (-vv: debug)
  -q, --quiet         errors only: no warnings, no progress
  --log-level L       error, warn (default), info or debug; also $KILN_LOG_LEVEL (the options win)
  --json              (validate, run, bench, prewarm, train, cache stats|ls|verify) one JSON document on stdout
                      instead of text; its schema is in docs/cli.md

Tensor files are NumPy .npy files in the tensor's logical dims (NCHW order whatever the layout):
f32 as '<f4', f16 as '<f2', bf16 as '<f4' (rounded to nearest even when read).

exit status: 0 ok, 1 invalid input (graph, tensor files, failed run), 2 usage error
)";

int usage_error(std::string_view message, std::string_view command) {
  fmt::print(stderr, "error: {}\nrun 'kiln {}--help' for usage\n", message,
             command.empty() ? std::string() : std::string(command) + " ");
  return kExitUsage;
}

// One subcommand's parsed values, filled by CLI11.
struct Parsed {
  const CommandSpec* spec = nullptr;
  CLI::App* app = nullptr;
  std::vector<std::string> positional;
  struct Given {
    std::string name;  // the long name
    CLI::Option* option;
    bool is_switch;
  };
  std::vector<Given> options;
};

// The long name of "-o,--output": "--output"; of a short-only "-o": "-o".
std::string long_name(std::string_view names) {
  std::string best;
  size_t at = 0;
  while (at <= names.size()) {
    size_t comma = names.find(',', at);
    if (comma == std::string_view::npos) comma = names.size();
    std::string n(names.substr(at, comma - at));
    if (best.empty() || n.rfind("--", 0) == 0) best = n;
    at = comma + 1;
  }
  return best;
}

// `parsed` is a deque: CLI11 holds pointers into its elements, which must not move.
void add_command(CLI::App& app, const CommandSpec& spec, std::deque<Parsed>& parsed) {
  // "cache stats": a subcommand `stats` of the subcommand `cache`.
  CLI::App* parent = &app;
  std::string_view name = spec.name;
  if (auto space = name.find(' '); space != std::string_view::npos) {
    const std::string group(name.substr(0, space));
    parent = nullptr;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == group) parent = sub;
    if (!parent) {
      parent = app.add_subcommand(group, "the kernel cache ($KILN_CACHE_DIR; docs/cache.md)");
      parent->require_subcommand(1);
      parent->fallthrough();
    }
    name = name.substr(space + 1);
  }
  Parsed& p = parsed.emplace_back();
  p.spec = &spec;
  p.app = parent->add_subcommand(std::string(name), std::string(spec.summary));
  p.app->fallthrough();  // -v, -q, --log-level and --json after the command name reach the main app
  if (!spec.footer.empty()) p.app->footer(std::string(spec.footer));
  if (spec.positionals != 0) {
    CLI::Option* pos = p.app->add_option(std::string(spec.positional), p.positional, std::string(spec.positional_help));
    pos->required();
    // No upper bound for CLI11: a surplus argument is reported by run_main, naming it.
    pos->expected(0, CLI::detail::expected_max_vector_size);
    pos->option_text(spec.positionals == 1 ? "REQUIRED" : "... REQUIRED");
  }
  for (const OptionSpec& o : spec.options) {
    const std::string help(o.help);  // CLI11 2.1 takes a description by const reference only
    CLI::Option* opt =
        o.value.empty() ? p.app->add_flag(std::string(o.names), help) : p.app->add_option(std::string(o.names), help);
    if (!o.value.empty()) opt->type_name(std::string(o.value))->multi_option_policy(CLI::MultiOptionPolicy::Throw);
    p.options.push_back({long_name(o.names), opt, o.value.empty()});
  }
}

// The parsed values as Args; a switch given twice or with a value (--check=yes) is a usage error, as a
// repeated option is (CLI11 would count the one and read the other as true or false).
std::optional<std::string> args_of(const Parsed& p, Args& a) {
  a.positional = p.positional;
  for (const Parsed::Given& g : p.options) {
    if (g.option->count() == 0) continue;
    if (g.is_switch) {
      if (g.option->count() > 1) return fmt::format("option '{}' given twice", g.name);
      for (const std::string& r : g.option->results())
        if (!r.empty() && r != "true" && r != "1") return fmt::format("option '{}' takes no value", g.name);
    }
    a.options.emplace_back(g.name, g.is_switch ? std::string() : g.option->results().at(0));
  }
  return std::nullopt;
}

int run_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usage_error("missing command (validate, run, bench, plan, prewarm, import, grad or cache)", "");
  // The overview is written by hand (it shows the commands' common forms); each command's --help is CLI11's.
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.size() > 1) return usage_error(fmt::format("unexpected argument '{}' after '{}'", args[1], args[0]), "");
    fmt::print("{}", kHelp);
    return kExitOk;
  }

  // The first word that is not one of the main options names the command: an unknown one is reported as
  // such (CLI11 would say only that a subcommand is required).
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-v" || a == "-vv" || a == "--verbose" || a == "-q" || a == "--quiet" || a == "--version" ||
        a.rfind("--log-level=", 0) == 0)
      continue;
    if (a == "--log-level") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') return usage_error(fmt::format("unknown option '{}'", a), "");
    bool known = false;
    for (const CommandSpec& c : commands()) known = known || c.name.substr(0, c.name.find(' ')) == a;
    if (!known) {
      return usage_error(
          fmt::format("unknown command '{}' (expected validate, run, bench, plan, prewarm, import or cache)", a), "");
    }
    break;
  }

  CLI::App app{"kiln - a graph-based CUDA op-fusion engine", "kiln"};
  app.set_help_flag();  // the overview above
  app.set_version_flag("--version", fmt::format("kiln {}", KILN_VERSION));
  app.require_subcommand(1);
  app.get_formatter()->column_width(32);
  int verbose = 0;
  bool quiet = false;
  std::string level_text;
  app.add_flag("-v,--verbose", verbose, "log what is planned, compiled and loaded from the cache (-vv: debug)");
  app.add_flag("-q,--quiet", quiet, "errors only: no warnings, no progress");
  app.add_option("--log-level", level_text, "error, warn, info or debug (default: $KILN_LOG_LEVEL, else warn)");
  std::deque<Parsed> parsed;
  for (const CommandSpec& spec : commands()) add_command(app, spec, parsed);
  for (Parsed& p : parsed) p.app->set_help_flag("-h,--help", "print this command's options and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string command;
    for (const Parsed& p : parsed)
      if (p.app->parsed()) command = std::string(p.spec->name);
    if (command.empty())
      for (CLI::App* sub : app.get_subcommands()) command = sub->get_name();
    return usage_error(e.what(), command);
  }
  const Parsed* chosen = nullptr;
  for (const Parsed& p : parsed)
    if (p.app->parsed()) chosen = &p;
  if (!chosen) return usage_error("missing command", "");
  const std::string name(chosen->spec->name);
  if (chosen->spec->positionals > 0 && static_cast<int>(chosen->positional.size()) > chosen->spec->positionals) {
    return usage_error(fmt::format("unexpected argument '{}' ('kiln {}' takes {} {})",
                                   chosen->positional[static_cast<size_t>(chosen->spec->positionals)], name,
                                   chosen->spec->positionals, chosen->spec->positional),
                       name);
  }
  if (quiet && verbose > 0) return usage_error("-q and -v exclude each other", name);

  // The log level: the options, else $KILN_LOG_LEVEL (read by the library), else warn.
  if (!level_text.empty()) {
    auto level = parse_log_level(level_text);
    if (!level) {
      return usage_error(fmt::format("unknown --log-level '{}': expected error, warn, info or debug", level_text),
                         name);
    }
    set_log_level(*level);
  } else if (Status s = log_level_from_env(); !s.ok()) {
    return usage_error(s.message(), name);
  }
  if (verbose == 1) set_log_level(LogLevel::info);
  if (verbose >= 2) set_log_level(LogLevel::debug);
  if (quiet) set_log_level(LogLevel::error);
  Args command_args;
  if (auto e = args_of(*chosen, command_args)) return usage_error(*e, name);
  global_options().json = command_args.has("--json");
  global_options().quiet = quiet;
  global_options().no_progress = command_args.has("--no-progress") || quiet;

  CommandResult r = chosen->spec->run(command_args);
  if (r.usage) return usage_error(r.usage->message, name);
  return r.code;
}

}  // namespace

std::string_view help_text() { return kHelp; }

GlobalOptions& global_options() {
  static GlobalOptions o;
  return o;
}

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> all = [] {
    std::vector<CommandSpec> v{validate_command(), run_command(),    bench_command(), plan_command(), profile_command(),
                               prewarm_command(),  import_command(), grad_command(),  train_command()};
    for (CommandSpec& c : cache_commands()) v.push_back(c);
    return v;
  }();
  return all;
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  try {
    int code = kiln::cli::run_main(argc, argv);
    std::fflush(stdout);
    return code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: internal error: %s\n", e.what());
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: internal error: unknown exception\n");
  }
  return kiln::cli::kExitInvalid;
}
