// Deliberately wrong kernels (tests/emu/bugs.cu and a variant of the GEMM): the emulator reports each one,
// as an error naming kernel, block, thread and source line, or as a failing comparison.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "emu/emu_test_util.h"
#include "kiln/emu.h"

namespace kiln::emu::test {
namespace {

using ::testing::HasSubstr;

class EmuBugs : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = kernel_source("bugs.cu");
    auto r =
        compile_file("bugs.cu", {"bug_no_cp_wait", "bug_no_syncthreads", "bug_divergent_barrier",
                                 "bug_exit_before_barrier", "bug_shfl_mask", "bug_shfl_missing_lane", "bug_oob_store"});
    ASSERT_TRUE(r.ok()) << r.status().message();
    module_ = *r;
  }
  // bugs.cu:LINE of the `occurrence`-th line holding `marker` in or after kernel `after`.
  std::string at(const std::string& marker, int occurrence = 1, const std::string& after = {}) {
    return fmt::format("bugs.cu:{}", line_of(source_, marker, occurrence, after));
  }
  std::string source_;
  std::shared_ptr<const Module> module_;
};

TEST_F(EmuBugs, MissingCpAsyncWaitReadsPoison) {
  auto x = random_floats(128, 1);
  for (Schedule s : kSchedules) {
    std::vector<float> out(128, 0.0f);
    LaunchReport report;
    KILN_ASSERT_OK(
        launch(*module_, "bug_no_cp_wait", {1}, {32}, 0, {buf(x, "x"), buf(out, "out")}, checked(s), &report));
    for (int i = 0; i < 128; ++i) EXPECT_TRUE(std::isnan(out[i])) << i << ": " << out[i];
    ASSERT_FALSE(report.warnings.empty());
    EXPECT_THAT(report.warnings[0], HasSubstr("cp.async copies never waited for"));
    EXPECT_THAT(report.warnings[0], HasSubstr(at("kiln::cp_async<16>")));
  }
}

TEST_F(EmuBugs, GemmWithoutCpAsyncWaitFailsItsComparison) {
  auto r = compile_file("gemm_cp_async.cu", {"gemm_cp_async"}, "#define KILN_BUG_NO_CP_WAIT 1\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int M = 40, N = 40, K = 40;
  auto a = random_floats(M * K, 2), b = random_floats(K * N, 3);
  for (Schedule s : kSchedules) {
    std::vector<float> c(M * N, 0.0f);
    KILN_ASSERT_OK(launch(**r, "gemm_cp_async", {2, 2}, {256}, 0,
                          {buf(a, "A"), buf(b, "B"), buf(c, "C"), Arg::value(M), Arg::value(N), Arg::value(K)},
                          checked(s)));
    int nan = 0;
    for (float v : c) nan += std::isnan(v);
    EXPECT_EQ(nan, M * N) << schedule_name(s);
  }
}

TEST_F(EmuBugs, MissingSyncthreadsIsCaughtUnderSomeSchedule) {
  auto x = random_floats(64, 4);
  int wrong_schedules = 0;
  for (Schedule s : kSchedules) {
    std::vector<float> out(64, 0.0f);
    KILN_ASSERT_OK(launch(*module_, "bug_no_syncthreads", {1}, {64}, 0, {buf(x, "x"), buf(out, "out")}, checked(s)));
    int wrong = 0;
    for (int t = 0; t < 64; ++t) wrong += !(out[t] == x[(t + 1) % 64]);
    if (s == Schedule::forward) {
      EXPECT_GT(wrong, 0) << "forward runs each thread to its end before the next";
    }
    wrong_schedules += wrong > 0;
  }
  EXPECT_GE(wrong_schedules, 1);
}

TEST_F(EmuBugs, DivergentBarrier) {
  std::vector<float> out(32, 0.0f);
  for (Schedule s : kSchedules) {
    Status st = launch(*module_, "bug_divergent_barrier", {1}, {32}, 0, {buf(out, "out")}, checked(s));
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr("kernel 'bug_divergent_barrier' block (0,0,0)"));
    EXPECT_THAT(st.message(), HasSubstr("divergent __syncthreads()"));
    EXPECT_THAT(st.message(), HasSubstr(at("__syncthreads();", 1, "void bug_divergent_barrier")));
    EXPECT_THAT(st.message(), HasSubstr(at("__syncthreads();", 2, "void bug_divergent_barrier")));
  }
}

TEST_F(EmuBugs, ThreadExitingWhileOthersWaitAtABarrier) {
  std::vector<float> out(32, 0.0f);
  for (Schedule s : kSchedules) {
    Status st = launch(*module_, "bug_exit_before_barrier", {1}, {32}, 0, {buf(out, "out")}, checked(s));
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr("kernel 'bug_exit_before_barrier' block (0,0,0)"));
    EXPECT_THAT(st.message(), HasSubstr("exited while 16 threads wait at __syncthreads() at " +
                                        at("__syncthreads();", 1, "void bug_exit_before_barrier")));
  }
}

TEST_F(EmuBugs, ShuffleWithALaneMissingFromTheMask) {
  auto x = random_floats(32, 5);
  std::vector<float> out(32, 0.0f);
  for (Schedule s : kSchedules) {
    Status st = launch(*module_, "bug_shfl_mask", {1}, {32}, 0, {buf(x, "x"), buf(out, "out")}, checked(s));
    ASSERT_FALSE(st.ok());
    // Whichever comes first: lane 31 calls with a mask that leaves it out, or a lane reads lane 31.
    EXPECT_THAT(st.message(), HasSubstr("__shfl_down_sync at " + at("__shfl_down_sync(0x7fffffffu")));
    EXPECT_THAT(st.message(), HasSubstr("mask 0x7fffffff"));
    EXPECT_THAT(st.message(), ::testing::AnyOf(HasSubstr("does not include the calling lane 31"),
                                               HasSubstr("reads lane 31, which is not in the mask")));
  }
  LaunchOptions reverse = checked(Schedule::reverse);  // lane 31 arrives first
  Status st = launch(*module_, "bug_shfl_mask", {1}, {32}, 0, {buf(x, "x"), buf(out, "out")}, reverse);
  EXPECT_THAT(st.message(), HasSubstr("thread (31,0,0): __shfl_down_sync"));
  EXPECT_THAT(st.message(), HasSubstr("does not include the calling lane 31"));
}

TEST_F(EmuBugs, ShuffleWaitingForALaneThatNeverArrives) {
  auto x = random_floats(32, 6);
  std::vector<float> out(32, 0.0f);
  for (Schedule s : kSchedules) {
    Status st = launch(*module_, "bug_shfl_missing_lane", {1}, {32}, 0, {buf(x, "x"), buf(out, "out")}, checked(s));
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr("__shfl_xor_sync at " + at("__shfl_xor_sync(0xffffffffu")));
    EXPECT_THAT(st.message(), HasSubstr("can never complete: lane 16 has exited"));
  }
}

TEST_F(EmuBugs, OutOfBoundsStore) {
  auto x = random_floats(64, 7);
  std::vector<float> out(65, 0.0f);  // one spare element, so the unchecked run corrupts nothing
  const std::vector<Arg> args = {buf(x, "x"), Arg::buffer(out.data(), 64 * sizeof(float), "out")};
  for (Schedule s : kSchedules) {
    Status st = launch(*module_, "bug_oob_store", {1}, {64}, 0, args, checked(s));
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr("kernel 'bug_oob_store' block (0,0,0) thread (63,0,0)"));
    EXPECT_THAT(st.message(), HasSubstr("out-of-bounds global store of 4 bytes at " + at("kiln::st(out + t + 1")));
    EXPECT_THAT(st.message(), HasSubstr("4 bytes past the end of buffer 'out' (256 bytes)"));
  }
  LaunchOptions unchecked;
  unchecked.checked = false;
  KILN_ASSERT_OK(launch(*module_, "bug_oob_store", {1}, {64}, 0, args, unchecked));
  EXPECT_EQ(out[64], x[63]);
}

}  // namespace
}  // namespace kiln::emu::test
