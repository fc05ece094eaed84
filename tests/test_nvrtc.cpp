// The NVRTC wrapper (codegen/nvrtc.h): real compiles for sm_80/sm_90 with the embedded headers, ptxas-info
// parsing on real log lines, error reporting, lazy loading (checked in a fresh subprocess), thread safety.
// Compiling needs the CUDA toolkit (not a GPU); the parser and hash tests run everywhere.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "codegen/embedded_headers.h"
#include "codegen/nvrtc.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln::codegen {
namespace {

#define SKIP_WITHOUT_NVRTC() \
  if (nvrtc_build_version() == "none") GTEST_SKIP() << "built without the CUDA toolkit"

// Every generated kernel starts with this prelude; __half comes from the embedded cuda_fp16.h.
const char* const kHalfKernel = R"(#include "kiln/device.cuh"
extern "C" __global__ void add_relu(const __half* a, const __half* b, __half* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = __half2float(kiln::ld(a + i)) + __half2float(kiln::ld(b + i));
    kiln::st(y + i, __float2half(v > 0.f ? v : 0.f));
  }
}
)";

// 96 live floats per thread under a 32-register limit: ptxas must spill.
const char* const kSpillingKernel = R"(#include "kiln/device.cuh"
extern "C" __global__ void spills(const float* in, float* out) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) v[i] = in[i * blockDim.x + threadIdx.x];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int i = 0; i < 96; ++i) v[i] = v[i] * v[(i + r + 1) % 96] + in[r];
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 96; ++i) acc += v[i] * v[95 - i];
  out[threadIdx.x] = acc;
}
)";

// Real NVRTC 13.0 logs (-Xptxas -v), captured from compiles of the kernels above and of a two-entry source
// with a large dynamically indexed local array (stack, not spills), a __noinline__ helper and shared memory.
const char* const kRealLogTwoEntries =
    R"("kernel.cu": using precompiled header file "/tmp/__nvrtc_auto_pch_16064_0/kernel_0.pch"
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'second' for 'sm_80'
ptxas info    : Function properties for second
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 18.942 ms
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
ptxas         .     2304 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2304 bytes cumulative stack size, 1024 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 786.116 ms
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
)";
const char* const kRealLogSpills =
    R"("kernel.cu": creating precompiled header file "/tmp/__nvrtc_auto_pch_16381_0/kernel_0.pch"
ptxas info    : Overriding maximum register limit 256 for 'spills' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spills' for 'sm_80'
ptxas info    : Function properties for spills
ptxas         .     1152 bytes stack frame, 2220 bytes spill stores, 2300 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 1152 bytes cumulative stack size, 368 bytes cmem[0]
ptxas info    : Compile time = 571.499 ms
)";
const char* const kRealLogSm90 = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 21.464 ms
)";

TEST(PtxasInfo, ParsesEntriesHelpersStackAndSharedMemory) {
  auto f = parse_ptxas_info(kRealLogTwoEntries);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].name, "second");
  EXPECT_TRUE(f[0].entry);
  EXPECT_EQ(f[0].arch, "sm_80");
  EXPECT_EQ(f[0].registers, 8);
  EXPECT_EQ(f[0].shared_bytes, 0);
  EXPECT_EQ(f[1].name, "spill");
  EXPECT_EQ(f[1].registers, 40);
  EXPECT_EQ(f[1].shared_bytes, 1024);
  EXPECT_EQ(f[1].stack_bytes, 2304);
  EXPECT_EQ(f[1].spill_store_bytes, 0);
  EXPECT_EQ(f[2].name, "_Z6helperPfi");
  EXPECT_FALSE(f[2].entry);
  EXPECT_EQ(f[2].registers, 0);
}

TEST(PtxasInfo, ParsesSpills) {
  auto f = parse_ptxas_info(kRealLogSpills);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].name, "spills");
  EXPECT_EQ(f[0].registers, 32);
  EXPECT_EQ(f[0].stack_bytes, 1152);
  EXPECT_EQ(f[0].spill_store_bytes, 2220);
  EXPECT_EQ(f[0].spill_load_bytes, 2300);
}

TEST(PtxasInfo, ParsesSm90WithoutCmemAndIgnoresJunk) {
  auto f = parse_ptxas_info(kRealLogSm90);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].arch, "sm_90");
  EXPECT_EQ(f[0].registers, 10);
  EXPECT_TRUE(parse_ptxas_info("").empty());
  EXPECT_TRUE(parse_ptxas_info("kernel.cu(3): warning: something\nptxas info : Used 12 registers\n").empty());
}

TEST(Embedded, TemplatesAndCudaHeaders) {
  bool device = false;
  for (size_t i = 0; i < kEmbeddedTemplateCount; ++i)
    device |= std::string(kEmbeddedTemplates[i].path) == "kiln/device.cuh";
  EXPECT_TRUE(device);
  EXPECT_EQ(kEmbeddedTemplates[kEmbeddedTemplateCount].path, nullptr);
  if (nvrtc_build_version() == "none") return;
  ASSERT_EQ(kEmbeddedCudaHeaderCount, 4u);
  std::vector<std::string> names;
  for (size_t i = 0; i < kEmbeddedCudaHeaderCount; ++i) names.push_back(kEmbeddedCudaHeaders[i].path);
  EXPECT_EQ(names, (std::vector<std::string>{"cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp16.h", "cuda_fp16.hpp"}));
  EXPECT_GT(kEmbeddedCudaHeaders[0].size, 10000u);
  EXPECT_EQ(kEmbeddedCudaHeaders[0].data[kEmbeddedCudaHeaders[0].size], 0);  // usable as a C string
}

TEST(TemplatesHash, StableAnd32HexDigits) {
  const std::string h = templates_hash();
  EXPECT_TRUE(std::regex_match(h, std::regex("[0-9a-f]{32}"))) << h;
  EXPECT_EQ(h, templates_hash());
}

TEST(Nvrtc, CompilesHalfKernelForSm80Sm90AndSm90a) {
  SKIP_WITHOUT_NVRTC();
  for (std::string arch : {"sm_80", "sm_90", "sm_90a"}) {
    NvrtcOptions opts;
    opts.arch = arch;
    auto r = nvrtc_compile(kHalfKernel, opts);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_GT(r->cubin.size(), 4u);
    EXPECT_EQ(std::string(r->cubin.begin(), r->cubin.begin() + 4),
              "\x7f"
              "ELF");
    EXPECT_NE(r->ptx.find(".target " + arch), std::string::npos) << r->ptx.substr(0, 400);
    EXPECT_NE(r->ptx.find(".entry add_relu"), std::string::npos);
    EXPECT_GT(r->registers, 0);
    EXPECT_EQ(r->spill_store_bytes, 0);
    EXPECT_GT(r->compile_ms, 0);
    EXPECT_NE(r->log.find("Compiling entry function 'add_relu' for '" + arch + "'"), std::string::npos) << r->log;
  }
  EXPECT_TRUE(nvrtc_loaded());
}

TEST(Nvrtc, SpillingKernelReportsSpillBytes) {
  SKIP_WITHOUT_NVRTC();
  NvrtcOptions opts;
  opts.extra = {"-maxrregcount=32"};
  auto r = nvrtc_compile(kSpillingKernel, opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_LE(r->registers, 32);
  EXPECT_GT(r->spill_store_bytes, 0) << r->log;
  EXPECT_GT(r->spill_load_bytes, 0);
  EXPECT_GT(r->stack_bytes, 0);
}

TEST(Nvrtc, CompileErrorCarriesLogAndSavedSource) {
  SKIP_WITHOUT_NVRTC();
  const std::string src = "#include \"kiln/device.cuh\"\n// pid " + std::to_string(getpid()) +
                          "\nextern \"C\" __global__ void broken() { int x = ; }\n";
  auto r = nvrtc_compile(src, {});
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("kernel.cu(3): error: expected an expression"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("precompiled header"), std::string::npos) << msg;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(msg, m, std::regex("source saved to (\\S+/kiln-failed-\\w{6}/[0-9a-f]{32}\\.cu)")))
      << msg;
  const std::filesystem::path saved = m[1].str();
  ASSERT_TRUE(std::filesystem::exists(saved)) << saved;
  EXPECT_EQ(subprocess::slurp(saved.string()), src);
  std::filesystem::path log = saved;
  log.replace_extension(".log");
  EXPECT_NE(subprocess::slurp(log.string()).find("-arch=sm_80"), std::string::npos);
  std::filesystem::remove_all(saved.parent_path());
}

TEST(Nvrtc, InvalidArchIsAClearStatus) {
  for (std::string arch : {"sm_1", "compute_xx", "", "compute_80", "sm_80x", "SM_80", "sm_70", "sm_86a"}) {
    NvrtcOptions opts;
    opts.arch = arch;
    auto r = nvrtc_compile(kHalfKernel, opts);
    ASSERT_FALSE(r.ok()) << arch;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << arch;
    EXPECT_NE(r.status().message().find("'" + arch + "'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("sm_80"), std::string::npos) << r.status().message();
  }
  SKIP_WITHOUT_NVRTC();
  NvrtcOptions opts;
  opts.arch = "sm_99";  // well-formed, unknown to NVRTC
  auto r = nvrtc_compile(kHalfKernel, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("not supported by NVRTC"), std::string::npos) << r.status().message();
}

TEST(Nvrtc, BadExtraOptionIsInvalidArgument) {
  SKIP_WITHOUT_NVRTC();
  NvrtcOptions opts;
  opts.extra = {"--no-such-option"};
  auto r = nvrtc_compile(kHalfKernel, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("--no-such-option"), std::string::npos) << r.status().message();
}

TEST(Nvrtc, VersionsAndArchs) {
  SKIP_WITHOUT_NVRTC();
  auto v = nvrtc_version_string();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(nvrtc_build_version().rfind(*v + ".", 0), 0u) << nvrtc_build_version() << " vs " << *v;
  auto archs = supported_archs();
  for (const char* a : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}) {
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a;
  }
  EXPECT_EQ(std::find(archs.begin(), archs.end(), "sm_75"), archs.end());
}

TEST(Nvrtc, TwoThreadsCompileConcurrently) {
  SKIP_WITHOUT_NVRTC();
  Result<CompiledKernel> a = Status(StatusCode::internal, "not run"), b = a;
  std::thread t1([&] { a = nvrtc_compile(kHalfKernel, {}); });
  std::thread t2([&] {
    NvrtcOptions opts;
    opts.arch = "sm_90";
    b = nvrtc_compile(R"(#include "kiln/device.cuh"
extern "C" __global__ void scale(float* x, float s) { x[threadIdx.x] *= s; })",
                      opts);
  });
  t1.join();
  t2.join();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_NE(a->ptx.find(".entry add_relu"), std::string::npos);
  EXPECT_NE(b->ptx.find(".entry scale"), std::string::npos);
  EXPECT_NE(b->ptx.find(".target sm_90"), std::string::npos);
}

// Runs only in the subprocess started by the next test, where nothing has touched NVRTC yet.
TEST(NvrtcFreshProcess, LoadsOnFirstCompileOnly) {
  if (!std::getenv("KILN_TEST_NVRTC_FRESH")) GTEST_SKIP() << "run by Nvrtc.LoadedLazilyInAFreshProcess";
  EXPECT_FALSE(nvrtc_loaded());
  (void)templates_hash();
  (void)nvrtc_build_version();
  NvrtcOptions bad;
  bad.arch = "sm_1";
  EXPECT_FALSE(nvrtc_compile(kHalfKernel, bad).ok());
  EXPECT_FALSE(nvrtc_loaded()) << "hashing, versions for keys and arch checks must not load NVRTC";
  auto r = nvrtc_compile(kHalfKernel, {});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(nvrtc_loaded());
}

class NvrtcLazy : public TempDirTest {};

TEST_F(NvrtcLazy, LoadedLazilyInAFreshProcess) {
  SKIP_WITHOUT_NVRTC();
  ASSERT_EQ(setenv("KILN_TEST_NVRTC_FRESH", "1", 1), 0);
  auto p = subprocess::run_process(std::filesystem::read_symlink("/proc/self/exe").string(),
                                   {"--gtest_filter=NvrtcFreshProcess.LoadsOnFirstCompileOnly"}, dir_);
  unsetenv("KILN_TEST_NVRTC_FRESH");
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("[  PASSED  ] 1 test"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("SKIPPED"), std::string::npos) << p.out;
}

}  // namespace
}  // namespace kiln::codegen
