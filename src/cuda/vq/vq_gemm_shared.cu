// The VQ-GeMM kernels that stage the codebooks of the stage's columns in shared memory
// (CodebookInShared).
#include "cuda/vq/vq_gemm.cuh"

qf_status qf_cuda_vq_gemm_mma_run_shared(qf_ctx *ctx, const vq_gemm_params &p, const qf_vq_gemm_config &cfg,
                                         bool bf16_entries) {
  return vq_gemm_launch<CodebookInShared>(ctx, p, cfg, bf16_entries);
}
