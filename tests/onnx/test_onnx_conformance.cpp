// ONNX's own backend tests (Debian's libonnx-testdata): every model of the node, pytorch-converted,
// pytorch-operator and simple suites is imported; each one kiln supports runs on ref and emu against the
// suite's expected outputs, each one it does not must be refused at import naming the op. A table per shard
// says how many were tried, supported, passed and refused, and by which op types (docs/onnx.md).
//
// Tolerances against the suites' expected outputs (computed by NumPy in f32): ref (f64) rtol 1e-6, atol
// 1e-6; emu (f32 kernels) rtol 1e-4, atol 1e-5 (kiln's f32 tolerance, kiln/compare.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/compare.h"
#include "kiln/engine.h"
#include "kiln/onnx.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr int kNodeShards = 6;

struct Shard {
  std::string suite;
  int index = 0, count = 1;
};

void PrintTo(const Shard& s, std::ostream* os) { *os << s.suite << " " << s.index + 1 << "/" << s.count; }

std::string shard_name(const ::testing::TestParamInfo<Shard>& info) {
  std::string s = info.param.suite;
  std::replace(s.begin(), s.end(), '-', '_');
  return info.param.count == 1 ? s : fmt::format("{}_{}", s, info.param.index);
}

std::vector<Shard> shards() {
  std::vector<Shard> r;
  for (int i = 0; i < kNodeShards; ++i) r.push_back({"node", i, kNodeShards});
  for (const char* s : {"pytorch-converted", "pytorch-operator", "simple"}) r.push_back({s, 0, 1});
  return r;
}

// The op types an import refusal names: the summary line's list, else each "(Op, opset N)".
std::vector<std::string> refused_ops(const std::string& message) {
  std::vector<std::string> ops;
  static const std::regex summary("of op types?: (.*)$");
  std::smatch m;
  const std::string last =
      message.substr(message.find_last_of('\n') == std::string::npos ? 0 : message.find_last_of('\n') + 1);
  if (std::regex_search(last, m, summary)) {
    static const std::regex item("([A-Za-z0-9_ ]+?)( \\(\\d+\\))?(, |$)");
    const std::string list = m[1];
    for (auto it = std::sregex_iterator(list.begin(), list.end(), item); it != std::sregex_iterator(); ++it) {
      ops.push_back((*it)[1]);
    }
    return ops;
  }
  static const std::regex node("\\(([A-Za-z0-9_ ]+), opset \\d+\\)");
  if (std::regex_search(message, m, node)) ops.push_back(m[1]);
  return ops;
}

struct Tally {
  std::set<std::string> deviated;  // models held to kKnownDeviations' output instead of the test data's
  int tried = 0, supported = 0, ref_passed = 0, emu_passed = 0, refused = 0;
  std::map<std::string, int> refused_by_op;  // op type -> models it blocks
  std::map<std::string, int> refused_other;  // a refusal without an op type: its first line
  std::vector<std::string> failures;
};

// Models whose expected outputs in ONNX 1.12's test data contradict what kiln implements on purpose, with
// the output kiln is held to instead.
struct Deviation {
  std::string why;
  std::vector<HostTensor> (*expect)(const TensorMap& inputs);
};
// ONNX 1.12's float -> bfloat16 test data truncates (onnx/onnx#3876, #4237); kiln rounds to nearest even.
std::vector<HostTensor> bf16_rounded_input(const TensorMap& in) {
  HostTensor y = in.at("input");
  y.dtype = DType::bf16;
  for (double& v : y.data) v = round_to_dtype(v, DType::bf16);
  return {y};
}
const char* const kTruncatedBf16 =
    "the test data truncates float to bfloat16 (onnx/onnx#3876, #4237); kiln rounds to nearest even, as CUDA's "
    "__float2bfloat16_rn, PyTorch and ONNX Runtime do";
const std::map<std::string, Deviation> kKnownDeviations = {
    {"test_cast_FLOAT_to_BFLOAT16", {kTruncatedBf16, bf16_rounded_input}},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", {kTruncatedBf16, bf16_rounded_input}},
};

// One test_data_set_N: inputs in the order of the graph's inputs, expected outputs in output order.
struct DataSet {
  TensorMap inputs;
  std::vector<HostTensor> expected;
};

Result<std::vector<DataSet>> read_data_sets(const fs::path& dir, const Graph& g) {
  std::vector<Tensor> inputs;
  for (Tensor t : g.bound_tensors()) {
    if (g.tensor(t).kind == TensorKind::input) inputs.push_back(t);
  }
  std::vector<DataSet> sets;
  for (int k = 0;; ++k) {
    const fs::path d = dir / fmt::format("test_data_set_{}", k);
    if (!fs::is_directory(d)) break;
    DataSet ds = {random_inputs(g, 1), {}};  // parameters: the graph's values
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string name;
      KILN_ASSIGN_OR_RETURN(HostTensor h, load_onnx_tensor((d / fmt::format("input_{}.pb", i)).string(), &name));
      const TensorInfo& info = g.tensor(inputs[i]);
      if (h.shape != info.shape) {
        return invalid_argument(fmt::format("input '{}': expected shape {}, got {}", info.name, info.shape.to_string(),
                                            h.shape.to_string()));
      }
      ds.inputs[info.name] = std::move(h);
    }
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      KILN_ASSIGN_OR_RETURN(HostTensor h, load_onnx_tensor((d / fmt::format("output_{}.pb", o)).string()));
      ds.expected.push_back(std::move(h));
    }
    sets.push_back(std::move(ds));
  }
  return sets;
}

// "" when every output of every data set is within `tol` of the expected, else what differed.
std::string compare_all(const Graph& g, const DataSet& ds, const TensorMap& got, Tolerance tol) {
  for (size_t o = 0; o < g.outputs().size(); ++o) {
    const std::string& name = g.tensor(g.outputs()[o]).name;
    auto it = got.find(name);
    if (it == got.end()) return fmt::format("no output '{}'", name);
    HostTensor want = ds.expected[o];
    if (want.shape.numel() == it->second.shape.numel() && want.shape.rank() != it->second.shape.rank())
      want.shape = it->second.shape;
    Comparison c = compare_tensors(it->second, want, tol);
    if (!c.ok) return fmt::format("output '{}': {}", name, c.problem);
  }
  return "";
}

class OnnxConformance : public ::testing::TestWithParam<Shard> {};

TEST_P(OnnxConformance, SupportedModelsPassAndTheRestAreRefused) {
  if (!onnx_available()) GTEST_SKIP() << "kiln built without ONNX (libonnx-dev)";
  const Shard shard = GetParam();
  const fs::path root = fs::path(KILN_ONNX_TESTDATA) / shard.suite;
  ASSERT_TRUE(fs::is_directory(root)) << root << " is missing: install libonnx-testdata (tools/setup.sh)";
  std::vector<fs::path> models;
  for (const auto& e : fs::directory_iterator(root)) {
    if (fs::exists(e.path() / "model.onnx")) models.push_back(e.path());
  }
  std::sort(models.begin(), models.end());
  auto engine = Engine::open(DeviceKind::emu);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  Tally t;
  for (size_t m = 0; m < models.size(); ++m) {
    if (static_cast<int>(m % static_cast<size_t>(shard.count)) != shard.index) continue;
    const std::string name = models[m].filename().string();
    ++t.tried;
    auto g = load_onnx((models[m] / "model.onnx").string());
    if (!g.ok()) {
      if (std::getenv("KILN_ONNX_VERBOSE"))
        std::printf("%s: refused: %s\n", name.c_str(), g.status().message().c_str());
      ++t.refused;
      auto ops = refused_ops(g.status().message());
      for (const auto& op : ops) ++t.refused_by_op[op];
      if (ops.empty()) {  // grouped by kind: names in quotes are left out
        std::string first = g.status().message();
        first = first.substr(first.find(": ") + 2);
        first = first.substr(0, first.find('\n'));
        first = std::regex_replace(first, std::regex("(input|output|initializer) '[^']*'"), "$1 '…'");
        ++t.refused_other[first.substr(0, std::min<size_t>(first.find('\n'), 110))];
      }
      continue;
    }
    ++t.supported;
    auto sets = read_data_sets(models[m], *g);
    // A model whose declared input shapes differ from its test data's (the castlike *_expanded models) is
    // imported again with the data's shapes, as a user would with --shape.
    if (!sets.ok() && sets.status().message().find("expected shape") != std::string::npos) {
      OnnxOptions o;
      for (int i = 0;; ++i) {
        std::string in_name;
        auto h = load_onnx_tensor((models[m] / "test_data_set_0" / fmt::format("input_{}.pb", i)).string(), &in_name);
        if (!h.ok()) break;
        o.input_shapes.emplace(in_name, h->shape);
      }
      g = load_onnx((models[m] / "model.onnx").string(), o);
      if (!g.ok()) {
        t.failures.push_back(fmt::format("{}: import with the test data's shapes: {}", name, g.status().message()));
        continue;
      }
      sets = read_data_sets(models[m], *g);
    }
    if (!sets.ok()) {
      t.failures.push_back(fmt::format("{}: test data: {}", name, sets.status().message()));
      continue;
    }
    bool ref_ok = true, emu_ok = true;
    for (DataSet& ds : *sets) {
      if (auto known = kKnownDeviations.find(name); known != kKnownDeviations.end()) {
        // The expected output is replaced by what the spec asks (checked against the inputs here), and the
        // model counted in the table's `deviates` column.
        ds.expected = known->second.expect(ds.inputs);
        t.deviated.insert(name);
      }
      auto ref = run_reference(*g, ds.inputs);
      std::string why = ref.ok() ? compare_all(*g, ds, *ref, {1e-6, 1e-6}) : ref.status().message();
      if (!why.empty() && ref_ok) t.failures.push_back(fmt::format("{}: ref: {}", name, why));
      ref_ok = ref_ok && why.empty();
      auto exe = engine->compile(*g);
      if (!exe.ok()) {
        if (emu_ok) t.failures.push_back(fmt::format("{}: emu compile: {}", name, exe.status().message()));
        emu_ok = false;
        continue;
      }
      auto emu = run_on_host_tensors(*engine, *exe, ds.inputs);
      why = emu.ok() ? compare_all(*g, ds, *emu, {1e-4, 1e-5}) : emu.status().message();
      if (!why.empty() && emu_ok) t.failures.push_back(fmt::format("{}: emu: {}", name, why));
      emu_ok = emu_ok && why.empty();
    }
    t.ref_passed += ref_ok;
    t.emu_passed += emu_ok;
  }
  std::string table = fmt::format("onnx conformance, {} (shard {}/{}):\n", shard.suite, shard.index + 1, shard.count);
  table += fmt::format("  {:<20} {:>6} {:>10} {:>10} {:>10} {:>8} {:>9}\n", "suite", "tried", "supported", "ref pass",
                       "emu pass", "refused", "deviates");
  table += fmt::format("  {:<20} {:>6} {:>10} {:>10} {:>10} {:>8} {:>9}\n", shard.suite, t.tried, t.supported,
                       t.ref_passed, t.emu_passed, t.refused, t.deviated.size());
  std::vector<std::pair<std::string, int>> by_op(t.refused_by_op.begin(), t.refused_by_op.end());
  std::sort(by_op.begin(), by_op.end(),
            [](auto& a, auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  table += "  refused, by op type (models):";
  for (const auto& [op, n] : by_op) table += fmt::format(" {} {},", op, n);
  table += "\n";
  for (const auto& [why, n] : t.refused_other) table += fmt::format("  refused ({}): {}\n", n, why);
  for (const std::string& model : t.deviated)
    table += fmt::format("  deviates: {}: {}\n", model, kKnownDeviations.at(model).why);
  std::printf("%s", table.c_str());
  for (const auto& f : t.failures) ADD_FAILURE() << f;
  EXPECT_EQ(t.ref_passed, t.supported);
  EXPECT_EQ(t.emu_passed, t.supported);
}

INSTANTIATE_TEST_SUITE_P(Suites, OnnxConformance, ::testing::ValuesIn(shards()), shard_name);

}  // namespace
}  // namespace kiln
