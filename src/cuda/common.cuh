// Host-side helpers shared by every CUDA launcher: error mapping and launch checks.
#pragma once

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

// The context's device scratch, at least `bytes`, zero-filled when it is (re)allocated. It starts
// with kQfWorkspaceCounters int counters that every kernel leaves at zero when it finishes (a
// fixed place: the rest of the buffer holds whatever the last call left). Growing it allocates
// (and synchronizes the device): not allowed while a CUDA graph is being captured, so the first
// call at the largest size belongs before the capture.
constexpr int kQfWorkspaceCounters = 1024;
qf_status qf_cuda_workspace(qf_ctx *ctx, const char *op, size_t bytes, void **out);
