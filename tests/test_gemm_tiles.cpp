// The GEMM tile and residency choice (codegen/family_gemm.h's pick_tiles) against the rules it is built on
// (include/kiln/occupancy.h): every pinned residency is exactly what the launch gets, and the 23 distinct
// convolutions of ResNet-50 at batch 32 fill the waves of an H200's 132 SMs. (That the tiles compute what
// the reference does: tests/test_codegen_conv.cpp and test_codegen_matmul.cpp, on the emulator.)
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "codegen/family_gemm.h"
#include "kiln/occupancy.h"
#include "tools/bench/bench_suites.h"

namespace kiln {
namespace {

using codegen::GemmTiles;
using codegen::gemm_glue::pick_tiles;

int64_t conv_rows(const bench::ConvShape& s, int64_t n) {
  const int64_t p = (s.H + 2 * s.pad - s.R) / s.stride + 1, q = (s.W + 2 * s.pad - s.S) / s.stride + 1;
  return n * p * q;
}

// Blocks per SM of the tile as launched, for the fewest and the most registers its launch bounds allow (a
// generic kernel's are for more blocks than it is launched at: its pad keeps the rest off).
void expect_residency(const Target& t, const GemmTiles& g) {
  const int64_t smem = g.smem_bytes(2) + g.pad_smem;
  const int cap = max_registers(t, g.threads(), g.launch_bounds_blocks());  // what ptxas may use
  int min_registers = 0;
  for (const auto& tile : codegen::gemm_glue::kTensorCoreTiles) {
    if (tile.rows == g.bm && tile.tm == g.tm && tile.tn == g.tn) min_registers = tile.min_registers;
  }
  ASSERT_GT(min_registers, 0) << "not one of the tensor-core tiles: " << g.bm << " rows, " << g.tm << "x" << g.tn;
  ASSERT_GE(cap, min_registers);
  EXPECT_EQ(occupancy(t, g.threads(), cap, smem).blocks_per_sm, g.blocks_per_sm);
  EXPECT_EQ(occupancy(t, g.threads(), 32, smem).blocks_per_sm, g.blocks_per_sm) << "not pinned from above";
  EXPECT_GE(g.warps() * g.blocks_per_sm, codegen::gemm_glue::kMinWarpsPerSm);
}

TEST(GemmTiles, ResNet50ConvsAtBatch32FillTheWaves) {
  auto shapes = bench::resnet50_conv_shapes(KILN_SOURCE_DIR);
  ASSERT_TRUE(shapes.ok()) << shapes.status().message();
  ASSERT_EQ(shapes->size(), 23u);
  const Target& h200 = default_target();
  int filled = 0, split = 0;
  for (const bench::ConvShape& s : *shapes) {
    const int64_t m = conv_rows(s, 32);
    SCOPED_TRACE(bench::conv_label(s, 32, DType::bf16) + " m " + std::to_string(m));
    const int64_t kdim = s.C * s.R * s.S;
    const GemmTiles g = pick_tiles(m, s.K, 1, DType::bf16, h200, 0, {}, kdim);
    EXPECT_EQ(g.main_loop, codegen::MainLoop::tensor_core);
    expect_residency(h200, g);
    const int64_t tiles = (m + g.bm - 1) / g.bm * ((s.K + g.bn - 1) / g.bn);
    const double tail = waves(h200, tiles * g.splits, g.blocks_per_sm).tail_efficiency;
    EXPECT_GE(tail, codegen::gemm_glue::kGoodTail);
    filled += tail >= codegen::gemm_glue::kGoodTail ? 1 : 0;
    if (m == 1568 && s.K == 512) {
      // 1568 rows x 512 channels: 104, 200 or 392 tiles of 128, 64 or 32 rows, and no residency of at least
      // 8 warps per SM fills 132 SMs' waves to 0.85 with them unsplit (at best 104 of 132). Split-K: 5 x 104
      // blocks of the 128-row tile at 2 per SM, 520 of 528 slots.
      EXPECT_EQ(g.bm, 128);
      EXPECT_EQ(g.warps(), 4);
      EXPECT_EQ(g.blocks_per_sm, 2);
      EXPECT_EQ(g.splits, 5);
      EXPECT_NEAR(tail, 520.0 / 528, 1e-9);
      EXPECT_EQ(codegen::gemm_glue::split_scratch(g, m, s.K, 1).partials_bytes, int64_t{104} * 5 * 128 * 64 * 4);
      ++split;
    } else {
      EXPECT_EQ(g.splits, 1) << "tiles that fill the waves are not split";
    }
    // Without the reduction's length (a pool epilogue, matmul), nothing is split.
    EXPECT_EQ(pick_tiles(m, s.K, 1, DType::bf16, h200).splits, 1);
  }
  EXPECT_EQ(filled, 23);
  EXPECT_EQ(split, 3);
}

// Split-K's limits: at most kMaxSplits, each of at least kMinSplitSlices slices and none empty; a reduction
// too short to split keeps the best unsplit tile.
TEST(GemmTiles, SplitKLimits) {
  using codegen::gemm_glue::kMaxSplits;
  using codegen::gemm_glue::kMinSplitSlices;
  const Target& h200 = default_target();
  int split = 0;
  for (const int64_t kdim : {int64_t{64}, int64_t{200}, int64_t{576}, int64_t{1152}, int64_t{4608}, int64_t{1} << 20}) {
    for (const int64_t m : {1568, 3136, 6272}) {
      for (const int64_t n : {192, 512}) {
        SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n) + " k " + std::to_string(kdim));
        const GemmTiles g = pick_tiles(m, n, 1, DType::bf16, h200, 0, {}, kdim);
        const int64_t slices = (kdim + g.bk - 1) / g.bk;
        EXPECT_LE(g.splits, kMaxSplits);
        if (g.splits == 1) continue;
        ++split;
        EXPECT_GE(slices, g.splits * kMinSplitSlices);
        EXPECT_LT((g.splits - 1) * ((slices + g.splits - 1) / g.splits), slices);
        const int64_t tiles = (m + g.bm - 1) / g.bm * ((n + g.bn - 1) / g.bn);
        EXPECT_GE(waves(h200, tiles * g.splits, g.blocks_per_sm).tail_efficiency, codegen::gemm_glue::kGoodTail);
        // An unsplit pick of the same tile would not have filled the waves.
        EXPECT_LT(waves(h200, tiles, g.blocks_per_sm).tail_efficiency, codegen::gemm_glue::kGoodTail);
      }
    }
  }
  EXPECT_GE(split, 6);
  // 64 of k is 2 slices: no split, the unsplit best (the 1568 x 512 pick without split-K).
  const GemmTiles short_k = pick_tiles(1568, 512, 1, DType::bf16, h200, 0, {}, 64);
  EXPECT_EQ(short_k.splits, 1);
  EXPECT_EQ(short_k, pick_tiles(1568, 512, 1, DType::bf16, h200));
}

// Shapes that land on each tile and on pinned and unpinned residencies, at sm_90 and sm_80 (less shared
// memory per SM): the residency is what occupancy says, and the 128-row tile is taken whenever it fills.
TEST(GemmTiles, PinnedResidencyIsExact) {
  for (const char* name : {"h200", "a100", "a10"}) {
    const Target t = *target_named(name);
    SCOPED_TRACE(name);
    for (const int64_t m : {1568, 6272, 25088, 100352, 401408}) {
      for (const int64_t n : {64, 256, 512, 2048}) {
        SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n));
        const GemmTiles g = pick_tiles(m, n, 1, DType::f16, t);
        if (g.tn == 4) {  // the simple tiles: too few rows for a 32-row tile per SM
          EXPECT_LT((m + 31) / 32 * ((n + 63) / 64), t.sm_count);
          continue;
        }
        expect_residency(t, g);
        const int64_t tiles128 = (m + 127) / 128 * ((n + 63) / 64);
        if (tiles128 >= int64_t{8} * 3 * t.sm_count) {  // 8+ waves: the tail is small at any residency
          EXPECT_EQ(g.bm, 128);
        }
      }
    }
  }
}

// Too few rows for a 32-row tile per SM, f32, or at most 32 columns: the 4 x 4 tiles at 2 blocks per SM.
TEST(GemmTiles, SmallNarrowAndF32ProblemsKeepTheSimpleTiles) {
  const Target& h200 = default_target();
  for (const GemmTiles& g : {pick_tiles(37, 45, 1, DType::bf16, h200), pick_tiles(100352, 32, 1, DType::bf16, h200),
                             pick_tiles(100352, 256, 1, DType::f32, h200)}) {
    EXPECT_EQ(g.tm, 4);
    EXPECT_EQ(g.tn, 4);
    EXPECT_EQ(g.blocks_per_sm, 2);
    EXPECT_EQ(g.pad_smem, 0);
  }
}

TEST(GemmTiles, ResidencyPadAndRegisterCap) {
  const Target& h200 = default_target();
  // 256 threads: 2 blocks allow 128 registers, 3 allow 80 (per warp in units of 256), 4 allow 64.
  EXPECT_EQ(max_registers(h200, 256, 2), 128);
  EXPECT_EQ(max_registers(h200, 256, 3), 80);
  EXPECT_EQ(max_registers(h200, 256, 4), 64);
  EXPECT_EQ(max_registers(h200, 1024, 2), 32);
  EXPECT_EQ(max_registers(h200, 1024, 3), 0);  // 3 x 1024 threads never fit
  EXPECT_EQ(max_registers(h200, 2048, 1), 0);  // nor does a block of 2048
  // 24 KiB blocks: 9 fit in 228 KiB; pinned to 3, a fourth must not.
  const int64_t pad = residency_pad(h200, 24576, 3);
  EXPECT_GT(pad, 0);
  EXPECT_EQ(occupancy(h200, 128, 32, 24576 + pad).blocks_per_sm, 3);
  EXPECT_EQ(residency_pad(h200, 24576, 9), 0);   // shared memory already stops at 9
  EXPECT_EQ(residency_pad(h200, 24576, 12), 0);  // 12 do not fit
  EXPECT_EQ(residency_pad(h200, 100000, 2), 0);  // 2 is the most already
}

// A shape-generic plan's tiles (gemm_glue::generic_or_own) for the 23 ResNet-50 convolutions at batches 1, 8,
// 32 and 64 on an H200 and an A100: the generic kernel (block tile, warps, stages, launch bounds) is one per
// conv whatever the batch; it is taken exactly where tile_cost puts it within 10 % of the batch's own tile, at a
// residency that occupancy confirms; otherwise the batch's own tile is, and the choice says by how much.
TEST(GemmTiles, GenericTilesServeTheBatchesTheyFit) {
  using codegen::gemm_glue::generic_or_own;
  using codegen::gemm_glue::kGenericSlack;
  using codegen::gemm_glue::kSaturatingRows;
  using codegen::gemm_glue::tile_cost;
  auto shapes = bench::resnet50_conv_shapes(KILN_SOURCE_DIR);
  ASSERT_TRUE(shapes.ok()) << shapes.status().message();
  for (const char* name : {"h200", "a100"}) {
    const Target t = *target_named(name);
    std::map<int64_t, int> generic_at;  // batch -> convs that take the generic kernel
    for (const bench::ConvShape& s : *shapes) {
      const GemmTiles generic = pick_tiles(kSaturatingRows, s.K, 1, DType::f16, t);
      ASSERT_EQ(generic.splits, 1);
      std::optional<GemmTiles> source;  // the generic kernel's source-determining fields, as first taken
      for (const int64_t n : {1, 8, 32, 64}) {
        const int64_t m = conv_rows(s, n);
        SCOPED_TRACE(std::string(name) + " " + bench::conv_label(s, n, DType::f16) + " m " + std::to_string(m));
        const GemmTiles own = pick_tiles(m, s.K, 1, DType::f16, t, 0, {}, s.C * s.R * s.S);
        codegen::TileChoice c;
        const GemmTiles got = generic_or_own(generic, own, m, s.K, 1, t, 0, TilePolicy::generic, &c);
        ASSERT_TRUE(c.planned);
        EXPECT_NEAR(c.generic_over_own, tile_cost(c.generic_tiles, m, s.K, 1, t) / tile_cost(own, m, s.K, 1, t), 1e-12);
        if (!c.generic) {
          EXPECT_GT(c.generic_over_own, kGenericSlack);
          EXPECT_EQ(got, own);
          // generic_only takes it all the same (what it would cost: profile_bench --suite generic).
          codegen::TileChoice forced;
          EXPECT_EQ(generic_or_own(generic, own, m, s.K, 1, t, 0, TilePolicy::generic_only, &forced),
                    forced.generic_tiles);
          EXPECT_TRUE(forced.generic);
          continue;
        }
        ++generic_at[n];
        EXPECT_LE(c.generic_over_own, kGenericSlack);
        EXPECT_EQ(got, c.generic_tiles);
        expect_residency(t, got);
        EXPECT_EQ(got.launch_bounds_blocks(), generic.blocks_per_sm) << "compiled for the generic residency";
        GemmTiles fields = got;  // what launching changes: the residency and its pad
        fields.blocks_per_sm = generic.blocks_per_sm, fields.bounds_blocks_per_sm = 0, fields.pad_smem = 0;
        if (!source) source = fields;
        EXPECT_EQ(fields, *source) << "another generic kernel for this conv";
      }
    }
    // At batch 1 every conv has a grid of at most a few waves, and its own tiles fill them far better.
    EXPECT_EQ(generic_at[1], 0) << name;
    EXPECT_GE(generic_at[64], 20) << name;
  }
}

}  // namespace
}  // namespace kiln
