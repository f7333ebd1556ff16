// Launch plan of qf_attention on CUDA: which kernel a shape takes and the number of splits of the
// keys. Host code only; the kernels are in attention.cuh, the tiles per head dim in attention.cu.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

// Rows of queries per kv head at or below which the decode kernel (16 rows, four warps splitting
// each key tile) replaces the prefill kernel (128 rows, two warpgroups).
constexpr int64_t kAttnDecodeRows = 16;

// Splits of each CTA's keys (at most max_splits) for `ctas` CTAs of key_tiles tiles each on `slots`
// resident CTAs (SMs x CTAs per SM): the fewest that minimize waves x (tiles per split + 2), the 2
// standing for a CTA's fixed cost (its prologue and first tile's latency; a split also costs its
// partial's write and the merge, which are small next to it).
static inline int attn_splits(int64_t ctas, int64_t key_tiles, int64_t slots, int max_splits) {
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= max_splits && s <= std::max<int64_t>(1, key_tiles); s++) {
    const int64_t cost = (ctas * s + slots - 1) / slots * ((key_tiles + s - 1) / s + 2);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}
