// VQ decode attention with bank-interleaved tables (placement QF_VQ_BOOKS_BANKED): the chunk
// kernel of vq_attention.cuh for one residual of 8-bit indices and S = D / vs = 32 or 64 vectors
// per head, laid out so that no shared-memory lookup of a warp meets another lane in its bank.
// It leaves the same per-chunk partials (m, l, o~) for vq_attention_merge_kernel, or (p.write_o)
// writes o and lse itself where a unit spans the sequence or a paired block holds both chunks.
//
// NOTES:
// - A block serves one query head h (kv head g = h / group; or kG of them, below) with one or two
//   halves of 8 warps. Each half is a virtual block of the launch plan: its own run of units
//   (batch entry, chunk), code slot and barrier (named barrier 1 + half); the halves share head
//   g's V books, copied into shared memory once per block (while the first code tiles land), and
//   the table rows. For S = 32 each half has its own table; for S = 64 (64 KB) the halves share
//   one: they take chunks 2c and 2c + 1 of the same batch entries (the launcher pairs them) and
//   the block builds each table between two block-wide barriers. Two halves give 16 warps per SM
//   where one block's shared memory allows only one block.
// - Grouped query heads (kG = 2 or 4 for S = 32, 2 for S = 64): a block of one half serves query
//   heads h .. h + kG - 1 of one kv head, each with its table, so that the values phase loads and
//   converts each V entry once for all of them (GQA: 4 query heads per kv head in Llama-3). Its
//   shared memory: kG tables (32 or 64 KB each), the V books, one code slot.
// - Setup of a one-head block with S = 32 (CQ-2), or with S = 64 (CQ-4) where its halves share the
//   table: two bulk copies bring head g's K and V books as stored (raw) into the V books' and the
//   tables' places, asked for first of all (before the plan's divisions and the code boxes); each
//   thread computes its first-table values from the raw K books while the V books land, reads its
//   V entries, and after one barrier writes both into the layouts below. Grouped blocks whose
//   tables fill two 64 KB regions (4 heads of S = 32, 2 of S = 64) take raw V into the first region
//   and raw K into the second: V goes straight to its layout, then one pass over raw K stores the
//   first region's tables and holds the second's in registers until raw K is read. Elsewhere (2
//   grouped heads of S = 32, a lone S = 64 half), and for every later table: a lane reads 32-byte
//   chunks of one vector's book (4 or 8 entries, a whole sector), the 32 lanes of a warp 32
//   consecutive vectors, eight (V books) or four (tables) chunks in flight, and stores entry by
//   entry into the layouts.
// - Layouts: the score table is lut[e][col0 + j] = q-part j . K entry e of vector j (fp32, q
//   scaled by sm_scale log2(e)) in rows of 64 values (256 bytes: the two halves' tables side by
//   side for S = 32, col0 = half S; grouped heads: head i's in columns 32 (i % 2) of the (i / 2)-th
//   64 KB of rows, for S = 64 the i-th), rebuilt whenever the batch entry changes; the V books are
//   vbook[e][j] = V entry e of vector j (S = 64: vector 2j + i in column 32 i + j). Entry e of
//   every vector shares a row and vector j sits in bank j mod 32 (table) or banks 2j, 2j + 1 mod
//   32 (4-element fp16 entries), so 32 lanes that look up 32 different vectors never conflict,
//   whatever the indices. The tables start at byte 0 of the shared memory, so a table value's
//   byte offset is idx * 256 + its column's (+ 64 KB per table region of grouped heads).
// - Scores, one token per lane: a warp scores 32 tokens; at step j = 4m + r lane t takes vector
//   v_t(j) of its token, for every j a permutation of the lanes over 32 banks' columns, so the 32
//   table reads of a step fall into 32 banks. Steps 4m .. 4m + 3 take their four index bytes from
//   one 32-bit word of the code row, and one byte permute of that word and of the columns makes
//   each lookup's offset (the SASS before had four address instructions per step). S = 32 (rows
//   of 32 bytes): v_t(j) = t ^ j, word (t >> 2) ^ m, the lanes' words in 32 banks. S = 64 (rows
//   of 64 bytes, a row's two halves in banks 0-15 and 16-31): with t = 2a + b, word a ^ m and byte
//   (2b + a / 8) ^ r, i.e. v_t(j) = 4 (a ^ m) + ((2b + a / 8) ^ r): the 16 lanes of a row parity
//   read 16 different words (where t ^ j had two lanes per bank), and the columns v mod 32 of a
//   step still differ. A score is the sum of S table values in four partial sums.
// - Softmax, online per warp: each warp keeps its own running max m, per-lane sums l and
//   accumulators over its 32 tokens of every tile; the half merges its warps at the end of a unit,
//   in warp order (no atomics: a call repeats bit for bit).
// - Values, one vector per lane (two for S = 64, 2j and 2j + 1: their indices in one 16-bit
//   load): for each of the warp's tokens the lane takes the probability from shared memory (four
//   tokens per 16-byte broadcast load, where a shuffle per token was 1-3% slower), reads the
//   token's V index of its vector and the entry, and adds p * entry into fp32 accumulators (one
//   set per query head of the block).
// - Code tiles of 256 tokens (32 per warp) come by TMA (a box of the head's K indices and one of
//   its V indices) into the half's one slot, whose K and V parts have an mbarrier each: the next
//   tile's K indices are copied once every warp is done with this tile's scores, its V indices
//   once the values are done, so each copy has the other phase to land (two slots, a ring, were
//   no faster for S = 32; S = 64 has room for one per half). Head g's indices are bytes
//   g S .. g S + S - 1 of a code row: codes and rows are 16-byte aligned, as TMA needs (the
//   launcher checks).
// - Under qf_ctx_set_pdl the kernel launches as a programmatic dependent: what it reads before
//   griddepcontrol.wait is head g's codebooks only (the bulk setups' raw copies; elsewhere the V
//   books' chunks where the codes do not go first), so the kernel before may run on while they
//   come, and must not write them; q, the codes, the lengths, the workspace, o and lse come after the wait
//   (a no-op without the launch attribute). It does not let the kernel after it launch early:
//   griddepcontrol.launch_dependents at the start made chains of two CQ-4 calls at batch 8 x 4096
//   2.7% slower than without PDL, where without it every chain measured ran 1.4-5% faster (H200,
//   docs/VQ.md).
// - NaN and Inf as in vq_attention.cuh: max ignores NaN scores, a NaN score makes p, l and o NaN,
//   an Inf score gives exp2(inf - inf) = NaN, a unit without a finite score keeps m = -Inf and
//   adds nothing (weights exp2(-Inf)) or NaN to the merge.
// - Paged caches (p.block_table, the kPaged instantiations; the others carry none of it): a
//   tile's boxes are a page's rows each where pages hold fewer than 256 (box_rows = page_size, all
//   on the part's mbarrier, issued by the lanes of warp 0), else one box inside the page; a box on
//   a page outside the cache is not issued and its tokens score NaN (a mask of the K part's lost
//   boxes in shared memory, written before the part's arrival). The boxes' page lookups are issued
//   a tile ahead of their copies and their entries first used after the half barrier before the
//   copies; the page index is a multiply-high (fastdiv.h). Warp 0 waiting on the lookup, or on a
//   division, before its K wait held the half every tile: 16-row pages up to 11% slower (H200).
//   The lookup is a branch of warp 0: predicated, its arithmetic ran in every warp (CQ-2 at
//   batch 8 x 4096 on 256-row pages 4% slower).
//   Read at run time, the paging made the unpaged calls 3-22% slower; each lane looking its
//   token's page up for the mask cost paged CQ-2 at batch 8 x 4096 8%.
// - With lengths (p.kv_lens) a unit's tiles stop at its entry's last token; a chunk past it is one
//   empty tile whose copies are not issued (the mbarrier's phase completes on the thread's arrival)
//   and whose partial adds nothing; an entry with no token gets o = 0 and lse = -inf.
// - kAppend (qf_vq_attention_decode_append, the blocks set up by bulk copies: one-head and
//   grouped): the setup encodes each of the run's new tokens (an entry's token len - 1) with the
//   raw books it holds and writes the codes into the cache before any copy of that row (below,
//   "the fused append"). Where a kv head's query heads take two head tiles (CQ-4 at group 4), the
//   blocks of both encode the unit's token and write the same bytes.
#pragma once

#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/vq/vq_attention.cuh"
#include "cuda/vq/vq_nearest.cuh"
#include "formats/vq.h"

constexpr int kVqAttnBankedThreads = 2 * kVqAttnThreads;  // two halves at most

// The barrier of one half (8 warps): named barrier 1 + half.
__device__ __forceinline__ void vq_attn_half_sync(int half) {
  asm volatile("bar.sync %0, %1;" ::"r"(half + 1), "r"(kVqAttnThreads) : "memory");
}

template <int kS, int kVS, typename E, int kG = 1, bool kPaged = false, bool kPackedV = false, bool kAppend = false>
__global__ void __launch_bounds__(kG == 1 ? kVqAttnBankedThreads : kVqAttnThreads, 1)
    vq_attention_banked_kernel(const __grid_constant__ vq_attention_params p) {
  static_assert(kS == 32 || kS == 64, "one or two vectors per lane");
  static_assert(kVS == 2 || kVS == 4, "entries of 4 or 8 bytes");
  static_assert(kG == 1 || (kS == 32 && (kG == 2 || kG == 4)) || (kS == 64 && kG == 2), "the group's tables fit");
  static_assert(!kAppend || kG == 1 || (kS == 32 && kG == 4) || (kS == 64 && kG == 2), "the fused append is the bulk setups'");
  constexpr int kD = kS * kVS;        // head dim
  constexpr int kSPL = kS / 32;       // vectors per lane in the values phase
  constexpr int kEB = 2 * kVS;        // entry bytes
  constexpr int kTile = kVqAttnTile;  // 32 tokens per warp
  constexpr int kHalf = kVqAttnThreads;
  constexpr int kRow = 256;           // bytes of a table row
  constexpr int kVRow = kS * kEB;     // bytes of a V-book row
  // Whether a unit that spans the whole sequence may write o and lse itself (p.write_o, p.n_chunks
  // 1; the host's qf_vq_attn_banked_writes_o has the same rule): not in the grouped kernels of
  // S = 32, which the code made 1.7% slower (H200, batch 8 x 4096) without ever taking it there.
  constexpr bool kFusedMerge = kG == 1 || kS == 64;

  // Shared memory: the score tables (rows of 64 fp32: S = 32 gives each half, or each grouped
  // head, its own 32 columns, S = 64 one table for both halves), the V books, then per half (256-byte
  // aligned) its code slot (K rows, then V rows), the warps' probabilities and the slot's two
  // mbarriers (K, V; after the first half's, the two of the setup by bulk copies); probabilities
  // per grouped head. The warps' partials at the end of a unit take the slot's V rows (refilled
  // after the merge), and the q of a grouped block's table build the probabilities' place.
  extern __shared__ __align__(128) uint8_t smem[];
  const int half = threadIdx.x / kHalf, tid = threadIdx.x % kHalf, lane = tid & 31, warp = tid >> 5;
  uint8_t *vbook_s = smem + p.lut_bytes;                                              // [256][kS] entries
  uint8_t *own = vbook_s + p.books_bytes + half * p.half_bytes;
  uint8_t *kcodes_s = own;                                                            // [kTile][kS]
  uint8_t *vcodes_s = kcodes_s + kTile * kS;                                          // [kTile][kS]
  float *p_s = reinterpret_cast<float *>(vcodes_s + kTile * kS);                      // [kG][warps][32]
  float *red_s = reinterpret_cast<float *>(vcodes_s);                                 // [warps][kD + 2]
  float *q_s = p_s;                                                                   // [kG][kD] (kG > 1)
  static_assert(kVqAttnWarps * (kD + 2) * 4 <= kTile * kS && kD <= kTile, "aliases fit");
  const uint32_t bar_k = static_cast<uint32_t>(__cvta_generic_to_shared(p_s + kG * kTile)), bar_v = bar_k + 8;
  // Paged: the boxes of the K part's tile whose page is outside the cache (bit k: box k), written
  // by the half's warp 0 before the part's arrival, read after the wait.
  volatile uint32_t *lost_s = reinterpret_cast<uint32_t *>(p_s + kG * kTile) + 8;
  // Query head i's table (i < kG; with kG = 1 the half's): byte offset `region` from smem, in
  // columns `col0` .. col0 + kS - 1 of its 256 rows (S = 32: two tables per 64 KB of rows).
  auto table_region = [&](int i) { return kG == 1 ? 0 : (kS == 32 ? i >> 1 : i) * 256 * kRow; };  // (compile-time)
  auto table_col0 = [&](int i) { return kS == 32 ? ((kG == 1 ? half : i) & 1) * kS : 0; };
  auto lut = [&](int i, int e, int j) -> float & {  // head i's table value of entry e, vector j
    return reinterpret_cast<float *>(smem + table_region(i))[e * (kRow / 4) + table_col0(i) + j];
  };
  auto q_dot = [](const float (&q)[kVS], const float (&ent)[kVS]) {  // a q part's dot with an entry
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kVS; c++) dot = fmaf(q[c], ent[c], dot);
    return dot;
  };

  // This half's run of units: u_begin, u_begin + stride, ... below u_end. Halves that share the
  // table (S = 64, two halves; qf_vq_attn_banked_paired) take chunks 2c and 2c + 1 of the same
  // batch entries: the block's run is one of pairs of units, half h takes unit 2 pair + h.
  const bool paired = kS == 64 && p.halves == 2;
  const int h = blockIdx.y * kG, g = h / p.group;  // the block's query heads h .. h + kG - 1
  // One-head blocks of S = 32, S = 64 blocks whose halves share the table, and grouped blocks
  // whose tables fill two 64 KB regions (S = 32 with 4 heads, S = 64 with 2) set up by two bulk
  // copies of head g's raw books (below, "setup by bulk copies"), asked for first of all: for one
  // head of S = 32 raw K into the table region and raw V into a place of its own behind the V
  // books, asked for after the first tile's K part (its V part comes after the setup) and laid out
  // after the first tile's scores (kVStaged); for paired halves of S = 64 raw V into the table
  // region and raw K into the V books' place; grouped, raw V into the tables' first region and raw
  // K into their second.
  constexpr bool kGroupedBulk = (kS == 32 && kG == 4) || (kS == 64 && kG == 2);
  constexpr bool kVStaged = kS == 32 && kG == 1;
  const bool bulk_setup = kG == 1 ? kS == 32 || paired : kGroupedBulk;
  const int first_book = vq_attn_book(p, g * kS);
  const uint32_t bar_kb = bar_k - half * p.half_bytes + 16, bar_vb = bar_kb + 8;  // (after the first half's two)
  // Packed V books (kPackedV: head g's [256][S] entries already in the V books' layout, p.books[1]
  // [Hkv][256][S]) go straight into their place, and the paired S = 64 halves take raw K into the
  // table region.
  constexpr bool vpk = kPackedV;
  uint8_t *const kraw_s = kVStaged || (kG == 1 && vpk) ? smem : kG == 1 ? vbook_s : smem + 256 * kRow;
  uint8_t *const vraw_s = vpk ? vbook_s : kVStaged ? vbook_s + 256 * kVRow : smem;
  const uint32_t raw_bytes = static_cast<uint32_t>(vq_attn_book(p, g * kS + kS - 1) - first_book + 1) * 256u * kEB;
  const uint32_t v_bytes = vpk ? 256u * kVRow : raw_bytes;
  const int64_t first_elem = static_cast<int64_t>(first_book) * p.entries * kVS;
  const uint16_t *const v_src = p.books[1] + (vpk ? static_cast<int64_t>(g) * 256 * kS * kVS : first_elem);
  auto copy_raw_v = [&] { cp_async_bulk_g2s(static_cast<uint32_t>(__cvta_generic_to_shared(vraw_s)), v_src, v_bytes, bar_vb); };
  if (bulk_setup && threadIdx.x == 0) {
    mbarrier_init(bar_kb, 1), mbarrier_init(bar_vb, 1);
    fence_mbarrier_init();
    mbarrier_arrive_expect_tx(bar_kb, raw_bytes);
    mbarrier_arrive_expect_tx(bar_vb, v_bytes);
    // (one head: K first, its table is built while V lands; grouped: V first, laid out while K lands)
    if (kG > 1) copy_raw_v();
    cp_async_bulk_g2s(static_cast<uint32_t>(__cvta_generic_to_shared(kraw_s)), p.books[0] + first_elem, raw_bytes, bar_kb);
    if (kG == 1 && !kVStaged) copy_raw_v();
  }
  const int runs = paired ? p.vblocks / 2 : p.vblocks, run = paired ? blockIdx.x : blockIdx.x * p.halves + half;
  const int run_units = paired ? p.units / 2 : p.units, stride = paired ? 2 : 1;
  const int r0 = run < runs ? static_cast<int>(static_cast<int64_t>(run) * run_units / runs) : 0;
  const int r1 = run < runs ? static_cast<int>(static_cast<int64_t>(run + 1) * run_units / runs) : 0;
  const int u_begin = paired ? 2 * r0 + half : r0, u_end = paired ? 2 * r1 : r1;

  // Books are read in 32-byte chunks (kCE entries of one vector, a whole sector): the lanes of a
  // warp take 32 consecutive vectors, so each load brings 32 full sectors and each store of an
  // entry into a [256][S] layout falls into the lanes' own banks. (One entry per lane took a
  // sector for 4 or 8 bytes of it.)
  constexpr int kCE = 32 / kEB;  // entries per chunk
  const int64_t book_elems = static_cast<int64_t>(p.entries) * kVS;
  constexpr int kChunks = 256 / kCE;  // per vector
  auto load_chunks = [&](const uint16_t *book, int c0, int cstep, auto &r) {  // r: uint4[chunks][2]
#pragma unroll
    for (int u = 0; u < int(sizeof(r) / sizeof(r[0])); u++) {
      if (c0 + u * cstep >= kChunks) break;  // (more threads than a batch's chunks: a block of two halves)
      const uint4 *src = reinterpret_cast<const uint4 *>(book + (c0 + u * cstep) * kCE * kVS);
      r[u][0] = __ldg(src), r[u][1] = __ldg(src + 1);
    }
  };
  // Word w of a chunk (w < 8): entry w / (kEB / 4) of the chunk, its 32-bit part w % (kEB / 4).
  auto chunk_word = [](const uint4 (&r)[2], int w) {
    const uint4 &h = r[w / 4];
    return (w & 3) == 0 ? h.x : (w & 3) == 1 ? h.y : (w & 3) == 2 ? h.z : h.w;
  };

  // Tile t's code bytes of head g, K (kv 0) or V (kv 1): a TMA box of kTile rows (tokens) x kS
  // bytes (the head's indices) on the part's mbarrier; thread 0 of the half issues it. Rows past
  // the tile's tokens (the next batch entry's, or zeros past the cache) are never used.
  // Paged: lane l of warp 0 (l below tile t's boxes) looks its box's page up a tile ahead of the
  // box's copies: the block table's entry and the box's first row on that page. The entry is not
  // used before the half barrier that precedes the copies (box_row): there it costs a compare and
  // a multiply-add, while the load (and its index: a multiply-high, fastdiv.h) overlaps the K wait.
  struct box_ref {
    int32_t page;  // -1: no box
    uint32_t off;  // row offset on the page
  };
  const int box_shift = 31 - __clz(p.box_rows);  // (box_rows is a power of two)
  auto box_lookup = [&](const vq_attn_tile &t) -> box_ref {
    box_ref r = {-1, 0u};
    if (kPaged && warp == 0) {
      asm volatile("");  // (a branch, not predicated code: the other warps skip the lookup's arithmetic)
      if (lane < (t.count + p.box_rows - 1) >> box_shift) r.page = vq_attn_page(p, t.b, t.t0 + lane * p.box_rows, r.off);
    }
    return r;
  };
  auto box_row = [&](box_ref r) -> int64_t {  // the box's row of the codes, -1 for none or a page outside the cache
    asm volatile("" : "+r"(r.page));  // (the entry's first use stays here, after the barrier)
    return vq_attn_page_row(p, r.page, r.off);
  };
  auto stage_codes = [&](const vq_attn_tile &t, int kv, box_ref ref) {
    const uint32_t bar = kv ? bar_v : bar_k;
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(kv ? vcodes_s : kcodes_s));
    if constexpr (kPaged) {
      // Paged: a box of box_rows rows per page part of the tile's tokens (tiles start on pages'
      // boundaries, or inside pages of 256 rows or more), one per lane of warp 0 (at most 16),
      // none for a page outside the cache. The copies may land before the expected bytes are
      // counted: the phase waits for lane 0's arrival all the same.
      if (warp == 0) {
        const int64_t row = box_row(ref);
        const unsigned live = __ballot_sync(0xffffffffu, row >= 0);
        __syncwarp();  // (the first tile's: lane 0's mbarrier inits before the other lanes' copies)
        if (row >= 0)
          cp_async_bulk_tensor_2d_g2s(dst + lane * p.box_rows * kS, &p.tmap_codes[kv], bar, g * kS, static_cast<int32_t>(row));
        if (lane == 0) {
          const int n_box = (t.count + p.box_rows - 1) >> box_shift;  // (at most 16)
          if (kv == 0) *lost_s = ~live & ((1u << n_box) - 1u);
          mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(__popc(live) * p.box_rows * kS));
        }
      }
      return;
    }
    if (tid == 0) {
      if (t.count == 0) {  // a chunk past the entry's tokens: nothing to copy, the phase completes
        mbarrier_arrive(bar);
        return;
      }
      mbarrier_arrive_expect_tx(bar, kTile * kS);
      cp_async_bulk_tensor_2d_g2s(dst, &p.tmap_codes[kv], bar, g * kS, static_cast<int32_t>(t.b * p.seq_len + t.t0));
    }
  };
  // The tile after t in this half's run.
  auto advance = [&](const vq_attn_tile &t) { return t.last ? vq_attn_tile_at(p, t.unit + stride) : vq_attn_next(p, t); };

  // The run's first tile, set once the kernel before has written the lengths (griddep_wait).
  vq_attn_tile t;
  auto wait_for_inputs = [&] {
    griddep_wait();
    t = vq_attn_tile_at(p, u_begin);
  };

  // ---- the score table of a batch entry: its q parts dotted with head g's K entries ----
  // Built by the half, or by the block where the halves share it. Thread i: vector j = i % S,
  // chunks c0, c0 + step, ... (c0 = i / S), four in flight, each entry dotted with the q part of
  // every head of the block. The loads of the thread's q parts and first four chunks (for S = 64
  // in a paired block, all of them) are issued apart from the build, which then waits on nothing
  // else: at the end of a unit they overlap its merge.
  const int bt = paired ? threadIdx.x : tid, bj = bt % kS, bstep = (paired ? 2 * kHalf : kHalf) / kS;
  const uint16_t *kbook = p.books[0] + vq_attn_book(p, g * kS + bj) * book_elems;
  struct table_inputs {
    float q[kG][kVS];
    uint4 r[4][2];
  };
  auto load_table_inputs = [&](int64_t b, table_inputs &in) {
    const int64_t qrow = b * p.q_ld + static_cast<int64_t>(h) * kD;  // (the group's heads: kG kD values)
    if constexpr (kG == 1) {
#pragma unroll
      for (int c = 0; c < kVS; c++) in.q[0][c] = vq_load_as_f32(p.q, p.q_dtype, qrow + bj * kVS + c) * p.q_scale;
    } else {  // through shared memory (kG kVS loads per thread made groups of 4 on CQ-2 5% slower)
      for (int i = tid; i < kG * kD; i += kHalf) q_s[i] = vq_load_as_f32(p.q, p.q_dtype, qrow + i) * p.q_scale;
      vq_attn_half_sync(half);
#pragma unroll
      for (int hh = 0; hh < kG; hh++)
#pragma unroll
        for (int c = 0; c < kVS; c++) in.q[hh][c] = q_s[hh * kD + bj * kVS + c];
    }
    load_chunks(kbook, bt / kS, bstep, in.r);
  };
  // The dots of chunks c0, c0 + bstep, .. c0 + 3 bstep (held in r) with every head's q part.
  auto build_round = [&](const table_inputs &in, int c0) {
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
      for (int i = 0; i < kCE; i++) {
        if (c0 + u * bstep >= kChunks) break;
        float e[kVS];
#pragma unroll
        for (int c = 0; c < kVS; c++) {
          const uint32_t w = chunk_word(in.r[u], (i * kVS + c) / 2);
          e[c] = c % 2 == 0 ? vq_widen_lo(E{}, w) : vq_widen_hi(E{}, w);
        }
#pragma unroll
        for (int hh = 0; hh < kG; hh++) lut(hh, (c0 + u * bstep) * kCE + i, bj) = q_dot(in.q[hh], e);
      }
  };
  auto table_built = [&] {
    if (paired) __syncthreads();
    else vq_attn_half_sync(half);
  };
  // The table from chunk c0 on (in.r holds c0's round), four chunks in flight.
  auto build_table = [&](table_inputs &in, int c0) {
    for (;;) {
      build_round(in, c0);
      c0 += 4 * bstep;
      if (c0 >= kChunks) break;
      load_chunks(kbook, c0, bstep, in.r);
    }
    table_built();
  };

  // Vector v's column in the V books: v, or for S = 64 (v & 1) 32 + v / 2, so that lane j's vectors
  // 2j and 2j + 1 (adjacent index bytes: one 16-bit load) sit in columns j and 32 + j, bank j for
  // both.
  auto vcolumn = [](int v) { return kSPL == 2 ? (v & 1) * 32 + (v >> 1) : v; };
  // One code slot per half, its K and V parts refilled apart: the next tile's K indices land while
  // this tile's values are computed, its V indices while the next scores are.
  // With the fused append (kAppend, below) a first tile that holds its entry's new token is
  // copied after the setup has written that token's codes (`deferred`). The launcher runs the
  // append's instantiations on the bulk setups only.
  // One-head blocks of S = 32 (kVStaged) ask for the first tile's V part once their setup is done,
  // so that their raw V copy follows the K part at once: CQ-2 2% faster at batch 8, the same for
  // S = 64 and grouped blocks 0-1% slower (H200, docs/VQ.md).
  const bool append = kAppend && bulk_setup;
  bool deferred = false;
  auto stage_first = [&] {  // the run's first tile, K and V parts
    const box_ref ref = box_lookup(t);
    stage_codes(t, 0, ref), stage_codes(t, 1, ref);
  };
  auto first_codes = [&] {
    if (tid == 0) {
      mbarrier_init(bar_k, 1), mbarrier_init(bar_v, 1);
      fence_mbarrier_init();
    }
    if (u_begin < u_end) {
      deferred = append && t.count > 0 && t.t0 + t.count == t.len;
      if (kVStaged && !deferred) stage_codes(t, 0, box_lookup(t));  // (its V part: after the setup)
      else if (!deferred) stage_first();
    }
  };

  // The bulk setups' helpers: vector v's raw book (byte offset in a raw region), the vector in
  // column c of the V books (vcolumn's inverse), an entry's word, entry e of the raw K book at
  // byte offset col, and each head's q parts of vectors lane + 32 ps (ps < S / 32) for the first
  // unit's batch entry.
  constexpr int kPasses = kS / 32;
  auto raw_col = [&](int v) { return (vq_attn_book(p, g * kS + v) - first_book) * (256 * kEB); };
  auto vcol_vector = [](int c) { return qf_vq_attn_packed_vector(kS, c); };
  using word_t = std::conditional_t<kEB == 8, uint2, uint32_t>;
  auto raw_k_entry = [&](int col, int e, float (&ent)[kVS]) {
    vq_load_entry<kVS, false>(E{}, reinterpret_cast<const uint16_t *>(kraw_s + col + e * kEB), ent);
  };
  // In two steps: the loads (their bits), asked for before the first code boxes so that they do
  // not wait behind them, and the values, taken once the boxes are asked for.
  using q_bits_t = uint32_t[kG][kPasses][kVS];
  auto load_q_bits = [&](q_bits_t &qb) {
    if (u_begin >= u_end) return;
    const int64_t qrow = t.b * p.q_ld + static_cast<int64_t>(h) * kD;
#pragma unroll
    for (int i = 0; i < kG; i++)
#pragma unroll
      for (int ps = 0; ps < kPasses; ps++)
#pragma unroll
        for (int c = 0; c < kVS; c++) qb[i][ps][c] = vq_load_bits(p.q, p.q_dtype, qrow + i * kD + (lane + 32 * ps) * kVS + c);
  };
  auto q_parts = [&](const q_bits_t &qb, float (&qv)[kG][kPasses][kVS]) {
    if (u_begin >= u_end) return;
#pragma unroll
    for (int i = 0; i < kG; i++)
#pragma unroll
      for (int ps = 0; ps < kPasses; ps++)
#pragma unroll
        for (int c = 0; c < kVS; c++) qv[i][ps][c] = vq_bits_as_f32(qb[i][ps][c], p.q_dtype) * p.q_scale;
  };

  // The V books from their raw copy into their layout (block-wide, one-head blocks): warp w of the
  // block's nw takes entries w 256 / nw + k of columns lane + 32 ps.
  constexpr int kMaxPer = kS == 32 ? 256 / kVqAttnWarps : 256 / (2 * kVqAttnWarps);  // (S = 64: two halves)
  const int per = 256 / (blockDim.x / 32), bw = threadIdx.x / 32;
  auto load_vbooks = [&](word_t (&ve)[kPasses][kMaxPer]) {
    mbarrier_wait_parity(bar_vb, 0);
#pragma unroll
    for (int ps = 0; ps < kPasses; ps++) {
      const int col = raw_col(vcol_vector(lane + 32 * ps));
#pragma unroll
      for (int k = 0; k < kMaxPer; k++)
        if (k < per) ve[ps][k] = *reinterpret_cast<const word_t *>(vraw_s + col + ((bw * per + k + lane) & 255) * kEB);
    }
  };
  auto store_vbooks = [&](const word_t (&ve)[kPasses][kMaxPer]) {
#pragma unroll
    for (int ps = 0; ps < kPasses; ps++)
#pragma unroll
      for (int k = 0; k < kMaxPer; k++)
        if (k < per) *reinterpret_cast<word_t *>(vbook_s + ((bw * per + k + lane) & 255) * kVRow + (lane + 32 * ps) * kEB) = ve[ps][k];
  };
  // The same copy without holding the entries across a barrier (the raw copy and the layout in
  // places of their own), four entries in flight at a time so that a caller keeps its registers:
  // the staged layout of one-head blocks and the grouped blocks' setup.
  auto copy_vbooks = [&] {
    mbarrier_wait_parity(bar_vb, 0);
#pragma unroll
    for (int ps = 0; ps < kPasses; ps++) {
      const int col = raw_col(vcol_vector(lane + 32 * ps));
#pragma unroll 1
      for (int k0 = 0; k0 < per; k0 += 4) {
        word_t v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = *reinterpret_cast<const word_t *>(vraw_s + col + ((bw * per + k0 + k + lane) & 255) * kEB);
#pragma unroll
        for (int k = 0; k < 4; k++)
          *reinterpret_cast<word_t *>(vbook_s + ((bw * per + k0 + k + lane) & 255) * kVRow + (lane + 32 * ps) * kEB) = v[k];
      }
    }
  };
  // kVStaged: the raw V books have a place of their own, so they are laid out once the first
  // tile's scores are done (every thread of the block, once; a half without units before it
  // leaves).
  auto lay_out_staged_vbooks = [&] {
    if (vpk) {
      mbarrier_wait_parity(bar_vb, 0);  // (packed: in place as they land)
      return;
    }
    copy_vbooks();
    __syncthreads();  // the V books are in place
  };
  // fn(ps, k, e, ent) for entries e = (first + k + lane) mod 256 (k < n) of the raw K book of
  // column lane + 32 ps, each entry read once: the table builds of the bulk setups.
  auto each_raw_k_entry = [&](int n, int first, auto &&fn) {
#pragma unroll
    for (int ps = 0; ps < kPasses; ps++) {
      const int col = raw_col(lane + 32 * ps);
#pragma unroll
      for (int k = 0; k < n; k++) {
        const int e = (first + k + lane) & 255;
        float ent[kVS];
        raw_k_entry(col, e, ent);
        fn(ps, k, e, ent);
      }
    }
  };

  // ---- the fused append (kAppend: qf_vq_attention_decode_append; the blocks set up by bulk copies) ----
  // Each of the half's units that holds its entry's last token (len - 1, the step's new one) has
  // that token's K and V vectors of head g encoded here, from the books as they landed (raw K at
  // kraw_s; V raw at vraw_s, or packed in place), by qf_vq_encode_slots' rule (vq_nearest.cuh):
  // 256 / S lanes per vector, lane sub on entries sub, sub + 256 / S, ... The group's first lane
  // writes the index byte into the token's code row (the last kv head's blocks also zero the row's
  // padding) and the writes are fenced for the copy engine; the row's tile is copied after a
  // barrier that follows (the setup's, or later tiles' own). The first two such units' rows and
  // vectors are looked up and loaded at the setup's start, while the books land (new_token_at);
  // one head: K is encoded as soon as its books are in, V after the table values; grouped: V once
  // the V books are laid out (while raw K lands), then K, before the raw V books' region takes the
  // tables.
  constexpr int kEL = kHalf / kS;  // lanes per vector
  struct new_token {
    int64_t row;  // the token's code row, -1 for none (or a page outside the cache)
    float x[2][kVS];
  };
  auto holds_new = [&](int u) {  // whether unit u's chunk holds its entry's new token
    const vq_attn_tile ut = vq_attn_tile_at(p, u);
    const int64_t begin = ut.chunk * p.chunk_len;
    return ut.len > begin && ut.len <= begin + p.chunk_len;
  };
  auto next_new = [&](int u) {  // the first unit from u on that holds it, or u_end
    for (; u < u_end; u += stride)
      if (holds_new(u)) return u;
    return u_end;
  };
  auto new_token_at = [&](int u) {
    new_token n = {-1, {}};
    if (u < u_end) {
      const int64_t b = u / p.n_chunks;
      n.row = vq_attn_row(p, b, vq_attn_len(p.kv_lens, p.seq_len, b) - 1);
      const int64_t x0 = b * p.x_ld + static_cast<int64_t>(g) * kD + tid / kEL * kVS;
#pragma unroll
      for (int kv = 0; kv < 2; kv++)
#pragma unroll
        for (int c = 0; c < kVS; c++) n.x[kv][c] = vq_load_as_f32(p.x_new[kv], p.x_dtype, x0 + c);
    }
    return n;
  };
  // Vectors j of part kv of n0 and, for kN = 2, of n1 against the same entries (each entry loaded
  // once for both), from the highest index down (nearest_keep_down); a token of row -1 is scored
  // but not written.
  auto encode_some = [&](int kv, const new_token &n0, const new_token &n1, auto count) {
    constexpr int kN = decltype(count)::value;
    const int j = tid / kEL, sub = tid % kEL;
    const uint8_t *book = kv == 0 ? kraw_s + raw_col(j) : vpk ? vbook_s + vcolumn(j) * kEB : vraw_s + raw_col(j);
    const int estride = kv == 1 && vpk ? kVRow : kEB;
    float x[kN][kVS];
    int best[kN];
    float best_d[kN];
    bool nan0[kN];
#pragma unroll
    for (int i = 0; i < kN; i++) {
      best[i] = -1, best_d[i] = INFINITY, nan0[i] = false;
#pragma unroll
      for (int c = 0; c < kVS; c++) x[i][c] = (i == 0 ? n0 : n1).x[kv][c];
    }
#pragma unroll 8
    for (int q = 256 / kEL - 1; q >= 0; q--) {  // (entry 0 for the group's first lane at q = 0)
      float w[kVS];
      vq_load_entry<kVS, false>(E{}, reinterpret_cast<const uint16_t *>(book + (sub + q * kEL) * estride), w);
      nearest_step_down(w, x, kVS, sub + q * kEL, q == 0, best, best_d, nan0);
    }
#pragma unroll
    for (int o = kEL / 2; o > 0; o /= 2)
#pragma unroll
      for (int i = 0; i < kN; i++) nearest_reduce(best[i], best_d[i], o);
    const bool last_head = g == p.Hq / p.group - 1;
#pragma unroll
    for (int i = 0; i < kN; i++) {
      const int64_t row = (i == 0 ? n0 : n1).row;
      const int pick = nearest_pick(nan0[i], best[i], lane, sub);
      if (row < 0) continue;
      uint8_t *const codes = p.append_codes[kv] + row * (p.row_words * 4);
      if (sub == 0) codes[g * kS + j] = static_cast<uint8_t>(pick);
      if (last_head)  // (the last kv head's blocks: the row's padding zeroed, as qf_vq_encode leaves it)
        for (uint32_t k = (g + 1) * kS + tid; k < p.row_words * 4; k += kHalf) codes[k] = 0;
    }
  };
  auto encode_new = [&](int kv, const new_token &n0, const new_token &n1) {
    if (n1.row >= 0) encode_some(kv, n0, n1, std::integral_constant<int, 2>{});
    else if (n0.row >= 0) encode_some(kv, n0, n1, std::integral_constant<int, 1>{});
  };
  // The units past the first two that hold a new token (several batch entries' last chunks in one
  // run), looked up and encoded one at a time once both books are in.
  auto append_rest = [&](int u) {
    for (u = next_new(u); u < u_end; u = next_new(u + stride)) {
      const new_token n = new_token_at(u), none = {-1, {}};
      encode_new(0, n, none), encode_new(1, n, none);
    }
  };

  if (kG == 1 && bulk_setup) {
    // ---- setup by bulk copies: head g's K and V books as stored, then laid out in shared memory ----
    // Two bulk copies of at most S x 256 entries each, asked for before the code tiles' boxes (a
    // copy engine takes its copies in order, and boxes of 32-byte rows are slow). Each thread
    // computes its table values from the raw K books into registers; after a barrier they go to
    // the tables. S = 32 starts its first tile's scores then and lays the V books out after them
    // (kVStaged: batch 1 x 1024 1.12x faster, the other rows within 2%); paired S = 64 halves take
    // their V entries into registers while the K books are read and write both layouts after the
    // barrier. Lane l works on columns l + 32 ps (ps < S / 32) and entries (base + k + l) mod 256,
    // so that its reads of a raw book and its writes into a [256][S] layout fall into the lanes'
    // own banks. (32-byte chunks through registers, the other blocks' way, finished CQ-2's setup
    // 1.3 us later: docs/VQ.md.)
    wait_for_inputs();  // the kernel before has written q, the codes and the lengths (notes)
    q_bits_t qb;
    load_q_bits(qb);
    first_codes();
    if (kVStaged && threadIdx.x == 0) copy_raw_v();  // (needed after the first scores: behind the first K part)
    int nu0 = u_end, nu1 = u_end;  // the first two units holding a new token (kAppend)
    new_token n0 = {-1, {}}, n1 = {-1, {}};
    if constexpr (kAppend) {
      nu0 = next_new(u_begin), nu1 = nu0 < u_end ? next_new(nu0 + stride) : u_end;
      n0 = new_token_at(nu0), n1 = new_token_at(nu1);
    }
    float qv[kG][kPasses][kVS];
    q_parts(qb, qv);
    __syncthreads();  // the barriers' inits are visible

    // Table values: warp w of the table's builders (the half's 8 warps; the block's 16 where the
    // halves share the table) takes entries w 256 / warps + k of columns lane + 32 ps.
    constexpr int kTPer = kS == 32 ? 32 : 16;
    const int twarp = paired ? static_cast<int>(threadIdx.x) / 32 : warp;
    float tv[kPasses][kTPer];
    mbarrier_wait_parity(bar_kb, 0);
    if constexpr (kAppend) encode_new(0, n0, n1);
    if (u_begin < u_end)
      each_raw_k_entry(kTPer, kTPer * twarp, [&](int ps, int k, int, const float (&ent)[kVS]) { tv[ps][k] = q_dot(qv[0][ps], ent); });
    if (kAppend && nu0 < u_end) {
      mbarrier_wait_parity(bar_vb, 0);
      encode_new(1, n0, n1);
      if (nu1 < u_end) append_rest(nu1 + stride);
      fence_proxy_async_global();  // (the new codes, for the tiles' copies after the barrier below)
    }
    word_t ve[kPasses][kMaxPer];
    if (!kVStaged && !vpk) load_vbooks(ve);
    __syncthreads();  // the raw books in the tables' and V books' places are read (and the new tokens' codes written)
    if (deferred) stage_first();
    if (u_begin < u_end) {
#pragma unroll
      for (int ps = 0; ps < kPasses; ps++)
#pragma unroll
        for (int k = 0; k < kTPer; k++)
          lut(0, (kTPer * twarp + k + lane) & 255, lane + 32 * ps) = tv[ps][k];
    }
    if (!kVStaged && !vpk) store_vbooks(ve);
    __syncthreads();  // the tables are built (and without kVStaged the V books in place)
    if (u_begin >= u_end) {
      if (kVStaged || vpk) lay_out_staged_vbooks();  // (no block leaves with its V copy in flight)
      return;
    }
    if (kVStaged && !deferred) stage_codes(t, 1, box_lookup(t));  // the first tile's V part
  } else if (bulk_setup) {
    // ---- the same for a grouped block (one half of 8 warps, query heads h .. h + kG - 1) ----
    // Raw V (the first tables' region) goes straight to its layout (the V books' place is free),
    // then one pass over the raw K books (the second region) computes every head's table values:
    // those of the first region's heads are stored (raw V is read by then), the others held in
    // registers until the raw K books are read.
    if constexpr (kGroupedBulk) {
      constexpr int kLow = kS == 32 ? 2 : 1;  // heads per 64 KB region: the first region's are heads 0 .. kLow - 1
      wait_for_inputs();
      q_bits_t qb;
      load_q_bits(qb);
      first_codes();
      int nu0 = u_end, nu1 = u_end;  // the first two units holding a new token (kAppend)
      new_token n0 = {-1, {}}, n1 = {-1, {}};
      if constexpr (kAppend) {
        nu0 = next_new(u_begin), nu1 = nu0 < u_end ? next_new(nu0 + stride) : u_end;
        n0 = new_token_at(nu0), n1 = new_token_at(nu1);
      }
      float qv[kG][kPasses][kVS];
      q_parts(qb, qv);
      __syncthreads();  // the barriers' inits are visible
      if (!vpk) copy_vbooks();  // (one half: warp w takes entries 32 w + k; packed: waited for before the values)
      if (kAppend && nu0 < u_end) {  // V while the raw K books land (both whole until the barrier below)
        if (vpk) mbarrier_wait_parity(bar_vb, 0);
        encode_new(1, n0, n1);
        mbarrier_wait_parity(bar_kb, 0);
        encode_new(0, n0, n1);
        if (nu1 < u_end) append_rest(nu1 + stride);
        fence_proxy_async_global();  // (the new codes, for the tiles' copies after the barrier below)
      }
      __syncthreads();  // the raw V books are read (and the new tokens' codes written): the first region is free
      if (deferred) stage_first();
      float tv[kG - kLow][kPasses][32];  // the second region's heads
      mbarrier_wait_parity(bar_kb, 0);
      if (u_begin < u_end)
        each_raw_k_entry(32, 32 * warp, [&](int ps, int k, int e, const float (&ent)[kVS]) {
#pragma unroll
          for (int i = 0; i < kG; i++) {
            const float dot = q_dot(qv[i][ps], ent);
            if (i < kLow) lut(i, e, lane + 32 * ps) = dot;
            else tv[i - kLow][ps][k] = dot;
          }
        });
      __syncthreads();  // the raw K books are read: the second region is free
      if (u_begin < u_end) {
#pragma unroll
        for (int i = kLow; i < kG; i++)
#pragma unroll
          for (int ps = 0; ps < kPasses; ps++)
#pragma unroll
            for (int k = 0; k < 32; k++)
              lut(i, (32 * warp + k + lane) & 255, lane + 32 * ps) = tv[i - kLow][ps][k];
      }
      __syncthreads();  // the tables are built
      if (u_begin >= u_end) {
        if (vpk) mbarrier_wait_parity(bar_vb, 0);  // (no block leaves with its V copy in flight)
        return;
      }
    }
  } else {
    // ---- head g's V books, interleaved by vector (the whole block, while the first tile lands) ----
    // One pass: at most 2048 chunks, eight per thread at 256 threads. With one query head per block
    // their loads and those of the first table's inputs go out before the first tile's code copies,
    // so that they do not queue behind the codes of every block starting at once (the grouped CQ-4
    // kernel at batch 8 was 5% slower that way and keeps the codes first).
    table_inputs first;
    {
      static_assert(kChunks * kS <= 8 * kVqAttnThreads, "one pass of eight chunks per thread");
      const int j = threadIdx.x % kS, cstep = blockDim.x / kS, c0 = threadIdx.x / kS;
      const uint16_t *book = p.books[1] + vq_attn_book(p, g * kS + j) * book_elems;
      constexpr bool kCodesFirst = kG > 1;
      uint4 r[8][2];  // (nothing else is live yet)
      if (kCodesFirst) {
        wait_for_inputs();
        first_codes();
      }
      // Packed V books: 16-byte units k blockDim + thread of the head's image, as they are.
      constexpr int kUnits = 256 * kVRow / 16;
      static_assert(kUnits <= 16 * kVqAttnThreads, "sixteen units per thread at most");
      const uint4 *packed = reinterpret_cast<const uint4 *>(v_src);
      if (vpk) {
#pragma unroll
        for (int k = 0; k < 16; k++)
          if (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x) < kUnits)
            r[k / 2][k % 2] = __ldg(packed + k * blockDim.x + threadIdx.x);
      } else {
        load_chunks(book, c0, cstep, r);
      }
      if (!kCodesFirst) wait_for_inputs();
      if (u_begin < u_end) load_table_inputs(t.b, first);
      if (!kCodesFirst) first_codes();
      if (vpk) {
#pragma unroll
        for (int k = 0; k < 16; k++)
          if (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x) < kUnits)
            reinterpret_cast<uint4 *>(vbook_s)[k * blockDim.x + threadIdx.x] = r[k / 2][k % 2];
      }
#pragma unroll
      for (int u = 0; u < 8 && !vpk; u++)
#pragma unroll
        for (int i = 0; i < kCE; i++) {
          if (c0 + u * cstep >= kChunks) break;
          uint8_t *dst = vbook_s + (((c0 + u * cstep) * kCE + i) * kS + vcolumn(j)) * kEB;
          if constexpr (kEB == 8)
            *reinterpret_cast<uint2 *>(dst) = make_uint2(chunk_word(r[u], 2 * i), chunk_word(r[u], 2 * i + 1));
          else
            *reinterpret_cast<uint32_t *>(dst) = chunk_word(r[u], i);
        }
    }
    // The first table's second round of chunks, requested before the barrier rather than after the
    // first round's dots (one L2 round trip less before the first tile). Not for S = 64, whose
    // 64-vector kernels spill with it.
    const int fc0 = bt / kS, fc1 = fc0 + 4 * bstep;
    const bool ahead_round = kS == 32 && fc1 < kChunks;  // (for every thread or none)
    uint4 ahead[4][2];
    if (u_begin < u_end && ahead_round) load_chunks(kbook, fc1, bstep, ahead);
    __syncthreads();  // the V books are in place
    if (u_begin >= u_end) return;  // (a half that takes no barrier with the other)
    if (ahead_round) {
      build_round(first, fc0);
#pragma unroll
      for (int u = 0; u < 4; u++) first.r[u][0] = ahead[u][0], first.r[u][1] = ahead[u][1];
      build_table(first, fc1);
    } else {
      build_table(first, fc0);
    }
  }

  float m[kG], l[kG];  // per query head: this warp's running max (log2 units) and this lane's sum of p
  float acc[kG][kSPL][kVS];
#pragma unroll
  for (int i = 0; i < kG; i++) m[i] = -INFINITY, l[i] = 0.0f;
  vq_zero(acc);

  uint32_t phase = 0u;  // parity of the K and V parts' next completion
  bool vbooks_ready = false;  // (kVStaged, or packed V books by a bulk copy)
  const int tok0 = warp * 32;  // this warp's tokens of a tile
  while (t.unit < u_end) {
    const vq_attn_tile next = advance(t);
    const bool more = next.unit < u_end;
    const int n = min(32, t.count - tok0);  // this warp's tokens of the tile
    float pr[kG];  // the lane's token's probability, per query head
    const box_ref next_ref = more ? box_lookup(next) : box_ref{-1, 0u};  // (paged: the next tile's boxes, looked up a tile ahead)
    mbarrier_wait_parity(bar_k, phase);  // the tile's K indices landed
    // Paged: whether the lane's token is on a page outside the cache (its box's bit of the mask).
    const bool lost = kPaged && lane < n && ((*lost_s >> ((tok0 + lane) >> box_shift)) & 1u);
    if (n > 0) {
      // ---- scores: lane t, its token's vector v_t(j) at step j = 4 m + r (the notes) ----
      // The four indices of steps 4 m .. 4 m + 3 are the bytes v_t(j) & 3 of word v_t(j) >> 2 =
      // w_t ^ m of the token's code row (one load, its 32 lanes in 32 banks), and the table value
      // of step j sits at byte offset idx 256 + c_j from its table's region, c_j = 4 (col0 +
      // v_t(j)) < 256: one byte permute of the word and of a register holding c_j, c_j+1 and two
      // zero bytes is that offset (one per column parity of the block's tables: grouped heads i
      // and i + 2 share it, for S = 64 all of them).
      // c_(4m + r) = c_r ^ 16 m, since 16 m only touches the bits of v_t(j) above 2.
      // v_t(4 m + r) = 4 (w_t ^ m) + (b_t ^ r): S = 32 w_t = t / 4, b_t = t % 4 (so v_t(j) = t ^ j);
      // S = 64 w_t = a, b_t = 2b + a / 8.
      const uint32_t w_t = kS == 32 ? lane >> 2 : lane >> 1;
      const uint32_t b_t = kS == 32 ? lane & 3 : 2 * (lane & 1) + (lane >> 4);
      auto vec = [&](int r) { return 4 * w_t + (b_t ^ r); };  // v_t(r), r < 4
      const uint32_t kw = static_cast<uint32_t>(kcodes_s - smem) + (tok0 + lane) * kS + 4 * w_t;
      constexpr int kPar = kG == 1 || kS == 64 ? 1 : 2;  // column parities of the block's tables
      uint32_t c01[kPar], c23[kPar];
#pragma unroll
      for (int q = 0; q < kPar; q++) {
        auto col = [&](int r) { return 4u * static_cast<uint32_t>(table_col0(q) + vec(r)); };
        c01[q] = col(0) | col(1) << 8, c23[q] = col(2) | col(3) << 8;
      }
      uint32_t sel[4];  // result bytes: c_j, the index, two zeros
#pragma unroll
      for (int r = 0; r < 4; r++) sel[r] = 0x7600u | (b_t ^ r) << 4 | (4u + (r & 1));
      float a[kG][4];
#pragma unroll
      for (int i = 0; i < kG; i++) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.0f;
#pragma unroll
      for (int mi = 0; mi < kS / 4; mi++) {
        const uint32_t w = *reinterpret_cast<const uint32_t *>(smem + (kw ^ (4u * mi)));
#pragma unroll
        for (int q = 0; q < kPar; q++) {
          const uint32_t lo = c01[q] ^ (16u * mi * 0x0101u), hi = c23[q] ^ (16u * mi * 0x0101u);
#pragma unroll
          for (int r = 0; r < 4; r++) {
            const uint32_t off = __byte_perm(w, r < 2 ? lo : hi, sel[r]);
#pragma unroll
            for (int i = q; i < kG; i += kPar) a[i][r] += *reinterpret_cast<const float *>(smem + table_region(i) + off);
          }
        }
      }

      // ---- online softmax over the warp's tokens, per query head (NaN for a token whose page is
      // outside the cache) ----
#pragma unroll
      for (int i = 0; i < kG; i++) {
        const float si = lane >= n ? -INFINITY : lost ? NAN : (a[i][0] + a[i][1]) + (a[i][2] + a[i][3]);
        float mx = si;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
        const float m_new = fmaxf(m[i], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no finite score yet: p = exp2(s) is 0 or NaN
        const float corr = exp2f(m[i] - m_use);
        pr[i] = exp2f(si - m_use);
        l[i] = l[i] * corr + pr[i];
        m[i] = m_new;
#pragma unroll
        for (int v = 0; v < kSPL; v++)
#pragma unroll
          for (int c = 0; c < kVS; c++) acc[i][v][c] *= corr;
      }
    }
    vq_attn_half_sync(half);  // every warp is done with the K indices
    if (more) stage_codes(next, 0, next_ref);
    if constexpr (kVStaged) {
      if (!vbooks_ready) lay_out_staged_vbooks(), vbooks_ready = true;
    } else {
      if (!vbooks_ready && vpk && bulk_setup) mbarrier_wait_parity(bar_vb, 0);  // (packed: in place as they land)
      vbooks_ready = true;
    }
    mbarrier_wait_parity(bar_v, phase);  // the tile's V indices landed
    phase ^= 1u;

    if (n > 0) {
      // ---- values: lane j's vector j (S = 32) or vectors 2j and 2j + 1 (S = 64) of each token ----
      // The warp's probabilities through shared memory: four per 16-byte broadcast load. Each
      // entry is loaded once for the block's query heads.
      float *pw = p_s + warp * 32;
#pragma unroll
      for (int i = 0; i < kG; i++) pw[i * kTile + lane] = pr[i];
      __syncwarp();
      const uint8_t *vr = vcodes_s + tok0 * kS + kSPL * lane;
      uint32_t vcol[kSPL];  // byte offset of entry 0 of the lane's vectors kSPL lane + i: entry e at vcol + e kVRow
#pragma unroll
      for (int i = 0; i < kSPL; i++) {
        vcol[i] = static_cast<uint32_t>(vbook_s - smem) + vcolumn(kSPL * lane + i) * kEB;
        asm("" : "+r"(vcol[i]));  // one shift-add per entry address, not the compiler's (idx S + lane) kEB + base
      }
      auto value = [&](int k, const float (&pk)[kG]) {
#pragma unroll
        for (int i = 0; i < kSPL; i++) {
          float e[kVS];
          uint32_t off;
          if constexpr (kSPL == 2) {  // the two indices in one load; vcol < 2^24 and its byte 1 is 0, kVRow 256
            static_assert(kVRow == 256, "an index times kVRow is byte 1");
            off = __byte_perm(*reinterpret_cast<const uint16_t *>(vr + k * kS), vcol[i], i == 0 ? 0x7604u : 0x7614u);
          } else {
            off = vcol[i] + vr[k * kS] * kVRow;
          }
          vq_load_entry<kVS, false>(E{}, reinterpret_cast<const uint16_t *>(smem + off), e);
#pragma unroll
          for (int hh = 0; hh < kG; hh++)
#pragma unroll
            for (int c = 0; c < kVS; c++) acc[hh][i][c] = fmaf(pk[hh], e[c], acc[hh][i][c]);
        }
      };
      if (n == 32) {  // a whole warp of tokens: unrolled, every load in flight
#pragma unroll
        for (int k = 0; k < 32; k += 4) {
          float4 p4[kG];
#pragma unroll
          for (int i = 0; i < kG; i++) p4[i] = *reinterpret_cast<const float4 *>(pw + i * kTile + k);
          float pk[4][kG];
#pragma unroll
          for (int i = 0; i < kG; i++) pk[0][i] = p4[i].x, pk[1][i] = p4[i].y, pk[2][i] = p4[i].z, pk[3][i] = p4[i].w;
          value(k, pk[0]), value(k + 1, pk[1]), value(k + 2, pk[2]), value(k + 3, pk[3]);
        }
      } else {
        for (int k = 0; k < n; k++) {
          float pk[kG];
#pragma unroll
          for (int i = 0; i < kG; i++) pk[i] = pw[i * kTile + k];
          value(k, pk);
        }
      }
    }
    vq_attn_half_sync(half);  // every warp is done with the V indices and its probabilities

    // The next unit's table inputs where it starts a batch entry: requested before the merge,
    // built after it.
    const bool rebuild = t.last && more && next.b != t.b;
    table_inputs in;
    if (rebuild) load_table_inputs(next.b, in);

    // ---- end of a unit: per query head, the warps' (m, l, o~) merged in warp order into the
    // unit's partial ----
    if (t.last) {
#pragma unroll
      for (int hh = 0; hh < kG; hh++) {
        float lh = l[hh];
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) lh += __shfl_xor_sync(0xffffffffu, lh, d);
        float *mine = red_s + warp * (kD + 2);
#pragma unroll
        for (int i = 0; i < kSPL; i++)
#pragma unroll
          for (int c = 0; c < kVS; c++) mine[(kSPL * lane + i) * kVS + c] = acc[hh][i][c];
        if (lane == 0) mine[kD] = m[hh], mine[kD + 1] = lh;
        vq_attn_half_sync(half);
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kVqAttnWarps; w++) M = fmaxf(M, red_s[w * (kD + 2) + kD]);
        const float M_use = M == -INFINITY ? 0.0f : M;
        // The warps' sums of column d (d = kD: of p), weighted by exp2(m_w - M), in warp order.
        auto warp_sum = [&](int d) {
          float sum = 0.0f;
#pragma unroll
          for (int w = 0; w < kVqAttnWarps; w++) sum = fmaf(exp2f(red_s[w * (kD + 2) + kD] - M_use), red_s[w * (kD + 2) + d + (d == kD)], sum);
          return sum;
        };
        const int64_t bh = t.b * p.Hq + h + hh;
        const int64_t orow = t.b * p.o_ld + static_cast<int64_t>(h + hh) * kD;  // (b, h + hh)'s o
        auto store_o = [&](int d, float v) { vq_store_as(p.o, p.o_dtype, orow + d, v); };
        if (kFusedMerge && p.write_o && p.n_chunks == 1) {
          // The unit is the whole sequence: o and lse here, the merge of its one chunk.
          const float l_sum = warp_sum(kD);
          const float lse = vq_attn_merge(
              t.len == 0, 1, [&](int) { return M; }, [&](int) { return l_sum; }, [&](int, int d) { return warp_sum(d); }, tid, kHalf,
              kD, store_o);
          if (tid == 0) p.lse[bh] = lse;
        } else if (kS == 64 && kG == 1 && p.write_o && paired && p.n_chunks == 2) {
          // The halves hold chunks 0 and 1 of (b, h): each leaves its partial (o~, l, M) in its
          // probabilities' place, and half 0 merges the two.
          static_assert(kVqAttnWarps * 32 >= kD + 2, "a partial fits the probabilities' place");
          for (int d = tid; d < kD + 1; d += kHalf) p_s[d] = warp_sum(d);
          if (tid == 0) p_s[kD + 1] = M;
          __syncthreads();
          if (half == 0) {
            auto chunk = [&](int c) { return reinterpret_cast<const float *>(reinterpret_cast<const uint8_t *>(p_s) + c * p.half_bytes); };
            const float lse = vq_attn_merge(
                t.len == 0, 2, [&](int c) { return chunk(c)[kD + 1]; }, [&](int c) { return chunk(c)[kD]; },
                [&](int c, int d) { return chunk(c)[d]; }, tid, kHalf, kD, store_o);
            if (tid == 0) p.lse[bh] = lse;
          }
          __syncthreads();  // (the partials' place takes the next tile's probabilities)
        } else {
          const int64_t part = bh * p.n_chunks + t.chunk;
          for (int d = tid; d < kD + 1; d += kHalf) {  // d = kD: the sum of p
            const float sum = warp_sum(d);
            if (d < kD) p.part_o[part * kD + d] = sum;
            else p.part_ml[part * 2] = M, p.part_ml[part * 2 + 1] = sum;
          }
        }
        m[hh] = -INFINITY, l[hh] = 0.0f;
        fence_proxy_async_shared_cta();  // the partials' accesses before the next head's, or the V rows' refill
        vq_attn_half_sync(half);
      }
      vq_zero(acc);
    }
    if (more) stage_codes(next, 1, next_ref);
    if (rebuild) {
      if (paired) __syncthreads();  // both halves are done with the last table
      build_table(in, bt / kS);
    }
    t = next;
  }
}
