// Attention forward (qf_attention) on the tensor cores with an online softmax: one CTA per tile of
// query rows of one (batch, kv head), fp32 accumulators.
//
// Rows: the query heads of a kv head are packed into the rows of a tile, row r being token
// r / group of query head hkv * group + r % group, so that one K/V tile in shared memory serves
// every query head that reads it (GQA) and a decode step (one token, `group` heads) still fills
// a tile's rows. Keys: the CTA walks the tiles of keys its rows can see (causal and window
// bounds), and with `splits` > 1 only its split's share of them, writing a partial result
// (normalized O and LSE in fp32) that attention_merge_kernel combines.
//
// Per key tile: S = Q K^T, the mask where the tile crosses a bound, the running max and sum per
// row in log2 units, P = 2^(S c - m) rounded to the input type and used straight from the
// accumulator registers as the A operand of O += P V (the accumulator layout of two adjacent key
// octets is the A layout of a k16 step). Q, K and V tiles sit in shared memory as planes of 64
// columns, 128-byte rows swizzled in 1024-byte atoms (the 128-byte swizzle of TMA and wgmma, which
// also keeps ldmatrix free of bank conflicts). Two kernels:
//  - attention_prefill_kernel: a producer warp loads K and V tiles by TMA into a ring guarded by
//    mbarriers; two consumer warpgroups of 64 rows each run S = Q K^T on wgmma (Q and K K-major)
//    and O += P V on wgmma with P in registers and V N-major.
//  - attention_decode_kernel: 16 rows, four warps that split each key tile (cp.async, double
//    buffered; mma.sync m16n8k16 fed by ldmatrix), their partial results combined through shared
//    memory at the end.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/ptx/arith.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/cvt.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma_rs.cuh"

struct attn_params {
  const void *q, *k, *v;
  void *o;                    // [out_B, out_S, Hq, Dv] at os
  float *lse;                 // [out_B, Hq, out_S] or nullptr
  const float *sinks;         // [Hq] or nullptr
  float *part_o, *part_lse;   // splits > 1: [split][out_B * Hq * out_S][Dv] and [split][out_B * Hq * out_S]
  int64_t qs[3], ks[3], vs[3], os[3];  // element strides of batch, token, head
  int B, Sq, Skv, Hq, Hkv, group, Dv;  // B sequences of at most Sq queries and Skv keys
  int rows;                   // Sq * group: the most packed rows of one kv head
  // Output rows: [B, Sq] (out_B = B, out_S = Sq), or for packed sequences (cu_q non-null) the
  // total_q tokens of q, o and lse (out_B = 1, out_S = total_q; q, k, v and o have batch stride 0).
  int out_B, out_S;
  // Packed sequences: sequence b's queries are tokens cu_q[b] .. cu_q[b + 1] - 1 of q (at most
  // Sq of them), and with dense keys (cu_k non-null) its keys rows cu_k[b] .. cu_k[b + 1] - 1 of
  // k and v, which hold kv_rows rows (at most Skv of them per sequence). Read on the device and
  // clamped to those ranges.
  const int32_t *cu_q, *cu_k;
  int kv_rows;
  int causal, window;         // window 0: none
  int splits;
  int o_f32;                  // o is fp32 (else the inputs' 16-bit type)
  float scale_log2;           // sm_scale * log2(e)
  // Paged caches (block_table non-null): k and v are [num_pages, page_size, Hkv, D] at strides
  // {page, slot, head}; sequence b has kv_lens[b] keys (Skv: the most it can have).
  const int32_t *block_table, *kv_lens;
  int64_t bt_stride;
  int page_size, num_pages;
  int page_shift;             // log2(page_size) for a power of two (the decode loads shift), else -1
  int box_rows;               // prefill: keys per TMA box (the tile's, or a page's when shorter)
  // e4m3fn k and v (the decode kernel's kFp8): kv head g's scales k_scale[g * k_scale_step] and
  // v_scale[g * v_scale_step] (nullptr: 1).
  const float *k_scale, *v_scale;
  int k_scale_step, v_scale_step;
};

// The prefill tile: two consumer warpgroups of 64 rows and a producer warpgroup; D (q and k head
// dim), DVT output columns per CTA (Dv / DVT CTAs share a row tile), BN keys per tile, kStages
// K/V tiles in flight; kOverlap: a tile's softmax runs while the tensor cores do the previous
// tile's P V (it holds two stages at once). kCodeSlots > 0: e4m3fn keys and values, whose codes TMA
// brings into kCodeSlots slots of a tile's K and V codes and the producer warpgroup widens into the
// 16-bit stages the consumers read.
template <int D_, int DVT_, int BN_, int kStages_, bool kOverlap_, int kCodeSlots_ = 0>
struct AttnPrefillTile {
  static constexpr int D = D_, DVT = DVT_, BN = BN_, kStages = kStages_, kCodeSlots = kCodeSlots_;
  static constexpr bool kOverlap = kOverlap_;
  static constexpr int kThreads = 384, kRows = 128;
  static constexpr int kNS = BN / 8, kNO = DVT / 8;  // accumulator octets of S and O per thread
  static constexpr uint32_t kQBytes = kRows * D * 2, kKBytes = BN * D * 2, kVBytes = BN * DVT * 2;
  static constexpr uint32_t kCodeBytes = BN * (D + DVT);  // a slot of codes: K's, then V's
  // full K, full V and empty mbarriers per stage, a barrier per slot of codes, and a flag: a page
  // out of range
  static constexpr uint32_t kBarBytes = 3 * kStages * 8 + kCodeSlots * 8 + 8;
  static constexpr uint32_t kSmemBytes = kQBytes + kStages * (kKBytes + kVBytes) + kCodeSlots * kCodeBytes + kBarBytes;
  static_assert(D % 64 == 0 && DVT % 64 == 0, "planes of 64 columns (128-byte rows)");
  static_assert(BN % 16 == 0 && BN <= 256 && DVT <= 256, "wgmma N of at most 256");
};

// The decode tile: 16 rows, WN warps each taking BN / WN keys of every key tile. The K/V ring holds
// two stages of 16-bit tiles (one tile loaded ahead). For e4m3fn keys and values it holds
// kFp8Stages stages of codes (rows of D and DVT bytes, which cp.async fills, two tiles loaded
// ahead) and one 16-bit buffer for the tensor cores, in which each warp widens its keys' K rows
// and then their V rows: at D = 128 the bytes of the 16-bit ring, three CTAs per SM. (Five stages,
// four tiles ahead at two CTAs per SM, ran no faster: the FP8 loop is bound by its instructions,
// docs/ATTENTION.md.)
template <int D_, int DVT_, int BN_, int WN_>
struct AttnDecodeTile {
  static constexpr int D = D_, DVT = DVT_, BN = BN_, WN = WN_;
  static constexpr int kThreads = 32 * WN, kRows = 16;
  static constexpr int kWarpKeys = BN / WN;
  static constexpr int kNS = kWarpKeys / 8, kNO = DVT / 8;
  static constexpr bool kQInRegs = D <= 128;  // Q's fragments held in registers across the loop
  static constexpr int kMinCtas = D <= 128 ? 3 : 1;  // per SM: the register cap that leaves room for three
  static constexpr uint32_t kQBytes = kRows * D * 2, kKBytes = BN * D * 2, kVBytes = BN * DVT * 2;
  static constexpr uint32_t kRingBytes = 2 * (kKBytes + kVBytes);
  static constexpr int kFp8Stages = 3;
  // A paged cache's page ids are read a tile before the group that loads the tile: a ring of
  // kIdSlots tiles' ids (the tiles in flight, and the one being read).
  static constexpr int kIdSlots = 4;
  static constexpr uint32_t kFp8RingBytes = (kKBytes > kVBytes ? kKBytes : kVBytes) + kFp8Stages * BN * (D + DVT);
  // then a flag (a page out of range) and, for a paged cache, the ring of page ids
  static constexpr uint32_t kSmemBytes = kQBytes + kRingBytes + 16 + kIdSlots * BN * 4;
  static constexpr uint32_t kSmemBytesFp8 = kQBytes + kFp8RingBytes + 16 + kIdSlots * BN * 4;
  static_assert(kIdSlots >= kFp8Stages + 1, "the ids of the tiles in flight and the one being read");
  static_assert(kWarpKeys % 16 == 0, "P . V takes k-steps of 16 keys per warp");
  static_assert(D % 64 == 0 && DVT % 64 == 0, "planes of 64 columns (128-byte rows)");
  static_assert(WN * 16 * (DVT + 2) * 4 <= kRingBytes && WN * 16 * (DVT + 2) * 4 <= kFp8RingBytes,
                "the warps' partial results fit in the K/V ring");
};

namespace attn_detail {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows: planes of 64
// columns (8 chunks), each rows x 128 bytes, the chunk index XOR the row's low three bits (the
// 128-byte swizzle of wgmma and TMA; the eight rows an ldmatrix reads at one column fall in eight
// different bank groups).
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk, int rows) {
  return static_cast<uint32_t>((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Four consecutive accumulators as the array an mma.sync fragment takes.
__device__ __forceinline__ float (&quad(float *p))[4] { return *reinterpret_cast<float (*)[4]>(p); }

// The wgmma forms by input type: S = Q K^T (both K-major, 128-byte swizzled) and O += P V (P in
// registers, V N-major).
template <int N>
__device__ __forceinline__ void wgmma_qk(__half, float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
  wgmma_m64k16_f32_f16<N>(d, a, b, scale_d);
}
template <int N>
__device__ __forceinline__ void wgmma_qk(__nv_bfloat16, float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
  wgmma_m64k16_f32_bf16<N>(d, a, b, scale_d);
}
template <int N>
__device__ __forceinline__ void wgmma_pv(__half, float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  wgmma_m64k16_f32_f16_rs_nmajor<N>(d, a, b, 1);
}
template <int N>
__device__ __forceinline__ void wgmma_pv(__nv_bfloat16, float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  wgmma_m64k16_f32_bf16_rs_nmajor<N>(d, a, b, 1);
}

__device__ __forceinline__ uint32_t pack2(__half, float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t pack2(__nv_bfloat16, float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

// A row's result from its running max m (log2 units, -inf: nothing seen) and sum l: the factor
// that turns its accumulated sum into o, and its natural-log LSE. The sink joins here, once per
// row (a split's partial leaves it to the merge).
struct RowResult {
  float scale, lse;
};
__device__ __forceinline__ RowResult finish_row(const attn_params &p, float m, float l, int h) {
  float fac = 1.0f;
  if (p.sinks && p.splits == 1) {
    const float sk = p.sinks[h] * kLog2e, mx = fmaxf(m, sk);
    if (mx == -INFINITY) return {0.0f, -INFINITY};
    fac = m == -INFINITY ? 0.0f : ex2_approx_ftz_f32(m - mx);
    l = l * fac + ex2_approx_ftz_f32(sk - mx);
    m = mx;
  }
  if (!(l > 0.0f)) return {0.0f, -INFINITY};
  return {fac / l, (m + __log2f(l)) * kLn2};
}

// Stores a row's values v0, v1 at columns col, col + 1 of o (or of the split's fp32 partial).
template <typename T>
__device__ __forceinline__ void store_pair(const attn_params &p, void *dst, float v0, float v1) {
  if (p.o_f32 || p.splits > 1) *reinterpret_cast<float2 *>(dst) = make_float2(v0, v1);
  else *reinterpret_cast<uint32_t *>(dst) = pack2(T(), v0, v1);
}

// Packed sequence b's queries as the kernels take them: tokens q0 .. q0 + sq - 1 of q, its offsets
// clamped to [0, total_q] and its length to Sq.
__device__ __forceinline__ void packed_queries(const attn_params &p, int b, int &q0, int &sq) {
  q0 = min(max(p.cu_q[b], 0), p.out_S);
  sq = min(min(max(p.cu_q[b + 1], q0), p.out_S) - q0, p.Sq);
}

// What a CTA works on: its rows [r0, r_last] of the `rows` of its sequence, their key positions,
// its key tiles [t_lo, t_hi) (its split's share), its batch entry and its L keys, kv head and
// output columns, and its rows' batch entry in lse and the splits' partials (out_b: 0 for packed
// sequences, whose outputs are one batch of total_q tokens). With packed sequences, q0 and k0 are
// the sequence's first query token and first key row (a CTA whose first row is past the
// sequence's rows has nothing to do: r0 >= rows). `packed` (a compile-time constant at every
// call) is false in the kernels for [B, S, H, D] tensors, which then carry none of the packed
// sequences' work.
struct CtaWork {
  int r0, r_last, rows, q0, k0, shift, pos_lo, pos_hi, t_lo, t_hi, b, out_b, L, hkv, dv_part, dv0;
};
__device__ __forceinline__ CtaWork cta_work(const attn_params &p, int rows, int bn, int dvt, bool packed) {
  CtaWork w;
  const int dv_parts = p.Dv / dvt, row_tiles = (p.rows + rows - 1) / rows;
  const int row_tile = row_tiles - 1 - static_cast<int>(blockIdx.x) / dv_parts;  // longest (causal) first
  w.dv_part = static_cast<int>(blockIdx.x) % dv_parts, w.dv0 = w.dv_part * dvt;
  w.b = static_cast<int>(blockIdx.y) / p.Hkv, w.hkv = static_cast<int>(blockIdx.y) % p.Hkv;
  int sq = p.Sq;
  w.q0 = 0, w.k0 = 0;
  w.out_b = w.b;
  if (packed && p.cu_q) packed_queries(p, w.b, w.q0, sq), w.out_b = 0;
  if (p.kv_lens) {
    w.L = min(max(p.kv_lens[w.b], 0), p.Skv);
  } else if (packed && p.cu_k) {
    w.k0 = min(max(p.cu_k[w.b], 0), p.kv_rows);
    w.L = min(min(max(p.cu_k[w.b + 1], w.k0), p.kv_rows) - w.k0, p.Skv);
  } else {
    w.L = p.Skv;
  }
  w.rows = packed ? sq * p.group : p.rows;
  w.r0 = row_tile * rows, w.r_last = min(w.r0 + rows, w.rows) - 1;
  w.shift = w.L - sq;  // a query's key position is its token + shift
  w.pos_lo = w.r0 / p.group + w.shift, w.pos_hi = w.r_last / p.group + w.shift;
  const int key_lo = p.window ? max(0, w.pos_lo - p.window + 1) : 0;
  const int key_hi = p.causal ? min(w.L, w.pos_hi + 1) : w.L;
  w.t_lo = key_lo / bn, w.t_hi = key_hi > key_lo ? (key_hi + bn - 1) / bn : w.t_lo;
  if (p.splits > 1) {
    const int per = (w.t_hi - w.t_lo + p.splits - 1) / p.splits;
    w.t_lo = min(w.t_hi, w.t_lo + static_cast<int>(blockIdx.z) * per);
    w.t_hi = min(w.t_hi, w.t_lo + per);
  }
  return w;
}

// The key position of row r of the CTA's tile.
__device__ __forceinline__ int row_pos(const attn_params &p, const CtaWork &w, int r) {
  return (w.r0 + r) / p.group + w.shift;
}

// The page of key j of the CTA's sequence (keys below its length only); -1 where the table's
// entry is out of range.
__device__ __forceinline__ int page_of(const attn_params &p, const CtaWork &w, int j) {
  const int page = p.block_table[w.b * p.bt_stride + j / p.page_size];
  return page >= 0 && page < p.num_pages ? page : -1;
}

// Keys j0 .. j0 + BN - 1 of k or v (base: the CTA's kv head, strides st; rows of kChunks 16-byte
// chunks) into the tile at dst by cp.async, threads tid of kThreads: zeros past the L keys and for
// pages out of range (*bad set). A paged cache's page ids come from `ids`, the tile's keys' entries
// of the block table in shared memory. A thread keeps one chunk column. The tile is the swizzled
// one the tensor cores read, or with kPlain rows of kChunks chunks one after another (e4m3fn codes,
// which widen_rows turns into the former).
template <typename E, int BN, int kChunks, int kThreads, bool kPaged, bool kPlain = false>
__device__ __forceinline__ void load_keys(const attn_params &p, const CtaWork &w, uint32_t dst, const E *base,
                                          const int64_t (&st)[3], int j0, const int *ids, int tid, int *bad) {
  constexpr int kRowsPerPass = kThreads / kChunks, kPasses = BN / kRowsPerPass, kPerChunk = 16 / sizeof(E);
  static_assert(kThreads % kChunks == 0 && BN % kRowsPerPass == 0, "whole rows per pass, whole passes per tile");
  const int ch = tid % kChunks, r0 = tid / kChunks;
  int64_t off[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; i++) {
    const int j = j0 + r0 + i * kRowsPerPass;
    off[i] = -1;
    if (j >= w.L) continue;
    if constexpr (!kPaged) {
      off[i] = j * st[1];
    } else {
      const int page = ids[j - j0];
      if (page < 0 || page >= p.num_pages) *bad = 1;
      else off[i] = page * st[0] + (p.page_shift >= 0 ? j & (p.page_size - 1) : j % p.page_size) * st[1];
    }
  }
#pragma unroll
  for (int i = 0; i < kPasses; i++) {
    const int r = r0 + i * kRowsPerPass;
    cp_async_cg_shared_global_16_zfill(dst + (kPlain ? (r * kChunks + ch) * 16 : tile_offset(r, ch, BN)),
                                       off[i] >= 0 ? base + off[i] + ch * kPerChunk : base, off[i] >= 0 ? 16 : 0);
  }
}

// Four e4m3fn codes (a word, the first in the low byte) as two pairs of T, exactly: fp16 by the
// hardware's conversion, bf16 through fp32. (Moving the bits into place and multiplying by 2^120
// in bf16x2 took 1.4x the time at bf16: bench/results/h200-dev-attention-fp8-widen-ab.txt.)
__device__ __forceinline__ void widen4(__half, uint32_t w, uint32_t &lo, uint32_t &hi) {
  lo = cvt_rn_f16x2_e4m3x2(static_cast<uint16_t>(w & 0xffffu));
  hi = cvt_rn_f16x2_e4m3x2(static_cast<uint16_t>(w >> 16));
}
__device__ __forceinline__ void widen4(__nv_bfloat16, uint32_t w, uint32_t &lo, uint32_t &hi) {
  for (int i = 0; i < 2; i++) {
    const uint32_t h = cvt_rn_f16x2_e4m3x2(static_cast<uint16_t>(w >> (16 * i)));
    const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
    (i ? hi : lo) = pack2(__nv_bfloat16(), f.x, f.y);
  }
}

// Rows row0 .. row0 + kRows - 1 of a tile of BN rows of e4m3fn codes (kChunks 16-byte chunks a
// row, one after another, at src) into the swizzled 16-bit tile at dst (2 kChunks chunks a row), by
// the 32 lanes of a warp.
template <typename T, int BN, int kChunks, int kRows>
__device__ __forceinline__ void widen_rows(uint32_t dst, uint32_t src, int row0, int lane) {
#pragma unroll 2
  for (int c = row0 * kChunks + lane; c < (row0 + kRows) * kChunks; c += 32) {
    const uint4 v = ld_shared_v4(src + c * 16);
    const uint32_t in[4] = {v.x, v.y, v.z, v.w};
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 4; i++) widen4(T(), in[i], out[2 * i], out[2 * i + 1]);
    const int r = c / kChunks, ch = c % kChunks;
    st_shared_v4(dst + tile_offset(r, 2 * ch, BN), make_uint4(out[0], out[1], out[2], out[3]));
    st_shared_v4(dst + tile_offset(r, 2 * ch + 1, BN), make_uint4(out[4], out[5], out[6], out[7]));
  }
}

// Q's rows into the tile at s_q (`rows` rows of D columns) by cp.async, threads `tid` of
// `threads`; rows past the end are zero-filled. One commit group.
template <typename T, int D>
__device__ __forceinline__ void load_q(const attn_params &p, const CtaWork &w, uint32_t s_q, int rows, int tid,
                                       int threads) {
  const T *qb = static_cast<const T *>(p.q) + w.b * p.qs[0] + w.q0 * p.qs[1];
  for (int c = tid; c < rows * (D / 8); c += threads) {
    const int r = c / (D / 8), ch = c % (D / 8), gr = w.r0 + r;
    const bool ok = gr < w.rows;
    const T *src = ok ? qb + (gr / p.group) * p.qs[1] + (w.hkv * p.group + gr % p.group) * p.qs[2] + ch * 8 : qb;
    cp_async_cg_shared_global_16_zfill(s_q + tile_offset(r, ch, rows), src, ok ? 16 : 0);
  }
  cp_async_commit_group();
}

// One key tile's softmax step for a thread's two rows (at key positions pos[0], pos[1] of L keys;
// the thread holds keys j0 + 8 j + 2 (lane % 4) (+ 1) of octet j): the mask where `edge`, then the
// running max m and sum l in log2 units and s turned into P = 2^(s c - m), c = scale_log2 (> 0: the
// maximum is taken before it). alpha receives the factor that brings the rows' earlier sums (O) to
// the new maximum.
template <int kNS>
__device__ __forceinline__ void softmax_step(const attn_params &p, float (&s)[kNS * 4], float (&m_row)[2],
                                             float (&l_row)[2], float (&alpha)[2], const int (&pos)[2], int L, int j0,
                                             bool edge, int lane, float scale_log2) {
  if (edge) {
#pragma unroll
    for (int nt = 0; nt < kNS; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int j = j0 + nt * 8 + 2 * (lane & 3) + (e & 1), ps = pos[e >> 1];
        if (j >= L || (p.causal && j > ps) || (p.window && j <= ps - p.window)) s[4 * nt + e] = -INFINITY;
      }
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNS; nt++) mx = fmaxf(mx, fmaxf(s[4 * nt + 2 * i], s[4 * nt + 2 * i + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx = fmaxf(m_row[i], mx * scale_log2);
    const float m_use = mx == -INFINITY ? 0.0f : mx;  // a row that has seen nothing keeps zeros
    alpha[i] = ex2_approx_ftz_f32(m_row[i] - m_use);
    m_row[i] = mx;
    l_row[i] *= alpha[i];
#pragma unroll
    for (int nt = 0; nt < kNS; nt++)
#pragma unroll
      for (int e = 2 * i; e < 2 * i + 2; e++) {
        s[4 * nt + e] = ex2_approx_ftz_f32(fmaf(s[4 * nt + e], scale_log2, -m_use));
        l_row[i] += s[4 * nt + e];
      }
  }
}

template <int kNO>
__device__ __forceinline__ void rescale(float (&o)[kNO * 4], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < kNO; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[4 * nt + e] *= alpha[e >> 1];
}

// P's A fragments (k16 steps of 16 keys) from the softmax'd S accumulators.
template <typename T, int kNS>
__device__ __forceinline__ void p_fragments(const float (&s)[kNS * 4], uint32_t (&pa)[kNS / 2][4]) {
#pragma unroll
  for (int ks = 0; ks < kNS / 2; ks++)
#pragma unroll
    for (int i = 0; i < 4; i++) pa[ks][i] = pack2(T(), s[8 * ks + 2 * i], s[8 * ks + 2 * i + 1]);
}

// Row r of the CTA's tile: its token in o and query head, and its index in [out_B, Hq, out_S]
// (lse's layout and the splits' partials').
struct OutRow {
  int tok, h;
  int64_t row;
};
__device__ __forceinline__ OutRow out_row(const attn_params &p, const CtaWork &w, int r) {
  const int gr = w.r0 + r, tok = w.q0 + gr / p.group, h = w.hkv * p.group + gr % p.group;
  return {tok, h, (static_cast<int64_t>(w.out_b) * p.Hq + h) * p.out_S + tok};
}

// Where row r of the CTA's tile goes: its output element at column col (o, or the split's fp32
// partial), and its lse (likewise).
template <typename T>
__device__ __forceinline__ void *out_ptr(const attn_params &p, const CtaWork &w, int r, int col) {
  const OutRow o = out_row(p, w, r);
  if (p.splits > 1) {
    const int64_t rows_total = static_cast<int64_t>(p.out_B) * p.Hq * p.out_S;
    return p.part_o + (blockIdx.z * rows_total + o.row) * p.Dv + w.dv0 + col;
  }
  const int64_t off = w.b * p.os[0] + o.tok * p.os[1] + o.h * p.os[2] + w.dv0 + col;
  return p.o_f32 ? static_cast<void *>(static_cast<float *>(p.o) + off) : static_cast<void *>(static_cast<T *>(p.o) + off);
}
__device__ __forceinline__ void put_lse(const attn_params &p, const CtaWork &w, int r, float lse) {
  const int64_t row = out_row(p, w, r).row, rows_total = static_cast<int64_t>(p.out_B) * p.Hq * p.out_S;
  if (p.splits > 1) p.part_lse[blockIdx.z * rows_total + row] = lse;
  else if (p.lse) p.lse[row] = lse;
}

// The epilogue of a thread's rows r and r + 8 straight from its accumulators (sums l reduced over
// the quad first).
template <typename T, int kNO>
__device__ __forceinline__ void store_rows(const attn_params &p, const CtaWork &w, int r, const float (&o)[kNO * 4],
                                           const float (&m_row)[2], float (&l_row)[2], bool bad, int lane) {
#pragma unroll
  for (int i = 0; i < 2; i++) {
    l_row[i] += __shfl_xor_sync(0xffffffffu, l_row[i], 1);
    l_row[i] += __shfl_xor_sync(0xffffffffu, l_row[i], 2);
    const int ri = r + 8 * i;
    if (w.r0 + ri >= w.rows) continue;
    RowResult res = finish_row(p, m_row[i], l_row[i], w.hkv * p.group + (w.r0 + ri) % p.group);
    if (bad) res = {NAN, NAN};
#pragma unroll
    for (int nt = 0; nt < kNO; nt++)
      store_pair<T>(p, out_ptr<T>(p, w, ri, nt * 8 + 2 * (lane & 3)), o[4 * nt + 2 * i] * res.scale,
                    o[4 * nt + 2 * i + 1] * res.scale);
    if (w.dv_part == 0 && (lane & 3) == 0) put_lse(p, w, ri, res.lse);
  }
}

}  // namespace attn_detail

// ---- prefill: TMA producer, two wgmma consumer warpgroups; kGeneral: packed sequences or a paged
// cache (an instantiation of their own, so that the dense [B, S, H, D] loop carries neither) ----
template <typename T, class Tile, bool kGeneral>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    attention_prefill_kernel(const __grid_constant__ attn_params p, const __grid_constant__ CUtensorMap tm_k,
                             const __grid_constant__ CUtensorMap tm_v) {
  using namespace attn_detail;
  constexpr int D = Tile::D, DVT = Tile::DVT, BN = Tile::BN, kStages = Tile::kStages, kRows = Tile::kRows;
  constexpr int kNS = Tile::kNS, kNO = Tile::kNO, kCodeSlots = Tile::kCodeSlots;
  constexpr bool kFp8 = kCodeSlots > 0;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t s_q = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t s_k = s_q + Tile::kQBytes, s_v = s_k + kStages * Tile::kKBytes, s_c = s_v + kStages * Tile::kVBytes;
  const uint32_t bars = s_c + kCodeSlots * Tile::kCodeBytes;
  auto k_full = [&](int st) { return bars + 8 * st; };
  auto v_full = [&](int st) { return bars + 8 * (kStages + st); };
  auto empty = [&](int st) { return bars + 8 * (2 * kStages + st); };
  auto staged = [&](int cs) { return bars + 8 * (3 * kStages + cs); };  // a slot's codes landed
  volatile int *bad = reinterpret_cast<int *>(smem + Tile::kSmemBytes - 8);  // after the mbarriers: a page out of range
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const CtaWork w = cta_work(p, kRows, BN, DVT, kGeneral);
  if (w.r0 >= w.rows) return;  // a packed sequence with fewer rows than the longest
  if (tid == 0) {
    for (int st = 0; st < kStages; st++) {
      mbarrier_init(k_full(st), 1);
      mbarrier_init(v_full(st), 1);
      mbarrier_init(empty(st), 8);  // one arrival per consumer warp
    }
    for (int cs = 0; cs < kCodeSlots; cs++) mbarrier_init(staged(cs), 1);
    *bad = 0;
    fence_mbarrier_init();
  }
  __syncthreads();

  if (warp < 4) {
    // ---- producer: one thread issues the K and V boxes of each key tile (one per 64 columns) ----
    setmaxnreg_dec<40>();
    if (!kFp8 && warp != 0) return;
    if (tid == 0) prefetch_tensormap(&tm_k), prefetch_tensormap(&tm_v);
    const int boxes = BN / p.box_rows;
    // The boxes of tile t into K stage (or slot of codes) dk, V's into dv, on barriers bk and bv;
    // warp 0. Boxes of p.box_rows keys: at (token, batch entry) of a dense tensor (packed
    // sequences: at (the sequence's first key row + token, 0)), or at (slot, page) of a paged
    // cache, lane q of the warp reading box q's page (all of a tile's table reads in flight at
    // once); a box past the sequence, or whose page is out of range, reads zeros (its page
    // coordinate is past the cache). A 16-bit box is a plane's 64 columns x box_rows keys at
    // 128-byte rows, a box of codes the same at 64-byte rows.
    auto box_page = [&](int t) {  // lane q: box q's page (or batch entry) coordinate
      int page = w.b;
      if constexpr (kGeneral) {
        if (p.block_table) {
          const int j = t * BN + lane * p.box_rows;
          page = lane < boxes && j < w.L ? page_of(p, w, j) : p.num_pages;
          if (page < 0) *bad = 1, page = p.num_pages;
        } else if (p.cu_k) {
          page = 0;
        }
      }
      return page;
    };
    auto issue = [&](int t, int page, uint32_t dk, uint32_t dv, uint32_t bk, uint32_t bv) {
      constexpr uint32_t kRowBytes = kFp8 ? 64 : 128;
      auto slot = [&](int q) {
        const int j = t * BN + q * p.box_rows;
        return kGeneral && p.block_table ? j % p.page_size : w.k0 + j;
      };
      for (int q = 0; q < boxes; q++) {
        const int pg = __shfl_sync(0xffffffffu, page, q);
        if (lane != 0) continue;
        for (int pl = 0; pl < D / 64; pl++)
          cp_async_bulk_tensor_4d_g2s(dk + (pl * BN + q * p.box_rows) * kRowBytes, &tm_k, bk, pl * 64, slot(q), w.hkv, pg);
      }
      for (int q = 0; q < boxes; q++) {
        const int pg = __shfl_sync(0xffffffffu, page, q);
        if (lane != 0) continue;
        for (int pl = 0; pl < DVT / 64; pl++)
          cp_async_bulk_tensor_4d_g2s(dv + (pl * BN + q * p.box_rows) * kRowBytes, &tm_v, bv, w.dv0 + pl * 64, slot(q), w.hkv, pg);
      }
    };
    if constexpr (!kFp8) {
      for (int t = w.t_lo, it = 0; t < w.t_hi; t++, it++) {
        const int st = it % kStages, page = box_page(t);  // the table reads in flight during the wait
        if (lane == 0) {
          if (it >= kStages) mbarrier_wait_parity(empty(st), (it / kStages - 1) & 1);
          mbarrier_arrive_expect_tx(k_full(st), Tile::kKBytes);
          mbarrier_arrive_expect_tx(v_full(st), Tile::kVBytes);
        }
        issue(t, page, s_k + st * Tile::kKBytes, s_v + st * Tile::kVBytes, k_full(st), v_full(st));
      }
    } else {
      // Codes: warp 0 keeps kCodeSlots tiles of codes in flight; the four warps widen each into
      // the 16-bit stage once the consumers have freed it (K, then V, each handed over by one
      // arrival after the warpgroup's barrier), and the slot is refilled after the second barrier.
      auto issue_codes = [&](int it) {
        const int cs = it % kCodeSlots;
        const uint32_t slot_k = s_c + cs * Tile::kCodeBytes;
        const int page = box_page(w.t_lo + it);
        if (lane == 0) mbarrier_arrive_expect_tx(staged(cs), Tile::kCodeBytes);
        issue(w.t_lo + it, page, slot_k, slot_k + BN * D, staged(cs), staged(cs));
      };
      auto widen = [&](uint32_t dst, uint32_t src, int planes) {  // planes of 64 columns x BN keys
        for (int c = tid; c < planes * BN * 4; c += 128) {  // 16 codes: chunk c % 4 of row c / 4
          const uint4 v = ld_shared_v4(src + c * 16);
          const uint32_t in[4] = {v.x, v.y, v.z, v.w};
          uint32_t out[8];
#pragma unroll
          for (int i = 0; i < 4; i++) widen4(T(), in[i], out[2 * i], out[2 * i + 1]);
          const int pl = c / (BN * 4), r = c / 4 % BN, ch = pl * 8 + 2 * (c % 4);
          st_shared_v4(dst + tile_offset(r, ch, BN), make_uint4(out[0], out[1], out[2], out[3]));
          st_shared_v4(dst + tile_offset(r, ch + 1, BN), make_uint4(out[4], out[5], out[6], out[7]));
        }
        fence_proxy_async_shared_cta();  // the 16-bit tile, seen by wgmma's reads
        named_barrier_sync(2, 128);
      };
      const int n = w.t_hi - w.t_lo;
      for (int it = 0; it < kCodeSlots && it < n; it++)
        if (warp == 0) issue_codes(it);
      for (int it = 0; it < n; it++) {
        const int st = it % kStages, cs = it % kCodeSlots;
        const uint32_t slot_k = s_c + cs * Tile::kCodeBytes;
        mbarrier_wait_parity(staged(cs), (it / kCodeSlots) & 1);
        if (it >= kStages) mbarrier_wait_parity(empty(st), (it / kStages - 1) & 1);
        widen(s_k + st * Tile::kKBytes, slot_k, D / 64);
        if (tid == 0) mbarrier_arrive(k_full(st));
        widen(s_v + st * Tile::kVBytes, slot_k + BN * D, DVT / 64);
        if (tid == 0) mbarrier_arrive(v_full(st));
        if (warp == 0 && it + kCodeSlots < n) issue_codes(it + kCodeSlots);
      }
    }
    return;
  }

  // ---- consumers: warpgroup wg owns rows 64 wg .. 64 wg + 63, warp cw rows 16 cw .. + 15 ----
  setmaxnreg_inc<232>();
  const int ct = tid - 128, cw = ct >> 5, g = lane >> 2;
  load_q<T, D>(p, w, s_q, kRows, ct, 256);
  cp_async_wait_group<0>();
  fence_proxy_async_shared_cta();  // Q's copies, seen by wgmma's reads
  named_barrier_sync(1, 256);
  const int pos[2] = {row_pos(p, w, cw * 16 + g), row_pos(p, w, cw * 16 + g + 8)};
  const uint32_t q_rows = s_q + (cw >> 2) * 64 * 128;
  float o_acc[kNO * 4] = {};
  float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};

  // S = Q K^T of tile t into s (k16 step kk is 32 bytes into its plane of 64 columns), issued.
  auto issue_qk = [&](float (&s)[kNS * 4], int it) {
    const uint32_t sk = s_k + (it % kStages) * Tile::kKBytes;
    mbarrier_wait_parity(k_full(it % kStages), (it / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
      wgmma_qk<BN>(T(), s, wgmma_desc_kmajor_sw128(q_rows + (kk / 4) * kRows * 128 + (kk % 4) * 32),
                   wgmma_desc_kmajor_sw128(sk + (kk / 4) * BN * 128 + (kk % 4) * 32), kk > 0);
    wgmma_commit_group();
  };
  // The tile that holds key L - 1 loads whole boxes: with packed sequences the rows past L are the
  // next sequence's keys, in a paged cache the page's slots past L hold whatever the cache held.
  // Their probabilities are 0, but 0 times an Inf or NaN there would reach the rows, so the
  // consumers clear those V rows first (once per CTA).
  const bool stale_tail = kGeneral && w.t_hi * BN > w.L;
  auto clear_tail = [&](uint32_t sv) {
    const int r0 = w.L - (w.t_hi - 1) * BN, chunks = (BN - r0) * 8;
    for (int c = ct; c < chunks * (DVT / 64); c += 256)
      st_shared_v4(sv + (c / chunks) * BN * 128 + (r0 + c % chunks / 8) * 128 + (c % 8) * 16, uint4{});
    fence_proxy_async_shared_cta();  // the zeros, seen by wgmma's reads
    named_barrier_sync(1, 256);
  };
  // O += P V of tile it's stage, issued: keys 16 ks .. + 15 are two 8-row atoms 1024 bytes apart,
  // the next 64 columns a plane on.
  auto issue_pv = [&](const uint32_t (&pa)[kNS / 2][4], int it) {
    const uint32_t sv = s_v + (it % kStages) * Tile::kVBytes;
    mbarrier_wait_parity(v_full(it % kStages), (it / kStages) & 1);
    if constexpr (kGeneral)
      if (stale_tail && w.t_lo + it == w.t_hi - 1) clear_tail(sv);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ks++)
      wgmma_pv<DVT>(T(), o_acc, pa[ks], wgmma_desc_nmajor_sw128(sv + ks * 16 * 128, BN * 128, 1024));
    wgmma_commit_group();
#pragma unroll
    for (int e = 0; e < kNO * 4; e++) wgmma_fence_operand(o_acc[e]);  // in flight: not to be touched
  };
  // With codes, k_scale joins the scores' factor before the running max (any sign of the scale
  // keeps the max right), v_scale the rows' results.
  const float k_scale = kFp8 && p.k_scale ? p.k_scale[w.hkv * p.k_scale_step] : 1.0f;
  const float score_scale = p.scale_log2 * k_scale;
  auto softmax_tile = [&](float (&s)[kNS * 4], int t, float (&alpha)[2]) {
#pragma unroll
    for (int e = 0; e < kNS * 4; e++) wgmma_fence_operand(s[e]);
    if constexpr (kFp8) {
#pragma unroll
      for (int e = 0; e < kNS * 4; e++) s[e] *= score_scale;
    }
    const bool edge = (t + 1) * BN > w.L || (p.causal && (t + 1) * BN - 1 > w.pos_lo) ||
                      (p.window && t * BN <= w.pos_hi - p.window);
    softmax_step<kNS>(p, s, m_row, l_row, alpha, pos, w.L, t * BN, edge, lane, kFp8 ? 1.0f : p.scale_log2);
  };
  auto release = [&](int it) {  // the warp has read the stage of tile it
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty(it % kStages));
  };

  const int n = w.t_hi - w.t_lo;
  uint32_t pa[kNS / 2][4];
  if constexpr (!Tile::kOverlap) {
    for (int it = 0; it < n; it++) {
      float s[kNS * 4], alpha[2];
      issue_qk(s, it);
      wgmma_wait_group<0>();
      softmax_tile(s, w.t_lo + it, alpha);
      rescale<kNO>(o_acc, alpha);
      p_fragments<T, kNS>(s, pa);
      issue_pv(pa, it);
      wgmma_wait_group<0>();
#pragma unroll
      for (int e = 0; e < kNO * 4; e++) wgmma_fence_operand(o_acc[e]);
      release(it);
    }
  } else {
    // The softmax of tile it runs while the tensor cores do P V of tile it - 1 (the rescale of O
    // by its alpha waits for that product); P of the last tile goes last.
    if (n > 0) {
      float s[kNS * 4], alpha[2];
      issue_qk(s, 0);
      wgmma_wait_group<0>();
      softmax_tile(s, w.t_lo, alpha);
      p_fragments<T, kNS>(s, pa);
    }
    for (int it = 1; it < n; it++) {
      float s[kNS * 4], alpha[2];
      issue_qk(s, it);
      issue_pv(pa, it - 1);
      wgmma_wait_group<1>();  // S of tile it; P V of tile it - 1 still running
      softmax_tile(s, w.t_lo + it, alpha);
      wgmma_wait_group<0>();
#pragma unroll
      for (int e = 0; e < kNO * 4; e++) wgmma_fence_operand(o_acc[e]);
      release(it - 1);
      rescale<kNO>(o_acc, alpha);
      p_fragments<T, kNS>(s, pa);
    }
    if (n > 0) {
      issue_pv(pa, n - 1);
      wgmma_wait_group<0>();
#pragma unroll
      for (int e = 0; e < kNO * 4; e++) wgmma_fence_operand(o_acc[e]);
      release(n - 1);
    }
  }
  if (kFp8 && p.v_scale) {
    const float v_scale = p.v_scale[w.hkv * p.v_scale_step];
#pragma unroll
    for (int e = 0; e < kNO * 4; e++) o_acc[e] *= v_scale;
  }
  store_rows<T, kNO>(p, w, cw * 16 + g, o_acc, m_row, l_row, *bad != 0, lane);
}

// ---- decode: 16 rows, the key tiles split among WN warps, cp.async double buffering; kPaged: k
// and v are a paged cache (an instantiation of its own, so that the dense loads carry no paging);
// kPacked: packed sequences (likewise); kFp8: e4m3fn k and v, whose codes land in a ring of their
// own, two tiles ahead, and which each warp widens for its keys ----
template <typename T, class Tile, bool kPaged, bool kPacked, bool kFp8>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinCtas) attention_decode_kernel(const attn_params p) {
  using namespace attn_detail;
  using KV = std::conditional_t<kFp8, uint8_t, T>;
  constexpr int D = Tile::D, DVT = Tile::DVT, BN = Tile::BN, WN = Tile::WN;
  constexpr int kThreads = Tile::kThreads, kRows = Tile::kRows, kNS = Tile::kNS, kNO = Tile::kNO;
  constexpr int kStages = kFp8 ? Tile::kFp8Stages : 2, kAhead = kStages - 1;  // tiles loaded ahead
  constexpr uint32_t kK8Bytes = BN * D, kV8Bytes = BN * DVT;                 // a stage of codes
  constexpr uint32_t kRing = kFp8 ? Tile::kFp8RingBytes : Tile::kRingBytes;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t s_q = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // 16-bit tiles: two stages of K then two of V; or (kFp8) the 16-bit buffer, then kStages stages
  // of K's codes and kStages of V's
  const uint32_t s_k = s_q + Tile::kQBytes, s_v = s_k + 2 * Tile::kKBytes;
  const uint32_t s_k8 = s_k + (Tile::kKBytes > Tile::kVBytes ? Tile::kKBytes : Tile::kVBytes), s_v8 = s_k8 + kStages * kK8Bytes;
  const int tid = threadIdx.x, lane = tid & 31, wn = tid >> 5, g = lane >> 2;
  const CtaWork w = cta_work(p, kRows, BN, DVT, kPacked);
  if (w.r0 >= w.rows) return;  // a packed sequence with fewer rows than the longest

  // ---- loads: keys past the end (and of pages out of range) are zero-filled ----
  int *bad = reinterpret_cast<int *>(smem + Tile::kQBytes + kRing);  // a page out of range
  int *ids = bad + 4;  // page ids of tile t at ids + ((t - t_lo) % Tile::kIdSlots) * BN
  const KV *kb = static_cast<const KV *>(p.k) + (kPaged ? 0 : w.b * p.ks[0] + w.k0 * p.ks[1]) + w.hkv * p.ks[2];
  const KV *vb = static_cast<const KV *>(p.v) + (kPaged ? 0 : w.b * p.vs[0] + w.k0 * p.vs[1]) + w.hkv * p.vs[2] + w.dv0;
  // A paged cache's block-table entries for the keys of `tile`, by cp.async: read a tile before
  // the group that holds the tile's own copies, so that no copy waits for a table read.
  auto load_ids = [&](int tile) {
    const int j = tile * BN + tid;
    if (!kPaged || tile >= w.t_hi || tid >= BN) return;
    const int page = j >= w.L ? 0 : p.page_shift >= 0 ? j >> p.page_shift : j / p.page_size;
    const int32_t *src = p.block_table + w.b * p.bt_stride + page;
    cp_async_ca_shared_global_4(static_cast<uint32_t>(__cvta_generic_to_shared(ids + ((tile - w.t_lo) % Tile::kIdSlots) * BN + tid)), src,
                                j < w.L ? 4 : 0);
  };
  auto load_kv = [&](int tile, int stage) {
    const int *tile_ids = ids + ((tile - w.t_lo) % Tile::kIdSlots) * BN;
    if constexpr (kFp8) {
      load_keys<KV, BN, D / 16, kThreads, kPaged, true>(p, w, s_k8 + stage * kK8Bytes, kb, p.ks, tile * BN, tile_ids, tid, bad);
      load_keys<KV, BN, DVT / 16, kThreads, kPaged, true>(p, w, s_v8 + stage * kV8Bytes, vb, p.vs, tile * BN, tile_ids, tid, bad);
    } else {
      load_keys<KV, BN, D / 8, kThreads, kPaged>(p, w, s_k + stage * Tile::kKBytes, kb, p.ks, tile * BN, tile_ids, tid, bad);
      load_keys<KV, BN, DVT / 8, kThreads, kPaged>(p, w, s_v + stage * Tile::kVBytes, vb, p.vs, tile * BN, tile_ids, tid, bad);
    }
    load_ids(tile + kAhead + 1);
  };
  if (tid == 0) *bad = 0;
  for (int i = 0; i <= kAhead; i++) load_ids(w.t_lo + i);
  cp_async_wait_all();
  __syncthreads();
  load_q<T, D>(p, w, s_q, kRows, tid, kThreads);
  for (int i = 0; i < kAhead; i++) {  // one commit group a tile (Q's with the first)
    if (w.t_lo + i < w.t_hi) load_kv(w.t_lo + i, i);
    cp_async_commit_group();
  }

  const int pos[2] = {row_pos(p, w, g), row_pos(p, w, g + 8)};
  auto q_frag = [&](int kk, uint32_t (&a)[4]) {
    ldmatrix_x4(a, s_q + tile_offset((lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4), kRows));
  };
  uint32_t qf[Tile::kQInRegs ? D / 16 : 1][4];
  float o_acc[kNO * 4] = {};
  float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};
  // The scores' factor in log2 units; with codes, k_scale joins it, applied before the running max
  // (any sign of the scale keeps the max right).
  const float k_scale = kFp8 && p.k_scale ? p.k_scale[w.hkv * p.k_scale_step] : 1.0f;
  const float score_scale = kFp8 ? p.scale_log2 * k_scale : p.scale_log2;

  for (int t = w.t_lo; t < w.t_hi; t++) {
    const int stage = kStages == 2 ? (t - w.t_lo) & 1 : (t - w.t_lo) % kStages;
    if (t + kAhead < w.t_hi) load_kv(t + kAhead, kStages == 2 ? stage ^ 1 : (stage + kAhead) % kStages);
    cp_async_commit_group();
    cp_async_wait_group<kAhead>();
    __syncthreads();
    if constexpr (kFp8) {  // the warp's keys' K rows (its rows of the buffer are its own)
      widen_rows<T, BN, D / 16, Tile::kWarpKeys>(s_k, s_k8 + stage * kK8Bytes, wn * Tile::kWarpKeys, lane);
      __syncwarp();
    }
    if constexpr (Tile::kQInRegs) {
      if (t == w.t_lo)
        for (int kk = 0; kk < D / 16; kk++) q_frag(kk, qf[kk]);
    }

    // S = Q K^T over the warp's keys of the tile (accumulator octet j: s[4 j .. 4 j + 3])
    float s[kNS * 4] = {};
    const uint32_t sk = kFp8 ? s_k : s_k + stage * Tile::kKBytes;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      uint32_t a[4];
      if constexpr (Tile::kQInRegs) {
        for (int i = 0; i < 4; i++) a[i] = qf[kk][i];
      } else {
        q_frag(kk, a);
      }
#pragma unroll
      for (int np = 0; np < kNS / 2; np++) {
        uint32_t bk[4];
        const int key = wn * Tile::kWarpKeys + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(bk, sk + tile_offset(key, 2 * kk + ((lane >> 3) & 1), BN));
        const uint32_t b0[2] = {bk[0], bk[1]}, b1[2] = {bk[2], bk[3]};
        mma_m16n8k16(T(), quad(s + 8 * np), a, b0);
        mma_m16n8k16(T(), quad(s + 8 * np + 4), a, b1);
      }
    }

    if constexpr (kFp8) {  // then its V rows over them
      __syncwarp();
      widen_rows<T, BN, DVT / 16, Tile::kWarpKeys>(s_k, s_v8 + stage * kV8Bytes, wn * Tile::kWarpKeys, lane);
      __syncwarp();
    }
    const bool edge = (t + 1) * BN > w.L || (p.causal && (t + 1) * BN - 1 > w.pos_lo) ||
                      (p.window && t * BN <= w.pos_hi - p.window);
    float alpha[2];
    if constexpr (kFp8) {
#pragma unroll
      for (int i = 0; i < kNS * 4; i++) s[i] *= score_scale;
    }
    softmax_step<kNS>(p, s, m_row, l_row, alpha, pos, w.L, t * BN + wn * Tile::kWarpKeys, edge, lane,
                      kFp8 ? 1.0f : score_scale);
    rescale<kNO>(o_acc, alpha);
    uint32_t pa[kNS / 2][4];
    p_fragments<T, kNS>(s, pa);

    // O += P V
    const uint32_t sv = kFp8 ? s_k : s_v + stage * Tile::kVBytes;
#pragma unroll
    for (int ks = 0; ks < kNS / 2; ks++)
#pragma unroll
      for (int np = 0; np < kNO / 2; np++) {
        uint32_t bv[4];
        const int key = wn * Tile::kWarpKeys + ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(bv, sv + tile_offset(key, 2 * np + (lane >> 4), BN));
        const uint32_t b0[2] = {bv[0], bv[1]}, b1[2] = {bv[2], bv[3]};
        mma_m16n8k16(T(), quad(o_acc + 8 * np), pa[ks], b0);
        mma_m16n8k16(T(), quad(o_acc + 8 * np + 4), pa[ks], b1);
      }
    __syncthreads();  // the stage is refilled by the next iteration's load
  }
  cp_async_wait_group<0>();

  // ---- epilogue: the WN warps' partial results combined through the free K/V ring: sums
  // [WN][16][DVT], then m and l ----
  for (int i = 0; i < 2; i++) {
    l_row[i] += __shfl_xor_sync(0xffffffffu, l_row[i], 1);
    l_row[i] += __shfl_xor_sync(0xffffffffu, l_row[i], 2);
  }
  float *red = reinterpret_cast<float *>(smem + Tile::kQBytes);
  float *red_m = red + WN * 16 * DVT, *red_l = red_m + WN * 16;
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < kNO; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) red[(wn * 16 + g + 8 * (e >> 1)) * DVT + nt * 8 + 2 * (lane & 3) + (e & 1)] = o_acc[4 * nt + e];
  if ((lane & 3) == 0)
    for (int i = 0; i < 2; i++) red_m[wn * 16 + g + 8 * i] = m_row[i], red_l[wn * 16 + g + 8 * i] = l_row[i];
  __syncthreads();
  for (int idx = tid; idx < 16 * DVT / 2; idx += kThreads) {
    const int r = idx / (DVT / 2), col = 2 * (idx % (DVT / 2));
    if (w.r0 + r >= w.rows) continue;
    float mx = -INFINITY, l = 0.0f, v0 = 0.0f, v1 = 0.0f;
    for (int k = 0; k < WN; k++) mx = fmaxf(mx, red_m[k * 16 + r]);
    for (int k = 0; k < WN; k++) {
      const float mk = red_m[k * 16 + r], f = mk == -INFINITY ? 0.0f : ex2_approx_ftz_f32(mk - mx);
      l += f * red_l[k * 16 + r];
      v0 += f * red[(k * 16 + r) * DVT + col];
      v1 += f * red[(k * 16 + r) * DVT + col + 1];
    }
    RowResult res = finish_row(p, mx, l, w.hkv * p.group + (w.r0 + r) % p.group);
    if (*bad) res = {NAN, NAN};
    if (kFp8 && p.v_scale) res.scale *= p.v_scale[w.hkv * p.v_scale_step];
    store_pair<T>(p, out_ptr<T>(p, w, r, col), v0 * res.scale, v1 * res.scale);
    if (w.dv_part == 0 && col == 0) put_lse(p, w, r, res.lse);
  }
}

// Combines the splits' partials of each row of [out_B, Hq, out_S] (one CTA of 128 threads per row) by
// their LSE and adds the sink: o = sum_s exp(lse_s - lse) o_s, lse = log(sum_s exp(lse_s) +
// exp(sink)). The weights are formed once per row in shared memory; each thread then sums its
// columns' partials, whose loads are independent of each other.
constexpr int kAttnMaxSplits = 64;

template <typename T, bool kPacked>
__global__ void __launch_bounds__(128) attention_merge_kernel(const attn_params p) {
  __shared__ float w[kAttnMaxSplits];
  __shared__ float row_inv;
  const int64_t rows_total = static_cast<int64_t>(p.out_B) * p.Hq * p.out_S, row = blockIdx.x;
  const int tok = static_cast<int>(row % p.out_S), h = static_cast<int>(row / p.out_S % p.Hq);
  const int b = static_cast<int>(row / p.out_S / p.Hq);
  const int tid = threadIdx.x;
  if (kPacked) {  // packed sequences: a token that no sequence's queries hold keeps its o and lse
    __shared__ bool held;
    if (tid == 0) {
      int lo = 0, hi = p.B - 1, q0, sq;  // the last sequence that starts at or before tok
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        attn_detail::packed_queries(p, mid, q0, sq);
        if (q0 <= tok) lo = mid;
        else hi = mid - 1;
      }
      attn_detail::packed_queries(p, lo, q0, sq);
      held = tok >= q0 && tok < q0 + sq;
    }
    __syncthreads();
    if (!held) return;
  }
  if (tid < p.splits) w[tid] = p.part_lse[tid * rows_total + row];
  __syncthreads();
  if (tid == 0) {
    float mx = p.sinks ? p.sinks[h] : -INFINITY;
    bool nan = false;  // a split that met a page out of range
    for (int s = 0; s < p.splits; s++) mx = fmaxf(mx, w[s]), nan |= isnan(w[s]);
    float l = mx == -INFINITY ? 0.0f : p.sinks ? expf(p.sinks[h] - mx) : 0.0f;
    for (int s = 0; s < p.splits; s++) {
      w[s] = w[s] == -INFINITY ? 0.0f : expf(w[s] - mx);  // a split that saw nothing has o_s = 0
      l += w[s];
    }
    row_inv = nan ? NAN : l > 0.0f ? 1.0f / l : 0.0f;
    if (p.lse) p.lse[row] = nan ? NAN : l > 0.0f ? mx + logf(l) : -INFINITY;
  }
  __syncthreads();
  const int64_t off = b * p.os[0] + tok * p.os[1] + h * p.os[2];
  for (int col = tid; col < p.Dv; col += 128) {
    float v = 0.0f;
#pragma unroll 8
    for (int s = 0; s < p.splits; s++) v += w[s] * p.part_o[(s * rows_total + row) * p.Dv + col];
    v *= row_inv;
    if (p.o_f32) static_cast<float *>(p.o)[off + col] = v;
    else static_cast<T *>(p.o)[off + col] = static_cast<T>(v);
  }
}
