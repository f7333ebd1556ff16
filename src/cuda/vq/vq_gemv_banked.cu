// VQ-GeMV (M of 1 to 16) with the codebook-centric dataflow and bank-private codebook copies
// (placement QF_VQ_BOOKS_BANKED): y[m, n] = sum_k x[m, k] * W[n, k], W decoded into the MMA's A
// fragments as in vq_gemm.cuh (mma.sync m16n8k16, one entry of a lane's row is its A registers
// of a k-step, the same accumulation), with its own K permutation and data placement.
//
// NOTES:
// - Why: the kernel of vq_gemm.cuh reads 8-byte entries at random indices from one copy of a book
//   in shared memory; 16 lanes over 16 bank pairs collide about 3 deep, so a warp-wide lookup
//   takes about 6 wavefronts and the lookups alone cap GPTVQ-2 near 29% of the memory floor
//   (docs/VQ.md). Here a book is stored 128 / entry_bytes times side by side: entry e's copies
//   fill the 128-byte row e, and lane l reads copy l % copies, so the lanes that share a
//   wavefront (a half warp for 8-byte entries, a quarter for 16, all 32 for 4) always hit
//   different banks: 2 wavefronts per warp-wide 8-byte lookup, the least 256 bytes can take.
// - The cost is 32 KB of shared memory per 256-entry book, so a block holds one book at a time
//   (two buffers: the next one is written while the current one is read) and all its warps work
//   on that book together: the paper's codebook-centric dataflow. A unit of work is 256 rows of
//   W (8 warps of 2 m16 tiles, inside one row scope) by a range of 256-column chunks; an item is
//   one (chunk, residual), whose entries come from one book (scope_cols a multiple of 256, or one
//   book per row). Every item stages its book (one entry per thread, loaded an item ahead and
//   written as eight 16-byte stores in a rotated order: 4 wavefronts per store instruction) and
//   the chunk's x rows (a swizzled tile, also loaded an item ahead).
// - Permuted K (a dot product may visit K in any order if both operands follow it): a lane's 4
//   logical k of a k-step map to 4 consecutive columns, a quad (as in vq_gemm.cuh), and lane t
//   owns quads 16 t to 16 t + 15 of each chunk (k-step s of sub-chunk q is quad 16 t + 4 q + s).
//   Its indices of a chunk are then 64 / vs consecutive bytes of each of its code rows (rows
//   padded to 16 bytes), loaded 16 bytes at a time an item ahead, and its x quads of a
//   sub-chunk 32 consecutive bytes of the staged tile.
// - Split-K over blocks (the global reduction): a row tile's chunks are split into `splits`
//   ranges, so that tiles x splits fill the SMs with two chunks a range at least (a range of
//   one chunk loads its book and codes with nothing to overlap them: (4096, 4096) at M = 1 ran
//   16 ranges of one chunk in 9.3 us, 8 of two in 8.8). Each unit leaves its fp32 partial in the
//   workspace and counts itself done on the tile's counter; the last one adds the partials in
//   split order (the same sums on every run), scales the rows and writes y, and puts the counter
//   back to zero. With one split the unit writes y itself.
// - Limits (else QF_ERR_UNSUPPORTED with the reason, and the other placements serve the call):
//   8-bit indices, vector size 2, 4 or 8, x of the entries' 16-bit type with 16-byte aligned
//   rows, codes 16-byte aligned, K a multiple of 256, scope_rows 0 or a multiple of 256,
//   scope_cols 0 or a multiple of 256, M <= 16. A lattice format (QuIP#-4) takes the E8P GeMV of
//   vq_gemv_e8p.cu under this placement: its pattern table's bank-private copies are its books.
// - Numerics: those of vq_gemm.cuh's fast path (exact operands; the tensor core's fp32 sum over a
//   64-column sub-chunk into a zeroed fragment, one round-to-nearest add per sub-chunk), then the
//   split partials added in split order; the row scale multiplies the finished sum.
#include <atomic>

#include "cuda/common.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_heuristic.h"

struct vq_banked_params {
  const uint32_t *codes;  // [R, N, row_words]
  const uint16_t *books;  // [R, n_books, entries, vs]
  const float *scales;    // [N] or NULL
  const void *x;          // [M, K], row pitch x_ld elements, the MMA's 16-bit type
  void *y;                // [M, N], row pitch y_ld elements
  int64_t x_ld, y_ld, n_books;
  int y_dtype;
  int M, N, chunks, residuals, entries;
  uint32_t row_words;
  int chunks_per_book;  // 256-column chunks per book along K (scope_cols / 256; all of them for one book per row)
  int book_shift;       // log2(chunks_per_book) when a power of two (31: one book along K), else -1
  int books_per_row, scope_rows;
  int tiles_n, splits;
  float *partials;  // splits > 1: [tiles_n][splits][kRowTiles * kMT][256 threads] float4
  int *counters;    // splits > 1: [tiles_n], zero between calls
};

namespace vq_banked_detail {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kRowTiles = 2;                       // m16 tiles of W per warp
constexpr int kRows = kWarps * 16 * kRowTiles;     // rows of W per unit
constexpr int kRowBytes = 128;                     // one entry's copies
constexpr int kMaxEntries = 256;
constexpr int kXRowBytes = QF_VQ_MMA_CHUNK * 2;    // one x row of a chunk (16-bit)

// w[i] by selects, without indexing the array (a runtime i would put it in local memory).
template <int N>
__device__ __forceinline__ uint32_t pick(const uint32_t (&w)[N], int i) {
  uint32_t v = w[0];
#pragma unroll
  for (int k = 1; k < N; k++) v = i == k ? w[k] : v;
  return v;
}

}  // namespace vq_banked_detail

template <int kMT, int kVS, typename T>
__global__ void __launch_bounds__(vq_banked_detail::kThreads, 2)
    vq_gemv_banked_kernel(const __grid_constant__ vq_banked_params p) {
  using namespace vq_banked_detail;
  using vq_mma_detail::byte_of;
  using entry_t = std::conditional_t<kVS == 8, uint4, std::conditional_t<kVS == 4, uint2, uint32_t>>;
  constexpr int kEntryBytes = 2 * kVS, kCopies = kRowBytes / kEntryBytes;
  constexpr int kLaneWords = 16 / kVS;  // a lane's code words per item and row: 64 columns of 8-bit indices
  constexpr int kChunkQuads = QF_VQ_MMA_CHUNK / 4;
  static_assert(kVS == 2 || kVS == 4 || kVS == 8, "vector sizes 2, 4, 8");

  // Two books of [entries][128 bytes], then two x tiles of [8 kMT rows][512 bytes].
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kXRows = 8 * kMT, kXTileBytes = kXRows * kXRowBytes;
  const int book_bytes = p.entries * kRowBytes;
  uint8_t *const x_s = smem + 2 * book_bytes;

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = static_cast<int>(blockIdx.x) / p.splits, split = static_cast<int>(blockIdx.x) % p.splits;
  const int n_base = tile * kRows;
  const int c_begin = static_cast<int>(static_cast<int64_t>(split) * p.chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(split + 1) * p.chunks / p.splits);
  const int items = (c_end - c_begin) * p.residuals;
  const int64_t code_res = static_cast<int64_t>(p.N) * p.row_words;
  const int64_t book_first = static_cast<int64_t>(p.scope_rows ? n_base / p.scope_rows : 0) * p.books_per_row;

  // ---- this lane's rows of W (16 nt + g + 8 h of the warp's 32) and of x (g of each n8 tile) ----
  const uint32_t *crow[kRowTiles][2];
#pragma unroll
  for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      crow[nt][h] = p.codes + static_cast<int64_t>(min(n_base + warp * 16 * kRowTiles + 16 * nt + g + 8 * h, p.N - 1)) * p.row_words;
  // An item is a (chunk c, residual r); the next one is (c, r + 1) or (c + 1, 0).
  struct item_t {
    int c, r;
  };
  auto next_item = [&](item_t it) { return ++it.r == p.residuals ? item_t{it.c + 1, 0} : it; };
  // x tile of a chunk: the 16-byte unit u of row m (columns 8 u to 8 u + 7) is stored at unit
  // u ^ swz(m, u), so that the 8 lanes of each quarter warp, which read units 8 t + 2 q + e of
  // rows g (t = 0..3, g = 0, 1 and so on), fall in 8 different bank quads.
  auto x_unit = [](int m, int u) { return m * kXRowBytes + (u ^ (((u >> 3) & 3) | ((m & 1) << 2))) * 16; };
  constexpr int kXUnits = (kXRows * kXRowBytes / 16 + kThreads - 1) / kThreads;  // per thread and chunk
  auto x_load = [&](item_t it, uint4 (&v)[kXUnits]) {  // thread's units of the item's chunk (rows < M)
    const int c = it.c;
#pragma unroll
    for (int k = 0; k < kXUnits; k++) {
      const int unit = static_cast<int>(threadIdx.x) + k * kThreads, m = unit / 32;
      if (m < p.M)
        v[k] = __ldg(reinterpret_cast<const uint4 *>(static_cast<const T *>(p.x) + m * p.x_ld + c * QF_VQ_MMA_CHUNK) + unit % 32);
    }
  };
  auto x_store = [&](int buf, const uint4 (&v)[kXUnits]) {
#pragma unroll
    for (int k = 0; k < kXUnits; k++) {
      const int unit = static_cast<int>(threadIdx.x) + k * kThreads, m = unit / 32;
      if (m < p.M) *reinterpret_cast<uint4 *>(x_s + buf * kXTileBytes + x_unit(m, unit % 32)) = v[k];
    }
  };
  // Rows past M stay zero in both buffers.
  for (int k = static_cast<int>(threadIdx.x); k < 2 * kXRows * 32; k += kThreads) {
    const int buf = k / (kXRows * 32), m = (k / 32) % kXRows;
    if (m >= p.M) *reinterpret_cast<uint4 *>(x_s + buf * kXTileBytes + x_unit(m, k % 32)) = make_uint4(0u, 0u, 0u, 0u);
  }

  // ---- the item's book entry and code words ----
  auto book_entry = [&](item_t it) -> entry_t {
    const int kb = p.book_shift >= 0 ? it.c >> p.book_shift : it.c / p.chunks_per_book;
    const int64_t book = static_cast<int64_t>(it.r) * p.n_books + book_first + kb;
    return reinterpret_cast<const entry_t *>(p.books + book * p.entries * kVS)[threadIdx.x];
  };
  // The entry's copies into row threadIdx.x of buffer `buf`: eight 16-byte stores, the k-th to
  // slot (k + thread) % 8, so that the eight lanes of a wavefront write eight different slots.
  auto write_book = [&](int buf, const entry_t &e) {
    uint4 v;
    if constexpr (kVS == 8) v = e;
    else if constexpr (kVS == 4) v = make_uint4(e.x, e.y, e.x, e.y);
    else v = make_uint4(e, e, e, e);
    uint8_t *row = smem + buf * book_bytes + threadIdx.x * kRowBytes;
#pragma unroll
    for (int k = 0; k < 8; k++) *reinterpret_cast<uint4 *>(row + ((k + threadIdx.x) & 7) * 16) = v;
  };
  // Lane t's 64 columns of a chunk (quads 16 t to 16 t + 15) have consecutive indices: 16 / vs
  // words of each of its rows, loaded 16 (or 8) bytes at a time.
  using codes_t = uint32_t[kRowTiles][2][kLaneWords];
  auto load_codes = [&](item_t it, codes_t &w) {
    const int c = it.c, r = it.r;
    const uint32_t wi = static_cast<uint32_t>((c * kChunkQuads + 16 * t) / kVS);  // (4 columns a quad, 4 indices a word)
#pragma unroll
    for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint32_t *src = crow[nt][h] + r * code_res + wi;
#pragma unroll
        for (int e = 0; e < kLaneWords; e += 4) {
          if constexpr (kLaneWords >= 4) {
            const uint4 v = __ldg(reinterpret_cast<const uint4 *>(src + e));
            w[nt][h][e] = v.x, w[nt][h][e + 1] = v.y, w[nt][h][e + 2] = v.z, w[nt][h][e + 3] = v.w;
          } else {
            const uint2 v = __ldg(reinterpret_cast<const uint2 *>(src + e));
            w[nt][h][e] = v.x, w[nt][h][e + 1] = v.y;
          }
        }
      }
  };

  float acc[kRowTiles][kMT][4];
  vq_zero(acc);

  const bool stager = static_cast<int>(threadIdx.x) < p.entries;
  entry_t next_entry{};
  uint4 next_x[kXUnits];
  codes_t cur, nxt;
  item_t it = {c_begin, 0}, it1 = next_item(it), it2 = next_item(it1);  // items i, i + 1, i + 2
  if (items > 0) {
    if (stager) write_book(0, book_entry(it));
    x_load(it, next_x);
    x_store(0, next_x);
    if (stager && items > 1) next_entry = book_entry(it1);
    if (items > 1) x_load(it1, next_x);
    load_codes(it, nxt);
  }
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  for (int i = 0; i < items; i++, it = it1, it1 = it2, it2 = next_item(it2)) {
    __syncthreads();  // book i is complete in buffer i % 2; buffer (i + 1) % 2 is no longer read
    if (i + 1 < items) {  // item i + 1's book and x tile, from the registers loaded an item ago
      if (stager) write_book((i + 1) & 1, next_entry);
      x_store((i + 1) & 1, next_x);
      if (stager && i + 2 < items) next_entry = book_entry(it2);
      if (i + 2 < items) x_load(it2, next_x);
    }
#pragma unroll
    for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < kLaneWords; e++) cur[nt][h][e] = nxt[nt][h][e];
    if (i + 1 < items) load_codes(it1, nxt);

    // This lane's copy of the book, and the x tile, as shared-window addresses.
    const uint32_t book = smem_base + (i & 1) * book_bytes + (lane % kCopies) * kEntryBytes;
    const uint32_t xt = smem_base + 2 * book_bytes + (i & 1) * kXTileBytes;
    auto lookup = [&](uint32_t idx) -> entry_t {
      if constexpr (kVS == 8) return ld_shared_v4(book + idx * kRowBytes);
      else if constexpr (kVS == 4) return ld_shared_v2(book + idx * kRowBytes);
      else return ld_shared_b32(book + idx * kRowBytes);
    };
    // The sub-chunks unrolled where registers allow (else ptxas spills).
    constexpr int kUnrollQ = kMT == 1 && kVS == 4 ? 4 : 1;
#pragma unroll kUnrollQ
    for (int q = 0; q < 4; q++) {
      float part[kRowTiles][kMT][4];
      vq_zero(part);
      [[maybe_unused]] uint4 e8[kRowTiles][2];
      uint4 xq[kMT][2];  // x quads 16 t + 4 q .. + 3 of the chunk, row g of each n8 tile
#pragma unroll
      for (int j = 0; j < kMT; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) xq[j][e] = ld_shared_v4(xt + x_unit(8 * j + g, 8 * t + 2 * q + e));
#pragma unroll
      for (int s = 0; s < 4; s++) {
        uint32_t b[kMT][2];
#pragma unroll
        for (int j = 0; j < kMT; j++) {
          const uint4 &v = xq[j][s >> 1];
          b[j][0] = s & 1 ? v.z : v.x, b[j][1] = s & 1 ? v.w : v.y;
        }
        const int bi = (4 * q + s) * 4 / kVS;  // the step's (first) index: byte bi of the lane's codes
#pragma unroll
        for (int nt = 0; nt < kRowTiles; nt++) {
          uint32_t a[4];
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const uint32_t(&cw)[kLaneWords] = cur[nt][h];
            if constexpr (kVS == 4) {
              const uint2 e = lookup(byte_of(pick(cw, bi >> 2), bi & 3));
              a[h] = e.x, a[2 + h] = e.y;
            } else if constexpr (kVS == 8) {  // one 16-byte entry: steps s and s + 1
              if (s % 2 == 0) e8[nt][h] = lookup(byte_of(pick(cw, bi >> 2), bi & 3));
              a[h] = s % 2 ? e8[nt][h].z : e8[nt][h].x;
              a[2 + h] = s % 2 ? e8[nt][h].w : e8[nt][h].y;
            } else {  // two 4-byte entries: vectors bi and bi + 1
              a[h] = lookup(byte_of(pick(cw, bi >> 2), bi & 3));
              a[2 + h] = lookup(byte_of(pick(cw, bi >> 2), (bi + 1) & 3));
            }
          }
#pragma unroll
          for (int j = 0; j < kMT; j++) mma_m16n8k16(T{}, part[nt][j], a, b[j]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
        for (int j = 0; j < kMT; j++)
#pragma unroll
          for (int k = 0; k < 4; k++) acc[nt][j][k] = __fadd_rn(acc[nt][j][k], part[nt][j][k]);
    }
  }

  // ---- split-K: leave the partial; the tile's last unit adds them all in split order ----
  // Lane (g, t) holds rows g, g + 8 of W (of each m16 tile) by columns 2t, 2t + 1 of each n8 tile
  // of x; only lanes with a live column write or read partials.
  if (p.splits > 1) {
    constexpr int kSlots = kRowTiles * kMT * kThreads;  // float4 per unit
    float4 *part = reinterpret_cast<float4 *>(p.partials) + static_cast<int64_t>(tile) * p.splits * kSlots;
#pragma unroll
    for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
      for (int j = 0; j < kMT; j++)
        if (8 * j + 2 * t < p.M)
          __stcg(part + static_cast<int64_t>(split) * kSlots + (nt * kMT + j) * kThreads + threadIdx.x,
                 make_float4(acc[nt][j][0], acc[nt][j][1], acc[nt][j][2], acc[nt][j][3]));
    if (!vq_split_counted_last(p.counters + tile, p.splits)) return;
#pragma unroll
    for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
      for (int j = 0; j < kMT; j++) {
        if (8 * j + 2 * t >= p.M) continue;
        for (int other = 0; other < p.splits; other++) {
          const float4 v = __ldcg(part + static_cast<int64_t>(other) * kSlots + (nt * kMT + j) * kThreads + threadIdx.x);
          if (other == 0) {
            acc[nt][j][0] = v.x, acc[nt][j][1] = v.y, acc[nt][j][2] = v.z, acc[nt][j][3] = v.w;
          } else {
            acc[nt][j][0] = __fadd_rn(acc[nt][j][0], v.x), acc[nt][j][1] = __fadd_rn(acc[nt][j][1], v.y);
            acc[nt][j][2] = __fadd_rn(acc[nt][j][2], v.z), acc[nt][j][3] = __fadd_rn(acc[nt][j][3], v.w);
          }
        }
      }
    if (threadIdx.x == 0) p.counters[tile] = 0;
  }

  // ---- y = row scale x sum ----
#pragma unroll
  for (int nt = 0; nt < kRowTiles; nt++)
#pragma unroll
    for (int j = 0; j < kMT; j++)
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int n = n_base + warp * 16 * kRowTiles + 16 * nt + g + 8 * (k >> 1), m = 8 * j + 2 * t + (k & 1);
        if (n >= p.N || m >= p.M) continue;
        const float v = p.scales ? acc[nt][j][k] * p.scales[n] : acc[nt][j][k];
        vq_store_as(p.y, p.y_dtype, m * p.y_ld + n, v);
      }
}

// ---- host: the limits, the split, the launch ----

namespace {

const char kOp[] = "qf_vq_gemm";

using banked_kernel_t = void (*)(vq_banked_params);

template <typename T>
banked_kernel_t pick_banked(int mt, int vs) {
  if (mt == 1) return vs == 2 ? vq_gemv_banked_kernel<1, 2, T> : vs == 4 ? vq_gemv_banked_kernel<1, 4, T> : vq_gemv_banked_kernel<1, 8, T>;
  return vs == 2 ? vq_gemv_banked_kernel<2, 2, T> : vs == 4 ? vq_gemv_banked_kernel<2, 4, T> : vq_gemv_banked_kernel<2, 8, T>;
}

}  // namespace

extern "C" const char *qf_cuda_vq_banked_refusal(const qf_mat *x, const qf_vq_tensors *w) {
  using namespace vq_banked_detail;
  const qf_vq_format &f = w->fmt;
  if (f.lattice) return qf_cuda_vq_e8p_refusal(x, w);
  if (x->rows > QF_VQ_GEMV_MAX_M) return "the banked GeMV takes M of 1 to 16";
  if (f.index_bits != 8 || (f.vector_size != 2 && f.vector_size != 4 && f.vector_size != 8))
    return "the banked GeMV needs 8-bit indices and vector size 2, 4 or 8";
  if (w->sz.entries > kMaxEntries) return "the banked GeMV holds books of at most 256 entries";
  if (x->dtype != f.entry_dtype) return "the banked GeMV needs x of the codebook entries' type (fp16 or bf16)";
  if (reinterpret_cast<uintptr_t>(x->data) % 16 != 0 || (x->rows > 1 && x->ld % 8 != 0))
    return "the banked GeMV needs x rows aligned to 16 bytes";
  if (w->K % QF_VQ_MMA_CHUNK != 0) return "the banked GeMV needs K a multiple of 256";
  if (reinterpret_cast<uintptr_t>(w->codes) % 16 != 0) return "the banked GeMV needs codes aligned to 16 bytes";
  if (f.scope_rows % kRows != 0 || f.scope_cols % QF_VQ_MMA_CHUNK != 0)
    return "the banked GeMV needs codebook scopes of 0 or a multiple of 256 rows and columns";
  return nullptr;
}

extern "C" qf_status qf_cuda_vq_gemv_banked_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                                 int splits, qf_vq_mma_config *used) {
  using namespace vq_banked_detail;
  if (w->fmt.lattice) return qf_cuda_vq_gemv_e8p_with(ctx, x, w, y, splits, used);
  if (const char *why = qf_cuda_vq_banked_refusal(x, w)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %s", kOp, why);
  const qf_vq_format &f = w->fmt;
  if (qf_status st = vq_gemm_offset_limits(ctx, kOp, x, w, y); st != QF_OK) return st;
  const int64_t M = x->rows, N = w->N, K = w->K;
  const int mt = M <= 8 ? 1 : 2;
  const bool bf16 = f.entry_dtype == QF_BF16;
  const banked_kernel_t kernel = bf16 ? pick_banked<__nv_bfloat16>(mt, f.vector_size) : pick_banked<__half>(mt, f.vector_size);
  const size_t smem = 2u * static_cast<size_t>(w->sz.entries) * kRowBytes + 2u * 8u * mt * kXRowBytes;
  static std::atomic<uint64_t> opted_in[2][2][3];
  const int vs_slot = f.vector_size == 2 ? 0 : f.vector_size == 4 ? 1 : 2;
  int per_sm = 0;
  if (qf_status st = vq_blocks_per_sm(ctx, kOp, "banked GeMV", kernel, kThreads, smem,
                                      opted_in[bf16][mt - 1][vs_slot], &per_sm);
      st != QF_OK)
    return st;

  const int chunks = static_cast<int>(K / QF_VQ_MMA_CHUNK);
  const int tiles_n = static_cast<int>((N + kRows - 1) / kRows);
  if (splits <= 0) splits = vq_gemv_wave_splits(ctx, per_sm, tiles_n, chunks, 2);
  if (qf_status st = vq_split_check(ctx, kOp, splits, chunks, "chunks", tiles_n); st != QF_OK) return st;

  vq_banked_params p = {};
  vq_chunked_call_params(p, x, w, y, chunks);
  p.residuals = f.residuals;
  p.entries = static_cast<int>(w->sz.entries);
  p.tiles_n = tiles_n;
  p.splits = splits;
  if (splits > 1) {
    const size_t partial_bytes = static_cast<size_t>(tiles_n) * splits * kRowTiles * mt * kThreads * sizeof(float4);
    if (qf_status st = vq_split_workspace(ctx, kOp, partial_bytes, &p.counters, &p.partials); st != QF_OK) return st;
  }
  if (used) {
    *used = vq_gemv_shape(mt, kRows, kWarps, tiles_n, splits, smem);
    used->mma_bf16 = bf16;
    used->books_bytes = smem;
  }
  kernel<<<static_cast<unsigned>(tiles_n * splits), kThreads, smem, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}
