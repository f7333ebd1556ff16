// VQ-GeMV at batch 1 and 2 through tables of products (placement QF_VQ_BOOKS_LUT), for formats
// with one codebook per residual (AQLM: 4096 entries of 8 values shared by the whole matrix):
// y[m, n] = scale[n] * sum_k x[m, k] * W[n, k].
//
// NOTES:
// - Why: at M = 1 the product of an entry with a vector of x is the same for every row of W that
//   selects it. For a chunk of 8 vectors along K and one residual, a table T[g][e] = entry e . x's
//   vector g (8 x 2^bits fp32 values: 128 KB for 12-bit indices) turns a row's 8 vectors (64
//   FMAs, 8 entry loads of 16 bytes) into 8 table lookups of 4 bytes and 8 adds; the entries are
//   read and multiplied once per block and chunk instead of once per row. VQ attention's table of
//   q . entry scores is the same idea (docs/VQ.md). It pays where many rows share a book: every
//   row of the matrix here, against 2^bits entries per table.
// - Work: an item is (chunk c, residual r), numbered c * R + r. A block takes a range of rows
//   (their fp32 sums live in shared memory) and a range of items. For each item the consumer
//   threads build the table from book r and x's chunk c (one entry per thread at a time, x's
//   chunk staged as fp32), then walk the rows in tiles of 512, one row per thread: the row's 8
//   indices of the chunk are `bits` bytes of its code row from byte c * bits, which a producer
//   warp brings in with TMA into a ring of stages guarded by mbarriers, so the codes stream while
//   the lookups run. A TMA box must start on a 16-byte boundary, so a chunk's bytes sit at offset
//   (c * bits) % 16 of an aligned window: a box of 16 bytes x 256 rows where they fit in it, else
//   one of 32 bytes (for 12-bit indices, chunks c % 4 = 0 and 3 take 16 bytes, 1 and 2 take 32).
//   The offset repeats with period 16 / gcd(bits, 16), so the row loop is compiled once per
//   offset (an item's offset is uniform: one branch per item picks the loop), with every index's
//   bit position a constant. Every row of a box is its own L2 request, which bounds this layout
//   (ncu: L2 71% busy, DRAM 37% on 22016 x 8192).
// - Packed codes (qf_vq_pack_gemv, formats/vq.h; kPacked): a (512-row tile, item)'s indices are
//   one contiguous run of 512 x 12 bytes (12-bit indices), one bulk copy per ring stage: 1.2-1.5x
//   faster on the Llama layers (H200). Their stages are smaller than the standard layout's
//   32-byte windows, so the ring's bytes hold 8 of them instead of 3: the codes in flight per SM
//   were what held the stream (22016 x 8192: 51.7 -> 48.1 us; 3-7% on the layers of 1 M vectors
//   or more, H200, A/B run twice). Two rows per thread (two tiles' lookups in flight) on top of
//   that was 1-2% slower on packed codes and 8-24% slower on the standard layout.
// - A ring stage is freed once its codes' lookups are done: freed right after the code load, a
//   refill could land before a queued load had read the stage (wrong sums, about one run in two
//   of the GPU test).
// - Split-K over blocks: the blocks of a row range split the items into k_ranges consecutive
//   ranges of items_per_range (the last ones shorter, possibly empty). Each leaves its rows' sums
//   in the workspace and a second kernel adds them in a fixed order (a call repeats bit for bit),
//   scales the rows and rounds to y's dtype; with one range the block writes y itself.
// - Two rows of x (kM = 2, vector size 8): a table word holds both rows' values of an (entry,
//   vector) as two 16-bit values of the entries' type, so the table keeps its 128 KB and a row's
//   lookup serves both rows of x; the build is one m16n8k8 per 8 entries (x rows and vectors as
//   the 16 rows of A, entries as the columns of B), fp32 sums of the exact products rounded once.
//   The rows' sums take twice the shared memory; a ring one standard stage shorter leaves room
//   for 8192 rows a block (ring_bytes). AQLM-3 at M = 2 on an H200: 1.3-1.6x the GC kernel the
//   router ran before (packed codes 1.6-2.5x, 1.12-1.62x cuBLASLt fp16; docs/VQ.md). M = 3 and 4
//   run the kernels per pair of rows (an odd last row as at M = 1), so that codes packed for them
//   serve a batch of up to 4.
// - Limits (else QF_ERR_UNSUPPORTED with the reason): M = 1 to 4, one book per residual (scopes
//   0 x 0), (vector size, index bits) of QF_VQ_LUT_FORMATS, codes and books 16-byte aligned, R * N
//   rows of codes below 2^31, code rows of at least 32 bytes (standard layout); packed codes take
//   rows per block in whole 512-row tiles; at M = 2 to 4 vector size 8, x of the entries' type and
//   fp16 or bf16 y.
// - Numerics: a table value is an fp32 fma chain over the vector's elements (each product exact,
//   one rounding per add); a row adds its chunk's 8 values pairwise in a fixed tree, then that sum
//   onto its running sum in item order, then the ranges' sums (ranges w, w + 8, ... in order for
//   each w < 8, then those 8 sums in order); the row scale multiplies the finished sum. Vectors
//   past K (the last chunk's tail) get zero table rows. At M = 2 a table value is the tensor
//   core's fp32 sum of the vector's 8 exact products, rounded to the entries' type (fp16 values
//   beyond 65504 are infinite); the adds are the same. At M = 3 and 4 each pair of rows as at
//   M = 2, an odd last row as at M = 1.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/pack.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/tma_map.h"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_heuristic.h"
#include "formats/vq.h"

// The (vector size, index bits) pairs with a kernel.
#define QF_VQ_LUT_FORMATS(X) X(8, 12) X(4, 10) X(8, 8)

struct vq_lut_params {
  const uint16_t *books;  // [R, entries, vs]
  const float *scales;    // [N] or NULL
  const void *x;          // [M, K] of x_dtype (M = 2: the entries' type), rows x_ld apart
  void *y;                // [M, N] of y_dtype (one K range), rows y_ld apart
  float *partials;        // [k_ranges][M][N] (several K ranges)
  int64_t x_ld, y_ld;
  int x_dtype, y_dtype;
  int N, vectors, residuals, items;
  int rows_per_block, k_ranges;
  int items_per_range;  // ceil(items / k_ranges): the last ranges may be shorter or empty
  const uint8_t *packed;  // the packed codes (kPacked; else the tensor maps read the standard layout)
};

namespace vq_lut_detail {

constexpr int kGroups = 8;        // vectors per chunk: table rows
constexpr int kThreads = 512;     // consumer threads; + one producer warp
constexpr int kBoxRows = 256;     // a TMA box: 16 or 32 bytes x 256 rows of codes
constexpr int kStages = 3;        // ring stages of kThreads rows in the standard layout (8 ran no faster)
constexpr int kStageBytes = kThreads * 32;

// The table: kGroups x 2^bits words (fp32 values at M = 1, pairs of 16-bit values at M = 2).
__host__ __device__ constexpr size_t table_bytes(int bits) { return static_cast<size_t>(kGroups) << bits << 2; }
// The ring: kStages standard-layout stages at M = 1, one fewer at M = 2, whose rows' sums take
// twice the bytes: so that a block still holds 8192 rows (one row range, one table build per
// item, for the Llama-65B layers of N = 8192).
__host__ __device__ constexpr int ring_bytes(int m) { return (m == 1 ? kStages : kStages - 1) * kStageBytes; }
// Dynamic shared memory: the table, the ring, the rows' sums (one per row of W and of x).
__host__ __device__ constexpr size_t smem_bytes(int bits, int rows, int m) {
  return table_bytes(bits) + ring_bytes(m) + 4u * rows * m;
}
// M = 2: entry e of group g's table row sits at e ^ swizzle(g), so that the build's stores of the 8
// groups (rows 2^bits words apart) spread over the banks; a lookup's index is xor'ed alike.
__host__ __device__ constexpr int swizzle(int g) { return 8 * g; }

// f(std::integral_constant<int, v>) for the runtime v in [0, kCount): a uniform branch to one of
// kCount compile-time bodies.
template <int kCount, int kI = 0, typename F>
__device__ __forceinline__ void dispatch(int v, F &&f) {
  if constexpr (kI + 1 < kCount) {
    if (v != kI) return dispatch<kCount, kI + 1>(v, f);
  }
  f(std::integral_constant<int, kI>{});
}

}  // namespace vq_lut_detail

// kPacked: the codes in the packed layout (p.packed), one contiguous copy per (tile, item).
// kM: rows of x, 1 or 2 (vector size 8).
template <int kVS, int kBits, typename E, bool kPacked, int kM>
__global__ void __launch_bounds__(vq_lut_detail::kThreads + 32, 1)
    vq_gemv_lut_kernel(const __grid_constant__ CUtensorMap tmap_16, const __grid_constant__ CUtensorMap tmap_32,
                       const vq_lut_params p) {
  using namespace vq_lut_detail;
  static_assert(kM == 1 || (kM == 2 && kVS == 8), "two rows of x take vector size 8 (one m16n8k8 per 8 entries)");
  using mma_t = std::conditional_t<std::is_same_v<E, vq_bf16>, __nv_bfloat16, __half>;
  constexpr int kEntries = 1 << kBits;
  // A chunk's bytes start at (c * kBits) % 16 of its aligned window; the offsets repeat every kPeriod chunks.
  constexpr int kPeriod = 16 / (kBits % 16 == 0 ? 16 : kBits % 8 == 0 ? 8 : kBits % 4 == 0 ? 4 : kBits % 2 == 0 ? 2 : 1);
  auto wide = [](int c) { return (c * kBits) % 16 + kBits > 16; };  // needs the 32-byte window
  static_assert(kBits <= 16, "a row's indices of a chunk fit a 32-byte window at any offset");
  constexpr int kPackBytes = (kBits + 3) / 4 * 4;  // a row's chunk, packed (qf_vq_pack_chunk_bytes)
  static_assert(QF_VQ_PACK_ROWS == kThreads, "a packed tile is a ring stage");
  // The ring: ring_bytes(kM) in stages of kStageBytes for the standard layout's windows; packed
  // tiles are smaller, so the same bytes hold more of them in flight (8 for 12-bit indices at M = 1).
  constexpr int kSlot = kPacked ? kThreads * kPackBytes : kStageBytes;
  constexpr int kRing = ring_bytes(kM) / kSlot;
  static_assert(kSlot % 16 == 0, "bulk copies of 16-byte multiples");

  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * kRing];
  __shared__ float xs[kGroups * kVS];
  float *const table = reinterpret_cast<float *>(smem);        // M = 1: fp32 values
  uint32_t *const table2 = reinterpret_cast<uint32_t *>(smem);  // M = 2: pairs of 16-bit values
  float *const sums = reinterpret_cast<float *>(smem + table_bytes(kBits) + ring_bytes(kM));
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem + table_bytes(kBits)));
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  auto full_bar = [bar0](int s) { return bar0 + 8 * s; };
  auto empty_bar = [bar0](int s) { return bar0 + 8 * (kRing + s); };

  // This block's rows [n0, n0 + rows) and items [i_begin, i_end).
  const int range = static_cast<int>(blockIdx.x) % p.k_ranges;
  const int n0 = static_cast<int>(blockIdx.x) / p.k_ranges * p.rows_per_block;
  const int rows = min(p.rows_per_block, p.N - n0);
  const int i_begin = min(p.items, range * p.items_per_range), i_end = min(p.items, i_begin + p.items_per_range);
  const int tiles = (rows + kThreads - 1) / kThreads;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kRing; s++) {
      mbarrier_init(full_bar(s), 1);
      mbarrier_init(empty_bar(s), kThreads / 32);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= kThreads) {
    // ---- producer: lane 0 streams every (item, tile)'s codes through the ring ----
    if (threadIdx.x != kThreads) return;
    if constexpr (!kPacked) {
      prefetch_tensormap(&tmap_16);
      prefetch_tensormap(&tmap_32);
    }
    // Step j is tile j % tiles of item i_begin + j / tiles: its map, window start and first row.
    auto step = [&](int j, const CUtensorMap *&map, int &box_bytes, int &x0, int &row) {
      const int i = i_begin + j / tiles, c = i / p.residuals, r = i % p.residuals;
      map = wide(c) ? &tmap_32 : &tmap_16;
      box_bytes = wide(c) ? 32 : 16;
      x0 = c * kBits / 16 * 16;
      row = r * p.N + n0 + j % tiles * kThreads;
    };
    const int steps = (i_end - i_begin) * tiles;
    int s = 0;
    uint32_t phase = 0;
    for (int j = 0; j < steps; j++) {
      if constexpr (kPacked) {  // one contiguous copy of the (tile, item)'s kThreads x kPackBytes
        const int i = i_begin + j / tiles, c = i / p.residuals, r = i % p.residuals;
        const uint8_t *src = p.packed + qf_vq_pack_offset(r, n0 + j % tiles * kThreads, c, qf_vq_pack_tiles(p.N),
                                                          p.items / p.residuals, kBits);
        mbarrier_wait_parity(empty_bar(s), phase ^ 1u);
        mbarrier_arrive_expect_tx(full_bar(s), kThreads * kPackBytes);
        cp_async_bulk_g2s(ring + s * kSlot, src, kThreads * kPackBytes, full_bar(s));
        if (++s == kRing) s = 0, phase ^= 1u;
        continue;
      }
      const CUtensorMap *map;
      int box_bytes, x0, row;
      step(j, map, box_bytes, x0, row);
      mbarrier_wait_parity(empty_bar(s), phase ^ 1u);  // a fresh barrier passes parity 1
      mbarrier_arrive_expect_tx(full_bar(s), kThreads * box_bytes);
      for (int b = 0; b < kThreads / kBoxRows; b++)
        cp_async_bulk_tensor_2d_g2s(ring + s * kSlot + b * kBoxRows * box_bytes, map, full_bar(s), x0,
                                    row + b * kBoxRows);
      if (++s == kRing) s = 0, phase ^= 1u;
    }
    return;
  }

  // ---- consumers ----
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  for (int t = 0; t < tiles; t++)
    if (t * kThreads + tid < rows)
#pragma unroll
      for (int m = 0; m < kM; m++) sums[m * p.rows_per_block + t * kThreads + tid] = 0.0f;
  int s = 0;
  uint32_t phase = 0;
  // A thread's entries of the next item's book (tid + k kThreads) and its value of the next
  // item's x chunk are loaded (all at once, so that their L2 latencies overlap) as soon as the
  // current item's table is built, and land during its rows: loaded right before each build, they
  // stalled it.
  constexpr int kPer = (kEntries + kThreads - 1) / kThreads;
  using raw_t = std::conditional_t<kVS == 8, uint4, uint2>;
  raw_t raw[kPer];
  float x_next;
  // M = 2: the build is one m16n8k8 per 8 entries (rows: x row m, vector g as m 8 + g; k: the 8
  // elements; columns: entries), warp w taking entries w kEntries / 16 onwards. Lane (grp, tig)
  // holds B's word tig of entry grp of each block of 8 (b2) and A's words: elements 2 tig, 2 tig
  // + 1 of vector grp of the chunk, for each row of x (a2).
  constexpr int kBlocks2 = kEntries / 8 / (kThreads / 32);
  const int warp = tid >> 5, grp = lane >> 2, tig = lane & 3;
  uint32_t b2[kM == 2 ? kBlocks2 : 1], a2[2];
  auto load_item = [&](int i) {
    const int c = i / p.residuals, r = i % p.residuals;
    if constexpr (kM == 2) {
      const uint32_t *book = reinterpret_cast<const uint32_t *>(p.books + static_cast<int64_t>(r) * kEntries * kVS);
#pragma unroll
      for (int j = 0; j < kBlocks2; j++) b2[j] = __ldg(book + (warp * kBlocks2 * 8 + 8 * j + grp) * (kVS / 2) + tig);
      const int g = c * kGroups + grp;  // (zeros past K)
#pragma unroll
      for (int m = 0; m < 2; m++) {
        const unsigned short *xr = static_cast<const unsigned short *>(p.x) + m * p.x_ld + g * kVS + 2 * tig;
        a2[m] = g < p.vectors ? __ldg(xr) | static_cast<uint32_t>(__ldg(xr + 1)) << 16 : 0u;
      }
    } else {
      const raw_t *book = reinterpret_cast<const raw_t *>(p.books + static_cast<int64_t>(r) * kEntries * kVS);
#pragma unroll
      for (int k = 0; k < kPer; k++)
        if (tid + k * kThreads < kEntries) raw[k] = __ldg(book + tid + k * kThreads);
      const int k = c * kGroups * kVS + tid;  // (zeros past K)
      x_next = tid < kGroups * kVS && k < p.vectors * kVS ? vq_load_as_f32(p.x, p.x_dtype, k) : 0.0f;
    }
  };
  // M = 2: D's values of x rows 0 and 1 for an (entry, vector), rounded to the entries' type, are
  // one word of the table; a lane stores its two entries' words at once.
  auto build2 = [&]() {
#pragma unroll
    for (int j = 0; j < kBlocks2; j++) {
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_m16n8k8(mma_t{}, d, a2, b2[j]);
      const int e = warp * kBlocks2 * 8 + 8 * j + 2 * tig;
      *reinterpret_cast<uint2 *>(table2 + grp * kEntries + (e ^ swizzle(grp))) =
          make_uint2(pack_pair(mma_t{}, d[0], d[2]), pack_pair(mma_t{}, d[1], d[3]));
    }
  };
  // M = 1: the chunk's x as fp32 (once the previous item's table is no longer read), then the
  // table by fma chains.
  auto build1 = [&](int c) {
    if (tid < kGroups * kVS) xs[tid] = x_next;
    named_barrier_sync(1, kThreads);
    // The table: T[g][e] = entry e of book r . x's vector g; rows past the last vector hold zeros.
    // x's vectors go through registers in two halves of four (read from shared memory per entry
    // they bound the build).
    const int live_groups = min(kGroups, p.vectors - c * kGroups);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      constexpr int kHalf = kGroups / 2;
      float xr[kHalf * kVS];
#pragma unroll
      for (int j = 0; j < kHalf * kVS; j++) xr[j] = xs[h * kHalf * kVS + j];
#pragma unroll
      for (int k = 0; k < kPer; k++) {
        const int e = tid + k * kThreads;
        if (e >= kEntries) break;
        const uint32_t words[4] = {raw[k].x, raw[k].y, kVS == 8 ? (&raw[k].x)[2] : 0u, kVS == 8 ? (&raw[k].x)[3] : 0u};
        float v[kVS];
#pragma unroll
        for (int j = 0; j < kVS; j += 2) v[j] = vq_widen_lo(E{}, words[j / 2]), v[j + 1] = vq_widen_hi(E{}, words[j / 2]);
#pragma unroll
        for (int g = 0; g < kHalf; g++) {
          float d = 0.0f;
#pragma unroll
          for (int j = 0; j < kVS; j++) d = fmaf(v[j], xr[g * kVS + j], d);
          table[(h * kHalf + g) * kEntries + e] = h * kHalf + g < live_groups ? d : 0.0f;
        }
      }
    }
  };
  load_item(i_begin);
  for (int i = i_begin; i < i_end; i++) {
    const int c = i / p.residuals;
    named_barrier_sync(1, kThreads);  // the previous item's table no longer read
    if constexpr (kM == 2) build2();
    else build1(c);
    if (i + 1 < i_end) load_item(i + 1);
    named_barrier_sync(1, kThreads);
    // The rows: 8 lookups each, added in a fixed tree onto the row's running sum. The chunk's
    // bytes start at kOff of the row's window (16 or 32 bytes); index g at bit 8 kOff + g kBits.
    dispatch<kPacked ? 1 : kPeriod>(kPacked ? 0 : c % kPeriod, [&](auto phase_tag) {
      constexpr int kOff = decltype(phase_tag)::value * kBits % 16;
      constexpr bool kWide = kOff + kBits > 16;
      for (int t = 0; t < tiles; t++) {
        mbarrier_wait_parity(full_bar(s), phase);
        uint32_t w[9];
        if constexpr (kPacked) {  // kPackBytes at tid * kPackBytes (offset 0)
#pragma unroll
          for (int q = 0; q < 5; q++)
            w[q] = q < kPackBytes / 4 ? ld_shared_b32(ring + s * kSlot + tid * kPackBytes + 4 * q) : 0u;
        } else {
          const uint4 lo = ld_shared_v4(ring + s * kSlot + tid * (kWide ? 32 : 16));
          w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = 0u;
        }
        if constexpr (kWide) {
          const uint4 hi = ld_shared_v4(ring + s * kSlot + tid * 32 + 16);
          w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w, w[8] = 0u;
        }
        const int row = t * kThreads + tid;
        if (row < rows) {
          float v[kM][kGroups];
#pragma unroll
          for (int g = 0; g < kGroups; g++) {
            constexpr uint32_t kMask = (1u << kBits) - 1u;
            const int bit = 8 * kOff + g * kBits, word = bit / 32, sh = bit % 32;
            const uint32_t idx = (sh + kBits <= 32 ? w[word] >> sh : __funnelshift_r(w[word], w[word + 1], sh)) & kMask;
            if constexpr (kM == 2) {
              const uint32_t pair = table2[g * kEntries + (idx ^ swizzle(g))];
              v[0][g] = vq_widen_lo(E{}, pair), v[1][g] = vq_widen_hi(E{}, pair);
            } else {
              v[0][g] = table[g * kEntries + idx];
            }
          }
#pragma unroll
          for (int m = 0; m < kM; m++)
            sums[m * p.rows_per_block + row] +=
                ((v[m][0] + v[m][1]) + (v[m][2] + v[m][3])) + ((v[m][4] + v[m][5]) + (v[m][6] + v[m][7]));
        }
        // The stage is freed once its codes are used (NOTES).
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty_bar(s));
        if (++s == kRing) s = 0, phase ^= 1u;
      }
    });
  }

  // ---- the rows' sums: y (one K range) or this range's partials ----
  for (int t = 0; t < tiles; t++) {
    const int row = t * kThreads + tid;
    if (row >= rows) continue;
    const int n = n0 + row;
#pragma unroll
    for (int m = 0; m < kM; m++) {
      const float sum = sums[m * p.rows_per_block + row];
      if (p.k_ranges == 1)
        vq_store_as(p.y, p.y_dtype, m * p.y_ld + n, p.scales ? sum * p.scales[n] : sum);
      else
        p.partials[(static_cast<int64_t>(range) * kM + m) * p.N + n] = sum;
    }
  }
}

// y[m, n] = scale[n] * (the K ranges' partial sums of row n for x row m = blockIdx.y): a block of
// 8 warps takes 32 rows (a lane each); warp w adds ranges w, w + 8, ... in order, then lane n of
// warp 0 adds the 8 warps' sums in warp order (a fixed order: the same sums on every run). One
// thread per row adding the 64-128 ranges alone took 11.6 us at N = 4096 (16 blocks, ncu), longer
// than the main kernel.
__global__ void __launch_bounds__(256) vq_gemv_lut_reduce(const vq_lut_params p) {
  __shared__ float part[8][32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int n = static_cast<int>(blockIdx.x) * 32 + lane, m = static_cast<int>(blockIdx.y);
  float v = 0.0f;
  if (n < p.N) {
#pragma unroll 4
    for (int k = warp; k < p.k_ranges; k += 8)
      v += p.partials[(static_cast<int64_t>(k) * gridDim.y + m) * p.N + n];
  }
  part[warp][lane] = v;
  __syncthreads();
  if (warp != 0 || n >= p.N) return;
  v = part[0][lane];
#pragma unroll
  for (int w = 1; w < 8; w++) v += part[w][lane];
  vq_store_as(p.y, p.y_dtype, m * p.y_ld + n, p.scales ? v * p.scales[n] : v);
}

// ---- host: the limits, the split, the launch ----

namespace {

const char kOp[] = "qf_vq_gemm";

using lut_kernel_t = void (*)(CUtensorMap, CUtensorMap, vq_lut_params);

// The kernel of an entry type and layout for a (vector size, index bits, rows of x); NULL for two
// rows of x at vector sizes other than 8.
template <int kVS, int kBits, int kM>
lut_kernel_t pick_dtype(bool bf16, bool packed) {
  if constexpr (kM == 2 && kVS != 8) {
    return nullptr;
  } else {
    if (bf16) return packed ? vq_gemv_lut_kernel<kVS, kBits, vq_bf16, true, kM> : vq_gemv_lut_kernel<kVS, kBits, vq_bf16, false, kM>;
    return packed ? vq_gemv_lut_kernel<kVS, kBits, vq_f16, true, kM> : vq_gemv_lut_kernel<kVS, kBits, vq_f16, false, kM>;
  }
}

// The kernel of a (vector size, index bits, entry type, rows of x), or NULL; `slot` numbers it for
// the shared-memory opt-in flags.
lut_kernel_t pick_lut(int vs, int bits, bool bf16, bool packed, int m, int &slot) {
  slot = 0;
#define QF_VQ_LUT_PICK(VS, BITS)                                                  \
  if (vs == VS && bits == BITS) {                                               \
    slot += m - 1; /* the M = 2 kernel is another function: its own flag */     \
    if (m == 2) return pick_dtype<VS, BITS, 2>(bf16, packed);                   \
    return pick_dtype<VS, BITS, 1>(bf16, packed);                               \
  }                                                                             \
  slot += 2;
  QF_VQ_LUT_FORMATS(QF_VQ_LUT_PICK)
#undef QF_VQ_LUT_PICK
  return nullptr;
}

}  // namespace

extern "C" const char *qf_cuda_vq_lut_refusal(const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  const qf_vq_format &f = w->fmt;
  int slot;
  if (x->rows < 1 || x->rows > 4) return "the table GeMV takes M = 1 to 4";
  if (f.scope_rows != 0 || f.scope_cols != 0) return "the table GeMV needs one codebook per residual (scopes of 0 x 0)";
  if (pick_lut(f.vector_size, f.index_bits, false, false, 1, slot) == nullptr)
    return "the table GeMV takes vector size 8 with 12- or 8-bit indices and vector size 4 with 10-bit ones";
  if (x->rows > 1) {
    if (f.vector_size != 8) return "the table GeMV takes M = 2 to 4 with vector size 8";
    if (x->dtype != f.entry_dtype) return "the table GeMV at M = 2 to 4 needs x of the codebook entries' type (fp16 or bf16)";
    if (y->dtype != QF_F16 && y->dtype != QF_BF16)
      return "the table GeMV at M = 2 to 4 writes fp16 or bf16 y (its table values are rounded to the entries' type)";
  }
  if (reinterpret_cast<uintptr_t>(w->codes) % 16 != 0 || reinterpret_cast<uintptr_t>(w->books) % 16 != 0)
    return "the table GeMV needs codes and codebooks aligned to 16 bytes";
  if (static_cast<int64_t>(f.residuals) * w->N > INT32_MAX) return "the table GeMV needs R * N code rows below 2^31";
  if (!w->packed && w->sz.row_bytes < 32)
    return "the table GeMV needs code rows of at least 32 bytes (its widest TMA box) or packed codes";
  return nullptr;
}

namespace {

// One or two rows of x (the call's checks passed): the kernel for that M, then the ranges' sums.
qf_status launch_rows(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                      int rows_per_block, qf_vq_mma_config *used) {
  using namespace vq_lut_detail;
  const qf_vq_format &f = w->fmt;
  const int64_t N = w->N, K = w->K;
  const int bits = f.index_bits;
  const bool bf16 = f.entry_dtype == QF_BF16;
  const int m = static_cast<int>(x->rows);
  int slot;
  const lut_kernel_t kernel = pick_lut(f.vector_size, bits, bf16, w->packed != 0, m, slot);

  // Rows per block: as many as the shared memory left by the table and the ring holds (whole
  // tiles), the row ranges as even as they come; then as many K ranges as fill one block per SM.
  const size_t fixed = smem_bytes(bits, 0, m) + 1024;  // + the static arrays and slack
  const int64_t max_rows =
      ctx->smem_optin > fixed ? static_cast<int64_t>((ctx->smem_optin - fixed) / (4 * m)) / kThreads * kThreads : 0;
  if (max_rows == 0 || (rows_per_block > 0 && rows_per_block > max_rows))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the table GeMV's rows per block (%lld) do not fit the shared memory",
                   kOp, static_cast<long long>(rows_per_block > 0 ? rows_per_block : kThreads));
  const int64_t vectors = K / f.vector_size, items = qf_vq_pack_chunks(vectors) * f.residuals;
  if (rows_per_block <= 0) {
    const int64_t ranges = (N + max_rows - 1) / max_rows;
    rows_per_block = static_cast<int>((N + ranges - 1) / ranges);
    if (w->packed) rows_per_block = (rows_per_block + kThreads - 1) / kThreads * kThreads;  // whole packed tiles
  } else if (w->packed && rows_per_block % kThreads != 0) {
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: packed codes take rows per block in whole tiles of %d (%d asked)", kOp,
                   kThreads, rows_per_block);
  }
  const int64_t row_ranges = N > 0 ? (N + rows_per_block - 1) / rows_per_block : 0;
  const int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
  if (splits <= 0) {
    // At most one block per SM, ranges of the same whole number of items (the last one shorter):
    // 132 ranges of 3 or 4 items ran 22016 x 8192 in 85 us against 78 for 64 ranges of 4, and
    // 8192 x 22016 in 104 against 87 for 115 ranges of 6 (H200).
    const int64_t want = std::max<int64_t>(1, row_ranges > 0 ? sms / row_ranges : 1);
    const int64_t per = (items + want - 1) / want;
    splits = static_cast<int>(per > 0 ? (items + per - 1) / per : 1);
  }
  if (items == 0 || splits > items)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %d K ranges of %lld items (8-vector chunks x residuals)", kOp, splits,
                   static_cast<long long>(items));
  const int k_ranges = splits;
  if (row_ranges * k_ranges > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld blocks exceed the grid", kOp, static_cast<long long>(row_ranges * k_ranges));
  const size_t smem = smem_bytes(bits, rows_per_block, m);

  if (used) {
    *used = qf_vq_mma_config{};
    used->m_tiles8 = 1;
    used->tile_n = rows_per_block;
    used->tile_m = m;
    used->placement = QF_VQ_BOOKS_LUT;
    used->mma_bf16 = bf16;
    used->x_parts = 1;
    used->entry_parts = 1;
    used->warps = kThreads / 32 + 1;
    used->warps_k = 1;
    used->tiles_n = row_ranges;
    used->tiles_m = 1;
    used->tiles = row_ranges * k_ranges;
    used->splits = k_ranges;
    used->books_bytes = table_bytes(bits);
    used->smem_bytes = smem;
  }
  if (N == 0) return QF_OK;

  static std::atomic<uint64_t> opted_in[2][2][8];  // [bf16][packed][format and rows of x]
  if (qf_status st = qf_cuda_smem_opt_in(ctx, kOp, kernel, smem_bytes(bits, static_cast<int>(max_rows), m),
                                         opted_in[bf16][w->packed != 0][slot]);
      st != QF_OK)
    return st;
  CUtensorMap tmap_16 = {}, tmap_32 = {};  // 16- and 32-byte windows of the code rows (standard layout)
  for (int b = 0; b < 2 && !w->packed; b++)
    if (qf_status st = qf_cuda_make_tmap_bytes(ctx, kOp, b ? &tmap_32 : &tmap_16, "codes", w->codes, f.residuals * N,
                                               w->sz.row_bytes, w->sz.row_bytes, b ? 32 : 16, kBoxRows);
        st != QF_OK)
      return st;
  vq_lut_params p = {};
  p.books = static_cast<const uint16_t *>(w->books);
  p.scales = w->scales;
  p.x = x->data;
  p.y = y->data;
  p.x_ld = x->ld;
  p.y_ld = y->ld;
  p.x_dtype = x->dtype;
  p.y_dtype = y->dtype;
  p.N = static_cast<int>(N);
  p.vectors = static_cast<int>(vectors);
  p.residuals = f.residuals;
  p.items = static_cast<int>(items);
  p.rows_per_block = rows_per_block;
  p.k_ranges = k_ranges;
  p.items_per_range = static_cast<int>((items + k_ranges - 1) / k_ranges);
  if (w->packed) p.packed = w->codes;
  if (k_ranges > 1) {
    void *ws = nullptr;
    const size_t partial_bytes = static_cast<size_t>(k_ranges) * m * static_cast<size_t>(N) * sizeof(float);
    if (qf_status st = qf_cuda_workspace(ctx, kOp, kQfWorkspaceCounters * sizeof(int) + partial_bytes, &ws); st != QF_OK)
      return st;
    p.partials = reinterpret_cast<float *>(static_cast<int *>(ws) + kQfWorkspaceCounters);
  }
  kernel<<<static_cast<unsigned>(row_ranges * k_ranges), kThreads + 32, smem, qf_stream(ctx)>>>(tmap_16, tmap_32, p);
  if (qf_status st = qf_cuda_check_launch(ctx, kOp); st != QF_OK || k_ranges == 1) return st;
  vq_gemv_lut_reduce<<<dim3(static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>(m)), 256, 0, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}

}  // namespace

extern "C" qf_status qf_cuda_vq_gemv_lut_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                              int splits, int rows_per_block, qf_vq_mma_config *used) {
  if (const char *why = qf_cuda_vq_lut_refusal(x, w, y)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %s", kOp, why);
  if (qf_status st = vq_gemm_offset_limits(ctx, kOp, x, w, y); st != QF_OK) return st;
  if (x->rows <= 2) return launch_rows(ctx, x, w, y, splits, rows_per_block, used);
  // M = 3 and 4: a call per pair of rows (an odd last row on the M = 1 kernel).
  return vq_gemv_row_pairs(x, y, used, [&](const qf_mat *xs, const qf_mat *ys, qf_vq_mma_config *u) {
    return launch_rows(ctx, xs, w, ys, splits, rows_per_block, u);
  });
}

// ---- qf_vq_pack_gemv on CUDA: a thread per (residual, row, chunk) writes its packed bytes ----

__global__ void vq_pack_gemv_kernel(const uint8_t *codes, int64_t N, int64_t row_bytes, int bits, int64_t tiles,
                                    int64_t chunks, int64_t total, uint8_t *packed) {
  const int64_t cb = qf_vq_pack_chunk_bytes(bits), rows = tiles * QF_VQ_PACK_ROWS;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < total; u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = u % chunks, n = u / chunks % rows, r = u / chunks / rows;
    uint32_t *out = reinterpret_cast<uint32_t *>(packed + qf_vq_pack_offset(r, n, c, tiles, chunks, bits));
    const uint8_t *row = codes + (r * N + n) * row_bytes;
    for (int64_t q = 0; q < cb / 4; q++) {
      uint32_t word = 0;
      for (int64_t b = 4 * q; b < 4 * q + 4 && n < N; b++)
        word |= static_cast<uint32_t>(qf_vq_pack_byte(row, row_bytes, c, b, bits)) << (8 * (b - 4 * q));
      out[q] = word;
    }
  }
}

extern "C" qf_status qf_cuda_vq_pack_gemv(qf_ctx *ctx, const qf_vq_tensors *t, uint8_t *packed) {
  const int64_t tiles = qf_vq_pack_tiles(t->N), chunks = qf_vq_pack_chunks(t->K / t->fmt.vector_size);
  const int64_t total = t->fmt.residuals * tiles * QF_VQ_PACK_ROWS * chunks;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, int64_t{ctx->sm_count > 0 ? ctx->sm_count : 1} * 8);
  vq_pack_gemv_kernel<<<static_cast<unsigned>(blocks), 256, 0, qf_stream(ctx)>>>(
      t->codes, t->N, t->sz.row_bytes, t->fmt.index_bits, tiles, chunks, total, packed);
  return qf_cuda_check_launch(ctx, "qf_vq_pack_gemv");
}
