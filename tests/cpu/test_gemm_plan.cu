// sm90_gemm_pick (src/cuda/gemm/sm90_gemm_heuristic.h), the Hopper GEMM engine's tile, ring and
// split choice, as host code on the CPU (built with the CUDA backend; no GPU needed): hand-derived
// plans of bench shapes, then, over a grid of shapes, SM counts and the three recipes, that every
// plan is one the launcher (sm90_gemm.cu) runs rather than refuses: an instantiated tile, K ranges
// of at least two K-blocks, split tiles fewer than the workspace's counters, and a split 256-row
// tile's units all in the last round of the grid, one per CTA (they wait for each other), or a
// last round of owners with CTAs left over for their helpers; and the grouped (MoE) plan's tiles
// and splits.
#include <cinttypes>
#include <cstdio>

#include "check.h"
#include "cuda/common.cuh"
#include "cuda/gemm/sm90_gemm_heuristic.h"

static const char *recipe_name(Sm90Recipe r) {
  return r == Sm90Recipe::kBlockScaledFp8 ? "block-scaled" : r == Sm90Recipe::kScaledFp8 ? "scaled FP8" : "INT8";
}

static bool instantiated(Sm90Recipe r, int bm, int bn) {
  bool ok = false;
#define QF_PLAN_TILE(BM, BN) ok = ok || (bm == BM && bn == BN);
  QF_SM90_GEMM_TILES(QF_PLAN_TILE)
  if (sm90_gemm_wide(r)) QF_SM90_GEMM_WIDE_TILES(QF_PLAN_TILE)
  if (sm90_gemm_narrow(r)) QF_SM90_GEMM_NARROW_TILES(QF_PLAN_TILE)
  if (sm90_gemm_tall(r)) QF_SM90_GEMM_TALL_TILES(QF_PLAN_TILE)
  if (sm90_gemm_tall(r)) QF_SM90_GEMM_TRIPLE_TILES(QF_PLAN_TILE)
  if (sm90_gemm_tall(r)) QF_SM90_GEMM_MID_TILES(QF_PLAN_TILE)
#undef QF_PLAN_TILE
  return ok;
}

// The plan on sms SMs whose DRAM runs at dram_gbps (0: unknown, an H100's plans).
static void expect_on(int sms, double dram_gbps, int64_t M, int64_t N, int64_t K, int bm, int bn, int splits,
                      int64_t whole, int64_t tail_kb = 0) {
  const sm90_gemm_config c = sm90_gemm_pick(M, N, K, sms, Sm90Recipe::kBlockScaledFp8, dram_gbps);
  CHECK(c.block_m == bm && c.block_n == bn && c.splits == splits && c.whole_tiles == whole && c.tail_kb == tail_kb,
        "(%" PRId64 ", %" PRId64 ", %" PRId64 ") on %d SMs at %.0f GB/s: %dx%d split %d, %" PRId64 " whole, owners %" PRId64
        " K-blocks; expected %dx%d split %d, %" PRId64 " whole, owners %" PRId64,
        M, N, K, sms, dram_gbps, c.block_m, c.block_n, c.splits, c.whole_tiles, c.tail_kb, bm, bn, splits, whole, tail_kb);
}

static void expect_at(double dram_gbps, int64_t M, int64_t N, int64_t K, int bm, int bn, int splits, int64_t whole,
                      int64_t tail_kb = 0) {
  expect_on(132, dram_gbps, M, N, K, bm, bn, splits, whole, tail_kb);
}

static void expect(int64_t M, int64_t N, int64_t K, int bm, int bn, int splits, int64_t whole, int64_t tail_kb = 0) {
  expect_at(0.0, M, N, K, bm, bn, splits, whole, tail_kb);
}

int main() {
  // Block-scaled on 132 SMs. M = 1: 33 tiles of 64 x 64, split 3 ways (132 / 33 = 4 fill the
  // SMs; decode takes one range fewer from three on); M = 64 on
  // (7168, 16384): 112 tiles, one wave, unsplit; M = 128 on (32768, 512): 256 tiles of 128 x 128
  // (each unit 4 K-blocks, 256 >= 132 tiles of 128 columns); M = 4096 on (7168, 16384): 256 x 128
  // tiles, 896 of them, whose last round (104 tiles) is more than half the SMs: each of those
  // tiles' owner runs K-blocks [0, 108), a helper the other 20 (28 idle CTAs, 4 helpers each:
  // 128 - 4 x 7 K-blocks over 5 is 20). M = 128:
  // (4096, 7168) one row of 64 128 x 64 tiles split twice; (2112, 7168) two rows of 33 64 x 64
  // tiles split twice (one row of 128 x 64 would take 3 ranges: 99 units against 132); (1536,
  // 7168) one row of 24 128 x 64 tiles split 4 ways (96 units, as many as two rows split twice).
  expect(1, 2112, 7168, 64, 64, 3, 0);
  expect(128, 4096, 7168, 128, 64, 2, 0);
  expect(128, 2112, 7168, 64, 64, 2, 0);
  // On the H200's DRAM (4.8 TB/s) the one row of 128 x 64 in the ranges that fill the SMs: 4, 132
  // units; not on the H100's (3.35 TB/s).
  expect_at(4800.0, 128, 2112, 7168, 128, 64, 4, 0);
  expect_at(4800.0, 96, 2112, 7168, 128, 64, 4, 0);
  expect_at(3350.0, 128, 2112, 7168, 64, 64, 2, 0);
  expect_at(4800.0, 128, 1536, 7168, 128, 64, 4, 0);
  expect_at(4800.0, 128, 4096, 7168, 128, 64, 2, 0);
  // 129-256 rows: one wave of 128 whole 128 x 64 tiles, or on the H200's DRAM 64 tiles of 128 x 128
  // split twice (the same units).
  expect(160, 4096, 7168, 128, 64, 1, 128);
  expect_at(4800.0, 192, 4096, 7168, 128, 128, 2, 0);
  expect_at(4800.0, 160, 4096, 7168, 128, 128, 2, 0);
  // ... but not on units under 56 K-blocks: (256, 4096, 4096 / 6144) keep the whole 128 x 64 tiles,
  // as (192, 4096, 4096) does, over the model's 96 tiles of 64 x 128 (on either DRAM).
  expect_at(4800.0, 256, 4096, 4096, 128, 64, 1, 128);
  expect_at(4800.0, 256, 4096, 6144, 128, 64, 1, 128);
  expect_at(4800.0, 192, 4096, 4096, 128, 64, 1, 128);
  expect(160, 4096, 4096, 128, 64, 1, 128);
  // Up to 128 rows, the rules' ranges over whole tiles on 80 of 132 SMs: (128, 2560, 4096) 40 tiles
  // of 128 x 64 in 3 ranges, (96, 5120, 8192) 40 of 128 x 128 in 3.
  expect(128, 2560, 4096, 128, 64, 3, 0);
  expect(96, 5120, 8192, 128, 128, 3, 0);
  expect(128, 1536, 7168, 128, 64, 4, 0);
  expect(64, 7168, 16384, 64, 64, 1, 112);
  expect(128, 32768, 512, 128, 128, 1, 256);
  expect(4096, 7168, 16384, 256, 128, 2, 792, 108);
  // (1000, 7504, 6208): 236 tiles, the gpu test's tail case (4 helpers a CTA; 49 - 4 K-blocks)
  expect(1000, 7504, 6208, 256, 128, 2, 132, 45);
  // The time model's plans where it puts the rules' at 1.2x its own or more: (384, 1536, 7168),
  // where the rules take 144 tiles of 64 x 64 (a last wave of 12 split 11 ways), runs 36 tiles of
  // 128 x 128 split 3 ways; (512, 576, 7168), 72 whole tiles of 64 x 64 by the rules, 20 tiles of
  // 128 x 64 split 3 ways.
  expect(384, 1536, 7168, 128, 128, 3, 0);
  expect(512, 576, 7168, 128, 64, 3, 0);
  // Past 128 rows a split plan of tiles up to 128 rows at 1.05x: (384, 576, 7168), 54 tiles of
  // 64 x 64 split twice by the rules, 27 tiles of 128 x 64 split 4 ways; 256-row split plans keep
  // 1.1x: (256, 8192, 28672) stays on whole 128 x 128 tiles.
  expect(384, 576, 7168, 128, 64, 4, 0);
  expect(256, 8192, 28672, 128, 128, 1, 128);
  // Against the rules' 256 x 128 tiles no margin, with 128 x 128 tiles streaming the L2 at 10.5
  // TB/s: (512, 10240, 8192), 160 tiles of 256 x 128 (28 split 4 ways) by the rules, 320 of
  // 128 x 128 with the last 56 split twice; (2560, 4096, 4096), 320 of 256 x 128 (56 split
  // twice), 640 whole tiles of 128 x 128.
  expect(512, 10240, 8192, 128, 128, 2, 264);
  expect(2560, 4096, 4096, 128, 128, 1, 640);
  // Ties of equal areas go to 128 x 64 over 64 x 128 past 128 rows too, in the rules ((256, 4096,
  // 512): 128 whole tiles) and in the model ((256, 1280, 8192): 40 tiles split 3 ways); the model
  // takes no 256 x 128 tiles on units of 4 K-blocks in fewer than four waves ((4096, 4096, 512):
  // 1024 whole tiles of 128 x 128).
  expect(256, 4096, 512, 128, 64, 1, 128);
  expect(256, 1280, 8192, 128, 64, 3, 0);
  expect(4096, 4096, 512, 128, 128, 1, 1024);
  // At 129-256 rows the waves model costs a split last wave of tiles up to 128 rows only where the
  // range rule keeps it split: (192, 3072, 1536), 12 K-blocks, one wave of 96 tiles of 128 x 64,
  // not 144 of 64 x 64 (a last wave of 12 that would run whole).
  expect(192, 3072, 1536, 128, 64, 1, 96);
  // 129-1024 rows where 64 x 64 tiles leave SMs idle: 128 x 64 tiles split to fill them, 12
  // K-blocks a range at least ((256, 1024, 7168): 32 tiles, 3 ranges by the model, not 64 tiles of
  // 64 x 64 split twice); not on shorter ranges ((256, 576, 7168) keeps 64 x 64 split 3 ways).
  expect(256, 1024, 7168, 128, 64, 3, 0);
  expect(256, 576, 7168, 64, 64, 3, 0);
  // Block-scaled decode on long K keeps ranges of 8 K-blocks, less one: (1, 576, 7168), 9 tiles of
  // 64 x 64, 6 ranges (14 would fill the SMs, 7 keep 8 K-blocks).
  expect(1, 576, 7168, 64, 64, 6, 0);
  // The L2 term of the model: (256, 2112, 7168) 66 tiles of 128 x 64 split twice, not 132 whole
  // tiles of 64 x 64 (each B tile loaded by four CTAs).
  expect(256, 2112, 7168, 128, 64, 2, 0);
  // 129-256 rows where 64-row tiles make one unsplit wave of three quarters of the SMs or more:
  // 128-row tiles split twice ((192, 2112, 7168): 66 tiles of 128 x 64, not 99 of 64 x 64).
  expect(192, 2112, 7168, 128, 64, 2, 0);
  // Short units past 128 rows in fewer than four waves of 256 x 128 tiles: 128 x 128 ((256, 32768,
  // 512): 512 tiles, 4 K-blocks each); from four waves on, 256 x 128 ((1024, 32768, 512)).
  expect(256, 32768, 512, 128, 128, 1, 512);
  expect(1024, 32768, 512, 256, 128, 1, 1024);
  // Block-scaled 65-128 rows on units of 9-16 K-blocks: rounds of 128 x 64 tiles ((128, 24576,
  // 1536): 384 tiles), not one wave of 128 x 192; on longer units that wave ((128, 24576, 2112),
  // the GPU test's case, 17 K-blocks: 128 tiles).
  expect(128, 24576, 1536, 128, 64, 1, 384);
  expect(128, 24576, 2112, 128, 192, 1, 128);
  // 129-192 rows on long units: one row of 192 x 128 tiles. (192, 7168, 18432), 56 tiles split
  // twice; (160, 36864, 7168), 288 tiles, a last wave of 24 split 5 ways; (192, 10240, 8192), 80
  // whole tiles. Not on short units: (192, 7168, 2048) stays on 128 x 128 tiles.
  expect(192, 7168, 18432, 192, 128, 2, 0);
  expect(160, 36864, 7168, 192, 128, 5, 264);
  expect(192, 10240, 8192, 192, 128, 1, 80);
  expect(192, 7168, 2048, 128, 128, 1, 112);
  // Past 192 rows where the waves model puts them 10% below the others: (576, 36864, 7168), 864
  // whole tiles of 192 x 128; (576, 57344, 8192), 1344, a last wave of 24 split 5 ways.
  expect(576, 36864, 7168, 192, 128, 1, 864);
  expect(576, 57344, 8192, 192, 128, 5, 1320);
  // One wave of 192 x 128 tiles against a round of 128 x 128 tiles and a last one split into short
  // units: (4096, 576, 7168), 110 whole tiles of 192 x 128, not 160 of 128 x 128 with the last 28
  // split 4 ways (14 K-blocks a unit); (384, 7168, 16384), whose split units keep 42 K-blocks,
  // stays on 128 x 128 tiles.
  expect(4096, 576, 7168, 192, 128, 1, 110);
  expect(384, 7168, 16384, 128, 128, 3, 132);
  // A split last wave of 128-row tiles past 128 rows keeps 10 K-blocks a range: (3072, 2112,
  // 7168), 408 tiles of 128 x 128, a last wave of 12 split 5 ways (11 would fill the SMs);
  // (384, 28672, 4096), 3 ways (32 K-blocks); (896, 24576, 1536), 12 K-blocks: whole tiles.
  expect(3072, 2112, 7168, 128, 128, 5, 396);
  expect(384, 28672, 4096, 128, 128, 3, 660);
  expect(896, 24576, 1536, 128, 128, 1, 1344);
  // Decode on 112 SMs: three ranges where three fill the SMs ((64, 2112, 7168), 33 tiles of
  // 64 x 64, not two); 64 x 128 tiles where 64 x 64 ones leave a quarter of the SMs idle and the
  // wider ones' ranges keep 16 K-blocks ((64, 4096, 7168): 32 tiles in 3 ranges, not 64 whole
  // ones; (64, 4096, 4096), 32 K-blocks, keeps them); on 132 SMs (64, 2112, 7168) keeps 3 of the 4
  // that fill them.
  expect_on(112, 4800.0, 64, 2112, 7168, 64, 64, 3, 0);
  expect_on(112, 4800.0, 64, 4096, 7168, 64, 128, 3, 0);
  expect_on(112, 4800.0, 128, 4096, 7168, 128, 128, 3, 0);
  expect_on(112, 4800.0, 64, 4096, 4096, 64, 64, 1, 64);
  expect_on(132, 4800.0, 64, 2112, 7168, 64, 64, 3, 0);
  // A decode plan's split last wave keeps 10 K-blocks a range too: on 80 SMs (64, 24576, 1536),
  // 192 tiles of 64 x 128 (a last wave of 32), whole tiles, not its last wave split twice.
  expect_on(80, 4800.0, 64, 24576, 1536, 64, 128, 1, 192);

  // Decode on a wide weight where the DRAM, not each SM's pull, bounds the stream: 64 x 64 tiles
  // where 64 x 128 ones fill 15/16 of the SMs or more on units of 32 K-blocks or more ((1, 28672,
  // 4096), 448 tiles, a last wave of 52 split twice; (64, 57344, 8192), 896 whole tiles), on 132
  // SMs at 4.8 TB/s and at an unknown (the H100's) rate; not on 112 SMs at 4.8 TB/s (43 GB/s an SM),
  // nor at K = 512, nor where 64 x 128 tiles leave more SMs idle ((1, 14336, 4096), 112 tiles).
  expect_on(132, 4800.0, 1, 28672, 4096, 64, 64, 2, 396);
  expect_on(132, 0.0, 1, 28672, 4096, 64, 64, 2, 396);
  expect_on(132, 4800.0, 64, 57344, 8192, 64, 64, 1, 896);
  expect_on(112, 4800.0, 1, 28672, 4096, 64, 128, 1, 224);
  expect_on(132, 4800.0, 1, 32768, 512, 64, 128, 1, 256);
  expect_on(132, 4800.0, 1, 14336, 4096, 64, 128, 1, 112);

  // One wave of 128 x 192 tiles at 65-128 rows where 128-column tiles need more than one, N no
  // multiple of 192, where the DRAM bounds the stream: (128, 22016, 7168), 115 tiles (the last one
  // two-thirds full), on 132 SMs at 4.8 TB/s; not on 64 SMs ((128, 10240, 8192): 80 tiles of
  // 128 x 128, a last wave of 16 split 4 ways).
  expect_on(132, 4800.0, 128, 22016, 7168, 128, 192, 1, 115);
  expect_on(64, 4800.0, 128, 10240, 8192, 128, 128, 4, 64);
  // Past 128 rows, one wave of 128 x 192 tiles filling 7/8 of the SMs or more on units of 12-32
  // K-blocks, on 132 SMs at 4.8 TB/s: (256, 11008, 4096) 116 tiles, (1024, 3072, 1536) 128; not
  // on the H100's DRAM, on longer units ((256, 11008, 7168)), nor over 192-row tiles ((384, 7168,
  // 1536), 114 of them: 192 x 128 whole).
  expect_on(132, 4800.0, 256, 11008, 4096, 128, 192, 1, 116);
  expect_on(132, 4800.0, 1024, 3072, 1536, 128, 192, 1, 128);
  expect_on(132, 3350.0, 1024, 3072, 1536, 256, 128, 1, 96);
  expect_on(132, 4800.0, 256, 11008, 7168, 128, 128, 3, 132);
  expect_on(132, 4800.0, 384, 7168, 1536, 192, 128, 1, 112);

  // The rules' one row of 192 x 128 tiles split at 129-192 rows keeps a 1.25x margin against the
  // model: (192, 8192, 22016), 64 tiles split twice, not 128 x 128 tiles whole; (160, 24576, 4096),
  // 192 tiles with a last wave of 60 split twice.
  expect_on(132, 4800.0, 192, 8192, 22016, 192, 128, 2, 0);
  expect(160, 24576, 4096, 192, 128, 2, 132);
  // A split last wave of 192 x 128 tiles keeps 7 K-blocks a range: (192, 18432, 7168), 144 tiles,
  // the last 12 in 8 ranges; (576, 24576, 1536) on 112 SMs runs its last wave whole.
  expect(192, 18432, 7168, 192, 128, 8, 132);
  // One row of 192 x 128 tiles filling a wave or more on whole units of 24 K-blocks or more:
  // (192, 28672, 3584), 224 tiles (not 256 x 128 ones).
  expect(192, 28672, 3584, 192, 128, 1, 224);
  expect_on(112, 0.0, 576, 24576, 1536, 192, 128, 1, 576);
  // On a fast DRAM, a row of 192 x 128 tiles fewer than the SMs that decode splits leave whole, on
  // units of 16 K-blocks: (192, 16384, 2048), 128 tiles (the H100's DRAM: 128 of 256 x 128).
  expect_on(132, 4800.0, 192, 16384, 2048, 192, 128, 1, 128);
  expect_on(132, 3350.0, 192, 16384, 2048, 256, 128, 1, 128);
  // Split 3 ways or more on units of 20 K-blocks: (144, 4096, 14336), 32 tiles in 4 ranges (not
  // 128 x 128 tiles split twice, which the H100's DRAM keeps); split twice it stays on 128 x 128
  // tiles whole ((192, 5120, 5120) on 112 SMs).
  expect_on(132, 4800.0, 144, 4096, 14336, 192, 128, 4, 0);
  expect_on(132, 3350.0, 144, 4096, 14336, 128, 128, 2, 0);
  expect_on(112, 4800.0, 192, 5120, 5120, 128, 128, 1, 80);
  // On a fast DRAM, one wave of whole 256 x 128 tiles filling more than half the SMs on short units
  // at 129-256 rows: one wave of 128 x 192 tiles where they fit ((256, 9216, 2048), 96), else
  // 128 x 128 tiles whole ((256, 16384, 2048), 256; not on 56 K-blocks: (256, 16384, 7168)).
  expect_on(132, 4800.0, 256, 9216, 2048, 128, 192, 1, 96);
  expect_on(132, 4800.0, 256, 16384, 2048, 128, 128, 1, 256);
  expect_on(132, 4800.0, 256, 16384, 7168, 256, 128, 1, 128);
  expect_on(132, 3350.0, 256, 16384, 2048, 256, 128, 1, 128);
  // On a fast DRAM past 128 rows, whole 128 x 128 tiles on at most half the SMs: 128 x 64 tiles in
  // one wave ((512, 2048, 2048), 128 of them).
  expect_on(132, 4800.0, 512, 2048, 2048, 128, 64, 1, 128);
  expect_on(132, 3350.0, 512, 2048, 2048, 128, 128, 1, 64);
  // ... and whole 128 x 128 tiles in one partial wave, 128 x 64 ones more than a wave: 64 x 128
  // tiles where they fit one ((320, 3072, 2048): 120 of them, not 72 of 128 x 128).
  expect_on(132, 4800.0, 320, 3072, 2048, 64, 128, 1, 120);
  expect_on(132, 3350.0, 320, 3072, 2048, 128, 128, 1, 72);
  // At 129-256 rows on a fast DRAM the rules' split stands against the model's same tiles split
  // fewer ways: (192, 1024, 7168), 32 tiles of 128 x 64 in 4 ranges, not 3 (the H100's DRAM: 3).
  expect_on(132, 4800.0, 192, 1024, 7168, 128, 64, 4, 0);
  expect_on(132, 3350.0, 192, 1024, 7168, 128, 64, 3, 0);
  // At 65-128 rows on a fast DRAM the rules' split stands against whole tiles in one wave where its
  // units are as many and keep 16 K-blocks: (96, 3584, 4096), 28 tiles of 128 x 64 in 2 ranges, not
  // 112 of 64 x 64 whole (the H100's DRAM: those); (96, 3072, 3072), 12 K-blocks a range, keeps them.
  expect_on(132, 4800.0, 96, 3584, 4096, 128, 64, 2, 0);
  expect_on(132, 3350.0, 96, 3584, 4096, 64, 64, 1, 112);
  expect_on(132, 4800.0, 96, 3072, 3072, 64, 64, 1, 96);
  // 65-128 rows, whole 128 x 128 tiles on at most two thirds of the SMs, units of 64 K-blocks or
  // more: one wave of 128 x 96 tiles (an H200's DRAM); 2048 of K (16 K-blocks) keeps 128 x 128
  expect_on(132, 4800.0, 96, 10240, 8192, 128, 96, 1, 107);
  expect_on(132, 4800.0, 128, 11008, 14336, 128, 96, 1, 115);
  expect_on(132, 4800.0, 128, 10240, 2048, 128, 128, 1, 80);

  const Sm90Recipe recipes[] = {Sm90Recipe::kBlockScaledFp8, Sm90Recipe::kScaledFp8, Sm90Recipe::kScaledInt8};
  const int64_t Ms[] = {1,   3,   16,  33,  64,  65,  100,  128,  129,  160,  192,
                        200, 256, 300, 384, 512, 576, 1000, 2048, 4096, 4097, 8192};
  const int64_t Ns[] = {16, 48, 128, 208, 1024, 2112, 4096, 6144, 7168, 24576, 28672, 32768, 57344};
  const int64_t Ks[] = {16, 128, 512, 576, 1536, 2048, 4096, 7168, 7296, 16384, 28672};
  const int smss[] = {8, 66, 78, 114, 132};
  for (double dram : {0.0, 4800.0})  // (unknown or an H100's DRAM; an H200's)
    for (Sm90Recipe r : recipes)
      for (int sms : smss)
        for (int64_t M : Ms)
          for (int64_t N : Ns)
            for (int64_t K : Ks) {
              const sm90_gemm_config c = sm90_gemm_pick(M, N, K, sms, r, dram);
              const int64_t num_kb = (K + 127) / 128;
              const int64_t tiles = (M + c.block_m - 1) / c.block_m * ((N + c.block_n - 1) / c.block_n);
              const int64_t units = c.whole_tiles + (tiles - c.whole_tiles) * c.splits;
              const int64_t grid = units < sms ? units : sms;
              char what[160];
              snprintf(what, sizeof what, "%s (%" PRId64 ", %" PRId64 ", %" PRId64 ") on %d SMs at %.0f GB/s: %dx%d, split %d",
                       recipe_name(r), M, N, K, sms, dram, c.block_m, c.block_n, c.splits);
              CHECK(instantiated(r, c.block_m, c.block_n), "%s: no such tile", what);
              CHECK(c.splits >= 1 && c.whole_tiles >= 0 && c.whole_tiles <= tiles && (c.splits > 1 || c.whole_tiles == tiles),
                    "%s: %" PRId64 " whole tiles of %" PRId64, what, c.whole_tiles, tiles);
              if (c.splits > 1) {
                CHECK(num_kb / c.splits >= 2, "%s: K ranges under two K-blocks (%" PRId64 ")", what, num_kb);
                CHECK(tiles - c.whole_tiles <= kQfWorkspaceCounters, "%s: %" PRId64 " split tiles", what, tiles - c.whole_tiles);
              }
              if (c.tail_kb > 0) {
                CHECK(c.block_m > 128 && c.splits == 2 && c.whole_tiles % grid == 0 && tiles - c.whole_tiles < grid &&
                          tiles > c.whole_tiles && c.tail_kb >= 2 && num_kb - c.tail_kb >= 2,
                      "%s: %" PRId64 " owners of %" PRId64 " K-blocks (of %" PRId64 ") after %" PRId64 " whole tiles on %" PRId64
                      " CTAs", what, tiles - c.whole_tiles, c.tail_kb, num_kb, c.whole_tiles, grid);
              } else if (c.block_m == 256 && c.splits > 1) {
                CHECK(c.whole_tiles % grid == 0 && units - c.whole_tiles <= grid,
                      "%s: %" PRId64 " split units not in the last round of %" PRId64 " CTAs", what, units - c.whole_tiles, grid);
                CHECK(sm90_gemm_tall_share_fits(c.splits, sm90_gemm_stages(256, 128, 2)), "%s: shares too large", what);
              }
            }
  // The grouped (MoE) plan: 128-row tiles of 64 or 128 columns; the masked layout never split.
  for (int sms : smss)
    for (int64_t M : Ms)
      for (int64_t N : Ns)
        for (int64_t K : Ks)
          for (int64_t masked : {int64_t{0}, int64_t{8}}) {
            const sm90_gemm_config c = sm90_gemm_pick_grouped(M, N, K, sms, masked);
            const int64_t tiles = (M + 127) / 128 * ((N + c.block_n - 1) / c.block_n);
            CHECK(c.block_m == 128 && (c.block_n == 64 || c.block_n == 128) && instantiated(Sm90Recipe::kBlockScaledFp8, 128,
                  c.block_n), "grouped (%" PRId64 ", %" PRId64 ", %" PRId64 "): %dx%d", M, N, K, c.block_m, c.block_n);
            CHECK(c.splits == 1 ? c.whole_tiles == tiles
                                : masked == 0 && (K + 127) / 128 / c.splits >= 2 && c.whole_tiles == tiles - tiles % sms,
                  "grouped (%" PRId64 ", %" PRId64 ", %" PRId64 ") masked %" PRId64 ": split %d, %" PRId64 " whole of %" PRId64,
                  M, N, K, masked, c.splits, c.whole_tiles, tiles);
          }
  return check_finish("test_gemm_plan");
}
