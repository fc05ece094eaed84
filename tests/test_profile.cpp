// kiln's profile (include/kiln/profile.h, docs/profile.md): occupancy against the CUDA toolkit's own
// occupancy calculator (cuda_occupancy.h) over many register and shared-memory combinations, waves and
// tail efficiency by hand, profile_plan on graphs whose traffic is known exactly (a pointwise kernel moves
// its tensors once, sector for sector), the carry of counters from a small batch to a large one, rebatching
// and its errors, and `kiln profile` as a process (text, JSON, bad options).
#include <gtest/gtest.h>

#include <optional>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/json.h"
#include "kiln/profile.h"
#include "plan_cli_fixture.h"
#include "scoped_env.h"

#if __has_include(<cuda_occupancy.h>)
#include <cuda_occupancy.h>
#define KILN_TEST_HAVE_CUDA_OCCUPANCY 1
#endif

namespace kiln {
namespace {

#ifdef KILN_TEST_HAVE_CUDA_OCCUPANCY
// The toolkit's answer for a kernel of `threads` x `regs` with `smem` bytes of dynamic shared memory.
int cuda_blocks_per_sm(const Target& t, int threads, int regs, int64_t smem) {
  cudaOccDeviceProp prop;
  prop.computeMajor = t.cc() / 10;
  prop.computeMinor = t.cc() % 10;
  prop.maxThreadsPerBlock = 1024;
  prop.maxThreadsPerMultiprocessor = t.max_threads_per_sm;
  prop.regsPerBlock = 65536;
  prop.regsPerMultiprocessor = t.regs_per_sm;
  prop.warpSize = 32;
  prop.sharedMemPerBlock = 48 * 1024;
  prop.sharedMemPerMultiprocessor = static_cast<size_t>(t.smem_per_sm);
  prop.numSms = t.sm_count;
  prop.sharedMemPerBlockOptin = static_cast<size_t>(t.smem_per_block);
  prop.reservedSharedMemPerBlock = 1024;
  cudaOccFuncAttributes attr;
  attr.maxThreadsPerBlock = 1024;
  attr.numRegs = regs;
  attr.sharedSizeBytes = 0;
  attr.partitionedGCConfig = PARTITIONED_GC_OFF;
  attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attr.maxDynamicSharedSizeBytes = static_cast<size_t>(t.smem_per_block);
  cudaOccDeviceState state;
  cudaOccResult result{};
  EXPECT_EQ(cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, threads, static_cast<size_t>(smem)),
            CUDA_OCC_SUCCESS);
  return result.activeBlocksPerMultiprocessor;
}

TEST(ProfileOccupancy, MatchesTheCudaOccupancyCalculator) {
  int compared = 0, limited_by_regs = 0, limited_by_smem = 0;
  for (const char* name : {"h200", "a100", "a10", "l4"}) {
    const Target t = *target_named(name);
    for (int threads : {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024}) {
      for (int regs : {1, 16, 24, 32, 40, 56, 64, 72, 96, 128, 168, 200, 255}) {
        for (int64_t smem : {int64_t{0}, int64_t{1000}, int64_t{8192}, int64_t{20000}, int64_t{45 * 1024},
                             int64_t{70 * 1024}, int64_t{99 * 1024}, int64_t{160 * 1024}, t.smem_per_block}) {
          const Occupancy o = occupancy(t, threads, regs, smem);
          ASSERT_EQ(o.blocks_per_sm, cuda_blocks_per_sm(t, threads, regs, smem))
              << name << " threads " << threads << " regs " << regs << " smem " << smem << " (kiln says " << o.limiter
              << ")";
          ++compared;
          limited_by_regs += o.limiter == "registers";
          limited_by_smem += o.limiter == "shared memory";
        }
      }
    }
  }
  // The grid reaches every limiter many times, so none of the rules goes untested.
  EXPECT_EQ(compared, 4 * 10 * 13 * 9);
  EXPECT_GT(limited_by_regs, 100);
  EXPECT_GT(limited_by_smem, 100);
}
#endif

TEST(ProfileOccupancy, HandWorkedCases) {
  const Target h200 = *target_named("h200");
  // 64 registers: 2048 per warp, 8 warps per sub-partition, 32 per SM: 4 blocks of 8 warps.
  Occupancy o = occupancy(h200, 256, 64, 0);
  EXPECT_EQ(o.blocks_per_sm, 4);
  EXPECT_EQ(o.limiter, "registers");
  EXPECT_DOUBLE_EQ(o.fraction, 0.5);
  EXPECT_EQ(o.regs_allocated, 8 * 2048);
  // 45 KiB + 1 KiB reserved = 46 KiB: 4 blocks in 228 KiB; 32 registers leave warps for 8.
  o = occupancy(h200, 128, 32, 45 * 1024);
  EXPECT_EQ(o.smem_allocated, 46 * 1024);
  EXPECT_EQ(o.blocks_per_sm, 4);
  EXPECT_EQ(o.limiter, "shared memory");
  // Tiny blocks: the 32-block limit.
  o = occupancy(h200, 32, 16, 0);
  EXPECT_EQ(o.blocks_per_sm, 32);
  EXPECT_EQ(o.limiter, "blocks");
  EXPECT_DOUBLE_EQ(o.fraction, 0.5);
  // 1024 threads of 32 registers: 2 blocks by warps (64 per SM).
  o = occupancy(h200, 1024, 32, 0);
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limiter, "warps");
  // More shared memory than a block may have, or more than 255 registers: nothing fits.
  EXPECT_EQ(occupancy(h200, 128, 32, h200.smem_per_block + 1).blocks_per_sm, 0);
  EXPECT_EQ(occupancy(h200, 128, 256, 0).blocks_per_sm, 0);
}

TEST(ProfileWaves, TailEfficiency) {
  const Target h200 = *target_named("h200");
  Waves w = waves(h200, 264, 1);
  EXPECT_EQ(w.blocks_per_wave, 132);
  EXPECT_DOUBLE_EQ(w.waves, 2.0);
  EXPECT_DOUBLE_EQ(w.tail_efficiency, 1.0);
  w = waves(h200, 133, 1);  // one block in the second wave
  EXPECT_DOUBLE_EQ(w.tail_efficiency, 133.0 / 264);
  w = waves(h200, 66, 2);  // a quarter of one wave
  EXPECT_DOUBLE_EQ(w.waves, 0.25);
  EXPECT_DOUBLE_EQ(w.tail_efficiency, 0.25);
  EXPECT_DOUBLE_EQ(waves(h200, 100, 0).tail_efficiency, 0.0);  // does not fit
}

TEST(ProfilePeaks, EveryKnownTargetHasCeilingsWithASource) {
  for (const char* name : {"h200", "h100", "a100", "a10", "l4", "sm_80", "sm_90", "sm_86"}) {
    const DevicePeaks p = device_peaks(*target_named(name));
    EXPECT_GT(p.copy_bytes_per_s, 1e11) << name;
    EXPECT_GE(p.tensor_flops, p.mma_sync_flops) << name;
    EXPECT_GT(p.mma_sync_flops, p.simt_fp32_flops) << name;
    EXPECT_FALSE(p.source.empty()) << name;
  }
  const DevicePeaks h200 = device_peaks(*target_named("h200"));
  EXPECT_DOUBLE_EQ(h200.copy_bytes_per_s, 4.288e12);  // measured (docs/gpu.md)
  EXPECT_DOUBLE_EQ(h200.tensor_flops, 793e12);
  EXPECT_NEAR(h200.simt_fp32_flops, 66.9e12, 0.1e12);
}

Graph add_relu_graph(int64_t n) {
  Graph g("add_relu");
  Tensor a = g.input("a", {n, 64, 32, 32});
  Tensor b = g.input("b", {n, 64, 32, 32});
  g.output(g.relu(g.add(a, b)), "y");
  return g;
}

// The profile of `g`'s one kernel, its counters from running `g` itself on the emulator.
std::optional<KernelProfileRow> one_kernel_profile(const Graph& g) {
  auto p = plan_graph(g);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return std::nullopt;
  auto prof = profile_plan(*p, &*p);
  EXPECT_TRUE(prof.ok()) << prof.status().message();
  if (!prof.ok()) return std::nullopt;
  EXPECT_EQ(prof->kernels.size(), 1u);
  if (prof->kernels.size() != 1) return std::nullopt;
  return prof->kernels[0];
}

TEST(ProfilePlan, PointwiseKernelMovesItsTensorsExactlyOnce) {
  Graph g = add_relu_graph(2);
  auto p = plan_graph(g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto prof = profile_plan(*p, &*p);
  ASSERT_TRUE(prof.ok()) << prof.status().message();
  ASSERT_EQ(prof->kernels.size(), 1u);
  const KernelProfileRow& r = prof->kernels[0];
  const int64_t tensor_bytes = 2 * 64 * 32 * 32 * 4;
  EXPECT_EQ(r.family, "pointwise");
  EXPECT_EQ(r.planned_bytes, 3 * tensor_bytes);
  ASSERT_TRUE(r.counters.has_value());
  const emu::KernelProfile& c = *r.counters;
  // Two inputs read, one output written, every sector once (kiln's buffers are 256-byte aligned).
  EXPECT_EQ(c.dram_bytes(), static_cast<uint64_t>(3 * tensor_bytes));
  EXPECT_EQ(c.load_bytes(), static_cast<uint64_t>(2 * tensor_bytes));
  EXPECT_EQ(c.load_sectors() * 32, static_cast<uint64_t>(2 * tensor_bytes));
  EXPECT_EQ(c.store_sectors() * 32, static_cast<uint64_t>(tensor_bytes));
  EXPECT_DOUBLE_EQ(r.main_site_efficiency, 1.0);
  EXPECT_EQ(r.config, "flat v4");  // f32: 16-byte vectors, 16 sectors a request
  EXPECT_DOUBLE_EQ(static_cast<double>(c.load_sectors()) / static_cast<double>(c.load_requests()), 16.0);
  EXPECT_EQ(c.mma, 0u);
  // The estimate: memory bound at the copy bandwidth, divided by the waves' fill.
  EXPECT_EQ(r.estimate.bound, "memory");
  EXPECT_DOUBLE_EQ(r.dram_bytes, 3.0 * tensor_bytes);
  EXPECT_NEAR(r.estimate.memory_us, 3.0 * tensor_bytes / 4.288e12 * 1e6, 1e-9);
  EXPECT_NEAR(r.estimate.us, r.estimate.memory_us / r.waves.tail_efficiency, 1e-9);
  EXPECT_NEAR(r.estimate.ceiling_fraction, r.waves.tail_efficiency, 1e-12);
  EXPECT_NEAR(prof->estimated_us, r.estimate.us, 1e-12);
#ifdef KILN_HAVE_NVRTC
  ASSERT_TRUE(r.registers.has_value()) << (prof->warnings.empty() ? "" : prof->warnings[0]);
  EXPECT_GT(*r.registers, 0);
  EXPECT_GT(r.occupancy.blocks_per_sm, 0);
#endif
}

TEST(ProfilePlan, CountersFromASmallBatchCarryToTheLargeOne) {
  auto loaded = load_graph(std::string(KILN_SOURCE_DIR) + "/samples/graphs/conv_bias_bn_relu.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto big = rebatch_graph(*loaded, 16);
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(big->shape(*big->find_tensor("x"))[0], 16);
  auto full = plan_graph(*big);
  ASSERT_TRUE(full.ok());
  // At batch 1 the conv gets smaller tiles than at 16: its counters would describe another kernel.
  auto batch1 = plan_graph(*loaded);
  ASSERT_TRUE(batch1.ok());
  auto mismatched = profile_plan(*full, &*batch1);
  ASSERT_TRUE(mismatched.ok()) << mismatched.status().message();
  EXPECT_FALSE(mismatched->kernels[0].counters.has_value());
  ASSERT_FALSE(mismatched->warnings.empty());
  EXPECT_NE(mismatched->warnings[0].find("no counters for group"), std::string::npos) << mismatched->warnings[0];
  // plan_for_counters finds the smallest batch with the same kernels.
  int64_t batch = 0;
  auto small = plan_for_counters(*big, *full, {}, 1, &batch);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_GT(batch, 1);
  EXPECT_LT(batch, 16);
  auto prof = profile_plan(*full, &*small);
  ASSERT_TRUE(prof.ok()) << prof.status().message();
  ASSERT_EQ(prof->kernels.size(), static_cast<size_t>(full->kernel_count()));
  for (const KernelProfileRow& r : prof->kernels) {
    ASSERT_TRUE(r.counters.has_value()) << r.entry;
    EXPECT_GT(r.planned_bytes, r.emulated_planned_bytes) << r.entry;
    // DRAM bytes carried over as the small run's ratio to its plan.
    EXPECT_NEAR(r.dram_bytes / static_cast<double>(r.planned_bytes),
                static_cast<double>(r.counters->dram_bytes()) / static_cast<double>(r.emulated_planned_bytes), 1e-9);
    EXPECT_GT(r.estimate.us, 0);
    EXPECT_FALSE(r.config.empty());
  }
  const KernelProfileRow& conv = prof->kernels[0];
  EXPECT_EQ(conv.family, "conv2d");
  EXPECT_GT(conv.flops, 0);
  EXPECT_GT(conv.counters->load_requests(), 0u);

  // Without an emulated run: static facts only.
  auto bare = profile_plan(*full, nullptr);
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->kernels[0].counters.has_value());
  EXPECT_DOUBLE_EQ(bare->kernels[0].dram_bytes, static_cast<double>(bare->kernels[0].planned_bytes));
}

// The targets kiln's GEMM kernels were tuned to (docs/profile.md, "Targets"), held on a small bf16
// channels-last convolution: the tensor-core loop's ldmatrix and cp.async stores conflict-free (swizzled
// stages), every global site at full sector efficiency (cp.async rows, the staged epilogue's stores and
// bias loads), and the output still matches the reference (run_plan_emu inside profile_plan ran it; the
// codegen tests compare these kernels with ref).
TEST(ProfilePlan, TensorCoreConvIsConflictFreeAndCoalesced) {
  Graph g("conv_nhwc");
  Tensor x = g.input("x", {1, 64, 16, 16}, DType::bf16, Layout::NHWC);
  Tensor w = g.parameter("w", {64, 64, 3, 3}, DType::bf16, Layout::KRSC);
  Tensor y = g.conv2d(x, w, {.padding = {1, 1}});
  g.output(g.relu(g.bias_add(y, g.parameter("b", {64}, DType::bf16))), "y", Layout::NHWC);
  const std::optional<KernelProfileRow> row = one_kernel_profile(g);
  ASSERT_TRUE(row.has_value());
  const KernelProfileRow& r = *row;
  ASSERT_TRUE(r.tensor_cores) << r.config;
  ASSERT_TRUE(r.counters.has_value());
  int ldmatrix_sites = 0, cp_async_sites = 0;
  for (const emu::AccessSite& s : r.counters->sites) {
    if (s.space == emu::AccessSpace::shared) {
      EXPECT_EQ(s.bank_conflicts(), 0u) << s.file << ":" << s.line << " " << emu::access_op_name(s.op);
      ldmatrix_sites += s.op == emu::AccessOp::ldmatrix;
      cp_async_sites += s.op == emu::AccessOp::cp_async_dst;
    } else {
      EXPECT_GE(s.sector_efficiency(), 0.999) << s.file << ":" << s.line << " " << emu::access_op_name(s.op);
    }
  }
  EXPECT_EQ(ldmatrix_sites, 2);  // A and B fragments
  EXPECT_EQ(cp_async_sites, 1);
  EXPECT_GT(r.counters->mma, 0u);
  EXPECT_DOUBLE_EQ(r.main_site_efficiency, 1.0);
}

// The SIMT loop's f32 stages are swizzled like the tensor-core loop's, and its element loads go to them
// G consecutive k a store: an NCHW conv (A read pixel-fastest through the element mapping, B through
// cp.async, the epilogue staged along m) and a matmul whose B is row-major (B read n-fastest) have no bank
// conflicts at any shared site. Before, the element stores were 4-way conflicts (each bank holds one k % 4
// of 8 padded rows), the cp.async stores 2-way and the epilogue's stages 2-way.
TEST(ProfilePlan, SimtStagesAreConflictFree) {
  Graph conv("conv_nchw_f32");
  Tensor x = conv.input("x", {1, 32, 12, 12}, DType::f32, Layout::NCHW);
  Tensor y = conv.conv2d(x, conv.parameter("w", {64, 32, 3, 3}, DType::f32, Layout::KCRS), {.padding = {1, 1}});
  conv.output(conv.relu(conv.bias_add(y, conv.parameter("b", {64}, DType::f32))), "y", Layout::NCHW);
  Graph mm("matmul_f32");
  Tensor a = mm.input("a", {96, 80}, DType::f32);
  mm.output(mm.matmul(a, mm.parameter("w", {80, 128}, DType::f32)), "y");
  for (const Graph* g : {&conv, &mm}) {
    SCOPED_TRACE(g->name());
    const std::optional<KernelProfileRow> row = one_kernel_profile(*g);
    ASSERT_TRUE(row.has_value());
    ASSERT_FALSE(row->tensor_cores) << row->config;
    ASSERT_TRUE(row->counters.has_value());
    int element_runs = 0;
    for (const emu::AccessSite& s : row->counters->sites) {
      if (s.space != emu::AccessSpace::shared) continue;
      EXPECT_EQ(s.bank_conflicts(), 0u) << s.file << ":" << s.line << " " << emu::access_op_name(s.op);
      element_runs += s.op == emu::AccessOp::store && s.bytes_per_lane == 16;
    }
    EXPECT_EQ(element_runs, 1);  // the operand read through the element mapping, 16 bytes a store
    EXPECT_EQ(row->counters->shared_wavefronts(), row->counters->shared_ideal_wavefronts());
  }
}

// An RGB stem (7x7, stride 2, pad 3, relu) over a side x side bf16 image, channels-last, profiled.
std::optional<KernelProfileRow> stem_profile(int64_t side) {
  Graph g("stem");
  Tensor x = g.input("x", {1, 3, side, side}, DType::bf16, Layout::NHWC);
  Tensor w = g.parameter("w", {64, 3, 7, 7}, DType::bf16, Layout::KRSC);
  g.output(g.relu(g.conv2d(x, w, {.stride = {2, 2}, .padding = {3, 3}})), "y", Layout::NHWC);
  return one_kernel_profile(g);
}

// An RGB stem (C = 3, NHWC: no 16-byte chunks of k) whose 31 x 31 output pixels are no whole number of
// 128-pixel tiles, so it keeps the stage-based loop (not the patch kernel): the loaders' k-fastest element
// mapping stores whole stage rows (no bank conflicts; the row-fastest mapping had 4-way ones) and reads runs
// of each pixel's window (at least 30 % sector efficiency here; 10 % row-fastest: lanes 6 or 12 bytes apart).
TEST(ProfilePlan, ChannelsLastStemLoadsRunsAndStoresRows) {
  const std::optional<KernelProfileRow> row = stem_profile(62);
  ASSERT_TRUE(row.has_value());
  const KernelProfileRow& r = *row;
  ASSERT_TRUE(r.counters.has_value());
  int element_stores = 0;
  for (const emu::AccessSite& s : r.counters->sites) {
    if (s.space == emu::AccessSpace::shared) {
      EXPECT_EQ(s.bank_conflicts(), 0u) << s.file << ":" << s.line << " " << emu::access_op_name(s.op);
      element_stores += s.op == emu::AccessOp::store && s.bytes_per_lane == 2;
    } else if (s.op == emu::AccessOp::load && s.bytes_per_lane == 2 && s.file.find("gemm_tile") != std::string::npos) {
      EXPECT_GE(s.sector_efficiency(), 0.30) << s.file << ":" << s.line;
    }
  }
  EXPECT_EQ(element_stores, 1);  // A and B through the element path's one store
  EXPECT_EQ(r.spill_bytes, 0);
  EXPECT_EQ(r.config.find("patch"), std::string::npos) << r.config;
}

// The same stem over 32 x 32 output pixels (8 whole tiles) takes the patch kernel
// (templates/kiln/conv2d_patch.cuh): its global reads are whole input rows and filters in 16-byte chunks
// (at least 95 % sector efficiency, the RGB stem's 35 % before), no thread reads global memory element by
// element, and its shared loads conflict only where a fragment's k pairs cross a tap row (at most 1.4
// wavefronts a request over the kernel).
TEST(ProfilePlan, ChannelsLastStemCopiesWholeRows) {
  const std::optional<KernelProfileRow> row = stem_profile(64);
  ASSERT_TRUE(row.has_value());
  const KernelProfileRow& r = *row;
  ASSERT_TRUE(r.counters.has_value());
  EXPECT_NE(r.config.find("patch"), std::string::npos) << r.config;
  EXPECT_GE(r.main_site_efficiency, 0.95);
  for (const emu::AccessSite& s : r.counters->sites) {
    if (s.space == emu::AccessSpace::global && s.op != emu::AccessOp::store) {
      EXPECT_EQ(s.op, emu::AccessOp::cp_async_src) << s.file << ":" << s.line;
      EXPECT_GE(s.sector_efficiency(), 0.95) << s.file << ":" << s.line;
    }
  }
  EXPECT_LE(double(r.counters->shared_wavefronts()), 1.4 * double(r.counters->shared_ideal_wavefronts()));
  EXPECT_GT(r.counters->mma, 0u);
  EXPECT_EQ(r.spill_bytes, 0);
}

// Group norm over NHWC, 8 bf16 channels (16 bytes) a group: a group's pixel is half a sector, so with one
// group a block a warp's 16-byte reads touched 32 sectors for 512 bytes (50 %). Two neighbouring groups on
// neighbouring threads read whole sectors, and their rows' copies in shared memory interleave by chunk
// (no bank conflicts).
TEST(ProfilePlan, ChannelsLastGroupNormReadsWholeSectors) {
  Graph g("gn");
  Tensor x = g.input("x", {1, 64, 24, 24}, DType::bf16, Layout::NHWC);
  NormOptions o;
  o.scale = g.parameter("gn.scale", {64}, DType::bf16);
  o.shift = g.parameter("gn.shift", {64}, DType::bf16);
  g.output(g.silu(g.group_norm(x, 8, o)), "y", Layout::NHWC);
  const std::optional<KernelProfileRow> row = one_kernel_profile(g);
  ASSERT_TRUE(row.has_value());
  const KernelProfileRow& r = *row;
  ASSERT_TRUE(r.counters.has_value());
  EXPECT_NE(r.config.find(" il2 "), std::string::npos) << r.config;
  int wide_loads = 0;
  for (const emu::AccessSite& s : r.counters->sites) {
    if (s.space == emu::AccessSpace::shared) {
      EXPECT_EQ(s.bank_conflicts(), 0u) << s.file << ":" << s.line << " " << emu::access_op_name(s.op);
    } else if (s.bytes_per_lane == 16) {
      EXPECT_GE(s.sector_efficiency(), 0.999) << s.file << ":" << s.line << " " << emu::access_op_name(s.op);
      wide_loads += s.op == emu::AccessOp::load;
    }
  }
  EXPECT_GE(wide_loads, 1);  // the input, 16 bytes a lane
  EXPECT_GE(r.main_site_efficiency, 0.999);
}

TEST(ProfilePlan, PlansWithOtherGroupsGiveNoCountersAndSaySo) {
  auto a = plan_graph(add_relu_graph(1));
  auto loaded = load_graph(std::string(KILN_SOURCE_DIR) + "/samples/graphs/conv_bias_bn_relu.json");
  ASSERT_TRUE(loaded.ok());
  auto b = plan_graph(*loaded);
  ASSERT_TRUE(a.ok() && b.ok());
  auto prof = profile_plan(*a, &*b);
  ASSERT_TRUE(prof.ok());
  EXPECT_FALSE(prof->kernels[0].counters.has_value());
  ASSERT_EQ(prof->warnings.size(), 1u);
  EXPECT_NE(prof->warnings[0].find("groups differ"), std::string::npos) << prof->warnings[0];
}

TEST(ProfileRebatch, IsTheGraphBuiltAtTheOtherBatch) {
  auto two = rebatch_graph(add_relu_graph(4), 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_TRUE(*two == add_relu_graph(2));
  EXPECT_FALSE(*two == add_relu_graph(4));
}

TEST(ProfileRebatch, RejectsWhatCannotChangeBatch) {
  Graph g = add_relu_graph(2);
  auto bad = rebatch_graph(g, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("positive"), std::string::npos) << bad.status().message();

  // A reshape that spells out the batch cannot follow a new one: the error names the node.
  Graph r("fixed");
  Tensor x = r.input("x", {2, 8});
  r.output(r.reshape(x, {2, 2, 4}, "flatten_2"), "y");
  auto re = rebatch_graph(r, 3);
  ASSERT_FALSE(re.ok());
  EXPECT_NE(re.status().message().find("flatten_2"), std::string::npos) << re.status().message();
  EXPECT_NE(re.status().message().find("batch 3"), std::string::npos) << re.status().message();
}

// ---- kiln profile, as a process -------------------------------------------------------------------------

class ProfileCli : public plan_cli::PlanCliFixture {
 protected:
  void SetUp() override {
    PlanCliFixture::SetUp();
    cache_.emplace("KILN_CACHE_DIR", path("cache").c_str());
    ASSERT_TRUE(save_graph(add_relu_graph(4), path("add_relu.json")).ok());
  }
  void TearDown() override { cache_.reset(); }
  std::optional<testing::ScopedEnv> cache_;
};

TEST_F(ProfileCli, TextAndJson) {
  Proc t = kiln({"profile", path("add_relu.json")});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("graph: add_relu (batch 4); counters from an emulated run at batch 1"), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("target: h200 (sm_90, 132 SMs)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("pointwise  flat v4"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("access sites, most wasteful first"), std::string::npos) << t.out;

  Proc j = kiln({"profile", path("add_relu.json"), "--json", "--target", "a100", "--batch", "2"});
  ASSERT_EQ(j.code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["schema"], "kiln.profile/1");
  EXPECT_EQ(doc["batch"], 4);
  EXPECT_EQ(doc["emulated_batch"], 2);
  EXPECT_EQ(doc["target"]["name"], "a100");
  ASSERT_EQ(doc["kernels"].size(), 1u);
  const auto& k = doc["kernels"][0];
  EXPECT_EQ(k["family"], "pointwise");
  EXPECT_EQ(k["planned_bytes"], 3 * 4 * 64 * 32 * 32 * 4);
  EXPECT_EQ(k["counters"]["dram_bytes"], 3 * 2 * 64 * 32 * 32 * 4);  // at the emulated batch
  EXPECT_EQ(k["estimate"]["bound"], "memory");
  EXPECT_GT(k["estimate"]["us"].get<double>(), 0);
  EXPECT_LE(k["counters"]["sites"].size(), 5u);

  Proc s = kiln({"profile", path("add_relu.json"), "--no-emulate", "--json"});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_TRUE(nlohmann::json::parse(s.out)["kernels"][0]["counters"].is_null());
}

TEST_F(ProfileCli, BadInput) {
  expect_usage({"profile", path("add_relu.json"), "--target", "h900"}, "h900");
  expect_usage({"profile", path("add_relu.json"), "--batch", "0"}, "invalid --batch '0'");
  expect_usage({"profile", path("add_relu.json"), "--batch", "x"}, "invalid --batch 'x'");
  expect_usage({"profile", path("add_relu.json"), "--sites", "-1"}, "invalid --sites '-1'");
  expect_usage({"profile", path("add_relu.json"), "--no-emulate", "--batch", "2"}, "cannot go with --no-emulate");
  // A batch above the graph's own was silently clamped to it.
  expect_usage({"profile", path("add_relu.json"), "--batch", "99999999999"},
               "--batch 99999999999 is larger than the graph's batch 4");
  Proc missing = kiln({"profile", path("nope.json")});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos) << missing.err;
  // A graph whose reshape fixes the batch: the error names the node, and the hint says what to do.
  Graph r("fixed");
  Tensor x = r.input("x", {2, 8});
  r.output(r.reshape(x, {2, 2, 4}, "flatten_2"), "y");
  ASSERT_TRUE(save_graph(r, path("fixed.json")).ok());
  Proc fixed = kiln({"profile", path("fixed.json")});
  EXPECT_EQ(fixed.code, 1);
  EXPECT_NE(fixed.err.find("flatten_2"), std::string::npos) << fixed.err;
  EXPECT_NE(fixed.err.find("hint: --batch 2 emulates the graph as it is"), std::string::npos) << fixed.err;
  Proc as_is = kiln({"profile", path("fixed.json"), "--batch", "2", "--json"});
  EXPECT_EQ(as_is.code, 0) << as_is.err;
}

}  // namespace
}  // namespace kiln
