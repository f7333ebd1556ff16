// Launcher of the NVFP4 GEMM: up to 8 tokens the mma.sync kernel (nvfp4_gemm.cuh), beyond them
// the wgmma kernel (nvfp4_gemm_wide.cuh), each with K split over a cluster where its tiles leave
// SMs idle; per input and output type.
#include <atomic>

#include "cuda/common.cuh"
#include "cuda/fp4/nvfp4_gemm.cuh"
#include "cuda/fp4/nvfp4_gemm_wide.cuh"
#include "cuda/fp4/nvfp4_heuristic.h"
#include "cuda/tma_map.h"

namespace {

constexpr char kOp[] = "qf_gemm_nvfp4";

// CTAs per cluster splitting K: doubled while the row tiles fill fewer than `target` CTAs and
// each CTA keeps two chunks or more.
int k_split(int64_t tiles, int steps, int64_t target) {
  int split = 1;
  while (split < kFp4MaxSplit && tiles * split < target && steps / kFp4Chunk / (2 * split) >= 2) split *= 2;
  return split;
}

// Up to 8 tokens: the mma.sync kernel (nvfp4_gemm.cuh), K split over a cluster where the row tiles
// leave SMs idle.
template <typename T, typename Tout>
qf_status launch_narrow(qf_ctx *ctx, const Fp4Params &p) {
  static std::atomic<uint64_t> non_portable[2]; // per kernel below (the devices it was set on)
  const int64_t row_tiles = (p.N + kFp4Rows - 1) / kFp4Rows;
  // A target of as many CTAs as SMs (the split stops at the first that reaches it: one to two CTAs
  // per SM): fewer, longer streams, which the third ring stage below serves. Against the target of
  // four per SM before it, M = 1 on an H100: 7168 x 16384 37.0 -> 32.1 us, 8192 x 8192 24.5 ->
  // 20.6, 28672 x 8192 60.7 -> 54.8 (76 -> 84% of the floor), the others unchanged; two per SM ran
  // within 2% of one (bench/results/h100-dev-nvfp4-narrow-split-target-ab.jsonl).
  const int split = k_split(row_tiles, p.steps, static_cast<int64_t>(qf_cuda_stream_sms(ctx)));
  // A third ring stage where each CTA streams kFp4LongChunks chunks or more: at M = 1 28672 x 8192
  // (split 2, 8 chunks a CTA, on the target before; unsplit, 16, on this one) 64.6 -> 60.9 us; on
  // every CTA, the streams of 4 chunks or fewer ran -11% to +2.4%, and 8192 x 8192 (4 chunks a CTA)
  // 18% slower with it on a target of two CTAs per SM (H100, h100-dev-nvfp4-narrow-stages-ab.jsonl,
  // -ring-variants-ab.txt, -split-target-ab.jsonl).
  const bool long_ctas = p.steps / split / kFp4Chunk >= kFp4LongChunks;
  auto kernel = long_ctas ? nvfp4_gemm_kernel<T, Tout, kFp4LongStages> : nvfp4_gemm_kernel<T, Tout, kFp4Stages>;
  if (split > 8) {
    const qf_status st =
        qf_cuda_func_attribute_once(ctx, kOp, kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1,
                                    non_portable[long_ctas]);
    if (st) return st;
  }
  const dim3 grid(split, 1, static_cast<unsigned>(row_tiles));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t lc = qf_cluster_launch_config(grid, dim3(32 * kFp4Warps), 0, qf_stream(ctx), grid.x,
                                                         ctx->pdl != 0, attrs);
  return qf_cuda_launch_ex(ctx, kOp, lc, kernel, p);
}

// Many tokens: the wgmma kernel on (64 kWG)-row x kTok-token tiles (nvfp4_gemm_wide.cuh), K split
// over clusters of `split` CTAs (one-warpgroup tiles only; at least one step each).
template <typename T, typename Tout, int kWG, int kTok, int kStages>
qf_status launch_wide(qf_ctx *ctx, const Fp4Params &p, const qf_mat &a, int split = 1) {
  if (kWG > 1) split = 1; // the kernel's split exchange assumes one warpgroup
  static std::atomic<uint64_t> opted{0};
  auto kernel = nvfp4_gemm_wide_kernel<T, Tout, kWG, kTok, kStages>;
  const size_t smem = sizeof(Fp4WideSmem<kWG, kTok, kStages>) + 1024;
  static_assert(sizeof(Fp4WideSmem<kWG, kTok, kStages>) + 1024 <= 227 * 1024, "the ring fits an SM's shared memory");
  qf_status st = qf_cuda_smem_opt_in(ctx, kOp, kernel, smem, opted);
  if (st) return st;
  CUtensorMap x_map, b_map;
  if ((st = qf_cuda_make_tmap(ctx, kOp, &x_map, "a", a, kTok))) return st;
  if ((st = qf_cuda_make_tmap_bytes(ctx, kOp, &b_map, "b", p.b, p.N, p.K / 2, p.ldb, 64, 64 * kWG,
                                    CU_TENSOR_MAP_SWIZZLE_64B)))
    return st;
  const int64_t tiles = (p.M + kTok - 1) / kTok * ((p.N + 64 * kWG - 1) / (64 * kWG));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t lc = qf_cluster_launch_config(dim3(static_cast<unsigned>(tiles * split)), dim3(128 * kWG), smem,
                                                         qf_stream(ctx), split, ctx->pdl != 0, attrs);
  return qf_cuda_launch_ex(ctx, kOp, lc, kernel, p, x_map, b_map, split);
}

// The kernel for the shape: the mma.sync kernel up to kFp4NarrowMaxM tokens, past that the wgmma
// kernel on the tile and K split of fp4_wide_plan (nvfp4_heuristic.h); a forced plan (not NULL:
// qf_cuda_gemm_nvfp4_with) takes the wgmma kernel whatever M.
template <typename T, typename Tout>
qf_status run(qf_ctx *ctx, const Fp4Params &p, const qf_mat &a, const Fp4WidePlan *forced) {
  if (!forced && p.M <= kFp4NarrowMaxM) return launch_narrow<T, Tout>(ctx, p);
  const Fp4WidePlan plan = forced ? *forced : fp4_wide_plan(p.M, p.N, p.steps, qf_cuda_stream_sms(ctx));
#define QF_FP4_CASE(WG, TOK) \
  if (plan.warpgroups == WG && plan.tok == TOK) \
    return launch_wide<T, Tout, WG, TOK, fp4_wide_stages(WG, TOK)>(ctx, p, a, plan.split);
#define QF_FP4_CASE1(TOK) QF_FP4_CASE(1, TOK)
#define QF_FP4_CASE2(TOK) QF_FP4_CASE(2, TOK)
  QF_FP4_WIDE_TOKENS(QF_FP4_CASE1)
  QF_FP4_WIDE2_TOKENS(QF_FP4_CASE2)
#undef QF_FP4_CASE2
#undef QF_FP4_CASE1
#undef QF_FP4_CASE
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for %d-token tiles", kOp, plan.tok);
}

template <typename T>
qf_status run_out(qf_ctx *ctx, const Fp4Params &p, const qf_mat &a, qf_dtype out, const Fp4WidePlan *forced) {
  switch (out) {
    case QF_F32: return run<T, float>(ctx, p, a, forced);
    case QF_F16: return run<T, __half>(ctx, p, a, forced);
    default: return run<T, __nv_bfloat16>(ctx, p, a, forced);
  }
}

qf_status gemm(qf_ctx *ctx, const qf_gemm_nvfp4_args *g, const Fp4WidePlan *forced) {
  // Grid extents (the narrow kernel's row tiles on z, the wide kernel's tiles on x) and the
  // kernels' 32-bit token, row and K indices (a token tile's last index, up to M + 255, included).
  const int64_t narrow_rows = (g->N + kFp4Rows - 1) / kFp4Rows;
  const int64_t wide_tiles = (g->M + 127) / 128 * ((g->N + 63) / 64);
  if (g->M > INT32_MAX - 255 || narrow_rows > 65535 || wide_tiles > INT32_MAX || g->K > (int64_t{1} << 30))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: CUDA takes M up to 2^31 - 256, N up to %d, K up to 2^30 and ceil(M / 128) ceil(N / 64) up to "
                   "2^31 - 1 (got M=%lld, N=%lld, K=%lld)",
                   kOp, 65535 * kFp4Rows, (long long)g->M, (long long)g->N, (long long)g->K);
  Fp4Params p = {};
  p.a = g->a.data, p.lda = g->a.ld;
  p.b = static_cast<const uint8_t *>(g->b.data), p.ldb = g->b.ld / 2;
  p.scales = static_cast<const uint8_t *>(g->scales.data), p.lds = g->scales.ld;
  p.tensor_scale = g->tensor_scale;
  p.d = g->d.data, p.ldd = g->d.ld;
  p.M = static_cast<int>(g->M), p.N = static_cast<int>(g->N), p.K = static_cast<int>(g->K);
  p.steps = static_cast<int>((g->K + kFp4StepK - 1) / kFp4StepK);
  return g->a.dtype == QF_F16 ? run_out<__half>(ctx, p, g->a, g->d.dtype, forced)
                              : run_out<__nv_bfloat16>(ctx, p, g->a, g->d.dtype, forced);
}

} // namespace

extern "C" qf_status qf_cuda_gemm_nvfp4(qf_ctx *ctx, const qf_gemm_nvfp4_args *g) { return gemm(ctx, g, nullptr); }

extern "C" qf_status qf_cuda_gemm_nvfp4_with(qf_ctx *ctx, const qf_gemm_nvfp4_args *g, int warpgroups, int tok,
                                             int split) {
  static constexpr char kOpWith[] = "qf_gemm_nvfp4_with";
  const int64_t steps = (g->K + kFp4StepK - 1) / kFp4StepK;
  if (!fp4_wide_tile(warpgroups, tok) || !(split == 1 || split == 2 || split == 4 || split == 8) ||
      (warpgroups == 2 && split > 1) || split > steps)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: no plan of %d warpgroup(s), %d-token tiles and a split of %d for K=%lld (one warpgroup: a "
                   "token tile of QF_FP4_WIDE_TOKENS and 1, 2, 4 or 8 CTAs of a step of 128 K or more; two: one of "
                   "QF_FP4_WIDE2_TOKENS, unsplit)",
                   kOpWith, warpgroups, tok, split, (long long)g->K);
  if (g->M == 0 || g->N == 0) return QF_OK;
  const int64_t ctas = (g->M + tok - 1) / tok * ((g->N + 64 * warpgroups - 1) / (64 * warpgroups)) * split;
  if (ctas > INT32_MAX)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %lld CTAs for %d-token tiles split %d; at most 2^31 - 1", kOpWith,
                   (long long)ctas, tok, split);
  const Fp4WidePlan plan = {warpgroups, tok, split};
  return gemm(ctx, g, &plan);
}

extern "C" void qf_cuda_gemm_nvfp4_plan(qf_ctx *ctx, int64_t M, int64_t N, int64_t K, int *warpgroups, int *tok,
                                        int *split) {
  const Fp4WidePlan plan = M <= kFp4NarrowMaxM ? Fp4WidePlan{0, 0, 0}
                                               : fp4_wide_plan(M, N, static_cast<int>((K + kFp4StepK - 1) / kFp4StepK),
                                                               qf_cuda_stream_sms(ctx));
  *warpgroups = plan.warpgroups, *tok = plan.tok, *split = plan.split;
}

extern "C" int qf_cuda_gemm_nvfp4_balanced_tok(int64_t M, int warpgroups) {
  return warpgroups == 1 ? fp4_balanced_tok(M, 128, 16) : fp4_balanced_tok(M, 256, 32);
}
