// Launcher of the static per-tensor quantization kernel: picks the instantiation from the
// dtypes and the alignment of the rows.
#include "cuda/common.cuh"
#include "cuda/quant/quant_per_tensor.cuh"

namespace {

template <typename Tin, typename Tout>
qf_status launch(qf_ctx *ctx, const qf_quant_tensor_args *a) {
  // 8-wide access needs every row start aligned: 16 bytes of input, 8 bytes of output.
  const bool vec = (a->x.ld * sizeof(Tin)) % 16 == 0 && a->q.ld % 8 == 0;
  const int threads = 256, per_thread = vec ? 8 : 1;
  const int64_t col_blocks = (a->x.cols + threads * per_thread - 1) / (threads * per_thread);
  if (col_blocks > 0x7fffffff) return qf_fail(ctx, QF_ERR_SHAPE, "qf_quant_per_tensor: rows of %lld elements are too long", (long long)a->x.cols);
  dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(a->x.rows < 65535 ? a->x.rows : 65535));
  auto kernel = vec ? quant_per_tensor_kernel<Tin, Tout, 8> : quant_per_tensor_kernel<Tin, Tout, 1>;
  auto dependent = vec ? quant_per_tensor_kernel<Tin, Tout, 8, true> : quant_per_tensor_kernel<Tin, Tout, 1, true>;
  return qf_cuda_launch(ctx, "qf_quant_per_tensor", kernel, dependent, grid, dim3(threads), 0,
                        static_cast<const Tin *>(a->x.data), a->x.ld, static_cast<Tout *>(a->q.data), a->q.ld, a->scale,
                        a->x.rows, a->x.cols);
}

template <typename Tin>
qf_status launch_out(qf_ctx *ctx, const qf_quant_tensor_args *a) {
  switch (a->q.dtype) {
    case QF_E4M3FN: return launch<Tin, e4m3fn_t>(ctx, a);
    case QF_E4M3FNUZ: return launch<Tin, e4m3fnuz_t>(ctx, a);
    default: return launch<Tin, int8_out_t>(ctx, a);
  }
}

}  // namespace

extern "C" qf_status qf_cuda_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a) {
  switch (a->x.dtype) {
    case QF_BF16: return launch_out<__nv_bfloat16>(ctx, a);
    case QF_F16: return launch_out<__half>(ctx, a);
    default: return launch_out<float>(ctx, a);
  }
}
