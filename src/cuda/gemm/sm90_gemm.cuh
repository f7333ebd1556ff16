// The Hopper GEMM engine (sm_90a): one kernel, D[M, N] from A [M, K] and B [N, K] (K contiguous,
// 8-bit), in three recipes that differ only where they must:
//   kBlockScaledFp8  e4m3, D = C + sum_kb As[m, kb] * Bs[n / 128, kb] * (A[m, kb] . B[n, kb])
//                    (the DeepSeek-V3 recipe: per-K-block scales, fp32 promotion every 128 K)
//   kScaledFp8       e4m3, D = sa * sb * (A . B^T) + bias, promoted to fp32 every 128 K
//   kScaledInt8      int8, D = sa * sb * (A . B^T - zp) + bias, exact int32 accumulation
// (sa per tensor or per row, sb per tensor or per column, zp a per-tensor or per-token zero-point
// term; qfuse.h gives the contracts). D bf16, fp16 or fp32.
//
// NOTES:
// - Warp specialization. One warp of the last warpgroup produces: lane 0 issues the TMA copies of
//   the A and B tiles of each 128-column K-block into a ring of kStages stages, with the tile's
//   BLOCK_M activation scales of the block (one bulk copy when As is column-major with M a
//   multiple of 4; otherwise every lane copies a share with 4-byte cp.async). Each stage has a
//   full barrier (lane 0's expected bytes, plus one cp.async arrival per lane in the second case)
//   and an empty barrier (one arrival per consumer warp). The other warpgroups consume, each
//   owning 64 rows of the BLOCK_M x BLOCK_N tile; setmaxnreg moves registers from the producer to
//   them.
// - One K-block per stage, so one As and one Bs per row per stage: 4 wgmma m64nNk32 accumulate
//   the block's dot products, the consumer waits for them, frees the stage and promotes,
//   total += block * (As * Bs) (kScaledFp8: total += block). The tensor cores' reduced-precision
//   FP8 accumulation never spans more than 128 products. What keeps the tensor cores busy while a
//   warpgroup promotes:
//   - Tiles of up to 128 x 128: two accumulator sets per warpgroup; block kb + 1's wgmma are issued
//     before block kb is waited for and promoted, so each warpgroup keeps the tensor cores fed by
//     itself (H200, 128 x 128 at M = 4096: the scaled recipe's times 9-16% lower than with the two
//     warpgroups taking turns; the block-scaled recipe's 7-31% lower, together with the scale
//     copies below). Every unit
//     starts at stage 0 and the loop is unrolled over a whole number of ring laps and set pairs,
//     so stages, barrier parities (one bit per stage), descriptors and scale offsets are
//     compile-time constants: 27% fewer instructions, block-scaled M = 4096 5-12% faster
//     (turns: 10% slower than two sets; free-running warpgroups 13%; 2-CTA clusters 4-10%).
//     The smaller tiles (64 x 64, 64 x 128, 128 x 64: decode and M <= 512) ran one set before
//     (128 x 64 with the warpgroups taking turns): each K-block's wgmma, wait and promotion came
//     one after the other, and at 0.2-0.3 us per K-block the consumer, not the memory, set a
//     decode GEMM's pace. With two sets, block-scaled M = 1 to 64 ran 8-16% faster on the shapes
//     on those tiles ((1, 7168, 16384) 35.7 -> 32.1 us, 92% of its memory floor), M = 128 up to
//     11%, W8A8 FP8 decode and M = 128 up to 17% (H200, two alternating runs).
//   - Fine promotion (kFinePromotion: block-scaled, fp32 D, opts.fine_promotion): 128 x 128 tiles
//     (and the decode plans' 64 x 64 and 64 x 128 ones) whose four wgmma per K-block each run
//     into a cleared set of their own (sets 0, 1, 0, 1) and
//     are promoted with the block's scales while the next one runs, so that the tensor cores' own
//     sum spans 32 products instead of 128: fp32 error 2.8x lower on DeepSeek-style data, 2x on
//     random codes (H200; docs/GEMM.md). Four promotions a block where the other tiles have one.
//     kFinePromotion64 (opts.fine_promotion = 64): two wgmma into a set, two promotions a block.
//   - 128 x 192 tiles (the FP8 recipes at 65-128 rows, where they cover N in one wave): one
//     set, too large for two; the warpgroups run free (taking turns at completion ran
//     0-3% slower, at issue 3-5%; H100, M = 4096), and a tile row spans two weight-scale blocks,
//     each column group of 8 promoted with its own block's scale.
//   - 128 x 112 tiles (scaled FP8 at 65-128 rows, whole tiles where they leave the busiest SM
//     fewer columns): the two-set loop; 16-bit D is stored straight from the fragment (the
//     staging tile is made of 64-column boxes).
//   - 128 x 96 tiles (block-scaled at 65-128 rows, one wave where 128 x 128 tiles leave a third of
//     the SMs idle on long units): the two-set loop on 6 stages, D from the fragment; a tile row
//     starting at 96 j may straddle two weight-scale blocks, its column groups from 4 or 8 on
//     taking the second block's scale (a second ring of scale registers, four selects a block).
//   - 256 x 128 tiles (block-scaled, M > 128 where the waves model prefers them): two consumer
//     warpgroups of 128 rows, each running its two 64-row sub-tiles one after the other into
//     one accumulator set and promoting each into its own total (64 + 128 registers); the
//     warpgroups run free. A quarter less operand traffic per product than 128 x 128: block-
//     scaled M = 4096 1.4-3.3% faster than the two-set 128 x 128 tiles on five of the six bench
//     shapes, M = 2048 up to 6% (H200, two alternating runs). Three ring stages next to the
//     whole 64 KB staging tile, a part per sub-tile, so that a warpgroup stores its second
//     sub-tile without waiting for the copy of its first to read the staging tile (with half of
//     it: (4096, 32768, 512) 151.0 -> 144.2 us, (2048, ...) 77.3 -> 73.5), and both parts are
//     written between one pair of barriers and leave in one bulk group ((4096, 32768, 512)
//     145.0 -> 138.8 us, (2048, ...) 73.0 -> 68.7, (4096, 24576, 1536) 258.0 -> 254.7, but
//     (4096, 7168, 16384) 718.2 -> 726.3; H200, run twice); four stages with direct stores
//     instead ran 4-100% slower. The K loop is unrolled over the ring (compile-time stages, as
//     the two-set loop) and waits for the next K-block's stage while the last sub-tile's wgmma
//     run: (4096, 7168, 16384) 719.1 -> 674.5 us, (4096, 4096, 7168) 185.9 -> 176.0, M = 512
//     (7168, 16384) 103.9 -> 98.6, but (4096, 32768, 512) 137.5 -> 140.4 (H200, run twice). The
//     ring runs on across units: restarting each unit at stage 0, as the two-set loop does,
//     idled the producer at every unit's end, (4096, 32768, 512) 153.8 us. A split last wave
//     (below) runs in an instantiation of its own (kTallSplit), and so do units of 32 K-blocks or
//     more (kTallLongK): there the consumers find their tile by division instructions and store each
//     sub-tile between its own pair of barriers, in its own bulk group, which the short units
//     lose to (the fast divisions took (4096, 32768, 512) 138.5 -> 134.9 us, one pair of
//     barriers 145.0 -> 138.8) and the long ones gain from: (4096, 7168, 16384) 694.1 -> 684.9
//     and 693.9 -> 685.7 us in two calls, (512, 7168, 16384) 99.4 -> 97.1, (4096, 4096, 7168)
//     1%, the short-K shapes unchanged (H200).
//   - 192 x 128 tiles (block-scaled: 129-192 rows on long units, and past 192 rows where the
//     tile heuristic's waves model prefers them, e.g. M = 576): three consumer warpgroups of 64
//     rows, one accumulator set each (152 registers), the single-set loop, 4 stages next to the
//     48 KB staging tile; three promotion chains share the tensor cores. One tile row reads B once
//     where 128-row tiles take two rows (half of the second padding) and 64-row ones three:
//     (192, 8192, 28672) 123.5 -> 95.4 us against the rules' 128 x 128 tiles (H100). At M = 4096
//     the 256 x 128 tiles beat them by 8-14% (docs/GEMM.md).
//   kScaledInt8 needs no promotion (int32 is exact): its wgmma accumulate over the whole K range,
//   and a stage is freed one K-block late (wait_group 1), so the tensor cores always have the next
//   K-block's wgmma queued.
// - Activation scales travel with their stage, so their global-memory latency hides in the ring
//   like the operands'; consumers read them from shared memory. Any As layout works (strided
//   reads). The weight-block scale of a K-block is one float per tile row: the consumers load it
//   themselves from global memory (L2), while the block's wgmma run, two blocks ahead on the
//   single-set path. The two-set tiles load it kRing - 1 blocks before its issue (one for tiles
//   of 128 columns) into a ring of registers whose slot is a compile-time constant of the
//   unrolled loop: the one-value form that preceded it copied each load's result into another
//   register a block later, and that move waited on the load (the decode loops' top stall,
//   Nsight Compute): decode rows up to 7.5% faster, one 1.6% slower (docs/GEMM.md). Copying
//   both with 4-byte cp.async per stage, as a first version did, made the M = 4096 shapes up to
//   31% slower (the full barriers then waited on the cp.async arrivals).
//   256-row tiles instead take it from their stage: the producer warp reads 32 K-blocks' scales at
//   once (a lane each), lane 0 stores the stage's into a slot of its own and only then arrives on
//   the full barrier (whose bytes it announced with expect_tx before the copies), so no copy
//   waits on the read. Their consumers' L2 loads had waited at every unit's first promotion, and
//   their loop loses the registers: block-scaled M = 4096 0.5-3% faster, the short-K shapes most
//   ((4096, 24576, 1536) 248.3 -> 240.5 us; H200, two calls; docs/GEMM.md).
//   Two-set tiles whose units are short (kShortUnits: at most 8 K-blocks) take it from their stage
//   too, as one more bulk copy counted on the stage's bytes: the 16-byte window of the scales that
//   holds it (the scales start 16-byte aligned, and this variant runs only where their count is a
//   multiple of 4, so no window reaches past them); the consumer reads word (row offset + block)
//   % 4 of the window. (128, 32768, 512) 8.99 -> 8.32 us (H200, same call). On long units every
//   form of this measured cost decode streams 5-14% ((1, 7168, 16384) 31.9 -> 35.1 us with the
//   windows), and the windows cost the 256-row tile up to 0.7% against the producer's stores.
//   The scaled recipes' epilogue factors (sa and zero point per row, sb, bias and azp_adj per
//   column) are read by a second warp of the producer warpgroup, a unit ahead, into a
//   double-buffered shared-memory area (factors_full / factors_empty barriers). Loaded from global
//   memory in the epilogue, their latency stood between every tile's last K-block and its stores
//   (H100: FP8 (4096, 6144, 4096) 165.5 -> 157.4 us once staged).
// - Persistent: a CTA per SM walks tiles blockIdx.x, + gridDim.x, ... in a grouped raster order.
//   Producer and consumers walk the same sequence and keep their ring position across tiles, so
//   the producer fills the next tile's stages during the consumers' epilogue.
// - Edges: TMA zero-fills rows past N and columns past K (zeros add nothing to the dot products,
//   and the whole box still counts toward the barrier's bytes); stores are masked. Rows past M are
//   not fetched: A's box stops at M rounded up to 8 rows, through a tensor map of its own for the
//   last tile row (tmap_a_tail), whose rows past that keep stale bytes (their results are never
//   stored). The copy engine's zero fill is slow: a tile row of 32 rows in a 128-row box took up to
//   1.7x the time of a whole one, 2.1x in a 128 x 64 tile (H100, docs/GEMM.md).
// - Split-K, for the tiles that would leave SMs idle: every tile of a decode shape, or the tiles
//   of a last, thin wave (the first whole_tiles units are whole tiles). A split unit is a tile and
//   one of `splits` consecutive K-block ranges. Each unit leaves its FP32 partial tile in the workspace,
//   in the consumers' register order (thread-major 16-byte words, so both the write and the read
//   are coalesced; int32 for kScaledInt8, whose sum stays exact), and counts itself on the tile's
//   counter; the unit that counts last adds the partials in split order (deterministic: the same
//   sums for every run), runs the epilogue and puts the counter back to zero for the next call.
//   The count is one thread's acq_rel atomic after a barrier of the CTA, not a __threadfence
//   (fence.sc) in every thread before and after it: in-kernel clock stamps put the handshake and
//   the sum at 4,400 of the 15,000 cycles of (64, 2112, 7168) split 4 ways, and the lighter
//   handshake took 0.27-0.58 us off the split decode shapes (H200). Only threads holding rows
//   below M write and read partials (M = 1: 4 threads of 128). What the split still costs, from
//   timing-only builds without the partials and the handshake: 1.2-2.8 us of the split decode
//   shapes (H200). The sum spread over all units of the tile instead (each adding a share, as the
//   256 x 128 tiles do below) ran them 0.7-2.3 us slower: every unit then waits for the last one
//   and for one more round trip (docs/GEMM.md).
//   A split 256 x 128 tile's partial is 128 KB, too much for one CTA to add up: there every unit
//   writes its partial, waits until all units of the tile have (they run in the grid's last round,
//   one per CTA of a cooperative launch, so they are all resident), then copies its share (1 /
//   splits of each thread's values) of every partial into its idle ring, adds them in split
//   order and stores them; the last to count a second time resets the counter. A plain launch
//   could start part of the grid while other kernels hold the remaining SMs, and two such GEMMs
//   on two streams could then wait on each other. ((4096, 2112, 7168): 264 whole tiles and 8
//   split 16 ways, 106.8 -> 99.8 us; the writes and reads of the partials still cost about 10 us,
//   so the heuristic splits these tiles only where units run 32 K-blocks or more.)
//   A last round of long units that leaves fewer than half the SMs idle (kTallTail) cannot be split
//   evenly into one unit per CTA: (4096, 7168, 16384) has 896 tiles on 132 SMs, 104 in the last
//   round. There each of those tiles is two units: its owner, the first tail_kb K-blocks, on a CTA
//   of its own, and its helper, the rest, on one of the idle CTAs, which run several helpers one
//   after another (28 CTAs, 4 each, 20 of the 128 K-blocks). A helper leaves its partial and counts
//   on the tile's counter; the owner waits for that count, adds the partial (copied into its idle
//   ring) and runs the epilogue. Owners never run helpers and helpers never wait, so the
//   cooperative launch is enough for progress. The round then takes about 0.84 of a tile's time
//   instead of a whole one: (4096, 7168, 16384) 658.7-659.8 -> 652.4-653.5 us (H100). Timed in
//   the same development builds, the helper's count from a warp of the producer warpgroup (so
//   that the consumers go on without waiting for their stores to reach L2) was 3-4% slower on the
//   whole shape (ptxas then spilled in the producer's K loop: 23 local stores against 4). The
//   walk: sm90_gemm_tail_unit_of.
// - No clusters. Pairs of CTAs along M sharing B by TMA multicast (a quarter less L2 traffic)
//   paid 5-11% when the mainloop drained the tensor pipe every K-block; with two accumulator
//   sets the pair's lockstep costs more than the traffic saves: every block-scaled M = 4096 shape
//   ran 4-10% faster without them (H200, A/B run twice), and the multicast path was removed.
//   At decode, pairs of neighbouring tiles sharing A by multicast (cuBLASLt's structure for
//   (128, 32768, 512)) ran every block-scaled row that took them 7-23% slower (docs/GEMM.md).
// - Epilogue of 16-bit D without C (the common case): each consumer warpgroup writes its 64 x
//   BLOCK_N fragment into a staging tile in shared memory, in the 128-byte swizzled layout (a
//   warp's 32 stores hit 32 different banks), and one thread stores it with TMA; the warpgroup goes
//   on with the next tile at once and waits for the copy only before it reuses the staging tile.
//   A ring deeper than fits next to the whole staging tile (the launcher's choice for scaled FP8
//   128 x 128 tiles up to 128 rows: 6 stages, not 5) stages one 64-column box per warpgroup at a
//   time, each box waiting for the previous one's copy to have read it.
//   Otherwise (fp32 D, C, pitches TMA cannot take) the fragment is stored directly, masked.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/fastdiv.h"
#include "cuda/pack.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/sync.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"

enum class Sm90Recipe { kBlockScaledFp8, kScaledFp8, kScaledInt8 };

// Whether the recipe runs its tiles of up to 128 x 128 with two accumulator sets (the FP8 recipes,
// which promote every K-block; NOTES). The launcher's tile heuristic asks the same question.
__host__ __device__ constexpr bool sm90_gemm_two_sets(Sm90Recipe r) { return r != Sm90Recipe::kScaledInt8; }
// Whether the recipe has the 128 x 192 tile (NOTES): the FP8 recipes, whose promotion applies a
// weight-scale block per column group.
__host__ __device__ constexpr bool sm90_gemm_wide(Sm90Recipe r) { return r != Sm90Recipe::kScaledInt8; }
// Whether the recipe has the 128 x 112 tile (65-128 rows, NOTES): the scaled FP8 one, whose tiles
// may start anywhere in a 128-column block (it has no weight-scale blocks).
__host__ __device__ constexpr bool sm90_gemm_narrow(Sm90Recipe r) { return r == Sm90Recipe::kScaledFp8; }
// Whether 16-bit D of a BLOCK_N-column tile leaves through the staging tile and TMA: the staging
// tile is made of 64-column (128-byte) boxes, so BLOCK_N must be a multiple of 64.
__host__ __device__ constexpr bool sm90_gemm_staged(int block_n, int out_bytes) { return out_bytes == 2 && block_n % 64 == 0; }
// Whether the recipe has the 256 x 128 tile (NOTES): the block-scaled one.
__host__ __device__ constexpr bool sm90_gemm_tall(Sm90Recipe r) { return r == Sm90Recipe::kBlockScaledFp8; }

struct sm90_gemm_params {
  // kBlockScaledFp8
  const float *a_scales;  // (m, kb) at a_scales[m * as_m + kb * as_k]
  int64_t as_m, as_k;
  int as_bulk;            // column-major As (as_m 1), M a multiple of 4: one bulk copy per stage
  const float *b_scales;  // [ceil(N / 128), num_kb], contiguous; grouped: [experts][ceil(N / 128), num_kb]
  const float *c;         // NULL, or fp32 [M, N] with row pitch c_ld; may alias d
  int64_t c_ld;
  void *d;                // [M, N] with row pitch d_ld
  int64_t d_ld;
  int M, N, num_kb;
  int tiles_m, tiles_n, raster_group;
  // The walk's divisors: splits, raster_group, the last group's tile rows (tiles_m - its first
  // row), raster_group * tiles_n (fast divisions: sm90_gemm_unit_of and sm90_gemm_tile_coords)
  qf_fastdiv by_splits, by_group, by_last_rows, by_group_tiles;
  int pairs;              // d and c rows allow 2-element accesses at even columns
  int whole_tiles;        // the first tiles (in walk order) run whole; the rest are split
  int splits;             // K-block ranges per split tile (1: no split)
  float *partials;        // splits > 1: [split tiles * splits][kBlockM * kBlockN] fp32
  int *counters;          // splits > 1: [split tiles], zero between calls
  int tma_store;          // D through the staging tile and TMA (16-bit D, no C, aligned)
  uint32_t a_stage_bytes; // bytes of A a stage receives: BLOCK_M rows, or M rounded up to 8 when
                          // M < BLOCK_M (rows past it hold stale bytes, their results are dropped)
  uint32_t a_tail_bytes;  // the same for the last tile row: its rows below M rounded up to 8 (tmap_a_tail)
  // kScaledFp8 / kScaledInt8
  const float *sa, *sb;   // [1] or [M]; [1] or [N]
  int sa_per_row, sb_per_col;
  const void *bias;       // NULL or [N] of D's type
  const int32_t *azp_adj; // NULL or [N]: zp = azp_adj[n] (per tensor) or azp[m] * azp_adj[n]
  const int32_t *azp;     // NULL or [M]
  // grouped (kGrouped, kGroupedSwiGLU; last, so that the other kernels' parameters keep their places)
  const int32_t *expert_ids;  // contiguous: 128-row block mb's expert at expert_ids[mb * ids_stride]
  int64_t ids_stride;
  const int32_t *masked_m;    // masked (expert_ids NULL): expert e's blocks [e * expert_blocks, + expert_blocks),
  int expert_blocks;          // those from row masked_m[e] of the expert on skipped
  int experts;                // B is [experts * N, K], expert e's rows from e * N
  // kTallTail: K-blocks of a last-round tile's owner unit, [0, tail_kb); its helper runs the rest
  int tail_kb;
};

// Work unit u: the first whole_tiles units are whole tiles; after them every remaining tile is
// `splits` units, one per K range. `part` numbers the split tiles (their partials and counters).
struct sm90_gemm_unit {
  int tile, split, splits, part;
};
// (Fast divisions: a unit's first K-block is issued sooner, the walk's divisions having taken
// about 800 of the 1,700 cycles from a decode kernel's start to its first copy.)
__device__ __forceinline__ sm90_gemm_unit sm90_gemm_unit_of(const sm90_gemm_params &p, int unit) {
  if (unit < p.whole_tiles) return {unit, 0, 1, 0};
  const int u = unit - p.whole_tiles, part = qf_fastdiv_div(u, p.by_splits);
  return {p.whole_tiles + part, u - part * p.splits, p.splits, part};
}

// kTallTail's walk (NOTES, split-K): after the whole tiles (whole_tiles, a multiple of the grid),
// each of the last round's `tail` tiles is two units: its owner, K-blocks [0, tail_kb) on CTA
// (tile - whole_tiles), and its helper, the rest, on one of the grid - tail CTAs left over, each of
// which runs helpers one after another: CTA tail + h takes tiles h, h + (grid - tail), ... of the
// round. A unit with tile -1 is none: the CTA has no more.
__device__ __forceinline__ sm90_gemm_unit sm90_gemm_tail_unit_of(const sm90_gemm_params &p, int unit) {
  if (unit < p.whole_tiles) return {unit, 0, 1, 0};
  const int tail = p.tiles_m * p.tiles_n - p.whole_tiles, c = blockIdx.x;
  const int round = (unit - p.whole_tiles) / static_cast<int>(gridDim.x);
  const int i = c < tail ? (round == 0 ? c : tail) : c - tail + round * (static_cast<int>(gridDim.x) - tail);
  if (i >= tail) return {-1, 0, 0, 0};
  return {p.whole_tiles + i, c < tail ? 0 : 1, 2, i};
}

// The K-blocks [begin, end) of range `split` of the unit's `splits` (p.splits, or 1) over
// num_kb, as even as they come.
__device__ __forceinline__ void sm90_gemm_split_range(const sm90_gemm_params &p, const sm90_gemm_unit &u, int &begin,
                                                      int &end) {
  if (u.splits == 1) {
    begin = 0, end = p.num_kb;
    return;
  }
  const int base = qf_fastdiv_div(p.num_kb, p.by_splits), extra = p.num_kb - base * p.splits;
  begin = u.split * base + min(u.split, extra);
  end = begin + base + (u.split < extra ? 1 : 0);
}

// Whether the recipe's epilogue takes per-row and per-column factors (sa, zero points, sb, bias,
// azp_adj), staged a unit ahead by the producer warpgroup's second warp.
__host__ __device__ constexpr bool sm90_gemm_epilogue_factors(Sm90Recipe r) { return r != Sm90Recipe::kBlockScaledFp8; }

// Shared memory: kStages A tiles, kStages B tiles, the D staging tile (staged 16-bit D: BLOCK_M x BLOCK_N),
// kStages x BLOCK_M As, with kHasFactors two buffers of epilogue factors (per buffer sb, bias,
// azp_adj [BLOCK_N] and sa, zero point [BLOCK_M], 4 bytes each), then the full and empty barriers
// of the stages and of the two factor buffers.
// Consumer warpgroups of a BLOCK_M-row tile: one per 64 rows up to 192 rows; a 256-row tile has
// two, each running its 128 rows as two 64-row sub-tiles.
__host__ __device__ constexpr int sm90_gemm_consumers(int block_m) { return block_m == 256 ? 2 : block_m / 64; }

// The layout with a staging tile of kStagingCols columns per 64-row part and kScaleBytes of
// weight-block scale slots (sm90_gemm_scale_slot_bytes).
template <int kBlockM, int kBlockN, int kStages, int kOutBytes, bool kHasFactors, int kScaleBytes, int kStagingColsAt>
struct sm90_gemm_smem_at {
  static constexpr uint32_t kABytes = kBlockM * 128, kBBytes = kBlockN * 128;
  static constexpr int kStagingCols = kStagingColsAt;
  static constexpr uint32_t kStaging = kStages * (kABytes + kBBytes);
  static constexpr uint32_t kScalesA = kStaging + (sm90_gemm_staged(kBlockN, kOutBytes) ? kBlockM * kStagingCols * 2 : 0);
  static constexpr uint32_t kFactorWords = 3 * kBlockN + 2 * kBlockM;  // one buffer
  static constexpr uint32_t kScalesB = kScalesA + kStages * kBlockM * 4;
  static constexpr uint32_t kFactors = kScalesB + kScaleBytes;
  static constexpr uint32_t kBarriers = kFactors + (kHasFactors ? 2 * kFactorWords * 4 : 0);
  // + 1024: the base is rounded up to the 1024-byte period of the 128-byte swizzle.
  static constexpr size_t kBytes = kBarriers + (2 * kStages + (kHasFactors ? 4 : 0)) * sizeof(uint64_t) + 1024;
};
// The staging tile holds the whole tile, or one 64-column box per part (stored box after box)
// where the whole one does not fit next to kStages stages (a deeper ring chosen by the launcher).
template <int kBlockM, int kBlockN, int kStages, int kOutBytes, bool kHasFactors, int kScaleBytes>
struct sm90_gemm_smem
    : sm90_gemm_smem_at<kBlockM, kBlockN, kStages, kOutBytes, kHasFactors, kScaleBytes,
                        sm90_gemm_smem_at<kBlockM, kBlockN, kStages, kOutBytes, kHasFactors, kScaleBytes, kBlockN>::kBytes <=
                                227 * 1024
                            ? kBlockN
                            : 64> {};

// Whether a split 256 x 128 tile's unit can gather its share of all `splits` partials into a ring
// of `stages` stages (48 KB each): the largest share is ceil(64 / splits) of each thread's 64
// column pairs, 2 KB per pair and partial (NOTES, split-K). 3 stages hold 72 pairs, which 15
// ways (15 x 5) exceed.
__host__ __device__ constexpr bool sm90_gemm_tall_share_fits(int splits, int stages) {
  return splits * ((64 + splits - 1) / splits) * 2048 <= stages * (256 + 128) * 128;
}

// Grouped raster order: down `group` tile rows of one tile column, then the next column, so that
// the CTAs of a wave share few A and B tiles in L2.
__device__ __forceinline__ void sm90_gemm_tile_coords(const sm90_gemm_params &p, int tile, int &m_blk, int &n_blk) {
  const int g = qf_fastdiv_div(tile, p.by_group_tiles);
  const bool last = p.tiles_m - g * p.raster_group < p.raster_group;  // a last group of fewer rows
  const int in_group = tile - g * p.raster_group * p.tiles_n;
  n_blk = qf_fastdiv_div(in_group, last ? p.by_last_rows : p.by_group);
  m_blk = g * p.raster_group + in_group - n_blk * (last ? p.tiles_m - g * p.raster_group : p.raster_group);
}

// The same by division instructions: the long-K 256 x 128 kernel's consumers ran 0.7-1.3% slower
// with the fast divisions above (which the producers and every other kernel keep; NOTES).
__device__ __forceinline__ void sm90_gemm_tile_coords_div(const sm90_gemm_params &p, int tile, int &m_blk, int &n_blk) {
  const int per_group = p.raster_group * p.tiles_n, g = tile / per_group;
  const int rows = min(p.raster_group, p.tiles_m - g * p.raster_group), in_group = tile - g * per_group;
  m_blk = g * p.raster_group + in_group % rows;
  n_blk = in_group / rows;
}

// f(std::integral_constant<int, v>{}) for the runtime v in [0, sizeof...(I)): a runtime stage
// made a compile-time one.
template <class F, int... I>
__device__ __forceinline__ void with_constant(int v, F &&f, std::integer_sequence<int, I...>) {
  ((v == I ? (f(std::integral_constant<int, I>{}), 0) : 0), ...);
}

__device__ __forceinline__ void store_pair(__nv_bfloat16 *p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store_pair(__half *p, float x, float y) {
  *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store_pair(float *p, float x, float y) { *reinterpret_cast<float2 *>(p) = make_float2(x, y); }
__device__ __forceinline__ void store_one(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_one(__half *p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store_one(float *p, float x) { *p = x; }
// o[0], o[1] = (x, y) plus c[0], c[1] where there is C (c not null): one column pair of the
// direct epilogue, by 2-element accesses where `pairs` allows them.
template <typename OutT>
__device__ __forceinline__ void store_cols(OutT *o, const float *c, float x, float y, bool pairs) {
  if (c != nullptr) {
    if (pairs) {
      const float2 cv = *reinterpret_cast<const float2 *>(c);
      x += cv.x, y += cv.y;
    } else {
      x += c[0], y += c[1];
    }
  }
  if (pairs) {
    store_pair(o, x, y);
  } else {
    store_one(o, x);
    store_one(o + 1, y);
  }
}
// SwiGLU of a 64-row fragment t: silu(gate) * up for the thread's column c (0, 1) of output column
// group j and row half h (gate group 2 j, up group 2 j + 1 of the tile), with the fast exponential
// and division (the IEEE division's slow path, a call, made ptxas spill the main loop's registers).
__device__ __forceinline__ float swiglu_at(const float *t, int j, int h, int c) {
  const float g = t[8 * j + 2 * h + c];
  return __fdividef(g, 1.0f + __expf(-g)) * t[8 * j + 4 + 2 * h + c];
}
__device__ __forceinline__ uint32_t pack_pair(float, float, float) { return 0; }  // never staged (16-bit: pack.cuh)
__device__ __forceinline__ float bias_at(const __nv_bfloat16 *b, int n) { return __bfloat162float(b[n]); }
__device__ __forceinline__ float bias_at(const __half *b, int n) { return __half2float(b[n]); }
__device__ __forceinline__ float bias_at(const float *b, int n) { return b[n]; }

// 32-bit words of the split-K partials.
__device__ __forceinline__ uint32_t word_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t word_of(int32_t v) { return static_cast<uint32_t>(v); }
__device__ __forceinline__ void add_word(float &v, uint32_t w) { v += __uint_as_float(w); }
__device__ __forceinline__ void add_word(int32_t &v, uint32_t w) { v += static_cast<int32_t>(w); }

// The instantiations of the 256-row tile (NOTES): kTallSplit, the one whose last wave may be
// split (split-K); the whole-tile ones have none of that code (code never taken has cost this
// kernel 1.5-3% through ptxas's register allocation: docs/GEMM.md, stream-K). kTallLongK, whole
// tiles of units of kSm90LongUnit K-blocks or more, whose consumers find their tile by division
// instructions and store each sub-tile between its own pair of barriers. kTallTail, the same on
// long units whose last round leaves fewer than half the SMs idle: each of that round's tiles is
// split between an owner and a helper that an idle CTA runs (NOTES, split-K). The grouped (MoE)
// block-scaled GEMM on 128-row tiles: kGrouped, and kGroupedSwiGLU, whose epilogue pairs the gate
// and up columns (interleaved by 8) into silu(gate) * up. kShortUnits: block-scaled two-set tiles
// whose units run at most kSm90ShortUnit K-blocks and whose weight-block scales are whole 16-byte
// windows: each stage brings the window that holds its block's scale (NOTES). Other tiles: kAny.
// kFinePromotion / kFinePromotion64: block-scaled, fp32 D, the tensor cores' sums promoted every
// 32 / 64 of K (opts.fine_promotion).
enum class Sm90Variant { kAny, kTallSplit, kTallLongK, kGrouped, kGroupedSwiGLU, kShortUnits, kTallTail, kFinePromotion,
                         kFinePromotion64 };
// D's columns of a BLOCK_N-column tile: half of them with the SwiGLU epilogue.
__host__ __device__ constexpr int sm90_gemm_out_cols(int block_n, Sm90Variant v) {
  return v == Sm90Variant::kGroupedSwiGLU ? block_n / 2 : block_n;
}
constexpr int kSm90LongUnit = 32;  // K-blocks of a unit from which it counts as long
constexpr int kSm90ShortUnit = 8;  // K-blocks of a unit up to which it counts as short
// Shared memory for the weight-block scales of the stages: the 256-row tile's, written by the
// producer (4 bytes per stage, in 16-byte units), or a short-unit tile's 16-byte windows.
__host__ __device__ constexpr int sm90_gemm_scale_slot_bytes(int block_m, int stages, Sm90Variant v) {
  return block_m == 256 ? (stages + 3) / 4 * 16 : v == Sm90Variant::kShortUnits ? stages * 16 : 0;
}

// kPdl: launched as a programmatic dependent (qf_ctx_set_pdl), an instantiation of its own: the
// same code behind a run-time flag made the decode shapes 1.5-4% slower with PDL off (docs/GEMM.md).
template <Sm90Recipe R, int kBlockM, int kBlockN, int kStages, typename OutT, Sm90Variant V = Sm90Variant::kAny,
          bool kPdl = false>
__global__ void __launch_bounds__(sm90_gemm_consumers(kBlockM) * 128 + 128, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_a_tail,
                     const __grid_constant__ CUtensorMap tmap_b, const __grid_constant__ CUtensorMap tmap_d,
                     const sm90_gemm_params p) {
  constexpr bool kInt8 = R == Sm90Recipe::kScaledInt8;
  constexpr bool kTallSplit = V == Sm90Variant::kTallSplit, kTallTail = V == Sm90Variant::kTallTail;
  constexpr bool kLongK = V == Sm90Variant::kTallLongK || kTallTail;
  constexpr bool kSwiGLU = V == Sm90Variant::kGroupedSwiGLU, kGrouped = kSwiGLU || V == Sm90Variant::kGrouped;
  constexpr bool kBlockScales = R == Sm90Recipe::kBlockScaledFp8;
  // FP8 on tiles of up to 128 x 128 keeps two K-blocks in flight per warpgroup (see the NOTES).
  // kFinePromotion: each wgmma (32 of K) promoted on its own, two sets taking turns (NOTES);
  // kFinePromotion64 the same with two wgmma (64 of K) a step.
  constexpr bool kFine = V == Sm90Variant::kFinePromotion || V == Sm90Variant::kFinePromotion64;
  constexpr int kFineSteps = V == Sm90Variant::kFinePromotion64 ? 2 : 4;  // promotions per K-block
  static_assert(!kFine || (R == Sm90Recipe::kBlockScaledFp8 &&
                            ((kBlockM == 128 && kBlockN == 128) || (kBlockM == 64 && (kBlockN == 64 || kBlockN == 128)))),
                "fine promotion: block-scaled 128 x 128, 64 x 64 or 64 x 128 tiles");
  constexpr bool kTwoAcc = sm90_gemm_two_sets(R) && kBlockM <= 128 && kBlockN <= 128 && !kFine;
  using Acc = std::conditional_t<kInt8, int32_t, float>;  // the tensor cores' accumulator
  constexpr int kConsumers = sm90_gemm_consumers(kBlockM);
  constexpr int kSub = kBlockM / 64 / kConsumers;  // 64-row sub-tiles per consumer warpgroup
  // setmaxnreg: the producer warpgroup keeps kProducerRegs, the consumers share the rest of the
  // SM's 64 K registers (multiples of 8). 256-row tiles: 24 / 240, block-scaled M = 4096 0.7-1.7%
  // and M = 512 up to 2% faster than at 40 / 232 (H200, two calls, each run twice); the other
  // tiles keep 40 / 232 (their producer code spills at 24 and 32), three warpgroups 40 / 152.
  constexpr int kProducerRegs = kSub > 1 ? 24 : 40;
  constexpr int kConsumerRegs = (65536 - 128 * kProducerRegs) / (128 * kConsumers) / 8 * 8;
  static_assert(kSub == 1 || (sm90_gemm_tall(R) && kBlockN == 128), "256-row tiles: block-scaled, 128 columns");
  static_assert(!(kTallSplit || kTallTail) || kSub > 1, "the spread reduction and the tail's helpers are the 256-row tile's");
  static_assert(!kGrouped || (R == Sm90Recipe::kBlockScaledFp8 && kBlockM == 128),
                "grouped: block-scaled, one tile row per 128-row block of one expert");
  constexpr int kBlockK = 128;  // one scale block per stage
  constexpr bool kFactors = sm90_gemm_epilogue_factors(R);
  // kShortUnits: each stage's weight-block scale window copied with the stage
  constexpr bool kWindowScalesB = V == Sm90Variant::kShortUnits;
  static_assert(!kWindowScalesB || (kBlockScales && kTwoAcc), "short units: block-scaled two-set tiles");
  using Smem = sm90_gemm_smem<kBlockM, kBlockN, kStages, int(sizeof(OutT)), kFactors,
                              sm90_gemm_scale_slot_bytes(kBlockM, kStages, V)>;
  // D's columns of a tile (SwiGLU: half), which may leave through TMA (p.tma_store)
  constexpr int kOutCols = sm90_gemm_out_cols(kBlockN, V);
  constexpr bool kStaged = sm90_gemm_staged(kOutCols, int(sizeof(OutT)));
  static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 256 ||
                    (kBlockM == 192 && sm90_gemm_tall(R) && kBlockN == 128),
                "one, two or (block-scaled 192 x 128) three consumer warpgroups");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma m64nNk32 with N a multiple of 16");
  // A tile's columns share one B scale block, or (192 columns starting at a multiple of 64, 96 at
  // a multiple of 32) span two: the first 128 - n0 % 128 columns take the first block's scale, the
  // rest the next one's. The scaled FP8 recipe, which has no scale blocks, has 112-column tiles too.
  static_assert(128 % kBlockN == 0 || kBlockN == 192 || kBlockN == 96 || (kBlockN == 112 && R == Sm90Recipe::kScaledFp8),
                "a tile spans at most two B scale blocks");
  constexpr bool kTwoScaleBlocks = kBlockN == 192 || kBlockN == 96;
  // The single-set path's promotion (promote) knows one band boundary, a 192-column tile's (column
  // group 8 or 16); a 96-column tile's three bands are the two-set loop's (promote_block).
  static_assert(kBlockN != 96 || kTwoAcc, "96-column tiles run the two-set loop");
  static_assert(Smem::kABytes % 1024 == 0 && Smem::kBBytes % 1024 == 0,
                "every tile starts on a 1024-byte boundary (128-byte swizzle, descriptor base offset 0)");
  static_assert(Smem::kBytes <= 227 * 1024, "shared memory of one SM");

  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_u32 = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (smem_u32 + 1023u) & ~1023u;
  auto smem_a = [base](int s) { return base + s * Smem::kABytes; };
  auto smem_b = [base](int s) { return base + kStages * Smem::kABytes + s * Smem::kBBytes; };
  auto scales_a = [base](int s) { return base + Smem::kScalesA + s * kBlockM * 4; };
  auto scales_b = [base](int s) { return base + Smem::kScalesB + s * 16; };  // (kWindowScalesB)
  auto full_bar = [base](int s) { return base + Smem::kBarriers + s * 8; };
  auto empty_bar = [base](int s) { return base + Smem::kBarriers + (kStages + s) * 8; };
  auto factors_full = [base](int b) { return base + Smem::kBarriers + (2 * kStages + b) * 8; };
  auto factors_empty = [base](int b) { return base + Smem::kBarriers + (2 * kStages + 2 + b) * 8; };
  // The consumers read the scales with ordinary loads, through generic pointers.
  const float *sa_ring = reinterpret_cast<const float *>(smem_raw + (base - smem_u32) + Smem::kScalesA);
  float *sb_ring = reinterpret_cast<float *>(smem_raw + (base - smem_u32) + Smem::kScalesB);  // (256-row tiles, windows)
  // Epilogue factors, buffer b: sb, bias (as float), azp_adj (int32) [kBlockN], sa, zero point
  // (int32, 1 when there is none) [kBlockM].
  float *factors = reinterpret_cast<float *>(smem_raw + (base - smem_u32) + Smem::kFactors);
  enum { kSb = 0, kBias = kBlockN, kAdj = 2 * kBlockN, kSa = 3 * kBlockN, kZp = 3 * kBlockN + kBlockM };

  // The tensor maps' first use, the producer's first copies, waits for them: fetch them first.
  if (threadIdx.x == kConsumers * 128 && p.num_kb > 0) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_a_tail);
    prefetch_tensormap(&tmap_b);
  }
  // Programmatic dependent launch (kPdl, qf_ctx_set_pdl): this CTA may have started while the
  // kernel before it still runs; its set-up overlaps that kernel, and it waits for it (below) before
  // anything reads A, the scales, C or the workspace or writes anything. A kernel launched after
  // this one the same way may start once every CTA is here. (Asking the L2 for the first unit's
  // weight tiles before the wait, 8 or 12 K-blocks, made the chains slower: docs/GEMM.md.)
  if constexpr (kPdl) griddep_launch_dependents();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; s++) {
      // + one cp.async arrival per producer lane when As takes no bulk copy
      mbarrier_init(full_bar(s), kBlockScales && !p.as_bulk ? 1 + 32 : 1);
      mbarrier_init(empty_bar(s), kConsumers * 4);
    }
    for (int b = 0; kFactors && b < 2; b++) {
      mbarrier_init(factors_full(b), 32);  // every lane of the loading warp
      mbarrier_init(factors_empty(b), kConsumers * 4);
    }
    fence_mbarrier_init();
    fence_proxy_async_shared_cta();
  }
  __syncthreads();
  if constexpr (kPdl) griddep_wait();

  // The walk: units as sm90_gemm_unit_of numbers them (kTallTail: sm90_gemm_tail_unit_of, whose
  // helper CTAs run as many rounds past the whole tiles as the busiest one has helpers).
  const int num_units = [&] {
    const int tail = p.tiles_m * p.tiles_n - p.whole_tiles;
    if constexpr (kTallTail) {
      const int helpers = static_cast<int>(gridDim.x) - tail;
      return p.whole_tiles + (tail + helpers - 1) / helpers * static_cast<int>(gridDim.x);
    }
    return p.whole_tiles + tail * p.splits;
  }();
  const int first_unit = blockIdx.x, unit_step = gridDim.x;
  auto unit_of = [&](int unit) { return kTallTail ? sm90_gemm_tail_unit_of(p, unit) : sm90_gemm_unit_of(p, unit); };
  // The unit's K-blocks [begin, end)
  auto unit_range = [&](const sm90_gemm_unit &u, int &begin, int &end) {
    if constexpr (kTallTail) {
      begin = u.splits > 1 && u.split == 1 ? p.tail_kb : 0;
      end = u.splits > 1 && u.split == 0 ? p.tail_kb : p.num_kb;
    } else {
      sm90_gemm_split_range(p, u, begin, end);
    }
  };
  auto unit_tile = [&](const sm90_gemm_unit &u, int &m_blk, int &n_blk) {
    sm90_gemm_tile_coords(p, u.tile, m_blk, n_blk);
  };
  // Grouped: the expert of tile row m_blk (one 128-row block); -1 (padding, an id out of range, or
  // past the expert's token count): the tile is skipped by the producer and the consumers alike,
  // its D rows untouched.
  auto expert_of = [&](int m_blk) {
    if constexpr (!kGrouped) return 0;
    if (p.masked_m != nullptr) {
      const int e = m_blk / p.expert_blocks;
      return (m_blk - e * p.expert_blocks) * 128 < __ldg(p.masked_m + e) ? e : -1;
    }
    const int e = __ldg(p.expert_ids + m_blk * p.ids_stride);
    return e < p.experts ? e : -1;
  };
  // The weight-block scales of the tile row starting at column n0 of expert `expert`: one per K-block.
  auto b_scale_row = [&](int expert, int n0) {
    return p.b_scales + (static_cast<int64_t>(expert) * ((p.N + 127) / 128) + n0 / 128) * p.num_kb;
  };
  // (through a shuffle so that the compiler knows it is warp-uniform: descriptors in uniform registers)
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (wg == kConsumers) {
    // ---- producer: one warp keeps the ring full ----
    if constexpr (kConsumers > 1) setmaxnreg_dec<kProducerRegs>();
    const int lane = threadIdx.x % 32;
    if (threadIdx.x / 32 == kConsumers * 4 && p.num_kb > 0) {
      int s = 0;
      uint32_t empty_phases = 0;  // bit s: the parity stage s's empty barrier completes next, ^ 1
      for (int unit = first_unit; unit < num_units; unit += unit_step) {
        if constexpr (kTwoAcc || kFine) s = 0;  // the two-set and fine consumers start every unit at stage 0
        int m_blk, n_blk, kb_begin, kb_end;
        const sm90_gemm_unit u = unit_of(unit);
        if (kTallTail && u.tile < 0) continue;
        unit_tile(u, m_blk, n_blk);
        unit_range(u, kb_begin, kb_end);
        const int expert = expert_of(m_blk);
        if (expert < 0) continue;
        const int b_row = expert * p.N + n_blk * kBlockN;
        // Bulk As: the tile's rows below M (a multiple of 4 then: whole 16-byte units). Rows past M
        // keep what an earlier stage left: their results are never stored.
        const int64_t as_rows =
            kBlockScales && p.as_bulk ? min(int64_t{kBlockM}, p.as_k - int64_t{m_blk} * kBlockM) : 0;
        const uint32_t as_bytes = as_rows > 0 ? static_cast<uint32_t>(as_rows) * 4 : 0;
        // The last tile row of a partial one copies its rows below M (rounded up to 8) by a tensor map
        // of its own, not a whole box whose rows past M the copy engine fills with zeros.
        const bool tail_row = m_blk == p.tiles_m - 1;
        const uint32_t a_bytes = tail_row ? p.a_tail_bytes : p.a_stage_bytes;
        // 256-row tiles: the tile row's weight-block scales, read 32 K-blocks at a time (lane j
        // holds block kb + j) and written into each stage's slot by lane 0 before its arrival, so
        // that the consumers read them from shared memory with the stage (their own L2 loads
        // waited at every unit's first promotion).
        float b_lanes = 1.0f;
        for (int kb = kb_begin; kb < kb_end; kb++) {
          if constexpr (kSub > 1) {
            // (the row's address formed here, not held across the loop: the producer has 24 registers)
            const float *bs = b_scale_row(expert, n_blk * kBlockN);
            if ((kb - kb_begin) % 32 == 0) b_lanes = kb + lane < kb_end ? __ldg(bs + kb + lane) : 1.0f;
          }
          // A fresh barrier counts as having completed the phase before phase 0: the first use of a
          // stage waits on parity 1 and passes.
          mbarrier_wait_parity(empty_bar(s), ((empty_phases >> s) & 1u) ^ 1u);
          empty_phases ^= 1u << s;
          if (lane == 0) {
            // (256-row tiles: the stage's arrival follows its weight-block scale, below)
            constexpr uint32_t kWindow = kWindowScalesB ? 16 : 0;
            if constexpr (kSub > 1) mbarrier_expect_tx(full_bar(s), a_bytes + Smem::kBBytes + as_bytes);
            else mbarrier_arrive_expect_tx(full_bar(s), a_bytes + Smem::kBBytes + as_bytes + kWindow);
            cp_async_bulk_tensor_2d_g2s(smem_a(s), tail_row ? &tmap_a_tail : &tmap_a, full_bar(s), kb * kBlockK,
                                        m_blk * kBlockM);
            cp_async_bulk_tensor_2d_g2s(smem_b(s), &tmap_b, full_bar(s), kb * kBlockK, b_row);
            if (as_bytes > 0) {
              const float *src = p.a_scales + int64_t{m_blk} * kBlockM + kb * p.as_k;
              cp_async_bulk_g2s(scales_a(s), src, as_bytes, full_bar(s));
            }
            if constexpr (kWindowScalesB) {  // the 16 bytes of weight-block scales that hold block kb's
              const uintptr_t at = reinterpret_cast<uintptr_t>(b_scale_row(expert, n_blk * kBlockN) + kb);
              cp_async_bulk_g2s(scales_b(s), reinterpret_cast<const void *>(at & ~uintptr_t{15}), kWindow, full_bar(s));
            }
          }
          if (kBlockScales && !p.as_bulk) {
            // Rows past M get a zero scale, without a read.
#pragma unroll
            for (int i = 0; i < kBlockM / 32; i++) {
              const int row = m_blk * kBlockM + 32 * i + lane;
              const float *src = p.a_scales + static_cast<int64_t>(min(row, p.M - 1)) * p.as_m + kb * p.as_k;
              cp_async_ca_shared_global_4(scales_a(s) + (32 * i + lane) * 4, src, row < p.M ? 4 : 0);
            }
          }
          if (kBlockScales && !p.as_bulk) cp_async_mbarrier_arrive_noinc(full_bar(s));
          if constexpr (kSub > 1) {
            const float b = __shfl_sync(0xffffffffu, b_lanes, (kb - kb_begin) % 32);
            if (lane == 0) {
              sb_ring[s] = b;
              mbarrier_arrive(full_bar(s));
            }
          }
          if (++s == kStages) s = 0;
        }
      }
    }
    if (kFactors && threadIdx.x / 32 == kConsumers * 4 + 1) {
      // ---- the scaled recipes' epilogue factors of each unit's tile, up to two units ahead ----
      for (int unit = first_unit, it = 0; unit < num_units; unit += unit_step, it++) {
        const int b = it & 1;
        mbarrier_wait_parity(factors_empty(b), ((it >> 1) & 1) ^ 1);  // a fresh barrier passes parity 1
        int m_blk, n_blk;
        unit_tile(sm90_gemm_unit_of(p, unit), m_blk, n_blk);
        float *f = factors + b * Smem::kFactorWords;
        int32_t *fi = reinterpret_cast<int32_t *>(f);
        for (int c = lane; c < kBlockN; c += 32) {  // columns past N repeat the last one's (never stored)
          const int col = min(n_blk * kBlockN + c, p.N - 1);
          f[kSb + c] = p.sb[p.sb_per_col ? col : 0];
          f[kBias + c] = p.bias != nullptr ? bias_at(static_cast<const OutT *>(p.bias), col) : 0.0f;
          fi[kAdj + c] = p.azp_adj != nullptr ? p.azp_adj[col] : 0;
        }
        for (int r = lane; r < kBlockM; r += 32) {  // rows past M likewise
          const int row = min(m_blk * kBlockM + r, p.M - 1);
          f[kSa + r] = p.sa[p.sa_per_row ? row : 0];
          fi[kZp + r] = p.azp != nullptr ? p.azp[row] : 1;
        }
        mbarrier_arrive(factors_full(b));
      }
    }
  } else {
    // ---- consumers: wgmma per K-block, FP32 promotion (or int32 accumulation), epilogue ----
    if constexpr (kConsumers > 1) setmaxnreg_inc<kConsumerRegs>();
    const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    // and tile_row + 8 (wgmma D layout); sub-tile j: + 64 j
    const int tile_row = wg * 64 * kSub + warp * 16 + lane / 4;
    const int tile_col = 2 * (lane % 4);                   // and + 1, + 8 j
    // acc: the wgmma accumulators. total: the fp32 sum of the promoted K-blocks (FP8), then the
    // finished values of the tile for the epilogue (every recipe).
    Acc acc[kBlockN / 2];  // (kTwoAcc: two sets declared per unit, so that they are dead in the epilogue)
    // kThreads consumer threads, kValues totals each (the split-K partials are made of them)
    constexpr int kThreads = kConsumers * 128, kValues = kSub * kBlockN / 2;
    static_assert(!kTallTail || Smem::kStaging >= kThreads * kValues * 4, "the ring holds a helper's partial");
    float total[kValues];  // sub-tile j at kBlockN / 2 * j
    __shared__ int last_unit;  // split-K: this unit counted last on its tile
#pragma unroll
    for (int i = 0; i < kBlockN / 2; i++) acc[i] = Acc(0);
    int s = 0;
    uint32_t phase = 0;
    uint32_t full_phases = 0;  // two-set and 256-row paths: bit s is the parity stage s's full barrier completes next
    // This warp is done with a stage's tiles and scales: free it. s0 and s1 are the row scales
    // read from the stage: the empty asm makes the arrival wait for their loads, so that a refill
    // can never land before a queued load has read the stage.
    auto release = [&](int stage, float s0 = 1.0f, float s1 = 1.0f) {
      asm volatile("" ::"f"(s0), "f"(s1));
      if (lane == 0) mbarrier_arrive(empty_bar(stage));
    };
    auto fence_acc = [&] {
#pragma unroll
      for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(acc[i]);
    };
    // FP8: total += the completed K-block in `a` (its wait is done) times the scales of the
    // thread's two rows (kScaledFp8: 1, exact adds), by bands of column groups (compile-time
    // bounds, std::integral_constant): groups below mid take s0 and s1, those from mid to hi m0 and
    // m1, those from hi on h0 and h1.
    auto add_bands = [&](Acc(&a)[kBlockN / 2], float s0, float s1, float m0, float m1, float h0, float h1, auto mid,
                         auto hi) {
#pragma unroll
      for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(a[i]);
#pragma unroll
      for (int j = 0; j < kBlockN / 8; j++) {
        constexpr int kMid = decltype(mid)::value, kHiAt = decltype(hi)::value;
        const float r0 = j < kMid ? s0 : j < kHiAt ? m0 : h0, r1 = j < kMid ? s1 : j < kHiAt ? m1 : h1;
        total[4 * j + 0] = fmaf(a[4 * j + 0], r0, total[4 * j + 0]);
        total[4 * j + 1] = fmaf(a[4 * j + 1], r0, total[4 * j + 1]);
        total[4 * j + 2] = fmaf(a[4 * j + 2], r1, total[4 * j + 2]);
        total[4 * j + 3] = fmaf(a[4 * j + 3], r1, total[4 * j + 3]);
      }
    };
    // Two bands: the column groups from hi on take h0 and h1 (the second weight-scale block of a
    // 192-column tile).
    auto add_cols = [&](Acc(&a)[kBlockN / 2], float s0, float s1, float h0, float h1, auto hi) {
      add_bands(a, s0, s1, h0, h1, h0, h1, hi, hi);
    };
    auto add_block = [&](Acc(&a)[kBlockN / 2], float s0, float s1) {
      add_cols(a, s0, s1, s0, s1, std::integral_constant<int, kBlockN / 8>{});
    };
    // The single-set path: the K-block in `a` (of stage s, weight-block scales b.x and, for the
    // column groups from hi_at on, b.y) has completed: free its stage and add it to the total.
    auto promote = [&](Acc(&a)[kBlockN / 2], float2 b, int hi_at) {
      float s0 = 1.0f, s1 = 1.0f, h0 = 1.0f, h1 = 1.0f;
      if constexpr (kBlockScales) {
        const float a0 = sa_ring[s * kBlockM + tile_row], a1 = sa_ring[s * kBlockM + tile_row + 8];
        s0 = a0 * b.x, s1 = a1 * b.x, h0 = a0 * b.y, h1 = a1 * b.y;
      }
      release(s, s0, s1);
      if (++s == kStages) s = 0, phase ^= 1;
      if constexpr (kTwoScaleBlocks && kBlockScales) {
        // (hi_at is 16 or 8: the tile starts on a scale block or halfway into one)
        if (hi_at == 16)
          add_cols(a, s0, s1, h0, h1, std::integral_constant<int, 16>{});
        else
          add_cols(a, s0, s1, h0, h1, std::integral_constant<int, 8>{});
      } else {
        add_block(a, s0, s1);
      }
    };
    // (it: this CTA's unit count; kFactors: unit it's factors are in buffer it & 1)
    for (int unit = first_unit, it = 0; unit < num_units; unit += unit_step, it++) {
      const sm90_gemm_unit u = unit_of(unit);
      if (kTallTail && u.tile < 0) continue;
      // This warp is done with the unit's factors (every lane has read them, or none needs them).
      auto release_factors = [&] {
        if constexpr (kFactors) {
          __syncwarp();
          if (lane == 0) mbarrier_arrive(factors_empty(it & 1));
        }
      };
      int m_blk, n_blk, kb_begin, kb_end;
      if constexpr (kLongK) sm90_gemm_tile_coords_div(p, u.tile, m_blk, n_blk);
      else unit_tile(u, m_blk, n_blk);
      unit_range(u, kb_begin, kb_end);
      const int expert = expert_of(m_blk);
      if (expert < 0) continue;  // (grouped: a block of padding; the producer skips it too)
      const int r0 = m_blk * kBlockM + tile_row, n0 = n_blk * kBlockN;
      // The tile row's weight-block scales, one per K-block, read from global memory (L2) while
      // the block's wgmma run (short units: from their stages' windows).
      const float *bs = kBlockScales ? b_scale_row(expert, n0) : nullptr;
      // kWindowScalesB: block kb_begin + j's scale is word (b_word + j) % 4 of its stage's window.
      const int b_word = kWindowScalesB ? static_cast<int>(reinterpret_cast<uintptr_t>(bs + kb_begin) / 4) : 0;
      // A 192- or 96-column tile's second scale block, from column group hi_at on (a last tile
      // whose columns past 128 - n0 % 128 all lie past N reads the first block's again: never
      // stored; a 96-column tile with hi_at >= 12 lies in one block and reads the next for nothing).
      const int hi_at = (128 - n0 % 128) / 8;
      const float *bs_hi = kTwoScaleBlocks && kBlockScales && n0 / 128 + 1 < (p.N + 127) / 128 ? bs + p.num_kb : bs;
      // The single-set path loads a K-block's weight-block scales two blocks ahead (256-row tiles
      // read theirs from the stage, NOTES): a decode tile's wgmma are too short to hide a load
      // from L2 (x: the tile's first scale block, y: a 192-column tile's second one).
      auto block_scales = [&](int kb) {
        float2 b = make_float2(1.0f, 1.0f);
        if constexpr (kBlockScales) {
          if (kb < kb_end) {
            b.x = __ldg(bs + kb);
            if constexpr (kTwoScaleBlocks) b.y = __ldg(bs_hi + kb);
          }
        }
        return b;
      };
#pragma unroll
      for (int i = 0; i < kValues; i++) total[i] = 0.0f;

      int prev = -1;  // kScaledInt8: the stage whose wgmma may still run
      if constexpr (kFine) {
        // The two-set loop with one step where it has a block: a step is kFineSteps' share of the
        // block (one wgmma, 32 of K; kFinePromotion64 two, 64 of K); step jj runs in set jj % 2, is
        // issued before step jj - 1 is waited for and promoted, and takes the scales of its block
        // (stage jj / kFineSteps % kStages: compile-time in the loop unrolled over kFineSteps
        // kStages steps; the blocks of even and odd stages keep their scales apart); a stage is
        // freed once its last step is done. The same shape as the two-set loop's, which ptxas pipelines
        // (other forms of this loop, with a runtime stage or four steps to an iteration, it
        // serialized: C7514).
        static_assert(kStages % 2 == 0, "fine promotion: the scales of even and odd stages apart");
        constexpr int kSteps = kFineSteps * kStages;  // the unrolled period
        const int n = kFineSteps * (kb_end - kb_begin);
        const uint64_t desc_a0 = wgmma_desc_kmajor_sw128(smem_a(0) + wg * 64 * kBlockK);
        const uint64_t desc_b0 = wgmma_desc_kmajor_sw128(smem_b(0));
        const float *sa_row = sa_ring + tile_row;
        Acc set0[kBlockN / 2], set1[kBlockN / 2];
        float2 b_cur = block_scales(kb_begin), b_next = block_scales(kb_begin + 1);
        float sc0[2], sc1[2];  // the two rows' scales of the block in an even and in an odd stage
        auto issue = [&](Acc(&a)[kBlockN / 2], int jj, int i) {  // step jj at position i of the period
          const int k = i % kFineSteps, stage = i / kFineSteps;
          if (k == 0) {
            mbarrier_wait_parity(full_bar(stage), (full_phases >> stage) & 1u);
            full_phases ^= 1u << stage;
            sc0[stage % 2] = sa_row[stage * kBlockM] * b_cur.x, sc1[stage % 2] = sa_row[stage * kBlockM + 8] * b_cur.x;
            b_cur = b_next;
            b_next = block_scales(kb_begin + jj / kFineSteps + 2);
          }
#pragma unroll
          for (int q = 0; q < kBlockN / 2; q++) wgmma_fence_operand(a[q]);
          wgmma_fence();
#pragma unroll
          for (int w = 0; w < 4 / kFineSteps; w++) {  // 32 bytes of K a wgmma: 2 in the descriptors' 16-byte units
            const int kk = 2 * (k * (4 / kFineSteps) + w);
            wgmma_m64k32_f32_e4m3<kBlockN>(a, desc_a0 + stage * (Smem::kABytes >> 4) + kk,
                                           desc_b0 + stage * (Smem::kBBytes >> 4) + kk, w > 0);
          }
          wgmma_commit_group();
#pragma unroll
          for (int q = 0; q < kBlockN / 2; q++) wgmma_fence_operand(a[q]);
        };
        // Step jj (in `cur`, position i) is in flight: issue jj + 1 into `other` if there is one,
        // wait for jj, free its stage after its block's last step, promote it.
        auto step = [&](Acc(&cur)[kBlockN / 2], Acc(&other)[kBlockN / 2], int jj, int i) {
          const int stage = i / kFineSteps, p = stage % 2;
          if (jj + 1 < n) {
            issue(other, jj + 1, (i + 1) % kSteps);
            wgmma_wait_group<1>();
            if (i % kFineSteps == kFineSteps - 1) release(stage, sc0[p], sc1[p]);
            add_block(cur, sc0[p], sc1[p]);
            return false;
          }
          wgmma_wait_group<0>();
          release(stage, sc0[p], sc1[p]);
          add_block(cur, sc0[p], sc1[p]);
          return true;
        };
        if (n > 0) {
          issue(set0, 0, 0);
          for (int base = 0;; base += kSteps) {
#pragma unroll
            for (int i = 0; i < kSteps; i++)
              if (i % 2 == 0 ? step(set0, set1, base + i, i) : step(set1, set0, base + i, i)) goto fine_done;
          }
        }
      fine_done:;
      } else if constexpr (kTwoAcc) {
        // Block i of the unit runs in stage i % kStages (the unit starts at stage 0) and in
        // accumulator set i % 2; the loop below is unrolled over kPeriod blocks, so both are
        // compile-time constants: no stage arithmetic, fixed descriptor and scale offsets. Block
        // i + 1's wgmma (the other set) run while block i is promoted.
        constexpr int kPeriod = kStages % 2 == 0 ? kStages : 2 * kStages;
        const int n = kb_end - kb_begin;
        // Weight-block scales come from the L2 kAhead blocks before their issue, into a ring of
        // registers (block i's in ahead[i % kRing]: a compile-time slot in the unrolled loop, so
        // no register move waits on a load in flight; NOTES). Tiles of 96 and 128 columns keep one
        // block ahead (kRing 2: their registers are spoken for; 7 slots made 64 x 128 5.7% slower,
        // and 128 x 96, with a second ring for its second scale block, spilled).
        // Short units read theirs from the stage's window instead.
        constexpr int kRing = kBlockN >= 96        ? 2
                              : kPeriod % 8 == 0 ? 8
                              : kPeriod % 7 == 0 ? 7
                              : kPeriod % 6 == 0 ? 6
                              : kPeriod % 5 == 0 ? 5
                                                 : 2;
        constexpr int kAhead = kRing - 1;
        const float *b_unit = bs + kb_begin, *b_unit_hi = bs_hi + kb_begin;
        constexpr bool kHi = kTwoScaleBlocks && kBlockScales;  // a second weight-scale block per tile row
        float ahead[kRing], ahead_hi[kHi ? kRing : 1];
#pragma unroll
        for (int i = 0; i < kRing; i++) {
          ahead[i] = kBlockScales && !kWindowScalesB && i < kAhead && i < n ? __ldg(b_unit + i) : 1.0f;
          if constexpr (kHi) ahead_hi[i] = i < kAhead && i < n ? __ldg(b_unit_hi + i) : 1.0f;
        }
        // The descriptors of stage 0 (stage s adds s tiles), this thread's first row's scale in stage 0.
        const uint64_t desc_a0 = wgmma_desc_kmajor_sw128(smem_a(0) + wg * 64 * kBlockK);
        const uint64_t desc_b0 = wgmma_desc_kmajor_sw128(smem_b(0));
        const float *sa_row = sa_ring + tile_row;
        Acc set0[kBlockN / 2], set1[kBlockN / 2];  // the accumulator sets
        // the weight-block scales of each set's block (y: a 96-column tile's second scale block's)
        float2 b0 = make_float2(1.0f, 1.0f), b1 = make_float2(1.0f, 1.0f);
        auto issue = [&](Acc(&a)[kBlockN / 2], float2 &b, int j, int stage, int slot) {  // block j (slot j % kRing)
          mbarrier_wait_parity(full_bar(stage), (full_phases >> stage) & 1u);
          full_phases ^= 1u << stage;
          const uint64_t da = desc_a0 + stage * (Smem::kABytes >> 4), db = desc_b0 + stage * (Smem::kBBytes >> 4);
#pragma unroll
          for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(a[i]);
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < kBlockK / 32; k++) wgmma_m64k32_f32_e4m3<kBlockN>(a, da + 2 * k, db + 2 * k, k);
          wgmma_commit_group();
#pragma unroll
          for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(a[i]);
          if constexpr (kWindowScalesB) {
            b.x = sb_ring[stage * 4 + ((b_word + j) & 3)];
          } else if constexpr (kBlockScales) {
            b.x = ahead[slot];
            if (j + kAhead < n) ahead[(slot + kAhead) % kRing] = __ldg(b_unit + j + kAhead);
            if constexpr (kHi) {
              b.y = ahead_hi[slot];
              if (j + kAhead < n) ahead_hi[(slot + kAhead) % kRing] = __ldg(b_unit_hi + j + kAhead);
            }
          }
        };
        // total += block in `a` times its scales. A 96-column tile's column groups from hi_at on
        // take the second scale block's (h0, h1) where the tile straddles two: hi_at is 4 or 8
        // there (12 or 16 elsewhere), so groups 0-3 always take the first block's, groups 4-7 the
        // second's when hi_at is 4, groups 8-11 when it is 4 or 8: three bands, four selects a block.
        const bool hi4 = hi_at == 4, hi8 = hi_at <= 8;
        auto promote_block = [&](Acc(&a)[kBlockN / 2], float s0, float s1, float h0, float h1) {
          if constexpr (kHi) {
            static_assert(kBlockN == 96, "two-set tiles straddling two scale blocks: 96 columns");
            add_bands(a, s0, s1, hi4 ? h0 : s0, hi4 ? h1 : s1, hi8 ? h0 : s0, hi8 ? h1 : s1,
                      std::integral_constant<int, 4>{}, std::integral_constant<int, 8>{});
          } else {
            add_block(a, s0, s1);
          }
        };
        // One step: block j (in `cur`, stage `stage`) is in flight; issue block j + 1 into `other`
        // if there is one, read block j's row scales (their latency hides under the wait), wait for
        // block j, promote it. Returns whether j was the last block.
        auto step = [&](Acc(&cur)[kBlockN / 2], float2 b_cur, Acc(&other)[kBlockN / 2], float2 &b_other, int j,
                        int stage, int slot) {
          float s0 = 1.0f, s1 = 1.0f, h0 = 1.0f, h1 = 1.0f;
          auto row_scales = [&] {
            if constexpr (kBlockScales) {
              const float a0 = sa_row[stage * kBlockM], a1 = sa_row[stage * kBlockM + 8];
              s0 = a0 * b_cur.x, s1 = a1 * b_cur.x;
              if constexpr (kHi) h0 = a0 * b_cur.y, h1 = a1 * b_cur.y;
            }
          };
          // (each branch promotes and returns on its own: ptxas must see that the way out of the
          // loop is taken with nothing in flight)
          if (j + 1 < n) {
            issue(other, b_other, j + 1, (stage + 1) % kStages, (slot + 1) % kRing);
            row_scales();
            wgmma_wait_group<1>();
            release(stage, s0, s1);
            promote_block(cur, s0, s1, h0, h1);
            return false;
          }
          row_scales();
          wgmma_wait_group<0>();
          release(stage, s0, s1);
          promote_block(cur, s0, s1, h0, h1);
          return true;
        };
        // One group is in flight at the head of every step, each wait has a compile-time depth, and
        // the only way out is the last block's step, which waits for all: ptxas can then prove that
        // every promotion reads finished accumulators and keeps the wgmma pipelined (with a loop
        // condition it assumes a group may still be in flight after the loop, inserts a wait and
        // serializes every wgmma: warning C7514; choosing a set through a pointer put both sets in
        // local memory).
        if (n > 0) {
          issue(set0, b0, 0, 0, 0);
          for (int base = 0;; base += kPeriod) {
#pragma unroll
            for (int i = 0; i < kPeriod; i++) {
              if (i % 2 == 0 ? step(set0, b0, set1, b1, base + i, i % kStages, i % kRing)
                             : step(set1, b1, set0, b0, base + i, i % kStages, i % kRing))
                goto unit_done;
            }
          }
        }
      unit_done:;
      } else if constexpr (kSub > 1) {
        // 256-row tiles: per K-block, each of the warpgroup's two 64-row sub-tiles in turn runs
        // its wgmma into the one accumulator set and is promoted into its own total; the two
        // warpgroups run free, so one's promotion overlaps the other's wgmma. The next K-block's
        // full barrier is waited on while the last sub-tile's wgmma run. The loop is unrolled over
        // the ring (stage, barrier parity, descriptor and scale offsets are compile-time
        // constants); the ring runs on across units, so the unit's first lap starts at stage s
        // (restarting every unit at stage 0 left the producer idle at each unit's end: 12% slower
        // at K = 512, four blocks a unit).
        const int n = kb_end - kb_begin, first = s;
        const uint64_t desc_a0 = wgmma_desc_kmajor_sw128(smem_a(0) + wg * kSub * 64 * kBlockK);
        const uint64_t desc_b0 = wgmma_desc_kmajor_sw128(smem_b(0));
        const float *sa_row = sa_ring + tile_row;
        Acc sub_acc[kBlockN / 2];  // (declared per unit: dead in the epilogue)
        auto wait_full = [&](int stage) {
          mbarrier_wait_parity(full_bar(stage), (full_phases >> stage) & 1u);
          full_phases ^= 1u << stage;
        };
        if (n > 0) wait_full(first);
        auto block = [&](int stage, bool has_next) {  // (its full barrier waited on)
          const float b = sb_ring[stage];  // the block's weight-block scale (the producer's)
#pragma unroll
          for (int j = 0; j < kSub; j++) {
            const uint64_t da = desc_a0 + ((stage * Smem::kABytes + j * 64 * kBlockK) >> 4);
            const uint64_t db = desc_b0 + ((stage * Smem::kBBytes) >> 4);
#pragma unroll
            for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(sub_acc[i]);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < kBlockK / 32; k++) wgmma_m64k32_f32_e4m3<kBlockN>(sub_acc, da + 2 * k, db + 2 * k, k);
            wgmma_commit_group();
            if (j == kSub - 1 && has_next) wait_full((stage + 1) % kStages);
            const float s0 = sa_row[stage * kBlockM + 64 * j] * b, s1 = sa_row[stage * kBlockM + 64 * j + 8] * b;
#pragma unroll
            for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(sub_acc[i]);
            wgmma_wait_group<0>();
#pragma unroll
            for (int i = 0; i < kBlockN / 2; i++) wgmma_fence_operand(sub_acc[i]);
            if (j == kSub - 1) release(stage, s0, s1);  // (the earlier sub-tiles' scales are in use already)
#pragma unroll
            for (int i = 0; i < kBlockN / 8; i++) {  // total += this sub-tile's block times its row scales
              float *t = total + j * (kBlockN / 2) + 4 * i;
              t[0] = fmaf(sub_acc[4 * i + 0], s0, t[0]);
              t[1] = fmaf(sub_acc[4 * i + 1], s0, t[1]);
              t[2] = fmaf(sub_acc[4 * i + 2], s1, t[2]);
              t[3] = fmaf(sub_acc[4 * i + 3], s1, t[3]);
            }
          }
        };
        // Block j of the unit runs in stage (first + j) % kStages: one copy of the loop per first
        // stage, its first lap peeled (a runtime skip of the first lap's stages spilled).
        with_constant(first, [&](auto f) {
          constexpr int kFirst = decltype(f)::value;
#pragma unroll
          for (int i = kFirst; i < kStages; i++) {
            if (i - kFirst == n) return;
            block(i, i - kFirst + 1 < n);
          }
          for (int base = kStages - kFirst;; base += kStages) {
#pragma unroll
            for (int i = 0; i < kStages; i++) {
              if (base + i == n) return;
              block(i, base + i + 1 < n);
            }
          }
        }, std::make_integer_sequence<int, kStages>{});
        s = (first + n) % kStages;
      } else {
        float2 b_cur = block_scales(kb_begin), b_next = block_scales(kb_begin + 1);
        for (int kb = kb_begin; kb < kb_end; kb++) {
          mbarrier_wait_parity(full_bar(s), phase);
          const uint64_t desc_a = wgmma_desc_kmajor_sw128(smem_a(s) + wg * 64 * kBlockK);
          const uint64_t desc_b = wgmma_desc_kmajor_sw128(smem_b(s));
          fence_acc();
          wgmma_fence();
          if constexpr (kInt8) {
            // One int32 sum over the unit's K range: only its first wgmma overwrites.
#pragma unroll
            for (int k = 0; k < kBlockK / 32; k++)
              wgmma_m64k32_s32_s8<kBlockN>(acc, desc_a + 2 * k, desc_b + 2 * k, kb != kb_begin || k != 0);
            wgmma_commit_group();
            fence_acc();
            wgmma_wait_group<1>();  // the previous K-block's wgmma are done: free their stage
            fence_acc();
            if (prev >= 0) release(prev);
            prev = s;
            if (++s == kStages) s = 0, phase ^= 1;
          } else {
#pragma unroll
            for (int k = 0; k < kBlockK / 32; k++)  // 32 bytes of K each (+ 2 in the address field)
              wgmma_m64k32_f32_e4m3<kBlockN>(acc, desc_a + 2 * k, desc_b + 2 * k, k);  // k == 0 overwrites
            wgmma_commit_group();
            const float2 b = b_cur;
            b_cur = b_next;
            b_next = block_scales(kb + 2);
            fence_acc();
            wgmma_wait_group<0>();
            promote(acc, b, hi_at);
          }
        }
      }
      if constexpr (kInt8) {
        wgmma_wait_group<0>();
        fence_acc();
        if (prev >= 0) release(prev);
        if (kb_begin == kb_end) {  // K = 0: no wgmma wrote the accumulators
#pragma unroll
          for (int i = 0; i < kBlockN / 2; i++) acc[i] = 0;
        }
      }

      // (waited for by every unit, so that each release follows its buffer's fill)
      if constexpr (kFactors) mbarrier_wait_parity(factors_full(it & 1), (it >> 1) & 1);

      // ---- split-K: leave the partial; the tile's last unit sums them all in split order ----
      // The unit's result: int32 acc (kScaledInt8) or fp32 total; `part` holds it as 32-bit words.
      if (kSub == 1 && u.splits > 1) {  // (256-row tiles: below)
        const int t = threadIdx.x;  // consumers are threads [0, kThreads)
        uint4 *part = reinterpret_cast<uint4 *>(p.partials) + int64_t(u.part) * u.splits * (kThreads * kBlockN / 8);
        auto result = [&](int i) -> auto & {
          if constexpr (kInt8) return acc[i]; else return total[i];
        };
        const bool live = r0 < p.M;  // this thread's rows r0 and r0 + 8: partials of rows past M are never read
#pragma unroll
        for (int i = 0; i < kBlockN / 8; i++)
          if (live)
            __stcg(part + int64_t(u.split) * (kThreads * kBlockN / 8) + i * kThreads + t,
                   make_uint4(word_of(result(4 * i)), word_of(result(4 * i + 1)), word_of(result(4 * i + 2)),
                              word_of(result(4 * i + 3))));
        named_barrier_sync(1, kThreads);
        if (t == 0) last_unit = atom_add_acq_rel_gpu(p.counters + u.part, 1) == u.splits - 1;
        named_barrier_sync(1, kThreads);
        if (!last_unit) {
          release_factors();
          continue;
        }
        // Its own partial is still in registers: one L2 round trip fewer. Not on the 128 x 192
        // tiles, which have no registers to spare for the copy (ptxas: 584 bytes of spills), nor
        // on the 64 x 128 ones (one warpgroup at 255 registers), whose unsplit shapes ran 4-12%
        // slower with it ((1, 32768, 512) 6.96 -> 7.81 us, H200).
        constexpr bool kKeepOwn = kBlockM == 128 ? kBlockN <= 128 : kBlockN <= 64;
        uint32_t own[kKeepOwn ? kBlockN / 2 : 1];
#pragma unroll
        for (int i = 0; i < kBlockN / 2; i++) {
          if constexpr (kKeepOwn) own[i] = word_of(result(i));
          result(i) = 0;
        }
        for (int other = 0; live && other < u.splits; other++) {
          if constexpr (kKeepOwn) {
            if (other == u.split) {
#pragma unroll
              for (int i = 0; i < kBlockN / 2; i++) add_word(result(i), own[i]);
              continue;
            }
          }
#pragma unroll
          for (int i = 0; i < kBlockN / 8; i++) {
            const uint4 w = __ldcg(part + int64_t(other) * (kThreads * kBlockN / 8) + i * kThreads + t);
            add_word(result(4 * i), w.x), add_word(result(4 * i + 1), w.y);
            add_word(result(4 * i + 2), w.z), add_word(result(4 * i + 3), w.w);
          }
        }
        if (t == 0) p.counters[u.part] = 0;
      }

      // ---- kTallTail: a helper leaves its partial, the owner adds it before its epilogue ----
      // The helper stores its partial ([value j][thread t], as below) and counts; the owner, whose
      // unit is its CTA's last (the ring idle), waits for the count, copies the partial into the
      // ring by 16-byte cp.async, all in flight at once, adds it and resets the counter.
      if constexpr (kTallTail) {
        if (u.splits > 1) {
          const int t = threadIdx.x;
          float *part = p.partials + int64_t(u.part) * (kThreads * kValues);
          if (u.split == 1) {
#pragma unroll
            for (int j = 0; j < kValues; j++) __stcg(part + j * kThreads + t, total[j]);
            named_barrier_sync(1, kThreads);
            if (t == 0) atom_add_acq_rel_gpu(p.counters + u.part, 1);
            continue;
          }
          if (t == 0) {
            while (ld_acquire_gpu(p.counters + u.part) == 0) {
            }
            p.counters[u.part] = 0;
          }
          named_barrier_sync(1, kThreads);
          for (int c = t; c < kThreads * kValues / 4; c += kThreads) cp_async_cg_shared_global_16(base + 16 * c, part + 4 * c);
          cp_async_commit_group();
          cp_async_wait_all();
          named_barrier_sync(1, kThreads);
          const float *ring = reinterpret_cast<const float *>(smem_raw + (base - smem_u32));
#pragma unroll
          for (int j = 0; j < kValues; j++) total[j] += ring[j * kThreads + t];
        }
      }

      // ---- split 256-row tiles: each unit of the tile sums a share of the partials ----
      // Every unit leaves its partial and counts itself; once all have (the tile's units run at
      // once: the launcher gives each its own CTA), each adds its share of every partial in split
      // order and stores it, and the last to count again puts the counter back to zero.
      if constexpr (kTallSplit) {
        if (u.splits > 1) {
          const int t = threadIdx.x;
          // A partial is [value j][thread t]: each store of a warp writes 128 contiguous bytes (16-
          // byte stores, [j / 4][t][4], ran (4096, 2112, 7168) 3% slower).
          float *part = p.partials + int64_t(u.part) * u.splits * (kThreads * kValues);
#pragma unroll
          for (int j = 0; j < kValues; j++) __stcg(part + (int64_t(u.split) * kValues + j) * kThreads + t, total[j]);
          named_barrier_sync(1, kThreads);
          if (t == 0) {
            atom_add_acq_rel_gpu(p.counters + u.part, 1);
            while (ld_acquire_gpu(p.counters + u.part) < u.splits) {
            }
          }
          named_barrier_sync(1, kThreads);
          // This unit's share: the thread's column pairs [q0, q0 + n) (pair q: values 2q and 2q + 1,
          // sub-tile q / 32, column group q % 32 / 2, row + 8 for odd q, as the epilogue below).
          // Those rows of every partial, contiguous, come into the ring (idle: this is the CTA's
          // last unit) by 16-byte cp.async, all in flight at once (loads straight from the
          // partials, one partial after another, ran (2048, 7168, 2048) 71.0 us against 62.3),
          // and are summed in split order.
          const int q0 = u.split * (kValues / 2) / u.splits, n = (u.split + 1) * (kValues / 2) / u.splits - q0;
          const int share = 2 * n * kThreads;  // floats of one partial's share
          for (int c = t; c < u.splits * share / 4; c += kThreads) {
            const int other = c / (share / 4), w = c % (share / 4);
            cp_async_cg_shared_global_16(base + (other * share + 4 * w) * 4,
                                         part + (int64_t(other) * kValues + 2 * q0) * kThreads + 4 * w);
          }
          cp_async_commit_group();
          cp_async_wait_all();
          named_barrier_sync(1, kThreads);
          const float *ring = reinterpret_cast<const float *>(smem_raw + (base - smem_u32));
          OutT *d = static_cast<OutT *>(p.d);
          for (int k = 0; k < n; k++) {
            float x = 0.0f, y = 0.0f;
            for (int other = 0; other < u.splits; other++)
              x += ring[other * share + 2 * k * kThreads + t], y += ring[other * share + (2 * k + 1) * kThreads + t];
            const int q = q0 + k;
            const int row = r0 + 64 * (q / (kBlockN / 4)) + 8 * (q % 2), col = n0 + 8 * (q % (kBlockN / 4) / 2) + tile_col;
            if (row >= p.M || col >= p.N) continue;
            store_cols(d + row * p.d_ld + col, p.c != nullptr ? p.c + row * p.c_ld + col : nullptr, x, y, p.pairs);
          }
          named_barrier_sync(1, kThreads);
          if (t == 0 && atomicAdd(p.counters + u.part, 1) == 2 * u.splits - 1) p.counters[u.part] = 0;
          continue;
        }
      }

      // ---- the scaled recipes' dequantization: total = sa * sb * (acc - zp) + bias ----
      if constexpr (!kBlockScales) {
        const float *f = factors + (it & 1) * Smem::kFactorWords;
        const int32_t *fi = reinterpret_cast<const int32_t *>(f);
        float sa[2];
        int32_t zr[2];  // per-token zero point of the two rows (1 when the term is per tensor)
#pragma unroll
        for (int h = 0; h < 2; h++) sa[h] = f[kSa + tile_row + 8 * h], zr[h] = fi[kZp + tile_row + 8 * h];
#pragma unroll
        for (int j = 0; j < kBlockN / 8; j++) {
#pragma unroll
          for (int c = 0; c < 2; c++) {
            const int cc = 8 * j + tile_col + c;
            const float sb = f[kSb + cc], bias = f[kBias + cc];
            const int32_t adj = fi[kAdj + cc];
#pragma unroll
            for (int h = 0; h < 2; h++) {
              const int i = 4 * j + 2 * h + c;
              if constexpr (kInt8)
                total[i] = __fadd_rn(__fmul_rn(static_cast<float>(acc[i] - zr[h] * adj), __fmul_rn(sa[h], sb)), bias);
              else
                total[i] = __fadd_rn(__fmul_rn(total[i], __fmul_rn(sa[h], sb)), bias);
            }
          }
        }
        release_factors();
      }

      // ---- epilogue through the staging tile and TMA (16-bit D, no C) ----
      if constexpr (kStaged) {
        if (p.tma_store) {
          // Each of this warpgroup's 64-row sub-tiles (one, or two on 256-row tiles) has its own
          // part of the staging tile: kCols / 64 boxes of 64 rows x 128 bytes, 16-byte chunk c of
          // row r at chunk c ^ (r % 8) (the 128-byte swizzle). A part narrower than the tile
          // (kCols 64, a deeper ring) takes the tile's boxes one after the other.
          constexpr int kCols = Smem::kStagingCols;
          static_assert(kOutCols % kCols == 0, "whole staging boxes of the output tile");
          auto staging = [&](int sub) { return base + Smem::kStaging + (wg * kSub + sub) * 64 * kCols * 2; };
          const bool leader = threadIdx.x % 128 == 0;
          // (kLongK: each sub-tile between its own pair of barriers, in its own bulk group)
          constexpr int kPer = kLongK ? 1 : kSub;  // sub-tiles written between one pair of barriers
#pragma unroll
          for (int b0 = 0; b0 < kOutCols / 64; b0 += kCols / 64) {
            if (leader) cp_async_bulk_wait_group_read<0>();  // the previous copies have read the staging tile
#pragma unroll
            for (int s0 = 0; s0 < kSub; s0 += kPer) {
              named_barrier_sync(2 + wg, 128);
#pragma unroll
              for (int sub = s0; sub < s0 + kPer; sub++) {
                uint8_t *stage_ptr = smem_raw + (staging(sub) - smem_u32);
                const float *t = total + sub * (kBlockN / 2);
#pragma unroll
                for (int j = 8 * b0; j < 8 * b0 + kCols / 8; j++)
#pragma unroll
                  for (int h = 0; h < 2; h++) {
                    const int r = warp * 16 + lane / 4 + 8 * h;
                    const uint32_t off = (j / 8 - b0) * 8192 + r * 128 + (((j % 8) ^ (r % 8)) * 16) + 4 * (lane % 4);
                    uint32_t packed;
                    if constexpr (kSwiGLU) packed = pack_pair(OutT{}, swiglu_at(t, j, h, 0), swiglu_at(t, j, h, 1));
                    else packed = pack_pair(OutT{}, t[4 * j + 2 * h], t[4 * j + 2 * h + 1]);
                    *reinterpret_cast<uint32_t *>(stage_ptr + off) = packed;
                  }
              }
              fence_proxy_async_shared_cta();
              named_barrier_sync(2 + wg, 128);
              if (leader) {
#pragma unroll
                for (int sub = s0; sub < s0 + kPer; sub++) {
                  const uint32_t stage = staging(sub);
                  const int row0 = m_blk * kBlockM + (wg * kSub + sub) * 64;
                  if (row0 < p.M) {  // (a sub-tile whose rows are all past M stores nothing)
#pragma unroll
                    for (int b = b0; b < b0 + kCols / 64; b++)
                      cp_async_bulk_tensor_2d_s2g(&tmap_d, stage + (b - b0) * 8192, (kSwiGLU ? n0 / 2 : n0) + 64 * b, row0);
                  }
                }
                cp_async_bulk_commit_group();
              }
            }
          }
          continue;
        }
      }

      // ---- SwiGLU from the fragment: output columns n0 / 2 + 8 j ----
      if constexpr (kSwiGLU) {
        OutT *d = static_cast<OutT *>(p.d);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = r0 + 8 * h;
          if (row >= p.M) continue;
          OutT *o = d + row * p.d_ld + n0 / 2 + tile_col;
#pragma unroll
          for (int j = 0; j < kBlockN / 16; j++) {
            if (n0 / 2 + 8 * j + tile_col >= p.N / 2) continue;
            store_cols(o + 8 * j, nullptr, swiglu_at(total, j, h, 0), swiglu_at(total, j, h, 1), p.pairs);
          }
        }
        continue;
      }

      // ---- epilogue: + C, convert, masked stores straight from the fragment ----
      OutT *d = static_cast<OutT *>(p.d);
#pragma unroll
      for (int sub = 0; sub < kSub; sub++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = r0 + 64 * sub + 8 * h;
          if (row >= p.M) continue;
          OutT *o = d + row * p.d_ld + n0 + tile_col;
          const float *c = p.c != nullptr ? p.c + row * p.c_ld + n0 + tile_col : nullptr;
#pragma unroll
          for (int j = 0; j < kBlockN / 8; j++) {
            if (n0 + 8 * j + tile_col >= p.N) continue;  // even; N is a multiple of 16, so the pair's second is < N too
            const int i = sub * (kBlockN / 2) + 4 * j + 2 * h;
            store_cols(o + 8 * j, c != nullptr ? c + 8 * j : nullptr, total[i], total[i + 1], p.pairs);
          }
        }
    }
    // The staging tile must stay until the last copy has read it.
    if (p.tma_store && threadIdx.x % 128 == 0) cp_async_bulk_wait_group<0>();
  }
}
