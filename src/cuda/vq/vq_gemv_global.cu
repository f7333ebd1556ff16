// The VQ-GeMV kernels (x tiles of 8 and 16 rows) that read codebook entries from global memory
// (CodebookInGlobal).
#include "cuda/vq/vq_gemm.cuh"

qf_status qf_cuda_vq_gemv_run_global(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg, bool bf16_entries) {
  return cfg.m_tiles8 == 1 ? vq_mma_launch<CodebookInGlobal, 1>(ctx, p, cfg, bf16_entries)
                           : vq_mma_launch<CodebookInGlobal, 2>(ctx, p, cfg, bf16_entries);
}
