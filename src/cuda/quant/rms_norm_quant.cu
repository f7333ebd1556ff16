// Launcher of the RMSNorm + quantization kernel: picks the instantiation from the dtypes, the
// scale granularity and the row length.
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/quant/rms_norm_quant.cuh"

namespace {

// CTAs per row, measured on H100 with bf16 + residual, per-128-group and per-token quantization.
// - Rows enough to fill the chip: split only rows longer than a block holds at 4 chunks per
//   thread (16384 columns). At K = 18432 one block needs 8 chunks per thread, registers then
//   allow 2 rows per SM, and 2 CTAs of 4 chunks per thread run at 81-90% of the copy bandwidth
//   against 67-76%; at K = 7168 splitting in 2 costs 10-20%.
// - Fewer rows than SMs (decode): only long rows (K >= 8192), into slices of at least 2304
//   columns, up to 8 CTAs (the portable cluster size) for a few rows and 4 for more. In us, split
//   1 / 2 / 4 / 8: M = 1, K = 18432: 14.5 / 14.8 / 9.0 / 7.8; M = 128: 18.7 / 19.5 / 15.7 / 17.6.
//   At K = 2048 and 7168 splitting costs up to 1 us at M = 1 (the cluster launch), more at M = 128.
int row_split(int64_t cols, int64_t rows, int sm_count) {
  int split = 1;
  if (rows >= sm_count) {
    while (split < 8 && cols > 4 * 8 * kRowThreadsMax * split) split *= 2;
    return split;
  }
  if (cols < 8192) return 1;
  const int most = rows * 4 <= sm_count ? 8 : 4;
  while (split < most && cols >= 2304 * 2 * split) split *= 2;
  return split;
}

bool rows_aligned(const void *data, int64_t ld, size_t elem, size_t bytes) {
  return reinterpret_cast<uintptr_t>(data) % bytes == 0 && (ld * elem) % bytes == 0;
}

// The instantiation for the row configuration (row_variant, token_quant.cuh); kPdl to launch as a
// programmatic dependent.
template <typename T, typename Tout, ScaleGranularity GRAN, bool kPdl>
void (*row_kernel(const RowConfig &cfg))(RmsNormQuantParams) {
  constexpr RowAccess S = RowAccess::kScalar, V = RowAccess::kVec16;
  switch (row_variant(cfg)) {
    case 0: return rms_norm_quant_kernel<T, Tout, GRAN, S, 1, false, kPdl>;
    case 1: return rms_norm_quant_kernel<T, Tout, GRAN, V, 1, false, kPdl>;
    case 2: return rms_norm_quant_kernel<T, Tout, GRAN, V, 2, false, kPdl>;
    case 3: return rms_norm_quant_kernel<T, Tout, GRAN, V, 4, false, kPdl>;
    default: return rms_norm_quant_kernel<T, Tout, GRAN, V, 8, false, kPdl>;
  }
}

template <typename T, typename Tout, ScaleGranularity GRAN>
qf_status launch(qf_ctx *ctx, const qf_rms_norm_quant_args *a) {
  if (a->x.cols > kRowColsMax)
    return qf_fail(ctx, QF_ERR_SHAPE, "qf_rms_norm_quant: rows of %lld elements are too long", (long long)a->x.cols);
  const bool vec = a->x.cols % 8 == 0 && rows_aligned(a->x.data, a->x.ld, sizeof(T), 16) &&
                   rows_aligned(a->weight, 0, sizeof(T), 16) &&
                   (!a->residual.data || rows_aligned(a->residual.data, a->residual.ld, sizeof(T), 16)) &&
                   rows_aligned(a->q.data, a->q.ld, 1, 8);
  // A split row: slices of whole 256-column runs, as even as they go.
  int split = row_split(a->x.cols, a->x.rows, ctx->sm_count);
  const int64_t runs = (a->x.cols + 255) / 256, slice = (runs + split - 1) / split * 256;
  split = static_cast<int>((a->x.cols + slice - 1) / slice);
  const RowConfig cfg = row_config(split > 1 ? slice : a->x.cols, sizeof(T), vec, a->x.rows, ctx->sm_count);
  RmsNormQuantParams p;
  p.x = a->x.data, p.residual = a->residual.data, p.weight = a->weight, p.q = a->q.data;
  p.x_ld = a->x.ld, p.res_ld = a->residual.ld, p.q_ld = a->q.ld, p.rows = a->x.rows;
  p.cols = static_cast<int>(a->x.cols);
  p.eps = a->eps, p.scales = a->scales;
  p.pdl = ctx->pdl;
  p.group_shift = a->group_size == 32 ? 5 : a->group_size == 64 ? 6 : 7;  // per token: unused
  p.split = split, p.slice = static_cast<int>(slice);
  // One CTA (cluster) per row. Per group, for rows split over clusters: as many clusters as fit
  // the GPU at once, each copying its next row into shared memory one row ahead (H200, K = 18432:
  // 80 -> 87% of copy16 at M = 16384; the per-token kernel and shorter rows ran slower that way).
  int64_t row_groups = a->x.rows < 0x7fffffff / split ? a->x.rows : 0x7fffffff / split;
  const int64_t slice_chunks = (slice + 7) / 8;
  const size_t ahead_bytes = size_t(16) * cfg.vpt * cfg.threads * (a->residual.data ? 2 : 1);
  size_t smem = 0;
  auto kernel = row_kernel<T, Tout, GRAN, false>(cfg);
  if constexpr (GRAN == ScaleGranularity::kPerGroup) {
    if (split > 1 && cfg.access == RowAccess::kVec16 && cfg.vpt == 4 && slice_chunks <= int64_t(cfg.vpt) * cfg.threads &&
        ahead_bytes <= 48 * 1024) {
      auto ahead_kernel = rms_norm_quant_kernel<T, Tout, GRAN, RowAccess::kVec16, 4, true>;
      int per_sm = 0;
      const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ahead_kernel, cfg.threads, ahead_bytes);
      if (err != cudaSuccess) return qf_cuda_fail(ctx, "qf_rms_norm_quant", "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
      const int64_t resident = int64_t(per_sm) * ctx->sm_count / split;
      if (resident > 0 && a->x.rows > resident) row_groups = resident, kernel = ahead_kernel, smem = ahead_bytes;
    }
  }
  // With qf_ctx_set_pdl, decode grids launch as programmatic dependents (the kPdl instantiation):
  // one CTA a row up to one per SM, each CTA holding kQfOneCtaPerSmBytes, and clusters of split rows
  // up to half the SMs. The CTAs of a dependent become resident while the GEMM before it runs; left
  // free, they crowd onto the SMs that the GEMM leaves idle, several per SM, and run there after it
  // at a fraction of the bandwidth (M = 128 rows 0.95-0.99x the time of the same two calls without
  // PDL); one per SM, M = 128 ran 1.04-1.07x (H200). Clusters held to one CTA per SM wait for whole
  // free groups of SMs (0.87-0.89x), and clusters on more than half the SMs crowd as above
  // (docs/GEMM.md).
  const int64_t ctas = row_groups * split;
  const bool one_per_sm = split == 1 && ctas <= ctx->sm_count;
  const bool dependent = ctx->pdl && smem == 0 && (one_per_sm || ctas * 2 <= ctx->sm_count);
  if (dependent) {
    kernel = row_kernel<T, Tout, GRAN, true>(cfg);
    if (one_per_sm) {
      static std::atomic<uint64_t> opted_in[kRowVariants];
      smem = kQfOneCtaPerSmBytes;
      const qf_status st = qf_cuda_smem_opt_in(ctx, "qf_rms_norm_quant", kernel, smem, opted_in[row_variant(cfg)]);
      if (st != QF_OK) return st;
    }
  }
  // Clusters of `split` CTAs (none for 1).
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t lc = qf_cluster_launch_config(dim3(static_cast<unsigned>(ctas)), dim3(cfg.threads), smem,
                                                         qf_stream(ctx), static_cast<unsigned>(split), dependent, attrs);
  return qf_cuda_launch_ex(ctx, "qf_rms_norm_quant", lc, kernel, p);
}

template <typename T, ScaleGranularity GRAN>
qf_status launch_out(qf_ctx *ctx, const qf_rms_norm_quant_args *a) {
  switch (a->q.dtype) {
    case QF_E4M3FN: return launch<T, e4m3fn_t, GRAN>(ctx, a);
    case QF_E4M3FNUZ: return launch<T, e4m3fnuz_t, GRAN>(ctx, a);
    default: return launch<T, int8_out_t, GRAN>(ctx, a);
  }
}

template <typename T>
qf_status launch_granularity(qf_ctx *ctx, const qf_rms_norm_quant_args *a) {
  return a->group_size == -1 ? launch_out<T, ScaleGranularity::kPerToken>(ctx, a)
                             : launch_out<T, ScaleGranularity::kPerGroup>(ctx, a);
}

}  // namespace

extern "C" qf_status qf_cuda_rms_norm_quant(qf_ctx *ctx, const qf_rms_norm_quant_args *a) {
  return a->x.dtype == QF_BF16 ? launch_granularity<__nv_bfloat16>(ctx, a) : launch_granularity<__half>(ctx, a);
}
