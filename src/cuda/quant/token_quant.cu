// Launcher of the per-token quantization kernel: picks the instantiation from the dtypes, the
// zero-point mode and the row length.
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/quant/token_quant.cuh"

namespace {

template <typename Tin, typename Tout, ZeroPoint ZP>
qf_status launch(qf_ctx *ctx, const qf_token_quant_args *a) {
  if (a->x.cols > kRowColsMax)
    return qf_fail(ctx, QF_ERR_SHAPE, "qf_quant_token: rows of %lld elements are too long", (long long)a->x.cols);
  const bool vec = a->x.cols % 8 == 0 && reinterpret_cast<uintptr_t>(a->x.data) % 16 == 0 &&
                   (a->x.ld * sizeof(Tin)) % 16 == 0 && reinterpret_cast<uintptr_t>(a->q.data) % 8 == 0 &&
                   a->q.ld % 8 == 0;
  const RowConfig cfg = row_config(a->x.cols, sizeof(Tin), vec, a->x.rows, ctx->sm_count);
  TokenQuantParams p;
  p.x = a->x.data, p.q = a->q.data;
  p.x_ld = a->x.ld, p.q_ld = a->q.ld, p.rows = a->x.rows, p.cols = static_cast<int>(a->x.cols);
  p.scales = a->scales, p.azp = a->azp, p.scale_min = a->scale_min, p.ub = a->ub;
  constexpr RowAccess S = RowAccess::kScalar, V = RowAccess::kVec16;
  constexpr int kVptMax = row_vpt_max(sizeof(Tin));  // 8 for 16-bit inputs, 4 for fp32
  auto pick = [&](auto pdl) {
    constexpr bool kPdl = decltype(pdl)::value;
    return cfg.access == S ? token_quant_kernel<Tin, Tout, ZP, S, 1, kPdl>
           : cfg.vpt == 1  ? token_quant_kernel<Tin, Tout, ZP, V, 1, kPdl>
           : cfg.vpt == 2  ? token_quant_kernel<Tin, Tout, ZP, V, 2, kPdl>
           : cfg.vpt == 4  ? token_quant_kernel<Tin, Tout, ZP, V, 4, kPdl>
                           : token_quant_kernel<Tin, Tout, ZP, V, kVptMax, kPdl>;
  };
  return qf_cuda_launch(ctx, "qf_quant_token", pick(std::false_type{}), pick(std::true_type{}), dim3(row_blocks(a->x.rows)),
                        dim3(cfg.threads), 0, p);
}

template <typename Tin>
qf_status launch_out(qf_ctx *ctx, const qf_token_quant_args *a) {
  if (a->azp) return launch<Tin, int8_out_t, ZeroPoint::kPerToken>(ctx, a);
  switch (a->q.dtype) {
    case QF_E4M3FN: return launch<Tin, e4m3fn_t, ZeroPoint::kNone>(ctx, a);
    case QF_E4M3FNUZ: return launch<Tin, e4m3fnuz_t, ZeroPoint::kNone>(ctx, a);
    default: return launch<Tin, int8_out_t, ZeroPoint::kNone>(ctx, a);
  }
}

}  // namespace

extern "C" qf_status qf_cuda_quant_token(qf_ctx *ctx, const qf_token_quant_args *a) {
  switch (a->x.dtype) {
    case QF_BF16: return launch_out<__nv_bfloat16>(ctx, a);
    case QF_F16: return launch_out<__half>(ctx, a);
    default: return launch_out<float>(ctx, a);
  }
}
