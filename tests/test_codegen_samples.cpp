// Every sample graph through the whole pipeline: planned, generated, compiled with NVRTC for sm_80 and
// sm_90 (no spills in the conv/matmul/norm kernels at their default tiles), run on emu against ref in f32,
// f16 and bf16 (tolerances: include/kiln/compare.h). Plus golden generated source for two samples, and
// the kernel provider (cache + NVRTC) and `kiln prewarm` end to end.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/nvrtc.h"
#include "codegen_check.h"
#include "golden.h"
#include "runtime/kernel_provider.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_plan_matches_ref;
using testing::with_dtype;

Graph load_sample(const std::string& name) {
  Result<Graph> g = load_graph(fmt::format("{}/samples/graphs/{}.json", KILN_SOURCE_DIR, name));
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : Graph{};
}

const std::vector<std::string> kSamples = {"conv_bias_bn_relu", "groupnorm_silu_conv", "lstm_cell", "mlp_gelu",
                                           "mlp_mse",           "resnet50_bottleneck", "resnet50",  "swiglu_ffn"};

class CodegenSample : public ::testing::TestWithParam<std::string> {};

// One test per dtype, so that ctest runs them in parallel and each stays well inside its time limit
// (ResNet-50 takes about a minute per dtype on the emulator here).
void expect_sample_matches_ref(const std::string& sample, DType dt) {
  const Graph g = load_sample(sample);
  // ResNet-50 stores 56 intermediates: each rounding of a 16-bit value adds error, so its tolerance in
  // f16/bf16 is wider (bf16 keeps 8 bits: 0.4 % per rounding, through 50 layers).
  std::optional<Tolerance> tol;
  if (sample == "resnet50" && dt != DType::f32) tol = Tolerance{dt == DType::f16 ? 5e-2 : 2.5e-1, 1e-1};
  expect_plan_matches_ref(dt == DType::f32 ? g : with_dtype(g, dt), dt, 2024, {}, tol);
}

TEST_P(CodegenSample, MatchesReferenceF32) { expect_sample_matches_ref(GetParam(), DType::f32); }
TEST_P(CodegenSample, MatchesReferenceF16) { expect_sample_matches_ref(GetParam(), DType::f16); }
TEST_P(CodegenSample, MatchesReferenceBF16) { expect_sample_matches_ref(GetParam(), DType::bf16); }

TEST_P(CodegenSample, CompilesForSm80AndSm90WithoutSpills) {
  Result<Plan> plan = plan_graph(load_sample(GetParam()));
  ASSERT_TRUE(plan.ok());
  Result<std::vector<codegen::Kernel>> kernels = plan_kernels(*plan);
  ASSERT_TRUE(kernels.ok()) << kernels.status().message();
  char tmpl[] = "/tmp/kiln-samples-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  CacheConfig cfg;
  cfg.dir = tmpl;
  Result<KernelCache> cache = KernelCache::open(cfg);
  ASSERT_TRUE(cache.ok());
  ObtainOptions o;
  o.archs = {"sm_80", "sm_90"};
  ObtainResult r = obtain_kernels(*cache, *kernels, o);
  EXPECT_EQ(r.failed, 0) << (r.errors.empty() ? "" : r.errors[0]);
  EXPECT_EQ(r.compiled, static_cast<int>(kernels->size() * 2));
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const codegen::Kernel& k = (*kernels)[i / 2];
    const CacheEntry& e = r.entries[i];
    EXPECT_EQ(e.cubin.size() > 4 ? std::string(e.cubin.begin() + 1, e.cubin.begin() + 4) : "", "ELF") << k.entry;
    using F = KernelFamilyId;
    if (k.family == F::conv2d || k.family == F::depthwise_conv2d || k.family == F::matmul || k.family == F::norm) {
      EXPECT_EQ(e.info.spill_store_bytes + e.info.spill_load_bytes, 0)
          << k.entry << " (" << e.arch << ") spills: " << e.info.registers << " registers";
    }
  }
  fs::remove_all(tmpl);
}

INSTANTIATE_TEST_SUITE_P(Samples, CodegenSample, ::testing::ValuesIn(kSamples),
                         [](const auto& info) { return info.param; });

// ResNet-50's repeated blocks share kernels: far fewer distinct kernels than convolutions.
TEST(CodegenSamples, IdenticalGroupsShareOneKernel) {
  Result<Plan> plan = plan_graph(load_sample("resnet50"));
  ASSERT_TRUE(plan.ok());
  Result<std::vector<codegen::Kernel>> kernels = plan_kernels(*plan);
  ASSERT_TRUE(kernels.ok()) << kernels.status().message();
  EXPECT_EQ(plan->kernel_count(), 55);
  EXPECT_LT(kernels->size(), 40u);
  std::printf("resnet50: %d kernel groups, %zu distinct kernels\n", plan->kernel_count(), kernels->size());
}

// Generated source of two samples, rewritten only when KILN_UPDATE_GOLDEN=1.
TEST(CodegenSamples, GeneratedSourceMatchesGoldenFiles) {
  for (const std::string sample : {"conv_bias_bn_relu", "mlp_gelu"}) {
    Result<Plan> plan = plan_graph(load_sample(sample));
    ASSERT_TRUE(plan.ok());
    Result<std::vector<codegen::Kernel>> kernels = plan_kernels(*plan);
    ASSERT_TRUE(kernels.ok()) << kernels.status().message();
    std::string got;
    for (const codegen::Kernel& k : *kernels) {
      got += fmt::format("// ==== {} ({}): grid [{}, {}, {}] block [{}, {}, {}] smem {}\n", k.entry,
                         kernel_family_name(k.family), k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z,
                         k.dynamic_smem);
      got += k.source + "\n";
    }
    expect_matches_golden(fs::path(KILN_SOURCE_DIR) / "tests" / "golden" / fmt::format("{}.kernels.cu", sample), got);
  }
}

class Prewarm : public TempDirTest {
 protected:
  // `kiln prewarm` of mlp_gelu for sm_80 with the cache in path(cache), extra environment and arguments;
  // its exit status, and stdout and stderr in *out.
  int prewarm(const std::string& cache, const std::string& env, const std::string& extra, std::string* out) {
    const std::string graph = std::string(KILN_SOURCE_DIR) + "/samples/graphs/mlp_gelu.json";
    const std::string o = path("out.txt");
    const std::string cmd = fmt::format("KILN_CACHE_DIR='{}' {} '{}' prewarm '{}' --arch sm_80 --jobs 2 {} > '{}' 2>&1",
                                        path(cache), env, KILN_CLI_PATH, graph, extra, o);
    const int rc = std::system(cmd.c_str());
    std::ifstream f(o);
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
};

// `kiln prewarm` twice: the second run compiles nothing and does not load NVRTC; in assert-hit mode a
// cold cache fails.
TEST_F(Prewarm, SecondRunCompilesNothingAndLoadsNoNvrtc) {
  auto run = [&](const std::string& extra_env, std::string* out) { return prewarm("cache", extra_env, "", out); };
  std::string out;
  EXPECT_EQ(run("KILN_CACHE_ASSERT_HIT=1", &out), 1) << out;
  EXPECT_NE(out.find("failed"), std::string::npos) << out;
  EXPECT_EQ(run("", &out), 0) << out;
  EXPECT_NE(out.find("0 already cached, 2 compiled, 0 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("nvrtc: loaded"), std::string::npos) << out;
  EXPECT_EQ(run("KILN_CACHE_ASSERT_HIT=1", &out), 0) << out;
  EXPECT_NE(out.find("2 already cached, 0 compiled, 0 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("nvrtc: not loaded"), std::string::npos) << out;
}

// A prewarm whose kernels the cache does not keep (disabled, read-only while empty, a size limit below one
// entry) says so and exits 1, unless --allow-uncached; read-only over a warm cache holds them all: exit 0.
TEST_F(Prewarm, KeepingNothingIsAnError) {
  auto run = [&](const std::string& cache, const std::string& env, const std::string& extra, std::string* out) {
    return prewarm(cache, env, extra, out);
  };
  std::string out;
  for (const std::string env : {"KILN_CACHE_DISABLE=1", "KILN_CACHE_READONLY=1", "KILN_CACHE_MAX_SIZE=100"}) {
    SCOPED_TRACE(env);
    EXPECT_EQ(run("cold", env, "", &out), 1) << out;
    EXPECT_NE(out.find("2 of 2 kernels are not in the cache afterwards"), std::string::npos) << out;
    EXPECT_NE(out.find("--allow-uncached"), std::string::npos) << out;
    EXPECT_EQ(run("cold", env, "--allow-uncached", &out), 0) << out;
  }
  EXPECT_NE(out.find("0 failed"), std::string::npos) << out;
  EXPECT_EQ(run("warm", "", "", &out), 0) << out;
  EXPECT_EQ(run("warm", "KILN_CACHE_READONLY=1", "", &out), 0) << out;
  EXPECT_NE(out.find("2 already cached"), std::string::npos) << out;
}

TEST_F(Prewarm, BadArgumentsAreUsageErrors) {
  const std::string graph = std::string(KILN_SOURCE_DIR) + "/samples/graphs/mlp_gelu.json";
  for (const std::string args : {"--arch sm_7", "--arch compute_80", "--jobs 0", "--jobs x", "--layout diagonal", ""}) {
    const std::string cmd = fmt::format("KILN_CACHE_DIR='{}' '{}' prewarm {} {} > /dev/null 2>&1", path("c"),
                                        KILN_CLI_PATH, args.empty() ? "" : ("'" + graph + "'"), args);
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 2) << args;
  }
  const std::string missing =
      fmt::format("KILN_CACHE_DIR='{}' '{}' prewarm /nonexistent.json > /dev/null 2>&1", path("c"), KILN_CLI_PATH);
  const int rc = std::system(missing.c_str());
  EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 1);
}

// The kernel provider: the key ignores nothing that changes the output.
TEST(KernelProvider, KeyChangesWithArchAndSource) {
  Result<Plan> plan = plan_graph(load_sample("mlp_gelu"));
  ASSERT_TRUE(plan.ok());
  Result<std::vector<codegen::Kernel>> ks = plan_kernels(*plan);
  ASSERT_TRUE(ks.ok()) << ks.status().message();
  codegen::Kernel k = ks->front();
  const CacheKey a = kernel_cache_key(k, "sm_80");
  EXPECT_EQ(a, kernel_cache_key(k, "sm_80"));
  EXPECT_NE(a, kernel_cache_key(k, "sm_90"));
  EXPECT_NE(kernel_cache_key(k, "sm_90"), kernel_cache_key(k, "sm_90a"));
  k.source += " ";
  EXPECT_NE(a, kernel_cache_key(k, "sm_80"));
  EXPECT_FALSE(codegen::nvrtc_loaded()) << "computing keys must not load NVRTC";
}

}  // namespace
}  // namespace kiln
