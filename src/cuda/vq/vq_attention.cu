// VQ attention decode over a CQ-quantized KV cache: not built yet.
#include "cuda/common.cuh"

extern "C" qf_status qf_cuda_vq_attention_decode(qf_ctx *ctx, const qf_vq_attention_args *a) {
  (void)a;
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_vq_attention_decode: the CUDA kernel is not built yet");
}
