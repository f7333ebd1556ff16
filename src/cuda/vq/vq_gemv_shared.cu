// The VQ-GeMV kernels that stage the codebooks of a row scope in shared memory (CodebookInShared).
#include "cuda/vq/vq_gemv_dispatch.cuh"

qf_status qf_cuda_vq_gemv_run_shared(qf_ctx *ctx, const vq_gemv_params &p, const qf_vq_gemv_config &cfg, bool bf16_entries) {
  return vq_gemv_launch<CodebookInShared>(ctx, p, cfg, bf16_entries);
}
