// Entry point of qf_attention on CUDA: the instantiations (one list of tile configurations), the
// launch plan (attention_heuristic.h), the workspace for split partials, and the launches.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "cuda/attn/attention.cuh"
#include "cuda/attn/attention_heuristic.h"
#include "cuda/common.cuh"

namespace {

const char kOp[] = "qf_attention";

// Per head dim: the prefill tile (two warpgroups of 64 rows on wgmma) and the decode tile (16 rows,
// four warps splitting each key tile, mma.sync). D = 512 runs two CTAs of 256 output columns per
// row tile (both form the whole S).
template <int D>
struct TilesFor;
template <>
struct TilesFor<64> {
  using Prefill = AttnTile<64, 64, 128, 8, 1, true>;
  using Decode = AttnTile<64, 64, 64, 1, 4, false>;
};
template <>
struct TilesFor<128> {
  using Prefill = AttnTile<128, 128, 128, 8, 1, true>;
  using Decode = AttnTile<128, 128, 64, 1, 4, false>;
};
template <>
struct TilesFor<256> {
  using Prefill = AttnTile<256, 256, 64, 8, 1, true>;
  using Decode = AttnTile<256, 256, 64, 1, 4, false>;
};
template <>
struct TilesFor<512> {
  using Prefill = AttnTile<512, 256, 32, 8, 1, true>;
  using Decode = AttnTile<512, 256, 64, 1, 4, false>;
};
#define QF_ATTN_HEAD_DIMS(X) X(64) X(128) X(256) X(512)

using attn_kernel_t = void (*)(attn_params);

struct KernelInfo {
  attn_kernel_t kernel;
  int threads, rows, dvt, bn;
  uint32_t smem;
};

template <typename T, class Tile>
KernelInfo info() {
  return {attention_kernel<T, Tile>, Tile::kThreads, Tile::kRows, Tile::DVT, Tile::BN, Tile::kSmemBytes};
}

// The kernel for head dim D, decode or prefill, and its slot among the instantiations (for the
// per-kernel opt-in and occupancy).
template <typename T>
bool pick(int64_t D, bool decode, KernelInfo &ki, int &slot) {
  slot = 0;
#define QF_ATTN_CASE(DIM)                                                                               \
  if (D == DIM) {                                                                                       \
    ki = decode ? info<T, typename TilesFor<DIM>::Decode>() : info<T, typename TilesFor<DIM>::Prefill>(); \
    slot += decode;                                                                                     \
    return true;                                                                                        \
  }                                                                                                     \
  slot += 2;
  QF_ATTN_HEAD_DIMS(QF_ATTN_CASE)
#undef QF_ATTN_CASE
  return false;
}

constexpr int kSlots = 2 * 4 * 2;  // dtypes x head dims x (prefill, decode)
std::atomic<uint64_t> g_opt_in[kSlots];
std::atomic<int> g_ctas_per_sm[kSlots];

template <typename T>
qf_status run(qf_ctx *ctx, const qf_attention_args *a, int slot_base) {
  const int64_t group = a->Hq / a->Hkv, rows = a->Sq * group;
  const bool decode = rows <= kAttnDecodeRows;
  KernelInfo ki;
  int slot;
  if (!pick<T>(a->D, decode, ki, slot)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for D=%lld", kOp, (long long)a->D);
  slot += slot_base;
  qf_status st = qf_cuda_smem_opt_in(ctx, kOp, ki.kernel, ki.smem, g_opt_in[slot]);
  if (st != QF_OK) return st;
  int per_sm = g_ctas_per_sm[slot].load(std::memory_order_relaxed);
  if (per_sm == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ki.kernel, ki.threads, ki.smem);
    if (err != cudaSuccess) return qf_cuda_fail(ctx, kOp, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
    per_sm = std::max(per_sm, 1);
    g_ctas_per_sm[slot].store(per_sm, std::memory_order_relaxed);
  }

  attn_params p = {};
  p.q = a->q, p.k = a->k, p.v = a->v, p.o = a->o, p.lse = a->lse, p.sinks = a->sinks;
  for (int d = 0; d < 3; d++) p.qs[d] = a->qs[d], p.ks[d] = a->ks[d], p.vs[d] = a->vs[d], p.os[d] = a->os[d];
  p.B = static_cast<int>(a->B), p.Sq = static_cast<int>(a->Sq), p.Skv = static_cast<int>(a->Skv);
  p.Hq = static_cast<int>(a->Hq), p.Hkv = static_cast<int>(a->Hkv), p.group = static_cast<int>(group);
  p.Dv = static_cast<int>(a->Dv), p.rows = static_cast<int>(rows);
  p.causal = a->causal;
  p.window = static_cast<int>(std::min<int64_t>(a->window, a->Skv + a->Sq + 1));  // larger windows mask nothing more
  p.o_f32 = a->o_dtype == QF_F32;
  p.scale_log2 = static_cast<float>(a->sm_scale * 1.4426950408889634);

  const int64_t row_tiles = (rows + ki.rows - 1) / ki.rows, dv_parts = a->Dv / ki.dvt;
  const int64_t ctas = row_tiles * dv_parts * a->B * a->Hkv;
  const int64_t seen = a->window ? std::min<int64_t>(a->Skv, a->window + (rows + group - 1) / group) : a->Skv;
  p.splits = attn_splits(ctas, (seen + ki.bn - 1) / ki.bn, static_cast<int64_t>(qf_cuda_stream_sms(ctx)) * per_sm,
                         kAttnMaxSplits);
  const int64_t rows_total = a->B * a->Hq * a->Sq;
  if (p.splits > 1) {
    const size_t counters = kQfWorkspaceCounters * sizeof(int);
    const size_t o_bytes = static_cast<size_t>(p.splits) * rows_total * a->Dv * sizeof(float);
    void *ws = nullptr;
    if ((st = qf_cuda_workspace(ctx, kOp, counters + o_bytes + static_cast<size_t>(p.splits) * rows_total * sizeof(float), &ws)))
      return st;
    p.part_o = reinterpret_cast<float *>(static_cast<char *>(ws) + counters);  // the counters stay untouched
    p.part_lse = reinterpret_cast<float *>(static_cast<char *>(ws) + counters + o_bytes);
  }
  const dim3 grid(static_cast<unsigned>(row_tiles * dv_parts), static_cast<unsigned>(a->B * a->Hkv),
                  static_cast<unsigned>(p.splits));
  ki.kernel<<<grid, ki.threads, ki.smem, qf_stream(ctx)>>>(p);
  if ((st = qf_cuda_check_launch(ctx, kOp)) != QF_OK || p.splits == 1) return st;
  attention_merge_kernel<T><<<static_cast<unsigned>(rows_total), 128, 0, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}

}  // namespace

extern "C" qf_status qf_cuda_attention(qf_ctx *ctx, const qf_attention_args *a) {
  if (a->dtype == QF_BF16) return run<__nv_bfloat16>(ctx, a, 0);
  return run<__half>(ctx, a, kSlots / 2);
}
