// Host-side helpers shared by every CUDA launcher: error mapping and launch checks.
#pragma once

#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>

#include "core/backend.h"

// Maps a CUDA error onto a qf_status with a message naming the op and the failing call.
static inline qf_status qf_cuda_fail(qf_ctx *ctx, const char *op, const char *what, cudaError_t err) {
  qf_status st = err == cudaErrorMemoryAllocation ? QF_ERR_OUT_OF_MEMORY : QF_ERR_CUDA;
  return qf_fail(ctx, st, "%s: %s failed: %s (%s)", op, what, cudaGetErrorName(err), cudaGetErrorString(err));
}

// Checks the launch that just happened (configuration errors and sticky errors alike).
static inline qf_status qf_cuda_check_launch(qf_ctx *ctx, const char *op) {
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? QF_OK : qf_cuda_fail(ctx, op, "kernel launch", err);
}

static inline cudaStream_t qf_stream(const qf_ctx *ctx) { return static_cast<cudaStream_t>(ctx->stream); }

// Driver API entry point `name` of ABI `version` through the runtime (libqfuse does not link
// libcuda itself), or null when the driver lacks it.
void *qf_cuda_driver_fn(const char *name, int version);

// Sets `kernel`'s function attribute `attr` to `value`, once per device and kernel: `done` is
// that kernel's own flag word, one bit per device (a repeated cudaFuncSetAttribute costs host time
// small launches notice; devices past the 64 bits set it on every call).
template <typename Kernel>
qf_status qf_cuda_func_attribute_once(qf_ctx *ctx, const char *op, Kernel kernel, cudaFuncAttribute attr, int value,
                                      std::atomic<uint64_t> &done) {
  const uint64_t dev_bit = ctx->device_id < 64 ? uint64_t{1} << ctx->device_id : 0;
  if ((done.load(std::memory_order_relaxed) & dev_bit) != 0 && dev_bit != 0) return QF_OK;
  const cudaError_t err = cudaFuncSetAttribute(kernel, attr, value);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaFuncSetAttribute", err);
  done.fetch_or(dev_bit, std::memory_order_relaxed);
  return QF_OK;
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes` (past 48 KB it needs this opt-in, per
// kernel and device), once per device (qf_cuda_func_attribute_once).
template <typename Kernel>
qf_status qf_cuda_smem_opt_in(qf_ctx *ctx, const char *op, Kernel kernel, size_t bytes, std::atomic<uint64_t> &done) {
  return qf_cuda_func_attribute_once(ctx, op, kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes),
                                     done);
}

// Dynamic shared memory that leaves room for one CTA per SM (over half of an sm_90 SM's 228 KB;
// the kernel need not use it). The row kernels launched as programmatic dependents at decode
// (one CTA a row: qf_quant_token, qf_rms_norm_quant) hold it: their CTAs become resident while the
// GEMM before them runs, and left free they pile onto the SMs the GEMM leaves idle, several per
// SM, and run there after it at a fraction of the bandwidth (docs/GEMM.md).
constexpr size_t kQfOneCtaPerSmBytes = 120 * 1024;

// The programmatic stream serialization attribute (qf_ctx_set_pdl): the kernel may start while the
// one before it in the stream finishes; it must wait for it (griddep_wait) before touching its data.
static inline cudaLaunchAttribute qf_pdl_attribute() {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

// A launch configuration (cudaLaunchKernelEx) with the one attribute *attr, the caller's storage.
static inline cudaLaunchConfig_t qf_launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                                  cudaLaunchAttribute *attr) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid, lc.blockDim = block, lc.dynamicSmemBytes = smem, lc.stream = stream;
  lc.attrs = attr, lc.numAttrs = 1;
  return lc;
}

// ... for clusters of `cluster` CTAs along x (1: no cluster) and, with `pdl`, as a programmatic
// dependent (below); attrs holds up to two attributes.
static inline cudaLaunchConfig_t qf_cluster_launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                                          unsigned cluster, bool pdl, cudaLaunchAttribute (&attrs)[2]) {
  attrs[0] = {};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = cluster, attrs[0].val.clusterDim.y = 1, attrs[0].val.clusterDim.z = 1;
  attrs[1] = qf_pdl_attribute();
  cudaLaunchConfig_t lc = qf_launch_config(grid, block, smem, stream, cluster > 1 ? attrs : attrs + 1);
  lc.numAttrs = (cluster > 1) + pdl;
  return lc;
}

// ... for a cooperative launch: the grid starts only once all its CTAs can be resident together
// (for CTAs that wait for each other).
static inline cudaLaunchConfig_t qf_cooperative_launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                                              cudaLaunchAttribute *attr) {
  *attr = {};
  attr->id = cudaLaunchAttributeCooperative;
  attr->val.cooperative = 1;
  return qf_launch_config(grid, block, smem, stream, attr);
}

// ... for a programmatic dependent launch (qf_pdl_attribute).
static inline cudaLaunchConfig_t qf_pdl_launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                                      cudaLaunchAttribute *attr) {
  *attr = qf_pdl_attribute();
  return qf_launch_config(grid, block, smem, stream, attr);
}

// Launches kernel k as lc configures it (cluster, cooperative or programmatic dependent); a
// refused launch is reported for op.
template <typename Kernel, typename... Args>
qf_status qf_cuda_launch_ex(qf_ctx *ctx, const char *op, const cudaLaunchConfig_t &lc, Kernel k, Args... args) {
  const cudaError_t err = cudaLaunchKernelEx(&lc, k, args...);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaLaunchKernelEx", err);
  return qf_cuda_check_launch(ctx, op);
}

// Launches `plain`, or on a context with qf_ctx_set_pdl `dependent` (the kernel's kPdl
// instantiation, which waits for the kernel before it) as a programmatic dependent.
template <typename Kernel, typename... Args>
qf_status qf_cuda_launch(qf_ctx *ctx, const char *op, Kernel plain, Kernel dependent, dim3 grid, dim3 block, size_t smem,
                         Args... args) {
  if (ctx->pdl) {
    cudaLaunchAttribute attr;
    return qf_cuda_launch_ex(ctx, op, qf_pdl_launch_config(grid, block, smem, qf_stream(ctx), &attr), dependent, args...);
  }
  plain<<<grid, block, smem, qf_stream(ctx)>>>(args...);
  return qf_cuda_check_launch(ctx, op);
}

// The context's device scratch, at least `bytes`, zero-filled when it is (re)allocated. It starts
// with kQfWorkspaceCounters int counters that every kernel leaves at zero when it finishes (a
// fixed place: the rest of the buffer holds whatever the last call left). Growing it allocates
// (and synchronizes the device), which a CUDA graph's capture does not allow: while the context's
// stream captures, a call that needs more fails with QF_ERR_UNSUPPORTED before enqueueing anything
// (qf_ctx_reserve_workspace grows it ahead).
constexpr int kQfWorkspaceCounters = 1024;
qf_status qf_cuda_workspace(qf_ctx *ctx, const char *op, size_t bytes, void **out);
