// CUDA context setup: select the device and read the facts the heuristics need; the context's
// device scratch; the SMs of the context's stream.
#include <cudaTypedefs.h>

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
  int mem_khz = 0, bus_bits = 0;  // (the GEMM's decode plans differ with the DRAM's rate)
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device_id) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_id) != cudaSuccess) {
    cudaGetLastError();
    mem_khz = bus_bits = 0;
  }
  ctx->dram_gbps = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  ctx->stream_sms = ctx->sm_count;  // the legacy default stream; qf_ctx_set_stream updates it
  return QF_OK;
}

extern "C" void qf_cuda_ctx_release(qf_ctx *ctx) {
  if (ctx->workspace != nullptr) cudaFree(ctx->workspace);
  ctx->workspace = nullptr;
  ctx->workspace_bytes = 0;
}

qf_status qf_cuda_workspace(qf_ctx *ctx, const char *op, size_t bytes, void **out) {
  if (bytes > ctx->workspace_bytes) {
    // Not while the stream is capturing a graph: the allocation would invalidate the capture. (On
    // the legacy stream while another stream captures, the query itself fails: not sticky.)
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t query = cudaStreamIsCapturing(qf_stream(ctx), &capture);
    if (query != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      if (query != cudaSuccess) cudaGetLastError();
      return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                     "%s: needs %zu bytes of device workspace and the context holds %zu; it cannot grow while "
                     "a CUDA graph is being captured (qf_ctx_reserve_workspace before the capture)",
                     op, bytes, ctx->workspace_bytes);
    }
    // cudaFree waits for the device, so no kernel still uses the old buffer.
    qf_cuda_ctx_release(ctx);
    const size_t size = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    cudaError_t err = cudaMalloc(&ctx->workspace, size);
    if (err != cudaSuccess) {
      ctx->workspace = nullptr;
      return qf_cuda_fail(ctx, op, "cudaMalloc of the workspace", err);
    }
    if ((err = cudaMemsetAsync(ctx->workspace, 0, size, qf_stream(ctx))) != cudaSuccess) {
      qf_cuda_ctx_release(ctx);
      return qf_cuda_fail(ctx, op, "cudaMemsetAsync of the workspace", err);
    }
    ctx->workspace_bytes = size;
  }
  *out = ctx->workspace;
  return QF_OK;
}

extern "C" qf_status qf_cuda_reserve_workspace(qf_ctx *ctx, size_t bytes) {
  if (bytes <= ctx->workspace_bytes) return QF_OK;  // (nothing to do, nothing to wait for: allowed in a capture)
  void *ws = nullptr;
  if (qf_status st = qf_cuda_workspace(ctx, "qf_ctx_reserve_workspace", bytes, &ws); st != QF_OK) return st;
  // (the zero fill done before any stream's work, a graph's launches included)
  if (cudaError_t err = cudaStreamSynchronize(qf_stream(ctx)); err != cudaSuccess)
    return qf_cuda_fail(ctx, "qf_ctx_reserve_workspace", "cudaStreamSynchronize", err);
  return QF_OK;
}

void *qf_cuda_driver_fn(const char *name, int version) {
  void *f = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();  // not sticky
    f = nullptr;
  }
  return f;
}

extern "C" int qf_cuda_stream_sms(const qf_ctx *ctx) {
  static const auto get_green = reinterpret_cast<PFN_cuStreamGetGreenCtx_v12040>(qf_cuda_driver_fn("cuStreamGetGreenCtx", 12040));
  static const auto get_resource =
      reinterpret_cast<PFN_cuGreenCtxGetDevResource_v12040>(qf_cuda_driver_fn("cuGreenCtxGetDevResource", 12040));
  CUgreenCtx green = nullptr;
  CUdevResource sms = {};
  if (get_green == nullptr || get_resource == nullptr ||
      get_green(reinterpret_cast<CUstream>(ctx->stream), &green) != CUDA_SUCCESS || green == nullptr ||
      get_resource(green, &sms, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS || sms.sm.smCount == 0)
    return ctx->sm_count;
  return static_cast<int>(sms.sm.smCount) < ctx->sm_count ? static_cast<int>(sms.sm.smCount) : ctx->sm_count;
}
