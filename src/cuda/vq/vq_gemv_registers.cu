// The VQ-GeMV kernels (x tiles of 8 and 16 rows) with the codebook cache's register tier over the
// shared-memory books (CodebookHotInRegisters): the ablation's "+ register cache" column.
#include "cuda/vq/vq_gemm.cuh"

qf_status qf_cuda_vq_gemv_run_registers(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg,
                                        bool bf16_entries) {
  return cfg.m_tiles8 == 1 ? vq_mma_launch<CodebookHotInRegisters, 1>(ctx, p, cfg, bf16_entries)
                           : vq_mma_launch<CodebookHotInRegisters, 2>(ctx, p, cfg, bf16_entries);
}
