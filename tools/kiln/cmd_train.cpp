// `kiln train GRAPH --loss NAME --data DIR --steps N [--batch B] [--optimizer sgd|adamw] [--lr X] ...`: trains the
// parameters of a graph with a scalar loss on a dataset of .npy files (kiln::TrainingSession), printing the loss of
// every step, and saves the trained parameters as .npy.
//
// DIR holds `<input>.npy` for every input of the graph: a dataset of D rows when its dims past the first are the
// input's (batches of B rows are taken in order, wrapping around; a tail of fewer than B rows is left out), or
// exactly the input's shape (the same value every step: a batch norm's running statistics).
#include <charconv>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/npy.h"
#include "kiln/optimizer.h"
#include "run_setup.h"

namespace kiln::cli {

namespace {

CommandResult usage(std::string message) { return {kExitUsage, UsageError{std::move(message)}}; }

std::optional<double> parse_number(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_count(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 1) return std::nullopt;
  return v;
}

// One input's values: a dataset (rows along dim 0) or one tensor for every step.
struct Column {
  HostTensor values;
  bool dataset = false;
};

// Rows [first, first + count) of a dataset.
HostTensor rows(const HostTensor& t, int64_t first, int64_t count) {
  std::vector<int64_t> dims = t.shape.to_vector();
  const int64_t row = t.numel() / dims[0];
  dims[0] = count;
  HostTensor out(Shape(dims), t.dtype);
  std::copy(t.data.begin() + first * row, t.data.begin() + (first + count) * row, out.data.begin());
  return out;
}

// Every input of `g` from DIR; the dataset's row count in `rows_out` (0: no dataset).
Result<std::map<std::string, Column>> load_data(const Graph& g, const std::string& dir, int64_t& rows_out) {
  std::map<std::string, Column> cols;
  std::string first;
  rows_out = 0;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& ti = g.tensor(t);
    if (ti.kind == TensorKind::parameter) continue;
    KILN_ASSIGN_OR_RETURN(const std::string path, npy_path(dir, ti.name));
    if (!std::filesystem::exists(path))
      return not_found(fmt::format("{}: no such file: the data of input '{}' {}", path, ti.name, ti.shape.to_string()));
    KILN_ASSIGN_OR_RETURN(const Shape fs, npy_shape(path, ti.name));
    Column c;
    if (fs != ti.shape) {
      std::vector<int64_t> want = ti.shape.to_vector();
      bool rows_of = fs.rank() == ti.shape.rank() && fs.rank() > 0;
      for (int d = 1; rows_of && d < fs.rank(); ++d) rows_of = fs[d] == ti.shape[d];
      if (!rows_of || fs[0] < ti.shape[0]) {
        const std::vector<int64_t> rest(want.begin() + 1, want.end());
        return invalid_argument(fmt::format(
            "{}: {} is neither input '{}' {} nor a dataset of at least {} rows of it ([D{}{}])", path, fs.to_string(),
            ti.name, ti.shape.to_string(), ti.shape[0], rest.empty() ? "" : ", ", fmt::join(rest, ", ")));
      }
      if (rows_out != 0 && fs[0] != rows_out)
        return invalid_argument(
            fmt::format("{}: {} rows, but the data of input '{}' has {}", path, fs[0], first, rows_out));
      rows_out = fs[0], first = ti.name, c.dataset = true;
    }
    KILN_ASSIGN_OR_RETURN(c.values, load_npy(path, ti.dtype, fs, ti.name));
    cols[ti.name] = std::move(c);
  }
  return cols;
}

// --optimizer and its options.
std::variant<OptimizerOptions, CommandResult> optimizer_of(const Args& args) {
  const std::string kind = args.get("--optimizer").value_or("sgd");
  std::optional<double> momentum, decay;
  if (auto m = args.get("--momentum"); m && !(momentum = parse_number(*m)))
    return usage(fmt::format("invalid --momentum '{}': expected a number", *m));
  if (auto w = args.get("--weight-decay"); w && !(decay = parse_number(*w)))
    return usage(fmt::format("invalid --weight-decay '{}': expected a number", *w));
  if (kind == "sgd") return SgdOptions{.momentum = momentum.value_or(0.9), .weight_decay = decay.value_or(0)};
  if (kind == "adamw") {
    if (momentum) return usage("--momentum is SGD's (AdamW's betas are 0.9 and 0.999)");
    return AdamWOptions{.weight_decay = decay.value_or(0.01)};
  }
  return usage(fmt::format("unknown --optimizer '{}': expected sgd or adamw", kind));
}

CommandResult train(const Args& args) {
  const auto loss = args.get("--loss");
  if (!loss) return usage("train: missing --loss NAME (the scalar the steps minimize)");
  const auto data = args.get("--data");
  if (!data) return usage("train: missing --data DIR (one .npy per input of the graph)");
  const auto steps_arg = args.get("--steps");
  const std::optional<int64_t> steps = steps_arg ? parse_count(*steps_arg) : std::nullopt;
  if (!steps) return usage(fmt::format("train: --steps expects a positive count, got '{}'", steps_arg.value_or("")));
  const std::optional<double> lr = parse_number(args.get("--lr").value_or("0.01"));
  if (!lr || *lr <= 0)
    return usage(fmt::format("invalid --lr '{}': expected a finite number above 0", args.get("--lr").value_or("")));
  std::optional<int64_t> batch;
  if (auto b = args.get("--batch"); b && !(batch = parse_count(*b)))
    return usage(fmt::format("invalid --batch '{}': expected a positive count", *b));
  const std::optional<DeviceKind> device = parse_device_kind(args.get("--device").value_or("emu"));
  if (!device) return usage(fmt::format("unknown device '{}': expected ref, emu, cuda or auto", *args.get("--device")));
  auto opt = optimizer_of(args);
  if (auto* r = std::get_if<CommandResult>(&opt)) return *r;
  uint64_t seed = 0;
  if (auto s = args.get("--seed")) {
    const std::optional<uint64_t> v = parse_seed(*s);
    if (!v) return usage(fmt::format("invalid --seed '{}': expected a non-negative integer below 2^64", *s));
    seed = *v;
  }

  const std::string& path = args.positional[0];
  const auto fail = [&](const Status& s, std::string_view source = {}) {
    print_error(s, source);
    return CommandResult{kExitInvalid, {}};
  };
  OnnxOptions onnx;
  auto g = load_graph_file(path, onnx);
  if (!g.ok()) return fail(g.status(), path);
  // The batch: the graph's (every data input's dim 0); --batch must agree.
  for (Tensor t : g->bound_tensors()) {
    const TensorInfo& ti = g->tensor(t);
    if (ti.kind == TensorKind::parameter || ti.shape.rank() == 0 || !batch || ti.shape[0] == *batch) continue;
    return fail(invalid_argument(fmt::format("input '{}' is {}: its batch is {}, not --batch {} (the graph fixes it)",
                                             ti.name, ti.shape.to_string(), ti.shape[0], *batch)),
                path);
  }
  int64_t dataset_rows = 0;
  auto cols = load_data(*g, *data, dataset_rows);
  if (!cols.ok()) return fail(cols.status());
  int64_t B = 0;
  for (const auto& [name, c] : *cols)
    if (c.dataset) B = g->shape(*g->find_tensor(name))[0];
  // Parameters: from --params DIR, else random (scaled by their fan-in, as `kiln run` draws them).
  TensorMap params;
  const TensorMap drawn = random_inputs(*g, seed);
  for (Tensor t : g->bound_tensors()) {
    const TensorInfo& ti = g->tensor(t);
    if (ti.kind != TensorKind::parameter) continue;
    if (auto dir = args.get("--params")) {
      auto p = npy_path(*dir, ti.name);
      if (!p.ok()) return fail(p.status());
      auto v = load_npy(*p, ti.dtype, ti.shape, ti.name);
      if (!v.ok()) return fail(v.status());
      params[ti.name] = std::move(*v);
    } else {
      params[ti.name] = drawn.at(ti.name);
    }
  }
  auto engine = Engine::open(*device);
  if (!engine.ok()) return fail(engine.status());
  auto session = TrainingSession::create(*engine, *g, *loss, std::get<OptimizerOptions>(opt), std::move(params));
  if (!session.ok()) return fail(session.status(), path);

  const bool json = global_options().json;
  const int64_t usable = B > 0 ? dataset_rows / B * B : 0;
  std::vector<double> losses;
  for (int64_t s = 0; s < *steps; ++s) {
    TensorMap in;
    for (const auto& [name, c] : *cols) in[name] = c.dataset ? rows(c.values, s * B % usable, B) : c.values;
    Result<double> l = session->step(in, *lr);
    if (!l.ok()) return fail(l.status(), path);
    if (!std::isfinite(*l))
      return fail(invalid_argument(fmt::format("the loss is {} at step {}: stopped, parameters not saved", *l, s + 1)));
    losses.push_back(*l);
    if (!json) fmt::print("step {}/{}  loss {:.6g}\n", s + 1, *steps, *l);
  }
  std::optional<std::string> out = args.get("--output");
  if (out) {
    if (Status st = save_tensors(*out, session->parameters()); !st.ok()) return fail(st);
  }
  if (json) {
    Json doc = json_document("train");
    doc["graph"] = path;
    doc["loss"] = *loss;
    doc["device"] = device_kind_name(engine->device());
    doc["steps"] = *steps;
    doc["batch"] = B;
    doc["losses"] = losses;
    if (out) doc["parameters"] = *out;
    print_json(doc);
  } else if (out) {
    fmt::print("saved {} parameters to {}\n", session->parameters().size(), *out);
  }
  return {};
}

}  // namespace

CommandSpec train_command() {
  return {.name = "train",
          .summary = "train a graph's parameters on .npy data (SGD or AdamW), printing the loss of every step",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options = {{"--loss", "NAME", "the scalar tensor to minimize (required)"},
                      {"--data", "DIR", "<input>.npy per input: D rows of it, or its exact shape (required)"},
                      {"--steps", "N", "optimizer steps (required)"},
                      {"--batch", "B", "the batch the graph's inputs have (checked)"},
                      {"--optimizer", "sgd|adamw", "default sgd (momentum 0.9)"},
                      {"--lr", "X", "learning rate (default 0.01)"},
                      {"--momentum", "M", "SGD's momentum (default 0.9)"},
                      {"--weight-decay", "W", "default 0 (SGD), 0.01 (AdamW)"},
                      {"--params", "DIR", "initial parameters, <name>.npy each (default: random, seeded)"},
                      {"--seed", "S", "seed of the random initial parameters (default 0)"},
                      {"--device", "D", "emu (default), ref, cuda or auto"},
                      {"-o,--output", "DIR", "save the trained parameters there as .npy"},
                      {"--json", "", "the losses as JSON: schema kiln.train/1 (docs/cli.md)"}},
          .footer = "docs/training.md",
          .run = train};
}

}  // namespace kiln::cli
