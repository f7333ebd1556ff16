// VQ-GeMV and VQ-GeMM: y[m, n] = sum_k x[m, k] * W[n, k] on the tensor cores (mma.sync m16n8k16,
// fp32 accumulators), W [N, K] vector-quantized (qfuse.h, "Vector quantization") and decoded
// straight into the MMA's A fragments (the VQ-LLM paper's register-level fusion):
// W[n, j * vs + c] = scale[n] * sum_r entry_r(book(n, j), index_r(n, j))[c].
//
// NOTES:
// - Roles: A (16 x 16) is 16 rows of W by 16 columns of K, B (16 x 8) those columns of 8 rows
//   of x, C (16 x 8) = y^T. A warp owns 16 rows of W by 8 kMT rows of x (kMT = 1, 2: the GeMV;
//   4: the GeMM). A block's 8 warps form 8 / warps_k row groups of warps_k warps that split K by
//   chunks of 256 columns (warp wk of a group: chunks wk, wk + warps_k, ...): warps_k = 8 gives
//   small N work for every SM, warps_k = 1 lets 8 row groups share each x fragment through L1
//   (the heuristic takes the fewest that still fill the SMs). At the end each warp leaves its C
//   fragments in shared memory and the block adds a group's in K order, scales the rows and
//   writes y. No atomics: a call repeats bit for bit.
// - Permuted K. A dot product may visit K in any order if A and B follow the same permutation.
//   In the m16n8k16 layout lane (g = lane / 4, t = lane % 4) holds A's k columns {2t, 2t + 1,
//   2t + 8, 2t + 9} of rows g and g + 8, and B's same k rows of column g. We map those 4 logical
//   columns to 4 consecutive physical columns, a "quad" (a0 a1 | a4 a5 = elements 0 1 | 2 3): so
//   one 8-byte entry (vs = 4) is exactly a lane's A registers of a row, one 16-byte entry
//   (vs = 8) those of two consecutive k-steps, two 4-byte entries (vs = 2) those of one, and B
//   is 4 consecutive x values of row g, one 8-byte load. In a chunk (64 quads), k-step s of
//   sub-chunk q (both 0..3) gives lane t quad 16q + 4t + s: a lane's 16 columns of a sub-chunk
//   are consecutive, so its 8-bit codes there are one 32-bit word of the code row (two for
//   vs = 2), while the 4 lanes of a row read x at 32-byte strides (one 128-byte line per row).
// - Per lookup, the fast path (8-bit indices, vs 2, 4, 8) spends a byte extract, an address, one
//   entry load (shared or global per the placement policy) and its share of one MMA. In the GeMV
//   the code words of the warp's next (chunk, residual) load while this one computes. 12-bit
//   indices with vs = 8 (AQLM) have a path of their own: a lane's two vectors of a sub-chunk
//   take 24 consecutive bits, loaded ahead the same way as one 32-bit window (a funnel shift of
//   two words) and split with shifts. The E8P lattice (the format's `lattice`, kCodes 16) takes a
//   lane's two 16-bit indices of a sub-chunk as one code word and decodes each entry from its
//   index (vq_e8p.cuh) instead of loading it: of the books only entry 0 (the scale) is read.
//   Other index widths read each index from the code row
//   through L1 (vq_index); other vector sizes
//   decode element by element (kVS = 0). The chunk that crosses K, and books narrower than a
//   lane's 16 columns (the CQ formats), run a careful variant: per-vector books and masks, and
//   indices read through L1 as for other widths.
// - B: when x has the MMA's 16-bit type, rows aligned to 8 bytes and K % 4 == 0, a lane loads its
//   quad of x straight from global memory (L1 serves the block's row groups); otherwise, and in
//   the careful variant, it loads the elements one by one and splits them into parts. Lanes of
//   rows past M load zeros.
// - Exact operands (docs/VQ.md): the MMA type T is fp16 when x and the entries are fp16, bf16
//   otherwise; x enters as x_parts values of T that sum to it exactly (fp32: three bf16, fp16 under
//   bf16: two), an fp16 entry under bf16 as two bf16 parts, each residual as its own A operand.
//   Every product is exact; what rounds is the fp32 accumulation: the tensor core's sum over a
//   sub-chunk (64 columns, one residual) into a zeroed fragment, one round-to-nearest add per
//   sub-chunk into the warp's accumulators, then the sums of a row group's warps in order. The row scale
//   multiplies the finished sum.
// - Codebook placement is a compile-time policy for the ablation: CodebookInShared (the paper's
//   SC) copies the books of the tile's row scope into shared memory when a block's run of tiles
//   enters a new scope (persistent grid; the tile height divides scope_rows); CodebookInGlobal (GC) reads each
//   row's own entries through L1/L2 (one block per tile). CodebookHotInRegisters adds the
//   codebook cache's register tier to SC (8-bit indices, vs 2 and 4, a warp's 16 rows and a
//   chunk's 256 columns in one book, which the launcher checks): per sub-chunk lane l loads
//   entry l of the warp's book into registers, and a lookup takes the entry from lane idx % 32
//   by shuffle, then from shared memory where idx >= 32. The quantizer orders entries hottest
//   first, so the 32 in registers are the most used ones.
// - Edges: rows of W past N read row N - 1 and rows of x past M read zeros (never stored);
//   vectors past K are masked to zero in A and B. x and y rows may be strided.
#pragma once

#include <type_traits>

#include "cuda/ptx/arch.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_e8p.cuh"
#include "cuda/vq/vq_gemm_heuristic.h"

struct CodebookInGlobal {
  static constexpr bool kShared = false, kHot = false;
};
struct CodebookInShared {
  static constexpr bool kShared = true, kHot = false;
};
struct CodebookHotInRegisters {  // SC with the 32 hottest entries of the warp's book in registers
  static constexpr bool kShared = true, kHot = true;
};

struct vq_mma_params {
  const uint32_t *codes;      // [R, N, row_words]
  const uint16_t *books;      // [R, n_books, entries, vs], fp16 or bf16 bits
  const float *scales;        // [N] or NULL
  const void *x;              // [M, K], row pitch x_ld elements
  void *y;                    // [M, N], row pitch y_ld elements
  int64_t x_ld, y_ld, n_books;
  int x_dtype, y_dtype;       // qf_dtype
  int M, N, K, vectors, quads;  // vectors = K / vs, quads = ceil(K / 4)
  int vs, bits, residuals, entries;
  int lattice;                // QF_VQ_LATTICE_E8P: entries decoded from the index (vq_e8p.cuh), not read
  uint32_t row_words;         // words per code row
  int vectors_per_book;       // along K: scope_cols / vs, or all vectors
  int book_shift;             // log2(vectors_per_book) for a power of two (31: one book per row), else -1
  int books_per_vector;       // 1: a lane's vectors of a sub-chunk may lie in two books (careful path)
  int scope_rows;             // 0: one row scope
  int books_per_row;
  int x_parts;
  int x_direct;               // B straight from x (the MMA's 16-bit type, 8-byte aligned rows, K % 4 == 0)
  int chunks;                 // ceil(quads / 64)
  int warps_k;                // warps sharing a row group, splitting K (1, 2, 4, 8)
  int tile_rows;              // rows of W per block tile: 16 * 8 / warps_k
  int tiles_n, tiles;
  uint32_t books_smem_bytes;  // 0 in global placement
};

namespace vq_mma_detail {

constexpr int kWarps = QF_VQ_MMA_WARPS, kThreads = kWarps * 32;
constexpr int kChunkQuads = QF_VQ_MMA_CHUNK / 4;
static_assert(QF_VQ_MMA_CHUNK == 256 && QF_VQ_MMA_TILE_N == 16, "chunks of 4 sub-chunks of 4 k16 steps; one m16 of W");

// ---- exact splits into 16-bit parts ----

__device__ __forceinline__ uint32_t to_bits(__half, float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ uint32_t to_bits(__nv_bfloat16, float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float from_bits(__half, uint32_t h) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h))); }
__device__ __forceinline__ float from_bits(__nv_bfloat16, uint32_t h) { return __uint_as_float(h << 16); }

// v = sum of the P parts, exactly, where v's significand fits in the parts (fp32 in three bf16,
// fp16 in two bf16, any fp16 / bf16 value in one of its own type): each part is the remainder
// rounded to T, and the remainder v - part is exact in fp32. Inf and NaN go whole into the first
// part (the rest 0), as does a finite fp32 value that rounds to Inf in bf16 (|v| > 3.39e38).
// Below 2^-110 in magnitude an fp32 value's last part can fall under bf16's subnormals; the error
// is then below 2^-133.
template <typename T, int P>
__device__ __forceinline__ void split(float v, uint32_t (&parts)[P]) {
#pragma unroll
  for (int p = 0; p < P; p++) {
    parts[p] = to_bits(T{}, v);
    const float f = from_bits(T{}, parts[p]);
    v = isfinite(f) ? v - f : 0.0f;
  }
}

// The 32-bit word w of two 16-bit entry elements as kEP words of T parts (kEP 2: fp16 under bf16).
template <typename E, typename T, int kEP>
__device__ __forceinline__ void entry_parts(uint32_t w, uint32_t (&out)[kEP]) {
  if constexpr (kEP == 1) {
    out[0] = w;
  } else {
    uint32_t lo[kEP], hi[kEP];
    split<T, kEP>(vq_widen_lo(E{}, w), lo);
    split<T, kEP>(vq_widen_hi(E{}, w), hi);
#pragma unroll
    for (int q = 0; q < kEP; q++) out[q] = lo[q] | (hi[q] << 16);
  }
}

// Byte b of w (an 8-bit index).
__device__ __forceinline__ uint32_t byte_of(uint32_t w, uint32_t b) { return __byte_perm(w, 0u, 0x4440u + b); }

template <bool kGlobal>
__device__ __forceinline__ uint32_t ld32(const uint16_t *p) {
  return kGlobal ? __ldg(reinterpret_cast<const unsigned int *>(p)) : *reinterpret_cast<const uint32_t *>(p);
}
template <bool kGlobal>
__device__ __forceinline__ uint2 ld64(const uint16_t *p) {
  return kGlobal ? __ldg(reinterpret_cast<const uint2 *>(p)) : *reinterpret_cast<const uint2 *>(p);
}
template <bool kGlobal>
__device__ __forceinline__ uint4 ld128(const uint16_t *p) {
  return kGlobal ? __ldg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
}
template <bool kGlobal>
__device__ __forceinline__ uint32_t ld16(const uint16_t *p) {
  return kGlobal ? __ldg(reinterpret_cast<const unsigned short *>(p)) : *p;
}

__device__ __forceinline__ int book_of(const vq_mma_params &p, int j) {
  return p.book_shift >= 0 ? j >> p.book_shift : j / p.vectors_per_book;
}

// The books of row scope `scope` (all residuals) into books_s: [R, books_per_row, entries, vs].
__device__ __forceinline__ void stage_books(const vq_mma_params &p, int scope, uint16_t *books_s) {
  const int64_t book_elems = static_cast<int64_t>(p.entries) * p.vs, per_res = p.books_per_row * book_elems;
  for (int r = 0; r < p.residuals; r++) {
    const uint16_t *src = p.books + (r * p.n_books + static_cast<int64_t>(scope) * p.books_per_row) * book_elems;
    uint16_t *dst = books_s + r * per_res;
    if (book_elems % 8 == 0) {  // every scope's books start 16-byte aligned
#pragma unroll 4
      for (int64_t i = threadIdx.x; i < per_res / 8; i += kThreads)
        reinterpret_cast<uint4 *>(dst)[i] = __ldg(reinterpret_cast<const uint4 *>(src) + i);
    } else {
      for (int64_t i = threadIdx.x; i < per_res; i += kThreads) dst[i] = src[i];
    }
  }
}

}  // namespace vq_mma_detail

// kCodes: how a lane finds its indices. 8: 8-bit indices, its code words of a sub-chunk loaded
// ahead (vs 2, 4, 8); 12: 12-bit indices with vs = 8 (AQLM), its two vectors' 24 bits of a
// sub-chunk as one 32-bit window loaded ahead; 0: each index read from the code row (vq_index).
template <int kMT, int kVS, int kCodes, typename E, typename T, class Placement>
__global__ void __launch_bounds__(vq_mma_detail::kThreads, kMT == 1 ? 3 : 2)
    vq_mma_kernel(const __grid_constant__ vq_mma_params p) {
  using namespace vq_mma_detail;
  constexpr bool kShared = Placement::kShared, kGlobal = !kShared;
  constexpr int kEP = std::is_same<E, vq_f16>::value && std::is_same<T, __nv_bfloat16>::value ? 2 : 1;  // entry parts
  constexpr int kXP = std::is_same<T, __half>::value ? 1 : 3;  // the most x parts
  constexpr int kV = kVS ? 16 / kVS : 1;                         // a lane's vectors per sub-chunk
  // kCodes 16: the E8P lattice's 16-bit indices, a lane's two vectors of a sub-chunk in one word
  constexpr bool kByteCodes = kCodes == 8, kWindow = kCodes == 12, kE8P = kCodes == 16;
  constexpr bool kE8PShared = kE8P && QF_VQ_E8P_SHARED(kMT);  // the pattern table staged in shared memory
  constexpr int kWQ = kByteCodes ? (kV + 3) / 4 : kWindow || kE8P ? 1 : 0;  // its code words per sub-chunk and row
  static_assert(kMT == 1 || kMT == 2 || kMT == 4, "x tiles of 8, 16 or 32 rows");
  static_assert(kVS == 0 || kVS == 2 || kVS == 4 || kVS == 8, "vector sizes 2, 4, 8, or 0 for any other");
  static_assert(!kByteCodes || kVS != 0, "8-bit codes have their own path for vector sizes 2, 4 and 8");
  static_assert(!kWindow || kVS == 8, "12-bit windows hold a lane's two 8-element vectors of a sub-chunk");
  static_assert(!kE8P || (kVS == 8 && std::is_same<E, vq_f16>::value && !Placement::kShared),
                "the E8P decoder: vector size 8, fp16 entries, books left in global memory (only entry 0 is read)");
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<E, vq_f16>::value,
                "fp16 tensor-core operands only with fp16 entries");
  static_assert(!Placement::kHot || (kByteCodes && (kVS == 2 || kVS == 4)), "the register tier: 8-bit codes, vs 2 or 4");

  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t *books_s = reinterpret_cast<uint16_t *>(smem);
  // kE8PShared: the pattern table after the books (none in global placement), then the partial sums
  uint4 *patterns_s = reinterpret_cast<uint4 *>(smem + p.books_smem_bytes);
  float *red = reinterpret_cast<float *>(smem + p.books_smem_bytes + (kE8PShared ? QF_VQ_E8P_TABLE_BYTES : 0));  // [warp][kMT][lane][4]

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wk = warp % p.warps_k, wn = warp / p.warps_k;  // the warp's slice of K and 16 rows of the tile
  const int vs = kVS ? kVS : p.vs;
  const int book_elems = p.entries * vs;
  const int64_t code_res = static_cast<int64_t>(p.N) * p.row_words;
  const int64_t book_res = (kShared ? static_cast<int64_t>(p.books_per_row) : p.n_books) * book_elems;
  const int x_size = p.x_dtype == QF_F32 ? 4 : 2;
  const bool ragged = p.K % QF_VQ_MMA_CHUNK != 0;  // the last chunk crosses K

  if constexpr (kE8PShared) {
    vq_e8p_stage<kThreads>(patterns_s);
    __syncthreads();
  }
  // The E8P patterns: this lane's copy in shared memory (its bank group), or the table in global memory.
  [[maybe_unused]] const uint4 *patterns = kE8PShared ? patterns_s + (lane & 7) : vq_e8p_global();

  const int t_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * p.tiles / gridDim.x);
  const int t_end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * p.tiles / gridDim.x);
  [[maybe_unused]] int staged_scope = -1;

  for (int tile = t_begin; tile < t_end; tile++) {
    const int mt = tile / p.tiles_n, tn0 = (tile - mt * p.tiles_n) * p.tile_rows, m0 = mt * 8 * kMT;
    const int n0 = tn0 + wn * QF_VQ_MMA_TILE_N;
    if constexpr (kShared) {  // the previous tile ended with a barrier: nobody reads books_s now
      const int scope = p.scope_rows ? tn0 / p.scope_rows : 0;  // the tile lies in one row scope
      if (scope != staged_scope) {
        stage_books(p, scope, books_s);
        staged_scope = scope;
        __syncthreads();
      }
    }

    // ---- this lane's rows of W (g, g + 8) and of x (g of each n8 tile) ----
    const uint32_t *crow[2];
    const uint16_t *brow[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int n = min(n0 + g + 8 * h, p.N - 1);
      crow[h] = p.codes + static_cast<int64_t>(n) * p.row_words;
      if constexpr (kShared)
        brow[h] = books_s;
      else
        brow[h] = p.books + static_cast<int64_t>(p.scope_rows ? n / p.scope_rows : 0) * p.books_per_row * book_elems;
    }
    const uint8_t *xrow[kMT];
#pragma unroll
    for (int j = 0; j < kMT; j++) {
      const int m = m0 + 8 * j + g;
      xrow[j] = m < p.M ? static_cast<const uint8_t *>(p.x) + static_cast<int64_t>(m) * p.x_ld * x_size : nullptr;
    }

    float acc[kMT][4];
#pragma unroll
    for (int j = 0; j < kMT; j++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;

    // B of quad u for n8 tile j as kXP pairs of T words: kDirect, one 8-byte load of the raw x
    // (x_parts 1); else element by element, split into parts (zeros past M and K).
    auto load_b = [&](auto direct, int j, int u, auto &b) {
      if constexpr (decltype(direct)::value) {
        const uint2 v = xrow[j] != nullptr ? __ldg(reinterpret_cast<const uint2 *>(xrow[j]) + u) : make_uint2(0u, 0u);
        b[0][0] = v.x, b[0][1] = v.y;
      } else {
        uint32_t parts[4][kXP];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int k = 4 * u + e;
          split<T, kXP>(xrow[j] != nullptr && k < p.K ? vq_load_as_f32(xrow[j], p.x_dtype, k) : 0.0f, parts[e]);
        }
#pragma unroll
        for (int q = 0; q < kXP; q++) b[q][0] = parts[0][q] | (parts[1][q] << 16), b[q][1] = parts[2][q] | (parts[3][q] << 16);
      }
    };

    // One k16 step: A (the lane's words of rows g and g + 8: elements 0 1 and 2 3 of its quad, as
    // raw entry bits) times B of every n8 tile, into part.
    auto mma_step = [&](auto direct, int u, const auto &w01, const auto &w23, auto &part) {
      constexpr int kXParts = decltype(direct)::value ? 1 : kXP;
      uint32_t a[kEP][4];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        uint32_t lo[kEP], hi[kEP];
        entry_parts<E, T, kEP>(w01[h], lo);
        entry_parts<E, T, kEP>(w23[h], hi);
#pragma unroll
        for (int q = 0; q < kEP; q++) a[q][h] = lo[q], a[q][2 + h] = hi[q];
      }
#pragma unroll
      for (int j = 0; j < kMT; j++) {
        uint32_t b[kXParts][2];
        load_b(direct, j, u, b);
#pragma unroll
        for (int px = 0; px < kXParts; px++)
          if (px == 0 || px < p.x_parts)
#pragma unroll
            for (int pe = 0; pe < kEP; pe++) mma_m16n8k16(T{}, part[j], a[pe], b[px]);
      }
    };

    // One sub-chunk (16 quads, 4 k16 steps) of residual r: the lane's quads are 16 q + 4 t + s.
    // cw: its code words of the sub-chunk (8-bit codes). Adds the sub-chunk's sum into acc.
    auto sub_chunk = [&](auto careful, auto direct, int c, int q, int r, const auto &cw) {
      [[maybe_unused]] constexpr bool kCareful = decltype(careful)::value;
      float part[kMT][4];
#pragma unroll
      for (int j = 0; j < kMT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) part[j][i] = 0.0f;
      const int u0 = c * kChunkQuads + q * 16 + t * 4;  // the lane's first quad
      [[maybe_unused]] const uint32_t *code_r[2] = {crow[0] + r * code_res, crow[1] + r * code_res};
      if constexpr (kVS != 0) {
        const int j0 = u0 * 4 / kVS;  // its first vector
        // Where vector j's entry idx starts, per row (kCareful: j's own book): the book's entries
        // as an array of kVS-element vectors, so a lookup is one scaled index.
        using entry_t = std::conditional_t<kVS == 8, uint4, std::conditional_t<kVS == 4, uint2, uint32_t>>;
        const entry_t *bq[2];
        const int64_t b0 = kCareful ? 0 : static_cast<int64_t>(book_of(p, j0)) * book_elems;
#pragma unroll
        for (int h = 0; h < 2; h++) bq[h] = reinterpret_cast<const entry_t *>(brow[h] + r * book_res + b0);
        auto index = [&](int h, int v) -> uint32_t {
          if constexpr (kByteCodes && !kCareful)
            return byte_of(cw[h][v >> 2], static_cast<uint32_t>((j0 & 3) + (v & 3)));
          else if constexpr (kWindow && !kCareful)
            return (cw[h][0] >> (12 * v)) & 0xfffu;
          else if constexpr (kE8P && !kCareful)
            return (cw[h][0] >> (16 * v)) & 0xffffu;
          else
            return vq_index(code_r[h], static_cast<uint32_t>(j0 + v), p.bits, p.row_words);
        };
        // Vector j0 + v's book as an array of entries (kCareful: j's own book).
        auto book = [&](int h, int v) {
          if constexpr (kCareful)
            return bq[h] + static_cast<int64_t>(book_of(p, j0 + v)) * p.entries;
          else
            return bq[h];
        };
        auto entry = [&](int h, int v) { return reinterpret_cast<const uint16_t *>(book(h, v) + index(h, v)); };
        auto live = [&](int v) { return !kCareful || j0 + v < p.vectors; };
        // The register tier (not in the careful variant): entry `lane` of the warp's book (every row
        // and lane of the warp use the same one); a lookup shuffles from lane idx % 32 and, for
        // idx >= 32, loads from shared memory instead.
        constexpr bool kHot = Placement::kHot && !kCareful;
        [[maybe_unused]] entry_t hot{};
        if constexpr (kHot) hot = *(bq[0] + lane);
        auto lookup = [&](int h, int v) -> entry_t {
          if constexpr (kHot) {
            const uint32_t i = index(h, v);
            entry_t e;
            if constexpr (kVS == 4) {
              e.x = __shfl_sync(0xffffffffu, hot.x, static_cast<int>(i & 31u));
              e.y = __shfl_sync(0xffffffffu, hot.y, static_cast<int>(i & 31u));
            } else {
              e = __shfl_sync(0xffffffffu, hot, static_cast<int>(i & 31u));
            }
            if (i >= 32u) e = *(bq[h] + i);
            return e;
          } else if constexpr (kVS == 4) {
            return ld64<kGlobal>(entry(h, v));
          } else if constexpr (kVS == 2) {
            return ld32<kGlobal>(entry(h, v));
          } else {
            return entry_t{};  // (vs 8 loads its entries itself)
          }
        };
        [[maybe_unused]] uint4 e8[2];
#pragma unroll
        for (int s = 0; s < 4; s++) {
          uint32_t w01[2], w23[2];
#pragma unroll
          for (int h = 0; h < 2; h++) {
            if constexpr (kVS == 4) {
              const uint2 e = live(s) ? lookup(h, s) : make_uint2(0u, 0u);
              w01[h] = e.x, w23[h] = e.y;
            } else if constexpr (kE8P) {  // one lattice point decoded: steps s and s + 1
              if (s % 2 == 0)
                e8[h] = live(s / 2) ? vq_e8p_decode<kE8PShared>(patterns, index(h, s / 2),
                                                                ld16<true>(reinterpret_cast<const uint16_t *>(book(h, s / 2))))
                                    : make_uint4(0u, 0u, 0u, 0u);
              w01[h] = s % 2 ? e8[h].z : e8[h].x;
              w23[h] = s % 2 ? e8[h].w : e8[h].y;
            } else if constexpr (kVS == 8) {  // one 16-byte entry: steps s and s + 1
              if (s % 2 == 0) e8[h] = live(s / 2) ? ld128<kGlobal>(entry(h, s / 2)) : make_uint4(0u, 0u, 0u, 0u);
              w01[h] = s % 2 ? e8[h].z : e8[h].x;
              w23[h] = s % 2 ? e8[h].w : e8[h].y;
            } else {  // two 4-byte entries per step
              w01[h] = live(2 * s) ? lookup(h, 2 * s) : 0u;
              w23[h] = live(2 * s + 1) ? lookup(h, 2 * s + 1) : 0u;
            }
          }
          mma_step(direct, u0 + s, w01, w23, part);
        }
      } else {
        // Any vector size: element by element (vectors may straddle quads and chunks).
#pragma unroll 1
        for (int s = 0; s < 4; s++) {
          uint32_t w01[2], w23[2];
#pragma unroll
          for (int h = 0; h < 2; h++) {
            uint32_t e[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
              const int k = 4 * (u0 + s) + i;
              e[i] = 0u;
              if (k < p.K) {
                const int j = k / vs, cc = k - j * vs;
                const uint32_t idx = vq_index(code_r[h], static_cast<uint32_t>(j), p.bits, p.row_words);
                e[i] = ld16<kGlobal>(brow[h] + r * book_res + static_cast<int64_t>(book_of(p, j)) * book_elems + idx * vs + cc);
              }
            }
            w01[h] = e[0] | (e[1] << 16), w23[h] = e[2] | (e[3] << 16);
          }
          mma_step(direct, u0 + s, w01, w23, part);
        }
      }
#pragma unroll
      for (int j = 0; j < kMT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = __fadd_rn(acc[j][i], part[j][i]);
    };

    // ---- the warp's (chunk, residual) items; in the GeMV the next item's 8-bit codes load under this one ----
    constexpr int kCW = kWQ > 0 ? kWQ : 1;
    // The GeMV prefetches; the GeMM's x tile gives a warp enough MMAs per code word to hide the
    // loads, and its registers go to unrolling the 4 k-steps of a sub-chunk instead of all 16.
    constexpr bool kPrefetch = kMT < 4;
    uint32_t cur[4][2][kCW];
    [[maybe_unused]] uint32_t nxt[4][2][kCW];
    auto load_sub_codes = [&](int c, int q, int r, auto &w) {  // the lane's words of sub-chunk q
      if constexpr (kByteCodes) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int e = 0; e < kWQ; e++) {
            const uint32_t wi = static_cast<uint32_t>((c * kChunkQuads + q * 16 + t * 4) * 4 / kVS) / 4u + e;
            w[h][e] = wi < p.row_words ? __ldg(crow[h] + r * code_res + wi) : 0u;
          }
      } else if constexpr (kE8P) {  // the 32 bits of vectors j0 and j0 + 1 (j0 = the lane's first)
        const uint32_t wi = static_cast<uint32_t>(c * kChunkQuads + q * 16 + t * 4) / 4u;
#pragma unroll
        for (int h = 0; h < 2; h++) w[h][0] = wi < p.row_words ? __ldg(crow[h] + r * code_res + wi) : 0u;
      } else if constexpr (kWindow) {  // the 24 bits of vectors j0 and j0 + 1 (j0 = the lane's first)
        // Past the row (the sub-chunks of a ragged last chunk, which the careful path decodes
        // instead) the window stops at the row's last word: its bits are never used, and a clamp
        // costs less than a conditional load (which made the AQLM rows up to 2x slower).
        const uint32_t bit = min(12u * static_cast<uint32_t>((c * kChunkQuads + q * 16 + t * 4) / 2),
                                 32u * (p.row_words - 1u));
#pragma unroll
        for (int h = 0; h < 2; h++) w[h][0] = vq_code_window(crow[h] + r * code_res, bit, p.row_words);
      }
    };
    auto load_codes = [&](int c, int r, auto &w) {
#pragma unroll
      for (int q = 0; q < 4; q++) load_sub_codes(c, q, r, w[q]);
    };
    int c = wk, r = 0;
    if (kPrefetch && c < p.chunks) load_codes(c, 0, nxt);
    while (c < p.chunks) {
      int cn = c, rn = r + 1;
      if (rn == p.residuals) rn = 0, cn += p.warps_k;
      if constexpr (kPrefetch) {
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
          for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < kCW; e++) cur[q][h][e] = nxt[q][h][e];
        if (cn < p.chunks) load_codes(cn, rn, nxt);
      }
      if constexpr (kVS != 0) {
        if (!p.books_per_vector && !(ragged && c == p.chunks - 1)) {
          auto run = [&](auto direct) {
            if constexpr (kPrefetch) {
#pragma unroll
              for (int q = 0; q < 4; q++) sub_chunk(std::false_type{}, direct, c, q, r, cur[q]);
            } else {  // the GeMM: each sub-chunk's words just before it, one sub-chunk unrolled at a time
#pragma unroll 1
              for (int q = 0; q < 4; q++) {
                load_sub_codes(c, q, r, cur[0]);
                sub_chunk(std::false_type{}, direct, c, q, r, cur[0]);
              }
            }
          };
          if (p.x_direct)
            run(std::true_type{});
          else
            run(std::false_type{});
          c = cn, r = rn;
          continue;
        }
      }
#pragma unroll 1
      for (int q = 0; q < 4; q++) sub_chunk(std::true_type{}, std::false_type{}, c, q, r, cur[0]);  // reads its indices
      c = cn, r = rn;
    }

    // ---- epilogue: the sums of a row group's warps in K order, times the row scale, into y ----
#pragma unroll
    for (int j = 0; j < kMT; j++)
      reinterpret_cast<float4 *>(red)[(warp * kMT + j) * 32 + lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < kWarps / p.warps_k * kMT * 128; e += kThreads) {
      const int rg = e / (kMT * 128), j = (e >> 7) % kMT, l = (e >> 2) & 31, i = e & 3;  // rg: row group (wn)
      const int n = tn0 + rg * QF_VQ_MMA_TILE_N + (l >> 2) + 8 * (i >> 1), m = m0 + 8 * j + 2 * (l & 3) + (i & 1);
      if (n >= p.N || m >= p.M) continue;
      const float *part = red + ((rg * p.warps_k * kMT + j) * 32 + l) * 4 + i;
      float sum = part[0];
      for (int w = 1; w < p.warps_k; w++) sum += part[w * kMT * 128];
      if (p.scales) sum *= p.scales[n];
      vq_store_as(p.y, p.y_dtype, m * p.y_ld + n, sum);
    }
    __syncthreads();  // red and books_s are free again
  }
}

// ---- host: the kernels of one (placement, x tile), from one list, and their launch ----

#include <atomic>

#include "cuda/common.cuh"

// The launchers (vq_gemv_{global,shared,registers}.cu: x tiles of 8 and 16 rows;
// vq_gemm_{global,shared}.cu: 32 rows), each placement and x tile in its own translation unit.
qf_status qf_cuda_vq_gemv_run_global(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg, bool bf16_entries);
qf_status qf_cuda_vq_gemv_run_shared(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg, bool bf16_entries);
qf_status qf_cuda_vq_gemv_run_registers(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg,
                                        bool bf16_entries);
qf_status qf_cuda_vq_gemm_mma_run_global(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg,
                                         bool bf16_entries);
qf_status qf_cuda_vq_gemm_mma_run_shared(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg,
                                         bool bf16_entries);

// The limits the banked GeMV and the tiled GeMM share: rows, columns, vector indices and bit
// offsets inside a code row are 32-bit in the kernels, and y is stored element by element.
inline qf_status vq_gemm_offset_limits(qf_ctx *ctx, const char *op, const qf_mat *x, const qf_vq_tensors *w,
                                       const qf_mat *y) {
  const int64_t M = x->rows, N = w->N, K = w->K;
  if (M > INT32_MAX / 2 || N > INT32_MAX / 2 || K > INT32_MAX / 2 || w->sz.row_bytes > (INT64_C(1) << 28))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: M=%lld, N=%lld, K=%lld exceed the kernel's 32-bit offsets", op,
                   static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K));
  if (reinterpret_cast<uintptr_t>(y->data) % qf_dtype_size(y->dtype) != 0)
    return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: y (%p) must be aligned to its elements", op, y->data);
  return QF_OK;
}

// The opt-in to `smem` bytes of dynamic shared memory and how many blocks of `threads` fit an SM
// (QF_ERR_UNSUPPORTED when none: "the <name>'s block does not fit an SM"), for the launchers of
// the banked and E8P GeMVs and the tiled GeMM.
template <typename Kernel>
qf_status vq_blocks_per_sm(qf_ctx *ctx, const char *op, const char *name, Kernel kernel, int threads, size_t smem,
                           std::atomic<uint64_t> &opted_in, int *per_sm) {
  if (qf_status st = qf_cuda_smem_opt_in(ctx, op, kernel, smem, opted_in); st != QF_OK) return st;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, smem);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  if (*per_sm < 1) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the %s's block does not fit an SM", op, name);
  return QF_OK;
}

// M = 3 and 4 on the table GeMVs, whose kernels take one or two rows of x: `launch` (x, y, used)
// for rows 0 and 1, then for the rest (one row: the M = 1 kernel), in stream order (the calls
// share the workspace); `used` tells the first call's plan and the number of calls (tiles_m).
template <typename Launch>
qf_status vq_gemv_row_pairs(const qf_mat *x, const qf_mat *y, qf_vq_mma_config *used, Launch launch) {
  const size_t x_row = static_cast<size_t>(x->ld) * qf_dtype_size(x->dtype);
  const size_t y_row = static_cast<size_t>(y->ld) * qf_dtype_size(y->dtype);
  for (int64_t r0 = 0; r0 < x->rows; r0 += 2) {
    const int64_t rows = x->rows - r0 < 2 ? x->rows - r0 : 2;
    const qf_mat xs = {static_cast<uint8_t *>(x->data) + r0 * x_row, x->dtype, rows, x->cols, x->ld};
    const qf_mat ys = {static_cast<uint8_t *>(y->data) + r0 * y_row, y->dtype, rows, y->cols, y->ld};
    if (qf_status st = launch(&xs, &ys, r0 == 0 ? used : nullptr); st != QF_OK) return st;
  }
  if (used) used->tiles_m = (x->rows + 1) / 2;
  return QF_OK;
}

// The launch shape the banked and E8P GeMVs report (their `used`): x tiles of 8 mt rows, row
// tiles of `rows` rows of W (tiles_n of them, each split into `splits` K ranges over blocks), the
// banked placement, one 16-bit part of x and of each entry, x loaded straight into B fragments.
inline qf_vq_mma_config vq_gemv_shape(int mt, int rows, int warps, int64_t tiles_n, int splits, size_t smem) {
  qf_vq_mma_config c = {};
  c.m_tiles8 = mt;
  c.tile_n = rows;
  c.tile_m = 8 * mt;
  c.placement = QF_VQ_BOOKS_BANKED;
  c.x_parts = 1;
  c.entry_parts = 1;
  c.warps = warps;
  c.warps_k = 1;
  c.x_direct = 1;
  c.tiles_n = tiles_n;
  c.tiles_m = 1;
  c.tiles = tiles_n * splits;
  c.splits = splits;
  c.smem_bytes = smem;
  return c;
}

// The split-K of the chunked GeMVs (banked, tile-table): as many K ranges per row tile as fill one
// wave of per_sm blocks on every SM, min_chunks chunks a range at least, one range where the tiles
// outnumber the workspace's counters. (The banked GeMV's ranges take two of its 256-column chunks:
// a range of one loads its book and codes with nothing to overlap them, (4096, 4096) at M = 1 ran
// 16 ranges of one chunk in 9.3 us, 8 of two in 8.8; the tile-table GeMV's 256-column items
// pipeline their own halves, one a range.)
inline int vq_gemv_wave_splits(const qf_ctx *ctx, int per_sm, int64_t tiles_n, int chunks, int min_chunks) {
  if (tiles_n > kQfWorkspaceCounters) return 1;
  const int64_t slots = static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * per_sm;
  const int64_t want = slots / tiles_n, most = chunks / min_chunks < 1 ? 1 : chunks / min_chunks;
  return static_cast<int>(want < 1 ? 1 : want > most ? most : want);
}

// A split-K (K ranges per tile) the launchers can run: at most one range per unit of K (`units`
// of them, named `unit`), the tiles within the workspace's counters once split, and tiles x
// splits within the grid. QF_ERR_UNSUPPORTED / QF_ERR_SHAPE with the numbers otherwise.
inline qf_status vq_split_check(qf_ctx *ctx, const char *op, int splits, int64_t units, const char *unit,
                                int64_t tiles) {
  if (splits > units || (splits > 1 && tiles > kQfWorkspaceCounters))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %d K splits of %lld %s over %lld tiles (at most %d counters)", op,
                   splits, static_cast<long long>(units), unit, static_cast<long long>(tiles), kQfWorkspaceCounters);
  if (tiles * splits > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld units exceed the grid", op, static_cast<long long>(tiles * splits));
  return QF_OK;
}

// Split-K's workspace: the counters, then `partial_bytes` for the units' fp32 partials.
inline qf_status vq_split_workspace(qf_ctx *ctx, const char *op, size_t partial_bytes, int **counters,
                                    float **partials) {
  void *ws = nullptr;
  if (qf_status st = qf_cuda_workspace(ctx, op, kQfWorkspaceCounters * sizeof(int) + partial_bytes, &ws); st != QF_OK)
    return st;
  *counters = static_cast<int *>(ws);
  *partials = reinterpret_cast<float *>(*counters + kQfWorkspaceCounters);
  return QF_OK;
}

// The call's tensors in the fields that the parameters of every VQ weight kernel share
// (vq_mma_params, vq_banked_params).
template <class Params>
void vq_weight_call_params(Params &p, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  vq_weight_params(p, w);
  p.x = x->data;
  p.y = y->data;
  p.x_ld = x->ld;
  p.y_ld = y->ld;
  p.y_dtype = y->dtype;
}

// The shape and codebook-scope fields the chunked GeMVs share (vq_banked_params, vq_e8p_params):
// M, N, chunks of 256 columns, code-row words, chunks per book along K and its shift, books per
// row, scope_rows; with the call's tensors.
template <class Params>
void vq_chunked_call_params(Params &p, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int chunks) {
  vq_weight_call_params(p, x, w, y);
  const qf_vq_format &f = w->fmt;
  p.M = static_cast<int>(x->rows);
  p.N = static_cast<int>(w->N);
  p.chunks = chunks;
  p.row_words = static_cast<uint32_t>(w->sz.row_bytes / 4);
  p.chunks_per_book = f.scope_cols ? f.scope_cols / QF_VQ_MMA_CHUNK : chunks;
  p.book_shift = vq_book_shift(p.chunks_per_book, f.scope_cols == 0);
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.scope_rows = f.scope_rows;
}

namespace vq_mma_detail {

using kernel_t = void (*)(vq_mma_params);

// Decoders: 8-bit codes with vector size 2, 4, 8; other index widths with 2, 4, 8; any vector
// size; 12-bit codes with vector size 8; then the E8P lattice (16-bit codes, vector size 8, fp16
// entries in global memory; pick_decoder has no kernel for it elsewhere).
#define QF_VQ_MMA_DECODERS(X) X(2, 8) X(4, 8) X(8, 8) X(2, 0) X(4, 0) X(8, 0) X(0, 0) X(8, 12)
constexpr int kDecoders = 9, kE8pSlot = 8;
// (entry, operand) types: bf16 entries; fp16 entries under bf16; fp16 under fp16.
constexpr int kTypes = 3;

inline int decoder_slot(int vs, int bits, int lattice) {
  if (lattice == QF_VQ_LATTICE_E8P) return kE8pSlot;
  const int v = QF_VQ_MMA_VS_BUCKET(vs);
  if (v == 0) return 6;
  if (v == 8 && bits == 12) return 7;
  return (v == 2 ? 0 : v == 4 ? 1 : 2) + (bits == 8 ? 0 : 3);
}

template <int kMT, class Placement, typename E, typename T>
kernel_t pick_decoder(int slot) {
  if constexpr (Placement::kHot) {  // (8-bit codes, vs 2 and 4 only)
    return slot == 0   ? vq_mma_kernel<kMT, 2, 8, E, T, Placement>
           : slot == 1 ? vq_mma_kernel<kMT, 4, 8, E, T, Placement>
                       : nullptr;
  } else {
    if constexpr (std::is_same<E, vq_f16>::value && !Placement::kShared)
      if (slot == kE8pSlot) return vq_mma_kernel<kMT, 8, 16, E, T, Placement>;
    int i = 0;
#define QF_VQ_MMA_DECODER_CASE(VS, CODES) \
  if (slot == i++) return vq_mma_kernel<kMT, VS, CODES, E, T, Placement>;
    QF_VQ_MMA_DECODERS(QF_VQ_MMA_DECODER_CASE)
#undef QF_VQ_MMA_DECODER_CASE
    return nullptr;
  }
}

}  // namespace vq_mma_detail

template <class Placement, int kMT>
qf_status vq_mma_launch(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg, bool bf16_entries) {
  using namespace vq_mma_detail;
  static const char op[] = "qf_vq_gemm";
  if (bf16_entries && !cfg.mma_bf16)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: bf16 entries need bf16 tensor-core operands", op);
  if (cfg.m_tiles8 != kMT) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for x tiles of %d rows", op, cfg.tile_m);
  const int types = bf16_entries ? 0 : cfg.mma_bf16 ? 1 : 2;
  const int dec = decoder_slot(p.vs, p.bits, p.lattice), slot = types * kDecoders + dec;
  const kernel_t kernel = types == 0   ? pick_decoder<kMT, Placement, vq_bf16, __nv_bfloat16>(dec)
                          : types == 1 ? pick_decoder<kMT, Placement, vq_f16, __nv_bfloat16>(dec)
                                       : pick_decoder<kMT, Placement, vq_f16, __half>(dec);
  if (!kernel)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: no kernel for this decoder and placement (the E8P lattice leaves the books in global memory; "
                   "the register tier takes 8-bit codes with vector size 2 or 4)", op);

  // Raised to the device's limit: the heuristic has sized the block's shared memory within it.
  static std::atomic<uint64_t> opted_in[kTypes * kDecoders];
  if (qf_status st = qf_cuda_smem_opt_in(ctx, op, kernel, ctx->smem_optin, opted_in[slot]); st != QF_OK) return st;
  int per_sm = 0;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, cfg.smem_bytes);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  if (per_sm < 1)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: a block of %d threads with %zu bytes of shared memory does not fit an SM",
                   op, kThreads, cfg.smem_bytes);
  // Shared placement (and the E8P decoder's staged table): a persistent grid, so each copy of the
  // books serves a run of tiles.
  const int64_t slots = static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * per_sm;
  const bool staged = Placement::kShared || (dec == kE8pSlot && QF_VQ_E8P_SHARED(kMT));
  const int64_t grid = staged && p.tiles > slots ? slots : p.tiles;
  kernel<<<static_cast<unsigned>(grid), kThreads, cfg.smem_bytes, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, op);
}
