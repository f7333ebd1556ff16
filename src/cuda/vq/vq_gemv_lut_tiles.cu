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
// - The build: the MMA's rows r are x's vectors, its columns n entries, its k (group p, element
//   d): A[r][(p, d)] = x[vec(r, p)][d], B[(p, d)][n] = entry[e(n)][d] where p == n / 2, else 0,
//   so D[r][n] = T[e(n)][vec(r, n / 2)]: 8 entries by 16 vectors each. k is permuted
//   (k -> p = (k % 8) / 2, d = k % 2 + 2 (k / 8)) so that a lane's B registers are its column's
//   whole entry (8 lanes, one 8-byte load of the book as it is stored) or zeros, and its A
//   registers two adjacent x quads (one 16-byte load). Two variants of A (h) take each B to all 32
//   vectors, and vec is chosen so that each 8-byte store of D (two adjacent vectors of an entry)
//   and each load of x is conflict-free.
//   (B carrying x and A the entries, as built first, needs one 16-byte load per MMA for 32 bytes
//   of book, four wavefronts: 11% slower on the Llama-65B layers.)
// - The table is [256 entries][256 bytes], two buffers side by side (bytes 0..127 and 128..255 of
//   a row), so an address is (index << 8) | column byte: one byte permute of the code word and the
//   lane's column bytes. The lanes of a step read 32 different columns: lane (q, m) (row q of 4,
//   code word m of 8 in a row's 32 bytes) reads column 4 m + (s + q) % 4 at step s, so the entry
//   row (a multiple of 64 words) never decides the bank: every lookup is one wavefront.
// - Work: a unit is 256 rows of W (8 warps of 32, inside one row scope) by a range of chunks; an
//   item is one (chunk, residual). Thread 0 copies each item's book (2 KB) and x's chunk (256
//   bytes) with cp.async.bulk into a ring of 4 item slots, three items ahead, each slot's mbarrier
//   counting its bytes; a slot is rewritten only after the item barrier that follows its last
//   reads. Items are pipelined over one barrier each: while the warps look up item i in one table
//   buffer they build item i + 1's table in the other, straight from its slot.
// - Codes: in the standard layout each lane loads its 8 code words an item ahead. Packed
//   (qf_vq_pack_gemv, kPacked): an item's 256 rows are 4 contiguous runs of 2 KB (one per 8-vector
//   chunk of a 512-row tile), copied into the item's slot with its book (runs 2080 bytes apart, so
//   the lanes' words fall in 32 banks).
// - Speed (H100, the Llama layers of GPTVQ-2 at batch 1): packed, (22016, 8192) 27.1-27.3 us, 66%
//   of the copy floor, 4.6x cuBLASLt fp16; the standard layout 34.3 us there, 1.08-1.30x the banked
//   GeMV over the layers. Nsight Compute there: 760 shared-memory wavefronts an item (930 before
//   the build was turned around) at 61% of the pipe's throughput, warps stalled on shared-memory
//   results, fixed latencies and the item barrier, issue slots 48% busy; the loop's time follows
//   its per-step instruction path (docs/VQ.md has the steps and what did not pay).
// - Split-K over blocks as in the banked GeMV: each unit leaves its 256 row sums in the workspace
//   and the tile's last unit adds them in split order (a call repeats bit for bit).
// - Limits (else QF_ERR_UNSUPPORTED with the reason; the other placements serve the call): M = 1,
//   8-bit indices, vector size 4, x of the entries' 16-bit type aligned to 16 bytes, books aligned
//   to 16, codes to 4 (packed: 16), K a multiple of 128, scope_rows 0 or a multiple of 256,
//   scope_cols 0 or a multiple of 128.
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
  int N, chunks, residuals;
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
constexpr int kRows = kWarps * 32;           // rows of W per unit
constexpr int kChunk = 128;                  // columns per item: 32 vectors of 4
constexpr int kEntries = 256;                // table rows: a book of 8-bit indices
constexpr int kTableBytes = kEntries * 256;  // two 128-byte buffers per entry row
constexpr int kBookBytes = kEntries * 8, kXBytes = kChunk * 2;
// The ring: an item slot holds the item's book and x's chunk, then (packed codes) its 256 rows'
// codes as 4 runs of 2 KB (one per 8-vector chunk), 2080 bytes apart so that the lanes' words fall
// in 32 banks. Slots are multiples of 128 bytes, so every book sits at the same bank offset.
constexpr int kStages = 4, kRunBytes = 2048, kRunPitch = kRunBytes + 32;
template <bool kPacked>
constexpr int kSlotBytes = kBookBytes + kXBytes + (kPacked ? 4 * kRunPitch : 0);
// The zeros that the build's lanes off B's diagonal read: 64 bytes past a multiple of 128, so that
// they share no bank with the 64 bytes of book that the other lanes read in the same load (both
// step 64 bytes per block of 8 entries).
constexpr int kZerosAt = kTableBytes + 64, kRingAt = kTableBytes + 384;
template <bool kPacked>
constexpr int kSmemBytes = kRingAt + kStages * kSlotBytes<kPacked> + kStages * 8;

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
  constexpr int kSlot = kSlotBytes<kPacked>;
  // The table [256][256 bytes] (buffer b at byte 128 b of a row), 256 bytes of zeros, the ring of
  // item slots, their mbarriers.
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
  const uint32_t ring = smem_base + kRingAt, bars = ring + kStages * kSlot;

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

  // ---- the ring: thread 0 copies an item's book, x's chunk and (packed) codes into its slot ----
  const uint8_t *const packed_tile = reinterpret_cast<const uint8_t *>(p.codes) +
                                     ((n_base / 512) * p.pack_chunks * 4096 + ((n_base / 256) & 1) * kRunBytes);
  auto issue = [&](item_t it, int slot) {
    const uint32_t bar = bars + 8 * slot, dst = ring + slot * kSlot;
    fence_proxy_async_shared_cta();  // the slot's reads in the steps before, ahead of the copies' writes
    mbarrier_arrive_expect_tx(bar, kBookBytes + kXBytes + (kPacked ? 4 * kRunBytes : 0));
    const int64_t book = static_cast<int64_t>(it.r) * p.n_books + book_first + it.kb;
    cp_async_bulk_g2s(dst, p.books + book * kEntries * 4, kBookBytes, bar);
    cp_async_bulk_g2s(dst + kBookBytes, static_cast<const T *>(p.x) + it.c * kChunk, kXBytes, bar);
    if constexpr (kPacked) {
      const uint8_t *src = packed_tile + (it.r * p.pack_tiles * p.pack_chunks + 4 * it.c) * 4096;
#pragma unroll
      for (int j = 0; j < 4; j++) cp_async_bulk_g2s(dst + kBookBytes + kXBytes + j * kRunPitch, src + j * 4096, kRunBytes, bar);
    }
  };
  auto wait_slot = [&](int i) { mbarrier_wait_parity(bars + 8 * (i % kStages), static_cast<uint32_t>(i / kStages) & 1u); };

  // ---- the build: lane (grp, tig) of the MMA fragments ----
  // Rows r of the MMA are x's vectors, columns n entries: A[r][(p, d)] = x[vec(r, p)][d] (dense),
  // B[(p, d)][n] = entry[e(n)][d] where p == n / 2, else 0, so D[r][n] = T[e(n)][vec(r, n / 2)].
  // A lane's B registers are its column's whole entry (the lanes with tig == grp / 2) or zeros;
  // its A registers the quads of vectors vec(grp, g) and vec(grp + 8, g) (g = tig), a pair
  // 2 c, 2 c + 1 with c = c_h(grp, g) = grp % 2 + 2 ((g + 2 (grp / 4) + h) % 4) + 8 (grp / 2 % 2):
  // one 16-byte load of x per variant h of A, and D's values of one entry and vector pair in one
  // 8-byte store. The two variants take each B to all 32 vectors; c is distinct over each half
  // warp (the stores of 16 lanes fill 32 banks) and modulo 8 over each quarter (the loads of x).
  const int grp = lane >> 2, tig = lane & 3;
  const bool b_on = (grp >> 1) == tig;
  uint8_t *const d_at = smem + (32 * warp + 2 * tig) * 256;
  auto pair_of = [&](int h) { return (grp & 1) + 2 * ((tig + 2 * (grp >> 2) + h) & 3) + 8 * ((grp >> 1) & 1); };
  const int c0 = pair_of(0), c1 = pair_of(1);
  // Table buffer `buf` of the item in `slot`: warp w builds entries 32 w .. 32 w + 31, 8 (block bk)
  // per B, each against both variants of A.
  auto build = [&](auto buf, int slot) {
    constexpr int kBuf = decltype(buf)::value;
    const uint32_t at = ring + slot * kSlot;
    const uint4 xq[2] = {ld_shared_v4(at + kBookBytes + 16 * c0), ld_shared_v4(at + kBookBytes + 16 * c1)};
    const uint32_t b_at = b_on ? at + 256 * warp + 8 * grp : smem_base + kZerosAt;
#pragma unroll
    for (int bk = 0; bk < 4; bk++) {
      const uint2 e = ld_shared_v2(b_at + 64 * bk);
      const uint32_t b[2] = {e.x, e.y};
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint32_t a[4] = {xq[h].x, xq[h].z, xq[h].y, xq[h].w};
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_m16n8k16(T{}, d, a, b);
        uint8_t *const row = d_at + 8 * bk * 256 + kBuf * 128 + 8 * (h ? c1 : c0);
        *reinterpret_cast<float2 *>(row) = make_float2(d[0], d[2]);
        *reinterpret_cast<float2 *>(row + 256) = make_float2(d[1], d[3]);
      }
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
  // Packed codes: a lane's word k is row 32 w + 4 k + q's word m % 2 of run m / 2 of the slot.
  const uint8_t *const ring_lane =
      smem + kRingAt + kBookBytes + kXBytes + (32 * warp + q) * 8 + (m >> 1) * kRunPitch + 4 * (m & 1);
  auto read_codes = [&](int slot, uint32_t (&w)[8]) {
    const uint8_t *src = ring_lane + slot * kSlot;
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
  // Item i uses table buffer i % 2 and ring slot i % 4, copied three items ahead; its code words
  // are cw[i % 2] (standard layout: loaded an item ahead; packed: read from the slot in its step).
  // it1, it2, it3 are items i + 1, i + 2, i + 3.
  uint32_t cw[2][8];
  item_t it1 = next_item(it0), it2 = next_item(it1), it3 = next_item(it2);
  constexpr std::integral_constant<int, 0> kEven{};
  constexpr std::integral_constant<int, 1> kOdd{};
  if (items > 0) {
    if (threadIdx.x < 16) *reinterpret_cast<uint4 *>(smem + kZerosAt + 16 * threadIdx.x) = make_uint4(0u, 0u, 0u, 0u);
    if (threadIdx.x == 0) {
      for (int sl = 0; sl < kStages; sl++) mbarrier_init(bars + 8 * sl, 1);
      fence_mbarrier_init();
      item_t it = it0;
      for (int k = 0; k < kStages - 1 && k < items; k++, it = next_item(it)) issue(it, k);
    }
    if constexpr (!kPacked) load_codes(it0, cw[0]);
    __syncthreads();
    wait_slot(0);
    build(kEven, 0);
  }
  auto step = [&](auto parity, int i) {
    constexpr int kP = decltype(parity)::value;
    constexpr std::integral_constant<int, 1 - kP> other{};
    __syncthreads();  // table i complete; table buffer (i + 1) % 2 and slot (i + 3) % 4 no longer read
    if (threadIdx.x == 0 && i + kStages - 1 < items) issue(it3, (i + kStages - 1) % kStages);
    if constexpr (!kPacked)
      if (i + 1 < items) load_codes(it1, cw[1 - kP]);
    if (i + 1 < items) {
      wait_slot(i + 1);
      build(other, (i + 1) % kStages);
    }
    if constexpr (kPacked) read_codes(i % kStages, cw[kP]);  // the slot waited for by the build before
    lookups(parity, cw[kP]);
    it1 = it2, it2 = it3, it3 = next_item(it3);
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
  if (x->dtype != f.entry_dtype) return "the tile-table GeMV needs x of the codebook entries' type (fp16 or bf16)";
  if (reinterpret_cast<uintptr_t>(x->data) % 16 != 0) return "the tile-table GeMV needs x aligned to 16 bytes";
  if (reinterpret_cast<uintptr_t>(w->codes) % 4 != 0 || reinterpret_cast<uintptr_t>(w->books) % 16 != 0)
    return "the tile-table GeMV needs codes aligned to 4 bytes and codebooks to 16";
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
  const int smem = packed ? kSmemBytes<true> : kSmemBytes<false>;
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
