// VQ-GeMV at batch 1 and 2 through tables of products for codebooks scoped to tiles of the weight
// (placement QF_VQ_BOOKS_LUT; GPTVQ: one 256-entry book of 4-element vectors per 256 x 256 tile):
// y[m, n] = scale[n] * sum_k x[m, k] * W[n, k].
//
// NOTES:
// - Why: the banked GeMV (vq_gemv_banked.cu) spends about 10 instructions per vector: a byte
//   permute, an address, an 8-byte entry load, the moves that place it in the MMA's A fragment,
//   and its share of the MMA and the adds. At M = 1 a vector's contribution is entry . x-vector,
//   the same number for every row of the book's scope that selects the entry. For a chunk of 64
//   vectors (256 columns, a GPTVQ book's width) and one book, the table T[e][j] = entry e . x's
//   vector j (256 x 64 values) costs as many products as the 256 rows' vectors it serves, but the
//   tensor cores make it: one mma.sync m16n8k16 gives 128 table values. A vector then costs a
//   byte permute that makes the address, a 2-byte load and its share of the sums, which the
//   tensor cores add too (below).
// - Table values in the entries' 16-bit type: the table's stores are half the shared-memory
//   traffic of building it, and each value is used about once (256 rows, 256 entries), so the
//   build's stores were as many wavefronts as the lookups. With fp32 values, halving them alone
//   (a timing-only build) took packed (22016, 8192) from 26.3 to 23.5 us.
// - The build: the MMA's rows r are x's vectors, its columns n entries, its k (group p, element
//   d): A[r][(p, d)] = x[vec(r, p)][d], B[(p, d)][n] = entry[e(n)][d] where p == (n / 2 + h) % 4 in
//   variant h of B, else 0, so D[r][n] = T[e(n)][vec(r, (n / 2 + h) % 4)]: 8 entries by 16 vectors
//   each, and the four variants take each entry to all 64 vectors. k is permuted (k -> p = (k % 8)
//   / 2, d = k % 2 + 2 (k / 8)) so that a lane's A registers are one vector pair of x (one 16-byte
//   load of x as the copy reorders it, once per item) and its B registers its column's whole entry
//   (one 8-byte load of the book as it is stored, the quarter warp's lanes reading the same entry)
//   in one variant and zeros in the three others. Each 4-byte store of D (two adjacent vectors of
//   an entry, rounded) is conflict-free. (A varying and B fixed, as before, loaded x four times per
//   item and warp: 96 more shared-memory wavefronts an item, a fifth of its lookups'. B carrying x
//   and A the entries, as built first, needs one 16-byte load per MMA for 32 bytes of book, four
//   wavefronts: 11% slower on the Llama-65B layers.)
// - The table is [256 entries][256 bytes], two buffers side by side (bytes 0..127 and 128..255 of
//   a row), so an address is (index << 8) | column byte: one byte permute of the code word and the
//   lane's column bytes. In each step the 32 lanes' 2-byte values lie in 32 different banks
//   (below): the entry row (a multiple of 64 words) never decides the bank, and every lookup is
//   one wavefront.
// - Work: a unit is 256 rows of W (8 warps of 32, inside one row scope) by a range of chunks; an
//   item is one (chunk, residual). A ninth warp makes the copies: lane 0 each item's book (2 KB)
//   with cp.async.bulk and the warp x's chunk (512 bytes, by 4-byte cp.async that reorder its
//   words for A) into a ring of 4 book slots, three items ahead; a slot's full mbarrier counts the
//   book's bytes and x's 32 arrivals, and it is rewritten once the 8 warps have arrived on its
//   empty mbarrier after the build that read it. Items are pipelined over one named barrier of the
//   8 warps each: while they look up item i in one table buffer they build item i + 1's table in
//   the other, straight from its slot. (Warp 0 made the copies between its builds and lookups
//   before: the other warps waited for it at every item barrier, a quarter of their stall cycles
//   by Nsight Compute; with the copies' warp, packed (22016, 8192) 22.1 -> 21.0 us at M = 1 and
//   33.9 -> 31.6 at M = 2, the standard layout's Llama-7B layers at M = 1 1-2% slower, H200.)
// - Codes: an item's 256 rows x 64 bytes are copied an item ahead into one of two code slots
//   (refilled once the 8 warps have arrived on its empty mbarrier after their lookups) and each
//   lane reads its 16 words from there. The standard layout: one TMA box of the code matrix,
//   64-byte swizzled. Packed (qf_vq_pack_gemv, kPacked): 8 contiguous runs of 2 KB (one per
//   8-vector chunk of a 512-row tile) by bulk copies, 2080 bytes apart. Either way the lanes'
//   words of a load fall in 32 banks. (Each lane loading its words from global memory an item
//   ahead, as before, ran the standard layout 1.3x slower than packed codes.)
// - Speed (H100, GPTVQ-2 on the Llama layers): packed (22016, 8192) 22.3-22.6 us, 80% of the
//   copy floor, 5.6x cuBLASLt fp16; the standard layout 25.6 us there (70%), 1.30-1.60x the
//   banked GeMV over the layers (docs/VQ.md, "16-bit table values" and after).
// - Under qf_ctx_set_pdl the kernel launches as a programmatic dependent: the weight's first
//   copies are asked for before it waits for the kernel before (which wrote x).
// - Two rows of x (kM = 2): a table word holds both rows' values of an (entry, vector), row 0 in
//   the low half, so one 4-byte lookup serves both rows. An item is then half a chunk (128
//   columns, 32 vectors), which keeps the table at 128 bytes per entry and buffer (64 KB, two
//   blocks per SM): the build is the same code, x's 16 bytes per MMA lane being one vector of both
//   rows instead of two vectors of one, so A's rows grp and grp + 8 are the two rows of x and each
//   4-byte store of D is a table word. The lookups read one code word per row and lane (32 code
//   bytes per row), whose 4-byte table words fall in 32 banks as they are. Per column it builds
//   twice the table values and adds twice the sums for the same lookups and code bytes: (22016,
//   8192) 34.6 us against 23.2 at M = 1, 1.08x the banked GeMV (the router's kernel at M = 2 before),
//   the Llama-7B layers 1.15-1.22x (H200, docs/VQ.md). M = 3 and 4 run a pair of rows at a time
//   (an odd last row as at M = 1), for packed codes: on the standard layout the banked GeMV,
//   whose time does not grow with M up to 8, is faster there.
// - The sums on the tensor cores: a lane's looked-up values of a step are the A fragments of two
//   mma.sync whose B is a 0/1 matrix routing each value to its row's column of D (the lookups'
//   section says how), instead of a widening and an fp32 add per value and row of x. At M = 2,
//   where each lookup fed two of each, GPTVQ-2 ran 5-8% faster on every Llama layer ((22016,
//   8192) 33.3 -> 31.6 us, packed 31.5 -> 29.6; the registers 90 -> 72); at M = 1, where the
//   shared-memory pipe (the 2-byte lookups) bounds the loop, within 2% either way (H200, two
//   alternating runs; docs/VQ.md).
// - Split-K over blocks as in the banked GeMV: each unit leaves its 256 row sums in the workspace
//   and the tile's last unit adds them in split order (a call repeats bit for bit), asking for all
//   of a row's partials at once (vq_split_sum): one L2 round trip for 16 splits instead of five,
//   (4096, 4096) 7.0 -> 6.15 us, (4096, 11008) 11.0 -> 10.2 (H100, docs/VQ.md).
// - Limits (else QF_ERR_UNSUPPORTED with the reason; the other placements serve the call): M = 1
//   to 4, 8-bit indices, vector size 4, x of the entries' 16-bit type with rows aligned to 4
//   bytes, y fp16 or bf16, books and codes aligned to 16 (code rows a multiple of 16 bytes), K a
//   multiple of 256, scope_rows 0 or a multiple of 256, scope_cols 0 or a multiple of 256.
// - Numerics: a table value is the tensor core's fp32 sum of the entry's 4 exact products, rounded
//   to nearest in the entries' type (fp16 or bf16; an fp16 value beyond 65504 is infinite); the
//   values of a row of W and x are summed by the tensor cores in fp32, 4 lanes' values of a step at
//   a time into an accumulator of the even or the odd steps (the products by one exact, the sum in
//   the tensor core's order), then the two sets and the row's two quarter warps are added, then the
//   split partials in split order; the row scale multiplies the finished sum. A NaN or infinite
//   table value (NaN in x or a book, an fp16 sum past 65504) also meets the routing matrix's zeros:
//   the sums of the rows that share its A row (4 rows of W, every row of x) become NaN. (fp32 y is
//   refused: its callers expect the fp32 accuracy of the other kernels.)
#include <atomic>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/pack.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/tma_map.h"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_heuristic.h"

struct vq_lut_tiles_params {
  const uint32_t *codes;  // packed (qf_vq_pack_gemv): [R, pack_tiles, pack_chunks, 512 x 8 bytes]; else the tensor map's
  const uint16_t *books;  // [R, n_books, entries, 4]
  const float *scales;    // [N] or NULL
  const void *x;          // [M, K], the entries' 16-bit type, rows x_ld apart
  void *y;                // [M, N], rows y_ld apart
  int64_t x_ld, y_ld;
  int64_t n_books;
  int y_dtype;
  int N, chunks, residuals;
  int chunks_per_book;  // 256-column chunks per book along K (all of them for one book per row)
  int books_per_row, scope_rows;
  int64_t pack_tiles, pack_chunks;  // packed codes: 512-row tiles, 8-vector chunks
  int tiles_n, splits;
  int pdl;          // launched as a programmatic dependent (qf_ctx_set_pdl)
  float *partials;  // splits > 1: [tiles_n][splits][256]
  int *counters;    // splits > 1: [tiles_n], zero between calls
};

namespace vq_lut_tiles_detail {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kRows = kWarps * 32;           // rows of W per unit
constexpr int kChunk = 256;                  // columns per chunk of K (a GPTVQ book's width): 64 vectors of 4
constexpr int kEntries = 256;                // table rows: a book of 8-bit indices
constexpr int kTableBytes = kEntries * 256;  // two 128-byte buffers (64 16-bit values) per entry row
// An item's columns: a chunk at M = 1, half a chunk at M = 2 (kM rows of x), so that a table row
// is 128 bytes either way: 64 vectors of one row of x, or 32 vectors of both rows in 4-byte words.
template <int kM>
constexpr int kItemCols = kChunk / kM;
constexpr int kBookBytes = kEntries * 8, kXBytes = kChunk * 2;
// Book slots: an item's book and x's columns (kM rows; the four words of a vector pair, M = 1, or
// of a vector of both rows, M = 2, in the order the MMA's A fragment takes them), 2560 bytes, a
// multiple of 128, so every book sits at the same bank offset.
constexpr int kBookStages = 4, kBookSlot = kBookBytes + kXBytes;
// Code slots: an item's 256 rows of 64 code bytes (M = 2: 32). Packed codes: 8 runs (M = 2: 4) of
// 2 KB (one per 8-vector chunk), 2080 bytes apart so that the lanes' words fall in 32 banks. The
// standard layout: one TMA box of 256 rows x 64 bytes, its 16-byte chunks swizzled (chunk c of row
// r at c ^ (r / 2) % 4), which spreads the lanes' words over 32 banks; at M = 2 a box of 256 rows
// x 32 bytes, whose lanes' words fall in 32 banks as they are. The swizzle follows the
// shared-memory address, so the code slots start at the first 1024-byte boundary past kCodeRingAt
// (the block's static shared memory comes first).
constexpr int kCodeStages = 2, kRunBytes = 2048, kRunPitch = kRunBytes + 32;
template <int kM>
constexpr int kItemRuns = kItemCols<kM> / 32;
template <int kM>
constexpr int kCodeBytes = kRows * kItemCols<kM> / 4;
template <bool kPacked, int kM>
constexpr int kCodeSlot = kPacked ? kItemRuns<kM> * kRunPitch : kCodeBytes<kM>;
constexpr int kBookRingAt = kTableBytes;
constexpr int kCodeRingAt = kBookRingAt + kBookStages * kBookSlot;
template <bool kPacked, int kM>
constexpr int kBarsAt = kCodeRingAt + 1024 + kCodeStages * kCodeSlot<kPacked, kM>;
template <bool kPacked, int kM>
constexpr int kSmemBytes = kBarsAt<kPacked, kM> + 2 * (kBookStages + kCodeStages) * 8;
// A book slot's phase: the book copy's arrival with its bytes, and x's 32 lanes' arrivals.
constexpr int kBookArrivals = 1 + 32;
// The copies' warp after the kWarps that build and look up.
constexpr int kBlockThreads = kThreads + 32;

// prmt.b32 in its default mode (a selector nibble's bit 3 replicates the chosen byte's sign).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// The value as an empty asm leaves it: opaque to the compiler, which then keeps a lane's constant
// offsets in registers instead of recomputing them from the thread index in every step.
__device__ __forceinline__ uint32_t pinned(uint32_t v) {
  asm volatile("" : "+r"(v));
  return v;
}

}  // namespace vq_lut_tiles_detail

// kM: rows of x, 1 or 2.
template <typename T, bool kPacked, int kM>
__global__ void __launch_bounds__(vq_lut_tiles_detail::kBlockThreads, 2)
    vq_gemv_lut_tiles_kernel(const __grid_constant__ CUtensorMap tmap_codes, const __grid_constant__ vq_lut_tiles_params p) {
  using namespace vq_lut_tiles_detail;
  static_assert(kM == 1 || kM == 2, "one or two rows of x");
  constexpr int kCodeSlotBytes = kCodeSlot<kPacked, kM>, kCols = kItemCols<kM>;
  // The table [256][256 bytes] (buffer b at byte 128 b of a row), the book
  // slots, the code slots, their mbarriers.
  extern __shared__ __align__(128) uint8_t smem[];

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int tile = static_cast<int>(blockIdx.x) / p.splits, split = static_cast<int>(blockIdx.x) % p.splits;
  const int n_base = tile * kRows;
  const int c_begin = static_cast<int>(static_cast<int64_t>(split) * p.chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(split + 1) * p.chunks / p.splits);
  const int items = (c_end - c_begin) * kM * p.residuals;
  const int64_t book_first = static_cast<int64_t>(p.scope_rows ? n_base / p.scope_rows : 0) * p.books_per_row;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t book_ring = smem_base + kBookRingAt, code_ring = (smem_base + kCodeRingAt + 1023) & ~1023u;
  // Full barriers (the copies landed) and empty ones (the kWarps warps' arrivals once they are done
  // with a slot) of the book and code slots.
  const uint32_t book_bars = smem_base + kBarsAt<kPacked, kM>, code_bars = book_bars + 8 * kBookStages;
  const uint32_t book_empty = code_bars + 8 * kCodeStages, code_empty = book_empty + 8 * kBookStages;

  // An item is (columns c, residual r), c counting kCols columns (a chunk, M = 1, or half of one,
  // M = 2); the next one is (c, r + 1) or (c + 1, 0). kb: the columns' book along K, kc: their
  // place in it.
  struct item_t {
    int c, r, kb, kc;
  };
  const int items_per_book = p.chunks_per_book * kM;
  auto next_item = [&](item_t it) {
    if (++it.r < p.residuals) return it;
    const bool next_book = it.kc + 1 == items_per_book;
    return item_t{it.c + 1, 0, it.kb + next_book, next_book ? 0 : it.kc + 1};
  };
  const item_t it0 = {c_begin * kM, 0, c_begin * kM / items_per_book, c_begin * kM % items_per_book};

  // ---- the copies ----
  // Thread 0 copies an item's book (cp.async.bulk) into its book slot; the 32 lanes of warp 0 copy
  // x's columns beside it by 4-byte cp.async, and arrive on the slot's mbarrier once they have
  // landed. M = 1: lane l the 16 bytes of vectors 2 l and 2 l + 1 as words 0, 2, 1, 3 (both vectors'
  // elements 0-1, then 2-3: the A fragment's registers in order); M = 2: vector l of both rows,
  // elements 0-1 of rows 0 and 1, then elements 2-3.
  auto issue_book = [&](item_t it, int slot) {
    const uint32_t bar = book_bars + 8 * slot;
    fence_proxy_async_shared_cta();  // the slot's reads in the steps before, ahead of the copy's writes
    mbarrier_arrive_expect_tx(bar, kBookBytes);
    const int64_t book = static_cast<int64_t>(it.r) * p.n_books + book_first + it.kb;
    cp_async_bulk_g2s(book_ring + slot * kBookSlot, p.books + book * kEntries * 4, kBookBytes, bar);
  };
  auto issue_x = [&](item_t it, int slot) {
    const uint32_t dst = book_ring + slot * kBookSlot + kBookBytes + 16 * lane;
    const uint8_t *src = reinterpret_cast<const uint8_t *>(static_cast<const T *>(p.x) + it.c * kCols) + 16 / kM * lane;
    const uint8_t *src2 = kM == 1 ? src + 8 : src + p.x_ld * sizeof(T);  // vector 2 l + 1, or row 1
    cp_async_ca_shared_global_4(dst, src, 4);
    cp_async_ca_shared_global_4(dst + 4, src2, 4);
    cp_async_ca_shared_global_4(dst + 8, src + 4, 4);
    cp_async_ca_shared_global_4(dst + 12, src2 + 4, 4);
    cp_async_mbarrier_arrive_noinc(book_bars + 8 * slot);
  };
  // Thread 0 copies an item's codes (rows n_base .. + 255, kCols / 4 bytes each) into its code
  // slot: packed, the runs of its chunks of 8 vectors; else one box of the code matrix [R N, row bytes].
  const uint8_t *const packed_tile = reinterpret_cast<const uint8_t *>(p.codes) +
                                     ((n_base / 512) * p.pack_chunks * 4096 + ((n_base / 256) & 1) * kRunBytes);
  auto issue_codes = [&](item_t it, int slot) {
    const uint32_t bar = code_bars + 8 * slot, dst = code_ring + slot * kCodeSlotBytes;
    fence_proxy_async_shared_cta();  // the slot's reads in the steps before, ahead of the copies' writes
    mbarrier_arrive_expect_tx(bar, kCodeBytes<kM>);
    if constexpr (kPacked) {
      const uint8_t *src = packed_tile + (it.r * p.pack_tiles * p.pack_chunks + kItemRuns<kM> * it.c) * 4096;
#pragma unroll
      for (int j = 0; j < kItemRuns<kM>; j++) cp_async_bulk_g2s(dst + j * kRunPitch, src + j * 4096, kRunBytes, bar);
    } else {
      cp_async_bulk_tensor_2d_g2s(dst, &tmap_codes, bar, it.c * (kCols / 4), it.r * p.N + n_base);
    }
  };
  auto wait_book = [&](int i) {
    mbarrier_wait_parity(book_bars + 8 * (i % kBookStages), static_cast<uint32_t>(i / kBookStages) & 1u);
  };
  auto wait_codes = [&](int i) {
    mbarrier_wait_parity(code_bars + 8 * (i % kCodeStages), static_cast<uint32_t>(i / kCodeStages) & 1u);
  };

  // ---- the build: lane (grp, tig) of the MMA fragments ----
  // Rows r of the MMA are x's vectors, columns n entries: A[r][(p, d)] = x[vec(r, p)][d] (dense),
  // B[(p, d)][n] = entry[e(n)][d] where p == (n / 2 + h) % 4 in variant h, else 0, so D[r][n] =
  // T[e(n)][vec(r, (n / 2 + h) % 4)]. A lane's A registers are the vector pair c = 4 grp + tig
  // (rows grp, grp + 8 of group tig: vectors 2 c, 2 c + 1), one 16-byte load of x whose quarter
  // warps read 8 consecutive pairs; its B registers are its column's entry (all lanes load it, a
  // quarter warp the same 8 bytes) where tig == (grp / 2 + h) % 4, else zeros. D's values of an
  // entry and group (n / 2 + h) % 4 = (tig + h) % 4 are the vector pair 4 grp + (tig + h) % 4, one
  // 4-byte store, which over the warp fills 32 banks.
  // M = 2: the same code, with x's 16 bytes at c those of vector c of both rows (above): rows grp
  // and grp + 8 are then row 0 and row 1 of x's vector c, and each 4-byte store is one entry's
  // values of vector c for both rows (row 0 in the low half), the table word of M = 2.
  const int grp = lane >> 2, tig = lane & 3;
  const uint32_t x_at = pinned(kBookBytes + 16 * (4 * grp + tig));
  uint32_t d_at[4], keep[4];
#pragma unroll
  for (int h = 0; h < 4; h++) {
    d_at[h] = pinned((32 * warp + 2 * tig) * 256 + 4 * (4 * grp + ((tig + h) & 3)));
    keep[h] = pinned(tig == (((grp >> 1) + h) & 3) ? ~0u : 0u);
  }
  const uint32_t entry_at = pinned(256 * warp + 8 * grp);
  // Table buffer `buf` of the item in book slot `slot`: warp w builds entries 32 w .. 32 w + 31, 8
  // (block bk) per entry load, each in the four variants of B.
  auto build = [&](auto buf, int slot) {
    constexpr int kBuf = decltype(buf)::value;
    const uint32_t at = book_ring + slot * kBookSlot;
    const uint4 xq = ld_shared_v4(at + x_at);
    const uint32_t a[4] = {xq.x, xq.y, xq.z, xq.w};
#pragma unroll
    for (int bk = 0; bk < 4; bk++) {
      const uint2 e = ld_shared_v2(at + entry_at + 64 * bk);
#pragma unroll
      for (int h = 0; h < 4; h++) {
        const uint32_t b[2] = {e.x & keep[h], e.y & keep[h]};
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_m16n8k16(T{}, d, a, b);
        uint8_t *const row = smem + d_at[h] + 8 * bk * 256 + kBuf * 128;
        *reinterpret_cast<uint32_t *>(row) = pack_pair(T{}, d[0], d[2]);
        *reinterpret_cast<uint32_t *>(row + 256) = pack_pair(T{}, d[1], d[3]);
      }
    }
  };

  // ---- the lookups: lane (q, m) takes rows 4 k + q (k < 8) of the warp's 32 ----
  // M = 1: of each row code words m and m + 8. Its slot j of a row holds word m + 8 H_j (vectors
  // 32 H_j + 4 m .. + 3), H_j = (q / 2 + j) % 2. Step s reads slot s % 2's byte t = 2 ((q + s / 2) %
  // 2) + s / 4 of each row (the vector 32 H + 4 m + t): over the 8 steps every vector of both
  // words, and in each step the lanes' 16-bit values lie in 32 different banks (bank 16 H + 2 m +
  // t / 2).
  // M = 2: of each row code word m (the item's 32 bytes are 8 words). Step s reads byte t = (q + s)
  // % 4 of each row, the vector 4 m + t, whose 4-byte table word lies in bank 4 m + t: 32 banks.
  const int q = lane >> 3, m = lane & 7;
  // M = 1: word m + 8 H of row 32 w + 4 k + q in a code slot, for k even and odd: packed, word m % 2
  // of run m / 2 + 4 H (banks 8 (m / 2) + 8 k + 2 q + m % 2); the standard layout's box, 16-byte
  // chunk (m / 4 + 2 H) ^ (q / 2 + 2 k) % 4 of the row (banks 16 (q % 2) + 4 chunk + m % 4).
  // M = 2: word m of row 32 w + 4 k + q: packed, word m % 2 of run m / 2 (banks 8 (m / 2) + 8 k +
  // 2 q + m % 2); the standard layout's box of 32-byte rows (banks 8 q + m).
  constexpr int kWords = 2 / kM;  // code words per row and lane
  uint32_t codes_at[kWords][2];
#pragma unroll
  for (int j = 0; j < kWords; j++)
#pragma unroll
    for (int odd = 0; odd < 2; odd++) {
      if constexpr (kM == 2)
        codes_at[j][odd] =
            kPacked ? pinned(code_ring - smem_base + (m >> 1) * kRunPitch + (32 * warp + q) * 8 + 4 * (m & 1) + 32 * odd)
                    : pinned(code_ring - smem_base + 32 * (32 * warp + q + 4 * odd) + 4 * m);
      else {
        const int H = ((q >> 1) + j) & 1;
        codes_at[j][odd] =
            kPacked ? pinned(code_ring - smem_base + ((m >> 1) + 4 * H) * kRunPitch + (32 * warp + q) * 8 + 4 * (m & 1) +
                             32 * odd)
                    : pinned(code_ring - smem_base + 64 * (32 * warp + q + 4 * odd) +
                             16 * (((m >> 2) + 2 * H) ^ ((q >> 1) + 2 * odd)) + 4 * (m & 3));
      }
    }
  // Rows k and k + 2 are 8 rows apart: 64 bytes in a packed run, 8 rows of the box.
  constexpr int kRowsStep = kPacked ? 64 : 8 * kCols / 4;
  auto read_codes = [&](int slot, uint32_t (&w)[2 / kM][8]) {
#pragma unroll
    for (int j = 0; j < kWords; j++)
#pragma unroll
      for (int k = 0; k < 8; k++)
        w[j][k] = *reinterpret_cast<const uint32_t *>(smem + codes_at[j][k & 1] + slot * kCodeSlotBytes +
                                                      kRowsStep * (k >> 1));
  };
  // The address of a value: byte t of the code word (the entry) above byte t of cols (the column
  // byte: M = 1, 2 (32 H + 4 m + t); M = 2, 4 (4 m + t)), the two upper bytes the sign of that
  // column byte (zero).
  constexpr int kSteps = 8 / kM;
  uint32_t cols[kWords], sel[kSteps];
#pragma unroll
  for (int j = 0; j < kWords; j++)
    cols[j] = kM == 1 ? pinned(0x06040200u + 0x08080808u * static_cast<uint32_t>(m) + 0x40404040u * (((q >> 1) + j) & 1))
                      : pinned(0x0C080400u + 0x10101010u * static_cast<uint32_t>(m));
#pragma unroll
  for (int s = 0; s < kSteps; s++) {
    const uint32_t t = kM == 1 ? 2 * ((q + (s >> 1)) & 1) + (s >> 2) : (q + s) & 3;
    sel[s] = pinned((4 + t) | (t << 4) | ((0xC + t) << 8) | ((0xC + t) << 12));
  }
  // ---- the sums: the tensor cores add the looked-up values ----
  // A step's 8 values of a lane (its rows k = 0..7; M = 1 a 16-bit value zero-extended, M = 2 a
  // table word of both rows of x) are the A fragments of two mma.sync m16n8k16: MMA g takes rows
  // k = 4 g .. 4 g + 3 in registers a0..a3, so A's row grp holds k = 4 g and 4 g + 2 (a0, a2) and
  // row grp + 8 the odd ones (a1, a3). B holds ones and zeros: it routes A's column 2 tig + 8 j + r
  // (register a0 / a1 for j = 0, a2 / a3 for j = 1; its low or high half, x's row r) to D's column
  // 4 g + 2 j + r. D then accumulates, per row of W and of x, the values of the quarter warp's 4
  // lanes in fp32 (the products by one exact), and lane tig holds rows k = 2 tig (d0: x's row 0,
  // d1: row 1) and 2 tig + 1 (d2, d3). Two accumulator sets, even and odd steps, halve the MMAs'
  // dependent chain. A value costs a byte permute, a load and a quarter of an MMA (M = 2: an eighth
  // for both rows), where the adds took a widening and an fp32 add per value and row.
  auto is = [&](int column) { return grp == column ? 1.0f : 0.0f; };
  uint32_t route[2][2];  // B of MMA g: b0 rows (2 tig, + 1), b1 rows (2 tig + 8, + 9), column grp
#pragma unroll
  for (int g = 0; g < 2; g++) {
    route[g][0] = pinned(pack_pair(T{}, is(4 * g), is(4 * g + 1)));
    route[g][1] = pinned(pack_pair(T{}, is(4 * g + 2), is(4 * g + 3)));
  }
  float sums[2][4] = {};
  auto lookups = [&](auto buf, const uint32_t (&w)[2 / kM][8]) {
    const uint8_t *table = smem + decltype(buf)::value * 128;
#pragma unroll
    for (int s = 0; s < kSteps; s++) {
      uint32_t v[8];
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const uint32_t at = prmt(w[s % kWords][k], cols[s % kWords], sel[s]);
        v[k] = kM == 1 ? *reinterpret_cast<const uint16_t *>(table + at)
                       : *reinterpret_cast<const uint32_t *>(table + at);
      }
      const uint32_t first[4] = {v[0], v[1], v[2], v[3]}, second[4] = {v[4], v[5], v[6], v[7]};
      mma_m16n8k16(T{}, sums[s % 2], first, route[0]);
      mma_m16n8k16(T{}, sums[s % 2], second, route[1]);
    }
  };

  // ---- the pipeline ----
  // Item i uses table buffer i % 2, book slot i % 4 and code slot i % 2. The last warp (the
  // copies') fills the slots: books and x three items ahead, codes one, each slot once the kWarps
  // warps have arrived on its empty barrier (a book slot after the build that read it, a code
  // slot after the lookups). The kWarps warps build item i + 1 and look up item i between named
  // barriers of their own, one a step.
  const bool copier = warp == kWarps;
  uint32_t cw[kWords][8];
  constexpr std::integral_constant<int, 0> kEven{};
  constexpr std::integral_constant<int, 1> kOdd{};
  auto release = [&](uint32_t bar) {  // this warp is done with a slot
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  };
  if (items > 0) {
    if (threadIdx.x == 0) {
      for (int sl = 0; sl < kBookStages; sl++) {
        mbarrier_init(book_bars + 8 * sl, kBookArrivals);
        mbarrier_init(book_empty + 8 * sl, kWarps);
      }
      for (int sl = 0; sl < kCodeStages; sl++) {
        mbarrier_init(code_bars + 8 * sl, 1);
        mbarrier_init(code_empty + 8 * sl, kWarps);
      }
      fence_mbarrier_init();
    }
    __syncthreads();
    if (p.pdl) griddep_launch_dependents();
  }
  if (copier && items > 0) {
    // Under qf_ctx_set_pdl (a programmatic dependent) the weight's first copies are asked for,
    // then x's (the kernel before's output) after the wait for that kernel, which every later
    // global access of the block follows (each waits for copies asked for after it); else each
    // item's book and x together (the order measured fastest: packed 2-7% slower with x's copies
    // after the codes').
    item_t it = it0;
    for (int k = 0; k < kBookStages - 1 && k < items; k++, it = next_item(it)) {
      if (lane == 0) issue_book(it, k);
      if (!p.pdl) issue_x(it, k);
    }
    if (lane == 0) issue_codes(it0, 0);
    if (p.pdl) {
      griddep_wait();
      it = it0;
      for (int k = 0; k < kBookStages - 1 && k < items; k++, it = next_item(it)) issue_x(it, k);
    }
    // Step i: item i + 3's book and x into the slot item i - 1 left (built in step i - 2), item
    // i + 1's codes into the one item i - 1 left (looked up in step i - 1). it1, it3: items i + 1, i + 3.
    item_t it1 = next_item(it0), it2 = next_item(it1), it3 = next_item(it2);
    for (int i = 0; i + 1 < items; i++) {
      if (i + kBookStages - 1 < items) {
        const int slot = (i + kBookStages - 1) % kBookStages;
        if (i >= 1) mbarrier_wait_parity(book_empty + 8 * slot, static_cast<uint32_t>((i - 1) / kBookStages) & 1u);
        if (lane == 0) issue_book(it3, slot);
        issue_x(it3, slot);
      }
      const int slot = (i + 1) % kCodeStages;
      if (i >= 1) mbarrier_wait_parity(code_empty + 8 * slot, static_cast<uint32_t>((i - 1) / kCodeStages) & 1u);
      if (lane == 0) issue_codes(it1, slot);
      it1 = it2, it2 = it3, it3 = next_item(it3);
    }
  } else if (items > 0) {
    wait_book(0);
    build(kEven, 0);
    release(book_empty);
    auto step = [&](auto parity, int i) {
      constexpr int kP = decltype(parity)::value;
      constexpr std::integral_constant<int, 1 - kP> other{};
      // Table i complete; table buffer (i + 1) % 2 no longer read.
      named_barrier_sync(1, kThreads);
      if (i + 1 < items) {
        wait_book(i + 1);
        build(other, (i + 1) % kBookStages);
        release(book_empty + 8 * ((i + 1) % kBookStages));
      }
      wait_codes(i);
      read_codes(i % kCodeStages, cw);
      lookups(parity, cw);
      release(code_empty + 8 * (i % kCodeStages));
    };
    int i = 0;
    for (; i + 1 < items; i += 2) {
      step(kEven, i);
      step(kOdd, i + 1);
    }
    if (i < items) step(kEven, i);
  }

  // ---- a row's 8 lanes: its two quarter warps added; lane (q, h, tig), m = 4 h + tig, keeps row
  // k = 2 tig + h of the warp's rows 4 k + q (each row of x) ----
  const int h = m >> 2;
  float sum[kM];
#pragma unroll
  for (int r = 0; r < kM; r++) {
    float lo = __fadd_rn(sums[0][r], sums[1][r]), hi = __fadd_rn(sums[0][2 + r], sums[1][2 + r]);
    lo = __fadd_rn(lo, __shfl_xor_sync(0xffffffffu, lo, 4));
    hi = __fadd_rn(hi, __shfl_xor_sync(0xffffffffu, hi, 4));
    sum[r] = h ? hi : lo;
  }
  const int row = 32 * warp + 4 * (2 * tig + h) + q;  // within the unit

  // ---- split-K: leave the partials; the tile's last unit adds them all in split order ----
  if (p.splits > 1) {
    float *part = p.partials + static_cast<int64_t>(tile) * p.splits * kM * kRows;
#pragma unroll
#pragma unroll
    for (int r = 0; r < kM; r++)
      if (!copier) __stcg(part + (split * kM + r) * kRows + row, sum[r]);
    if (!vq_split_counted_last(p.counters + tile, p.splits) || copier) return;
#pragma unroll
    for (int r = 0; r < kM; r++) sum[r] = vq_split_sum<16>(part + r * kRows + row, kM * kRows, p.splits);
    if (threadIdx.x == 0) p.counters[tile] = 0;
  }
  const int n = n_base + row;
  if (!copier && n < p.N)
#pragma unroll
    for (int r = 0; r < kM; r++) vq_store_as(p.y, p.y_dtype, r * p.y_ld + n, p.scales ? sum[r] * p.scales[n] : sum[r]);
}

// ---- host: the limits, the split, the launch ----

namespace {

const char kOp[] = "qf_vq_gemm";

}  // namespace

extern "C" const char *qf_cuda_vq_lut_tiles_refusal(const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  using namespace vq_lut_tiles_detail;
  const qf_vq_format &f = w->fmt;
  if (x->rows < 1 || x->rows > 4) return "the tile-table GeMV takes M = 1 to 4";
  if (f.lattice || f.index_bits != 8 || f.vector_size != 4)
    return "the tile-table GeMV takes 8-bit indices with vector size 4";
  if (x->dtype != f.entry_dtype) return "the tile-table GeMV needs x of the codebook entries' type (fp16 or bf16)";
  if (y->dtype != QF_F16 && y->dtype != QF_BF16)
    return "the tile-table GeMV writes fp16 or bf16 y (its table values are rounded to the entries' type)";
  if (reinterpret_cast<uintptr_t>(x->data) % 4 != 0 || (x->rows > 1 && x->ld % 2 != 0))
    return "the tile-table GeMV needs x's rows aligned to 4 bytes";
  if (reinterpret_cast<uintptr_t>(w->codes) % 16 != 0 || reinterpret_cast<uintptr_t>(w->books) % 16 != 0)
    return "the tile-table GeMV needs codes and codebooks aligned to 16 bytes";
  if (!w->packed && (w->sz.row_bytes % 16 != 0 || f.residuals * w->N > INT32_MAX))
    return "the tile-table GeMV needs code rows of a multiple of 16 bytes and R * N rows below 2^31";
  if (w->K % kChunk != 0) return "the tile-table GeMV needs K a multiple of 256";
  if (f.scope_rows % kRows != 0 || f.scope_cols % kChunk != 0)
    return "the tile-table GeMV needs codebook scopes of 0 or a multiple of 256 rows and of 256 columns";
  return nullptr;
}

namespace {

template <typename T>
auto lut_tiles_kernel(bool packed, bool two) {
  return packed ? (two ? vq_gemv_lut_tiles_kernel<T, true, 2> : vq_gemv_lut_tiles_kernel<T, true, 1>)
                : (two ? vq_gemv_lut_tiles_kernel<T, false, 2> : vq_gemv_lut_tiles_kernel<T, false, 1>);
}

// One launch for one or two rows of x.
qf_status launch_rows(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                      qf_vq_mma_config *used) {
  using namespace vq_lut_tiles_detail;
  const qf_vq_format &f = w->fmt;
  const int64_t N = w->N, K = w->K;
  const bool bf16 = f.entry_dtype == QF_BF16, packed = w->packed != 0, two = x->rows == 2;
  auto kernel = bf16 ? lut_tiles_kernel<__nv_bfloat16>(packed, two) : lut_tiles_kernel<__half>(packed, two);
  const int smem = packed ? (two ? kSmemBytes<true, 2> : kSmemBytes<true, 1>) : (two ? kSmemBytes<false, 2> : kSmemBytes<false, 1>);
  static std::atomic<uint64_t> opted_in[2][2][2];
  int per_sm = 0;
  if (qf_status st = vq_blocks_per_sm(ctx, kOp, "tile-table GeMV", kernel, kBlockThreads, smem, opted_in[bf16][packed][two],
                                      &per_sm);
      st != QF_OK)
    return st;

  const int chunks = static_cast<int>(K / kChunk);
  const int tiles_n = static_cast<int>((N + kRows - 1) / kRows);
  if (splits <= 0) splits = vq_gemv_wave_splits(ctx, per_sm, tiles_n, chunks, 1);
  if (qf_status st = vq_split_check(ctx, kOp, splits, chunks, "256-column chunks", tiles_n); st != QF_OK) return st;

  // The standard layout's code matrix [R N, row bytes] in boxes of 256 rows x 64 bytes (M = 2: 32).
  // A box row that misses brings its neighbours into the L2 as the units' length along K pays
  // (H100, docs/VQ.md): 128 bytes (the next item's) for units of 8 chunks or more, none for 2 to 7
  // (each unit's next bytes there belong to others, read later), 256 bytes for one-chunk units (the
  // tile's other units read theirs at the same time).
  const int unit_chunks = (chunks + splits - 1) / splits;
  const CUtensorMapL2promotion promotion = unit_chunks >= 8   ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                           : unit_chunks >= 2 ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                                              : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  CUtensorMap tmap_codes = {};
  if (!packed)
    if (qf_status st = qf_cuda_make_tmap_bytes(ctx, kOp, &tmap_codes, "codes", w->codes, f.residuals * N, w->sz.row_bytes,
                                               w->sz.row_bytes, kChunk / 4 / (two ? 2 : 1), kRows,
                                               two ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_64B, promotion);
        st != QF_OK)
      return st;

  vq_lut_tiles_params p = {};
  vq_weight_params(p, w);
  p.x = x->data;
  p.y = y->data;
  p.x_ld = x->ld;
  p.y_ld = y->ld;
  p.y_dtype = y->dtype;
  p.N = static_cast<int>(N);
  p.chunks = chunks;
  p.residuals = f.residuals;
  p.chunks_per_book = f.scope_cols ? f.scope_cols / kChunk : chunks;
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.scope_rows = f.scope_rows;
  p.pack_tiles = qf_vq_pack_tiles(N);
  p.pack_chunks = qf_vq_pack_chunks(K / 4);
  p.tiles_n = tiles_n;
  p.splits = splits;
  p.pdl = ctx->pdl;
  if (splits > 1) {
    const size_t partial_bytes = static_cast<size_t>(tiles_n) * splits * x->rows * kRows * sizeof(float);
    if (qf_status st = vq_split_workspace(ctx, kOp, partial_bytes, &p.counters, &p.partials); st != QF_OK) return st;
  }
  if (used) {
    *used = vq_gemv_shape(1, kRows, kBlockThreads / 32, tiles_n, splits, smem);
    used->placement = QF_VQ_BOOKS_LUT;
    used->tile_m = static_cast<int>(x->rows);
    used->mma_bf16 = bf16;
  }
  // With qf_ctx_set_pdl a programmatic dependent: the first books and codes are asked for while the
  // kernel before still runs (the kernel waits for it before reading x or writing anything).
  return qf_cuda_launch(ctx, kOp, kernel, kernel, dim3(static_cast<unsigned>(tiles_n * splits)), dim3(kBlockThreads), smem,
                        tmap_codes, p);
}

}  // namespace

extern "C" qf_status qf_cuda_vq_gemv_lut_tiles_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w,
                                                    const qf_mat *y, int splits, qf_vq_mma_config *used) {
  if (const char *why = qf_cuda_vq_lut_tiles_refusal(x, w, y)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %s", kOp, why);
  if (qf_status st = vq_gemm_offset_limits(ctx, kOp, x, w, y); st != QF_OK) return st;
  if (x->rows <= 2) return launch_rows(ctx, x, w, y, splits, used);
  // M = 3 and 4: a call per pair of rows (an odd last row on the M = 1 kernel).
  return vq_gemv_row_pairs(x, y, used, [&](const qf_mat *xs, const qf_mat *ys, qf_vq_mma_config *u) {
    return launch_rows(ctx, xs, w, ys, splits, u);
  });
}
