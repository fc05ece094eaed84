// `kiln`: the command-line program. Dispatches to the commands; no exception leaves main.
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"

namespace kiln::cli {
namespace {

constexpr std::string_view kHelp = R"(kiln - a graph-based CUDA op-fusion engine

usage:
GRAPH is a kiln graph (.json) or an ONNX model (.onnx; --shape NAME=1x3x224x224 fixes a dim the model leaves open).
  kiln validate GRAPH          check a graph and print its summary
  kiln run GRAPH --device ref|emu|cuda|auto [--check] [--layout L] [--seed S] [--inputs DIR] [--weights DIR]
                               [--save-inputs DIR] [--save-outputs DIR] [--max-memory S]
                               run a graph and print statistics of its outputs
  kiln import MODEL.onnx -o GRAPH.json [--weights DIR] [--shape NAME=DIMS]
                               convert an ONNX model to a kiln graph and its weights (one .npy per parameter,
                               in DIR, default GRAPH.weights/)
  kiln prewarm GRAPH... [--arch sm_80,sm_90] [--target h200,a100] [--jobs N] [--layout L] [--allow-uncached]
                               compile every kernel of the graphs into the cache (no GPU needed)
  kiln plan GRAPH [--format text|json|dot] [--layout auto|nchw|nhwc] [--max-group-ops N] [--target T]
                               [--explain] [--dot-no-params] [--dot-kernels-only]
                               plan a graph: its fused groups (kernels), buffers and memory traffic
  kiln plan GRAPH --dump-after=PASS
                               print the graph after one pass of the planner
  kiln cache stats|ls|verify|clear
                               the kernel cache ($KILN_CACHE_DIR): counters, entries, integrity check, emptying
  kiln cache prune --max-size S
                               remove least recently used kernels until at most S (500M, 2G) remain
  kiln --help                  print this help
  kiln --version               print the version

options of run:
  --device D          where to run: ref, the CPU reference (f64); emu, kiln's CUDA kernels emulated on the CPU
                      (needs the host C++ compiler, $KILN_HOST_CXX); cuda, the GPU (kernels from the cache or
                      NVRTC, as prewarm); auto, cuda when a CUDA driver and GPU are present, else emu
  --check             with a device other than ref: also run ref on the same inputs, print each output's errors, and
                      exit 1 when one exceeds its dtype's tolerance (f32 1e-4, f16 1e-2, bf16 6e-2 relative)
  --layout L          the planner's layout policy (as for plan)
  --seed S            seed of the random inputs and parameters (default 0)
  --inputs DIR        read every input and parameter from DIR/<tensor name>.npy instead of random values (a
                      parameter with values of its own, an ONNX model's, keeps them when DIR has no file for it)
  --weights DIR       read every parameter from DIR/<tensor name>.npy (what kiln import wrote)
  --save-inputs DIR   write the inputs and parameters used to DIR/<tensor name>.npy
  --save-outputs DIR  write the outputs to DIR/<tensor name>.npy
  --max-memory S      refuse a graph needing more host memory than S (500M, 8G; default 3/4 of the machine's)

options of prewarm:
  --arch A,B          the GPU archs to compile for, each for its default device (sm_80: a100, sm_86: a10,
                      sm_89: l4, sm_90 and sm_90a: h200; default sm_80,sm_90; sm_90a is distinct from sm_90)
  --target T,U        devices to compile for (h200, h100, a100, a10, l4): kernels are planned for a device's
                      SMs and shared memory, so prewarm for the GPU that will run them
  --jobs N            parallel compiles (default: the number of CPU threads)
  --layout L          the planner's layout policy (as for plan)
  --allow-uncached    exit 0 although the cache did not keep the kernels (disabled, read-only, too small)
  The cache directory and its switches come from KILN_CACHE_DIR, KILN_CACHE_READONLY, KILN_CACHE_DISABLE,
  KILN_CACHE_MAX_SIZE, KILN_CACHE_ASSERT_HIT and KILN_SAVE_SOURCE (docs/cache.md).

options of plan:
  --format F          text (default), json or dot (Graphviz: one cluster per group, coloured by kind)
  --layout L          auto (default: NHWC between convolutions, norms and pools), nchw or nhwc
  --max-group-ops N   at most N ops per fused group (default 32; 1 disables fusion)
  --dump-after PASS   print the graph after PASS (verify, canonicalize, ...) instead of the plan
  --target T          plan for device T (h200 by default; h100, a100, a10, l4, or an arch such as sm_80)
  --explain           instead of the plan, one line per tensor between two kernels: the fusion rule that kept
                      its producer and consumer apart (text only; the JSON form has them as 'separations')
  --dot-no-params     with --format dot: leave out parameters and weight transforms
  --dot-kernels-only  with --format dot: one box per kernel (id, kind, family, op count), tensors between
                      kernels as edges (elided concats looked through), graph inputs and outputs

Tensor files are NumPy .npy files in the tensor's logical dims (NCHW order whatever the layout):
f32 as '<f4', f16 as '<f2', bf16 as '<f4' (rounded to nearest even when read).

exit status: 0 ok, 1 invalid input (graph, tensor files, failed run), 2 usage error
)";

int usage_error(const UsageError& e) {
  fmt::print(stderr, "error: {}\nrun 'kiln --help' for usage\n", e.message);
  return kExitUsage;
}

int run_main(const std::vector<std::string>& args) {
  if (args.empty()) return usage_error({"missing command"});
  const std::string& cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    if (!rest.empty()) return usage_error({fmt::format("unexpected argument '{}' after '{}'", rest[0], cmd)});
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  if (cmd == "--version") {
    if (!rest.empty()) return usage_error({fmt::format("unexpected argument '{}' after '{}'", rest[0], cmd)});
    fmt::print("kiln {}\n", KILN_VERSION);
    return kExitOk;
  }
  CommandResult r;
  if (cmd == "validate") {
    r = cmd_validate(rest);
  } else if (cmd == "run") {
    r = cmd_run(rest);
  } else if (cmd == "plan") {
    r = cmd_plan(rest);
  } else if (cmd == "cache") {
    r = cmd_cache(rest);
  } else if (cmd == "prewarm") {
    r = cmd_prewarm(rest);
  } else if (cmd == "import") {
    r = cmd_import(rest);
  } else if (!cmd.empty() && cmd[0] == '-') {
    return usage_error({fmt::format("unknown option '{}'", cmd)});
  } else {
    return usage_error(
        {fmt::format("unknown command '{}' (expected validate, run, plan, prewarm, import or cache)", cmd)});
  }
  if (r.usage) return usage_error(*r.usage);
  return r.code;
}

}  // namespace

std::string_view help_text() { return kHelp; }

}  // namespace kiln::cli

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    int code = kiln::cli::run_main(args);
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
