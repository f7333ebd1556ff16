// Launcher of the NVFP4 GEMM (nvfp4_gemm.cuh): token tile, K split and output type.
#include <atomic>

#include "cuda/common.cuh"
#include "cuda/fp4/nvfp4_gemm.cuh"
#include "cuda/fp4/nvfp4_gemm_wide.cuh"
#include "cuda/tma_map.h"

namespace {

constexpr char kOp[] = "qf_gemm_nvfp4";

// Past this many tokens the wgmma kernel takes the GEMM.
constexpr int64_t kFp4WideMinM = 32;

// Token fragments of 8 per CTA: one or two at decode, four (32 tokens) beyond.
int token_fragments(int64_t M) { return M <= 8 ? 1 : M <= 16 ? 2 : 4; }

// CTAs per cluster splitting K: doubled while the tiles fill fewer than `target` CTAs and each
// CTA keeps two chunks or more.
int k_split(int64_t tiles, int steps, int64_t target) {
  int split = 1;
  while (split < kFp4MaxSplit && tiles * split < target && steps / kFp4Chunk / (2 * split) >= 2) split *= 2;
  return split;
}

template <typename T, typename Tout, int NF>
qf_status launch(qf_ctx *ctx, const Fp4Params &p, dim3 grid) {
  static std::atomic<uint64_t> non_portable{0};
  auto kernel = nvfp4_gemm_kernel<T, Tout, NF>;
  if (grid.x > 8) {
    const uint64_t bit = ctx->device_id < 64 ? uint64_t{1} << ctx->device_id : 0;
    if (!(non_portable.load(std::memory_order_relaxed) & bit)) {
      const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (err != cudaSuccess) return qf_cuda_fail(ctx, kOp, "cudaFuncSetAttribute", err);
      non_portable.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t lc = qf_cluster_launch_config(grid, dim3(32 * kFp4Warps), 0, qf_stream(ctx), grid.x,
                                                         ctx->pdl != 0, attrs);
  return qf_cuda_launch_ex(ctx, kOp, lc, kernel, p);
}

// Many tokens: the wgmma kernel on (64 kWG)-row x 128-token tiles (nvfp4_gemm_wide.cuh).
template <typename T, typename Tout, int kWG, int kStages>
qf_status launch_wide(qf_ctx *ctx, const Fp4Params &p, const qf_mat &a) {
  static std::atomic<uint64_t> opted{0};
  auto kernel = nvfp4_gemm_wide_kernel<T, Tout, kWG, kStages>;
  const size_t smem = sizeof(Fp4WideSmem<kWG, kStages>) + 1024;
  qf_status st = qf_cuda_smem_opt_in(ctx, kOp, kernel, smem, opted);
  if (st) return st;
  CUtensorMap x_map;
  if ((st = qf_cuda_make_tmap(ctx, kOp, &x_map, "a", a, kFp4WideTokens))) return st;
  const int64_t tiles = (p.M + kFp4WideTokens - 1) / kFp4WideTokens * ((p.N + 64 * kWG - 1) / (64 * kWG));
  return qf_cuda_launch(ctx, kOp, kernel, kernel, dim3(static_cast<unsigned>(tiles)), dim3(128 * kWG), smem, p, x_map);
}

template <typename T, typename Tout>
qf_status dispatch_nf(qf_ctx *ctx, const Fp4Params &p, dim3 grid, int nf) {
  switch (nf) {
    case 1: return launch<T, Tout, 1>(ctx, p, grid);
    case 2: return launch<T, Tout, 2>(ctx, p, grid);
    default: return launch<T, Tout, 4>(ctx, p, grid);
  }
}

template <typename T, typename Tout>
qf_status dispatch_kernel(qf_ctx *ctx, const Fp4Params &p, dim3 grid, int nf, const qf_mat &a) {
  if (p.M <= kFp4WideMinM) return dispatch_nf<T, Tout>(ctx, p, grid, nf);
  // By the number of 64-row tiles (docs/NVFP4.md, bench/results h200-dev-nvfp4-*): several waves
  // of them run two per SM (one warpgroup each, two stages: one CTA dequantizes while the other
  // multiplies); one token tile of many row tiles runs 128-row tiles of two warpgroups; a wave or
  // less, one warpgroup on three stages.
  const int64_t tiles = (p.M + kFp4WideTokens - 1) / kFp4WideTokens * ((p.N + 63) / 64), sms = qf_cuda_stream_sms(ctx);
  if (tiles >= 4 * sms) return launch_wide<T, Tout, 1, 2>(ctx, p, a);
  if (tiles >= 2 * sms) return launch_wide<T, Tout, 2, 4>(ctx, p, a);
  return launch_wide<T, Tout, 1, 3>(ctx, p, a);
}

template <typename T>
qf_status dispatch_out(qf_ctx *ctx, const Fp4Params &p, dim3 grid, int nf, const qf_mat &a, qf_dtype out) {
  switch (out) {
    case QF_F32: return dispatch_kernel<T, float>(ctx, p, grid, nf, a);
    case QF_F16: return dispatch_kernel<T, __half>(ctx, p, grid, nf, a);
    default: return dispatch_kernel<T, __nv_bfloat16>(ctx, p, grid, nf, a);
  }
}

} // namespace

extern "C" qf_status qf_cuda_gemm_nvfp4(qf_ctx *ctx, const qf_gemm_nvfp4_args *g) {
  const int nf = token_fragments(g->M);
  const int64_t token_tiles = (g->M + 8 * nf - 1) / (8 * nf), row_tiles = (g->N + kFp4Rows - 1) / kFp4Rows;
  if (token_tiles > 65535 || row_tiles > 65535 || g->K > (int64_t{1} << 30))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: CUDA takes M up to %d, N up to %d and K up to 2^30 (got %lld, %lld, %lld)",
                   kOp, 65535 * 32, 65535 * kFp4Rows, (long long)g->M, (long long)g->N, (long long)g->K);
  Fp4Params p = {};
  p.a = g->a.data, p.lda = g->a.ld;
  p.b = static_cast<const uint8_t *>(g->b.data), p.ldb = g->b.ld / 2;
  p.scales = static_cast<const uint8_t *>(g->scales.data), p.lds = g->scales.ld;
  p.tensor_scale = g->tensor_scale;
  p.d = g->d.data, p.ldd = g->d.ld;
  p.M = static_cast<int>(g->M), p.N = static_cast<int>(g->N), p.K = static_cast<int>(g->K);
  p.steps = static_cast<int>((g->K + kFp4StepK - 1) / kFp4StepK);
  // A target of four CTAs per SM (eight and sixteen measured no better: docs/NVFP4.md).
  const int split = k_split(token_tiles * row_tiles, p.steps, 4 * static_cast<int64_t>(qf_cuda_stream_sms(ctx)));
  const dim3 grid(split, static_cast<unsigned>(token_tiles), static_cast<unsigned>(row_tiles));
  return g->a.dtype == QF_F16 ? dispatch_out<__half>(ctx, p, grid, nf, g->a, g->d.dtype)
                              : dispatch_out<__nv_bfloat16>(ctx, p, grid, nf, g->a, g->d.dtype);
}
