// The emulator's access counters (LaunchOptions::profile) on kernels whose answers are known by hand:
// sectors per request of coalesced, strided and vector accesses, bank wavefronts of shared stores at
// strides, broadcasts, ldmatrix on unpadded and padded tiles and cp.async stores, requests of partial
// warps, compulsory DRAM traffic and mma counts. Every kernel's output is checked too (random inputs).
#include <gtest/gtest.h>

#include <algorithm>

#include "emu/emu_test_util.h"

namespace kiln::emu::test {
namespace {

#define KILN_COMPILE(var, file, ...)                       \
  auto var##_r = compile_file(file, __VA_ARGS__);          \
  ASSERT_TRUE(var##_r.ok()) << var##_r.status().message(); \
  const Module& var = **var##_r

const std::string& source() {
  static const std::string s = kernel_source("profile_patterns.cu");
  return s;
}

// A copy of `v` at a 256-byte aligned address (as kiln's allocations are): std::vector's 16-byte alignment
// would split 128-byte runs across more sectors.
template <class T>
struct Aligned {
  explicit Aligned(const std::vector<T>& v) : store(v.size() + 256 / sizeof(T)), n(v.size()) {
    const auto a = reinterpret_cast<uintptr_t>(store.data());
    p = reinterpret_cast<T*>((a + 255) / 256 * 256);
    std::copy(v.begin(), v.end(), p);
  }
  Aligned(const Aligned&) = delete;
  Arg arg(std::string name) const { return Arg::buffer(p, n * sizeof(T), std::move(name)); }
  std::vector<T> vec() const { return {p, p + n}; }
  T operator[](size_t i) const { return p[i]; }
  std::vector<T> store;
  T* p = nullptr;
  size_t n = 0;
};

LaunchOptions profiled(Schedule s = Schedule::forward) {
  LaunchOptions o = checked(s);
  o.profile = true;
  return o;
}

// The site at the line of `marker` with `op`, or a failed assertion.
const AccessSite* site_at(const KernelProfile& p, const std::string& marker, AccessOp op, int occurrence = 1) {
  const int line = line_of(source(), "MARK " + marker, occurrence);
  for (const AccessSite& s : p.sites) {
    if (s.file == "profile_patterns.cu" && s.line == line && s.op == op) return &s;
  }
  ADD_FAILURE() << "no " << access_op_name(op) << " site at profile_patterns.cu:" << line << " (" << marker << ")";
  return nullptr;
}

TEST(EmuProfile, CoalescedCopyTakesFourSectorsPerRequest) {
  KILN_COMPILE(m, "profile_patterns.cu", {"copy_f32"});
  const int n = 1000;  // 4 blocks of 256, the last warp partial (1000 = 31 * 32 + 8)
  const Aligned in(random_floats(n, 1));
  for (Schedule s : kSchedules) {
    const Aligned out(std::vector<float>(n, 0.0f));
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "copy_f32", {4}, {256}, 0, {in.arg("in"), out.arg("out"), Arg::value(n)}, profiled(s), &r));
    EXPECT_EQ(out.vec(), in.vec());
    ASSERT_TRUE(r.profile.has_value());
    const KernelProfile& p = *r.profile;
    const AccessSite* ld = site_at(p, "copy", AccessOp::load);
    const AccessSite* st = site_at(p, "copy", AccessOp::store);
    ASSERT_TRUE(ld && st);
    // 31 full warps (4 sectors each) and one of 8 lanes (32 bytes: 1 sector).
    EXPECT_EQ(ld->requests, 32u);
    EXPECT_EQ(ld->lanes, 1000u);
    EXPECT_EQ(ld->bytes, 4000u);
    EXPECT_EQ(ld->unique_bytes, 4000u);
    EXPECT_EQ(ld->sectors, 31u * 4 + 1);
    EXPECT_EQ(st->sectors, 31u * 4 + 1);
    // 128 consecutive bytes are one wavefront of L1's data banks; the partial warp's 32 bytes another.
    EXPECT_EQ(ld->data_wavefronts, 32u);
    EXPECT_EQ(st->data_wavefronts, 32u);
    EXPECT_DOUBLE_EQ(ld->sector_efficiency(), 1.0);
    EXPECT_EQ(ld->waste_bytes(), 0u);
    EXPECT_EQ(p.blocks, 4u);
    ASSERT_EQ(p.buffers.size(), 2u);
    EXPECT_EQ(p.buffers[0].name, "in");
    EXPECT_EQ(p.buffers[0].read_sectors, 125u);  // 4000 bytes
    EXPECT_EQ(p.buffers[0].written_sectors, 0u);
    EXPECT_EQ(p.buffers[1].written_sectors, 125u);
    EXPECT_EQ(p.dram_bytes(), 8000u);
    EXPECT_EQ(p.load_sectors(), 125u);
    EXPECT_EQ(p.store_requests(), 32u);
  }
}

TEST(EmuProfile, StrideTwoReadTakesEightSectorsPerRequest) {
  KILN_COMPILE(m, "profile_patterns.cu", {"stride2_f32"});
  const int n = 512;
  const Aligned in(random_floats(2 * n, 2));
  const Aligned out(std::vector<float>(n, 0.0f));
  LaunchReport r;
  KILN_ASSERT_OK(launch(m, "stride2_f32", {2}, {256}, 0, {in.arg("in"), out.arg("out"), Arg::value(n)}, profiled(), &r));
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], in[2 * i]) << i;
  const AccessSite* ld = site_at(*r.profile, "stride2", AccessOp::load);
  ASSERT_TRUE(ld);
  EXPECT_EQ(ld->requests, 16u);
  EXPECT_DOUBLE_EQ(ld->sectors_per_request(), 8.0);
  EXPECT_DOUBLE_EQ(ld->sector_efficiency(), 0.5);
  EXPECT_EQ(ld->waste_bytes(), 16u * 128);
  // Every other word of 256 bytes: lanes l and l + 16 share a bank in two different lines, two wavefronts.
  EXPECT_EQ(ld->data_wavefronts, 16u * 2);
  EXPECT_EQ(r.profile->data_stage_wavefronts(), r.profile->shared_wavefronts() + 16u * 2 + 16u);
  // Every sector of the input is still touched once: the DRAM traffic is the whole input.
  EXPECT_EQ(r.profile->buffers[0].read_sectors, 2u * n * 4 / 32);
  // The strided site is the most wasteful, so it comes first.
  EXPECT_EQ(&r.profile->sites.front(), ld);
}

TEST(EmuProfile, VectorCopyAndRereadsAndPartialWarps) {
  KILN_COMPILE(m, "profile_patterns.cu", {"copy_f32x4", "read_twice", "broadcast_f32", "odd_lanes"});
  {
    const Aligned in(random_floats(4 * 64, 3));
    const Aligned out(std::vector<float>(4 * 64, 0.0f));
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "copy_f32x4", {1}, {64}, 0, {in.arg("in"), out.arg("out"), Arg::value(64)}, profiled(), &r));
    EXPECT_EQ(out.vec(), in.vec());
    const AccessSite* ld = site_at(*r.profile, "copy4", AccessOp::load);
    ASSERT_TRUE(ld);
    EXPECT_EQ(ld->bytes_per_lane, 16);
    EXPECT_DOUBLE_EQ(ld->sectors_per_request(), 16.0);
    EXPECT_DOUBLE_EQ(ld->sector_efficiency(), 1.0);
  }
  {
    const int n = 256;
    const Aligned in(random_floats(n, 4));
    const Aligned out(std::vector<float>(n, 0.0f));
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "read_twice", {1}, {256}, 0, {in.arg("in"), out.arg("out"), Arg::value(n)}, profiled(), &r));
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] + in[n - 1 - i]);
    EXPECT_EQ(r.profile->load_sectors(), 2u * n * 4 / 32);      // L2 -> SM: both reads
    EXPECT_EQ(r.profile->buffers[0].read_sectors, n * 4u / 32);  // DRAM: each sector once
  }
  {
    const Aligned in(random_floats(1, 8));
    const Aligned out(std::vector<float>(32, 0.0f));
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "broadcast_f32", {1}, {32}, 0, {in.arg("in"), out.arg("out")}, profiled(), &r));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(out[i], in[0] * static_cast<float>(i));
    const AccessSite* ld = site_at(*r.profile, "bcast", AccessOp::load);
    ASSERT_TRUE(ld);
    EXPECT_EQ(ld->bytes, 128u);
    EXPECT_EQ(ld->unique_bytes, 4u);
    EXPECT_EQ(ld->sectors, 1u);
    EXPECT_DOUBLE_EQ(ld->sector_efficiency(), 4.0 / 32);
  }
  {
    const Aligned in(random_floats(64, 5));
    const Aligned out(std::vector<float>(32, 0.0f));
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "odd_lanes", {1}, {64}, 0, {in.arg("in"), out.arg("out")}, profiled(Schedule::random), &r));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(out[i], in[2 * i + 1]);
    const AccessSite* ld = site_at(*r.profile, "odd", AccessOp::load);
    ASSERT_TRUE(ld);
    EXPECT_EQ(ld->requests, 2u);  // one per warp, 16 lanes each
    EXPECT_EQ(ld->lanes, 32u);
    EXPECT_DOUBLE_EQ(ld->sectors_per_request(), 4.0);
    EXPECT_DOUBLE_EQ(ld->sector_efficiency(), 0.5);
  }
}

TEST(EmuProfile, SharedStoresAtStridesTakeTheKnownWavefronts) {
  KILN_COMPILE(m, "profile_patterns.cu", {"smem_stride"});
  // stride (in 4-byte words) -> wavefronts: lanes on distinct banks, 2-way, 4-way, 32-way, and the
  // padded stride 33 that is conflict-free again.
  const std::pair<int, uint64_t> cases[] = {{1, 1}, {2, 2}, {4, 4}, {32, 32}, {33, 1}};
  for (const auto& [stride, waves] : cases) {
    std::vector<float> out(32, 0.0f);
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "smem_stride", {1}, {32}, 0, {buf(out, "out"), Arg::value(stride)}, profiled(), &r));
    for (int l = 0; l < 32; ++l) {
      // s[0] = 0 (lane 0); v = s[4 * (l % 8)]: written by lane 4 * (l % 8) / stride when that divides.
      const int word = 4 * (l % 8);
      if (word % stride == 0 && word / stride < 32) {
        ASSERT_EQ(out[l], static_cast<float>(word / stride)) << l;
      }
    }
    const AccessSite* st = site_at(*r.profile, "sts", AccessOp::store);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->space, AccessSpace::shared);
    EXPECT_EQ(st->requests, 1u);
    EXPECT_EQ(st->wavefronts, waves) << "stride " << stride;
    EXPECT_EQ(st->ideal_wavefronts, 1u);
    EXPECT_EQ(st->bank_conflicts(), waves - 1);
    const AccessSite* b = site_at(*r.profile, "broadcast", AccessOp::load);
    const AccessSite* v = site_at(*r.profile, "lds16", AccessOp::load);
    ASSERT_TRUE(b && v);
    EXPECT_EQ(b->wavefronts, 1u);  // every lane reads word 0: one broadcast
    EXPECT_EQ(v->wavefronts, 4u);  // 16-byte reads: four quarter-warp phases, each on all 32 banks
    EXPECT_EQ(v->ideal_wavefronts, 4u);
  }
}

TEST(EmuProfile, LdmatrixConflictsOnUnpaddedRowsAndNoneOnTheGemmStage) {
  KILN_COMPILE(m, "profile_patterns.cu", {"ldmatrix_unpadded", "ldmatrix_stage"});
  {
    std::vector<unsigned> out(128, 0);
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "ldmatrix_unpadded", {1}, {32}, 0, {buf(out, "out")}, profiled(), &r));
    // Lane L's register j holds row L/4, columns 2(L%4), 2(L%4)+1 of matrix j (element values = index).
    for (int l = 0; l < 32; ++l) {
      for (int j = 0; j < 4; ++j) {
        const unsigned row = j % 2 * 8 + l / 4, col = j / 2 * 8 + l % 4 * 2;
        ASSERT_EQ(out[4 * l + j], (row * 32 + col) | ((row * 32 + col + 1) << 16)) << l << " " << j;
      }
    }
    const AccessSite* s = site_at(*r.profile, "ldmatrix", AccessOp::ldmatrix);
    ASSERT_TRUE(s);
    // Rows 64 bytes apart: rows 0, 2, 4, 6 of each matrix start on bank 0, rows 1, 3, 5, 7 on bank 16, so
    // each 8-row phase takes 4 wavefronts: 16 for the x4 where 4 would do.
    EXPECT_EQ(s->requests, 1u);
    EXPECT_EQ(s->wavefronts, 16u);
    EXPECT_EQ(s->ideal_wavefronts, 4u);
    EXPECT_EQ(s->bank_conflicts(), 12u);
  }
  {
    std::vector<unsigned> out(128, 0);
    LaunchReport r;
    KILN_ASSERT_OK(launch(m, "ldmatrix_stage", {1}, {32}, 0, {buf(out, "out")}, profiled(), &r));
    for (const char* marker : {"stage A", "stage B"}) {
      const AccessSite* s = site_at(*r.profile, marker, AccessOp::ldmatrix);
      ASSERT_TRUE(s);
      EXPECT_EQ(s->requests, 2u) << marker;
      EXPECT_EQ(s->wavefronts, 8u) << marker;
      EXPECT_EQ(s->bank_conflicts(), 0u) << marker;
    }
  }
}

TEST(EmuProfile, CpAsyncCountsTheGlobalSourceAndTheSharedDestination) {
  KILN_COMPILE(m, "profile_patterns.cu", {"cp_async_rows"});
  const Aligned in(random_floats(128, 6));
  const Aligned out(std::vector<float>(32, 0.0f));
  LaunchReport r;
  KILN_ASSERT_OK(launch(m, "cp_async_rows", {1}, {32}, 0, {in.arg("in"), out.arg("out")}, profiled(), &r));
  for (int l = 0; l < 32; ++l) ASSERT_EQ(out[l], in[4 * l] + in[4 * l + 1]) << l;
  const AccessSite* src = site_at(*r.profile, "cp dense", AccessOp::cp_async_src);
  const AccessSite* dense = site_at(*r.profile, "cp dense", AccessOp::cp_async_dst);
  const AccessSite* padded = site_at(*r.profile, "cp padded", AccessOp::cp_async_dst);
  ASSERT_TRUE(src && dense && padded);
  EXPECT_EQ(src->space, AccessSpace::global);
  EXPECT_DOUBLE_EQ(src->sectors_per_request(), 16.0);
  EXPECT_EQ(src->data_wavefronts, 0u);  // counted at the shared destination
  EXPECT_EQ(dense->wavefronts, 4u);
  EXPECT_EQ(dense->bank_conflicts(), 0u);
  EXPECT_EQ(padded->wavefronts, 8u);  // two 80-byte rows per quarter-warp overlap on four banks
  EXPECT_EQ(padded->bank_conflicts(), 4u);
}

TEST(EmuProfile, CountsMmaAndIsOffByDefault) {
  KILN_COMPILE(m, "mma_tile.cu", {"mma_tile_bf16"});
  std::vector<unsigned short> a(256, 0x3f80), b(128, 0x3f80);  // bf16 1.0
  auto c = random_floats(128, 7);
  std::vector<float> d(128, 0.0f);
  std::vector<Arg> args{buf(a, "a"), buf(b, "b"), buf(c, "c"), buf(d, "d")};
  LaunchReport r;
  KILN_ASSERT_OK(launch(m, "mma_tile_bf16", {3}, {32}, 0, args, profiled(), &r));
  for (int i = 0; i < 128; ++i) ASSERT_FLOAT_EQ(d[i], c[i] + 16.0f) << i;
  EXPECT_EQ(r.profile->mma, 3u);  // one per warp
  LaunchReport plain;
  KILN_ASSERT_OK(launch(m, "mma_tile_bf16", {1}, {32}, 0, args, checked(Schedule::forward), &plain));
  EXPECT_FALSE(plain.profile.has_value());
}

}  // namespace
}  // namespace kiln::emu::test
