// The VQ-GeMM kernels that read codebook entries from global memory (CodebookInGlobal).
#include "cuda/vq/vq_gemm.cuh"

qf_status qf_cuda_vq_gemm_mma_run_global(qf_ctx *ctx, const vq_gemm_params &p, const qf_vq_gemm_config &cfg,
                                         bool bf16_entries) {
  return vq_gemm_launch<CodebookInGlobal>(ctx, p, cfg, bf16_entries);
}
