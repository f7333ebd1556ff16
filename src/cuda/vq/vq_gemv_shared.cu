// The VQ-GeMV kernels (x tiles of 8 and 16 rows) that stage the codebooks of a row scope in shared
// memory (CodebookInShared).
#include "cuda/vq/vq_gemm.cuh"

qf_status qf_cuda_vq_gemv_run_shared(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg, bool bf16_entries) {
  return cfg.m_tiles8 == 1 ? vq_mma_launch<CodebookInShared, 1>(ctx, p, cfg, bf16_entries)
                           : vq_mma_launch<CodebookInShared, 2>(ctx, p, cfg, bf16_entries);
}
