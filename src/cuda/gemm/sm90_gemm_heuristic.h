// Tile shape, pipeline depth, raster order and split of the sm_90 GEMM engine, chosen from
// the problem size and the device (the same for every recipe). Host code only: the kernels never
// see this file's logic, only the compile-time shapes listed here.
#pragma once

#include <cstddef>
#include <cstdint>

// The instantiated tile shapes (BLOCK_M, BLOCK_N). BLOCK_M is 64 per consumer warpgroup; BLOCK_N
// divides 128 so that a tile row needs one B scale per K-block.
#define QF_SM90_GEMM_TILES(X) X(64, 64) X(64, 128) X(128, 64) X(128, 128)

// Pipeline depth of a tile shape: as many (A, B) stages of 128 K-columns as fit in 200 KB next to
// the D staging tile (16-bit D), at most 12. Only 64 x 64 tiles (the decode tiles) reach more than
// 8: with 12 instead of 8 the weight-streaming shapes at M = 1 and 16 run up to 16% faster (H200,
// A/B repeated; (7168, 16384) at M = 1: 60 -> 54 us), M = 64 and 128 within -3% to +14%.
constexpr int sm90_gemm_stages(int block_m, int block_n, int out_bytes) {
  const int budget = 200 * 1024 - (out_bytes == 2 ? block_m * block_n * 2 : 0);
  const int fit = budget / ((block_m + block_n) * 128);
  return fit < 12 ? fit : 12;
}

struct sm90_gemm_config {
  int block_m, block_n;
  int raster_group;  // tile rows (along M) walked together, so that B tiles are reused from L2
  int splits;        // K-block ranges per split tile (split-K); 1: none
  int64_t whole_tiles;  // with splits > 1: the tiles (first in walk order) that run whole
};

// NOTES: a persistent CTA per SM walks tiles in waves; the cost of a shape is its number of waves
// times the time of one tile, modelled as its MMA work plus a per-row overhead (operand loads and
// FP32 promotion) that makes thin tiles less efficient. Small M (decode) then gets 64-row tiles and,
// when 128-column tiles leave SMs idle, 64-column ones, so that more CTAs stream the weights.
// Where the tiles still leave SMs idle, K is split so that tiles x splits fill them (at least two
// K-blocks per range, at most 16 ranges): a decode GEMM is a stream of B, and every SM must pull
// its share. Likewise a last wave of at most a quarter of the SMs (with at least 8 K-blocks) runs
// its tiles split so that they fill the wave: at M = 4096, (N, K) = (2112, 7168) has 544 tiles of
// 128 x 128 on 132 SMs, a fifth wave of 16 tiles, and split 8 ways it ran 10% faster (128.9 ->
// 115.5 us, block-scaled, H200, run twice). A tie goes to the larger tile: at M = 4096, (N, K) = (2112, 7168) ties 128 x 64 with
// 128 x 128, and 128 x 128 ran 12% faster (two accumulator sets; H200, run twice). Ties of equal
// areas (64 x 128 and 128 x 64 at M = 128) keep the first.
inline sm90_gemm_config sm90_gemm_pick(int64_t M, int64_t N, int64_t K, int sm_count) {
  const int sms = sm_count > 0 ? sm_count : 1;
  sm90_gemm_config best = {128, 128, 8, 1, 0};
  double best_cost = -1.0;
#define QF_SM90_GEMM_TRY(BM, BN)                                                  \
  {                                                                               \
    const int64_t tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);               \
    const int64_t waves = (tiles + sms - 1) / sms;                                \
    const double cost = static_cast<double>(waves) * (BM * BN + 64.0 * (BM + BN)); \
    if (best_cost < 0.0 || cost < best_cost ||                                    \
        (cost == best_cost && BM * BN > best.block_m * best.block_n)) {           \
      best_cost = cost;                                                           \
      best.block_m = BM;                                                          \
      best.block_n = BN;                                                          \
    }                                                                             \
  }
  QF_SM90_GEMM_TILES(QF_SM90_GEMM_TRY)
#undef QF_SM90_GEMM_TRY
  const int64_t tiles = ((M + best.block_m - 1) / best.block_m) * ((N + best.block_n - 1) / best.block_n);
  const int64_t num_kb = (K + 127) / 128;
  const int64_t most = num_kb / 2 < 16 ? num_kb / 2 : 16;
  if (tiles < sms && num_kb >= 4) {
    const int64_t fill = sms / tiles;
    best.splits = static_cast<int>(fill < most ? fill : most);
  } else if (num_kb >= 8 && tiles % sms != 0 && (tiles % sms) * 4 <= sms) {
    // A last wave of at most a quarter of the SMs: its tiles are split so that they fill the wave.
    const int64_t tail = tiles % sms, fill = sms / tail;
    best.splits = static_cast<int>(fill < most ? fill : most);
    best.whole_tiles = tiles - tail;
  }
  return best;
}
