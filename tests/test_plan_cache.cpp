// The plan cache (src/runtime/plan_cache.h): an entry holds the whole plan and its kernels, its key follows
// everything that changes a plan, a warm compile plans nothing and runs as a cold one does (against ref), and
// a corrupt, foreign or malformed entry is never used.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache_test_util.h"
#include "kiln/autodiff.h"
#include "kiln/compare.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/prewarm.h"
#include "kiln/reference.h"
#include "runtime/plan_cache.h"
#include "support/source_id.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using runtime::decode_plan;
using runtime::encode_plan;
using runtime::plan_cache_manifest;

Graph load_sample(const std::string& name) {
  auto g = load_graph(std::string(KILN_SOURCE_DIR) + "/samples/graphs/" + name + ".json");
  KILN_CHECK(g.ok(), g.status().message());
  return *g;
}

PlanOptions options_for(const char* target) {
  PlanOptions o;
  o.target = *target_named(target);
  return o;
}

struct Planned {
  Plan plan;
  PlanKernels kernels;
};
Planned plan_of(const Graph& g, const PlanOptions& o) {
  auto p = plan_graph(g, o);
  KILN_CHECK(p.ok(), p.status().message());
  auto k = plan_kernel_launches(*p);
  KILN_CHECK(k.ok(), k.status().message());
  return {std::move(*p), std::move(*k)};
}

void expect_same_kernels(const PlanKernels& a, const PlanKernels& b) {
  ASSERT_EQ(a.launches.size(), b.launches.size());
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.distinct_of, b.distinct_of);
  EXPECT_EQ(a.distinct, b.distinct);
  EXPECT_EQ(a.distinct_smem, b.distinct_smem);
  for (size_t i = 0; i < a.launches.size(); ++i) {
    const codegen::Kernel &x = a.launches[i], &y = b.launches[i];
    EXPECT_EQ(x.entry, y.entry);
    EXPECT_EQ(x.source, y.source) << x.entry;
    EXPECT_EQ(x.family, y.family);
    EXPECT_EQ(x.target, y.target);
    EXPECT_EQ(x.dynamic_smem, y.dynamic_smem);
    EXPECT_EQ(std::tie(x.grid.x, x.grid.y, x.grid.z, x.block.x, x.block.y, x.block.z),
              std::tie(y.grid.x, y.grid.y, y.grid.z, y.block.x, y.block.y, y.block.z));
    ASSERT_EQ(x.params.size(), y.params.size());
    for (size_t k = 0; k < x.params.size(); ++k) {
      EXPECT_EQ(x.params[k].tensor, y.params[k].tensor);
      EXPECT_EQ(x.params[k].written, y.params[k].written);
      EXPECT_EQ(x.params[k].scratch, y.params[k].scratch);
      EXPECT_EQ(x.params[k].value, y.params[k].value);
      EXPECT_EQ(x.params[k].size, y.params[k].size);
    }
  }
}

// Every sample (ResNet-50's elided concats none, weight transforms, split-K scratch on a100, the LSTM cell's
// slice views) on two targets: the decoded plan prints, explains and re-encodes exactly as the planned one.
TEST(PlanCache, EntryHoldsTheWholePlan) {
  for (const char* sample : {"conv_bias_bn_relu", "groupnorm_silu_conv", "lstm_cell", "mlp_gelu", "resnet50",
                             "resnet50_bottleneck", "swiglu_ffn"}) {
    for (const char* target : {"h200", "a100"}) {
      SCOPED_TRACE(std::string(sample) + " on " + target);
      const Planned p = plan_of(load_sample(sample), options_for(target));
      const std::string bytes = encode_plan(p.plan, p.kernels);
      auto back = decode_plan(bytes);
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_TRUE(back->plan.graph == p.plan.graph);
      EXPECT_TRUE(back->plan.graph.verify().ok());
      EXPECT_EQ(plan_to_json(back->plan), plan_to_json(p.plan));
      EXPECT_EQ(plan_explanation(back->plan), plan_explanation(p.plan));
      EXPECT_EQ(back->plan.target, p.plan.target);
      EXPECT_EQ(back->plan.tiles, p.plan.tiles);
      ASSERT_EQ(back->plan.groups.size(), p.plan.groups.size());
      for (size_t i = 0; i < p.plan.groups.size(); ++i) {
        const Group &a = back->plan.groups[i], &b = p.plan.groups[i];
        EXPECT_EQ(a.roles.anchor, b.roles.anchor);
        EXPECT_EQ(a.roles.prologue, b.roles.prologue);
        EXPECT_EQ(a.scratch.partials_bytes, b.scratch.partials_bytes);
        EXPECT_EQ(a.scratch.counters_offset, b.scratch.counters_offset);
      }
      expect_same_kernels(back->kernels, p.kernels);
      EXPECT_EQ(encode_plan(back->plan, back->kernels), bytes);
    }
  }
}

// A training graph (binary ops given a number: its seed 0 · L + 1, an optimizer's scaling) decodes as planned:
// a port given as a number holds no tensor, which the decoder once took for a malformed entry (and planned anew).
TEST(PlanCache, NumberOperandsRoundTrip) {
  Result<Training> tr = backward(load_sample("mlp_mse"), "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  const Planned p = plan_of(tr->graph, options_for("h200"));
  auto back = decode_plan(encode_plan(p.plan, p.kernels));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->plan.graph == p.plan.graph);
  EXPECT_EQ(plan_to_json(back->plan), plan_to_json(p.plan));
}

// Truncated anywhere, the payload is refused; with any one byte changed, it is refused or read faithfully
// (what it reads encodes to those very bytes), never a crash. (The entry's checksum stops such bytes first:
// these are what a faulty writer would leave.)
TEST(PlanCache, MalformedPayloadsAreRefused) {
  const Planned p = plan_of(load_sample("resnet50_bottleneck"), options_for("h200"));
  const std::string bytes = encode_plan(p.plan, p.kernels);
  for (size_t n = 0; n < bytes.size(); n += 1 + n / 16) {
    EXPECT_FALSE(decode_plan(std::string_view(bytes).substr(0, n)).ok()) << "truncated to " << n;
  }
  EXPECT_FALSE(decode_plan(bytes + "x").ok());
  std::mt19937 rng(7);
  int refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bad = bytes;
    const size_t at = std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng);
    bad[at] = static_cast<char>(bad[at] ^ (1 << (trial % 8)));
    auto got = decode_plan(bad);
    if (!got.ok()) {
      ++refused;
      EXPECT_NE(got.status().message().find("malformed"), std::string::npos) << got.status().message();
    } else {
      EXPECT_EQ(encode_plan(got->plan, got->kernels), bad) << "byte " << at;
    }
  }
  EXPECT_GT(refused, 0);
}

// The key changes with the graph's structure, the options that change a plan and the target's facts; not with
// a parameter's values, and not between two copies. Options holding code give no key.
TEST(PlanCache, KeyFollowsWhatChangesAPlan) {
  const Graph g = load_sample("conv_bias_bn_relu");
  const PlanOptions o = options_for("h200");
  const auto key = [](const Graph& graph, const PlanOptions& opt) {
    auto m = plan_cache_manifest(graph, opt);
    KILN_CHECK(m.has_value(), "no manifest");
    return m->key();
  };
  const CacheKey base = key(g, o);
  EXPECT_EQ(key(Graph(g), o), base);
  EXPECT_NE(plan_cache_manifest(g, o)->text().find(std::string("kiln-source=") + support::source_id()),
            std::string::npos);

  Graph renamed = g;
  renamed.set_name("other");
  EXPECT_NE(key(renamed, o), base);
  Graph valued = g;
  const TensorMap values = random_inputs(g, 3);
  int given = 0;
  for (Tensor t : valued.bound_tensors()) {
    const TensorInfo& ti = valued.tensor(t);
    if (ti.kind != TensorKind::parameter) continue;
    ASSERT_TRUE(valued.set_value(t, std::make_shared<HostTensor>(values.at(ti.name))).ok());
    ++given;
  }
  ASSERT_GT(given, 0);
  EXPECT_EQ(key(valued, o), base);
  PlanOptions nchw = o;
  nchw.layout = LayoutPolicy::nchw;
  EXPECT_NE(key(g, nchw), base);
  PlanOptions small = o;
  small.max_group_ops = 2;
  EXPECT_NE(key(g, small), base);
  PlanOptions generic = o;
  generic.tiles = TilePolicy::generic_only;
  EXPECT_NE(key(g, generic), base);
  EXPECT_NE(key(g, options_for("a100")), base);
  // An H100 (SXM) and an H200 have the same facts (Target::key): one plan, as one kernel.
  ASSERT_EQ(target_named("h100")->key(), target_named("h200")->key());
  EXPECT_EQ(key(g, options_for("h100")), base);
  PlanOptions quiet = o;
  quiet.verify_after_each_pass = !o.verify_after_each_pass;  // checks more, plans the same
  EXPECT_EQ(key(g, quiet), base);

  PlanOptions policy = o;
  policy.policy = [](const Graph&, int32_t, int32_t) { return false; };
  EXPECT_FALSE(plan_cache_manifest(g, policy).has_value());
  PlanOptions hook = o;
  hook.after_pass = [](std::string_view, const Graph&) {};
  EXPECT_FALSE(plan_cache_manifest(g, hook).has_value());
}

class PlanCacheEngine : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    CacheConfig c;
    c.dir = path("cache");
    EngineOptions eo;
    eo.cache = c;
    auto e = Engine::open(DeviceKind::emu, eo);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_.emplace(std::move(*e));
    auto cache = KernelCache::open(c);
    ASSERT_TRUE(cache.ok());
    cache_.emplace(std::move(*cache));
  }

  // Compiles `g`, runs it on random inputs and compares with ref (tolerance_for: rtol 1e-4, atol 1e-5 in f32).
  CompileReport compile_and_check(const Graph& g) {
    auto exe = engine_->compile(g);
    KILN_CHECK(exe.ok(), exe.status().message());
    const TensorMap inputs = random_inputs(g, 17);
    auto got = run_on_host_tensors(*engine_, *exe, inputs);
    KILN_CHECK(got.ok(), got.status().message());
    auto want = run_reference(g, inputs);
    KILN_CHECK(want.ok(), want.status().message());
    for (const auto& [name, t] : *want) {
      const Comparison c = compare_tensors(got->at(name), t, tolerance_for(t.dtype));
      EXPECT_TRUE(c.ok) << name << ": " << c.problem;
    }
    return exe->report();
  }

  std::vector<CacheEntry> plan_entries() {
    auto all = cache_->list();
    KILN_CHECK(all.ok(), all.status().message());
    std::vector<CacheEntry> out;
    for (CacheEntry& e : *all)
      if (e.kind == CacheKind::plan) out.push_back(std::move(e));
    return out;
  }

  std::optional<Engine> engine_;
  std::optional<KernelCache> cache_;
};

TEST_F(PlanCacheEngine, WarmCompilePlansNothingAndRunsTheSame) {
  const Graph g = load_sample("resnet50_bottleneck");
  const CompileReport cold = compile_and_check(g);
  EXPECT_FALSE(cold.plan_cached);
  EXPECT_GT(cold.codegen_ms, 0);
  const std::vector<CacheEntry> entries = plan_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].kernel_name, g.name());
  EXPECT_NE(entries[0].manifest.find("kind=plan"), std::string::npos);

  const CompileReport warm = compile_and_check(g);
  EXPECT_TRUE(warm.plan_cached);
  EXPECT_EQ(warm.codegen_ms, 0);
  EXPECT_EQ(warm.entries, cold.entries);
  EXPECT_EQ(warm.workspace_bytes, cold.workspace_bytes);
  EXPECT_EQ(plan_entries().size(), 1u);

  CompileOptions off;
  off.plan_cache = false;
  auto exe = engine_->compile(g, off);
  ASSERT_TRUE(exe.ok());
  EXPECT_FALSE(exe->report().plan_cached);
}

// A corrupted entry file is a miss (its checksum), removed and counted; the graph is planned anew, runs
// right, and its entry is written again.
TEST_F(PlanCacheEngine, CorruptEntryIsPlannedAnew) {
  const Graph g = load_sample("conv_bias_bn_relu");
  compile_and_check(g);
  const std::vector<CacheEntry> entries = plan_entries();
  ASSERT_EQ(entries.size(), 1u);
  {
    std::fstream f(entries[0].path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(entries[0].file_bytes / 2));
    f.put('\x5a');
  }
  const CompileReport again = compile_and_check(g);
  EXPECT_FALSE(again.plan_cached);
  EXPECT_GE(cache_->stats().of(CacheKind::plan).bad_entries, 1);
  EXPECT_TRUE(compile_and_check(g).plan_cached);
}

// Another graph's entry copied under this graph's key (a foreign entry): the key it holds differs, so it
// is a miss; never the other graph's plan.
TEST_F(PlanCacheEngine, ForeignEntryIsNeverUsed) {
  const Graph a = load_sample("conv_bias_bn_relu"), b = load_sample("mlp_gelu");
  compile_and_check(a);
  const std::string a_path = plan_entries().at(0).path;
  PlanOptions po;
  po.target = engine_->target();
  const CacheKey b_key = plan_cache_manifest(b, po)->key();
  const std::string b_path = cache_->entry_path(b_key, CacheKind::plan);
  fs::create_directories(fs::path(b_path).parent_path());
  fs::copy_file(a_path, b_path);
  const CompileReport rb = compile_and_check(b);
  EXPECT_FALSE(rb.plan_cached);
  EXPECT_TRUE(compile_and_check(b).plan_cached);
}

// An intact entry (its checksum right) whose payload is malformed, as a faulty kiln could write: refused,
// removed, planned anew with a warning naming the entry, and replaced by a good one.
TEST_F(PlanCacheEngine, MalformedEntryIsRemovedAndPlannedAnew) {
  const Graph g = load_sample("conv_bias_bn_relu");
  PlanOptions po;
  po.target = engine_->target();
  const KeyManifest m = *plan_cache_manifest(g, po);
  const Planned p = plan_of(g, po);
  std::string payload = encode_plan(p.plan, p.kernels);
  payload.resize(payload.size() - 3);  // a writer that stopped short
  CacheEntry e;
  e.kernel_name = g.name();
  e.arch = po.target.arch;
  e.cubin.assign(payload.begin(), payload.end());
  e.manifest = m.text();
  ASSERT_TRUE(cache_->store(m.key(), e, CacheKind::plan).ok());

  const CompileReport r = compile_and_check(g);
  EXPECT_FALSE(r.plan_cached);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("plan entry " + m.key().hex()), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("malformed"), std::string::npos) << r.warnings[0];
  EXPECT_TRUE(compile_and_check(g).plan_cached);
}

// kiln::prewarm stores each graph's plan: a second prewarm (and a later compile) plans nothing.
TEST_F(PlanCacheEngine, PrewarmStoresPlans) {
  SKIP_WITHOUT_NVRTC();
  cache_test::CleanCacheEnv clean;
  testing::ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str());
  std::vector<Graph> graphs{load_sample("mlp_gelu")};
  PrewarmOptions o;
  o.targets = {*target_named("sm_80")};
  auto first = prewarm(graphs, o);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->graphs.size(), 1u);
  EXPECT_FALSE(first->graphs[0].plan_cached);
  auto second = prewarm(graphs, o);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_TRUE(second->graphs[0].plan_cached);
  EXPECT_EQ(second->compiled, 0);
  EXPECT_EQ(second->graphs[0].distinct_kernels, first->graphs[0].distinct_kernels);
}

}  // namespace
}  // namespace kiln
