// Launcher of dynamic per-tensor quantization. A tensor that fits in the registers of one resident
// grid takes the fused kernel (one launch); larger ones: zero the scale, reduce it
// (tensor_quant.cuh), then quantize with the static per-tensor launcher, whose kernel reads that
// scale from device memory (three operations on the stream).
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/quant/tensor_quant.cuh"

namespace {

// The fused kernel when the tensor fits one resident grid at kFusedVpt chunks per thread;
// *done = false (and QF_OK) otherwise.
template <typename Tin, typename Tout>
qf_status launch_fused(qf_ctx *ctx, const qf_tensor_dynamic_args *a, bool *done) {
  static const char op[] = "qf_quant_tensor";
  *done = false;
  const int64_t rows = a->x.rows, cols = a->x.cols, row_chunks = (cols + 7) / 8;
  if (rows > INT32_MAX || cols > kRowColsMax) return QF_OK;
  const int64_t blocks = (rows * row_chunks + kFusedThreads * kFusedVpt - 1) / (kFusedThreads * kFusedVpt);
  const bool vec = cols % 8 == 0 && reinterpret_cast<uintptr_t>(a->x.data) % 16 == 0 &&
                   (a->x.ld * sizeof(Tin)) % 16 == 0 && reinterpret_cast<uintptr_t>(a->q.data) % 8 == 0 &&
                   a->q.ld % 8 == 0;
  auto kernel = vec ? tensor_dynamic_fused_kernel<Tin, Tout, RowAccess::kVec16>
                    : tensor_dynamic_fused_kernel<Tin, Tout, RowAccess::kScalar>;
  int per_sm = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedThreads, 0);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  if (blocks > static_cast<int64_t>(per_sm) * ctx->sm_count) return QF_OK;
  void *ws = nullptr;
  if (qf_status st = qf_cuda_workspace(ctx, op, kQfWorkspaceCounters * sizeof(int), &ws); st != QF_OK) return st;
  TensorFusedParams p;
  p.x = a->x.data, p.q = a->q.data, p.x_ld = a->x.ld, p.q_ld = a->q.ld;
  p.rows = static_cast<int>(rows), p.cols = static_cast<int>(cols), p.row_chunks = static_cast<int>(row_chunks);
  p.qmax = qf_qmax(a->q.dtype == QF_I8, a->q.dtype == QF_E4M3FNUZ);
  p.scale_min = a->scale_min;
  p.scale = a->scale;
  p.ws = static_cast<unsigned int *>(ws);  // counters 0-2, zero between calls
  cudaLaunchAttribute coop;
  const cudaLaunchConfig_t lc =
      qf_cooperative_launch_config(dim3(static_cast<unsigned>(blocks)), dim3(kFusedThreads), 0, qf_stream(ctx), &coop);
  err = cudaLaunchKernelEx(&lc, kernel, p);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaLaunchKernelEx", err);
  *done = true;
  return qf_cuda_check_launch(ctx, op);
}

template <typename Tin>
qf_status launch(qf_ctx *ctx, const qf_tensor_dynamic_args *a) {
  static const char op[] = "qf_quant_tensor";
  const int64_t rows = a->x.rows, cols = a->x.cols;
  bool done = false;
  const qf_status fst = a->q.dtype == QF_E4M3FN     ? launch_fused<Tin, e4m3fn_t>(ctx, a, &done)
                        : a->q.dtype == QF_E4M3FNUZ ? launch_fused<Tin, e4m3fnuz_t>(ctx, a, &done)
                                                    : launch_fused<Tin, int8_out_t>(ctx, a, &done);
  if (fst != QF_OK || done) return fst;
  cudaStream_t stream = qf_stream(ctx);
  cudaError_t err = cudaMemsetAsync(a->scale, 0, sizeof(float), stream);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaMemsetAsync", err);

  // Pass 1: a block of (tx chunks) x (ty rows); enough blocks for one full wave, at most.
  if (cols > kRowColsMax) return qf_fail(ctx, QF_ERR_SHAPE, "%s: rows of %lld elements are too long", op, (long long)cols);
  const bool x_vec = reinterpret_cast<uintptr_t>(a->x.data) % 16 == 0 && (a->x.ld * sizeof(Tin)) % 16 == 0;
  TensorAmaxParams p;
  p.x = a->x.data, p.x_ld = a->x.ld, p.rows = rows, p.cols = static_cast<int>(cols);
  p.qmax = qf_qmax(a->q.dtype == QF_I8, a->q.dtype == QF_E4M3FNUZ);
  p.scale_min = a->scale_min;
  p.scale_bits = reinterpret_cast<unsigned int *>(a->scale);
  const int64_t chunks = (cols + 7) / 8;
  const int tx = static_cast<int>(chunks < kAmaxThreads ? (chunks + 31) / 32 * 32 : kAmaxThreads);
  const int ty = kAmaxThreads / tx;
  const int64_t gx = (chunks + tx - 1) / tx, want = static_cast<int64_t>(ctx->sm_count) * (2048 / kAmaxThreads);
  int64_t gy = (rows + ty - 1) / ty;
  if (gy > want / gx) gy = want / gx > 0 ? want / gx : 1;
  if (gy > 65535) gy = 65535;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block(tx, ty);
  if (x_vec && cols % 8 == 0) tensor_scale_kernel<Tin, RowAccess::kVec16><<<grid, block, 0, stream>>>(p);
  else tensor_scale_kernel<Tin, RowAccess::kScalar><<<grid, block, 0, stream>>>(p);
  qf_status st = qf_cuda_check_launch(ctx, op);
  if (st != QF_OK) return st;

  // Pass 2: the static kernel, reading the scale pass 1 leaves.
  const qf_quant_tensor_args pass2 = {a->x, a->q, a->scale};
  return qf_cuda_quant_per_tensor(ctx, &pass2);
}

}  // namespace

extern "C" qf_status qf_cuda_quant_tensor_dynamic(qf_ctx *ctx, const qf_tensor_dynamic_args *a) {
  switch (a->x.dtype) {
    case QF_BF16: return launch<__nv_bfloat16>(ctx, a);
    case QF_F16: return launch<__half>(ctx, a);
    default: return launch<float>(ctx, a);
  }
}
