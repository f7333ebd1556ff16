/* VQ-GeMM (qf_vq_gemm on CUDA for M > 16): the same kernel and launch shape as the VQ-GeMV
 * (vq_heuristic.h, vq_gemm.cuh), with x tiles of 32 rows (4 n8 tiles of the MMA per warp). */
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

#ifdef __cplusplus
}
#endif

#endif
