// Tile shape, pipeline depth, raster order and split of the sm_90 GEMM engine, chosen from
// the problem size, the device and the recipe's tiles (sm90_gemm.cuh). Host code only: the
// kernels never see this file's logic, only the compile-time shapes listed here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/gemm/sm90_gemm.cuh"

// The instantiated tile shapes (BLOCK_M, BLOCK_N). BLOCK_M is 64 per consumer warpgroup; BLOCK_N
// divides 128, so that a tile row needs one B scale per K-block. The waves model below weighs these.
#define QF_SM90_GEMM_TILES(X) X(64, 64) X(64, 128) X(128, 64) X(128, 128)
// The wide tiles (FP8 recipes only): a tile row spans two weight-scale blocks; chosen by their own rule.
#define QF_SM90_GEMM_WIDE_TILES(X) X(128, 192)
// The narrow tile (scaled FP8 only, which has no weight-scale blocks); chosen by its own rule.
#define QF_SM90_GEMM_NARROW_TILES(X) X(128, 112)
// The mid tile (block-scaled only; chosen by its own rule): a tile row may straddle two
// weight-scale blocks.
#define QF_SM90_GEMM_MID_TILES(X) X(128, 96)
// The tall tile (block-scaled only): two warpgroups of 128 rows each.
#define QF_SM90_GEMM_TALL_TILES(X) X(256, 128)
// The three-warpgroup tile (block-scaled only): 192 rows, one 64-row warpgroup each, one set.
#define QF_SM90_GEMM_TRIPLE_TILES(X) X(192, 128)
// K-blocks below which the heuristic never takes the 192 x 128 tile past 192 rows: at K = 512 its
// single-set loop lost to 128 x 128 tiles ((384, 32768, 512) 15.4 -> 17.3 us, H100).
constexpr int kSm90TripleMinKb = 8;
// Peak DRAM bandwidth (GB/s) from which the decode rules take the faster memory's plans (the
// H200's 4.8 TB/s against the H100's 3.35; sm90_gemm_pick_by_rules).
constexpr double kSm90FastDramGbps = 4000.0;
// DRAM bandwidth per SM (GB/s) below which the rules count a weight stream as bound by the DRAM
// rather than by each SM's pull (sm90_gemm_pick_by_rules: the block-scaled decode's 64 x 64 tiles
// on wide weights, one wave of 128 x 192 tiles at 65-128 rows; past 128 rows in sm90_gemm_pick):
// the H100's 25 and the H200's 36 on all 132 SMs, not the H200's 43 on a partition of 112. An
// unknown DRAM counts as the H100's.
constexpr double kSm90DramBoundGbpsPerSm = 40.0, kSm90H100DramGbps = 3350.0;
// Whether the DRAM, not each SM's pull, bounds a weight stream on `sms` SMs.
constexpr bool sm90_gemm_dram_bound(double dram_gbps, int sms) {
  return (dram_gbps > 0.0 ? dram_gbps : kSm90H100DramGbps) < kSm90DramBoundGbpsPerSm * sms;
}
// Block-scaled: the fewest K-blocks per range of a split last wave of tiles up to 128 rows
// (sm90_gemm_pick), and of 192-row tiles, whose K-blocks take half as long again.
constexpr int64_t kSm90TailRangeKb = 10, kSm90TailRangeKb192 = 7;
// The most K ranges such a last wave keeps (sm90_gemm_short_tail); under two, it runs whole.
constexpr int64_t sm90_gemm_tail_ranges(int64_t num_kb, int block_m = 128) {
  return num_kb / (block_m == 192 ? kSm90TailRangeKb192 : kSm90TailRangeKb);
}

// Tiles of block_m x block_n that cover an M x N output.
constexpr int64_t sm90_gemm_tiles(int64_t M, int64_t N, int64_t block_m, int64_t block_n) {
  return ((M + block_m - 1) / block_m) * ((N + block_n - 1) / block_n);
}

// Pipeline depth of a tile shape: as many (A, B) stages of 128 K-columns as fit in 208 KB next to
// the D staging tile (16-bit D), at least 4 and at most 12. Only 64 x 64 tiles (the decode tiles)
// reach more than 8: with 12 instead of 8 the weight-streaming shapes at M = 1 and 16 run up to
// 16% faster (H200, A/B repeated; (7168, 16384) at M = 1: 60 -> 54 us), M = 64 and 128 within -3%
// to +14%. The budget was 200 KB; at 208 the 128 x 64 and 64 x 128 tiles take 8 stages instead of
// 7 (208-217 KB in all with their scales and barriers: the 128 x 64 tiles' M = 96-128 rows ran
// 0.2-5.4% faster, the 64 x 128 tiles' long-K plans 2-9%; H200, docs/GEMM.md) and every other
// tile keeps its depth (the 128 x 192 and 192 x 128 tiles 4 next to their 48 KB staging tile).
constexpr int sm90_gemm_stages(int block_m, int block_n, int out_bytes) {
  // 256 x 128: three stages (144 KB) next to the whole 64 KB staging tile (16-bit D), four without
  if (block_m == 256) return out_bytes == 2 ? 3 : 4;
  const int budget = 208 * 1024 - (sm90_gemm_staged(block_n, out_bytes) ? block_m * block_n * 2 : 0);
  const int fit = budget / ((block_m + block_n) * 128);
  // 128 x 96 (no staging tile: 7 fit) on 6: on 7, an unrolled loop of 14 blocks, it ran 15-17%
  // slower (docs/GEMM.md, "128 x 96 tiles")
  if (block_n == 96) return 6;
  return fit < 4 ? 4 : fit < 12 ? fit : 12;
}

// The scaled FP8 recipe's 128 x 128 tiles up to 128 rows (a weight stream) run this many stages
// instead: one more than fits next to the whole staging tile, which then holds one 64-column box
// per warpgroup. H200, two calls of two alternating runs (bench/results/h200-dev-gemm-m128-deep-
// ring-ab.jsonl): (128, 28672, 4096) 37.0 -> 35.9 and 35.7 -> 33.9 us (0.92x -> 0.97x cuBLASLt),
// (128, 8192, 28672) 69.8 -> 67.3 and 67.7 -> 66.8, the other M = 128 rows within 1%. The
// block-scaled recipe lost 3-4% on (7168, 16384) and (32768, 512) that way.
constexpr int kSm90DeepStages128 = 6;

struct sm90_gemm_config {
  int block_m, block_n;
  int stages;        // 0: the tile's sm90_gemm_stages; else kSm90DeepStages128 (128 x 128 only)
  int raster_group;  // tile rows (along M) walked together, so that B tiles are reused from L2
  int splits;        // K-block ranges per split tile (split-K); 1: none
  int64_t whole_tiles;  // the tiles (first in walk order) that run whole: all of them unless split
  int64_t tail_kb;      // 256 x 128 tiles: K-blocks of a last-round tile's owner unit (0: no tail helpers)
};

// K ranges for the tiles of a last wave when more than a wave of tiles leaves one of at most
// sms / den SMs and K has 8 K-blocks or more (0: the last wave runs whole): enough to fill the wave,
// at most num_kb / 2 and 16.
constexpr int64_t sm90_gemm_tail_splits(int64_t tiles, int sms, int64_t num_kb, int64_t den) {
  const int64_t tail = tiles % sms, most = num_kb / 2 < 16 ? num_kb / 2 : 16;
  if (tiles <= sms || tail == 0 || tail * den > sms || num_kb < 8) return 0;
  return sms / tail < most ? sms / tail : most;
}

// The owner's K-blocks of a last-round 256 x 128 tile whose remaining K-blocks a helper runs
// (Sm90Variant::kTallTail; 0: none), where the round leaves more than half the SMs busy (a thin
// one is split evenly: sm90_gemm_tail_splits) and units are long. The CTAs left idle by the round
// run the helpers, `helps` each at most; the owner's range is cut so that it ends with the busiest
// such CTA's last helper, each helper counted kHelperCost K-blocks longer than its range (its
// first loads, its partial's 128 KB store and count; a figure fitted to the sweep below). (4096, 7168, 16384) on 132 SMs: 104 owners
// of [0, 108), 4 helpers on each of 28 CTAs; owners of 104, 108, 112, 116 and 120 K-blocks ran
// 655.5-660.7, 652.4-653.5, 653.1-654.3, 655.8-657.9 and 659.1-659.6 us against 658.7-659.8 us
// for the round of whole tiles (H100, three alternating rounds); (1024, 7168, 16384), 3 helpers
// a CTA and owners of 102, 186.0-186.3 -> 176.9-179.5 us. Not where the helpers' ranges
// would be under 4 K-blocks: (4096, 4096, 7168), 8 helpers a CTA, ran 171 us whole and 191 and
// 212 us with owners of 52 and 48 of its 56 K-blocks.
constexpr int64_t sm90_gemm_tail_owner_kb(int64_t tiles, int sms, int64_t num_kb) {
  constexpr int64_t kHelperCost = 7;
  const int64_t tail = tiles % sms, idle = sms - tail;
  if (tiles <= sms || tail * 2 <= sms || num_kb < kSm90LongUnit) return 0;
  const int64_t helps = (tail + idle - 1) / idle, helper_kb = (num_kb - helps * kHelperCost) / (helps + 1);
  return helper_kb >= 4 ? num_kb - helper_kb : 0;
}

// NOTES: a persistent CTA per SM walks tiles in waves; the cost of a shape is its number of waves
// times the time of one tile, modelled as its MMA work plus a per-row overhead (operand loads and
// FP32 promotion) that makes thin tiles less efficient. Small M (decode) then gets 64-row tiles and,
// when 128-column tiles leave SMs idle, 64-column ones, so that more CTAs stream the weights.
// Where the tiles still leave SMs idle, K is split so that tiles x splits fill them (at least two
// K-blocks per range, at most 16 ranges): a decode GEMM is a stream of B, and every SM must pull
// its share. Likewise a last wave of at most half the SMs (a quarter at M <= 128; at least 8
// K-blocks) runs its tiles split so that they fill the wave: at M = 4096, (N, K) = (2112, 7168)
// has 544 tiles of 128 x 128 on 132 SMs, a fifth wave of 16 tiles, and split 8 ways it ran 10%
// faster (128.9 -> 115.5 us, block-scaled, H200, run twice). For M > 128 the cost counts such a
// wave as that fraction of a wave (plus a tenth for the partial sums): (512, 6144, 4096) FP8 went
// from 64 x 128 tiles in three waves to 128 x 128 tiles in a wave and a half, 37.6 -> 32.0 us; at
// M = 64 and 128 the same costing chose split last waves that ran 4-23% slower, so decode keeps
// whole-wave costing (H200, run twice, bench/results/h200-dev-gemm-tail-costing-ab.jsonl). A tie
// goes to the larger tile: at M = 4096, (N, K) = (2112, 7168) ties 128 x 64 with 128 x 128, and
// 128 x 128 ran 12% faster (two accumulator sets; H200, run twice). Ties of equal areas (64 x 128
// and 128 x 64 at M = 65-128) go to 128 x 64 on the FP8 recipes and keep the first on INT8.
// The FP8 recipes (two_sets: the two-set loop; wide: the 128 x 192 tile) have their own rules at
// 65-128 rows; the block-scaled recipe has the 256 x 128 tile too, costed by the same model
// (its last wave split only where units are long: below).
inline sm90_gemm_config sm90_gemm_pick_by_rules(int64_t M, int64_t N, int64_t K, int sm_count, Sm90Recipe recipe,
                                                 double dram_gbps = 0.0) {
  const bool two_sets = sm90_gemm_two_sets(recipe), wide = sm90_gemm_wide(recipe), tall = sm90_gemm_tall(recipe);
  const int sms = sm_count > 0 ? sm_count : 1;
  const int64_t num_kb = (K + 127) / 128;
  const int64_t most = num_kb / 2 < 16 ? num_kb / 2 : 16;  // K ranges of a split tile, at most
  // Ranges for the tiles of a last wave when more than a wave of tiles leaves one of at most half
  // the SMs for M > 128 and for the block-scaled recipe, a quarter for the others' decode (0: the
  // last wave runs whole). Block-scaled (1 to 128, 57344, 8192), 3.4 waves of 64 x 128 or 128 x 128
  // tiles (a last wave of 52 split twice, from whole): 1.005-1.031x faster on the H100's plan sweep
  // and 1.042-1.054x on the H200's, no other shape of either sweep changing.
  const int64_t tail_den = M > 128 || recipe == Sm90Recipe::kBlockScaledFp8 ? 2 : 4;
  const bool fast_dram = dram_gbps >= kSm90FastDramGbps, dram_bound = sm90_gemm_dram_bound(dram_gbps, sms);
  auto tail_splits = [&](int64_t tiles) { return sm90_gemm_tail_splits(tiles, sms, num_kb, tail_den); };
  // The split of a last wave as the waves model below costs it for tiles up to 128 rows: block-scaled
  // at 129-256 rows, none where sm90_gemm_short_tail would leave fewer than two ranges (K under 20
  // K-blocks), since the plan then runs that wave whole. Costed split, (144-224, 3072, 1536) took 144
  // tiles of 64 x 64 (a last wave of 12) over one wave of 96 of 128 x 64 and ran them in two whole
  // waves, 1.27-1.30x slower; (144-192, 7168, 1536) 128 x 64 over 128 x 128, 1.10x (H200, forced,
  // bench/results/h200-dev-gemm-kept-splits-ab.txt). Past 256 rows the same costing moved 128 x 128
  // plans to 256 x 128 ones that ran 0.96-1.03x, so it stays there.
  auto kept_splits = [&](int64_t tiles) -> int64_t {
    const bool run_whole = recipe == Sm90Recipe::kBlockScaledFp8 && M <= 256 && sm90_gemm_tail_ranges(num_kb) < 2;
    return run_whole ? 0 : tail_splits(tiles);
  };
  sm90_gemm_config best = {128, 128, 0, 8, 1, 0};
  double best_cost = -1.0;
  // A tie goes to the larger tile; on the FP8 recipes at 65-128 rows, between equal areas, to the
  // one tile row (128 x 64, B read once) over two (64 x 128): at M = 128 FP8 (6144, 4096) 16.9 ->
  // 15.6 us, (8192, 8192) 26.7 -> 24.6 us, block-scaled (24576, 1536) 19.8 -> 19.3 us; INT8 ran 2%
  // slower that way and keeps 64 x 128 (H200, read-pass flush, run twice). Block-scaled, past 128
  // rows too (128 x 64 tiles run two accumulator sets): (144-256, 4096, 512) 1.04-1.05x, (448,
  // 2112, 7168) 1.09x, (3584 / 4096, 256, 7168) 1.08x faster (H200, forced plans,
  // bench/results/h200-dev-gemm-plan-ties-ab.txt).
  auto prefer = [&](int bm, int bn) {
    const int area = best.block_m * best.block_n;
    return bm * bn > area || (bm * bn == area && two_sets && M > 64 &&
                              (M <= 128 || recipe == Sm90Recipe::kBlockScaledFp8) && bm > best.block_m);
  };
  // The model's cost of `waves` waves of BM x BN tiles.
  auto cost_of = [](double waves, int bm, int bn) { return waves * (bm * bn + 64.0 * (bm + bn)); };
  // The waves of `tiles` tiles whose last wave is split `split` ways (0: whole): for M > 128 a split
  // last wave counts as 1 / splits of a wave plus a tenth for its partial sums.
  auto waves_of = [&](int64_t tiles, int64_t split) {
    return split ? static_cast<double>(tiles / sms) + 1.0 / split + 0.1 : static_cast<double>((tiles + sms - 1) / sms);
  };
#define QF_SM90_GEMM_TRY(BM, BN)                                                                      \
  {                                                                                                   \
    const int64_t tiles = sm90_gemm_tiles(M, N, BM, BN), split = M > 128 ? kept_splits(tiles) : 0;    \
    const double cost = cost_of(waves_of(tiles, split), BM, BN);                                      \
    if (best_cost < 0.0 || cost < best_cost || (cost == best_cost && prefer(BM, BN))) {                 \
      best_cost = cost;                                                                               \
      best.block_m = BM;                                                                              \
      best.block_n = BN;                                                                              \
    }                                                                                                 \
  }
  QF_SM90_GEMM_TILES(QF_SM90_GEMM_TRY)
#undef QF_SM90_GEMM_TRY
  // 256 x 128 tiles where they cost less: a quarter less operand traffic per product than
  // 128 x 128 (NOTES of sm90_gemm.cuh). Block-scaled M = 4096, five of the six bench shapes
  // 1.7-3.7% faster. Their thin last wave is split as the others' is, where units are long (at
  // least 32 K-blocks): each split unit writes and reads a whole 128 KB fp32 tile, about 10 us
  // (H200, timing-only builds), so (4096, 24576, 1536), split 3 ways, ran 244.5 -> 253.0 us and
  // (2048, 7168, 2048), split 2 ways, 51.5 -> 62.3, while in two calls (4096, 2112, 7168) went
  // 107.7 -> 101.4 and 106.8 -> 99.8 us (16 ways; at most 8 or 4 ran 2% and 7% slower than 16),
  // (2048, 2112, 7168) 60.6 -> 56.8 and 60.4 -> 55.4, (2048, 7168, 16384) 360.7 -> 351.7 and
  // 360.8 -> 346.1 (2 ways, from 128 x 128 tiles; two alternated runs each).
  // (and at most as many ways as a unit's ring holds the shares of, with 16-bit D's three stages)
  auto tall_splits = [&](int64_t tiles) -> int64_t {
    int64_t split = num_kb >= kSm90LongUnit ? tail_splits(tiles) : 0;
    while (split > 1 && !sm90_gemm_tall_share_fits(static_cast<int>(split), sm90_gemm_stages(256, 128, 2))) split--;
    return split > 1 ? split : 0;
  };
  // Not on short units (at most kSm90ShortUnit K-blocks) in fewer than four waves: there 128 x 128
  // tiles, twice as many turns of shorter tiles, ran (160 / 192 / 256 / 512, 32768, 512) 1.05x /
  // 1.06x / 1.10x / 1.04x faster on the H100's plan sweep and 1.04x / 1.05x / 1.09x / 1.04x on the
  // H200's (forced plans, `h200-7faf719-plans.jsonl`); from (768, 32768, 512), 5.8 waves, they tie,
  // and past it the 256 x 128 tiles win (M = 4096 1.08-1.12x).
  if (tall && M > 128) {
    const int64_t tiles = sm90_gemm_tiles(M, N, 256, 128);
    const double cost = cost_of(waves_of(tiles, tall_splits(tiles)), 256, 128);
    if (cost < best_cost) {
      if (num_kb <= kSm90ShortUnit && tiles < 4 * sms) best.block_m = 128, best.block_n = 128;
      else best_cost = cost, best.block_m = 256, best.block_n = 128;
    }
  }
  // Past 192 rows, 192 x 128 tiles (three consumer warpgroups, NOTES of sm90_gemm.cuh) where the
  // model puts them 10% below the others and K has 8 K-blocks or more: rows that are a multiple of
  // 192 but not of 128 or 256 run without padding. On the plan sweep (H100, one round) 15 shapes
  // take them, 1.00-1.25x faster: (576, 36864, 7168) 307.7 -> 246.8 us, (576, 8192, 28672) 264.7
  // -> 212.9, (384, 24576, 1536) 32.8 -> 27.3, (2048, 1536, 7168) 41.6 -> 36.5. At any margin
  // they also took shapes they lost: K = 512 ((384, 32768, 512) 15.4 -> 17.3 us), (384, 10240,
  // 8192) 52.8 -> 58.3, (2048, 7168, 2048) 51.9 -> 53.8 (3.5% below the others by the model).
  if (tall && M > 192 && num_kb >= kSm90TripleMinKb) {
    const int64_t tiles = sm90_gemm_tiles(M, N, 192, 128);
    const double cost = cost_of(waves_of(tiles, tail_splits(tiles)), 192, 128);
    if (1.1 * cost < best_cost) best_cost = cost, best.block_m = 192, best.block_n = 128;
  }
  // K ranges per tile when the tiles leave SMs idle (decode).
  auto decode_splits = [&](int64_t tiles) -> int64_t {
    if (tiles >= sms || num_kb < 4) return 1;
    return sms / tiles < most ? sms / tiles : most;
  };
  // The K ranges a decode plan takes: decode_splits, and for the block-scaled recipe
  // - ranges of 8 K-blocks at least where K has 32 or more. (1 to 64, 576, 7168), 9 tiles of
  //   64 x 64, ran 14 ranges of 4 K-blocks 1.2-1.3x slower than 6 or 8 ranges (the plan sweep,
  //   docs/GEMM.md; two H100 runs and an H200 agreeing); each range's unit pays its start and its
  //   partial's round trip whatever its length.
  // - up to 128 rows, one range fewer than that where it is three or more (fewer, longer units, a
  //   partial fewer for the last unit to add). On the plan sweeps of an H100 and an H200, the 11
  //   and 8 shapes that change 1.026x and 1.020x faster in geometric mean ((64, 2112, 7168) 4 -> 3
  //   ranges 1.026x / 1.030x, (128, 576, 7168) 7 -> 6 1.052x / 1.051x), none more than 1.1%
  //   slower; past 128 rows, where these tiles are several tile rows, 4-9% slower.
  // fill_ranges is the first part alone (the DRAM-rate rule below takes it), decode_ranges both.
  auto fill_ranges = [&](int64_t tiles) -> int64_t {
    const int64_t split = decode_splits(tiles);
    if (recipe != Sm90Recipe::kBlockScaledFp8 || split == 1) return split;
    return num_kb >= 32 && split > num_kb / 8 ? num_kb / 8 : split;
  };
  auto decode_ranges = [&](int64_t tiles) -> int64_t {
    const int64_t split = fill_ranges(tiles);
    return recipe == Sm90Recipe::kBlockScaledFp8 && M <= 128 && split >= 3 ? split - 1 : split;
  };
  // A decode plan's own ranges (block-scaled, up to 128 rows): decode_ranges, but three where three
  // fill the SMs, not two, which leave a third of them idle or more (on 132 SMs at 34-44 tiles,
  // none of the bench's shapes). On green-context partitions of an H200 (bench/plan_ab.py,
  // docs/GEMM.md "Decode plans at fewer SMs") two ranges ran 1.12-1.16x slower than three,
  // (1-128, 2112 / 2048, 7168) on 112 SMs (33 / 32 tiles) and (1-128, 1536, 7168) on 80 (24).
  // (The row rule below compares units by decode_ranges, as it was measured: with three ranges
  // for its two rows (128, 1280, 8192) took 6 ranges of one row, 2-3% slower than its 5 on 132 SMs.)
  auto plan_ranges = [&](int64_t tiles) -> int64_t {
    return recipe == Sm90Recipe::kBlockScaledFp8 && M <= 128 && fill_ranges(tiles) == 3 ? 3 : decode_ranges(tiles);
  };
  bool all_ranges = false;  // the 128 x 64 row below runs fill_ranges, not plan_ranges
  // 65-128 rows on the FP8 recipes: one row of 128 x 128 tiles (the two-set loop) instead of two
  // of 64-row tiles when each of its units still runs 64 K-blocks or more ((128, 7168, 16384)
  // block-scaled 50.5 -> 47.4 us, 0.96x -> 1.02x cuBLASLt; FP8 (128, 8192, 28672) 79.2 -> 77.2 us;
  // forced on units of 8-32 K-blocks it ran 4-34% slower; H200, run twice), or when such tiles
  // fill the SMs unsplit with short units (at most 16 K-blocks): block-scaled (128, 24576, 1536)
  // 19.4 -> 18.3 us (0.88x -> 0.94x) against 128 x 64 tiles in three waves, in three calls; where
  // the tiles need a split, or at 32 K-blocks (FP8 (128, 28672, 4096) 38.4 -> 39.8 us), they lose
  // (H200, bench/results/h200-dev-gemm-m128-*.jsonl). Since the 128 x 64 tiles run two
  // accumulator sets, block-scaled units of 9-16 K-blocks run in rounds of them instead of one
  // wave of 128 x 128 (here: those take units of at most kSm90ShortUnit K-blocks) or 128 x 192
  // (short_rounds, below): their stores leave while later units
  // stream, where a single wave stores all at its end. On the two plan sweeps (H100, H200;
  // `h200-7faf719-plans.jsonl`) (96 / 128, 24576, 1536), three rounds of 128 x 64 against one wave
  // of 128 x 192, 1.077x / 1.066x faster on the H100 and 1.026x / 1.007x on the H200; 128 x 128
  // tiles 0.96-0.91x. At 4 K-blocks ((96 / 128, 32768, 512)) 128 x 128 tiles stay 1.09x (H100) and
  // 1.14-1.17x (H200) faster.
  if (two_sets && M > 64 && M <= 128 && best.block_m * best.block_n < 128 * 128) {
    const int64_t t = (N + 127) / 128;
    if (num_kb / decode_splits(t) >= 64 || (t >= sms && num_kb <= (tall ? kSm90ShortUnit : 16)))
      best.block_m = 128, best.block_n = 128;
  }
  // 65-128 rows on the scaled FP8 recipe: whole 128 x 112 tiles instead of 128 x 128 ones where
  // the busiest SM then has fewer columns to stream and units are long (64 K-blocks or more):
  // (128, 57344, 8192) has 448 tiles of 128 columns on 132 SMs, 52 SMs running four, and 512 of
  // 112, 116 SMs running four of them: 135.4 -> 129.5 and 139.5 -> 133.7 us in two calls (0.98x
  // -> 1.02x and 0.99x -> 1.04x cuBLASLt; H200, each run twice). Not where units are short:
  // (128, 28672, 4096), 32 K-blocks, 36.1 -> 36.9 us. Nor split: block-scaled (128, 7168, 16384),
  // 128 units of 128 x 112 instead of 112 of 128 x 128 (a select per column group picking the
  // weight-scale block), 5% slower.
  if (sm90_gemm_narrow(recipe) && M > 64 && M <= 128 && best.block_m == 128 && best.block_n == 128 && num_kb >= 64) {
    const int64_t t128 = (N + 127) / 128, t112 = (N + 111) / 112;
    if (t112 >= sms && (t112 + sms - 1) / sms * 112 < (t128 + sms - 1) / sms * 128) best.block_n = 112;
  }
  // 65-128 rows on the FP8 recipes, where the two rows of 64 x 64 tiles fit in one wave: one row
  // of 128 x 64 tiles with twice the K ranges instead (B read once, a quarter less operand traffic
  // per product), as long as that is at most two ranges: block-scaled (128, 4096, 7168), two ranges
  // of 128 x 64 against the two rows unsplit, 16.4 -> 15.3 us (H200; on an H100 within 1%), while
  // (128, 2112, 7168), four ranges of 128 x 64 against two of the two rows, ran 11.3 -> 10.6 us on
  // the two rows (H100, three calls; the four-way reduction of a 128 x 64 tile costs it 1.75 us,
  // docs/GEMM.md; an H200 before the lighter split handshake had it the other way, 11.55 -> 11.8).
  // Block-scaled, whatever the ranges, as long as the row's units (decode_ranges) are as many as
  // the two rows': (N, K) = (1536, 7168), 24 tiles in 4 ranges against 48 in 2, 1.05-1.09x faster
  // on an H100 and 1.12-1.15x on an H200 (M = 96 and 128; `h100-dev-gemm-short-rounds-plans.jsonl`
  // and `h200-dev-gemm-short-rounds-plans.jsonl`); not (2112, 7168), 33 tiles in 3 ranges against
  // 66 in 2 (99 SMs against 132): 0.97-0.99x on the H100, 1.02-1.04x on the H200. On a GPU whose
  // DRAM runs at kSm90FastDramGbps or more (the H200's 4.8 TB/s, not the H100's 3.35), the row
  // also where its units are as many with the ranges that fill the SMs, and takes those ranges:
  // (96 / 128, 2112, 7168) 33 tiles in 4 ranges (132 units) against the two rows in 2, 1.09x /
  // 1.05x faster on three H200 plan sweeps (docs/GEMM.md, "A rule on the DRAM's rate"), 0.93-0.95x
  // on the H100's (`h100-e0ed0ac-gemm-blockscale-plans.jsonl`).
  if (two_sets && M > 64 && M <= 128 && best.block_m == 64 && best.block_n == 64 && 2 * ((N + 63) / 64) <= sms) {
    const int64_t t = (N + 63) / 64;
    if (recipe == Sm90Recipe::kBlockScaledFp8 ? t * decode_ranges(t) >= 2 * t * decode_ranges(2 * t)
                                               : decode_splits(t) <= 2)
      best.block_m = 128;
    else if (recipe == Sm90Recipe::kBlockScaledFp8 && fast_dram &&
             t * fill_ranges(t) >= 2 * t * decode_ranges(2 * t))
      best.block_m = 128, all_ranges = true;
  }
  // 65-128 rows on the FP8 recipes: one wave of 128 x 192 tiles where 128-column tiles need more
  // than one and N is a multiple of 192. Block-scaled (128, 24576, 1536), the only bench shape
  // that takes them: 18.5 -> 17.1 us (0.93x -> 1.01x cuBLASLt; 192 tiles of 128 x 128 left a
  // second wave of 60); H200, A/B run twice. At M = 4096 they ran 0-6% slower than the two-set
  // 128 x 128 ones, and where 128-column tiles end half empty (N = 2112) the H100 and the H200
  // disagreed (docs/GEMM.md). Up to 64 rows a wave of 64 x 192 tiles (one accumulator set) beat
  // 64 x 64 ones in three waves until those got the two-set loop; since, the 64 x 64 ones are
  // 3.5% faster ((1, 24576, 1536) 12.8 -> 12.35 us, (64, ...) 13.4 -> 12.95; H200, run twice).
  // Block-scaled where the DRAM bounds the stream (dram_bound), whatever N, the last tile column
  // part empty: on an H200's 132 SMs (80-128, 17408-23552, 4096-8192), from 128 x 64 split 1-5
  // ways or 128 x 128 split 2-6 ways, 61 shapes 1.005-1.140x faster as forced plans, 1.056x in
  // geometric mean ((128, 22016, 7168) 54.5 -> 47.5 us); on a partition of 64 SMs (75 GB/s an SM)
  // (80-128, 10240, 8192), 54 tiles for 64 SMs, 0.83x (bench/results/h200-dev-gemm-wide-192-ab.txt).
  const bool short_rounds = tall && num_kb > kSm90ShortUnit && num_kb <= 16;
  const bool n_takes_192 = N % 192 == 0 || (recipe == Sm90Recipe::kBlockScaledFp8 && dram_bound);
  if (wide && !short_rounds && M > 64 && M <= 128 && n_takes_192 && (N + 191) / 192 <= sms && (N + 127) / 128 > sms)
    best.block_m = 128, best.block_n = 192;
  if (recipe == Sm90Recipe::kScaledFp8 && M <= 128 && best.block_m == 128 && best.block_n == 128)
    best.stages = kSm90DeepStages128;
  // 129-192 rows, block-scaled: one row of 192 x 128 tiles (three consumer warpgroups: B read once,
  // fewer padding rows) split as decode splits, or with a split last wave, where the units (the
  // whole tiles' past a wave) keep kSm90LongUnit K-blocks or more. Against the rules' plan (H100,
  // the plan sweep): (192, 7168, 18432) 67.8 -> 57.8 us (0.84x -> 0.99x cuBLASLt), (192, 8192,
  // 28672) 123.5 -> 95.4 (0.89x -> 1.16x), (160, 57344, 8192) 204.7 -> 180.4, (192, 36864, 7168)
  // 121.5 -> 109.8 (a last wave of 24 tiles split 5 ways), (192, 10240, 8192) 43.2 -> 39.1; on
  // shorter units the tiles lost ((192, 7168, 2048), 8 K-blocks a unit: 12.8 us against 9.95;
  // (192, 4096, 7168), 14: 21.2 against 19.6), and at 384 rows they won and lost by up to 15%.
  // Where the tiles fill a wave or more, whole units of 24 K-blocks do: (192, 28672, 3584), 224
  // tiles, 40.2 us against 47.7 on 256 x 128 tiles (H200,
  // bench/results/h200-dev-gemm-gemma-plans.jsonl.xz); at 20 K-blocks ((192, 19456, 2560)) they
  // tie with 128 x 128 tiles.
  // On a fast DRAM (kSm90FastDramGbps), a row of fewer tiles than SMs that decode splits leave
  // whole takes them on units of 16 K-blocks or more: (144-192, 16384, 2048 / 3072), 128 tiles,
  // 1.21-1.23x faster than 256 x 128 tiles; on partitions of 112 / 80 / 64 SMs (144-192,
  // 8192, 3584), (144-192, 6144, 2560), (144-192, 5120, 3072), (144-192, 7168, 2048) 1.04-1.19x
  // against 64 x 128 or 256 x 128 tiles (H200, forced plans, bench/results/h200-dev-gemm-llama32-ab.txt;
  // the H100 unmeasured). Split 3 ways or more, on units of 20 K-blocks or more: (136-192, 3584 /
  // 4096, 11008-14336) 128 x 128 tiles split twice -> 192 x 128 split 4 ways 0.999-1.07x, (160 / 192,
  // 5120, 8192) 64 x 128 whole -> split 3 ways 1.02-1.06x; on partitions of 112 / 80 / 64 SMs
  // 1.03-1.18x. Split twice they lost to whole 128 x 128 tiles, 0.90-0.99x ((144-192, 5120, 5120)
  // on 112 / 80 SMs, (144-192, 4096, 7168) on 80 / 64; bench/results/h200-dev-gemm-row-192-split-ab.txt).
  // (Their splits are the smaller tiles', below.)
  if (tall && M > 128 && M <= 192) {
    const int64_t tiles = (N + 127) / 128, split = decode_splits(tiles);
    const int64_t unit_kb = !fast_dram    ? kSm90LongUnit
                            : split == 1  ? kSm90LongUnit / 2
                            : split >= 3  ? 20
                                          : kSm90LongUnit;
    if (tiles < sms ? num_kb / split >= unit_kb : num_kb >= 3 * kSm90LongUnit / 4)
      best.block_m = 192, best.block_n = 128;
  }
  // 129-256 rows, block-scaled: where 64-row tiles make one unsplit wave of at least three
  // quarters of the SMs on units of 16 K-blocks or more, 128-row tiles of the same width split in
  // two ranges (B read half as often, every SM busy): (160 / 192, 2112, 7168) 99 tiles of 64 x 64
  // -> 66 of 128 x 64 split twice, 1.20x / 1.19x faster on the H100's plan sweep and 1.22x /
  // 1.21x on the H200's; (256, 4096, 7168) 128 of 64 x 128 -> 64 of 128 x 128 split twice, 1.05x /
  // 1.11x. (At fewer SMs the model's split plans do better: (160 / 192, 1536, 7168), 72 tiles, ran
  // 4-9% slower so.)
  if (tall && M > 128 && M <= 256 && best.block_m == 64) {
    const int64_t cols = (N + best.block_n - 1) / best.block_n, rows64 = (M + 63) / 64, rows128 = (M + 127) / 128;
    if (rows64 * cols < sms && 4 * rows64 * cols >= 3 * sms && 2 * rows128 * cols <= sms && num_kb >= 16)
      best.block_m = 128;
  }
  // 129-1024 rows, block-scaled, where 64 x 64 tiles still leave SMs idle (and split to fill them):
  // 128 x 64 tiles split as many ways as fill the SMs where that gives as many units or more, each
  // range keeping 12 K-blocks (B read half as often). (256, 1024, 7168) 64 tiles of 64 x 64 split
  // twice -> 32 of 128 x 64 split 3 ways (the model's, from 4), 1.056x; (192, 1280, 8192) 1.048x;
  // every one of the 26 scan shapes it changes at 132 / 112 / 80 / 64 SMs 1.005-1.093x faster
  // (H200, forced plans, bench/results/h200-dev-gemm-row-splits-ab.txt). With ranges of 7-9
  // K-blocks ((256, 512 / 576, 7168), 64 x 64 split 3-4 ways) the 64 x 64 tiles ran faster.
  // (Past 128 rows plan_ranges, which the split below takes, is fill_ranges.)
  if (tall && M > 128 && M <= 1024 && best.block_m == 64 && best.block_n == 64) {
    const int64_t cols = (N + 63) / 64, t64 = (M + 63) / 64 * cols, t128 = (M + 127) / 128 * cols;
    const int64_t ranges128 = fill_ranges(t128);
    if (t64 < sms && t128 * ranges128 >= t64 * fill_ranges(t64) && num_kb / ranges128 >= 12) best.block_m = 128;
  }
  // Block-scaled decode (one 64-row tile row) on a wide weight, where 64 x 128 tiles fill 15/16 of
  // the SMs or more and units are long (kSm90LongUnit K-blocks): 64 x 64 tiles, their last wave
  // split as any's, where the DRAM bounds the stream (dram_bound). H200 on 132 SMs, forced plans,
  // 1-64 rows of (16384-57344, 4096-8192): 120 shapes 1.029x faster in geometric mean,
  // 0.986-1.081x ((1, 57344, 4096) 64 x 128 split 2 -> 64 x 64 whole, 1.08x; (1, 28672, 4096)
  // 1.04x); (14848, 7168), 116 tiles of 64 x 128, 0.96x, (15872, 7168), 124, 1.0x; on the H100's
  // sweeps (57344, 8192) and (36864, 7168) 1.01-1.04x. On partitions of 112 / 80 / 64 SMs of the
  // H200 (43-75 GB/s an SM) 64 x 64 ran 0.94-1.01x / 0.75-0.89x / 0.73-0.75x: there each SM's
  // pull bounds it (bench/results/h200-dev-gemm-wide-decode-ab.txt). Not at K = 512: (1-64,
  // 32768, 512) 64 x 64 ran 0.94-0.98x on the H200's sweeps.
  if (recipe == Sm90Recipe::kBlockScaledFp8 && M <= 64 && num_kb >= kSm90LongUnit && best.block_m == 64 &&
      best.block_n == 128 && 16 * ((N + 127) / 128) >= 15 * sms && dram_bound)
    best.block_n = 64;
  // Block-scaled decode (up to 128 rows) whose 64-column tiles leave a quarter of the SMs idle or
  // more: tiles twice as wide where their ranges give more units and keep 16 K-blocks each (on 112
  // SMs (1-64, 4096, 7168) 64 tiles of 64 x 64 unsplit -> 32 of 64 x 128 in 3 ranges, 1.10-1.22x
  // faster, (65-128, 4096, 7168) 128 x 64 -> 128 x 128 in 3 ranges 1.11-1.17x, (4096, 11008 /
  // 14336) 1.12-1.38x; with shorter ranges it lost: (48 / 64, 4096, 4096) 0.93-0.98x, (1-64, 5120,
  // 5120) on 132 SMs 0.89-0.99x; docs/GEMM.md "Decode plans at fewer SMs").
  if (recipe == Sm90Recipe::kBlockScaledFp8 && M <= 128 && best.block_n == 64 && !all_ranges) {
    const int64_t rows = (M + best.block_m - 1) / best.block_m, t = rows * ((N + 63) / 64), w = rows * ((N + 127) / 128);
    if (t < sms && 4 * t * plan_ranges(t) < 3 * sms && w * plan_ranges(w) > t * plan_ranges(t) &&
        num_kb >= 16 * plan_ranges(w))
      best.block_n = 128;
  }
  const int64_t tiles = sm90_gemm_tiles(M, N, best.block_m, best.block_n);
  best.whole_tiles = tiles;
  if (best.block_m != 256) {
    if (const int64_t split = all_ranges ? fill_ranges(tiles) : plan_ranges(tiles); split > 1) {
      best.splits = static_cast<int>(split);
      best.whole_tiles = 0;
      return best;
    }
  }
  // the last wave's tiles fill it, split along K
  if (const int64_t split = best.block_m == 256 ? tall_splits(tiles) : tail_splits(tiles)) {
    best.splits = static_cast<int>(split);
    best.whole_tiles = tiles - tiles % sms;
  } else if (const int64_t owner_kb = best.block_m == 256 ? sm90_gemm_tail_owner_kb(tiles, sms, num_kb) : 0) {
    best.splits = 2;
    best.whole_tiles = tiles - tiles % sms;
    best.tail_kb = owner_kb;
  }
  return best;
}

// A time model of the block-scaled plans, in microseconds, fitted on an H100 sweep of every plan
// (qfuse-bench gemm_fp8_blockscale_plans: 224 shapes, M 1-4096; docs/GEMM.md, "The plan sweep"):
// a unit of a tile takes its K-blocks at kb_us each plus unit_us, a split unit split_us more (its
// partial and the reduction); the SMs run the whole tiles in rounds, then the split units in one
// more; no plan beats the DRAM stream of its bytes (A, B, D and the partials at 3.12 TB/s,
// plus 4.7 us), nor the L2's stream of the operand tiles its CTAs load (every tile row's B and
// every tile column's A, at 9.5 TB/s, plus 3 us). The L2 term (costs refitted with it) takes
// 128-row tiles where 64-row ones would load A and B more often: (256, 2112, 7168) 64 x 64 unsplit
// -> 128 x 64 split 2 ways, 1.17x faster on the H100's sweep and 1.20x on an H200's; (768, 1536,
// 7168) 1.17x / 1.15x, (576, 1536, 7168) 1.12x (H100); no other shape of either sweep changes by
// more than 0.2%. (Rates of 8.5-9.5 TB/s and 2.5-4 us were tried: lower rates moved more shapes
// and slowed some by up to 14%.) The 128 x 128 tiles stream theirs at 10.5 TB/s: at 9.5 the
// term held (512 / 1024, 10240, 8192) at 73.6 / 144 us where the H200's sweeps time them at 69.1 /
// 130 us, so the model put 256 x 128 plans ahead that ran up to 1.15x slower (with the margin
// below; docs/GEMM.md, "The 128 x 128 tiles' L2 rate"). Its plans: the six tiles below, the
// tiles past the last whole wave unsplit or split into 2, 3, 4, 6, 8, 12 or 16 ranges or as many
// as fill the SMs (at most one round of split units, at least two K-blocks a range).
// A split unit of the tiles up to 128 x 128 costs range_us more for each range past the first:
// the tile's last unit adds the other ranges' partials one after another (fitted with the other
// costs, 0.35 us at 64 x 64 to 0.59 at 128 x 128; an H200's sweep gives 0.33-0.55). (2048, 576,
// 7168) no longer splits a last wave of 12 tiles of 128 x 64 11 ways (one wave of 128 x 128, 1.16x
// faster on both sweeps), (1024, 2112, 7168) splits 128 x 128 tiles 6 ways instead of 16 (1.10x /
// 1.11x), (576, 576, 7168) 1.14x / 1.06x; (384, 576, 7168) is left on the rules' 64 x 64 split 2
// (5% slower than 128 x 64 split 3: the model now puts them 1.06x apart, within the margin). The
// 192 x 128 tile keeps its three-cost fit (with a range cost its refit moved (4096, 1536, 7168),
// at the margin's edge, to a plan 11-14% slower) and the 256 x 128 tile has none (its units share
// the reduction; the fit gives it a negative one).
struct sm90_plan_cost {
  int block_m, block_n;
  double kb_us, unit_us, split_us, range_us;
};
// (In this order: where two plans' times tie, as plans bound by the DRAM term do, the first wins,
// 128 x 64 over 64 x 128 as in the rules: (256, 1280, 8192) 64 x 128 -> 128 x 64 split 3 ways,
// 1.12x, (256, 3072, 1536) whole, 1.08x; H200, h200-dev-gemm-plan-ties-ab.txt.)
constexpr sm90_plan_cost kSm90PlanCosts[] = {
    {64, 64, 0.233, 0.41, 2.73, 0.353},  {128, 64, 0.296, 0.47, 2.57, 0.425}, {64, 128, 0.321, 0.54, 3.17, 0.424},
    {128, 128, 0.391, 0.94, 3.31, 0.594}, {192, 128, 0.579, 1.42, 7.31, 0.0},  {256, 128, 0.718, 1.67, 10.96, 0.0}};

inline double sm90_gemm_model_us(int64_t M, int64_t N, int64_t K, int sms, const sm90_plan_cost &c, int64_t splits) {
  const int64_t num_kb = (K + 127) / 128;
  const int64_t tiles_m = (M + c.block_m - 1) / c.block_m, tiles_n = (N + c.block_n - 1) / c.block_n, tiles = tiles_m * tiles_n;
  double t = 0.0, partials = 0.0;
  if (splits == 1) {
    t = static_cast<double>((tiles + sms - 1) / sms) * (num_kb * c.kb_us + c.unit_us);
  } else {
    const int64_t whole_rounds = tiles < sms ? 0 : tiles / sms, split_tiles = tiles - whole_rounds * sms;
    t = whole_rounds * (num_kb * c.kb_us + c.unit_us) + static_cast<double>(num_kb) / splits * c.kb_us + c.unit_us + c.split_us +
        (splits - 1) * c.range_us;
    partials = 8.0 * c.block_m * c.block_n * split_tiles * splits;  // written and read, fp32
  }
  const double bytes = static_cast<double>(N) * K + static_cast<double>(M) * K + 2.0 * M * N + partials;
  const double l2_rate = c.block_m == 128 && c.block_n == 128 ? 10.5e6 : 9.5e6;
  const double l2 = static_cast<double>(tiles_m * N + tiles_n * M) * static_cast<double>(K) / l2_rate + 3.0;
  if (t < l2) t = l2;
  return t > bytes / 3.12e6 + 4.7 ? t : bytes / 3.12e6 + 4.7;
}

// The config of a plan given by its tile and split (qf_gemm_fp8_blockscale_with, the time model's
// candidates): tiles of block_m x block_n, and with splits > 1 the tiles past the last whole wave
// (all of them where they are fewer than the SMs) split into that many K ranges. False where the
// engine has no such tile or cannot run the split: more than 16 ranges or ranges under two
// K-blocks, no tile to split, or 256-row split units that are not all resident at once with their
// shares in the ring (they wait for each other).
inline bool sm90_gemm_plan_of(int64_t M, int64_t N, int64_t K, int sms, int block_m, int block_n, int splits,
                              sm90_gemm_config &c) {
  const bool tile = (block_m == 64 && (block_n == 64 || block_n == 128)) ||
                    (block_m == 128 && (block_n == 64 || block_n == 96 || block_n == 128 || block_n == 192)) ||
                    ((block_m == 192 || block_m == 256) && block_n == 128);
  const int64_t num_kb = (K + 127) / 128, tiles = sm90_gemm_tiles(M, N, block_m, block_n);
  if (!tile || splits < 1 || splits > 16 || (splits > 1 && splits > num_kb / 2)) return false;
  c = {block_m, block_n, 0, 8, splits, tiles, 0};
  if (splits == 1 || tiles == 0) return true;
  c.whole_tiles = tiles < sms ? 0 : tiles - tiles % sms;
  const int64_t split_tiles = tiles - c.whole_tiles;
  return split_tiles > 0 && (block_m != 256 || (split_tiles * splits <= sms &&
                                                sm90_gemm_tall_share_fits(splits, sm90_gemm_stages(256, 128, 2))));
}

// The plan of opts.fine_promotion (Sm90Variant::kFinePromotion, 64), from sm90_gemm_pick's `plan`:
// kept where it is one of the decode tiles, 64 x 64 or 64 x 128 (without a tail round); else 128 x
// 128 tiles, whose two accumulator sets of 64 columns and total fit the consumers' registers;
// where they leave SMs idle, split into as many K ranges as SMs per tile (at most 16 and
// K-blocks / 2).
inline sm90_gemm_config sm90_gemm_pick_fine(int64_t M, int64_t N, int64_t K, int sms, const sm90_gemm_config &plan) {
  if (plan.block_m == 64 && (plan.block_n == 64 || plan.block_n == 128) && plan.tail_kb == 0) return plan;
  const int64_t tiles = sm90_gemm_tiles(M, N, 128, 128), num_kb = (K + 127) / 128;
  const int64_t most = num_kb / 2 < 16 ? num_kb / 2 : 16;
  const int64_t fill = tiles > 0 && tiles < sms ? sms / tiles : 1;
  const int splits = static_cast<int>(fill < most ? fill : most > 1 ? most : 1);
  sm90_gemm_config c;
  sm90_gemm_plan_of(M, N, K, sms, 128, 128, splits, c);  // (splits in [1, most]: always a plan)
  return c;
}

// Block-scaled: a split last wave of tiles up to 192 rows (after whole rounds) keeps
// kSm90TailRangeKb K-blocks (192 rows: kSm90TailRangeKb192) or more per range (none at all if that
// leaves fewer than two), whatever chose its split (the rules or the time model; after both, so
// that neither's choice of tile moves). Each range past the first is a partial (64 KB at 128 x 128)
// for the tile's last unit to add after the rest of the GPU has left: about 1-1.3 us a range on an
// H200, against the model's 0.35-0.59. On forced plans (H200, docs/GEMM.md "Ranges of a split last wave") the
// fastest split kept 10-16 K-blocks a range: 3 of 32, 4-6 of 56, 5 of 64, 8 of 128 and 144, none
// of 12. On 132 SMs it changes plans past 128 rows only; on 80, decode ones too ((1-128, 24576,
// 1536) split twice -> whole tiles, (1-64, 11008, 4096) 6 -> 3 ranges). The 192 x 128 tiles keep
// 7 K-blocks a range (H200, forced): (144-192, 18432, 7168) 11 ranges of 5 -> 8, 1.02-1.04x on 132
// SMs (8 ranges the plan sweep's fastest), (192, 51200, 5120) 16 ranges of 2-3 -> 5; at 10
// K-blocks shapes whose ranges held 8 ran 1-2% slower ((144-192, 16384, 7168) on 112 SMs, (576,
// 6144 / 14336, 4096) on 64; bench/results/h200-dev-gemm-qwen-forced.txt).
inline sm90_gemm_config sm90_gemm_short_tail(const sm90_gemm_config &c, int64_t M, int64_t N, int64_t K, int sms,
                                             Sm90Recipe recipe) {
  const int64_t ranges = sm90_gemm_tail_ranges((K + 127) / 128, c.block_m);
  sm90_gemm_config shorter;
  if (recipe != Sm90Recipe::kBlockScaledFp8 || c.block_m > 192 || c.splits <= 1 || c.whole_tiles == 0 ||
      c.splits <= ranges ||
      !sm90_gemm_plan_of(M, N, K, sms, c.block_m, c.block_n, ranges > 1 ? static_cast<int>(ranges) : 1, shorter))
    return c;
  return shorter;
}

// The rules above, then for the block-scaled recipe up to 4096 rows (the sweep's range) the
// model's fastest plan where it puts the rules' plan at 1.2x its time or more, 1.1x past 128 rows
// (the rules' plan on one of the model's tiles, not a round of owners and helpers). On the first
// sweep: 3.7% -> 2.3% from the fastest plan in geometric mean, worst 1.55x -> 1.31x;
// cross-validated over the weights (fitted on half, judged on the other) 2.4%, no shape more than
// 3% slower than by the rules. Refitted (bench/plan_model.py) once partial tile rows stopped paying
// for the zero fill (224 shapes, H100): 2.14% -> 1.73% with the 1.1x margin past 128 rows, seven
// shapes 1.05-1.25x faster, none slower; at 1.1x decode shapes changed too, 1-2% slower. With
// the 192 x 128 tile among its tiles (which may then override the rules' 192-row plans) and up to
// 4096 rows: 1.73% -> 1.51%, (192, 8192, 8192) 32.7 -> 29.2 us, (4096, 1536, 7168) 81.6 -> 70.3
// (H100); on an H200 the four changed shapes 1.01-1.16x faster (docs/GEMM.md). Past 128 rows a
// model plan of whole tiles needs only 1.05x: the model's times of split plans have the heavier
// tail (90th-percentile error 14% / 23% on the H100's / H200's sweep against 13% / 16% for whole
// tiles). On both sweeps the four shapes that change 1.01-1.12x faster ((768, 8192, 8192) 256 x
// 128 split 2 -> 192 x 128, 1.12x / 1.10x; (3072, 7168, 2048) 128 x 128 split 5 -> 192 x 128,
// 1.12x / 1.09x), 0.88% -> 0.75% and 0.77% -> 0.67% from the fastest plan; at 1.0x, 13 shapes
// changed, 0.6% slower in geometric mean on the H200's sweep. One wave of whole 192 x 128 tiles
// needs no margin at all against a rules' plan of 128-row tiles whose split units are short
// (fewer than kSm90LongUnit K-blocks): there the model puts the split round too low ((4096, 576,
// 7168), a round of 128 x 128 tiles and a last one split 4 ways: 34.3 us modelled, 36.9 / 39.9
// timed on the H200's / H100's sweep, against 33.5 / 33.7 for 110 tiles of 192 x 128). On both
// sweeps the two shapes that change ((576, 4096, 7168) and (4096, 576, 7168)) run 1.05x / 1.10x
// faster on the H200 and 1.07x / 1.18x on the H100. A split plan of the model's on tiles of up to
// 128 rows needs 1.05x too (256-row split plans keep 1.1x: at 1.05x (256, 8192, 28672) took 256 x
// 128 split 2 over whole 128 x 128 tiles, 0.89x on both H200 sweeps): on the sweeps only (384,
// 576, 7168) changes, 64 x 64 split 2 -> 128 x 64 split 4, 1.12x / 1.12x faster on the H200's,
// 1.07x / 1.09x on the H100's; on 132 SMs 18 of 1,184 DeepSeek-V3 and Llama shapes change, timed on
// an H200 with both plans forced 1.02-1.20x faster (1.08x in geometric mean) but (144, 1024, 7168),
// 64 x 64 split 2 -> 64 x 128 split 4, 0.98x (bench/results/h200-dev-gemm-split-margin-ab.txt).
// Against the rules' 256 x 128 tiles a model plan on tiles of up to 128 rows needs no margin
// (with the 128 x 128 tiles' L2 rate above): on 132 SMs 26 of the 1,184 scan shapes change, as
// the public call on an H200 1.039x faster in geometric mean ((2560, 4096, 4096) 256 x 128 split 2
// -> 128 x 128, 1.14x; six 0.975-0.99x), forced on 112 / 80 / 64 SMs 1.004-1.099x
// (bench/results/h200-dev-gemm-l2-rate-ab.txt). The 18 bench shapes keep their plans.
// Then the rules that correct the model where the sweeps found it wrong (past 128 rows: one wave of
// 128 x 64 tiles, the DRAM-rate split of it, one wave of 128 x 192 tiles, a wave of 256 x 128 tiles
// on short units and 128 x 128 tiles on half the SMs as smaller tiles; below), and last
// sm90_gemm_short_tail. dram_gbps: the device's peak DRAM bandwidth (qf_ctx), 0 where unknown (the
// rules then take the H100's plans).
inline sm90_gemm_config sm90_gemm_pick(int64_t M, int64_t N, int64_t K, int sm_count, Sm90Recipe recipe,
                                       double dram_gbps = 0.0) {
  const sm90_gemm_config rules = sm90_gemm_pick_by_rules(M, N, K, sm_count, recipe, dram_gbps);
  const int sms = sm_count > 0 ? sm_count : 1;
  if (recipe != Sm90Recipe::kBlockScaledFp8 || M > 4096 || rules.tail_kb > 0)
    return sm90_gemm_short_tail(rules, M, N, K, sms, recipe);
  const int64_t num_kb = (K + 127) / 128;
  const sm90_plan_cost *mine = nullptr;
  for (const sm90_plan_cost &c : kSm90PlanCosts)
    if (c.block_m == rules.block_m && c.block_n == rules.block_n) mine = &c;
  if (!mine) return sm90_gemm_short_tail(rules, M, N, K, sms, recipe);
  // the model's candidates: its tiles (256 rows past 128 rows, not on units of 4 K-blocks or fewer
  // in fewer than four waves, where the rules take 128 x 128 tiles: the model put (4096, 4096,
  // 512) on 256 x 128, 1.07x slower; 192 past 192 rows and, as in the rules, on 8 K-blocks or
  // more: at 129-192 the rules' own), at most one round of split units
  sm90_gemm_config best = rules;
  double best_us = -1.0;
  for (const sm90_plan_cost &c : kSm90PlanCosts) {
    const int64_t tiles = sm90_gemm_tiles(M, N, c.block_m, c.block_n);
    const int64_t rem = tiles < sms ? tiles : tiles % sms, fill = rem ? sms / rem : 0;
    const int64_t candidates[] = {1, 2, 3, 4, 6, 8, 12, 16, fill};
    sm90_gemm_config plan;
    for (int64_t s : candidates) {
      if (s < 1 || (s > 1 && s > fill) || (c.block_m > 128 && M <= 128) ||
          (c.block_m == 256 && num_kb <= 4 && tiles < 4 * sms) ||
          (c.block_m == 192 && (M <= 192 || num_kb < kSm90TripleMinKb)) ||
          !sm90_gemm_plan_of(M, N, K, sms, c.block_m, c.block_n, static_cast<int>(s), plan))
        continue;
      const double us = sm90_gemm_model_us(M, N, K, sms, c, s);
      if (best_us < 0.0 || us < best_us) best = plan, best_us = us;
    }
  }
  // the margin by which the model must put its plan ahead of the rules' (the comment above)
  double margin = 1.2;
  if (M > 128) {
    // (the model's heavier tail: its split plans past 128 rows, 1.1x; and 1.25x for the rules' one
    // row of 192 x 128 tiles split, whose partials it overprices: (192, 8192, 22016), 64 tiles split
    // twice, modelled 72.8 us against 68.2 for 128 x 128 tiles whole, ran 62.0 against 70.2 on an
    // H200; (136-192, 24576, 4096), 192 tiles with a last wave of 60 split twice, modelled 1.18x
    // the 128 x 128 tiles whole, ran 1.07-1.11x faster (bench/results/h200-dev-gemm-qwen-forced.txt))
    const bool split_192 = M <= 192 && rules.splits > 1 && rules.block_m == 192;
    const bool tall_split = best.splits > 1 && best.block_m > 128;
    const bool one_wave = best.block_m == 192 && best.whole_tiles <= sms;
    const bool short_split = rules.splits > 1 && rules.block_m <= 128 && num_kb / rules.splits < kSm90LongUnit;
    const bool off_tall = rules.block_m == 256 && best.block_m <= 128;
    margin = split_192 ? 1.25 : tall_split ? 1.1 : (one_wave && short_split) || off_tall ? 1.0 : 1.05;
  }
  // Up to 128 rows the rules' split plan stands against a model plan of whole tiles that leave a
  // quarter of the SMs idle or more, where the rules run more units of kSm90TailRangeKb K-blocks or
  // more: the model counts a weight stream on few SMs at the DRAM's rate. (72-128, 2560, 4096) 80
  // tiles of 64 x 64 -> 40 of 128 x 64 in 3 ranges, 1.09-1.15x; (72-128, 5120, 8192) 80 of 128 x 64
  // -> 40 of 128 x 128 in 3, 1.06-1.12x (H200, forced; no scan shape changes).
  // On a fast DRAM (kSm90FastDramGbps, the H100 unmeasured) it stands also
  // - at 65-128 rows against whole tiles in one wave, where the rules' units are as many and keep 16
  //   K-blocks: (80-128, 3584 / 4096, 4096) two rows of 64 x 64 tiles -> one of 128 x 64 in 2
  //   ranges, 1.02-1.08x as the public call, (80-112, 2560, 4096) on 80 / 112 SMs 1.06-1.10x forced;
  //   on ranges of 12 K-blocks ((80-128, 3072, 3072)) 0.98-1.05x, left out
  //   (bench/results/h200-dev-gemm-keep-ranges-ab.txt, second call);
  // - at 129-256 rows against the model's same tiles split fewer ways where its ranges keep 12
  //   K-blocks: (136-256, 1024, 7168), 32 tiles of 128 x 64 in 4 ranges (the rules') against 3 (the
  //   model's), 1.04-1.09x as the public call; (200-256, 768 / 1024 / 1280, 5120-8192) 1.02-1.10x
  //   (first call). At 512 and 1024 rows ((512, 512, 7168), (1024, 256, 7168)) the H200's sweeps
  //   had it 0.985-0.997x.
  const bool fast_dram = dram_gbps >= kSm90FastDramGbps, dram_bound = sm90_gemm_dram_bound(dram_gbps, sms);
  // the rules' split plan (every tile split): its units and the K-blocks of each range
  const bool rules_split = rules.splits > 1 && rules.whole_tiles == 0;
  const int64_t rules_units = sm90_gemm_tiles(M, N, rules.block_m, rules.block_n) * rules.splits;
  const int64_t rules_range_kb = num_kb / rules.splits;
  const bool best_whole = best.splits == 1;
  const bool few_whole = M <= 128 && best_whole && 4 * best.whole_tiles <= 3 * sms && rules_split &&
                         rules_units > best.whole_tiles && rules_range_kb >= kSm90TailRangeKb;
  const bool long_ranges = fast_dram && M > 64 && M <= 128 && best_whole && best.whole_tiles <= sms && rules_split &&
                           rules_units >= best.whole_tiles && rules_range_kb >= 16;
  const bool more_ranges = fast_dram && M > 128 && M <= 256 && best.block_m == rules.block_m &&
                           best.block_n == rules.block_n && best.whole_tiles == 0 && best.splits > 1 && rules_split &&
                           rules.splits > best.splits && rules_range_kb >= 12;
  const bool keep_split = few_whole || long_ranges || more_ranges;
  sm90_gemm_config chosen = !keep_split && best_us >= 0.0 &&
                                    sm90_gemm_model_us(M, N, K, sms, *mine, rules.splits) > margin * best_us
                                ? best
                                : rules;
  // 129-256 rows: one wave of whole 128 x 64 tiles filling 3/4 of the SMs or more rather than a
  // wave of fewer whole 64-row tiles, which the model's L2 term puts ahead (it counts A's bytes,
  // read by every tile column, as B's): (160-192, 4096, 4096-6144) 64 x 128 -> 128 x 64 1.08-1.09x
  // faster on an H200 (bench/results/h200-dev-gemm-qwen-plans.jsonl.xz); the H100's last sweep has
  // the same order at (160-256, 4096, 7168), 1.08-1.09x (h100-e0ed0ac-gemm-blockscale-plans.jsonl.xz).
  const int64_t tiles128x64 = sm90_gemm_tiles(M, N, 128, 64);
  if (M > 128 && M <= 256 && chosen.block_m == 64 && chosen.splits == 1 && tiles128x64 <= sms &&
      4 * tiles128x64 >= 3 * sms && tiles128x64 > chosen.whole_tiles)
    sm90_gemm_plan_of(M, N, K, sms, 128, 64, 1, chosen);
  // 129-256 rows on a fast DRAM (kSm90FastDramGbps): one wave of whole 128 x 64 tiles on long units
  // (56 K-blocks or more) becomes 128 x 128 tiles split twice, as many units with A read half as
  // often: (160 / 192, 4096, 7168) 1.04-1.09x faster on three H200 plan sweeps, 0.98x on the H100's
  // (docs/GEMM.md, "A rule on the DRAM's rate"). On shorter units the split lost: (144-256, 4096,
  // 4096 / 5120 / 6144), 32 / 40 / 48 K-blocks, 1.10-1.14x / 1.09x / 1.04x slower than the whole
  // 128 x 64 tiles (H200, bench/results/h200-dev-gemm-qwen-plans.jsonl.xz).
  sm90_gemm_config wider;
  if (fast_dram && M > 128 && M <= 256 && chosen.block_m == 128 && chosen.block_n == 64 &&
      chosen.splits == 1 && tiles128x64 <= sms && 4 * tiles128x64 >= 3 * sms && num_kb >= 56 && 2 * sm90_gemm_tiles(M, N, 128, 128) == tiles128x64 &&
      sm90_gemm_plan_of(M, N, K, sms, 128, 128, 2, wider))
    return wider;
  // Past 128 rows on a fast DRAM that bounds the stream (kSm90FastDramGbps, sm90_gemm_dram_bound):
  // one wave of 128 x 192 tiles where it fills 7/8 of the SMs or more, on units of 12-32 K-blocks,
  // unless the plan is of 192-row tiles (which beat them there: (320 / 384, 7168, 1536 / 2048)
  // 1.10x). Against 256 x 128 tiles in one wave of fewer, or 128 x 128 ones in more than one: (256,
  // 11008 / 12288, 4096) 1.10x / 1.08x, (512, 6144, 2560 / 4096) 1.07x / 1.05x, (1024, 3072, 1536)
  // 1.08x faster (H200, forced plans); on longer units they lost ((256, 11008, 7168) 0.94x). The
  // model has no cost for this tile, the rules no wave of it past 128 rows.
  const int64_t tiles128x192 = sm90_gemm_tiles(M, N, 128, 192);
  sm90_gemm_config wave192;
  if (fast_dram && dram_bound && M > 128 && num_kb >= 12 &&
      num_kb <= 32 && chosen.block_m != 192 && tiles128x192 <= sms && 8 * tiles128x192 >= 7 * sms &&
      sm90_gemm_plan_of(M, N, K, sms, 128, 192, 1, wave192))
    return wave192;
  // On a fast DRAM, at 129-256 rows: one wave of whole 256 x 128 tiles filling more than half the
  // SMs on units of at most 32 K-blocks becomes one wave of 128 x 192 tiles where they fit one and
  // the DRAM bounds the stream (units of 12 K-blocks or more), else 128 x 128 tiles whole (two
  // waves, the second's loads under the first's stores): (224 / 256, 9216 / 10240, 2048 / 3072)
  // 1.06-1.13x, (224 / 256, 16384 / 15360 / 14336, 2048-4096) 1.01-1.07x faster; on partitions of
  // 112 / 80 / 64 SMs 0.99-1.04x (H200, forced plans; the H100 unmeasured).
  // Past 128 rows: whole 128 x 128 tiles on at most half the SMs become 128 x 64 ones in one wave:
  // (384-640, 1536-2560, 2048) 1.15-1.19x faster (H200, forced plans; the H100 unmeasured).
  // (bench/results/h200-dev-gemm-llama32-ab.txt, docs/GEMM.md "Weights off the scan")
  // And whole 128 x 128 tiles in one partial wave where 128 x 64 tiles need more than one but
  // 64 x 128 tiles fit one become those (a grid of 38,720 shapes has it at K = 1536-3072 only):
  // (264-832, 1280-3328, 1536-3072) 1.06-1.11x faster, 30 shapes forced, 12 as the public call
  // 1.08-1.10x (H200, bench/results/h200-dev-gemm-one-wave-64x128-ab.txt; the H100 unmeasured).
  sm90_gemm_config other;
  if (fast_dram && M > 128 && M <= 256 && chosen.block_m == 256 && chosen.splits == 1 && chosen.whole_tiles < sms &&
      2 * chosen.whole_tiles > sms && num_kb <= 32) {
    if (dram_bound && num_kb >= 12 && tiles128x192 <= sms &&
        sm90_gemm_plan_of(M, N, K, sms, 128, 192, 1, other))
      return other;
    if (sm90_gemm_plan_of(M, N, K, sms, 128, 128, 1, other)) return other;
  }
  if (fast_dram && M > 128 && chosen.block_m == 128 && chosen.block_n == 128 && chosen.splits == 1 &&
      chosen.whole_tiles < sms) {
    if (tiles128x64 <= sms ? 2 * chosen.whole_tiles <= sms && sm90_gemm_plan_of(M, N, K, sms, 128, 64, 1, other)
                           : sm90_gemm_tiles(M, N, 64, 128) <= sms && sm90_gemm_plan_of(M, N, K, sms, 64, 128, 1, other))
      return other;
  }
  // 65-128 rows on a fast DRAM: whole 128 x 128 tiles in one wave on at most two thirds of the SMs,
  // on units of 64 K-blocks or more, become 128 x 96 tiles where those fit one wave (more SMs
  // streaming the weight): (96 / 128, 9216-11008, 8192 / 14336) 1.03-1.08x faster as forced plans,
  // one 0.998x; on shorter units they lost ((96 / 128, 9216-12288, 2048) 0.90-0.98x), and with 128
  // x 128 tiles on three quarters of the SMs ((128, 12288, 14336)) 0.97x (H200; the H100
  // unmeasured; bench/results/h200-dev-gemm-128x96-rule-sweep.jsonl.xz, docs/GEMM.md "128 x 96
  // tiles").
  if (fast_dram && M > 64 && M <= 128 && chosen.block_m == 128 && chosen.block_n == 128 && chosen.splits == 1 &&
      3 * chosen.whole_tiles <= 2 * sms && num_kb >= 64 && sm90_gemm_tiles(M, N, 128, 96) <= sms &&
      sm90_gemm_plan_of(M, N, K, sms, 128, 96, 1, other))
    return other;
  return sm90_gemm_short_tail(chosen, M, N, K, sms, recipe);
}

// The grouped (MoE) GEMM: 128-row tiles (a tile row is one expert's 128-row block) in the grouped
// raster; 128 columns, or 64 where 128-column tiles would leave SMs idle (fewer tiles than SMs:
// the few-token experts of a small batch), so that more CTAs stream the experts' weights. A last
// wave of at most half the SMs is split along K as sm90_gemm_pick splits the dense one's, where
// tiles run kSm90LongUnit K-blocks or more (its tiles may turn out to be padding, whose units all
// skip): 8 experts, 256 tokens each (H200, alternated twice): gate + up (K = 7168, 56 K-blocks)
// 149.3 -> 140.6 us, with SwiGLU 153.3 -> 145.0, 1024 tokens 428 -> 421.5; down (K = 2048) split
// 2 ways at 64 tokens 41.0 -> 42.2, 4 ways at 256 unchanged. The masked layout (masked_experts > 0) counts
// one block per expert for the column choice (a decode step's experts rarely hold more) and is
// never split: most of its tiles skip.
inline sm90_gemm_config sm90_gemm_pick_grouped(int64_t M, int64_t N, int64_t K, int sm_count, int64_t masked_experts) {
  const int sms = sm_count > 0 ? sm_count : 1;
  const int64_t live_rows = masked_experts > 0 && masked_experts * 128 < M ? masked_experts * 128 : M;
  const int64_t tiles128 = sm90_gemm_tiles(live_rows, N, 128, 128);
  sm90_gemm_config c = {128, tiles128 < sms ? 64 : 128, 0, 8, 1, 0};
  const int64_t tiles = sm90_gemm_tiles(M, N, 128, c.block_n), num_kb = (K + 127) / 128;
  const int64_t split = masked_experts == 0 && num_kb >= kSm90LongUnit ? sm90_gemm_tail_splits(tiles, sms, num_kb, 2) : 0;
  c.splits = split ? static_cast<int>(split) : 1;
  c.whole_tiles = split ? tiles - tiles % sms : tiles;
  return c;
}
