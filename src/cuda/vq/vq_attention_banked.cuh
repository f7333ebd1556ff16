// VQ decode attention with bank-interleaved tables (placement QF_VQ_BOOKS_BANKED): the chunk
// kernel of vq_attention.cuh for one residual of 8-bit indices and S = D / vs = 32 or 64 vectors
// per head, laid out so that no shared-memory lookup of a warp meets another lane in its bank.
// It leaves the same per-chunk partials (m, l, o~) for vq_attention_merge_kernel.
//
// NOTES:
// - A block serves one query head h (kv head g = h / group) and a contiguous run of units (batch
//   entry, chunk); it copies head g's V books into shared memory once (one cp.async per entry, in
//   flight with the first code tile) and builds the score table of q[b, h] whenever the batch
//   entry changes (eight K entries in flight per thread).
// - Layouts: the score table is lut[e][c] = q-part(c mod S) . K entry e of vector c mod S, for
//   columns c = 0 .. S + 31 (the first 32 vectors twice; fp32, q scaled by sm_scale log2(e)); the V
//   books are vbook[e][j] = V entry e of vector j. Entry e of every vector shares a row, and
//   vector j sits in bank j mod 32 (table) or banks 2j, 2j + 1 mod 32 (4-element fp16 entries), so
//   32 lanes that look up 32 different vectors never conflict, whatever their indices.
// - Scores, one token per lane: a warp scores 32 tokens; at step j lane t reads vector
//   (t + j) mod S of its token, i.e. table column t + j (the doubled columns spare the wrap), so
//   the 32 table reads of a step fall into 32 banks. The K code rows are staged doubled too
//   (indices 0 .. S - 1, then 0 .. 31), so that the index is the byte at t + j. A score is the sum
//   of S table values in four partial sums.
// - Softmax, online per warp: each warp keeps its own running max m, per-lane sums l and
//   accumulators over its 32 tokens of every tile; the block merges its warps at the end of a
//   unit, in warp order (no atomics: a call repeats bit for bit).
// - Values, one vector per lane (two for S = 64): for each of the warp's tokens the probability
//   comes by shuffle, the lane reads the token's V index of its vector and the entry, and adds
//   p * entry into fp32 accumulators.
// - Code tiles of 256 tokens (32 per warp) are copied with 16-byte cp.async into a ring of three
//   (two in flight while one is computed) where it fits (S = 32), else one. Head g's indices are bytes g S .. g S + S - 1 of
//   a code row, so rows, codes and head offsets are 16-byte aligned (the launcher checks).
// - NaN and Inf as in vq_attention.cuh: max ignores NaN scores, a NaN score makes p, l and o NaN,
//   an Inf score gives exp2(inf - inf) = NaN, a unit without a finite score keeps m = -Inf and
//   adds nothing (weights exp2(-Inf)) or NaN to the merge.
#pragma once

#include <cuda_pipeline_primitives.h>

#include "cuda/vq/vq_attention.cuh"

template <int kS, int kVS, typename E>
__global__ void __launch_bounds__(kVqAttnThreads, 1)
    vq_attention_banked_kernel(const __grid_constant__ vq_attention_params p) {
  static_assert(kS == 32 || kS == 64, "one or two vectors per lane");
  static_assert(kVS == 2 || kVS == 4, "entries of 4 or 8 bytes");
  constexpr int kD = kS * kVS;        // head dim
  constexpr int kSPL = kS / 32;       // vectors per lane in the values phase
  constexpr int kLutW = kS + 32;      // table columns
  constexpr int kKRow = kS + 48;      // staged K row: indices 0 .. S - 1, 0 .. 31, 16 spare bytes
  constexpr int kEB = 2 * kVS;        // entry bytes
  constexpr int kTile = kVqAttnTile;  // 32 tokens per warp

  extern __shared__ __align__(16) uint8_t smem[];
  float *lut_s = reinterpret_cast<float *>(smem);                           // [256][kLutW]
  uint8_t *vbook_s = smem + p.lut_bytes;                                    // [256][kS] entries
  uint8_t *kcodes_s = vbook_s + p.books_bytes;                              // [stages][kTile][kKRow]
  uint8_t *vcodes_s = kcodes_s + p.stages * kTile * kKRow;                  // [stages][kTile][kS]
  float *q_s = reinterpret_cast<float *>(kcodes_s + p.codes_bytes);        // [kD]
  float *red_s = q_s + kD;                                                  // [warps][kD + 2]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y, g = h / p.group;
  const int u_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * p.units / gridDim.x);
  const int u_end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * p.units / gridDim.x);
  if (u_begin >= u_end) return;

  // ---- head g's V books, interleaved by vector: asynchronous copies, waited for with the first tile's ----
  // Thread tid handles vector j = tid % S, entries e0, e0 + kStep, ... (e0 = tid / S) of both books.
  constexpr int kStep = kVqAttnThreads / kS, kPer = 256 / kStep;
  const int bj = tid % kS, e0 = tid / kS;
  const int64_t book_elems = static_cast<int64_t>(p.entries) * kVS;
  const int64_t book_off = vq_attn_book(p, g * kS + bj) * book_elems;
#pragma unroll 8
  for (int u = 0; u < kPer; u++) {
    const int e = e0 + u * kStep;
    __pipeline_memcpy_async(vbook_s + (e * kS + bj) * kEB, p.books[1] + book_off + e * kVS, kEB);
  }

  // Tile t's code bytes of head g into buffer `stage`: thread i copies token i's K row (twice its
  // first 32 bytes) and V row.
  const int64_t row_bytes = static_cast<int64_t>(p.row_words) * 4;
  auto stage_codes = [&](const vq_attn_tile &t, int stage) {
    if (tid < t.count) {
      const int64_t n = t.b * p.seq_len + t.t0 + tid;
      const uint8_t *ks = reinterpret_cast<const uint8_t *>(p.codes[0]) + n * row_bytes + g * kS;
      const uint8_t *vs = reinterpret_cast<const uint8_t *>(p.codes[1]) + n * row_bytes + g * kS;
      uint8_t *kd = kcodes_s + (stage * kTile + tid) * kKRow;
      uint8_t *vd = vcodes_s + (stage * kTile + tid) * kS;
#pragma unroll
      for (int c = 0; c < kS; c += 16) __pipeline_memcpy_async(kd + c, ks + c, 16), __pipeline_memcpy_async(vd + c, vs + c, 16);
#pragma unroll
      for (int c = 0; c < 32; c += 16) __pipeline_memcpy_async(kd + kS + c, ks + c, 16);
    }
    __pipeline_commit();
  };

  // The code-tile ring: tile `ahead` is the next to stage, stages - 1 tiles ahead of the one computed.
  int64_t lut_b = -1;  // the batch entry the table was built for
  vq_attn_tile t = vq_attn_tile_at(p, u_begin, -1), ahead = t;
  auto stage_ahead = [&](int buffer) {
    if (ahead.unit < u_end) {
      stage_codes(ahead, buffer);
      ahead = vq_attn_next(p, ahead);
    } else {
      __pipeline_commit();  // an empty group keeps the count
    }
  };
  for (int s = 0; s + 1 < p.stages; s++) stage_ahead(s);

  float m = -INFINITY, l = 0.0f;  // this warp's running max (log2 units) and this lane's sum of p
  float acc[kSPL][kVS];
#pragma unroll
  for (int i = 0; i < kSPL; i++)
#pragma unroll
    for (int c = 0; c < kVS; c++) acc[i][c] = 0.0f;

  for (int stage = 0; t.unit < u_end; stage = stage + 1 == p.stages ? 0 : stage + 1, t = vq_attn_next(p, t)) {
    __syncthreads();  // every warp is done with the previous tile's buffer, the table and red_s
    stage_ahead(stage == 0 ? p.stages - 1 : stage - 1);  // into the buffer just freed
    switch (p.stages) {  // this tile's group is complete
      case 3: __pipeline_wait_prior(2); break;
      case 2: __pipeline_wait_prior(1); break;
      default: __pipeline_wait_prior(0);
    }
    if (t.b != lut_b) {  // a new batch entry: q[b, h], scaled, then its table
      const int64_t qrow = t.b * p.q_ld + static_cast<int64_t>(h) * kD;
      for (int i = tid; i < kD; i += kVqAttnThreads) q_s[i] = vq_attn_load_q(p, qrow + i) * p.q_scale;
      __syncthreads();
      constexpr int kBatch = 64 / kVS;  // K entries in flight per thread
      static_assert(kPer % kBatch == 0, "whole batches");
      float qv[kVS];
#pragma unroll
      for (int c = 0; c < kVS; c++) qv[c] = q_s[bj * kVS + c];
      const uint16_t *kbook = p.books[0] + book_off;
      for (int u0 = 0; u0 < kPer; u0 += kBatch) {
        float ent[kBatch][kVS];
#pragma unroll
        for (int u = 0; u < kBatch; u++) vq_load_entry<kVS, true>(E{}, kbook + (e0 + (u0 + u) * kStep) * kVS, ent[u]);
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
          float dot = 0.0f;
#pragma unroll
          for (int c = 0; c < kVS; c++) dot = fmaf(qv[c], ent[u][c], dot);
          float *row = lut_s + (e0 + (u0 + u) * kStep) * kLutW;
          row[bj] = dot;
          if (bj < 32) row[kS + bj] = dot;
        }
      }
      lut_b = t.b;
    }
    __syncthreads();  // codes landed (every thread's copies), table built

    const int tok0 = warp * 32, n = min(32, t.count - tok0);  // this warp's tokens of the tile
    if (n > 0) {
      // ---- scores: lane t, its token's vector (t + j) mod S at step j ----
      const uint8_t *kr = kcodes_s + (stage * kTile + tok0 + lane) * kKRow + lane;
      const float *lt = lut_s + lane;
      float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < kS; j++) a[j & 3] += lt[kr[j] * kLutW + j];
      const float s = lane < n ? (a[0] + a[1]) + (a[2] + a[3]) : -INFINITY;

      // ---- online softmax over the warp's tokens ----
      float mx = s;
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
      const float m_new = fmaxf(m, mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no finite score yet: p = exp2(s) is 0 or NaN
      const float pr = exp2f(s - m_use), corr = exp2f(m - m_use);
      l = l * corr + pr;
      m = m_new;
#pragma unroll
      for (int i = 0; i < kSPL; i++)
#pragma unroll
        for (int c = 0; c < kVS; c++) acc[i][c] *= corr;

      // ---- values: lane j's vectors j (and j + 32) of each token ----
      const uint8_t *vr = vcodes_s + (stage * kTile + tok0) * kS + lane;
      auto value = [&](int k) {
        const float pk = __shfl_sync(0xffffffffu, pr, k);
#pragma unroll
        for (int i = 0; i < kSPL; i++) {
          float e[kVS];
          vq_load_entry<kVS, false>(E{}, reinterpret_cast<const uint16_t *>(vbook_s + (vr[k * kS + 32 * i] * kS + lane + 32 * i) * kEB), e);
#pragma unroll
          for (int c = 0; c < kVS; c++) acc[i][c] = fmaf(pk, e[c], acc[i][c]);
        }
      };
      if (n == 32) {  // a whole warp of tokens: unrolled, every load in flight
#pragma unroll
        for (int k = 0; k < 32; k++) value(k);
      } else {
        for (int k = 0; k < n; k++) value(k);
      }
    }

    // ---- end of a unit: the warps' (m, l, o~) merged in warp order into the unit's partial ----
    if (t.last) {
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) l += __shfl_xor_sync(0xffffffffu, l, d);
      float *mine = red_s + warp * (kD + 2);
#pragma unroll
      for (int i = 0; i < kSPL; i++)
#pragma unroll
        for (int c = 0; c < kVS; c++) mine[(lane + 32 * i) * kVS + c] = acc[i][c];
      if (lane == 0) mine[kD] = m, mine[kD + 1] = l;
      __syncthreads();
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kVqAttnWarps; w++) M = fmaxf(M, red_s[w * (kD + 2) + kD]);
      const float M_use = M == -INFINITY ? 0.0f : M;
      const int64_t part = (t.b * p.Hq + h) * p.n_chunks + t.chunk;
      for (int d = tid; d < kD + 1; d += kVqAttnThreads) {  // d = kD: the sum of p
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kVqAttnWarps; w++) sum = fmaf(exp2f(red_s[w * (kD + 2) + kD] - M_use), red_s[w * (kD + 2) + d + (d == kD)], sum);
        if (d < kD) p.part_o[part * kD + d] = sum;
        else p.part_ml[part * 2] = M, p.part_ml[part * 2 + 1] = sum;
      }
      m = -INFINITY, l = 0.0f;
#pragma unroll
      for (int i = 0; i < kSPL; i++)
#pragma unroll
        for (int c = 0; c < kVS; c++) acc[i][c] = 0.0f;
    }
  }
}
