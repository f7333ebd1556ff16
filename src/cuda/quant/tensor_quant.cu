// Launcher of dynamic per-tensor quantization: zero the scale, reduce it (tensor_quant.cuh),
// then quantize with the static kernel reading that scale. Three operations on the stream.
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/quant/quant_per_tensor.cuh"
#include "cuda/quant/tensor_quant.cuh"

namespace {

template <typename Tin, typename Tout>
qf_status launch(qf_ctx *ctx, const qf_tensor_dynamic_args *a) {
  static const char op[] = "qf_quant_tensor";
  const int64_t rows = a->x.rows, cols = a->x.cols;
  cudaStream_t stream = qf_stream(ctx);
  cudaError_t err = cudaMemsetAsync(a->scale, 0, sizeof(float), stream);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaMemsetAsync", err);

  // Pass 1: a block of (tx chunks) x (ty rows); enough blocks for one full wave, at most.
  if (cols > kRowColsMax) return qf_fail(ctx, QF_ERR_SHAPE, "%s: rows of %lld elements are too long", op, (long long)cols);
  const bool x_vec = reinterpret_cast<uintptr_t>(a->x.data) % 16 == 0 && (a->x.ld * sizeof(Tin)) % 16 == 0;
  TensorAmaxParams p;
  p.x = a->x.data, p.x_ld = a->x.ld, p.rows = rows, p.cols = static_cast<int>(cols);
  p.qmax = qf_qmax(std::is_same<Tout, int8_out_t>::value, std::is_same<Tout, e4m3fnuz_t>::value);
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

  // Pass 2: the static kernel, as qf_quant_per_tensor launches it.
  const bool vec = x_vec && reinterpret_cast<uintptr_t>(a->q.data) % 8 == 0 && a->q.ld % 8 == 0;
  const int threads = 256, per_thread = vec ? 8 : 1;
  const int64_t col_blocks = (cols + threads * per_thread - 1) / (threads * per_thread);
  const dim3 grid2(static_cast<unsigned>(col_blocks), static_cast<unsigned>(rows < 65535 ? rows : 65535));
  auto kernel = vec ? quant_per_tensor_kernel<Tin, Tout, 8> : quant_per_tensor_kernel<Tin, Tout, 1>;
  kernel<<<grid2, threads, 0, stream>>>(static_cast<const Tin *>(a->x.data), a->x.ld, static_cast<Tout *>(a->q.data),
                                       a->q.ld, a->scale, rows, cols);
  return qf_cuda_check_launch(ctx, op);
}

template <typename Tin>
qf_status launch_out(qf_ctx *ctx, const qf_tensor_dynamic_args *a) {
  switch (a->q.dtype) {
    case QF_E4M3FN: return launch<Tin, e4m3fn_t>(ctx, a);
    case QF_E4M3FNUZ: return launch<Tin, e4m3fnuz_t>(ctx, a);
    default: return launch<Tin, int8_out_t>(ctx, a);
  }
}

}  // namespace

extern "C" qf_status qf_cuda_quant_tensor_dynamic(qf_ctx *ctx, const qf_tensor_dynamic_args *a) {
  switch (a->x.dtype) {
    case QF_BF16: return launch_out<__nv_bfloat16>(ctx, a);
    case QF_F16: return launch_out<__half>(ctx, a);
    default: return launch_out<float>(ctx, a);
  }
}
