// The VQ-GeMM kernels (x tiles of 32 rows) that stage the codebooks of a row scope in shared memory
// (CodebookInShared).
#include "cuda/vq/vq_gemm.cuh"

qf_status qf_cuda_vq_gemm_mma_run_shared(qf_ctx *ctx, const vq_mma_params &p, const qf_vq_mma_config &cfg,
                                         bool bf16_entries) {
  return vq_mma_launch<CodebookInShared, QF_VQ_GEMM_M_TILES8>(ctx, p, cfg, bf16_entries);
}
