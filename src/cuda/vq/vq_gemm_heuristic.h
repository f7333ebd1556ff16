/* VQ-GeMM (qf_vq_gemm on CUDA for M > 16): the tiled kernel (vq_gemm_tiled.cu) where it applies,
 * else the same kernel and launch shape as the VQ-GeMV (vq_heuristic.h, vq_gemm.cuh) with x tiles
 * of 32 rows (4 n8 tiles of the MMA per warp). */
#ifndef QF_CUDA_VQ_GEMM_HEURISTIC_H
#define QF_CUDA_VQ_GEMM_HEURISTIC_H

#include "cuda/vq/vq_heuristic.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QF_VQ_GEMM_M_TILES8 4 /* x rows per block tile / 8 */

typedef qf_vq_mma_config qf_vq_gemm_config;

/* qf_cuda_vq_gemm's VQ-GeMM (any M >= 1; the public call uses it for M > 16) with the codebook
 * placement forced (QF_VQ_BOOKS_AUTO: the heuristic's), for the ablation and the tests. bn forces
 * the tile height in rows of W: 16, 32, 64 or 128 (0: the heuristic's); anything else is
 * QF_ERR_UNSUPPORTED, as is a forced placement that cannot be used. When `used` is not NULL it
 * receives the launch shape. */
qf_status qf_cuda_vq_gemm_mma_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int placement,
                                   int bn, qf_vq_gemm_config *used);

/* Why the tiled VQ-GeMM (vq_gemm_tiled.cu, placement QF_VQ_BOOKS_TILED) cannot take this call, or
 * NULL when it can: 8-bit indices, vector size 2, 4 or 8, the E8P lattice, or 12-bit indices of
 * vector size 8 with one codebook per residual (AQLM); one or two residuals, x of the entries'
 * 16-bit type with 16-byte aligned rows, codes and codebooks 16-byte aligned, K a positive
 * multiple of 64, codebook scopes of 0 or a multiple of 128 rows and of 64 columns. Any M. */
const char *qf_cuda_vq_tiled_refusal(const qf_mat *x, const qf_vq_tensors *w);

/* Whether the tiled VQ-GeMM runs this format on its whole-book kernel (12-bit indices of vector
 * size 8, one codebook per residual: AQLM), which the router also takes for 9 to 16 rows. */
int qf_cuda_vq_whole_books(const qf_vq_format *f);

/* The tiled VQ-GeMM's split-K (vq_gemm_tiled.cu): K ranges per block tile for `tiles` tiles of bm
 * rows of x over `ksteps` k-steps of 64 columns, `slots` blocks resident at once (SMs x blocks per
 * SM). Of 1 to 8 ranges (at least four k-steps each; none split past `max_tiles` tiles, the
 * workspace's counters) the count of least modelled time, waves of resident blocks times a unit's
 * cost in k-steps: its own k-steps (its range's codes, x and books: 1/s of the tile's stream), 2
 * for its start and end, and when split 8 per 64 rows of x for its fp32 partial, written and read
 * back by the tile's last unit (s per tile). The paper's traffic balance (the stream each unit
 * carries falls with s, the reduction's grows) weighted by the waves; ties go to fewer ranges.
 * Fitted on H100 sweeps of every split (docs/VQ.md, "The dataflow's split"): 0.7% geomean from the
 * best split over 360 (format, M, N, K), where counting waves alone lost 6.2% (up to 2x). */
static inline int qf_vq_tiled_splits(int64_t tiles, int64_t slots, int ksteps, int bm, int64_t max_tiles) {
  int splits = 1;
  int64_t best_cost = (tiles + slots - 1) / slots * (ksteps + 2); /* cost x splits, compared cross-multiplied */
  for (int s = 2; s <= 8 && s <= ksteps / 4 && tiles <= max_tiles; s++) {
    const int64_t cost = (tiles * s + slots - 1) / slots * (ksteps + s * (2 + 8 * bm / 64));
    if (cost * splits < best_cost * s) best_cost = cost, splits = s;
  }
  return splits;
}

/* The tiled VQ-GeMM with its split-K forced (splits > 0: K ranges per tile, at most one per 64
 * columns; 0: the heuristic's), for the tests and the bench. QF_ERR_UNSUPPORTED with the reason
 * when the kernel cannot take the call. */
qf_status qf_cuda_vq_gemm_tiled_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                                     qf_vq_mma_config *used);

#ifdef __cplusplus
}
#endif

#endif
