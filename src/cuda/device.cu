// CUDA context setup: select the device and read the facts the heuristics need.
#include "cuda/common.cuh"

extern "C" qf_status qf_cuda_ctx_init(qf_ctx *ctx, int device_id) {
  static const char op[] = "qf_ctx_create";
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || device_id < 0 || device_id >= count) {
    cudaGetLastError();  // clear a non-sticky error from the probe
    return QF_ERR_UNSUPPORTED;
  }
  cudaDeviceProp p;
  if ((err = cudaGetDeviceProperties(&p, device_id)) != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaGetDeviceProperties", err);
  // The kernels are built for sm_90a only; anything else would fail at the first launch.
  if (p.major != 9 || p.minor != 0) return QF_ERR_UNSUPPORTED;
  ctx->device_id = device_id;
  ctx->sm_count = p.multiProcessorCount;
  ctx->cc_major = p.major;
  ctx->cc_minor = p.minor;
  ctx->l2_bytes = static_cast<size_t>(p.l2CacheSize);
  ctx->smem_optin = p.sharedMemPerBlockOptin;
  return QF_OK;
}
