// The emu shared-object cache when storing fails (issue 18): a cache directory without write permission,
// a full disk (a file-size limit, and a small tmpfs where this process may mount one), a size limit smaller
// than one entry. Expected: the run succeeds with the kernels it compiled, a warning says why they were not
// cached (with the errno's text), and no temporary file is left behind.
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "emu_fault_fixture.h"
#include "kiln/compare.h"
#include "kiln/emu.h"
#include "kiln/emu_plan.h"
#include "kiln/json.h"
#include "kiln/plan.h"
#include "kiln/reference.h"

namespace kiln::cache_test {
namespace {

using ::testing::HasSubstr;

// The C++ API says what `kiln run` prints: run_plan_emu's report carries the warning that the kernels it
// compiled were not kept (here: a cache directory others may write, which kiln never uses).
TEST_F(EmuFaultTest, RunPlanEmuReportsKernelsItCouldNotKeep) {
  CleanCacheEnv clean;
  ASSERT_EQ(::mkdir(path("cache").c_str(), 0700), 0);
  ASSERT_EQ(::chmod(path("cache").c_str(), 0777), 0);
  ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str()), tmp("TMPDIR", path("tmp").c_str());
  Result<Graph> g = graph_from_json(kTinyReluGraph);
  ASSERT_TRUE(g.ok()) << g.status().message();
  Result<Plan> plan = plan_graph(g.value());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const TensorMap inputs = random_inputs(g.value(), 11);
  EmuPlanReport report;
  Result<TensorMap> got = run_plan_emu(plan.value(), inputs, {}, &report);
  ASSERT_TRUE(got.ok()) << got.status().message();
  Result<TensorMap> want = run_reference(g.value(), inputs);
  ASSERT_TRUE(want.ok()) << want.status().message();
  const Comparison c = compare_tensors(got.value().at("y"), want.value().at("y"), tolerance_for(DType::f32));
  EXPECT_TRUE(c.ok) << c.problem;
  EXPECT_TRUE(report.compiled);
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_THAT(report.warnings[0], HasSubstr("was compiled but not cached"));
  EXPECT_THAT(report.warnings[0], HasSubstr(path("cache")));
  EXPECT_TRUE(emu_files().empty());
}

TEST_F(EmuFaultTest, UnwritableCacheDirectoryStillRuns) {
  // The child runs as an unprivileged user when this process is root, so that permissions apply.
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("cache").c_str(), 0700), 0);
  give_to_child(path("tmp"), path("tmp"));
  give_to_child(path("cache"), path("cache"));
  ChildOptions as_user;
  as_user.unprivileged = true;

  // No kernels/ yet, and none can be made: the run compiles, warns, and creates nothing.
  ASSERT_EQ(::chmod(path("cache").c_str(), 0500), 0);
  subprocess::Proc p = good_run("cache", as_user);
  EXPECT_TRUE(compiled_now(p));
  EXPECT_THAT(p.err, HasSubstr("warning: emu: tiny_relu.kernels.cu was compiled but not cached"));
  EXPECT_THAT(p.err, HasSubstr("Permission denied"));
  EXPECT_TRUE(fs::is_empty(path("cache")));

  // A cache filled earlier, then made read-only by its mode: hits as ever, nothing written, no warning.
  ASSERT_EQ(::chmod(path("cache").c_str(), 0700), 0);
  good_run("cache", as_user);
  std::vector<std::string> entries = emu_files();
  ASSERT_EQ(entries.size(), 1u);
  auto chmod_dirs = [&](mode_t mode) {
    for (const auto& e : fs::recursive_directory_iterator(path("cache")))
      if (e.is_directory()) ::chmod(e.path().c_str(), mode);
    ::chmod(path("cache").c_str(), mode);
  };
  chmod_dirs(0500);
  const auto before = snapshot(path("cache"));
  p = good_run("cache", as_user);
  EXPECT_FALSE(compiled_now(p));
  EXPECT_THAT(p.err, ::testing::Not(HasSubstr("warning")));
  EXPECT_EQ(snapshot(path("cache")), before);

  // Its entry gone (removed by someone who may): compiled, with the warning, and stored nowhere.
  chmod_dirs(0700);
  fs::remove(entries[0]);
  chmod_dirs(0500);
  p = good_run("cache", as_user);
  EXPECT_TRUE(compiled_now(p));
  EXPECT_THAT(p.err, HasSubstr("cannot write '" + entries[0] + "'"));
  EXPECT_THAT(p.err, HasSubstr("Permission denied"));
  EXPECT_TRUE(emu_files().empty());
  chmod_dirs(0700);
}

// A source whose shared object is large (a 512 KiB table) while every file kiln writes before the entry
// (templates, the unit) is small: a file-size limit between the two fails exactly the store.
constexpr const char* kBigSource = R"(#include "kiln/device.cuh"
static const unsigned char kiln_table[1 << 19] = {1};
extern "C" __global__ void big(float* y) { y[0] = kiln_table[static_cast<int>(y[1])] + 1.0f; }
)";

// In a child: compiles kBigSource into path(cache) with `cxx`, expects success with a cache warning
// holding `errno_text`, runs the kernel, and checks that nothing is left in kernels/. 0 when all holds.
int compile_on_a_full_disk(const std::string& cache, const std::string& tmp, const std::string& cxx,
                           const std::string& errno_text) {
  ::setenv("TMPDIR", tmp.c_str(), 1);
  emu::CompileOptions co;
  co.cache_dir = cache;
  co.host_cxx = cxx;
  co.source_name = "big.cu";
  auto m = emu::compile(kBigSource, {"big"}, co);
  if (!m.ok()) return std::fprintf(stderr, "compile failed: %s\n", m.status().message().c_str()), 1;
  const std::string& w = (*m)->cache_warning();
  if (w.find("was compiled but not cached") == std::string::npos || w.find(errno_text) == std::string::npos) {
    return std::fprintf(stderr, "warning: '%s', expected one with '%s'\n", w.c_str(), errno_text.c_str()), 2;
  }
  std::vector<float> y{0.0f, 0.0f};
  Status s = emu::launch(**m, "big", {1}, {1}, 0, {emu::Arg::buffer(y.data(), 8, "y")});
  if (!s.ok() || y[0] != 2.0f) return std::fprintf(stderr, "launch: %s, y = %g\n", s.message().c_str(), y[0]), 3;
  const std::vector<std::string> left = files_under(cache + "/kernels");
  for (const std::string& f : left) std::fprintf(stderr, "left behind: %s\n", f.c_str());
  return left.empty() ? 0 : 4;
}

TEST_F(EmuFaultTest, FullDiskStillRunsAndLeavesNothing) {
  // RLIMIT_FSIZE (anyone may lower it): the compiler, a wrapper that lifts the limit again, is unaffected.
  write("cxx", "#!/bin/sh\nulimit -S -f unlimited\nexec \"${KILN_HOST_CXX:-c++}\" \"$@\"\n");
  ASSERT_EQ(::chmod(path("cxx").c_str(), 0755), 0);
  ChildOptions limited;
  limited.file_size_limit = 256 << 10;
  EXPECT_EQ(in_child([&] { return compile_on_a_full_disk(path("cache"), path("tmp"), path("cxx"), "File too large"); },
                     limited),
            0);
  EXPECT_TRUE(fs::is_empty(path("tmp"))) << "a scratch directory was left behind";

  // A real full disk: a 128 KiB tmpfs as the cache directory, mounted in a mount namespace of the child's
  // own (so nothing outlives it), where this process may (root in most containers).
  fs::create_directories(path("small"));
  const int code = in_child([&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", path("small").c_str(), "tmpfs", 0, "size=128k,mode=0700") != 0) {
      return 77;
    }
    return compile_on_a_full_disk(path("small"), path("tmp"), emu::host_compiler(), "No space left on device");
  });
  if (code == 77) GTEST_SKIP() << "no tmpfs here (needs CAP_SYS_ADMIN); the file-size limit case ran";
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(fs::is_empty(path("tmp")));
}

TEST_F(EmuFaultTest, MaxSizeSmallerThanOneEntry) {
  ScopedEnv max("KILN_CACHE_MAX_SIZE", "1K");
  for (int i = 0; i < 2; ++i) {
    subprocess::Proc p = good_run();
    EXPECT_TRUE(compiled_now(p));  // stored, and evicted at once to stay under the limit
    EXPECT_TRUE(emu_files().empty());
  }
  KernelCache cache = open();
  const CacheStats st = cache.stats();
  EXPECT_EQ(st.of(CacheKind::emu).stores, 2);
  EXPECT_EQ(st.of(CacheKind::emu).evictions, 2);
}

}  // namespace
}  // namespace kiln::cache_test
