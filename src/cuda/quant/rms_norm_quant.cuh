// RMSNorm followed by dynamic quantization, per token or per 1 x G group:
//   y = residual ? round_to_T(x + residual) : x        (residual then holds y)
//   r = 1 / sqrt((float)(sum y^2 / K) + eps)           (sum in fp64)
//   v = (y * r) * w, then q and scales exactly as qf_quant_token / qf_quant_group.
//
// NOTES:
// - Same row machinery as token_quant.cuh: one block per row, each thread keeps VPT chunks of 8
//   elements of y (as 16-bit bits) in registers, so x and residual are read once and y written
//   once. w (a few KB, shared by every row) is not kept: registers decide how many rows an SM
//   holds, hence how many bytes are in flight. It is prefetched into L1 when the row starts and
//   loaded from there after each reduction.
// - The sum of squares is fp64 (the contract; any order gives the same value after the cast to
//   fp32 except in ties at the 2^-53 level). y has at most 11 significant bits, so y * y is exact
//   in fp64 and fma(y, y, acc) rounds like acc + y * y.
// - Per group: a group is G / 8 consecutive chunks, held by consecutive lanes (chunk_col), and
//   never crosses a tile (tiles are multiples of 256 elements). The scale arithmetic and its
//   store (qf_store_group_scale) cost as much as the codes of a chunk, so a lane computes one
//   scale per four chunk slots: reduce_scatter_max leaves each lane with the group amax of one
//   slot, and the group's lanes fetch 1 / s from the lane that computed it. Block 0 writes the
//   0 scales of the padding rows of COL_MAJOR_TMA; the lane of the last group of a row writes
//   the 0 bytes that complete its last UE8M0 word.
// - Per token: y stays in registers between the amax and the quantization when the row is one
//   tile, and v is recomputed from it and w: half the registers of keeping v in fp32. Longer
//   rows re-read y (from residual or x).
// - Long rows: one block per row runs a long row's serial work (loads, adds, squares, two
//   reductions) on one SM. With few rows (decode) that leaves most SMs idle: 12 us for one row of
//   18432 on an H200, against 5 us for a copy of its bytes; with many, a row of 18432 needs 8
//   chunks per thread and only two rows fit an SM. There a row is split over a cluster of `split` CTAs,
//   each owning `slice` columns (a multiple of 256, so groups never straddle two CTAs). Each CTA
//   reduces its columns and pushes the partial into slot [rank] of every CTA of the cluster (its
//   own included) with st.async, which counts the bytes on the receiver's mbarrier; once its
//   barrier holds all `split` partials, each CTA adds its slots in rank order (the same sum in
//   every CTA: rs, and per token the scale, agree bit for bit). No cluster barrier per row: the
//   release form of barrier.cluster compiles to a GPU-wide MEMBAR (waiting for the row's residual
//   stores) and its wait invalidates L1 (where w was prefetched). Slots and barriers come in two
//   parities that alternate between rows: a peer's value for the next row cannot land before this
//   CTA has read the current one, since the peer first needs this CTA's value for the next row.
//   The CTAs meet (relaxed) after initializing the barriers and before they exit.
// - Rows ahead (AHEAD): with one CTA per row, a CTA's loads are in flight only during its first
//   pass; the SM's other CTAs must cover the rest, and at K = 18432 per group only three fit
//   (72 registers x 288 threads). The AHEAD kernel runs as many CTAs as fit, each looping over
//   rows; right after a row's chunks are in registers, each thread copies its chunks of the
//   CTA's next row into shared memory with cp.async (16 bytes each, its own slots: no barrier),
//   so they arrive during the reductions and the quantization, and waits for them
//   (cp.async.wait_all) when that row starts. H200, M = 16384, K = 18432 per group: 80 -> 87% of
//   copy16. The per-token kernel and rows of one CTA ran slower that way (bench/results), so the
//   launcher uses it only for per-group rows split over clusters.
#pragma once

#include "cuda/ptx/arith.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/prefetch.cuh"
#include "cuda/quant/token_quant.cuh"

enum class ScaleGranularity { kPerToken, kPerGroup };

struct RmsNormQuantParams {
  const void *x;
  void *residual;  // NULL: none
  const void *weight;
  void *q;
  int64_t x_ld, res_ld, q_ld, rows;
  int cols;
  float eps;
  int group_shift;  // kPerGroup: log2 of G (5, 6, 7)
  int split;        // CTAs per row: the cluster size (1: one block per row, no cluster)
  int slice;        // columns per CTA when split > 1 (a multiple of 256)
  qf_scale_out scales;
  int pdl;  // qf_ctx_set_pdl: let a programmatic dependent (a GEMM) start at once
};

// y rounded to T as qf_bf16_from_f32 / qf_f16_from_f32 do: RNE (the hardware conversion), with
// NaN stored as the positive canonical NaN.
__device__ __forceinline__ __nv_bfloat16 round_to(__nv_bfloat16, float f) {
  return f != f ? __ushort_as_bfloat16(0x7fc0) : __float2bfloat16_rn(f);
}
__device__ __forceinline__ __half round_to(__half, float f) {
  return f != f ? __ushort_as_half(0x7e00) : __float2half_rn(f);
}

// Scale s of group g of row r; the last group of a row also writes the 0 bytes that complete
// its UE8M0 word.
__device__ __forceinline__ void store_group_scale(const RmsNormQuantParams &p, int64_t r, int g, float s) {
  const qf_scale_out &so = p.scales;
  const int groups = p.cols >> p.group_shift;
  qf_store_group_scale(so.data, so.ld, so.layout, so.format, r, g, s);
  if (so.format == QF_SCALE_UE8M0_PACKED && g == groups - 1)
    for (int e = groups; e % 4; e++) qf_store_group_scale(so.data, so.ld, so.layout, so.format, r, e, 0.0f);
}

// NOTES: registers decide how many rows an SM holds, hence the bytes in flight. These caps were
// the fewest registers that compiled without spills (nvcc 13, -Xptxas -v) before rows could be
// split over clusters: K = 18432 (288 threads x 96) keeps two rows per SM instead of one, K = 7168
// (224 x 72) four. With the cluster exchange the 4-chunk kernels spill a few per-row values (9
// local loads and stores in the code, none in the per-element loops).
__host__ __device__ constexpr int rms_max_regs(int vpt) { return vpt >= 8 ? 96 : vpt >= 4 ? 72 : 64; }

// AHEAD: a CTA visits several rows (the grid holds fewer CTAs than rows) and copies its next
// row's chunks into shared memory one row ahead (NOTES).
// kPdl (qf_ctx_set_pdl, decode grids: the launcher's rule): launched as a programmatic dependent, an
// instantiation of its own as the other quantization kernels': it sets up its cluster barriers,
// then waits for the kernel before it (the GEMM that wrote x or the residual) before touching
// memory. On a context with qf_ctx_set_pdl either instantiation lets the kernel after it (the
// next GEMM) start once its first row is loaded.
template <typename T, typename Tout, ScaleGranularity GRAN, RowAccess ACC, int VPT, bool AHEAD = false, bool kPdl = false>
__global__ void __maxnreg__(rms_max_regs(VPT)) rms_norm_quant_kernel(RmsNormQuantParams p) {
  static_assert(!AHEAD || ACC == RowAccess::kVec16, "rows ahead on the vector path");
  static_assert(sizeof(T) == 2, "bf16 or fp16 rows");
  static_assert(VPT >= 1 && VPT <= row_vpt_max(sizeof(T)), "chunks per thread");
  constexpr bool kPerGroup = GRAN == ScaleGranularity::kPerGroup;
  __shared__ double sum_slots[32], peer_sums[2][8];  // peer_*: [parity][rank] (split <= 8)
  __shared__ float max_slots[32], peer_maxes[2][8];
  __shared__ __align__(8) uint64_t peer_bars[2][2];   // [sums, maxes][parity]
  // This CTA's columns [c0, c0 + cols) of every row it visits; below, columns are relative to c0.
  const int split = p.split, rank = split > 1 ? static_cast<int>(blockIdx.x % split) : 0, c0 = rank * p.slice;
  const int cols = split > 1 ? min(p.slice, p.cols - c0) : p.cols;
  const int tile_chunks = blockDim.x * VPT;
  const int tiles = ((cols + 7) / 8 + tile_chunks - 1) / tile_chunks;
  const qf_scale_out &so = p.scales;
  const T *w = static_cast<const T *>(p.weight) + c0;

  // Split rows: the exchange of one value per CTA (above). exchange(kind, v, slots, op): v
  // pushed into slot [rank] of every CTA, then this CTA's slots folded in rank order.
  auto bar_addr = [&](int kind, int parity) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(&peer_bars[kind][parity]));
  };
  if (split > 1) {
    if (threadIdx.x == 0)
      for (int k = 0; k < 4; k++) mbarrier_init(bar_addr(k / 2, k % 2), 1);
    fence_mbarrier_init();
    cluster_sync_relaxed();  // the peers' barriers exist before anything is pushed to them
  }
  if constexpr (kPdl) griddep_wait();
  const float qmax = qmax_of<Tout>(), ub = so.ub ? *so.ub : 0.0f;

  if (kPerGroup && blockIdx.x == 0 && so.pad_rows > 0) {
    const int64_t groups = p.cols >> p.group_shift;
    const int64_t n = so.format == QF_SCALE_UE8M0_PACKED ? (groups + 3) / 4 * 4 : groups;
    for (int64_t e = threadIdx.x; e < so.pad_rows * n; e += blockDim.x)
      qf_store_group_scale(so.data, so.ld, so.layout, so.format, p.rows + e / n, e % n, 0.0f);
  }
  int it = 0;  // rows this CTA has done: slot parity it % 2, barrier phase (it / 2) % 2
  auto exchange = [&](int kind, auto v, auto (&slots)[2][8], auto op) {
    using V = decltype(v);
    const int parity = it & 1;
    const uint32_t bar = bar_addr(kind, parity);
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(bar, split * static_cast<uint32_t>(sizeof(V)));
      const uint32_t slot = static_cast<uint32_t>(__cvta_generic_to_shared(&slots[parity][rank]));
      for (int q = 0; q < split; q++) {
        if constexpr (sizeof(V) == 8)
          st_async_f64(mapa_shared_cluster(slot, q), v, mapa_shared_cluster(bar, q));
        else
          st_async_f32(mapa_shared_cluster(slot, q), v, mapa_shared_cluster(bar, q));
      }
    }
    mbarrier_wait_parity(bar, (it >> 1) & 1);
    V r = slots[parity][0];
    for (int q = 1; q < split; q++) r = op(r, slots[parity][q]);
    return r;
  };

  // AHEAD: the next row's x and residual chunks of this thread, in flight into shared memory while
  // this row is reduced and quantized (rows of one tile).
  extern __shared__ uint4 ahead[];  // [x, residual][VPT][blockDim.x]
  auto ahead_slot = [&](int tensor, int i) -> uint4 & { return ahead[(tensor * VPT + i) * blockDim.x + threadIdx.x]; };
  auto ahead_addr = [&](int tensor, int i) { return static_cast<uint32_t>(__cvta_generic_to_shared(&ahead_slot(tensor, i))); };
  auto copy_ahead = [&](int64_t rn) {
    const T *xn = static_cast<const T *>(p.x) + rn * p.x_ld + c0;
    const T *resn = p.residual ? static_cast<const T *>(p.residual) + rn * p.res_ld + c0 : nullptr;
#pragma unroll
    for (int i = 0; i < VPT; i++) {
      const int c = chunk_col<VPT>(0, i);
      if (c >= cols) continue;
      cp_async_cg_shared_global_16(ahead_addr(0, i), xn + c);
      if (resn) cp_async_cg_shared_global_16(ahead_addr(1, i), resn + c);
    }
  };
  auto from_ahead = [&](int tensor, int i) {  // columns past the row read as 0, as load_chunk's
    Chunk<T> ch;
    ch.raw[0] = chunk_col<VPT>(0, i) < cols ? ahead_slot(tensor, i) : make_uint4(0, 0, 0, 0);
    return ch;
  };
  bool in_ahead = false;  // this row's chunks are (being) copied into `ahead`

  for (int64_t r = blockIdx.x / split; r < p.rows; r += gridDim.x / split, it++) {
    const T *xr = static_cast<const T *>(p.x) + r * p.x_ld + c0;
    T *resr = p.residual ? static_cast<T *>(p.residual) + r * p.res_ld + c0 : nullptr;
    Tout *qr = static_cast<Tout *>(p.q) + r * p.q_ld + c0;
    Chunk<T> y[VPT];
    auto load_y = [&](int t, const T *src) {  // x, or y where pass 1 left it
#pragma unroll
      for (int i = 0; i < VPT; i++) y[i] = load_chunk<ACC>(src, chunk_col<VPT>(t, i), cols);
    };
    // v = (y * r) * w of one tile, chunk by chunk, into f(c, v); w is loaded here, not kept.
    auto for_each_v = [&](int t, float rs, auto &&f) {
      Chunk<T> wc[VPT];
#pragma unroll
      for (int i = 0; i < VPT; i++) wc[i] = load_chunk<ACC>(w, chunk_col<VPT>(t, i), cols);
#pragma unroll
      for (int i = 0; i < VPT; i++) {
        float v[8];  // columns past K: y = w = 0, v = 0
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = QF_MUL_RN(QF_MUL_RN(y[i].f32(j), rs), wc[i].f32(j));
        f(chunk_col<VPT>(t, i), v);
      }
    };
    if (tiles == 1) {  // w is needed after the reduction: start bringing it into L1 now
#pragma unroll
      for (int i = 0; i < VPT; i++) {
        const int c = chunk_col<VPT>(0, i);
        if (c < cols) prefetch_global_l1(w + c);
      }
    }

    // Pass 1: y (written back to residual) and the sum of its squares.
    double sumsq = 0.0;
    if (in_ahead) cp_async_wait_all();
    for (int t = 0; t < tiles; t++) {
      if (in_ahead) {
#pragma unroll
        for (int i = 0; i < VPT; i++) y[i] = from_ahead(0, i);
      } else {
        load_y(t, xr);
      }
      if (resr) {
        Chunk<T> res[VPT];
#pragma unroll
        for (int i = 0; i < VPT; i++) res[i] = in_ahead ? from_ahead(1, i) : load_chunk<ACC>(resr, chunk_col<VPT>(t, i), cols);
#pragma unroll
        for (int i = 0; i < VPT; i++) {
#pragma unroll
          for (int j = 0; j < 8; j++) y[i][j] = round_to(T{}, y[i].f32(j) + res[i].f32(j));
          store_chunk<ACC>(resr, chunk_col<VPT>(t, i), cols, y[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < VPT; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const double d = y[i].f32(j);
          sumsq = __fma_rn(d, d, sumsq);
        }
      }
    }
    // qf_ctx_set_pdl: a dependent GEMM may start now. (After the first row's loads: at the
    // kernel's start, the flag's read held every warp back, M <= 16 2-4% slower with PDL off.)
    if ((kPdl || p.pdl) && it == 0) griddep_launch_dependents();
    // This thread's chunks of `ahead` are in registers now: the next row's can come in.
    if constexpr (AHEAD) {
      const int64_t next = r + gridDim.x / split;
      in_ahead = next < p.rows;
      if (in_ahead) copy_ahead(next);
    }
    // NOTES: explicit roundings, so that no compiler flag changes this line's bits.
    double total = block_allreduce(sumsq, Sum{}, sum_slots);
    if (split > 1) total = exchange(0, total, peer_sums, Sum{});
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__double2float_rn(total / static_cast<double>(p.cols)), p.eps)));
    auto quantize = [&](int c, float inv, float (&v)[8]) {
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = QF_MUL_RN(v[j], inv);
      store_q_chunk<ACC>(qr, c, cols, v);
    };

    // Pass 2, per group: B chunk slots at a time, each lane's chunk amaxes reduced over the
    // group's lanes so that a lane ends with one slot's group amax (reduce_scatter_max); it
    // computes that one scale, the first of the lanes holding it stores it, and the group's lanes
    // fetch 1 / s of each slot from them: one scale computation per B chunks instead of per chunk.
    auto quantize_groups = [&](int t) {
      constexpr int B = VPT < 4 ? VPT : 4;  // B <= G / 8 lanes
      const int lane = threadIdx.x % 32, L = 1 << (p.group_shift - 3);
#pragma unroll
      for (int i0 = 0; i0 < VPT; i0 += B) {
        Chunk<T> wc[B];
#pragma unroll
        for (int b = 0; b < B; b++) wc[b] = load_chunk<ACC>(w, chunk_col<VPT>(t, i0 + b), cols);
        float v[B][8], a[B];  // columns past K: y = w = 0, v = 0 (or NaN when rs is not finite)
#pragma unroll
        for (int b = 0; b < B; b++) {
          a[b] = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; j++) {
            v[b][j] = QF_MUL_RN(QF_MUL_RN(y[i0 + b].f32(j), rs), wc[b].f32(j));
            a[b] = max_nan_f32(a[b], fabsf(v[b][j]));
          }
        }
        // Every lane takes part in the shuffles; past the row (K % G == 0) lie only whole groups.
        int slot;
        const float am = reduce_scatter_max<B>(a, L, slot);
        const int cm = chunk_col<VPT>(t, i0 + slot);
        const float s = qf_group_scale(am, qmax, so.ub != nullptr, ub, so.scale_min, so.format != QF_SCALE_F32);
        if (lane % (L / B) == 0 && cm < cols) store_group_scale(p, r, (c0 + cm) >> p.group_shift, s);
        const float inv = qf_inv_scale(s);
#pragma unroll
        for (int b = 0; b < B; b++) {
          const float inv_b = __shfl_sync(0xffffffffu, inv, (lane & ~(L - 1)) + b * (L / B));
          const int c = chunk_col<VPT>(t, i0 + b);
          if (c < cols) quantize(c, inv_b, v[b]);
        }
      }
    };
    if constexpr (kPerGroup) {
      for (int t = 0; t < tiles; t++) {
        if (tiles > 1) load_y(t, resr ? resr : xr);
        quantize_groups(t);
      }
    }

    // Per token: the row's scale, then q from y and w (y re-read for rows of several tiles).
    if constexpr (!kPerGroup) {
      // Pass 2, per token: the row's amax, its scale, then q.
      float amax = 0.0f;
      for (int t = 0; t < tiles; t++) {
        if (tiles > 1) load_y(t, resr ? resr : xr);
        for_each_v(t, rs, [&](int, float (&v)[8]) {
#pragma unroll
          for (int j = 0; j < 8; j++) amax = max_nan_f32(amax, fabsf(v[j]));
        });
      }
      amax = block_allreduce(amax, NanMax{}, max_slots);
      if (split > 1) amax = exchange(1, amax, peer_maxes, NanMax{});
      const float s = qf_group_scale(amax, qmax, so.ub != nullptr, ub, so.scale_min, 0);
      if (threadIdx.x == 0 && c0 == 0) static_cast<float *>(so.data)[r] = s;
      const float inv = qf_inv_scale(s);
      for (int t = 0; t < tiles; t++) {
        if (tiles > 1) load_y(t, resr ? resr : xr);
        for_each_v(t, rs, [&](int c, float (&v)[8]) { quantize(c, inv, v); });
      }
    }
    __syncthreads();  // the slots are reused by the block's next row
  }
  if (split > 1) cluster_sync_relaxed();  // no CTA leaves while a peer may still push to it
}
