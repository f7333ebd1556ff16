// VQ decode attention over a CQ-quantized KV cache (qfuse.h, qf_vq_attention_decode):
//   o[b, h] = softmax(sm_scale q[b, h] . K[b, t, g]) . V[b, t, g],   lse[b, h] = log sum_t exp(...)
// with g the kv head of query head h (GQA), in two kernels: vq_attention_chunk_kernel leaves, for
// every (b, h) and chunk of the sequence, the partial (m, l, o~) of that chunk in the workspace;
// vq_attention_merge_kernel combines a (b, h)'s chunks with the LSE rule and writes o and lse
// (the banked kernel does that itself where it can: vq_attention_banked.cuh, p.write_o).
//
// NOTES:
// - A block serves one head tile (a kv head g and up to kHeads of its query heads) and a contiguous
//   run of units (batch entry b, chunk c) of it (vq_attention_heuristic.h sizes both). The K and V
//   vectors of a token are decoded once per block and used for every query head of the tile.
// - A unit is walked in tiles of kTile = 256 tokens. The code words that hold head g's indices in
//   each token's row (K and V, every residual) are copied into shared memory with cp.async, 4
//   bytes at a time (a head's bits need not start on a 16-byte boundary), double-buffered: the next
//   tile is in flight while this one is computed. Staged rows are an odd number of words apart, so
//   a warp reading one word of 32 rows touches 32 banks.
// - q is staged once per unit as fp32 in shared memory, multiplied by sm_scale * log2(e): the
//   scores are in log2 units and exp2f gives the exponentials (2 ulp); the scale costs nothing per
//   token. Scores are a compile-time policy, for the ablation; one thread per token either way:
//   VqAttnScoresByDecode decodes the token's D / vs K vectors (entries summed over the residuals in
//   fp32) and dots them with the kHeads query heads; VqAttnScoresByLut (the paper's lookup table)
//   first builds, whenever the batch entry changes, lut[h][r][j][e] = q_h[vector j] . entry e of
//   vector j's residual-r K book (fp32, an fma chain over the vs elements) in shared memory, and a
//   score is then sum_j sum_r lut[h][r][j][index]: one 4-byte shared load and one add per index
//   instead of an entry load, vs conversions and vs fmas. The K books stay in global memory (read
//   once per build). The rounding differs from the decode (vs + V R roundings of products of single
//   entries instead of D of the summed entry), within the same bound for one residual.
// - Softmax, online per tile, one warp per head: the tile's max, the new running max m, the
//   probabilities p = exp2(s - m) in place of the scores, l = l * exp2(m_old - m) + sum p.
// - Values: lanes_per_token lanes share a token, each decoding vectors_per_lane consecutive V
//   vectors (up to 8 channels) of it; the lane groups and warps take the tile's tokens in turn. A
//   lane's vectors sit at the same bits of every token's row, so their word offsets, shifts and
//   book offsets are computed once per block; a token costs the lane its code words (one shared
//   word, broadcast to the lanes that share it), an entry load and vs fmas per vector and head.
//   Each lane keeps kHeads x 8 fp32 accumulators, rescaled by exp2(m_old - m) at every tile. At the
//   end of a unit, shuffles add the lane groups of a warp and shared memory the warps, in a fixed
//   order (no atomics): a run repeats bit for bit for the same launch plan.
// - NaN and Inf behave as in the CPU reference: max ignores NaN scores (fmaxf, the CPU's `>`); a
//   NaN score makes p, l and then o and lse NaN; an Inf score gives exp2(inf - inf) = NaN. A unit
//   whose scores are all -Inf or NaN keeps m = -Inf and computes p against 0, so it adds 0 (or NaN)
//   to the merge, and a (b, h) without any finite score gets NaN from exp2(-inf - -inf), as the
//   CPU's exp(-inf - -inf). One difference: an Inf value in V meets a probability that underflows
//   to 0 in fp32 sooner than in float64 (0 * Inf = NaN where the CPU may still have Inf).
// - Paged caches (p.block_table): a token's row is its page's (vq_attn_row); a token whose page is
//   outside the cache copies nothing and scores NaN, so its (b, h) gets NaN as the CPU's refusal
//   has no device counterpart.
// - Lengths per batch entry (p.kv_lens, read on the device and clamped to [0, seq_len]): the plan
//   (chunks, units, grid) is the one for seq_len tokens, so a graph replays it as they change; a
//   unit's tiles stop at its entry's last token, and a chunk past it is one empty tile (no copy,
//   no score, m = -Inf and l = 0 in its partial). The merge gives an entry with no token o = 0 and
//   lse = -inf, as the CPU does.
// - Codebook placement is a compile-time policy, for the ablation: VqAttnBooksInShared (the paper's
//   SC) copies the head's books into shared memory once per block (K and V with decoded scores, V
//   only with the LUT); VqAttnBooksInGlobal (GC) reads every entry through the read-only path (L1,
//   then L2).
#pragma once

#include <cuda.h>
#include <cuda_pipeline_primitives.h>

#include "cuda/fastdiv.h"
#include "cuda/vq/vq_attention_heuristic.h"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_rows.cuh"

struct VqAttnBooksInGlobal {
  static constexpr bool kShared = false;
};
struct VqAttnBooksInShared {
  static constexpr bool kShared = true;
};
struct VqAttnScoresByDecode {
  static constexpr bool kLut = false;
};
struct VqAttnScoresByLut {
  static constexpr bool kLut = true;
};

constexpr int kVqAttnThreads = QF_VQ_ATTN_THREADS;
constexpr int kVqAttnWarps = QF_VQ_ATTN_WARPS;
constexpr int kVqAttnTile = QF_VQ_ATTN_TILE;
constexpr int kVqAttnMaxResiduals = 4;
static_assert(kVqAttnTile == kVqAttnThreads, "scoring gives each thread one token of a tile");
static_assert(kVqAttnThreads % 32 == 0, "blocks are whole warps");

struct vq_attention_params {
  CUtensorMap tmap_codes[2];  // banked kernel: K, V code rows in boxes of kVqAttnTile rows x S bytes
  const uint32_t *codes[2];  // K, V: [R, N, row_words], N = B * seq_len (paged: num_pages * page_size)
  const uint16_t *books[2];  // K, V: [R, n_books, entries, vs], fp16 or bf16 bits (V: packed in the banked kernel's kPackedV)
  const void *q;             // [B, Hq * D], row pitch q_ld elements
  const int32_t *kv_lens;    // [B]: entry b's tokens (clamped to [0, seq_len]), or NULL: seq_len each
  const int32_t *block_table;  // [B, max_pages], pitch bt_ld: a paged cache (page_size rows a page), or NULL
  int64_t bt_ld, page_size, num_pages;
  qf_fastdiv by_page;        // division by page_size (a division's sequence per lookup held the copies' warp)
  int box_rows;              // banked kernel: rows of a code box (a tile's 256, or a page's where pages are smaller)
  float *part_o;             // [B, Hq, n_chunks, D]: sum_t p_t V_t of each chunk
  float *part_ml;            // [B, Hq, n_chunks, 2]: the chunk's max score (log2 units) and sum of p
  int64_t q_ld, N, seq_len, chunk_len, n_books;
  float q_scale;             // sm_scale * log2(e)
  int q_dtype;               // qf_dtype
  int Hq, group, D, head_tiles;
  int n_chunks, units;
  int vectors;               // per head and token: D / vs
  int bits, residuals, entries;
  uint32_t row_words;
  int vectors_per_book, book_shift;  // a row's vector J is in book J / vectors_per_book (J >> book_shift if >= 0)
  int books_per_head, code_words, stages;
  int lane_shift, vectors_per_lane;  // values phase: log2(lanes_per_token)
  uint32_t books_bytes, lut_bytes, codes_bytes;  // shared-memory carve-out
  int halves, vblocks;       // banked kernel: halves per block, virtual blocks (halves) per head tile
  uint32_t half_bytes;       // banked kernel: shared memory of one half
  // Banked kernel: write_o (qf_vq_attn_banked_writes_o) where it writes o and lse itself, as the
  // merge kernel would (vq_attention_merge_kernel), which then does not run.
  void *o;                   // [B, Hq * D], row pitch o_ld elements, of dtype o_dtype (qf_dtype)
  float *lse;                // [B, Hq]
  int64_t o_ld;
  int o_dtype, write_o;
  // Banked kernel's append instantiations (qf_vq_attention_decode_append fused into the one-head
  // blocks set up by bulk copies): each entry's new K and V rows [B, Hkv D] (row pitch x_ld
  // elements, dtype x_dtype), encoded as its token len - 1 into append_codes (codes[], writable)
  // before any copy reads that row.
  const void *x_new[2];
  uint8_t *append_codes[2];
  int64_t x_ld;
  int x_dtype;
};

struct vq_attention_merge_params {
  const float *part_o, *part_ml;
  const int32_t *kv_lens;    // as vq_attention_params': an entry with no token gets o = 0, lse = -inf
  int64_t seq_len;
  void *o;                   // [B, Hq * D], row pitch o_ld elements
  float *lse;                // [B, Hq]
  int64_t o_ld;
  int Hq, D, n_chunks;
};

__device__ __forceinline__ int vq_attn_book(const vq_attention_params &p, int vector) {
  return p.book_shift >= 0 ? vector >> p.book_shift : vector / p.vectors_per_book;
}

// N consecutive fp32 values of shared memory (16-byte aligned for N = 4, 8; 8-byte for N = 2).
template <int N>
__device__ __forceinline__ void vq_attn_load_f32(const float *p, float (&v)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; i++) {
      const float4 f = reinterpret_cast<const float4 *>(p)[i];
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  } else {
    static_assert(N == 2, "2, 4 or 8 values");
    const float2 f = *reinterpret_cast<const float2 *>(p);
    v[0] = f.x, v[1] = f.y;
  }
}

// Consecutive `bits`-bit indices of the staged code rows of every residual, from bit `bit` on: the
// 32-bit window of each row is held in two registers and moves one word when it is used up. A
// staged row holds `words` words; the window never reads past them.
struct vq_attn_reader {
  uint32_t lo[kVqAttnMaxResiduals], hi[kVqAttnMaxResiduals];
  uint32_t word, shift;

  __device__ __forceinline__ void start(const uint32_t *const (&rows)[kVqAttnMaxResiduals], int residuals,
                                        uint32_t bit, uint32_t words) {
    word = bit >> 5, shift = bit & 31u;
#pragma unroll
    for (int r = 0; r < kVqAttnMaxResiduals; r++) {
      lo[r] = r < residuals ? rows[r][word] : 0u;
      hi[r] = r < residuals && word + 1u < words ? rows[r][word + 1u] : 0u;
    }
  }
  __device__ __forceinline__ uint32_t index(int r, uint32_t mask) const {
    return __funnelshift_r(lo[r], hi[r], shift) & mask;
  }
  __device__ __forceinline__ void advance(const uint32_t *const (&rows)[kVqAttnMaxResiduals], int residuals, int bits,
                                          uint32_t words) {
    shift += static_cast<uint32_t>(bits);
    if (shift >= 32u) {  // bits <= 16: at most one word per index
      shift -= 32u, word++;
#pragma unroll
      for (int r = 0; r < kVqAttnMaxResiduals; r++) {
        lo[r] = hi[r];
        hi[r] = r < residuals && word + 1u < words ? rows[r][word + 1u] : 0u;
      }
    }
  }
};

// The decoded vector (entries of every residual summed in fp32 from 0, in residual order, as the
// CPU's decode) under the reader's current indices; `base` is book 0 of the head, residual 0.
template <int kVS, bool kGlobal, typename E>
__device__ __forceinline__ void vq_attn_decode(const uint16_t *base, int64_t res_stride, int64_t book_off,
                                               const vq_attn_reader &rd, int residuals, uint32_t mask,
                                               float (&v)[kVS]) {
#pragma unroll
  for (int c = 0; c < kVS; c++) v[c] = 0.0f;
#pragma unroll
  for (int r = 0; r < kVqAttnMaxResiduals; r++) {
    if (r < residuals) {
      float e[kVS];
      vq_load_entry<kVS, kGlobal>(E{}, base + r * res_stride + book_off + static_cast<int64_t>(rd.index(r, mask)) * kVS, e);
#pragma unroll
      for (int c = 0; c < kVS; c++) v[c] += e[c];
    }
  }
}

// Where one tile of a block's run lies: unit (b, chunk), its first token and its token count.
struct vq_attn_tile {
  int unit;
  int64_t b, chunk, t0;
  int64_t len;       // entry b's tokens
  int count;         // 0 for a chunk past them (one empty tile)
  bool first, last;  // the unit's first and last tile
};

// t's token count and whether it is its unit's last tile, from t.t0, t.chunk and t.len.
__device__ __forceinline__ void vq_attn_tile_span(const vq_attention_params &p, vq_attn_tile &t) {
  const int64_t begin = t.chunk * p.chunk_len;
  int64_t end = begin + p.chunk_len < t.len ? begin + p.chunk_len : t.len;
  if (end < begin) end = begin;
  t.count = static_cast<int>(end - t.t0 < kVqAttnTile ? end - t.t0 : kVqAttnTile);
  t.last = t.t0 + t.count == end;
}

// Unit `unit`'s first tile (unit may be p.units: the end of a run, whose length is not read).
__device__ __forceinline__ vq_attn_tile vq_attn_tile_at(const vq_attention_params &p, int unit) {
  vq_attn_tile t;
  t.unit = unit;
  const int b = unit / p.n_chunks;  // 32-bit: units and chunks are counted in int
  t.b = b;
  t.chunk = unit - b * p.n_chunks;
  t.t0 = t.chunk * p.chunk_len;
  t.len = unit < p.units ? vq_attn_len(p.kv_lens, p.seq_len, b) : 0;
  t.first = true;
  vq_attn_tile_span(p, t);
  return t;
}

// The tile after t: the next unit's first, or t's successor in its unit (no division).
__device__ __forceinline__ vq_attn_tile vq_attn_next(const vq_attention_params &p, const vq_attn_tile &t) {
  if (t.last) return vq_attn_tile_at(p, t.unit + 1);
  vq_attn_tile n = t;
  n.t0 = t.t0 + kVqAttnTile;
  n.first = false;
  vq_attn_tile_span(p, n);
  return n;
}

// Starts the copies of tile t's code words (K and V, every residual) into code buffer `stage`,
// laid out [stage][K, V][R][kTile][code_words]: thread i copies the `words` words of token t0 + i's
// rows from word w0 on (the first copy of a row brings its sectors into L1 for the others).
__device__ __forceinline__ void vq_attn_stage_codes(const vq_attention_params &p, const vq_attn_tile &t, int stage,
                                                    uint32_t *codes_s, uint32_t w0, int words) {
  const int64_t n = static_cast<int>(threadIdx.x) < t.count ? vq_attn_row(p, t.b, t.t0 + threadIdx.x) : -1;  // the token's row
  if (n >= 0) {
    for (int kv = 0; kv < 2; kv++)
      for (int r = 0; r < p.residuals; r++) {
        const uint32_t *src = p.codes[kv] + (r * p.N + n) * p.row_words + w0;
        uint32_t *dst = codes_s + ((static_cast<int64_t>(stage * 2 + kv) * p.residuals + r) * kVqAttnTile + threadIdx.x) * p.code_words;
        for (int w = 0; w < words; w++) __pipeline_memcpy_async(dst + w, src + w, 4);
      }
  }
  __pipeline_commit();
}

// Fills the score tables of the head tile's nh query heads (layout [kHeads][R][V][entries], the
// staged q) from the head's K books in global memory: thread i computes the entries i, i + threads,
// ... of every head, reading each entry once.
template <int kVS, typename E, int kHeads>
__device__ __forceinline__ void vq_attn_build_lut(const vq_attention_params &p, const float *q_s, float *lut_s, int g, int nh) {
  const int V = p.vectors, bits = p.bits;
  const int per_res = V << bits, per_head = p.residuals * per_res;
  const int64_t book_elems = static_cast<int64_t>(p.entries) * kVS;
  for (int i = threadIdx.x; i < per_head; i += kVqAttnThreads) {
    const int r = i / per_res, j = (i - r * per_res) >> bits, e = i & (p.entries - 1);
    const int64_t book = r * p.n_books + vq_attn_book(p, g * V + j);
    float ent[kVS];
    vq_load_entry<kVS, true>(E{}, p.books[0] + book * book_elems + static_cast<int64_t>(e) * kVS, ent);
#pragma unroll
    for (int h = 0; h < kHeads; h++) {
      if (h < nh) {
        float qv[kVS];
        vq_attn_load_f32<kVS>(q_s + h * p.D + j * kVS, qv);
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kVS; c++) dot = fmaf(qv[c], ent[c], dot);
        lut_s[h * per_head + i] = dot;
      }
    }
  }
}

template <int kVS, typename E, int kHeads, class Placement, class Scores>
__global__ void __launch_bounds__(kVqAttnThreads, kHeads == 1 ? 2 : 1)
    vq_attention_chunk_kernel(const __grid_constant__ vq_attention_params p) {
  constexpr bool kShared = Placement::kShared, kLut = Scores::kLut;
  constexpr int kVPL = 8 / kVS;  // vectors per lane in the values phase, at most (D <= 256)
  static_assert(kVS == 2 || kVS == 4 || kVS == 8, "vector sizes 2, 4 and 8");
  static_assert(kHeads == 1 || kHeads == 4 || kHeads == 8, "head buckets 1, 4 and 8");

  extern __shared__ __align__(128) uint8_t smem[];  // (128: the banked kernel's TMA ring shares the declaration)
  uint16_t *books_s = reinterpret_cast<uint16_t *>(smem);                            // [K (decode only), V][R][books_per_head][entries][vs]
  float *lut_s = reinterpret_cast<float *>(smem + p.books_bytes);                    // [kHeads][R][V][entries] (LUT only)
  uint32_t *codes_s = reinterpret_cast<uint32_t *>(smem + p.books_bytes + p.lut_bytes);        // [stages][K, V][R][kTile][code_words]
  float *q_s = reinterpret_cast<float *>(smem + p.books_bytes + p.lut_bytes + p.codes_bytes);  // [kHeads][D]
  float *s_s = q_s + kHeads * p.D;                                                   // [kHeads][kTile]: scores, then p
  float *m_s = s_s + kHeads * kVqAttnTile;                                           // [kHeads] running max
  float *l_s = m_s + kHeads;                                                         // [kHeads] running sum
  float *c_s = l_s + kHeads;                                                         // [kHeads] this tile's rescale
  float *red_s = c_s + kHeads;                                                       // [warps][D]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int D = p.D, V = p.vectors, R = p.residuals, bits = p.bits;
  const uint32_t mask = (1u << bits) - 1u;
  const int g = blockIdx.y / p.head_tiles, head_tile = blockIdx.y - g * p.head_tiles;
  const int hq0 = g * p.group + head_tile * kHeads, nh = min(kHeads, p.group - head_tile * kHeads);

  // Head g's indices in a code row: bits [head_bit, head_bit + V * bits), words w0 .. w0 + words - 1.
  const uint32_t head_bit = static_cast<uint32_t>(g) * static_cast<uint32_t>(V) * static_cast<uint32_t>(bits);
  const uint32_t w0 = head_bit >> 5, b_off = head_bit & 31u;
  const int words = static_cast<int>(((head_bit + static_cast<uint32_t>(V * bits) + 31u) >> 5) - w0);
  const int first_book = vq_attn_book(p, g * V);

  // ---- codebooks: the head's books (SC: K and V, or V only with the LUT), or pointers into global memory (GC) ----
  const int64_t book_elems = static_cast<int64_t>(p.entries) * kVS;
  const uint16_t *kbooks, *vbooks;
  int64_t res_stride;
  if constexpr (kShared) {
    constexpr int kFirst = kLut ? 1 : 0;  // the LUT reads no K entry in the scoring loop
    res_stride = p.books_per_head * book_elems;
    kbooks = books_s;
    vbooks = books_s + (1 - kFirst) * R * res_stride;
    const int64_t n = (vq_attn_book(p, g * V + V - 1) - first_book + 1) * book_elems;  // this head's books
    for (int kv = kFirst; kv < 2; kv++)
      for (int r = 0; r < R; r++) {
        const uint16_t *src = p.books[kv] + (r * p.n_books + first_book) * book_elems;
        uint16_t *dst = books_s + ((kv - kFirst) * R + r) * res_stride;
        if (book_elems % 8 == 0) {  // whole books of 16-byte multiples: 16-byte copies
          for (int64_t i = tid; i < n / 8; i += kVqAttnThreads)
            reinterpret_cast<uint4 *>(dst)[i] = __ldg(reinterpret_cast<const uint4 *>(src) + i);
        } else {
          for (int64_t i = tid; i < n; i += kVqAttnThreads) dst[i] = src[i];
        }
      }
    // visible after the first tile's barriers
  } else {
    res_stride = p.n_books * book_elems;
    kbooks = p.books[0] + first_book * book_elems;
    vbooks = p.books[1] + first_book * book_elems;
  }

  // ---- this block's run of units ----
  const int u_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * p.units / gridDim.x);
  const int u_end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * p.units / gridDim.x);
  if (u_begin >= u_end) return;

  // Values phase: this lane's token slot and vectors j0 + i, their code words, shifts and books.
  const int lanes_per_token = 1 << p.lane_shift, slot = lane >> p.lane_shift, lit = lane & (lanes_per_token - 1);
  const int slots = kVqAttnWarps * (32 >> p.lane_shift);  // tokens in flight per step of the block
  const int vpl = p.vectors_per_lane, j0 = lit * vpl;
  int v_word[kVPL], v_book[kVPL];
  uint32_t v_shift[kVPL];
  bool v_hi[kVPL], v_on[kVPL];
#pragma unroll
  for (int i = 0; i < kVPL; i++) {
    const uint32_t bit = b_off + static_cast<uint32_t>((j0 + i) * bits);
    v_on[i] = i < vpl && j0 + i < V;
    v_word[i] = static_cast<int>(bit >> 5), v_shift[i] = bit & 31u;
    v_hi[i] = v_shift[i] + static_cast<uint32_t>(bits) > 32u;  // the index straddles two words, both in the row
    v_book[i] = v_on[i] ? static_cast<int>((vq_attn_book(p, g * V + j0 + i) - first_book) * book_elems) : 0;
  }

  float acc[kHeads][kVPL][kVS];
  vq_zero(acc);

  int64_t lut_b = -1;  // the batch entry the score tables were built for
  vq_attn_tile t = vq_attn_tile_at(p, u_begin);
  if (p.stages == 2) vq_attn_stage_codes(p, t, 0, codes_s, w0, words);
  for (int it = 0; t.unit < u_end; it++, t = vq_attn_next(p, t)) {
    const int stage = p.stages == 2 ? (it & 1) : 0;
    __syncthreads();  // every thread is done with the previous tile (its code buffer, scores, q, tables)
    if (p.stages == 2) {
      const vq_attn_tile next = vq_attn_next(p, t);
      if (next.unit < u_end) vq_attn_stage_codes(p, next, stage ^ 1, codes_s, w0, words);
      else __pipeline_commit();  // an empty group keeps the count: this tile's group is the one before last
      __pipeline_wait_prior(1);
    } else {
      vq_attn_stage_codes(p, t, 0, codes_s, w0, words);
      __pipeline_wait_prior(0);
    }
    if (t.first) {  // a new unit: its query heads, scaled; empty running statistics
      const int64_t qrow = t.b * p.q_ld + static_cast<int64_t>(hq0) * D;
      for (int i = tid; i < kHeads * D; i += kVqAttnThreads)
        q_s[i] = i < nh * D ? vq_load_as_f32(p.q, p.q_dtype, qrow + i) * p.q_scale : 0.0f;
      if (tid < kHeads) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
    }
    __syncthreads();  // codes landed (every thread's copies), q staged
    if constexpr (kLut) {
      if (t.count > 0 && t.b != lut_b) {  // the same for every thread: a new batch entry's query heads
        vq_attn_build_lut<kVS, E, kHeads>(p, q_s, lut_s, g, nh);
        lut_b = t.b;
        __syncthreads();
      }
    }

    // ---- scores: thread tid scores token t0 + tid against every head ----
    if (tid < t.count) {
      const uint32_t *rows[kVqAttnMaxResiduals];
#pragma unroll
      for (int r = 0; r < kVqAttnMaxResiduals; r++)
        rows[r] = codes_s + ((static_cast<int64_t>(stage * 2) * R + (r < R ? r : 0)) * kVqAttnTile + tid) * p.code_words;
      vq_attn_reader rd;
      rd.start(rows, R, b_off, static_cast<uint32_t>(words));
      float dot[kHeads];
#pragma unroll
      for (int h = 0; h < kHeads; h++) dot[h] = 0.0f;
      if constexpr (kLut) {
        const int per_res = V << bits, per_head = R * per_res;
#pragma unroll 4  // independent table loads in flight
        for (int j = 0; j < V; j++) {
          const float *lut_j = lut_s + (j << bits);
#pragma unroll
          for (int r = 0; r < kVqAttnMaxResiduals; r++) {
            if (r < R) {
              const float *lut_jr = lut_j + r * per_res + rd.index(r, mask);
#pragma unroll
              for (int h = 0; h < kHeads; h++)
                if (h < nh) dot[h] += lut_jr[h * per_head];
            }
          }
          rd.advance(rows, R, bits, static_cast<uint32_t>(words));
        }
      } else {
#pragma unroll 4  // independent entry loads in flight
        for (int j = 0; j < V; j++) {
          float kv[kVS];
          const int64_t book_off = static_cast<int64_t>(vq_attn_book(p, g * V + j) - first_book) * book_elems;
          vq_attn_decode<kVS, !kShared, E>(kbooks, res_stride, book_off, rd, R, mask, kv);
          rd.advance(rows, R, bits, static_cast<uint32_t>(words));
#pragma unroll
          for (int h = 0; h < kHeads; h++) {
            if (h < nh) {
              float qv[kVS];
              vq_attn_load_f32<kVS>(q_s + h * D + j * kVS, qv);
#pragma unroll
              for (int c = 0; c < kVS; c++) dot[h] = fmaf(qv[c], kv[c], dot[h]);
            }
          }
        }
      }
      const bool lost = p.block_table && vq_attn_row(p, t.b, t.t0 + tid) < 0;  // a page outside the cache: NaN
#pragma unroll
      for (int h = 0; h < kHeads; h++)
        if (h < nh) s_s[h * kVqAttnTile + tid] = lost ? NAN : dot[h];
    }
    __syncthreads();

    // ---- online softmax, one warp per head ----
    for (int h = warp; h < nh; h += kVqAttnWarps) {
      float *s = s_s + h * kVqAttnTile;
      float mx = -INFINITY;
      for (int i = lane; i < t.count; i += 32) mx = fmaxf(mx, s[i]);
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
      const float m_old = m_s[h], m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no finite score yet: p = exp2(s) is 0 or NaN
      float sum = 0.0f;
      for (int i = lane; i < t.count; i += 32) {
        const float pr = exp2f(s[i] - m_use);
        s[i] = pr;
        sum += pr;
      }
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
      if (lane == 0) {  // lane 0's sum: the same order every run
        const float corr = exp2f(m_old - m_use);
        l_s[h] = l_s[h] * corr + sum;
        c_s[h] = corr;
        m_s[h] = m_new;
      }
    }
    __syncthreads();

    // ---- values: acc = acc * corr + sum_t p_t V_t over this lane's tokens and vectors ----
#pragma unroll
    for (int h = 0; h < kHeads; h++) {
      const float corr = h < nh ? c_s[h] : 1.0f;
#pragma unroll
      for (int i = 0; i < kVPL; i++)
#pragma unroll
        for (int c = 0; c < kVS; c++) acc[h][i][c] *= corr;
    }
    if (j0 < V) {
      const uint32_t *vrows = codes_s + static_cast<int64_t>(stage * 2 + 1) * R * kVqAttnTile * p.code_words;
      const int res_words = kVqAttnTile * p.code_words;  // from one residual's rows to the next
#pragma unroll 2
      for (int tok = warp * (32 >> p.lane_shift) + slot; tok < t.count; tok += slots) {
        const uint32_t *row = vrows + tok * p.code_words;
        float pw[kHeads];
#pragma unroll
        for (int h = 0; h < kHeads; h++) pw[h] = h < nh ? s_s[h * kVqAttnTile + tok] : 0.0f;
#pragma unroll
        for (int i = 0; i < kVPL; i++) {
          if (v_on[i]) {
            float vv[kVS];
#pragma unroll
            for (int c = 0; c < kVS; c++) vv[c] = 0.0f;
#pragma unroll
            for (int r = 0; r < kVqAttnMaxResiduals; r++) {  // entries summed in residual order, as the CPU's decode
              if (r < R) {
                const uint32_t *rr = row + r * res_words;
                const uint32_t idx = __funnelshift_r(rr[v_word[i]], v_hi[i] ? rr[v_word[i] + 1] : 0u, v_shift[i]) & mask;
                float e[kVS];
                vq_load_entry<kVS, !kShared>(E{}, vbooks + r * res_stride + v_book[i] + static_cast<int64_t>(idx) * kVS, e);
#pragma unroll
                for (int c = 0; c < kVS; c++) vv[c] += e[c];
              }
            }
#pragma unroll
            for (int h = 0; h < kHeads; h++)
#pragma unroll
              for (int c = 0; c < kVS; c++) acc[h][i][c] = fmaf(pw[h], vv[c], acc[h][i][c]);
          }
        }
      }
    }

    // ---- end of a unit: add the lanes and warps that hold the same channels, write the partials ----
    if (t.last) {
#pragma unroll
      for (int h = 0; h < kHeads; h++)
#pragma unroll
        for (int i = 0; i < kVPL; i++)
#pragma unroll
          for (int c = 0; c < kVS; c++)
            for (int d = lanes_per_token; d < 32; d <<= 1) acc[h][i][c] += __shfl_xor_sync(0xffffffffu, acc[h][i][c], d);
      const int64_t part0 = (t.b * p.Hq + hq0) * p.n_chunks + t.chunk;  // head hq0's partial of this unit
#pragma unroll
      for (int h = 0; h < kHeads; h++) {
        if (h >= nh) break;
        if (slot == 0) {
#pragma unroll
          for (int i = 0; i < kVPL; i++)
            if (i < vpl && j0 + i < V)
#pragma unroll
              for (int c = 0; c < kVS; c++) red_s[warp * D + (j0 + i) * kVS + c] = acc[h][i][c];
        }
        __syncthreads();
        const int64_t part = part0 + static_cast<int64_t>(h) * p.n_chunks;
        for (int d = tid; d < D; d += kVqAttnThreads) {
          float sum = 0.0f;
#pragma unroll
          for (int w = 0; w < kVqAttnWarps; w++) sum += red_s[w * D + d];
          p.part_o[part * D + d] = sum;
        }
        if (tid == 0) p.part_ml[part * 2] = m_s[h], p.part_ml[part * 2 + 1] = l_s[h];
        __syncthreads();  // red_s is free again
      }
      vq_zero(acc);
    }
  }
}

// The LSE rule over n chunk partials (m_c, l_c, o~_c) in chunk order: M = max_c m_c, w_c =
// exp2(m_c - M), L = sum_c w_c l_c; store(d, sum_c w_c o~_c[d] / L) for d = d0, d0 + step, ...
// below D; returns lse = ln 2 (M + log2 L). m(c), l(c) and o(c, d) give the partials. The merge
// kernel and the banked kernel's own merges (vq_attention_banked.cuh) share it: the same bits.
// An entry with no token (`empty`) gets o = 0 and lse = -inf.
template <typename Mf, typename Lf, typename Of, typename Store>
__device__ __forceinline__ float vq_attn_merge(bool empty, int n, Mf m, Lf l, Of o, int d0, int step, int D, Store store) {
  if (empty) {
    for (int d = d0; d < D; d += step) store(d, 0.0f);
    return -INFINITY;
  }
  float M = -INFINITY;
  for (int c = 0; c < n; c++) M = fmaxf(M, m(c));
  float L = 0.0f;
  for (int c = 0; c < n; c++) L = fmaf(exp2f(m(c) - M), l(c), L);
  for (int d = d0; d < D; d += step) {
    float a = 0.0f;
    for (int c = 0; c < n; c++) a = fmaf(exp2f(m(c) - M), o(c, d), a);
    store(d, a / L);
  }
  return (M + log2f(L)) * 0.693147180559945309f;
}

// o[b, h] and lse[b, h] from the (b, h)'s chunks (vq_attn_merge), each (b, h) by one block.
template <typename Out>
__global__ void __launch_bounds__(128) vq_attention_merge_kernel(const __grid_constant__ vq_attention_merge_params p) {
  const int64_t bh = blockIdx.x, b = bh / p.Hq, h = bh - b * p.Hq;
  const float *ml = p.part_ml + bh * p.n_chunks * 2;
  const float *po = p.part_o + bh * p.n_chunks * p.D;
  Out *o = static_cast<Out *>(p.o) + b * p.o_ld + h * p.D;
  const float lse = vq_attn_merge(
      vq_attn_len(p.kv_lens, p.seq_len, b) == 0, p.n_chunks, [&](int c) { return ml[2 * c]; }, [&](int c) { return ml[2 * c + 1]; },
      [&](int c, int d) { return po[static_cast<int64_t>(c) * p.D + d]; }, static_cast<int>(threadIdx.x),
      static_cast<int>(blockDim.x), p.D, [&](int d, float v) { vq_store(o + d, v); });
  if (threadIdx.x == 0) p.lse[bh] = lse;
}
