// Entry point of qf_attention on CUDA: the instantiations (one list of tile configurations), the
// launch plan (attention_heuristic.h), the workspace for split partials, and the launches.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "cuda/attn/attention.cuh"
#include "cuda/attn/attention_heuristic.h"
#include "cuda/common.cuh"
#include "cuda/tma_map.h"

namespace {

const char kOp[] = "qf_attention";

// Per head dims (D of q and k, DV of v): the prefill tile (TMA producer, two wgmma warpgroups of
// 64 rows; D = 512 runs two CTAs of 256 output columns per row tile, both forming the whole S) and
// the decode tile (16 rows, four mma.sync warps splitting each key tile). The softmax overlapped
// with the previous P V (kOverlap) pays at D = 128 only (H200: +2-3%; D = 64 -6%, D = 256 -22% with
// its two stages, bench/results/h200-dev-attention-overlap-ab.jsonl). D = 192 with DV = 128 is
// MLA's prefill (DeepSeek's 128 + 64 rotary dims of q and k, 128 of v): D = 128's accumulators with
// two stages of 128 keys (80 KB a stage); its decode tile has six warps on tiles of 96 keys.
// PrefillFp8: the prefill tile over e4m3fn codes where its slots of codes fit beside the 16-bit
// stages (D = 128 on two stages without the overlap); void: such prompts run the decode kernel.
template <int D, int DV>
struct TilesFor;
template <>
struct TilesFor<64, 64> {
  using Prefill = AttnPrefillTile<64, 64, 128, 4, false>;
  using PrefillFp8 = AttnPrefillTile<64, 64, 128, 4, false, 2>;
  using Decode = AttnDecodeTile<64, 64, 64, 4>;
};
template <>
struct TilesFor<128, 128> {
  using Prefill = AttnPrefillTile<128, 128, 128, 3, true>;
  using PrefillFp8 = AttnPrefillTile<128, 128, 128, 2, false, 2>;
  using Decode = AttnDecodeTile<128, 128, 64, 4>;
};
template <>
struct TilesFor<256, 256> {
  using Prefill = AttnPrefillTile<256, 256, 64, 2, false>;
  using PrefillFp8 = AttnPrefillTile<256, 256, 64, 2, false, 1>;
  using Decode = AttnDecodeTile<256, 256, 64, 4>;
};
template <>
struct TilesFor<512, 512> {
  using Prefill = AttnPrefillTile<512, 256, 32, 2, false>;
  using PrefillFp8 = void;
  using Decode = AttnDecodeTile<512, 256, 64, 4>;
};
template <>
struct TilesFor<192, 128> {
  using Prefill = AttnPrefillTile<192, 128, 128, 2, false>;
  using PrefillFp8 = void;
  using Decode = AttnDecodeTile<192, 128, 96, 6>;  // the loads' thread count divides K's 24 and V's 16 chunks a row
};

#define QF_ATTN_HEAD_DIMS(X) X(64, 64) X(128, 128) X(256, 256) X(512, 512) X(192, 128)

// The kernels of a tile configuration: prefill over [B, S, H, D] tensors, and over packed sequences
// or a paged cache (General), each over 16-bit keys or (Fp8, on the PrefillFp8 tile) codes; decode
// in eight variants, kDecode + (packed sequences) + 2 (a paged cache) + 4 (e4m3fn keys and values).
enum class Kernel { kPrefill, kPrefillGeneral, kPrefillFp8, kPrefillGeneralFp8, kDecode };
constexpr int kDecodePacked = 1, kDecodePaged = 2, kDecodeFp8 = 4;
constexpr int kKernels = 4 + 8;

constexpr int kSlots = 2 * 5 * kKernels;  // dtypes x head dims x kernels
std::atomic<uint64_t> g_opt_in[kSlots];
std::atomic<int> g_ctas_per_sm[kSlots];

// Launches kernel K of Tile (the decode kernel's variant `kVariant`) and, for split keys, the merge.
template <typename T, class Tile, Kernel K, int kVariant = 0>
qf_status launch(qf_ctx *ctx, const qf_attention_args *a, attn_params &p, int slot) {
  constexpr bool kPrefill = K != Kernel::kDecode;
  const auto kernel = [] {
    if constexpr (kPrefill)
      return attention_prefill_kernel<T, Tile, K == Kernel::kPrefillGeneral || K == Kernel::kPrefillGeneralFp8>;
    else
      return attention_decode_kernel<T, Tile, (kVariant & kDecodePaged) != 0, (kVariant & kDecodePacked) != 0,
                                     (kVariant & kDecodeFp8) != 0>;
  }();
  constexpr uint32_t kSmem = [] {
    if constexpr ((kVariant & kDecodeFp8) != 0) return Tile::kSmemBytesFp8;
    else return Tile::kSmemBytes;
  }();
  qf_status st = qf_cuda_smem_opt_in(ctx, kOp, kernel, kSmem, g_opt_in[slot]);
  if (st != QF_OK) return st;
  int per_sm = g_ctas_per_sm[slot].load(std::memory_order_relaxed);
  if (per_sm == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tile::kThreads, kSmem);
    if (err != cudaSuccess) return qf_cuda_fail(ctx, kOp, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
    per_sm = std::max(per_sm, 1);
    g_ctas_per_sm[slot].store(per_sm, std::memory_order_relaxed);
  }
  const int64_t row_tiles = (p.rows + Tile::kRows - 1) / Tile::kRows, dv_parts = a->Dv / Tile::DVT;
  const int64_t ctas = row_tiles * dv_parts * a->B * a->Hkv;
  const int64_t seen = a->window ? std::min<int64_t>(a->Skv, a->window + a->Sq) : a->Skv;  // keys a row tile can see
  p.splits = attn_splits(ctas, (seen + Tile::BN - 1) / Tile::BN, static_cast<int64_t>(qf_cuda_stream_sms(ctx)) * per_sm,
                         kAttnMaxSplits);
  const int64_t rows_total = static_cast<int64_t>(p.out_B) * a->Hq * p.out_S;
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
  if constexpr (kPrefill) {
    // Dense: (D, Skv, Hkv, B) in boxes of the tile's keys, packed sequences (D, total_k, Hkv, 1).
    // Paged: (D, page_size, Hkv, num_pages) in boxes of the tile's keys or of a page.
    CUtensorMap tm_k, tm_v;
    const int64_t outer = a->block_table ? a->num_pages : a->cu_seqlens_k ? 1 : a->B;
    const int64_t inner = a->block_table ? a->page_size : a->cu_seqlens_k ? a->total_k : a->Skv;
    const int64_t kd[4] = {outer, inner, a->Hkv, a->D}, vd[4] = {outer, inner, a->Hkv, a->Dv};
    // Packed keys have batch stride 0 and one outer entry, whose pitch TMA never steps: their span.
    int64_t ks[3] = {a->ks[0], a->ks[1], a->ks[2]}, vs[3] = {a->vs[0], a->vs[1], a->vs[2]};
    if (a->cu_seqlens_k) {
      ks[0] = std::max(ks[1] * a->total_k, ks[2] * a->Hkv);
      vs[0] = std::max(vs[1] * a->total_k, vs[2] * a->Hkv);
    }
    p.box_rows = static_cast<int>(a->block_table ? std::min<int64_t>(a->page_size, Tile::BN) : Tile::BN);
    if ((st = qf_cuda_make_tmap_heads(ctx, kOp, &tm_k, "k", a->k, a->kv_dtype, kd, ks, p.box_rows)) ||
        (st = qf_cuda_make_tmap_heads(ctx, kOp, &tm_v, "v", a->v, a->kv_dtype, vd, vs, p.box_rows)))
      return st;
    kernel<<<grid, Tile::kThreads, kSmem, qf_stream(ctx)>>>(p, tm_k, tm_v);
  } else {
    kernel<<<grid, Tile::kThreads, kSmem, qf_stream(ctx)>>>(p);
  }
  if ((st = qf_cuda_check_launch(ctx, kOp)) != QF_OK || p.splits == 1) return st;
  if (a->cu_seqlens_q) attention_merge_kernel<T, true><<<static_cast<unsigned>(rows_total), 128, 0, qf_stream(ctx)>>>(p);
  else attention_merge_kernel<T, false><<<static_cast<unsigned>(rows_total), 128, 0, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}

// The prefill kernel's TMA boxes need every stride of K and V nonzero (a multiple of 16 bytes, which
// the front end checks; packed keys' batch stride 0 is never stepped, launch() passes their span) and, for a paged cache, pages that hold whole tiles or whole 1024-byte
// swizzle atoms of one (page_size a multiple of bn, or a divisor of it that is a multiple of 8); the decode
// kernel reads anything else.
bool prefill_can_load(const qf_attention_args *a, int bn) {
  for (int d = a->cu_seqlens_k ? 1 : 0; d < 3; d++)
    if (a->ks[d] == 0 || a->vs[d] == 0) return false;
  return !a->block_table || a->page_size % bn == 0 || (bn % a->page_size == 0 && a->page_size % 8 == 0);
}

// The kernel for head dims D, DV: prefill above kAttnDecodeRows rows where its TMA loads can read
// the keys (and, for codes, a PrefillFp8 tile exists), else the decode kernel's variant for the inputs.
template <typename T, int D, int DV>
qf_status launch_dim(qf_ctx *ctx, const qf_attention_args *a, attn_params &p, int slot) {
  using Tiles = TilesFor<D, DV>;
  using Prefill = typename Tiles::Prefill;
  using PrefillFp8 = typename Tiles::PrefillFp8;
  using Decode = typename Tiles::Decode;
  const bool packed = a->cu_seqlens_q != nullptr, fp8 = a->kv_dtype == QF_E4M3FN, general = packed || a->block_table;
  if (p.rows > kAttnDecodeRows && !fp8 && prefill_can_load(a, Prefill::BN)) {
    if (general) return launch<T, Prefill, Kernel::kPrefillGeneral>(ctx, a, p, slot + 1);
    return launch<T, Prefill, Kernel::kPrefill>(ctx, a, p, slot);
  }
  if constexpr (!std::is_void_v<PrefillFp8>) {
    if (p.rows > kAttnDecodeRows && fp8 && prefill_can_load(a, PrefillFp8::BN)) {
      if (general) return launch<T, PrefillFp8, Kernel::kPrefillGeneralFp8>(ctx, a, p, slot + 3);
      return launch<T, PrefillFp8, Kernel::kPrefillFp8>(ctx, a, p, slot + 2);
    }
  }
  const int variant = (packed ? kDecodePacked : 0) | (a->block_table ? kDecodePaged : 0) | (fp8 ? kDecodeFp8 : 0);
  switch (variant) {
#define QF_ATTN_DECODE(V) \
  case V: return launch<T, Decode, Kernel::kDecode, V>(ctx, a, p, slot + 4 + V);
    QF_ATTN_DECODE(0) QF_ATTN_DECODE(1) QF_ATTN_DECODE(2) QF_ATTN_DECODE(3)
    QF_ATTN_DECODE(4) QF_ATTN_DECODE(5) QF_ATTN_DECODE(6)
#undef QF_ATTN_DECODE
    default: return launch<T, Decode, Kernel::kDecode, 7>(ctx, a, p, slot + 4 + 7);
  }
}

template <typename T>
qf_status run(qf_ctx *ctx, const qf_attention_args *a, int slot_base) {
  const int64_t group = a->Hq / a->Hkv, rows = a->Sq * group;
  attn_params p = {};
  p.q = a->q, p.k = a->k, p.v = a->v, p.o = a->o, p.lse = a->lse, p.sinks = a->sinks;
  for (int d = 0; d < 3; d++) p.qs[d] = a->qs[d], p.ks[d] = a->ks[d], p.vs[d] = a->vs[d], p.os[d] = a->os[d];
  p.B = static_cast<int>(a->B), p.Sq = static_cast<int>(a->Sq), p.Skv = static_cast<int>(a->Skv);
  p.Hq = static_cast<int>(a->Hq), p.Hkv = static_cast<int>(a->Hkv), p.group = static_cast<int>(group);
  p.Dv = static_cast<int>(a->Dv), p.rows = static_cast<int>(rows);
  p.cu_q = a->cu_seqlens_q, p.cu_k = a->cu_seqlens_k, p.kv_rows = static_cast<int>(a->total_k);
  p.out_B = a->cu_seqlens_q ? 1 : p.B, p.out_S = a->cu_seqlens_q ? static_cast<int>(a->total_q) : p.Sq;
  p.causal = a->causal;
  p.window = static_cast<int>(std::min<int64_t>(a->window, a->Skv + a->Sq + 1));  // larger windows mask nothing more
  p.o_f32 = a->o_dtype == QF_F32;
  p.scale_log2 = static_cast<float>(a->sm_scale * 1.4426950408889634);
  p.block_table = a->block_table, p.kv_lens = a->kv_lens, p.bt_stride = a->bt_stride;
  p.page_size = static_cast<int>(a->page_size), p.num_pages = static_cast<int>(a->num_pages);
  p.page_shift = -1;
  p.k_scale = a->k_scale, p.v_scale = a->v_scale;
  p.k_scale_step = static_cast<int>(a->k_scale_step), p.v_scale_step = static_cast<int>(a->v_scale_step);
  for (int sh = 0; sh < 31 && a->block_table; sh++)
    if (int64_t{1} << sh == a->page_size) p.page_shift = sh;
  int slot = slot_base;
#define QF_ATTN_CASE(DQK, DVO)                                                      \
  if (a->D == DQK && a->Dv == DVO) return launch_dim<T, DQK, DVO>(ctx, a, p, slot); \
  slot += kKernels;
  QF_ATTN_HEAD_DIMS(QF_ATTN_CASE)
#undef QF_ATTN_CASE
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for D=%lld, Dv=%lld", kOp, static_cast<long long>(a->D),
                 static_cast<long long>(a->Dv));
}

}  // namespace

extern "C" qf_status qf_cuda_attention(qf_ctx *ctx, const qf_attention_args *a) {
  if (a->dtype == QF_BF16) return run<__nv_bfloat16>(ctx, a, 0);
  return run<__half>(ctx, a, kSlots / 2);
}
