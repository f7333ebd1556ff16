// Launchers of the sm_90 GEMM engine (sm90_gemm.cuh) for qf_gemm_fp8_blockscale and
// qf_gemm_scaled: the recipe's parameters, tensor maps for A, B and D, the heuristic's tile shape
// and split, the output type, the split-K workspace, and a persistent grid of one CTA per SM (at
// most one per work unit).
#include <atomic>
#include <cuda.h>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/tma_map.h"
#include "cuda/gemm/sm90_gemm_heuristic.h"

namespace {

// What the launcher needs besides the recipe's own parameters (already in p).
struct Problem {
  const char *op;
  qf_mat a, b, d;
  int64_t M, N, K;
  int sms;  // the SMs the stream's work can occupy (ctx->stream_sms): one CTA each at most
  bool swiglu;  // grouped: the SwiGLU epilogue
  int fine;     // block-scaled, fp32 D: promotion every 32 or 64 of K (Sm90Variant::kFinePromotion, 64); 0: 128
};

template <Sm90Recipe R, int kBlockM, int kBlockN, typename OutT,
          int kStages = sm90_gemm_stages(kBlockM, kBlockN, int(sizeof(OutT))), Sm90Variant V = Sm90Variant::kAny>
qf_status launch(qf_ctx *ctx, const Problem &pr, sm90_gemm_params p, const sm90_gemm_config &cfg) {
  const char *kOp = pr.op;
  constexpr bool kTallSplit = V == Sm90Variant::kTallSplit, kTallTail = V == Sm90Variant::kTallTail;
  constexpr size_t kSmem =
      sm90_gemm_smem<kBlockM, kBlockN, kStages, int(sizeof(OutT)), sm90_gemm_epilogue_factors(R),
                     sm90_gemm_scale_slot_bytes(kBlockM, kStages, V)>::kBytes;
  if (kSmem > ctx->smem_optin)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the %dx%d tile needs %zu bytes of shared memory, the device allows %zu",
                   kOp, kBlockM, kBlockN, kSmem, ctx->smem_optin);

  p.d = pr.d.data;
  p.d_ld = pr.d.ld;
  p.M = static_cast<int>(pr.M);
  p.N = static_cast<int>(pr.N);
  p.num_kb = static_cast<int>((pr.K + 127) / 128);
  p.tiles_m = static_cast<int>((pr.M + kBlockM - 1) / kBlockM);
  p.tiles_n = static_cast<int>((pr.N + kBlockN - 1) / kBlockN);
  p.raster_group = cfg.raster_group;
  // 2-element accesses need even pitches (one row: the pitch is unused) and aligned starts.
  const bool d_pairs = (pr.d.ld % 2 == 0 || pr.M == 1) && reinterpret_cast<uintptr_t>(pr.d.data) % (2 * sizeof(OutT)) == 0;
  const bool c_pairs = p.c == nullptr || ((p.c_ld % 2 == 0 || pr.M == 1) && reinterpret_cast<uintptr_t>(p.c) % 8 == 0);
  p.pairs = d_pairs && c_pairs;
  p.splits = cfg.splits;
  p.by_splits = qf_fastdiv_make(static_cast<uint32_t>(p.splits));
  p.by_group = qf_fastdiv_make(static_cast<uint32_t>(p.raster_group));
  const int last_rows = p.tiles_m % p.raster_group;
  p.by_last_rows = qf_fastdiv_make(static_cast<uint32_t>(last_rows > 0 ? last_rows : p.raster_group));
  p.by_group_tiles = qf_fastdiv_make(static_cast<uint32_t>(p.raster_group * p.tiles_n));
  p.whole_tiles = static_cast<int>(cfg.whole_tiles);
  p.tail_kb = static_cast<int>(cfg.tail_kb);
  const int units = p.whole_tiles + (p.tiles_m * p.tiles_n - p.whole_tiles) * p.splits;
  const int grid = units < pr.sms ? units : (pr.sms > 0 ? pr.sms : 1);
  // kTallTail: the last round's tiles, fewer than the CTAs, each with a CTA of its own for its
  // owner unit and at least one CTA left over for the helpers (all resident: cooperative launch);
  // both ranges non-empty.
  const int tail = p.tiles_m * p.tiles_n - p.whole_tiles;
  if (kTallTail && (p.splits != 2 || p.whole_tiles % grid != 0 || tail <= 0 || tail >= grid || p.tail_kb <= 0 ||
                    p.tail_kb >= p.num_kb))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: a tail of %d %dx%d tiles (owners of %d of %d K-blocks) does not fit a round of %d CTAs",
                   kOp, tail, kBlockM, kBlockN, p.tail_kb, p.num_kb, grid);
  // The units of a split 256-row tile wait for each other, so each must have a CTA of its own
  // (one CTA per SM the stream can use, launched cooperatively below: the grid's CTAs are resident
  // together): all split units in the grid's last round, at most one per CTA.
  if (kBlockM == 256 && p.splits > 1 && !kTallTail && (!kTallSplit || p.whole_tiles % grid != 0 || units - p.whole_tiles > grid))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %d split units of %dx%d tiles do not fit the last round of %d CTAs",
                   kOp, units - p.whole_tiles, kBlockM, kBlockN, grid);
  if (kTallSplit && p.splits > 1 && !sm90_gemm_tall_share_fits(p.splits, kStages))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: a %dx%d tile split %d ways has shares too large for its %d-stage ring",
                   kOp, kBlockM, kBlockN, p.splits, kStages);
  if (p.splits > 1) {
    // The counters sit at a fixed place, the workspace's counter area (zero between calls);
    // the heuristic splits fewer tiles than there are SMs, far fewer than it holds.
    const size_t tiles = size_t(p.tiles_m) * p.tiles_n - p.whole_tiles;
    if (tiles > kQfWorkspaceCounters)
      return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %zu split tiles exceed the %d workspace counters", kOp, tiles,
                     kQfWorkspaceCounters);
    void *ws = nullptr;
    // (kTallTail: one partial a tile, its helper's)
    const size_t partial_bytes = tiles * (kTallTail ? 1 : p.splits) * kBlockM * kBlockN * sizeof(float);
    qf_status st = qf_cuda_workspace(ctx, kOp, kQfWorkspaceCounters * sizeof(int) + partial_bytes, &ws);
    if (st != QF_OK) return st;
    p.counters = static_cast<int *>(ws);
    p.partials = reinterpret_cast<float *>(static_cast<int *>(ws) + kQfWorkspaceCounters);
  }

  // With K == 0 no copy is issued and the maps stay unused (zeros); D = C or 0 (+ bias).
  CUtensorMap tmap_a = {}, tmap_a_tail = {}, tmap_b = {}, tmap_d = {};
  qf_status st;
  if (pr.K > 0) {
    // Decode (M < BLOCK_M): A's box stops at M rounded up to 8 rows instead of having the copy
    // engine zero-fill the rows past M. The fill is not free: at M = 1 and 16 trimming the box
    // made every weight-streaming shape 3-31% faster on an H200 ((7168, 16384) block-scaled at
    // M = 1: 54 -> 41 us; INT8 (8192, 28672): 89 -> 69 us); M = 64 did not move.
    const uint32_t a_rows = pr.M < kBlockM ? static_cast<uint32_t>((pr.M + 7) / 8 * 8) : kBlockM;
    p.a_stage_bytes = a_rows * 128;
    if ((st = qf_cuda_make_tmap(ctx, kOp, &tmap_a, "a", pr.a, a_rows)) != QF_OK) return st;
    // The same for the last tile row of a partial one (M > BLOCK_M): a box of its rows, so that the
    // copy engine fills no rows past M. The fill cost tile rows of few rows up to 2x the time of
    // whole ones: (160, 36864, 7168), two rows of 128 x 128 tiles, 194.5 us against 133.7 at M =
    // 256 (H100, the plan sweep; docs/GEMM.md).
    const int64_t tail = pr.M % kBlockM;
    const uint32_t tail_rows = pr.M > kBlockM && tail != 0 ? static_cast<uint32_t>((tail + 7) / 8 * 8) : a_rows;
    p.a_tail_bytes = tail_rows * 128;
    tmap_a_tail = tmap_a;
    if (tail_rows != a_rows && (st = qf_cuda_make_tmap(ctx, kOp, &tmap_a_tail, "a", pr.a, tail_rows)) != QF_OK)
      return st;
    if ((st = qf_cuda_make_tmap(ctx, kOp, &tmap_b, "b", pr.b, kBlockN)) != QF_OK) return st;
  }
  // 16-bit D without C leaves through TMA (the whole 64-row half tile of a consumer warpgroup per
  // copy) when its start and pitch are 16-byte aligned and the tile has whole 64-column boxes.
  p.tma_store = sm90_gemm_staged(sm90_gemm_out_cols(kBlockN, V), int(sizeof(OutT))) && p.c == nullptr &&
                reinterpret_cast<uintptr_t>(pr.d.data) % 16 == 0 && (pr.M == 1 || (pr.d.ld * 2) % 16 == 0);
  if (p.tma_store && (st = qf_cuda_make_tmap(ctx, kOp, &tmap_d, "d", pr.d, 64)) != QF_OK) return st;

  auto kernel = sm90_gemm_kernel<R, kBlockM, kBlockN, kStages, OutT, V>;
  static std::atomic<uint64_t> opted_in{0};
  if ((st = qf_cuda_smem_opt_in(ctx, kOp, kernel, kSmem, opted_in)) != QF_OK) return st;
  const int threads = sm90_gemm_consumers(kBlockM) * 128 + 128;
  if constexpr (kTallSplit || kTallTail) {
    // A cooperative launch (its split units wait for each other): the grid starts only once all
    // its CTAs can be resident together, so that no split unit waits on a CTA that cannot start
    // until some other kernel leaves (two such GEMMs on two streams, each holding part of the SMs,
    // would wait on each other).
    cudaLaunchAttribute coop;
    return qf_cuda_launch_ex(
        ctx, kOp, qf_cooperative_launch_config(dim3(static_cast<unsigned>(grid)), dim3(threads), kSmem, qf_stream(ctx), &coop),
        kernel, tmap_a, tmap_a_tail, tmap_b, tmap_d, p);
  } else {
    // With qf_ctx_set_pdl, the kernel's kPdl instantiation as a programmatic dependent (sm90_gemm.cuh).
    auto dependent = sm90_gemm_kernel<R, kBlockM, kBlockN, kStages, OutT, V, true>;
    static std::atomic<uint64_t> dependent_opted_in{0};
    if (ctx->pdl && (st = qf_cuda_smem_opt_in(ctx, kOp, dependent, kSmem, dependent_opted_in)) != QF_OK) return st;
    return qf_cuda_launch(ctx, kOp, kernel, dependent, dim3(static_cast<unsigned>(grid)), dim3(threads), kSmem, tmap_a,
                          tmap_a_tail, tmap_b, tmap_d, p);
  }
}

// The fine-promotion kernel of the tile for pr.fine (32 or 64 of K a promoted sum).
template <Sm90Recipe R, int kBlockM, int kBlockN, typename OutT>
qf_status launch_fine(qf_ctx *ctx, const Problem &pr, const sm90_gemm_params &p, const sm90_gemm_config &cfg) {
  constexpr int kStages = sm90_gemm_stages(kBlockM, kBlockN, int(sizeof(OutT)));
  return pr.fine == 64 ? launch<R, kBlockM, kBlockN, OutT, kStages, Sm90Variant::kFinePromotion64>(ctx, pr, p, cfg)
                       : launch<R, kBlockM, kBlockN, OutT, kStages, Sm90Variant::kFinePromotion>(ctx, pr, p, cfg);
}

template <Sm90Recipe R, typename OutT>
qf_status dispatch_tile(qf_ctx *ctx, const Problem &pr, const sm90_gemm_params &p, const sm90_gemm_config &cfg) {
  // The deeper ring of 128 x 128 tiles (sm90_gemm_heuristic.h: scaled FP8), with a one-box staging tile.
  if constexpr (R == Sm90Recipe::kScaledFp8) {
    if (cfg.block_m == 128 && cfg.block_n == 128 && cfg.stages == kSm90DeepStages128)
      return launch<R, 128, 128, OutT, kSm90DeepStages128>(ctx, pr, p, cfg);
  }
  // Fine promotion (fp32 D only, the API checks): its own plan (sm90_gemm_pick_fine).
  if constexpr (R == Sm90Recipe::kBlockScaledFp8 && std::is_same_v<OutT, float>) {
    if (pr.fine) {
      const sm90_gemm_config fine = sm90_gemm_pick_fine(pr.M, pr.N, pr.K, pr.sms > 0 ? pr.sms : 1, cfg);
      if (fine.block_m == 64 && fine.block_n == 64) return launch_fine<R, 64, 64, OutT>(ctx, pr, p, fine);
      if (fine.block_m == 64) return launch_fine<R, 64, 128, OutT>(ctx, pr, p, fine);
      return launch_fine<R, 128, 128, OutT>(ctx, pr, p, fine);
    }
  }
  // Block-scaled 64 x 64 and 128 x 128 tiles whose units are short take each K-block's weight-block
  // scale from its stage (Sm90Variant::kShortUnits), where the scales are whole 16-byte windows
  // (the API checks that they start 16-byte aligned; here their count must be a multiple of 4):
  // no window reaches past them.
  if constexpr (R == Sm90Recipe::kBlockScaledFp8) {
    const int64_t num_kb = (pr.K + 127) / 128, unit_kb = (num_kb + cfg.splits - 1) / cfg.splits;
    const int64_t scales = (pr.N + 127) / 128 * num_kb;  // (one weight: the grouped GEMM has its own dispatch)
    if (unit_kb <= kSm90ShortUnit && scales % 4 == 0 && cfg.block_m == cfg.block_n && cfg.block_m <= 128) {
      constexpr int k64 = sm90_gemm_stages(64, 64, int(sizeof(OutT))), k128 = sm90_gemm_stages(128, 128, int(sizeof(OutT)));
      return cfg.block_m == 64 ? launch<R, 64, 64, OutT, k64, Sm90Variant::kShortUnits>(ctx, pr, p, cfg)
                               : launch<R, 128, 128, OutT, k128, Sm90Variant::kShortUnits>(ctx, pr, p, cfg);
    }
  }
#define QF_SM90_GEMM_CASE(BM, BN) \
  if (cfg.block_m == BM && cfg.block_n == BN) return launch<R, BM, BN, OutT>(ctx, pr, p, cfg);
  QF_SM90_GEMM_TILES(QF_SM90_GEMM_CASE)
  if constexpr (sm90_gemm_wide(R)) {
    QF_SM90_GEMM_WIDE_TILES(QF_SM90_GEMM_CASE)
  }
  if constexpr (sm90_gemm_narrow(R)) {
    QF_SM90_GEMM_NARROW_TILES(QF_SM90_GEMM_CASE)
  }
  if constexpr (sm90_gemm_tall(R)) {
    // (the split last wave has an instantiation of its own, and so do a last round of owners and
    // helpers and whole tiles of long units)
    constexpr int kTallStages = sm90_gemm_stages(256, 128, int(sizeof(OutT)));
    if (cfg.block_m == 256 && cfg.block_n == 128 && cfg.tail_kb > 0)
      return launch<R, 256, 128, OutT, kTallStages, Sm90Variant::kTallTail>(ctx, pr, p, cfg);
    if (cfg.block_m == 256 && cfg.block_n == 128 && cfg.splits > 1)
      return launch<R, 256, 128, OutT, kTallStages, Sm90Variant::kTallSplit>(ctx, pr, p, cfg);
    if (cfg.block_m == 256 && cfg.block_n == 128 && (pr.K + 127) / 128 >= kSm90LongUnit)
      return launch<R, 256, 128, OutT, kTallStages, Sm90Variant::kTallLongK>(ctx, pr, p, cfg);
    QF_SM90_GEMM_TALL_TILES(QF_SM90_GEMM_CASE)
    QF_SM90_GEMM_TRIPLE_TILES(QF_SM90_GEMM_CASE)
    QF_SM90_GEMM_MID_TILES(QF_SM90_GEMM_CASE)
  }
#undef QF_SM90_GEMM_CASE
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for the %dx%d tile", pr.op, cfg.block_m, cfg.block_n);
}

// The grouped block-scaled GEMM (sm90_gemm_pick_grouped's tiles), with or without SwiGLU.
template <typename OutT>
qf_status dispatch_grouped(qf_ctx *ctx, const Problem &pr, const sm90_gemm_params &p) {
  constexpr Sm90Recipe R = Sm90Recipe::kBlockScaledFp8;
  const sm90_gemm_config cfg = sm90_gemm_pick_grouped(pr.M, pr.N, pr.K, pr.sms, p.masked_m != nullptr ? p.experts : 0);
  constexpr int k64 = sm90_gemm_stages(128, 64, int(sizeof(OutT))), k128 = sm90_gemm_stages(128, 128, int(sizeof(OutT)));
  // SwiGLU: the stages of a tile without a staging tile (6 and 8; with the 16-bit staging tile's 5
  // the loop's unrolled period doubles to 10 and ptxas spilled); its half-width 16-bit output
  // needs one box of staging per part, which still fits next to them
  constexpr int kSw64 = sm90_gemm_stages(128, 64, 4), kSw128 = sm90_gemm_stages(128, 128, 4);
  if (pr.swiglu)
    return cfg.block_n == 64 ? launch<R, 128, 64, OutT, kSw64, Sm90Variant::kGroupedSwiGLU>(ctx, pr, p, cfg)
                             : launch<R, 128, 128, OutT, kSw128, Sm90Variant::kGroupedSwiGLU>(ctx, pr, p, cfg);
  return cfg.block_n == 64 ? launch<R, 128, 64, OutT, k64, Sm90Variant::kGrouped>(ctx, pr, p, cfg)
                           : launch<R, 128, 128, OutT, k128, Sm90Variant::kGrouped>(ctx, pr, p, cfg);
}

template <Sm90Recipe R>
qf_status dispatch(qf_ctx *ctx, const Problem &pr, const sm90_gemm_params &p, const sm90_gemm_config *forced = nullptr) {
  // Coordinates and tile indices are 32-bit in the kernel (TMA coordinates are int32 anyway).
  const int64_t lim = INT32_MAX - 255;
  if (pr.M > lim || pr.N > lim || pr.K > lim || ((pr.M + 63) / 64) * ((pr.N + 63) / 64) > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: M=%lld, N=%lld, K=%lld exceed the 32-bit tile coordinates", pr.op,
                   static_cast<long long>(pr.M), static_cast<long long>(pr.N), static_cast<long long>(pr.K));
  if (p.expert_ids != nullptr || p.masked_m != nullptr) {
    if (pr.b.rows > lim)
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: experts x N = %lld rows of b exceed the 32-bit tile coordinates", pr.op,
                     static_cast<long long>(pr.b.rows));
    switch (pr.d.dtype) {
      case QF_BF16: return dispatch_grouped<__nv_bfloat16>(ctx, pr, p);
      case QF_F16: return dispatch_grouped<__half>(ctx, pr, p);
      default: return dispatch_grouped<float>(ctx, pr, p);
    }
  }
  const sm90_gemm_config cfg = forced ? *forced : sm90_gemm_pick(pr.M, pr.N, pr.K, pr.sms, R, ctx->dram_gbps);
  switch (pr.d.dtype) {
    case QF_BF16: return dispatch_tile<R, __nv_bfloat16>(ctx, pr, p, cfg);
    case QF_F16: return dispatch_tile<R, __half>(ctx, pr, p, cfg);
    default: return dispatch_tile<R, float>(ctx, pr, p, cfg);
  }
}

}  // namespace

// The block-scaled GEMM's call parameters (the plan aside).
static Problem blockscale_problem(qf_ctx *ctx, const qf_gemm_blockscale_args *a, sm90_gemm_params &p) {
  p = {};
  p.a_scales = a->a_scales;
  p.as_m = a->as_m;
  p.as_k = a->as_k;
  // Column-major As whose columns are whole 16-byte units (M a multiple of 4, so no copy reads the
  // padding past the last column's end) travel by bulk copy; other layouts by 4-byte cp.async.
  p.as_bulk = a->as_m == 1 && a->M % 4 == 0 && a->as_k % 4 == 0 && reinterpret_cast<uintptr_t>(a->a_scales) % 16 == 0;
  p.b_scales = a->b_scales;
  p.expert_ids = a->expert_ids;
  p.ids_stride = a->ids_stride;
  p.masked_m = a->masked_m;
  p.expert_blocks = static_cast<int>(a->expert_rows / 128);
  p.experts = static_cast<int>(a->experts);
  p.c = static_cast<const float *>(a->c.data);
  p.c_ld = a->c.ld;
  return {a->expert_ids ? "qf_gemm_fp8_blockscale_grouped"
          : a->masked_m ? "qf_gemm_fp8_blockscale_masked"
                        : "qf_gemm_fp8_blockscale",
          a->a, a->b, a->d, a->M, a->N, a->K, ctx->stream_sms, a->swiglu != 0, a->fine_promotion};
}

extern "C" void qf_cuda_gemm_fp8_blockscale_plan(qf_ctx *ctx, int64_t M, int64_t N, int64_t K, int *block_m, int *block_n,
                                                 int *splits, int *tail_kb) {
  const sm90_gemm_config c = sm90_gemm_pick(M, N, K, ctx->stream_sms, Sm90Recipe::kBlockScaledFp8, ctx->dram_gbps);
  *block_m = c.block_m, *block_n = c.block_n, *splits = c.splits, *tail_kb = static_cast<int>(c.tail_kb);
}

extern "C" qf_status qf_cuda_gemm_fp8_blockscale_with(qf_ctx *ctx, const qf_gemm_blockscale_args *a, int block_m,
                                                     int block_n, int splits) {
  if (a->fine_promotion)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_gemm_fp8_blockscale_with: opts->fine_promotion has a plan of its own");
  sm90_gemm_config cfg;
  if (a->expert_ids || a->masked_m || !sm90_gemm_plan_of(a->M, a->N, a->K, ctx->stream_sms > 0 ? ctx->stream_sms : 1, block_m,
                                                         block_n, splits, cfg))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_gemm_fp8_blockscale_with: no plan of %dx%d tiles split %d ways for M=%lld, "
                   "N=%lld, K=%lld on %d SMs (dense calls only)", block_m, block_n, splits, static_cast<long long>(a->M),
                   static_cast<long long>(a->N), static_cast<long long>(a->K), ctx->stream_sms);
  if (a->M == 0 || a->N == 0) return QF_OK;
  sm90_gemm_params p;
  const Problem pr = blockscale_problem(ctx, a, p);
  return dispatch<Sm90Recipe::kBlockScaledFp8>(ctx, pr, p, &cfg);
}

extern "C" qf_status qf_cuda_gemm_fp8_blockscale(qf_ctx *ctx, const qf_gemm_blockscale_args *a) {
  if (a->M == 0 || a->N == 0) return QF_OK;
  sm90_gemm_params p;
  const Problem pr = blockscale_problem(ctx, a, p);
  return dispatch<Sm90Recipe::kBlockScaledFp8>(ctx, pr, p);
}

extern "C" qf_status qf_cuda_gemm_scaled(qf_ctx *ctx, const qf_gemm_scaled_args *a) {
  if (a->M == 0 || a->N == 0) return QF_OK;
  const Problem pr = {"qf_gemm_scaled", a->a, a->b, a->d, a->M, a->N, a->K, ctx->stream_sms, false, false};
  // int8: |acc| <= 2^14 K and |zp| <= 2^14 K must leave acc - zp inside int32.
  if (a->a.dtype == QF_I8 && a->K > 65535)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: int8 K=%lld exceeds 65535 (the int32 accumulator's range)", pr.op,
                   static_cast<long long>(a->K));
  sm90_gemm_params p = {};
  p.sa = a->a_scale;
  p.sa_per_row = a->a_per_token;
  p.sb = a->b_scale;
  p.sb_per_col = a->b_per_channel;
  p.bias = a->bias;
  p.azp_adj = a->azp_adj;
  p.azp = a->azp;
  return a->a.dtype == QF_I8 ? dispatch<Sm90Recipe::kScaledInt8>(ctx, pr, p)
                             : dispatch<Sm90Recipe::kScaledFp8>(ctx, pr, p);
}
