/* Launch shape of the VQ-GeMV / VQ-GeMM kernel (vq_gemm.cuh): the x tile of a warp, where the
 * codebooks live, the tensor-core operand type and the 16-bit parts of x and of the entries, and
 * the shared memory. Host code only, C and C++: the kernel sees the result through its
 * parameters, never this logic. The placement enum is shared with VQ attention.
 *
 * NOTES:
 * - A warp computes 16 rows of W by 8 x m_tiles8 rows of x (m_tiles8 = 1 for M <= 8, 2 for
 *   M <= 16: the GeMV; 4 for the GeMM). A block's 8 warps form 8 / warps_k row groups (tile
 *   height 16 x 8 / warps_k) whose warps_k warps split K by chunks of 256 columns and add their
 *   partial sums in shared memory in a fixed order (a call repeats bit for bit). The tallest tile
 *   that still gives nearly two blocks per SM wins: small N splits K 8 ways to fill the SMs, large
 *   N or M lets up to 8 row groups share each x fragment through L1.
 * - Shared placement (the paper's SC) copies the books of a tile's row scope into shared memory
 *   when a block's run of tiles enters a new scope (the tile height divides scope_rows, or one
 *   scope): blocks are persistent then, so each copy serves every tile of the run. Global
 *   placement (GC) reads each row's own entries through L1/L2 and runs one block per tile.
 * - At M <= 16 the router (vq_gemm.cu) first tries the banked GeMV (vq_gemv_banked.cu, its own
 *   launch shape and split-K); what follows is the launch shape of the other placements.
 * - AUTO picks shared when a block looks each copied entry up at least once on average and the
 *   books leave room for two blocks per SM; AQLM-3's two 4096-entry books (128 KB) do not.
 * - Exact operands (docs/VQ.md): fp16 tensor cores when x and the entries are fp16, else bf16
 *   with x in x_parts bf16 parts (fp32: 3, fp16: 2, bf16: 1) and fp16 entries in 2 parts. */
#ifndef QF_CUDA_VQ_HEURISTIC_H
#define QF_CUDA_VQ_HEURISTIC_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the kernels read codebook entries: the kernel policies CodebookInGlobal (through L1/L2)
 * and CodebookInShared (the row scope's books copied into shared memory); for VQ-GeMV also
 * BANKED, the kernel of vq_gemv_banked.cu (one book at a time in shared memory as 128 / entry
 * bytes bank-private copies, the block's warps on that book together, split-K over blocks); for
 * VQ-GeMM also TILED, the kernel of vq_gemm_tiled.cu (each k-step's books staged in shared memory
 * and W decoded there once per block tile, then mma.sync against x tiles); for VQ-GeMV at M = 1 to
 * 4 also LUT, the kernel of vq_gemv_lut.cu (tables of entry . x products in shared memory, one
 * lookup per vector of a row; one book per residual) or of vq_gemv_lut_tiles.cu (books scoped to
 * tiles of W); for VQ-GeMV also REGISTERS, CodebookHotInRegisters:
 * IN_SHARED with the codebook cache's register tier (the 32 hottest entries of a warp's book in
 * registers, read by shuffle; qf_vq_hot_ok says where it applies). */
typedef enum {
  QF_VQ_BOOKS_AUTO = 0,
  QF_VQ_BOOKS_IN_GLOBAL = 1,
  QF_VQ_BOOKS_IN_SHARED = 2,
  QF_VQ_BOOKS_BANKED = 3,
  QF_VQ_BOOKS_TILED = 4,
  QF_VQ_BOOKS_LUT = 5,
  QF_VQ_BOOKS_REGISTERS = 6,
} qf_vq_books_placement;

#define QF_VQ_GEMV_MAX_M 16
#define QF_VQ_MMA_WARPS 8      /* per block; they split K */
#define QF_VQ_MMA_TILE_N 16    /* rows of W per block tile: one m16 of the MMA */
#define QF_VQ_MMA_CHUNK 256    /* columns of K per chunk, a warp's unit of work */
/* The kernels' compile-time vector sizes (others run the element-wise path, 0). */
#define QF_VQ_MMA_VS_BUCKET(vs) ((vs) == 2 || (vs) == 4 || (vs) == 8 ? (vs) : 0)

typedef struct {
  int64_t M, N, K;
  int vector_size, index_bits, residuals, scope_rows, scope_cols;
  int64_t books_per_row, entries;
  int x_dtype, entry_dtype; /* qf_dtype */
  int lattice;              /* qf_vq_format.lattice (the E8P decoder) */
} qf_vq_mma_problem;

/* The E8P decoder's pattern table in shared memory: 8 copies of 256 patterns of 16 bytes,
 * interleaved so that the 8 lanes of a quarter warp read 8 different bank groups (vq_e8p.cuh). The
 * general kernel stages it for x tiles of 32 rows (QF_VQ_E8P_SHARED; x tiles of 8 and 16 read it
 * through L1); the E8P GeMV and the tiled GeMM's E8P decoder always stage it. */
#define QF_VQ_E8P_TABLE_BYTES (256 * 8 * 16)
#define QF_VQ_E8P_SHARED(m_tiles8) ((m_tiles8) == 4)

typedef struct {
  int m_tiles8;        /* 1, 2 or 4: n8 tiles of x per block tile (the kernel's compile-time shape) */
  int tile_n, tile_m;  /* rows of W (16 x 8 / warps_k) and of x per block tile */
  int placement;       /* QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED or QF_VQ_BOOKS_REGISTERS */
  int mma_bf16;        /* 0: fp16 tensor-core operands, 1: bf16 */
  int x_parts;         /* 16-bit parts of x: 1, 2 or 3 */
  int entry_parts;     /* 16-bit parts of an entry: 1 or 2 */
  int warps;           /* per block: 8 / warps_k row groups of 16 rows of W, each of warps_k warps */
  int warps_k;         /* warps of a row group, splitting K */
  int x_direct;        /* B fragments loaded straight from x (set by the launcher: x of the MMA's type, 8-byte
                          aligned rows, K % 4 == 0); else element by element */
  int64_t tiles_n, tiles_m, tiles;
  size_t books_bytes;  /* shared-memory books of one row scope (0 in global placement) */
  size_t red_bytes;    /* the warps' partial sums */
  size_t smem_bytes;   /* dynamic shared memory per block (with the E8P table, QF_VQ_E8P_SHARED) */
  int splits;          /* K ranges per row tile over blocks (banked placement; 1 otherwise) */
} qf_vq_mma_config;
typedef qf_vq_mma_config qf_vq_gemv_config;

/* Whether the register tier (QF_VQ_BOOKS_REGISTERS) applies: 8-bit indices and vector size 2
 * or 4 (the decoders it has), 32 entries or more, and one book for a warp's 16 rows (scope_rows 0
 * or a multiple of 16) and a chunk's 256 columns (scope_cols 0 or a multiple of 256), so that
 * every lane of a warp looks up the same book. */
static inline int qf_vq_hot_ok(const qf_vq_mma_problem *pb) {
  return !pb->lattice && pb->index_bits == 8 && (pb->vector_size == 2 || pb->vector_size == 4) && pb->entries >= 32 &&
         pb->scope_rows % QF_VQ_MMA_TILE_N == 0 && pb->scope_cols % QF_VQ_MMA_CHUNK == 0;
}

/* Whether the register tier runs this problem with x tiles of m_tiles8 n8 tiles: where
 * qf_vq_hot_ok says so, for the VQ-GeMV's x tiles (8 or 16 rows). */
static inline int qf_vq_hot_fits(const qf_vq_mma_problem *pb, int m_tiles8) { return qf_vq_hot_ok(pb) && m_tiles8 <= 2; }

/* A tile height (rows of W per block) the kernel has: 16 x 8 / warps_k. */
static inline int qf_vq_mma_tile_ok(int bn) { return bn == 16 || bn == 32 || bn == 64 || bn == 128; }

/* Fills *cfg for the problem on a device of sm_count SMs and smem_optin bytes of shared memory
 * per block, for an x tile of m_tiles8 n8 tiles (1, 2 or 4). placement QF_VQ_BOOKS_AUTO lets the
 * heuristic choose; bn 16, 32, 64 or 128 forces the tile height (0: the heuristic's). Returns 0
 * when what is forced cannot be used (a bn the kernel lacks; shared or register placement with
 * books that do not fit next to the partial sums, or a scope_rows that the tile height does not
 * divide; the register tier where qf_vq_hot_ok says no, or for x tiles of 32 rows), 1 otherwise. */
static inline int qf_vq_mma_pick(const qf_vq_mma_problem *pb, int sm_count, size_t smem_optin, int placement,
                                 int m_tiles8, int bn, qf_vq_mma_config *cfg) {
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  const int f16_mma = pb->x_dtype == QF_F16 && pb->entry_dtype == QF_F16;
  const size_t red = (size_t)QF_VQ_MMA_WARPS * (size_t)m_tiles8 * 128u * 4u;
  const size_t table = pb->lattice && QF_VQ_E8P_SHARED(m_tiles8) ? QF_VQ_E8P_TABLE_BYTES : 0;
  const size_t books = ((size_t)pb->residuals * (size_t)pb->books_per_row * (size_t)pb->entries *
                            (size_t)pb->vector_size * 2u + 15u) / 16u * 16u;
  const int books_fit = books + table + red <= smem_optin && (pb->scope_rows == 0 || pb->scope_rows % QF_VQ_MMA_TILE_N == 0);
  const int64_t tiles_m = (pb->M + 8 * m_tiles8 - 1) / (8 * m_tiles8);
  const int64_t tiles16 = (pb->N + QF_VQ_MMA_TILE_N - 1) / QF_VQ_MMA_TILE_N * tiles_m;
  if (bn != 0 && !qf_vq_mma_tile_ok(bn)) return 0;

  if (placement == QF_VQ_BOOKS_AUTO) {
    /* Lookups per copied entry: a block's rows (its run of tiles over two blocks per SM, within
     * one row scope) times the vectors of a row, over the entries of the scope's books. */
    int64_t rows = (tiles16 + 2 * sms - 1) / (2 * sms) * QF_VQ_MMA_TILE_N;
    if (rows > pb->N) rows = pb->N;
    if (pb->scope_rows && rows > pb->scope_rows) rows = pb->scope_rows;
    const double uses = (double)rows * (double)(pb->K / pb->vector_size) /
                        ((double)pb->books_per_row * (double)pb->entries);
    placement = books_fit && books + table + red <= smem_optin / 2 && uses >= 1.0 && (!bn || !pb->scope_rows ||
                pb->scope_rows % bn == 0) ? QF_VQ_BOOKS_IN_SHARED : QF_VQ_BOOKS_IN_GLOBAL;
  }
  if (placement == QF_VQ_BOOKS_REGISTERS && !qf_vq_hot_fits(pb, m_tiles8)) return 0;
  if ((placement == QF_VQ_BOOKS_IN_SHARED || placement == QF_VQ_BOOKS_REGISTERS) && !books_fit) return 0;
  if (placement != QF_VQ_BOOKS_IN_SHARED && placement != QF_VQ_BOOKS_REGISTERS) placement = QF_VQ_BOOKS_IN_GLOBAL;
  const int shared = placement != QF_VQ_BOOKS_IN_GLOBAL;

  /* Tile height: the tallest (the most row groups sharing each x fragment) that still gives
   * nearly two blocks per SM, else 16; in shared placement one that divides scope_rows. */
  int tile = 0;
  for (int b = 128; b >= 16 && !tile; b /= 2) {
    if (bn && b != bn) continue;
    if (shared && pb->scope_rows && pb->scope_rows % b) continue;
    if (bn || b == 16 || (pb->N + b - 1) / b * tiles_m >= 2 * sms - 2 * sms / 8) tile = b;
  }
  if (!tile) return 0;

  cfg->m_tiles8 = m_tiles8;
  cfg->tile_n = tile;
  cfg->tile_m = 8 * m_tiles8;
  cfg->placement = placement;
  cfg->mma_bf16 = !f16_mma;
  cfg->x_parts = f16_mma || pb->x_dtype == QF_BF16 ? 1 : pb->x_dtype == QF_F16 ? 2 : 3;
  cfg->entry_parts = !f16_mma && pb->entry_dtype == QF_F16 ? 2 : 1;
  cfg->warps = QF_VQ_MMA_WARPS;
  cfg->warps_k = QF_VQ_MMA_WARPS * QF_VQ_MMA_TILE_N / tile;
  cfg->x_direct = 0;
  cfg->tiles_n = (pb->N + tile - 1) / tile;
  cfg->tiles_m = tiles_m;
  cfg->tiles = cfg->tiles_n * tiles_m;
  cfg->books_bytes = shared ? books : 0;
  cfg->red_bytes = red;
  cfg->smem_bytes = cfg->books_bytes + table + red;
  cfg->splits = 1;
  return 1;
}

/* qf_cuda_vq_gemm's VQ-GeMV (M of 1 to QF_VQ_GEMV_MAX_M; larger M is refused: VQ-GeMM is
 * qf_cuda_vq_gemm_mma_with, vq_gemm_heuristic.h) with the codebook placement forced
 * (QF_VQ_BOOKS_AUTO: the heuristic's), for the ablation and the tests. QF_ERR_UNSUPPORTED when
 * the forced placement cannot be used. When `used` is not NULL it receives the launch shape. */
qf_status qf_cuda_vq_gemm_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int placement,
                               qf_vq_gemv_config *used);

/* The kernel of qf_cuda_vq_gemm_with and qf_cuda_vq_gemm_mma_with with its x tile forced too:
 * m_tiles8 1, 2 or 4 (0: 1 for M <= 8, 2 for M <= 16, else 4), any M; bn as qf_vq_mma_pick. For
 * the tests, which run every launch shape on small problems. */
qf_status qf_cuda_vq_mma_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int placement,
                              int m_tiles8, int bn, qf_vq_mma_config *used);

/* Why the banked VQ-GeMV (vq_gemv_banked.cu) cannot take this call, or NULL when it can: 8-bit
 * indices, vector size 2, 4 or 8, x of the entries' 16-bit type with 16-byte aligned rows, codes
 * 16-byte aligned, K and the codebook scopes multiples of 256, M <= 16. For a lattice format the
 * banked placement is the E8P GeMV (vq_gemv_e8p.cu), and this is qf_cuda_vq_e8p_refusal. */
const char *qf_cuda_vq_banked_refusal(const qf_mat *x, const qf_vq_tensors *w);

/* The banked VQ-GeMV with its split-K forced (splits > 0: K ranges per 256-row tile; 0: the
 * heuristic's, as many as fill one wave of blocks), for the tests and the bench; for a lattice
 * format, qf_cuda_vq_gemv_e8p_with. QF_ERR_UNSUPPORTED with the reason when the kernel cannot
 * take the call. */
qf_status qf_cuda_vq_gemv_banked_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                                      qf_vq_mma_config *used);

/* Why the E8P VQ-GeMV (vq_gemv_e8p.cu: the E8P lattice decoded from the index bits with the
 * pattern table's 8 bank-private copies in shared memory) cannot take this call, or NULL when it
 * can: lattice E8P with at most 2 residuals, fp16 x with 16-byte aligned rows, codes 16-byte
 * aligned, K a multiple of 256, scopes of 0 or multiples of 16 rows and 256 columns, M <= 16. */
const char *qf_cuda_vq_e8p_refusal(const qf_mat *x, const qf_vq_tensors *w);

/* The E8P VQ-GeMV with its split-K forced (splits > 0: K ranges per 128-row tile, at most one per
 * 256-column chunk; 0: the heuristic's). QF_ERR_UNSUPPORTED with the reason when the kernel
 * cannot take the call. */
qf_status qf_cuda_vq_gemv_e8p_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                                   qf_vq_mma_config *used);

/* Why the table VQ-GeMV (vq_gemv_lut.cu) cannot take this call, or NULL when it can: M = 1 to 4,
 * one codebook per residual (scopes 0 x 0), vector size 8 with 12- or 8-bit indices or vector size
 * 4 with 10-bit ones, codes and codebooks 16-byte aligned, R * N below 2^31, code rows of at least
 * 32 bytes; at M = 2 to 4 vector size 8, x of the entries' type and fp16 or bf16 y (table values of
 * two rows of x in one word, rounded to the entries' type; a launch per pair of rows). */
const char *qf_cuda_vq_lut_refusal(const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y);

/* Whether the router's automatic choice takes the table GeMV for an M <= 2 call it can run: where
 * the rows that share each table (all N) number at least half its entries. */
static inline int qf_vq_lut_pays(int64_t N, int index_bits) { return 2 * N >= (INT64_C(1) << index_bits); }

/* The table VQ-GeMV with its split-K (splits > 0: K ranges of items; 0: as many as fill one block
 * per SM) and its rows per block (rows_per_block > 0; 0: as many as the shared memory holds)
 * forced, for the tests and the bench. QF_ERR_UNSUPPORTED with the reason when the kernel cannot
 * take the call. */
qf_status qf_cuda_vq_gemv_lut_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                                   int rows_per_block, qf_vq_mma_config *used);

/* Why the tile-table VQ-GeMV (vq_gemv_lut_tiles.cu: tables of entry . x products per 256-column
 * chunk and book, built on the tensor cores, values in the entries' 16-bit type) cannot take this
 * call, or NULL when it can: M = 1 to 4 (3 and 4 a pair of rows at a time), 8-bit indices with
 * vector size 4 (GPTVQ-2), x of the entries' 16-bit type with rows aligned to 4 bytes, y fp16 or
 * bf16, codes and codebooks aligned to 16 (code rows a multiple of 16 bytes), K a multiple of 256,
 * scopes of 0 or multiples of 256 rows and 256 columns. The lut placement runs it where the table GeMV of vq_gemv_lut.cu refuses the call. */
const char *qf_cuda_vq_lut_tiles_refusal(const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y);

/* The tile-table VQ-GeMV with its split-K forced (splits > 0: K ranges per 256-row tile, at most
 * one per 256-column chunk; 0: the heuristic's, as many as fill one wave of blocks).
 * QF_ERR_UNSUPPORTED with the reason when the kernel cannot take the call. */
qf_status qf_cuda_vq_gemv_lut_tiles_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                         int splits, qf_vq_mma_config *used);

#ifdef __cplusplus
}
#endif

#endif
