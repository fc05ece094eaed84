// Every kernel under tests/emu/ compiles unchanged with NVRTC for sm_80 and sm_90 (the device side of
// templates/kiln/device.cuh: real built-ins and inline PTX). Needs the CUDA toolkit, not a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "emu/emu_test_util.h"

#ifdef KILN_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace kiln::emu::test {
namespace {

const char* const kKernelFiles[] = {"atomics.cu",     "block_reduce.cu",   "block_scan.cu",   "bugs.cu",
                                    "conversions.cu", "cp_async_sizes.cu", "dynamic_smem.cu", "gemm_cp_async.cu",
                                    "mma_tile.cu",    "profile_patterns.cu", "warp_shuffles.cu"};

TEST(EmuNvrtc, EveryKernelFileIsListed) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(KILN_EMU_KERNEL_DIR)) {
    if (e.path().extension() == ".cu") found.push_back(e.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, std::vector<std::string>(std::begin(kKernelFiles), std::end(kKernelFiles)));
}

class EmuNvrtcCompile : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(EmuNvrtcCompile, CompilesUnchanged) {
#ifndef KILN_HAVE_NVRTC
  GTEST_SKIP() << "built without the CUDA toolkit";
#else
  const auto& [file, arch] = GetParam();
  std::vector<std::string> names, contents;
  const std::filesystem::path templates(KILN_TEMPLATES_DIR);
  for (const auto& e : std::filesystem::recursive_directory_iterator(templates / "kiln")) {
    if (!e.is_regular_file()) continue;
    names.push_back(std::filesystem::relative(e.path(), templates).string());
    contents.push_back(read_text(e.path().string()));
  }
  std::vector<const char*> hn, hc;
  for (size_t i = 0; i < names.size(); ++i) hn.push_back(names[i].c_str()), hc.push_back(contents[i].c_str());
  const std::string src = kernel_source(file);
  nvrtcProgram prog;
  ASSERT_EQ(nvrtcCreateProgram(&prog, src.c_str(), file.c_str(), static_cast<int>(hn.size()), hc.data(), hn.data()),
            NVRTC_SUCCESS);
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const std::string inc = std::string("-I") + KILN_CUDA_INCLUDE_DIR;
  const char* opts[] = {arch_opt.c_str(), inc.c_str(), "-std=c++17"};
  nvrtcResult rc = nvrtcCompileProgram(prog, 3, opts);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(prog, log.data());
  EXPECT_EQ(rc, NVRTC_SUCCESS) << nvrtcGetErrorString(rc) << "\n" << log;
  if (rc == NVRTC_SUCCESS) {
    size_t cubin = 0;
    EXPECT_EQ(nvrtcGetCUBINSize(prog, &cubin), NVRTC_SUCCESS);
    EXPECT_GT(cubin, 0u);
  }
  nvrtcDestroyProgram(&prog);
#endif
}

INSTANTIATE_TEST_SUITE_P(Emu, EmuNvrtcCompile,
                         ::testing::Combine(::testing::ValuesIn(std::vector<std::string>(std::begin(kKernelFiles),
                                                                                         std::end(kKernelFiles))),
                                            ::testing::Values(std::string("sm_80"), std::string("sm_90"))),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

}  // namespace
}  // namespace kiln::emu::test
