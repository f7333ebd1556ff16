// The VQ-GeMV kernels that read codebook entries from global memory (CodebookInGlobal).
#include "cuda/vq/vq_gemv_dispatch.cuh"

qf_status qf_cuda_vq_gemv_run_global(qf_ctx *ctx, const vq_gemv_params &p, const qf_vq_gemv_config &cfg, bool bf16_entries) {
  return vq_gemv_launch<CodebookInGlobal>(ctx, p, cfg, bf16_entries);
}
