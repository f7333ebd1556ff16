/* Launch plan of the VQ attention decode kernels (vq_attention.cuh): how scores are formed, where
 * the codebooks live, how many query heads a block serves, the shared-memory layout, and how the
 * sequence is cut into chunks. Host code only, C and C++: the kernels see the result through their
 * parameters.
 *
 * NOTES:
 * - The unit of work is (batch entry, chunk of tokens) for one kv head; a block owns a contiguous
 *   run of units of one head tile, so what it stages once (the head's codebooks in shared
 *   placement) serves every unit of the run. CQ codebooks belong to channels and are shared by all
 *   tokens, so a run may cross batch entries.
 * - Scores, a technique switch for the ablation: QF_VQ_ATTN_SCORES_DECODE decodes each K vector
 *   and dots it with q; QF_VQ_ATTN_SCORES_LUT builds, per query head and batch entry, the table of
 *   q-part . entry for every (vector, entry) of the head's K books (heads x residuals x D / vs x
 *   entries fp32 in shared memory: 32 KB per head for CQ-2 at D = 128, 64 KB for CQ-4) and sums
 *   one table value per K index. The K books then never enter shared memory: the table is built
 *   from global memory. The LUT takes fewer query heads per block when the table of the whole
 *   bucket does not fit.
 * - Chunks: as few as give every head tile enough blocks to fill the device QF_VQ_ATTN_WAVES times
 *   (blocks per SM from the occupancy calculator; the banked kernel's halves once: each of its
 *   blocks copies the V books and builds a table first, CQ-4 at batch 8 x 4096 72.5 -> 64.9 us),
 *   never shorter than a tile of QF_VQ_ATTN_TILE tokens. Fewer chunks
 *   means less partial (m, l, o) traffic through the workspace, a cheaper merge and, with the LUT,
 *   fewer table builds.
 * - Shared placement (the paper's SC) copies the head's books into every block: K and V with the
 *   decoded scores (2 x residuals x books_per_head x entries x vector_size entries, 128 KB for
 *   CQ-2 and CQ-4 at D = 128), V only with the LUT (64 KB); global placement (GC) reads each
 *   lookup through L1 / L2 instead, and is what remains when the books do not fit.
 * - Auto, from the bench's GC / SC / GC+LUT / SC+LUT rows (H200, Llama-7B heads, CQ-2 and CQ-4,
 *   seq_len 1024 / 4096, batch 1 / 8): a block is busy when it looks each entry of a book up at
 *   least QF_VQ_ATTN_BUSY_USES times (its tokens over the entries). Busy blocks want occupancy:
 *   GC (SC's 64-128 KB of books leave one block per SM and lost by 10-20%), and the LUT when
 *   vectors have 4 or more elements (CQ-2 at batch 8: GC+LUT 116 / 350 us against 131 / 446 for
 *   GC; with 2-element vectors, CQ-4, the 64 KB table per head cost more than it saved). Blocks
 *   that are not busy (batch 1, 1024 tokens) are few, and SC's one copy of the books serves them
 *   best (CQ-2: 26.5 us against 43 for GC and 41.7 for GC+LUT).
 * - Code tiles are double-buffered (2 stages) when they fit, else single-buffered; a format whose
 *   single code tile does not fit next to the rest is refused. */
#ifndef QF_CUDA_VQ_ATTENTION_HEURISTIC_H
#define QF_CUDA_VQ_ATTENTION_HEURISTIC_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "cuda/vq/vq_heuristic.h" /* qf_vq_books_placement */

#ifdef __cplusplus
extern "C" {
#endif

#define QF_VQ_ATTN_THREADS 256 /* per block: 8 warps */
#define QF_VQ_ATTN_WARPS (QF_VQ_ATTN_THREADS / 32)
#define QF_VQ_ATTN_TILE 256    /* tokens per tile: one per thread while scoring */
#define QF_VQ_ATTN_MAX_D 256
/* Query heads per block, a compile-time bucket of the group size Hq / Hkv (larger groups take
 * several blocks per kv head, each decoding the head's K and V again). */
#define QF_VQ_ATTN_HEADS_BUCKET(group) ((group) <= 1 ? 1 : (group) <= 4 ? 4 : 8)
#define QF_VQ_ATTN_BUSY_USES 4.0 /* lookups per entry of a book above which a block is "busy" (NOTES) */
#define QF_VQ_ATTN_WAVES 2 /* blocks per SM slot the split aims for */

/* How the kernels form the scores (see NOTES). */
typedef enum {
  QF_VQ_ATTN_SCORES_AUTO = 0,
  QF_VQ_ATTN_SCORES_DECODE = 1,
  QF_VQ_ATTN_SCORES_LUT = 2,
} qf_vq_attn_scores;

typedef struct {
  int64_t B, Hq, Hkv, D, seq_len;
  int vector_size, index_bits, residuals;
  int64_t entries;          /* 2^index_bits */
  int64_t vectors_per_book; /* vectors along a row that share a codebook: scope_cols / vector_size, or the row */
} qf_vq_attention_problem;

typedef struct {
  int placement;        /* QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED or QF_VQ_BOOKS_BANKED */
  int scores;           /* QF_VQ_ATTN_SCORES_DECODE or QF_VQ_ATTN_SCORES_LUT */
  int heads;            /* query heads per block: the kernel's bucket, 1, 4 or 8 (banked: 1, 2 or 4) */
  int head_tiles;       /* blocks along one kv head's query heads: ceil(group / heads) */
  int stages;           /* code tiles in shared memory: 2 (the next one in flight) or 1 */
  int halves;           /* banked: halves of 8 warps per block, each a block of the split (1 elsewhere) */
  int books_per_head;   /* books a kv head's D channels touch, the most over the heads */
  int code_words;       /* 32-bit words per staged code row (odd: conflict-free columns) */
  int lanes_per_token;  /* values phase: lanes sharing a token (a power of two, <= 32) */
  int vectors_per_lane; /* values phase: vectors each of them decodes (<= 8 / vector_size) */
  int64_t chunk_len;    /* tokens per chunk, a multiple of QF_VQ_ATTN_TILE */
  int64_t n_chunks;     /* chunks per sequence */
  int64_t units;        /* B * n_chunks */
  int64_t blocks;       /* blocks per head tile (grid.x; banked: halves), each a contiguous run of units */
  size_t books_bytes;   /* shared memory: codebooks (0 in global placement) */
  size_t lut_bytes;     /* shared memory: the score tables (0 with decoded scores) */
  size_t codes_bytes;   /* shared memory: code tiles */
  size_t smem_bytes;    /* dynamic shared memory per block */
  size_t scratch_bytes; /* workspace: counters, partial o, partial (m, l) */
} qf_vq_attention_config;

static inline int64_t qf_vq_attn_book_of(const qf_vq_attention_problem *pb, int64_t vector) {
  return vector / pb->vectors_per_book;
}

/* Shared memory besides books and codes: q [heads][D], scores [heads][TILE], (m, l, correction)
 * [3][heads], the warps' partial sums [WARPS][D]; fp32, a multiple of 16 bytes. */
static inline size_t qf_vq_attn_fixed_smem(int heads, int64_t D) {
  const size_t floats = (size_t)heads * (size_t)D + (size_t)heads * QF_VQ_ATTN_TILE + 3u * (size_t)heads +
                        (size_t)QF_VQ_ATTN_WARPS * (size_t)D;
  return (floats * 4u + 15u) / 16u * 16u;
}

/* Shared memory of one layout: codebooks, score tables, one code tile, the rest. */
typedef struct {
  size_t books, lut, tile_codes, fixed;
} qf_vq_attn_smem;

static inline int qf_vq_attn_fits(const qf_vq_attn_smem *m, int shared_books, size_t smem_optin) {
  return (shared_books ? m->books : 0u) + m->lut + m->tile_codes + m->fixed <= smem_optin;
}

/* Everything but the split: scores, placement, head tiling, shared-memory layout. placement
 * QF_VQ_BOOKS_AUTO and scores QF_VQ_ATTN_SCORES_AUTO let the heuristic choose. Returns 0 when a
 * forced placement or score technique cannot be honoured or when not even a single-buffered code
 * tile fits (global placement); 1 otherwise. The problem must already satisfy the kernel's limits
 * (vector_size 2, 4 or 8, D a multiple of it and at most QF_VQ_ATTN_MAX_D). */
static inline int qf_vq_attention_layout(const qf_vq_attention_problem *pb, int sm_count, size_t smem_optin,
                                         int placement, int scores, qf_vq_attention_config *cfg) {
  const int64_t V = pb->D / pb->vector_size, group = pb->Hq / pb->Hkv;
  const int bucket = QF_VQ_ATTN_HEADS_BUCKET(group);
  int64_t bph = 1, words = 1;
  for (int64_t g = 0; g < pb->Hkv; g++) {
    const int64_t nb = qf_vq_attn_book_of(pb, g * V + V - 1) - qf_vq_attn_book_of(pb, g * V) + 1;
    const int64_t bit0 = g * V * pb->index_bits, bit1 = bit0 + V * pb->index_bits;
    const int64_t nw = (bit1 + 31) / 32 - bit0 / 32;
    if (nb > bph) bph = nb;
    if (nw > words) words = nw;
  }
  words |= 1;
  const size_t one_book = (size_t)pb->residuals * (size_t)bph * (size_t)pb->entries * (size_t)pb->vector_size * 2u;
  const size_t lut_head = (size_t)pb->residuals * (size_t)V * (size_t)pb->entries * 4u;
  qf_vq_attn_smem m;
  m.tile_codes = 2u * (size_t)pb->residuals * QF_VQ_ATTN_TILE * (size_t)words * 4u; /* K and V */

  /* The LUT: the largest head bucket up to the group's whose tables fit next to a code tile (books
   * in global memory; a shared placement is checked below). */
  int lut_heads = 0;
  for (int h = bucket; h >= 1 && !lut_heads; h = h == 8 ? 4 : h == 4 ? 1 : 0) {
    const qf_vq_attn_smem t = {0u, (size_t)h * lut_head, m.tile_codes, qf_vq_attn_fixed_smem(h, pb->D)};
    if (qf_vq_attn_fits(&t, 0, smem_optin)) lut_heads = h;
  }
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  const int auto_scores = scores == QF_VQ_ATTN_SCORES_AUTO;
  if (auto_scores) {
    /* Tokens scored per block, were each LUT head tile's blocks spread over the SMs. */
    const int64_t tiles = lut_heads ? pb->Hkv * ((group + lut_heads - 1) / lut_heads) : 1;
    const int64_t per_tile = sms / tiles > 1 ? sms / tiles : 1;
    scores = lut_heads && pb->vector_size >= 4 &&
                     (double)(pb->B * pb->seq_len / per_tile) >= QF_VQ_ATTN_BUSY_USES * (double)pb->entries
                 ? QF_VQ_ATTN_SCORES_LUT
                 : QF_VQ_ATTN_SCORES_DECODE;
  }
  if (scores == QF_VQ_ATTN_SCORES_LUT && !lut_heads) return 0;
  if (scores != QF_VQ_ATTN_SCORES_LUT) scores = QF_VQ_ATTN_SCORES_DECODE;
  const int lut = scores == QF_VQ_ATTN_SCORES_LUT, heads = lut ? lut_heads : bucket;
  m.books = ((lut ? 1u : 2u) * one_book + 15u) / 16u * 16u; /* V only with the LUT */
  m.lut = lut ? ((size_t)heads * lut_head + 15u) / 16u * 16u : 0u; /* q, after the codes, is read as float4 */
  m.fixed = qf_vq_attn_fixed_smem(heads, pb->D);
  const int shared_fits = qf_vq_attn_fits(&m, 1, smem_optin);

  if (placement == QF_VQ_BOOKS_AUTO) {
    /* Lookups per copied entry, were each block on its own SM: the tokens of a block (the
     * head tile's share of B * seq_len) times the head's vectors, over the books' entries. */
    const int64_t tiles = pb->Hkv * ((group + heads - 1) / heads);
    const int64_t per_tile = sms / tiles > 1 ? sms / tiles : 1;
    const double uses = (double)(pb->B * pb->seq_len) / (double)per_tile * (double)V / ((double)bph * (double)pb->entries);
    placement = shared_fits && uses < QF_VQ_ATTN_BUSY_USES ? QF_VQ_BOOKS_IN_SHARED : QF_VQ_BOOKS_IN_GLOBAL;
  }
  if (placement != QF_VQ_BOOKS_IN_SHARED) placement = QF_VQ_BOOKS_IN_GLOBAL;
  const int shared = placement == QF_VQ_BOOKS_IN_SHARED;
  if (!qf_vq_attn_fits(&m, shared, smem_optin)) /* a forced shared placement: the decode may still take it */
    return auto_scores && lut ? qf_vq_attention_layout(pb, sm_count, smem_optin, placement, QF_VQ_ATTN_SCORES_DECODE, cfg) : 0;
  const size_t books_used = shared ? m.books : 0u;
  const int stages = books_used + m.lut + 2u * m.tile_codes + m.fixed <= smem_optin ? 2 : 1;

  const int64_t vpl = (V + 31) / 32, active = (V + vpl - 1) / vpl;
  int lpt = 1;
  while (lpt < active) lpt *= 2;

  cfg->placement = placement;
  cfg->scores = scores;
  cfg->heads = heads;
  cfg->halves = 1;
  cfg->head_tiles = (int)((group + heads - 1) / heads);
  cfg->stages = stages;
  cfg->books_per_head = (int)bph;
  cfg->code_words = (int)words;
  cfg->lanes_per_token = lpt;
  cfg->vectors_per_lane = (int)vpl;
  cfg->books_bytes = books_used;
  cfg->lut_bytes = m.lut;
  cfg->codes_bytes = (size_t)stages * m.tile_codes;
  cfg->smem_bytes = books_used + m.lut + cfg->codes_bytes + m.fixed;
  cfg->chunk_len = cfg->n_chunks = cfg->units = cfg->blocks = 0;
  cfg->scratch_bytes = 0;
  return 1;
}

/* The banked kernel (vq_attention_banked.cuh, placement QF_VQ_BOOKS_BANKED): score tables and V
 * books laid out by vector so that a warp's lookups never share a bank. NULL when it can serve the
 * problem's format, else why not (shared memory is checked by the layout). */
static inline const char *qf_vq_attn_banked_refusal(const qf_vq_attention_problem *pb) {
  if (pb->index_bits != 8 || pb->residuals != 1) return "it takes one residual of 8-bit indices";
  if (pb->vector_size != 2 && pb->vector_size != 4) return "it takes vector sizes 2 and 4";
  if (pb->D / pb->vector_size != 32 && (pb->D / pb->vector_size != 64 || pb->vector_size != 2))
    return "it takes heads of 32 vectors (head_dim / vector_size) of 2 or 4 elements, or of 64 of 2";
  if (pb->B * pb->seq_len > INT32_MAX) return "it takes fewer than 2^31 cached tokens (TMA row coordinates)";
  return NULL;
}

/* Query heads per block of the banked kernel: where a kv head's group has an even count of query
 * heads, 4 or 2 of them share a block for 32 vectors of 4 elements (CQ-2 at D = 128; tables of
 * 32 KB each), 2 for 64 vectors of 2 (CQ-4; 64 KB each), whose values phase decodes each V entry
 * once for all of them; one elsewhere. */
static inline int qf_vq_attn_banked_heads(const qf_vq_attention_problem *pb) {
  const int64_t group = pb->Hq / pb->Hkv, S = pb->D / pb->vector_size;
  if (group % 2 != 0) return 1;
  if (S == 32 && pb->vector_size == 4) return group % 4 == 0 ? 4 : 2;
  return S == 64 && pb->vector_size == 2 ? 2 : 1;
}

/* Shared memory of the banked kernel: the score tables, rows of 64 fp32 per entry (256 rows; so
 * that a lookup's byte offset is the index times 256 plus its column: for S = 32 each half's or
 * grouped head's table in 32 of the columns, two per 64 KB of rows, for S = 64 one table per
 * 64 KB, shared by two halves), the V books [256][S] entries (one head of S = 32: then as many
 * bytes again, where the raw V books land during the setup), then per half (8 warps) a code slot
 * of one tile of QF_VQ_ATTN_TILE tokens (K and V rows of S bytes; the warps' partials take the V
 * rows at the end of a unit), the warps' probabilities [heads][TILE] (a grouped block's q
 * during a table build) and the slot's two mbarriers, rounded up to 256 bytes. Two halves when
 * they fit and a block serves one query head (16 warps per SM), else one.
 * Fills everything but the split (cfg->heads query heads per block, qf_vq_attn_banked_heads;
 * cfg->blocks will count halves); 0 when not even one half fits. The format must pass
 * qf_vq_attn_banked_refusal. */
static inline int qf_vq_attention_banked_layout(const qf_vq_attention_problem *pb, size_t smem_optin,
                                                qf_vq_attention_config *cfg) {
  const int64_t S = pb->D / pb->vector_size;
  const int heads = qf_vq_attn_banked_heads(pb);
  const size_t lut = (size_t)(S == 32 ? (heads + 1) / 2 : heads) * 256u * 256u;
  /* the V books, and behind them for one head of S = 32 a place as large for their raw copy (the
   * setup lays them out after the first tile's scores) */
  const size_t books = (S == 32 && heads == 1 ? 2u : 1u) * 256u * (size_t)S * (size_t)pb->vector_size * 2u;
  const size_t tile = (size_t)QF_VQ_ATTN_TILE * 2u * (size_t)S;
  /* the warps' probabilities per head, the code slot's two mbarriers, the setup's two (used in the
   * first half's) and the K part's lost-page mask (paged caches) */
  const size_t fixed = (size_t)heads * QF_VQ_ATTN_TILE * 4u + 40u;
  /* 256-byte aligned: TMA writes the slot (128), the kernel's word addressing (S) */
  const size_t half = (tile + fixed + 255u) / 256u * 256u;
  const int halves = heads == 1 && lut + books + 2u * half <= smem_optin ? 2 : 1;
  if (lut + books + half > smem_optin) return 0;
  cfg->placement = QF_VQ_BOOKS_BANKED;
  cfg->scores = QF_VQ_ATTN_SCORES_LUT;
  cfg->heads = heads;
  cfg->head_tiles = (int)(pb->Hq / pb->Hkv / heads);
  cfg->stages = 2;
  cfg->halves = halves;
  cfg->books_per_head = cfg->code_words = cfg->lanes_per_token = cfg->vectors_per_lane = 0; /* the other kernels' */
  cfg->books_bytes = books;
  cfg->lut_bytes = lut;
  cfg->codes_bytes = tile;
  cfg->smem_bytes = lut + books + (size_t)halves * half;
  cfg->chunk_len = cfg->n_chunks = cfg->units = cfg->blocks = 0;
  cfg->scratch_bytes = 0;
  return 1;
}

/* Bytes of the partial outputs in the workspace, after its counters. */
static inline size_t qf_vq_attn_part_o_bytes(int64_t B, int64_t Hq, int64_t n_chunks, int64_t D) {
  return ((size_t)(B * Hq * n_chunks * D) * 4u + 255u) / 256u * 256u;
}

/* Whether a banked plan's two halves share one table (S = 64: the kernel derives the same from its
 * S and p.halves): they take chunks 2c and 2c + 1 of the same batch entries, so the split makes
 * the chunk count and the halves even where it can. */
static inline int qf_vq_attn_banked_paired(const qf_vq_attention_problem *pb, const qf_vq_attention_config *cfg) {
  return cfg->placement == QF_VQ_BOOKS_BANKED && cfg->halves == 2 && pb->D / pb->vector_size == 64;
}

/* Whether the banked kernel writes o and lse itself, so that the merge kernel does not run
 * (vq_attention_banked.cuh, kFusedMerge and the paired merge): where a unit spans the sequence, in
 * every banked kernel but the grouped ones of S = 32, and where a block's paired halves hold the
 * two chunks of a (b, h). */
static inline int qf_vq_attn_banked_writes_o(const qf_vq_attention_problem *pb, const qf_vq_attention_config *cfg) {
  if (cfg->placement != QF_VQ_BOOKS_BANKED) return 0;
  if (cfg->n_chunks == 1) return cfg->heads == 1 || pb->D / pb->vector_size == 64;
  return qf_vq_attn_banked_paired(pb, cfg) && cfg->n_chunks == 2;
}

/* Whether the banked kernel can do qf_vq_attention_decode_append's append itself
 * (vq_attention_banked.cuh, kAppend), from the final plan (after qf_vq_attention_banked_fill): in
 * its blocks that set up by bulk copies, one query head of S = 32, or of S = 64 in paired halves, 4
 * grouped heads of S = 32, 2 of S = 64. */
static inline int qf_vq_attn_banked_can_append(const qf_vq_attention_problem *pb, const qf_vq_attention_config *cfg) {
  const int64_t S = pb->D / pb->vector_size;
  if (cfg->placement != QF_VQ_BOOKS_BANKED) return 0;
  if (cfg->heads == 1) return S == 32 || cfg->halves == 2;
  return (S == 32 && cfg->heads == 4) || (S == 64 && cfg->heads == 2);
}

/* Whether it does: one-head blocks wherever they can; grouped ones where the batch's new tokens
 * (one per entry in each head tile) are at least a quarter (S = 32) or as many (S = 64) as a head
 * tile's blocks, and with packed V books (v_packed) wherever they can, since the encoder takes the
 * standard books only. A grouped block that holds a new token encodes it in its setup, so with
 * fewer of them those finish behind the others: H200, Hq = 32 over 8 kv heads at 4096 tokens (16
 * and 8 blocks per head tile), one call against two, fused at batch 1 / 2 / 4 / 8: CQ-2
 * 0.95-1.01x / 0.98x / 1.04x / 1.16x, CQ-4 0.95x / 0.95x / 0.985x / 1.05x. The one-head CQ-4 steps
 * lose more on the encoder first (Hq = Hkv = 32 at batch 1 to 4: 0.97-0.99x against 0.96-1.04x
 * fused; docs/VQ.md). */
static inline int qf_vq_attn_banked_appends(const qf_vq_attention_problem *pb, const qf_vq_attention_config *cfg,
                                            int v_packed) {
  const int64_t S = pb->D / pb->vector_size;
  if (!qf_vq_attn_banked_can_append(pb, cfg)) return 0;
  if (v_packed || cfg->heads == 1) return 1;
  return (S == 32 ? 4 * pb->B : pb->B) >= cfg->blocks;
}

/* The split, once the occupancy of the chosen kernel is known (blocks_per_sm >= 1): chunks,
 * units, blocks per head tile and workspace bytes (counters_bytes first, left untouched). */
static inline void qf_vq_attention_split(const qf_vq_attention_problem *pb, int sm_count, int blocks_per_sm,
                                         size_t counters_bytes, qf_vq_attention_config *cfg) {
  const int64_t sms = sm_count > 0 ? sm_count : 1, per_sm = blocks_per_sm > 0 ? blocks_per_sm : 1;
  const int64_t tiles = pb->Hkv * cfg->head_tiles;
  /* blocks per head tile: two waves, so that a block's run is short next to the whole; one wave of
   * halves for the banked kernel, whose blocks pay a setup each (the V books, a table) */
  const int64_t slots = cfg->placement == QF_VQ_BOOKS_BANKED ? sms * per_sm * cfg->halves : QF_VQ_ATTN_WAVES * sms * per_sm;
  const int64_t want = slots / tiles > 1 ? slots / tiles : 1;
  const int64_t seq_tiles = (pb->seq_len + QF_VQ_ATTN_TILE - 1) / QF_VQ_ATTN_TILE;
  const int paired = qf_vq_attn_banked_paired(pb, cfg);
  int64_t n_chunks = (want + pb->B - 1) / pb->B;
  if (n_chunks > seq_tiles) n_chunks = seq_tiles;
  if (paired && n_chunks % 2 != 0) n_chunks += n_chunks < seq_tiles ? 1 : -1;
  if (n_chunks < 1) n_chunks = 1;
  cfg->chunk_len = (seq_tiles + n_chunks - 1) / n_chunks * QF_VQ_ATTN_TILE;
  cfg->n_chunks = (pb->seq_len + cfg->chunk_len - 1) / cfg->chunk_len; /* no empty chunk */
  cfg->units = pb->B * cfg->n_chunks;
  cfg->blocks = cfg->units < want ? cfg->units : want;
  if (paired && cfg->blocks % 2 != 0 && cfg->blocks > 1) cfg->blocks--;
  cfg->scratch_bytes = counters_bytes + qf_vq_attn_part_o_bytes(pb->B, pb->Hq, cfg->n_chunks, pb->D) +
                       (size_t)(pb->B * pb->Hq * cfg->n_chunks) * 2u * 4u;
}

/* After the split, a banked plan of two halves per block with no more halves than SMs (short
 * sequences: units are whole tiles of QF_VQ_ATTN_TILE tokens) runs one half per block instead: a
 * block per SM, not half the SMs idle (CQ-2 at batch 1 x 1024: 10.2 -> 8.7 us on an H200). Not
 * where the halves share a table (S = 64) and pair up: a lone S = 64 half builds its table from
 * book chunks, a pair from one bulk copy of the books for two halves, which beats the idle SMs
 * (CQ-4 at batch 1 x 1024: 13.4 -> 12.3 us, 64 blocks of two halves instead of 128 of one). A
 * plan whose halves share a table but whose chunks or halves do not pair up always runs one half
 * per block. Returns 1 when it changed the plan. */
static inline int qf_vq_attention_banked_fill(qf_vq_attention_config *cfg, const qf_vq_attention_problem *pb, int sm_count) {
  if (cfg->placement != QF_VQ_BOOKS_BANKED || cfg->halves != 2) return 0;
  const int paired = qf_vq_attn_banked_paired(pb, cfg);
  const int unpaired = paired && (cfg->n_chunks % 2 != 0 || cfg->blocks % 2 != 0);
  if (!unpaired && (paired || cfg->blocks * pb->Hkv * cfg->head_tiles > (int64_t)sm_count)) return 0;
  const size_t shared = cfg->lut_bytes + cfg->books_bytes; /* the block's, then the halves' */
  cfg->smem_bytes = shared + (cfg->smem_bytes - shared) / 2u;
  cfg->halves = 1;
  return 1;
}

/* qf_cuda_vq_attention_decode with the codebook placement (QF_VQ_BOOKS_AUTO: the heuristic's) and
 * the score technique (QF_VQ_ATTN_SCORES_AUTO: the heuristic's) forced, for the ablation and the
 * tests. QF_ERR_UNSUPPORTED when a forced choice cannot be used. When `used` is not NULL it
 * receives the launch plan. */
qf_status qf_cuda_vq_attention_decode_with(qf_ctx *ctx, const qf_vq_attention_args *a, int placement, int scores,
                                           qf_vq_attention_config *used);

#ifdef __cplusplus
}
#endif

#endif
