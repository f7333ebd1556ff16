/* Launch shape of the VQ-GeMV kernel (vq_gemv.cuh): the M bucket, where the codebooks live, how
 * the 8 or 16 warps of a block split rows and K, and how much of x is staged at a time. Host
 * code only, C and C++: the kernels see the result through their parameters, never this logic.
 *
 * NOTES:
 * - A block owns a contiguous run of row tiles (persistent grid) and stages the codebooks of its
 *   row scope once, so in shared placement a tile must not straddle two row scopes: tile_rows
 *   divides scope_rows. Global placement reads each row's own scope and has no such rule.
 * - Shared placement pays for copying every entry of the scope's books into each block; it wins
 *   when a block looks entries up more often than it copies them, and is chosen only then.
 * - x is staged as fp32 with a pad of 4 floats every 32 (lanes read it 16 floats apart). When
 *   M x K does not fit next to the books, it is staged in chunks of K, each once per tile. */
#ifndef QF_CUDA_VQ_HEURISTIC_H
#define QF_CUDA_VQ_HEURISTIC_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the GeMV kernel reads codebook entries: the kernel policies CodebookInGlobal (through
 * L1/L2) and CodebookInShared (the row scope's books copied into shared memory once). */
typedef enum {
  QF_VQ_BOOKS_AUTO = 0,
  QF_VQ_BOOKS_IN_GLOBAL = 1,
  QF_VQ_BOOKS_IN_SHARED = 2,
} qf_vq_books_placement;

#define QF_VQ_GEMV_MAX_M 16
#define QF_VQ_GEMV_MAX_WARPS 16
/* The kernels' compile-time buckets: vector sizes with their own code (others run the generic
 * path, which handles 1 element at a time), residual counts (3 runs as up to 4), M (1 to 16). */
#define QF_VQ_GEMV_VS_BUCKET(vs) ((vs) == 2 || (vs) == 4 || (vs) == 8 ? (vs) : 0)
#define QF_VQ_GEMV_R_BUCKET(r) ((r) <= 1 ? 1 : (r) <= 2 ? 2 : 4)
#define QF_VQ_GEMV_M_BUCKET(m) ((m) <= 1 ? 1 : (m) <= 2 ? 2 : (m) <= 4 ? 4 : (m) <= 8 ? 8 : 16)
/* Output rows per warp: 4 reuse each staged x value across more rows, 2 when a row's registers
 * (decoded values, accumulators, entry loads in flight, code words, pointers) would not leave
 * room for 4 under the 128-register cap. */
#define QF_VQ_GEMV_ROW_REGS(m_bucket, vs_bucket, r_bucket)                                              \
  (((vs_bucket) ? (vs_bucket) : 1) + (m_bucket) + (r_bucket) * ((vs_bucket) ? (vs_bucket) : 1) / 2 + \
   3 * (r_bucket) + 4)
#define QF_VQ_GEMV_ROWS_PER_WARP(m_bucket, vs_bucket, r_bucket) \
  (QF_VQ_GEMV_ROW_REGS(m_bucket, vs_bucket, r_bucket) <= 18 ? 4 : 2)

typedef struct {
  int64_t M, N, K;
  int vector_size, index_bits, residuals, scope_rows;
  int64_t books_per_row, entries;
} qf_vq_gemv_problem;

typedef struct {
  int m_bucket;        /* 1, 2, 4, 8 or 16: rows of x the kernel is built for (the rest masked) */
  int rows_per_warp;
  int placement;       /* QF_VQ_BOOKS_IN_GLOBAL or QF_VQ_BOOKS_IN_SHARED */
  int warps;           /* per block */
  int warps_k;         /* warps sharing a tile's rows, each on every warps_k-th step of K */
  int tile_rows;       /* (warps / warps_k) * rows_per_warp */
  int64_t tiles;
  int64_t k_chunk;     /* columns of x staged together: K, or a multiple of 32 * vector_size */
  int64_t x_pitch;     /* floats per staged row of x */
  size_t books_bytes;  /* shared-memory codebooks of one row scope (0 in global placement) */
  size_t smem_bytes;   /* dynamic shared memory per block */
} qf_vq_gemv_config;

/* Floats per staged row of `cols` columns: 4 pad floats after every 32, a multiple of 4. */
static inline int64_t qf_vq_gemv_x_pitch(int64_t cols) {
  const int64_t p = cols + (cols + 31) / 32 * 4;
  return (p + 3) / 4 * 4;
}

/* Warps along K out of `warps`: the fewest that give every SM two tiles (small N splits K
 * instead), then, when scope_rows is set, the fewest of those whose tile height divides it (0 if
 * none does). */
static inline int qf_vq_gemv_split_k(int64_t N, int warps, int rpw, int64_t sms, int scope_rows) {
  int wk = warps;
  for (int w = 1; w <= warps; w *= 2)
    if ((N + (int64_t)(warps / w) * rpw - 1) / ((int64_t)(warps / w) * rpw) >= 2 * sms) {
      wk = w;
      break;
    }
  if (!scope_rows) return wk;
  for (; wk <= warps; wk *= 2)
    if (scope_rows % ((warps / wk) * rpw) == 0) return wk;
  return 0;
}

/* Fills *cfg for the problem on a device of sm_count SMs and smem_optin bytes of shared memory
 * per block. placement QF_VQ_BOOKS_AUTO lets the heuristic choose; a forced shared placement that
 * cannot be honoured (books that do not fit, or a scope_rows that no tile height divides) returns
 * 0. Returns 1 otherwise. M must be 1 to QF_VQ_GEMV_MAX_M. */
static inline int qf_vq_gemv_pick(const qf_vq_gemv_problem *pb, int sm_count, size_t smem_optin, int placement,
                                  qf_vq_gemv_config *cfg) {
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  const int mb = QF_VQ_GEMV_M_BUCKET(pb->M);
  const int rpw = QF_VQ_GEMV_ROWS_PER_WARP(mb, QF_VQ_GEMV_VS_BUCKET(pb->vector_size), QF_VQ_GEMV_R_BUCKET(pb->residuals));
  const size_t red = (size_t)QF_VQ_GEMV_MAX_WARPS * (size_t)rpw * (size_t)mb * 4u;
  const int64_t unit = 32 * (int64_t)pb->vector_size; /* chunk granularity along K */
  const size_t x_full = (size_t)mb * (size_t)qf_vq_gemv_x_pitch(pb->K) * 4u;
  const size_t x_min = (size_t)mb * (size_t)qf_vq_gemv_x_pitch(pb->K < unit ? pb->K : unit) * 4u;
  const size_t books = ((size_t)pb->residuals * (size_t)pb->books_per_row * (size_t)pb->entries *
                            (size_t)pb->vector_size * 2u + 15u) / 16u * 16u;

  /* Shared placement: the books, the reduction buffer and one chunk of x must fit; when the
   * books take more than half, one block fills the SM and brings 16 warps. */
  const int shared_warps = books + red > smem_optin / 2 ? 16 : 8;
  const int wk_shared = books + red + x_min <= smem_optin
                            ? qf_vq_gemv_split_k(pb->N, shared_warps, rpw, sms, pb->scope_rows) : 0;
  if (placement == QF_VQ_BOOKS_AUTO) {
    /* Lookups per copied entry: a block's rows (N over two blocks per SM, within one row scope)
     * times the vectors of a row, over the entries of the scope's books. */
    int64_t rows = (pb->N + 2 * sms - 1) / (2 * sms);
    if (pb->scope_rows && rows > pb->scope_rows) rows = pb->scope_rows;
    const double uses = (double)rows * (double)(pb->K / pb->vector_size) /
                        ((double)pb->books_per_row * (double)pb->entries);
    placement = wk_shared && uses >= 1.0 ? QF_VQ_BOOKS_IN_SHARED : QF_VQ_BOOKS_IN_GLOBAL;
  }
  if (placement == QF_VQ_BOOKS_IN_SHARED && !wk_shared) return 0;
  if (placement != QF_VQ_BOOKS_IN_SHARED) placement = QF_VQ_BOOKS_IN_GLOBAL;
  const int shared = placement == QF_VQ_BOOKS_IN_SHARED;
  const int warps = shared ? shared_warps : 8;
  const int wk = shared ? wk_shared : qf_vq_gemv_split_k(pb->N, warps, rpw, sms, 0);
  const size_t books_used = shared ? books : 0;

  /* x: all of K when it fits in what two blocks per SM leave (what one block leaves when the
   * books take that), else the widest chunk that does: occupancy before fewer restagings. */
  size_t budget = smem_optin / 2 > books_used + red ? smem_optin / 2 - books_used - red : 0;
  if (budget < x_min) budget = smem_optin - books_used - red;
  int64_t k_chunk = pb->K > 0 ? pb->K : 1;
  if (x_full > budget) {
    k_chunk = (int64_t)(budget / ((size_t)mb * 4u)) * 32 / 36 / unit * unit;
    if (k_chunk < unit) k_chunk = unit;
    while (k_chunk > unit && (size_t)mb * (size_t)qf_vq_gemv_x_pitch(k_chunk) * 4u > budget) k_chunk -= unit;
  }

  cfg->m_bucket = mb;
  cfg->rows_per_warp = rpw;
  cfg->placement = placement;
  cfg->warps = warps;
  cfg->warps_k = wk;
  cfg->tile_rows = (warps / wk) * rpw;
  cfg->tiles = (pb->N + cfg->tile_rows - 1) / cfg->tile_rows;
  cfg->k_chunk = k_chunk;
  cfg->x_pitch = qf_vq_gemv_x_pitch(pb->K < k_chunk ? pb->K : k_chunk);
  cfg->books_bytes = books_used;
  cfg->smem_bytes = books_used + (size_t)mb * (size_t)cfg->x_pitch * 4u + red;
  return 1;
}

/* qf_cuda_vq_gemm's VQ-GeMV (M of 1 to QF_VQ_GEMV_MAX_M; larger M is refused: VQ-GeMM is
 * qf_cuda_vq_gemm_mma_with, vq_gemm_heuristic.h) with the codebook placement forced
 * (QF_VQ_BOOKS_AUTO: the heuristic's), for the ablation and the tests. QF_ERR_UNSUPPORTED when
 * the forced placement cannot be used. When `used` is not NULL it receives the launch shape. */
qf_status qf_cuda_vq_gemm_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int placement,
                               qf_vq_gemv_config *used);

#ifdef __cplusplus
}
#endif

#endif
