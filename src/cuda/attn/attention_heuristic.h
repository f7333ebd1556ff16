// Launch plan of qf_attention on CUDA: the tile configuration for a shape and the number of
// splits of the keys. Host code only; the kernels are in attention.cuh.
#pragma once

#include <algorithm>
#include <cstdint>

// Rows of queries per kv head at or below which the decode tile (16 rows, four warps splitting
// each key tile) replaces the prefill tile (64 rows, one warp per 16).
constexpr int64_t kAttnDecodeRows = 16;

// Splits of each CTA's keys: enough CTAs to fill `slots` (SMs x CTAs per SM), keeping at least two
// key tiles per split (a split's partial costs a write and a read of fp32 O) and at most 64.
static inline int attn_splits(int64_t ctas, int64_t key_tiles, int64_t slots) {
  if (ctas >= slots) return 1;
  const int64_t want = (slots + ctas - 1) / ctas;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, key_tiles / 2, 64})));
}
