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
    switch (row_variant(cfg)) {
      case 0: return token_quant_kernel<Tin, Tout, ZP, S, 1, kPdl>;
      case 1: return token_quant_kernel<Tin, Tout, ZP, V, 1, kPdl>;
      case 2: return token_quant_kernel<Tin, Tout, ZP, V, 2, kPdl>;
      case 3: return token_quant_kernel<Tin, Tout, ZP, V, 4, kPdl>;
      default: return token_quant_kernel<Tin, Tout, ZP, V, kVptMax, kPdl>;
    }
  };
  const auto dependent = pick(std::true_type{});
  // With qf_ctx_set_pdl, up to a row per SM: one CTA per SM (kQfOneCtaPerSmBytes, common.cuh).
  // H200, W8A8 GEMM then this kernel at M = 1 to 128: 1.05x the time of the two calls without PDL
  // against 1.03-1.04x with the CTAs left free (M = 128 1.02-1.08x against 0.99-1.04x).
  size_t smem = 0;
  if (ctx->pdl && a->x.rows <= ctx->sm_count) {
    static std::atomic<uint64_t> opted_in[kRowVariants];
    smem = kQfOneCtaPerSmBytes;
    const qf_status st = qf_cuda_smem_opt_in(ctx, "qf_quant_token", dependent, smem, opted_in[row_variant(cfg)]);
    if (st != QF_OK) return st;
  }
  return qf_cuda_launch(ctx, "qf_quant_token", pick(std::false_type{}), dependent, dim3(row_blocks(a->x.rows)),
                        dim3(cfg.threads), smem, p);
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
