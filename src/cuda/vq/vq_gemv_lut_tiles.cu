// VQ-GeMV at batch 1 through tables of products for codebooks scoped to tiles of the weight
// (placement QF_VQ_BOOKS_LUT; GPTVQ: one 256-entry book of 4-element vectors per 256 x 256 tile):
// y[n] = scale[n] * sum_k x[k] * W[n, k].
//
// NOTES:
// - Why: the banked GeMV (vq_gemv_banked.cu) spends about 10 instructions per vector: a byte
//   permute, an address, an 8-byte entry load, the moves that place it in the MMA's A fragment,
//   and its share of the MMA and the adds. At M = 1 a vector's contribution is entry . x-vector,
//   the same number for every row of the book's scope that selects the entry. For a chunk of 32
//   vectors (128 columns) and one book, the table T[e][j] = entry e . x's vector j (256 x 32 fp32
//   values, 32 KB) costs as many products as the 256 rows' vectors it serves, but the tensor cores
//   make it: one mma.sync m16n8k16 gives 128 table values. A vector then costs a byte permute that
//   makes the address, a 4-byte load and an add.
// - The build: rows of the MMA are (entry e', group g), 4 entries x 4 groups; its k is (group p,
//   element d) with A[(e', g)][(p, d)] = entry[e'][d] where p == g, else 0, and
//   B[(p, d)][n] = x[4 (8 p + n) + d], so D[(e', g)][n] = T[e'][8 g + n]: 4 entries by the chunk's
//   32 vectors. k is permuted (k -> p = (k % 8) / 2, d = k % 2 + 2 (k / 8)) so that a lane's A
//   registers a0..a3 are two whole entries (e' and e' + 2) or zero: the books are staged in that
//   order (16 bytes per lane slot, two slots per group of 4 entries, then 32 bytes of zeros), one
//   16-byte load per MMA: the 8 lanes whose rows meet their columns read their slot, the others
//   the zeros. Its two 8-byte stores per MMA fill 32 banks twice: conflict-free.
// - The table is [256 entries][256 bytes], two buffers side by side (bytes 0..127 and 128..255 of
//   a row), so an address is (index << 8) | column byte: one byte permute of the code word and the
//   lane's column bytes. The lanes of a step read 32 different columns: lane (q, m) (row q of 4,
//   code word m of 8 in a row's 32 bytes) reads column 4 m + (s + q) % 4 at step s, so the entry
//   row (a multiple of 64 words) never decides the bank: every lookup is one wavefront.
// - Work: a unit is 256 rows of W (8 warps of 32, inside one row scope) by a range of chunks; an
//   item is one (chunk, residual). Items are pipelined over one barrier each: while the warps look
//   up item i in one table buffer they build item i + 1's table in the other (its book staged an
//   item earlier, its x quads loaded an item earlier) and stage item i + 2's book.
// - Speed (H100, the Llama layers of GPTVQ-2 at batch 1, alternated with the banked GeMV in one
//   run): 1.02-1.25x the banked kernel, most on the short-K layers; (22016, 8192) 36 against 37.7
//   us, 49% of the copy floor, where both kernels stop whatever their instruction counts (about 7
//   a vector here, 10 there). Measured and not kept (docs/VQ.md): the code words three items ahead
//   (5-10% slower), bulk L2 prefetches of each row's next 4, 8 or 16 chunks (14-20% slower), the
//   unit's books prefetched into L2 at entry and the book entries two items ahead (3-11% slower).
// - Packed codes (qf_vq_pack_gemv, kPacked): an item's 256 rows are 4 contiguous runs of 2 KB
//   (one per 8-vector chunk of a 512-row tile), which thread 0 copies with cp.async.bulk into a
//   ring of 4 item slots, three items ahead, each slot's mbarrier counting its bytes; the slot is
//   rewritten only after the item barrier that follows its last reads. The lanes read their code
//   words from the slot (runs 2080 bytes apart: conflict-free). H100: the Llama-65B layers 1.10-1.11x
//   the standard layout ((22016, 8192) 32.3 us, 55% of the copy floor), (4096, 4096) 0.96x.
// - Split-K over blocks as in the banked GeMV: each unit leaves its 256 row sums in the workspace
//   and the tile's last unit adds them in split order (a call repeats bit for bit).
// - Limits (else QF_ERR_UNSUPPORTED with the reason; the other placements serve the call): M = 1,
//   8-bit indices, vector size 4, at most 256 entries, x of the entries' 16-bit type aligned to 8
//   bytes, codes aligned to 4 (packed: 16), K a multiple of 128, scope_rows 0 or a multiple of
//   256, scope_cols 0 or a multiple of 128.
// - Numerics: a table value is the tensor core's fp32 sum of the entry's 4 exact products; a lane
//   adds its rows' values in item order (one round-to-nearest add each), the 8 lanes of a row are
//   added in a fixed butterfly, then the split partials in split order; the row scale multiplies
//   the finished sum.
#include <atomic>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_heuristic.h"

struct vq_lut_tiles_params {
  const uint32_t *codes;  // [R, N, row_words], or packed (qf_vq_pack_gemv): [R, pack_tiles, pack_chunks, 512 x 8 bytes]
  const uint16_t *books;  // [R, n_books, entries, 4]
  const float *scales;    // [N] or NULL
  const void *x;          // [1, K], the entries' 16-bit type
  void *y;                // [1, N]
  int64_t n_books;
  int y_dtype;
  int N, chunks, residuals, entries;
  uint32_t row_words;
  int chunks_per_book;  // 128-column chunks per book along K (all of them for one book per row)
  int books_per_row, scope_rows;
  int64_t pack_tiles, pack_chunks;  // packed codes: 512-row tiles, 8-vector chunks
  int tiles_n, splits;
  float *partials;  // splits > 1: [tiles_n][splits][256]
  int *counters;    // splits > 1: [tiles_n], zero between calls
};

namespace vq_lut_tiles_detail {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kRows = kWarps * 32;         // rows of W per unit
constexpr int kChunk = 128;                // columns per item: 32 vectors of 4
constexpr int kEntries = 256;              // table rows (books of fewer entries: zero rows)
constexpr int kTableBytes = kEntries * 256;  // two 128-byte buffers per entry row
constexpr int kBookBytes = kEntries * 16;    // a staged book: 32 bytes of entries and 32 of zeros per 4 entries
constexpr int kSmemBytes = kTableBytes + 2 * kBookBytes;
// Packed codes: an item's 256 rows are 4 runs of 2 KB (one per 8-vector chunk), copied into a ring
// of 4 item slots; the runs sit 2080 bytes apart so that the lanes' words fall in 32 banks.
constexpr int kStages = 4, kRunBytes = 2048, kRunPitch = kRunBytes + 32, kSlotBytes = 4 * kRunPitch;
constexpr int kPackedSmemBytes = kSmemBytes + kStages * kSlotBytes + kStages * 8;

// prmt.b32 in its default mode (a selector nibble's bit 3 replicates the chosen byte's sign).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

}  // namespace vq_lut_tiles_detail

template <typename T, bool kPacked>
__global__ void __launch_bounds__(vq_lut_tiles_detail::kThreads, 2)
    vq_gemv_lut_tiles_kernel(const __grid_constant__ vq_lut_tiles_params p) {
  using namespace vq_lut_tiles_detail;
  // The table [256][256 bytes] (buffer b at byte 128 b of a row), then two staged books (packed
  // codes: then the ring of item slots and their mbarriers).
  extern __shared__ __align__(128) uint8_t smem[];

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int tile = static_cast<int>(blockIdx.x) / p.splits, split = static_cast<int>(blockIdx.x) % p.splits;
  const int n_base = tile * kRows;
  const int c_begin = static_cast<int>(static_cast<int64_t>(split) * p.chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(split + 1) * p.chunks / p.splits);
  const int items = (c_end - c_begin) * p.residuals;
  const int64_t code_res = static_cast<int64_t>(p.N) * p.row_words;
  const int64_t book_first = static_cast<int64_t>(p.scope_rows ? n_base / p.scope_rows : 0) * p.books_per_row;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // An item is (chunk c, residual r); the next one is (c, r + 1) or (c + 1, 0).
  // kb: the chunk's book along K, kc: the chunk's place in it.
  struct item_t {
    int c, r, kb, kc;
  };
  auto next_item = [&](item_t it) {
    if (++it.r < p.residuals) return it;
    const bool next_book = it.kc + 1 == p.chunks_per_book;
    return item_t{it.c + 1, 0, it.kb + next_book, next_book ? 0 : it.kc + 1};
  };
  const item_t it0 = {c_begin, 0, c_begin / p.chunks_per_book, c_begin % p.chunks_per_book};

  // ---- the build: lane (grp, tig) of the MMA fragments ----
  const int grp = lane >> 2, tig = lane & 3;
  const bool a_on = (grp & 3) == tig;  // rows (e', g = grp % 4) meet columns (p = tig)
  // Book stager: thread e stages entry e of the item's book (zero past the book's entries).
  auto load_entry = [&](item_t it) -> uint2 {
    if (static_cast<int>(threadIdx.x) >= p.entries) return make_uint2(0u, 0u);
    const int64_t book = static_cast<int64_t>(it.r) * p.n_books + book_first + it.kb;
    return __ldg(reinterpret_cast<const uint2 *>(p.books + (book * p.entries + threadIdx.x) * 4));
  };
  // Group e / 4 holds 16 bytes per lane slot e % 2: (e'.0-1, e'+2.0-1, e'.2-3, e'+2.2-3), the A
  // registers of the lanes whose rows are entries e' and e' + 2; then 32 bytes of zeros, which the
  // other lanes read.
  const uint32_t stage_at = static_cast<uint32_t>(64 * (threadIdx.x >> 2) + 16 * (threadIdx.x & 1) + 4 * ((threadIdx.x >> 1) & 1));
  auto stage_entry = [&](auto bbuf, uint2 e) {
    uint8_t *slot = smem + kTableBytes + decltype(bbuf)::value * kBookBytes + stage_at;
    *reinterpret_cast<uint32_t *>(slot) = e.x;
    *reinterpret_cast<uint32_t *>(slot + 8) = e.y;
  };
  // x's quad of vector 8 tig + grp of the item's chunk: the B fragment (elements 0, 1 and 2, 3).
  auto load_x = [&](item_t it) -> uint2 {
    return __ldg(reinterpret_cast<const uint2 *>(static_cast<const T *>(p.x) + it.c * kChunk + 4 * (8 * tig + grp)));
  };
  // A table into buffer `buf` from staged book `buf`: warp w builds entries 32 w .. 32 w + 31 (8
  // groups of 4); D rows grp and grp + 8 are entries e0 and e0 + 2 of a group at columns col, col + 1.
  const int e0 = grp >> 2, col = 8 * (grp & 3) + 2 * tig;
  const uint32_t a_at = smem_base + kTableBytes + 64 * 8 * warp + 16 * e0 + (a_on ? 0 : 32);
  uint8_t *const d_at = smem + (32 * warp + e0) * 256 + 4 * col;
  auto build = [&](auto buf, uint2 xq) {
    constexpr int kBuf = decltype(buf)::value;
    const uint32_t b[2] = {xq.x, xq.y};
#pragma unroll
    for (int gi = 0; gi < 8; gi++) {
      const uint4 v = ld_shared_v4(a_at + kBuf * kBookBytes + 64 * gi);
      const uint32_t a[4] = {v.x, v.y, v.z, v.w};
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_m16n8k16(T{}, d, a, b);
      *reinterpret_cast<float2 *>(d_at + 4 * gi * 256 + kBuf * 128) = make_float2(d[0], d[1]);
      *reinterpret_cast<float2 *>(d_at + (4 * gi + 2) * 256 + kBuf * 128) = make_float2(d[2], d[3]);
    }
  };

  // ---- the lookups: lane (q, m) takes code word m (vectors 4 m .. 4 m + 3) of rows 4 k + q ----
  const int q = lane >> 3, m = lane & 7;
  const uint32_t *const crow = p.codes + static_cast<int64_t>(min(n_base + 32 * warp + q, p.N - 1)) * p.row_words + m;
  uint32_t row_off[8];  // rows 4 k + q past the unit's end read the last row
#pragma unroll
  for (int k = 0; k < 8; k++)
    row_off[k] = static_cast<uint32_t>(min(n_base + 32 * warp + 4 * k + q, p.N - 1) - min(n_base + 32 * warp + q, p.N - 1)) * p.row_words;
  auto load_codes = [&](item_t it, uint32_t (&w)[8]) {
    const uint32_t *src = crow + it.r * code_res + it.c * (kChunk / 16);
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] = __ldg(src + row_off[k]);
  };
  // Packed codes: thread 0 copies an item's 4 runs into ring slot `slot`; a lane's word k is row
  // 32 w + 4 k + q's word m % 2 of run m / 2.
  const uint32_t ring = smem_base + kSmemBytes, bars = ring + kStages * kSlotBytes;
  const uint8_t *const packed_tile = reinterpret_cast<const uint8_t *>(p.codes) +
                                     ((n_base / 512) * p.pack_chunks * 4096 + ((n_base / 256) & 1) * kRunBytes);
  auto issue_codes = [&](item_t it, int slot) {
    const uint32_t bar = bars + 8 * slot;
    fence_proxy_async_shared_cta();  // the slot's reads in the step before, ahead of the copy's writes
    mbarrier_arrive_expect_tx(bar, 4 * kRunBytes);
    const uint8_t *src = packed_tile + (it.r * p.pack_tiles * p.pack_chunks + 4 * it.c) * 4096;
#pragma unroll
    for (int j = 0; j < 4; j++) cp_async_bulk_g2s(ring + slot * kSlotBytes + j * kRunPitch, src + j * 4096, kRunBytes, bar);
  };
  const uint8_t *const ring_lane = smem + kSmemBytes + (32 * warp + q) * 8 + (m >> 1) * kRunPitch + 4 * (m & 1);
  auto read_codes = [&](int i, uint32_t (&w)[8]) {
    mbarrier_wait_parity(bars + 8 * (i % kStages), static_cast<uint32_t>(i / kStages) & 1u);
    const uint8_t *src = ring_lane + (i % kStages) * kSlotBytes;
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] = *reinterpret_cast<const uint32_t *>(src + 32 * k);
  };
  // Step s reads vector 4 m + t, t = (s + q) % 4: byte t of the code word above column byte
  // 4 (4 m + t), the two upper bytes the sign of that column byte (zero).
  const uint32_t cols = 0x0C080400u + 0x10101010u * static_cast<uint32_t>(m);
  uint32_t sel[4];
#pragma unroll
  for (int s = 0; s < 4; s++) {
    const uint32_t t = static_cast<uint32_t>((s + q) & 3);
    sel[s] = (4 + t) | (t << 4) | ((0xC + t) << 8) | ((0xC + t) << 12);
  }
  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; k++) acc[k] = 0.0f;
  auto lookups = [&](auto buf, const uint32_t (&w)[8]) {
    const uint8_t *table = smem + decltype(buf)::value * 128;
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
      for (int k = 0; k < 8; k++)
        acc[k] = __fadd_rn(acc[k], *reinterpret_cast<const float *>(table + prmt(w[k], cols, sel[s])));
  };

  // ---- the pipeline: build i + 1 and look up i between barriers ----
  // Item i uses table and book buffer i % 2 and code words cw[i % 2] (packed: read from ring slot
  // i % 4 in its step); it1, it2, it3 are items i + 1, i + 2, i + 3 (the packed copy's item).
  uint32_t cw[2][8];
  uint2 xq{};
  item_t it1 = next_item(it0), it2 = next_item(it1), it3 = next_item(it2);
  constexpr std::integral_constant<int, 0> kEven{};
  constexpr std::integral_constant<int, 1> kOdd{};
  if (items > 0) {
    for (int k = static_cast<int>(threadIdx.x); k < 2 * kEntries / 4; k += kThreads)  // the zero halves
      *reinterpret_cast<uint4 *>(smem + kTableBytes + 64 * k + 32) = *reinterpret_cast<uint4 *>(smem + kTableBytes + 64 * k + 48) =
          make_uint4(0u, 0u, 0u, 0u);
    stage_entry(kEven, load_entry(it0));
    if (items > 1) stage_entry(kOdd, load_entry(it1));
    if constexpr (kPacked) {
      if (threadIdx.x == 0) {
        for (int sl = 0; sl < kStages; sl++) mbarrier_init(bars + 8 * sl, 1);
        fence_mbarrier_init();
        item_t it = it0;
        for (int k = 0; k < kStages - 1 && k < items; k++, it = next_item(it)) issue_codes(it, k);
      }
    } else {
      load_codes(it0, cw[0]);
    }
    xq = load_x(it0);
    __syncthreads();
    build(kEven, xq);
    if (items > 1) xq = load_x(it1);
  }
  auto step = [&](auto parity, int i) {
    constexpr int kP = decltype(parity)::value;
    constexpr std::integral_constant<int, 1 - kP> other{};
    __syncthreads();  // table i complete; book i + 1 staged; table buffer (i + 1) % 2 no longer read
    if constexpr (kPacked) {
      if (threadIdx.x == 0 && i + kStages - 1 < items) issue_codes(it3, (i + kStages - 1) % kStages);
    } else if (i + 1 < items) {
      load_codes(it1, cw[1 - kP]);
    }
    uint2 entry{};
    if (i + 2 < items) entry = load_entry(it2);
    const uint2 x_next = xq;
    if (i + 2 < items) xq = load_x(it2);
    if (i + 1 < items) build(other, x_next);
    if constexpr (kPacked) read_codes(i, cw[kP]);
    lookups(parity, cw[kP]);
    if (i + 2 < items) stage_entry(parity, entry);
    if constexpr (kPacked) {
      it1 = it2, it2 = it3, it3 = next_item(it3);
    } else {
      it1 = it2, it2 = next_item(it2);
    }
  };
  int i = 0;
  for (; i + 1 < items; i += 2) {
    step(kEven, i);
    step(kOdd, i + 1);
  }
  if (i < items) step(kEven, i);

  // ---- a row's 8 lanes: lane m ends with the sum of row 4 m + q of the warp's 32 ----
#pragma unroll
  for (int half = 4, n = 4; half >= 1; half >>= 1, n >>= 1) {
    const bool upper = (m & half) != 0;
#pragma unroll
    for (int j = 0; j < n; j++) {
      const float keep = upper ? acc[j + n] : acc[j], send = upper ? acc[j] : acc[j + n];
      acc[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, half));
    }
  }
  const int row = 32 * warp + 4 * m + q;  // within the unit
  float sum = acc[0];

  // ---- split-K: leave the partial; the tile's last unit adds them all in split order ----
  if (p.splits > 1) {
    float *part = p.partials + static_cast<int64_t>(tile) * p.splits * kRows;
    __stcg(part + split * kRows + row, sum);
    if (!vq_split_counted_last(p.counters + tile, p.splits)) return;
    sum = __ldcg(part + row);
    for (int other = 1; other < p.splits; other++) sum = __fadd_rn(sum, __ldcg(part + other * kRows + row));
    if (threadIdx.x == 0) p.counters[tile] = 0;
  }
  const int n = n_base + row;
  if (n < p.N) vq_store_as(p.y, p.y_dtype, n, p.scales ? sum * p.scales[n] : sum);
}

// ---- host: the limits, the split, the launch ----

namespace {

const char kOp[] = "qf_vq_gemm";

}  // namespace

extern "C" const char *qf_cuda_vq_lut_tiles_refusal(const qf_mat *x, const qf_vq_tensors *w) {
  using namespace vq_lut_tiles_detail;
  const qf_vq_format &f = w->fmt;
  if (x->rows != 1) return "the tile-table GeMV takes M = 1";
  if (f.lattice || f.index_bits != 8 || f.vector_size != 4)
    return "the tile-table GeMV takes 8-bit indices with vector size 4";
  if (w->sz.entries > kEntries) return "the tile-table GeMV holds books of at most 256 entries";
  if (x->dtype != f.entry_dtype) return "the tile-table GeMV needs x of the codebook entries' type (fp16 or bf16)";
  if (reinterpret_cast<uintptr_t>(x->data) % 8 != 0) return "the tile-table GeMV needs x aligned to 8 bytes";
  if (reinterpret_cast<uintptr_t>(w->codes) % 4 != 0 || reinterpret_cast<uintptr_t>(w->books) % 8 != 0)
    return "the tile-table GeMV needs codes aligned to 4 bytes and codebooks to 8";
  if (w->K % kChunk != 0) return "the tile-table GeMV needs K a multiple of 128";
  if (f.scope_rows % kRows != 0 || f.scope_cols % kChunk != 0)
    return "the tile-table GeMV needs codebook scopes of 0 or a multiple of 256 rows and of 128 columns";
  if (w->packed && reinterpret_cast<uintptr_t>(w->codes) % 16 != 0)
    return "the tile-table GeMV needs packed codes aligned to 16 bytes";
  return nullptr;
}

extern "C" qf_status qf_cuda_vq_gemv_lut_tiles_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w,
                                                    const qf_mat *y, int splits, qf_vq_mma_config *used) {
  using namespace vq_lut_tiles_detail;
  if (const char *why = qf_cuda_vq_lut_tiles_refusal(x, w)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %s", kOp, why);
  const qf_vq_format &f = w->fmt;
  if (qf_status st = vq_gemm_offset_limits(ctx, kOp, x, w, y); st != QF_OK) return st;
  const int64_t N = w->N, K = w->K;
  const bool bf16 = f.entry_dtype == QF_BF16;
  const bool packed = w->packed != 0;
  auto kernel = bf16 ? (packed ? vq_gemv_lut_tiles_kernel<__nv_bfloat16, true> : vq_gemv_lut_tiles_kernel<__nv_bfloat16, false>)
                     : (packed ? vq_gemv_lut_tiles_kernel<__half, true> : vq_gemv_lut_tiles_kernel<__half, false>);
  const int smem = packed ? kPackedSmemBytes : kSmemBytes;
  static std::atomic<uint64_t> opted_in[2][2];
  int per_sm = 0;
  if (qf_status st = vq_blocks_per_sm(ctx, kOp, "tile-table GeMV", kernel, kThreads, smem, opted_in[bf16][packed], &per_sm);
      st != QF_OK)
    return st;

  const int chunks = static_cast<int>(K / kChunk);
  const int tiles_n = static_cast<int>((N + kRows - 1) / kRows);
  if (splits <= 0) splits = vq_gemv_wave_splits(ctx, per_sm, tiles_n, chunks);
  if (qf_status st = vq_split_check(ctx, kOp, splits, chunks, "128-column chunks", tiles_n); st != QF_OK) return st;

  vq_lut_tiles_params p = {};
  vq_weight_params(p, w);
  p.x = x->data;
  p.y = y->data;
  p.y_dtype = y->dtype;
  p.N = static_cast<int>(N);
  p.chunks = chunks;
  p.residuals = f.residuals;
  p.entries = static_cast<int>(w->sz.entries);
  p.row_words = static_cast<uint32_t>(w->sz.row_bytes / 4);
  p.chunks_per_book = f.scope_cols ? f.scope_cols / kChunk : chunks;
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.scope_rows = f.scope_rows;
  p.pack_tiles = qf_vq_pack_tiles(N);
  p.pack_chunks = qf_vq_pack_chunks(K / 4);
  p.tiles_n = tiles_n;
  p.splits = splits;
  if (splits > 1) {
    const size_t partial_bytes = static_cast<size_t>(tiles_n) * splits * kRows * sizeof(float);
    if (qf_status st = vq_split_workspace(ctx, kOp, partial_bytes, &p.counters, &p.partials); st != QF_OK) return st;
  }
  if (used) {
    *used = vq_gemv_shape(1, kRows, kWarps, tiles_n, splits, smem);
    used->placement = QF_VQ_BOOKS_LUT;
    used->tile_m = 1;
    used->mma_bf16 = bf16;
  }
  kernel<<<static_cast<unsigned>(tiles_n * splits), kThreads, smem, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}
