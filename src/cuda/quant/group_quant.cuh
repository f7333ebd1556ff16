// Per-token-group quantization (groups of G = 32, 64 or 128 along a row), optionally after the
// gated activation: v = x or qf_glu(gate, up), s = qf_group_scale(amax |v| of the group),
// q = encode(v * (1 / s)), and s stored in the requested layout and format.
//
// NOTES:
// - Memory-bound at 3 to 5 bytes per element, so the instructions per element decide whether
//   the loads keep up. A thread owns 16 elements of a group as two 8-element chunks, sub and
//   sub + G / 16 (each chunk one 16-byte load, two for fp32, plus one for up), so each load
//   instruction of a warp reads whole contiguous spans; G / 16 lanes own a group and reduce its
//   amax in log2(G / 16) shuffles. A thread handles kGroupVecs such vectors per tile: 64 bytes
//   of input (four 16-byte loads), 128 for the gated op.
// - The exact gated op is bound by arithmetic, not memory: qf_glu's exact fp32 exp (a degree-7
//   polynomial) and its correctly rounded reciprocal cost about 25 instructions per value, so it
//   runs at 73-85% of the copy bandwidth (M = 16384) where the plain op runs near 95-100%. With
//   fast_exp (glu_x8<true>: ex2.approx and rcp.approx) it reaches the copy bandwidth.
// - Work is cut into tiles of rows x groups walked by a persistent grid. The warp tile shape is
//   a launch-time choice (tile_rows x tile_groups = kGroupEntries): column-major scales get tall
//   tiles (consecutive rows of one group), row-major ones wide tiles (consecutive groups of one
//   row), so a warp's scale stores form one contiguous run instead of a 32-byte sector per
//   4-byte scale. A block's warps sit side by side along the groups first (adjacent bytes of the
//   same rows), then stack along the rows.
// - Software pipelined by one tile: the next tile's loads are issued as soon as this tile's
//   inputs are in registers, so they are in flight during the reduction, the scale arithmetic
//   and the stores. The gated op issues them after its activation instead: its 128 registers
//   cannot hold two tiles of raw inputs next to the activation's temporaries, and it is bound by
//   arithmetic anyway (measured 4-8% faster this way). Offsets within a warp tile are fixed per
//   thread and computed once; per tile only the tile origin moves.
// - amax runs on the integer bits of |v|: for non-negative floats (bf16, fp16 and fp32 alike) the
//   unsigned order of the bits is the numeric order and every NaN sorts above +Inf, so an
//   unsigned max is the NaN-propagating max, at one instruction per two bf16/fp16 values
//   (max.u16x2 on the packed words). Any NaN key gives the canonical NaN scale, as on the CPU.
// - Entry e = i * slots + slot of a warp tile (vector i of the lanes of group slot `slot`) is
//   the tile's row e % tile_rows and group e / tile_rows. Lane `sub` of a group computes the
//   scale of vector sub % kGroupVecs only (one pair of divisions per lane); the others fetch it
//   with a shuffle, and the same shuffle lets lane L store entry L (or UE8M0 word L) in the
//   layout's order.
// - Rows in [M, M + pad_rows) and groups past the end of the last UE8M0 word are entries with
//   no data: their scale is 0, which stores as 0.0f or as the byte 0, as the contract asks.
// - Every scale and code comes from the shared numerics (quant_math.h, vec.cuh). Two pieces are
//   restated for speed with the same results, both checked against the reference for every
//   input where that is feasible: the e4m3fnuz encoder (vec.cuh, through the hardware e4m3fn
//   conversion) and qf_glu (here: the same arithmetic without per-element branches, see glu_x8).
#pragma once

#include <type_traits>

#include "cuda/ptx/arith.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/quant/vec.cuh"
#include "qfuse.h"

constexpr int kGroupWarps = 8;  // warps per block
constexpr int kGroupThreads = kGroupWarps * 32;

// What the kernel quantizes: x itself, or the gated activation of x = [gate | up], exact or with
// the hardware exp2 and reciprocal (qf_glu_opts::fast_exp).
enum class GroupAct { kNone, kGlu, kGluFast };
// How a thread reaches its elements: 16-byte vectors, or one element at a time when the row
// pitches are not aligned for vectors.
enum class GroupAccess { kScalar, kVec16 };

// Vectors (16 elements each) per thread per tile: 64 bytes of input, 128 for the gated op (its
// arithmetic limits it, so the per-tile work is spread over more values).
template <typename Tin, GroupAct ACT>
constexpr int kGroupVecs = sizeof(Tin) == 2 ? 2 : 1;

// (row, group) entries of one warp tile: 32 / (G / 16) groups per vector, kGroupVecs vectors.
template <typename Tin, GroupAct ACT, int G>
constexpr int kGroupEntries = 32 / (G / 16) * kGroupVecs<Tin, ACT>;

struct GroupQuantParams {
  const void *x;
  int64_t x_ld;        // elements
  int64_t up_col;      // glu: column of up[0] in x (= K)
  uint8_t *q;
  int64_t q_ld;        // elements (bytes)
  void *scales;
  int64_t scales_ld;   // qf_scale_out::ld
  int layout, format;  // qf_scale_layout, qf_scale_format
  float scale_min;
  const float *ub;     // NULL: no upper bound
  float alpha, limit;
  int up_plus_one;
  int64_t rows;        // M
  int64_t scale_rows;  // M + pad_rows
  int groups;          // K / G
  int log_tile_rows;   // a warp tile is (1 << log_tile_rows) rows x the rest of its entries in groups
  int log_warps_g;     // warps of a block side by side along the groups
  uint32_t row_tiles, col_tiles;
};

// ---- inputs -------------------------------------------------------------------------------

// The 8 inputs at p as 16-byte words (two for fp32), element 0 in the lowest bits.
template <typename Tin, GroupAccess ACC>
__device__ __forceinline__ void load_chunk(const Tin *p, uint4 *w) {
  if constexpr (ACC == GroupAccess::kVec16) {
#pragma unroll
    for (int k = 0; k < int(sizeof(Tin)) / 2; k++) w[k] = __ldg(reinterpret_cast<const uint4 *>(p) + k);
  } else if constexpr (sizeof(Tin) == 2) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
    w[0] = make_uint4(h[0] | uint32_t(h[1]) << 16, h[2] | uint32_t(h[3]) << 16, h[4] | uint32_t(h[5]) << 16,
                      h[6] | uint32_t(h[7]) << 16);
  } else {
    const uint32_t *f = reinterpret_cast<const uint32_t *>(p);
    w[0] = make_uint4(f[0], f[1], f[2], f[3]);
    w[1] = make_uint4(f[4], f[5], f[6], f[7]);
  }
}

// The words of load_chunk widened to fp32 (exact).
template <typename Tin>
__device__ __forceinline__ void widen8(const uint4 *w, float (&v)[8]) {
  if constexpr (sizeof(Tin) == 4) {
    const uint32_t u[8] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = __uint_as_float(u[j]);
  } else {
    const uint32_t u[4] = {w[0].x, w[0].y, w[0].z, w[0].w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if constexpr (std::is_same_v<Tin, __nv_bfloat16>) {
        v[2 * j] = __uint_as_float(u[j] << 16);
        v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
      } else {
        v[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(u[j] & 0xffffu)));
        v[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u[j] >> 16)));
      }
    }
  }
}

// The amax key of a chunk's raw words: the fp32 bits of max |v| (see NOTES), NaN above Inf.
template <typename Tin>
__device__ __forceinline__ uint32_t chunk_amax_key(const uint4 *w) {
  if constexpr (sizeof(Tin) == 4) {
    const uint32_t u[8] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) m = max(m, u[j] & 0x7fffffffu);
    return m;
  } else {
    const uint32_t m2 = __vmaxu2(__vmaxu2(w[0].x & 0x7fff7fffu, w[0].y & 0x7fff7fffu),
                                 __vmaxu2(w[0].z & 0x7fff7fffu, w[0].w & 0x7fff7fffu));
    const uint32_t h = max(m2 & 0xffffu, m2 >> 16);
    if constexpr (std::is_same_v<Tin, __nv_bfloat16>)
      return h << 16;
    else
      return __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(h))));
  }
}

__device__ __forceinline__ uint32_t values_amax_key(const float (&v)[8]) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 8; j++) m = max(m, __float_as_uint(v[j]) & 0x7fffffffu);
  return m;
}

// ---- the gated activation -------------------------------------------------------------------

// 1 + qf_expf(x) for x not NaN, branch-free so that eight values interleave. qf_expf returns 0
// below t = x log2(e) = -125 and +Inf from t = 128 on; clamping t into [-125, 128] gives
// 1 + 2^-125 p = 1 and 2^128 p = +Inf there, the same sums, and leaves every other t alone.
// n = rint(t) comes from t + 1.5 * 2^23 instead of t +- 2^23 (the same integer, ties to even,
// for |t| < 2^22), whose low mantissa bits hold n, so 2^n is ((word + 127) << 23) with the
// exponent field of the constant shifted out. 1 + p 2^n is one FMA: p 2^n is exact (a normal
// number, or +Inf at n = 128), so the FMA rounds the same sum as the multiply-then-add (checked
// on the CPU for every non-NaN input). Equal to 1 + qf_expf(x) for all 2^32 inputs but NaN (a
// NaN x comes from a NaN gate, which makes the product NaN anyway).
__device__ __forceinline__ float one_plus_expf(float x) {
  const float t = fminf(fmaxf(__fmul_rn(x, 1.44269504088896341f), -125.0f), 128.0f);
  const float tb = __fadd_rn(t, 12582912.0f);
  const float f = __fsub_rn(t, __fsub_rn(tb, 12582912.0f));
  float p = 1.5252733804059840e-05f;
  p = __fmaf_rn(p, f, 1.5403530393381606e-04f);
  p = __fmaf_rn(p, f, 1.3333558146428443e-03f);
  p = __fmaf_rn(p, f, 9.6181291076284772e-03f);
  p = __fmaf_rn(p, f, 5.5504108664821580e-02f);
  p = __fmaf_rn(p, f, 2.4022650695910071e-01f);
  p = __fmaf_rn(p, f, 6.9314718055994531e-01f);
  p = __fmaf_rn(p, f, 1.0f);
  return __fmaf_rn(p, __uint_as_float((__float_as_uint(tb) + 127u) << 23), 1.0f);
}

// 1 / x, correctly rounded, for x in [1, 2^125]: the reciprocal estimate and one Newton step,
// the sequence the compiler emits for 1.0f / x on that range (checked equal for every such x).
__device__ __forceinline__ float rcp_in_range(float x) {
  const float r = rcp_approx_ftz_f32(x);
  return __fmaf_rn(r, __fmaf_rn(-x, r, 1.0f), r);
}

// qf_glu on eight values, the same arithmetic with the branches taken out: the limit test is
// uniform, the clamps are single NaN-propagating min/max instructions (limit > 0, so no signed
// zero ties), 1 + exp is branch-free (above) and the division takes the full path only when a
// value leaves [1, 2^125] (huge exp, or NaN). A branch per element would serialize the eight.
// kFast (qf_glu_opts::fast_exp): 1 / (1 + exp(-alpha g)) from the hardware estimates instead,
// 2^(-alpha log2(e) g) and the reciprocal, one MUFU instruction each. Its special values agree
// with the exact path: a NaN g stays NaN, g = +Inf gives 1 / 1, and 1 + 2^t = +Inf (g very
// negative, or -Inf) gives 0.
template <bool kFast>
__device__ __forceinline__ void glu_x8(float (&g)[8], float (&u)[8], float alpha, float limit, int up_plus_one,
                                       float (&v)[8]) {
  if (limit > 0.0f) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
      g[j] = min_nan_f32(g[j], limit);
      u[j] = max_nan_f32(min_nan_f32(u[j], limit), -limit);
    }
  }
  float r[8];
  if constexpr (kFast) {
    const float k = -alpha * 1.44269504088896341f;
#pragma unroll
    for (int j = 0; j < 8; j++) r[j] = rcp_approx_ftz_f32(1.0f + ex2_approx_ftz_f32(k * g[j]));
  } else {
    float x1[8];
    bool rare = false;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      x1[j] = one_plus_expf(-__fmul_rn(alpha, g[j]));
      r[j] = rcp_in_range(x1[j]);
      rare |= !(x1[j] <= 0x1p125f);
    }
    if (rare) {
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (!(x1[j] <= 0x1p125f)) r[j] = 1.0f / x1[j];
    }
  }
  if (up_plus_one) {
#pragma unroll
    for (int j = 0; j < 8; j++) u[j] = u[j] + 1.0f;
  }
#pragma unroll
  for (int j = 0; j < 8; j++) v[j] = __fmul_rn(__fmul_rn(g[j], r[j]), u[j]);
}

// ---- outputs --------------------------------------------------------------------------------

// ---- the kernel ----------------------------------------------------------------------------

// Plain: at most 80 registers, 3 blocks (24 warps) per SM, each warp with up to two tiles of
// loads in flight. Gated: 128 registers (eight values' activation temporaries), 2 blocks.
// kPdl (qf_ctx_set_pdl): launched as a programmatic dependent, an instantiation of its own (a
// run-time flag read ahead of the first loads cost the small shapes 1.4-2.3% with PDL off): it
// waits for the kernel before it (a GEMM writing x) before touching memory, and lets the GEMM
// after it start once its first loads are in flight.
template <typename Tin, typename Tout, int G, GroupAct ACT, GroupAccess ACC, bool kPdl = false>
__global__ void __launch_bounds__(kGroupThreads, ACT == GroupAct::kNone ? 3 : 2)
    group_quant_kernel(const GroupQuantParams p) {
  if constexpr (kPdl) griddep_wait();
  constexpr int kLanes = G / 16, kSlots = 32 / kLanes, kVecs = kGroupVecs<Tin, ACT>;
  constexpr int kEntries = kGroupEntries<Tin, ACT, G>;
  constexpr bool kGlu = ACT != GroupAct::kNone;
  constexpr int kWords = int(sizeof(Tin)) / 2;  // 16-byte words per chunk of 8 inputs
  constexpr int kChunkStep = kLanes * 8;        // elements between a thread's two chunks
  static_assert(G == 32 || G == 64 || G == 128, "groups of 32, 64 or 128");
  static_assert(kVecs <= kLanes, "each vector's scale needs its own lane in the group");
  static_assert(kEntries <= 32 && kEntries % 4 == 0, "a warp stores its tile's scales in one pass");
  static_assert(!kGlu || sizeof(Tin) == 2, "the gated activation takes 16-bit inputs");
  static_assert(sizeof(Tout) == 1, "8-bit outputs");

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int slot = lane / kLanes, sub = lane % kLanes, own = sub % kVecs;
  const int ltr = p.log_tile_rows, row_mask = (1 << ltr) - 1;
  const int warp_g = warp & ((1 << p.log_warps_g) - 1), warp_r = warp >> p.log_warps_g;
  const int64_t block_rows = int64_t(kGroupWarps >> p.log_warps_g) << ltr;
  const int block_groups = (kEntries >> ltr) << p.log_warps_g;

  // ---- this thread's place in every warp tile, computed once
  int vrow[kVecs], vgrp[kVecs];  // vector i: row and group within the warp tile
  int64_t xoff[kVecs], qoff[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; i++) {
    const int e = i * kSlots + slot;
    vrow[i] = e & row_mask;
    vgrp[i] = e >> ltr;
    xoff[i] = vrow[i] * p.x_ld + vgrp[i] * G + sub * 8;
    qoff[i] = vrow[i] * p.q_ld + vgrp[i] * G + sub * 8;
  }
  const int own_e = own * kSlots + slot, own_row = own_e & row_mask, own_grp = own_e >> ltr;

  const float qmax = qf_qmax(std::is_same_v<Tout, int8_out_t>, std::is_same_v<Tout, e4m3fnuz_t>);
  const float ub = p.ub ? __ldg(p.ub) : 0.0f;
  const bool pow2 = p.format != QF_SCALE_F32;

  // ---- the tile walk: tile t is (t / col_tiles, t % col_tiles), advanced without dividing
  uint32_t tile_r = blockIdx.x / p.col_tiles, tile_c = blockIdx.x % p.col_tiles;
  const uint32_t step_r = gridDim.x / p.col_tiles, step_c = gridDim.x % p.col_tiles;
  struct Origin {
    int64_t row0;   // first row of the warp tile
    int g0;         // first group of the warp tile
    int rows_left;  // data rows from row0 on (clamped), may be <= 0
    int scale_rows_left;
    int groups_left;
  };
  auto origin = [&](uint32_t tr, uint32_t tc) {
    Origin o;
    o.row0 = tr * block_rows + (int64_t(warp_r) << ltr);
    o.g0 = int(tc) * block_groups + warp_g * (kEntries >> ltr);
    o.rows_left = int(min(p.rows - o.row0, int64_t(1) << 30));
    o.scale_rows_left = int(min(p.scale_rows - o.row0, int64_t(1) << 30));
    o.groups_left = p.groups - o.g0;
    return o;
  };

  const Tin *x = static_cast<const Tin *>(p.x);
  uint4 raw[kVecs][2][kWords * (kGlu ? 2 : 1)];  // [vector][chunk][words], up after gate
  bool live[kVecs];
  auto load_tile = [&](const Origin &o) {
    const Tin *xt = x + o.row0 * p.x_ld + int64_t(o.g0) * G;
#pragma unroll
    for (int i = 0; i < kVecs; i++) {
      live[i] = vrow[i] < o.rows_left && vgrp[i] < o.groups_left;
#pragma unroll
      for (int c = 0; c < 2; c++) {
        if (live[i]) {
          const Tin *xc = xt + xoff[i] + c * kChunkStep;
          load_chunk<Tin, ACC>(xc, raw[i][c]);
          if constexpr (kGlu) load_chunk<Tin, ACC>(xc + p.up_col, raw[i][c] + kWords);
        } else {
#pragma unroll
          for (int k = 0; k < kWords * (kGlu ? 2 : 1); k++) raw[i][c][k] = make_uint4(0, 0, 0, 0);
        }
      }
    }
  };

  Origin next{};
  if (tile_r < p.row_tiles) load_tile(next = origin(tile_r, tile_c));
  if constexpr (kPdl) griddep_launch_dependents();  // (with the first loads in flight)

  while (tile_r < p.row_tiles) {
    const Origin cur = next;
    bool cur_live[kVecs];
    uint4 cur_raw[kVecs][2][kWords * (kGlu ? 2 : 1)];
#pragma unroll
    for (int i = 0; i < kVecs; i++) {
      cur_live[i] = live[i];
#pragma unroll
      for (int c = 0; c < 2; c++)
#pragma unroll
        for (int k = 0; k < kWords * (kGlu ? 2 : 1); k++) cur_raw[i][c][k] = raw[i][c][k];
    }

    // ---- prefetch the next tile: plain, at once; gated, after the activation (NOTES)
    auto prefetch = [&] {
      tile_c += step_c;
      tile_r += step_r + (tile_c >= p.col_tiles ? 1u : 0u);
      tile_c -= tile_c >= p.col_tiles ? p.col_tiles : 0u;
      if (tile_r < p.row_tiles) load_tile(next = origin(tile_r, tile_c));
    };
    if constexpr (!kGlu) prefetch();

    // ---- activation (gated: kept as values; plain: widened again to quantize) and amax keys
    uint32_t key[kVecs];
    float v[kVecs][2][kGlu ? 8 : 1];
#pragma unroll
    for (int i = 0; i < kVecs; i++) {
      key[i] = 0;
#pragma unroll
      for (int c = 0; c < 2; c++) {
        if constexpr (kGlu) {
          float g[8], u[8];
          widen8<Tin>(cur_raw[i][c], g);
          widen8<Tin>(cur_raw[i][c] + kWords, u);
          glu_x8<ACT == GroupAct::kGluFast>(g, u, p.alpha, p.limit, p.up_plus_one, v[i][c]);
          key[i] = max(key[i], values_amax_key(v[i][c]));
        } else {
          key[i] = max(key[i], chunk_amax_key<Tin>(cur_raw[i][c]));
        }
      }
    }
    if constexpr (kGlu) prefetch();

    // ---- the amax of each vector's group, and this lane's scale: the one of vector `own`
#pragma unroll
    for (int i = 0; i < kVecs; i++)
#pragma unroll
      for (int d = kLanes / 2; d > 0; d /= 2) key[i] = max(key[i], __shfl_xor_sync(0xffffffffu, key[i], d));
    const uint32_t own_key = kVecs == 1 || own == 0 ? key[0] : key[kVecs - 1];
    const float s = own_row < cur.rows_left && own_grp < cur.groups_left
                        ? qf_group_scale(__uint_as_float(own_key), qmax, p.ub != nullptr, ub, p.scale_min, pow2)
                        : 0.0f;
    const float inv = qf_inv_scale(s);

    // ---- quantize each vector with its group's 1 / s
    uint8_t *qt = p.q + cur.row0 * p.q_ld + int64_t(cur.g0) * G;
#pragma unroll
    for (int i = 0; i < kVecs; i++) {
      const float inv_i = __shfl_sync(0xffffffffu, inv, slot * kLanes + i);
      if (!cur_live[i]) continue;
#pragma unroll
      for (int c = 0; c < 2; c++) {
        float y[8];
        if constexpr (kGlu) {
#pragma unroll
          for (int j = 0; j < 8; j++) y[j] = v[i][c][j];
        } else {
          widen8<Tin>(cur_raw[i][c], y);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) y[j] = __fmul_rn(y[j], inv_i);
        uint8_t *qc = qt + qoff[i] + c * kChunkStep;
        if constexpr (ACC == GroupAccess::kVec16) {
          store8(reinterpret_cast<Tout *>(qc), y);
        } else {
#pragma unroll
          for (int j = 0; j < 8; j++) qc[j] = encode(Tout{}, y[j]);
        }
      }
    }

    // ---- the tile's scales: lane L stores entry L (or UE8M0 word L), fetched from the lane that
    // computed it (entry e lives on lane (e % slots) * lanes + e / slots)
    auto source = [](int e) { return (e % kSlots) * kLanes + e / kSlots; };
    if (p.format == QF_SCALE_UE8M0_PACKED) {
      // The warp tile holds whole words: tile_groups = kEntries >> ltr is a multiple of 4.
      const uint32_t byte = qf_ue8m0_from_f32_ceil(s);
      const int w = lane % (kEntries / 4), rr = w & row_mask, gq = (w >> ltr) * 4;
      uint32_t word = 0;
#pragma unroll
      for (int b = 0; b < 4; b++) word |= __shfl_sync(0xffffffffu, byte, source(((gq + b) << ltr) | rr)) << (8 * b);
      if (lane < kEntries / 4 && rr < cur.scale_rows_left && gq < cur.groups_left)
        static_cast<uint32_t *>(p.scales)[int64_t((cur.g0 + gq) / 4) * p.scales_ld + cur.row0 + rr] = word;
    } else {
      const int e = lane % kEntries, rr = e & row_mask, gg = e >> ltr;
      const float se = __shfl_sync(0xffffffffu, s, source(e));
      const int64_t r = cur.row0 + rr, g = cur.g0 + gg;
      if (lane < kEntries && rr < cur.scale_rows_left && gg < cur.groups_left)
        static_cast<float *>(p.scales)[p.layout == QF_SCALE_ROW_MAJOR ? r * p.scales_ld + g : g * p.scales_ld + r] = se;
    }
  }
}
