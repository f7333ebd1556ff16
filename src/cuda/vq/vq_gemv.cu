// Entry point of VQ-GeMV (qf_vq_gemm on CUDA for M of 1 to 16), through qf_cuda_vq_mma_with
// (vq_gemm.cu): the banked GeMV of vq_gemv_banked.cu where it can run, else the kernel of
// vq_gemm.cuh with x tiles of 8 rows (M <= 8) or 16.
#include "cuda/common.cuh"
#include "cuda/vq/vq_heuristic.h"

extern "C" qf_status qf_cuda_vq_gemm_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                          int placement, qf_vq_gemv_config *used) {
  const int64_t M = x->rows;
  if (M > QF_VQ_GEMV_MAX_M)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_vq_gemm: M=%lld: VQ-GeMV covers M of 1 to %d (larger M runs VQ-GeMM)",
                   static_cast<long long>(M), QF_VQ_GEMV_MAX_M);
  return qf_cuda_vq_mma_with(ctx, x, w, y, placement, M <= 8 ? 1 : 2, 0, used);
}

// qf_cuda_vq_gemm (the router between this GeMV and the GeMM) is in vq_gemm.cu.
