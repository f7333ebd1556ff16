// NVFP4 GEMM for more than 8 tokens: the weight dequantized straight into the A fragments of
// wgmma (A from registers), the activations' tiles from shared memory, so that each dequantized
// weight serves a tile of kTok tokens on the warpgroup tensor cores and never passes through
// shared memory.
//
// A CTA is kWG warpgroups, each 64 weight rows (16 a warp), by kTok tokens (16 to 256). Per step
// of 128 K, TMA brings into a ring stage the step's activation tile (kTok tokens x 128 K, two
// 128-byte-swizzled 64-column atoms) and the CTA's codes (64 kWG rows x 64 bytes, 64-byte
// swizzled). A warpgroup runs, per step s:
//   8 wgmma m64nKTOKk16 (A: step s's fragments in registers; B: the stage's activations), then,
//   once step s - 1's wgmma are done, step s + 1's fragments into the other register set while
//   step s's run: codes (ld.shared) -> the lane's pair of each word -> times the block scale.
// The warpgroup that finishes a step last refills its stage (a count in shared memory), so no
// warpgroup waits for another and there is no CTA barrier per step.
// A wgmma's 16 k-columns are 16 consecutive K (the activations come as TMA laid them out), and
// lane t of a row group holds columns 2t, 2t + 1, 2t + 8, 2t + 9 of rows r and r + 8: pair t of
// the slice's two packed words (K 16 j .. 16 j + 7 and 16 j + 8 .. + 15) of each row. Every lane
// thus reads all of its rows' words and decodes a quarter of each (qf_nvfp4_pair: two rotations
// and two masks whatever p is). The block scales, one per row and slice, are loaded
// two bytes a lane (its rows' slices 2t, 2t + 1), turned into 16-bit pairs and passed around the
// lane group by shuffles. The accumulators hold d^T (rows of N by tokens); the epilogue multiplies
// by 2^7 and the tensor scale (as nvfp4_gemm.cuh) and stores each element. Where the tiles are
// too few for the SMs, K is split over a cluster whose fp32 partial sums meet in distributed
// shared memory in rank order, as in nvfp4_gemm.cuh.
#pragma once

#include <cuda.h>

#include "cuda/fp4/nvfp4_gemm.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/ptx/wgmma_rs.cuh"

constexpr int kFp4WideBand = 16; // row tiles per band of the raster

// Dynamic shared memory of the wide kernel: a ring of kStages stages (activations, codes), its
// barriers and counts.
template <int kWG, int kTok, int kStages>
struct Fp4WideSmem {
  alignas(1024) uint8_t x[kStages][2][kTok * 128];     // [stage][atom][token row of 128 bytes]
  alignas(1024) uint8_t codes[kStages][64 * kWG * 64]; // [stage][weight row of 64 bytes]
  alignas(8) uint64_t full[2][kStages]; // [0]: the stage's codes landed, [1]: its activations
  int done[kStages];                     // warpgroups done with the stage's step
};

template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) wgmma_m64k16_f32_f16_rs_kmajor<N>(d, a, desc_b, 1);
  else wgmma_m64k16_f32_bf16_rs_kmajor<N>(d, a, desc_b, 1);
}

// Grid: token tiles (kTok) x row tiles (64 kWG rows) x split CTAs, in clusters of `split` along x
// that split K where the tiles alone leave SMs idle (kWG = 1 only); 128 kWG threads;
// Fp4WideSmem<kWG, kTok, kStages> (+ 1 KB to align it) of dynamic shared memory.
template <typename T, typename Tout, int kWG, int kTok, int kStages>
__global__ void __launch_bounds__(128 * kWG) nvfp4_gemm_wide_kernel(const __grid_constant__ Fp4Params p,
                                                                    const __grid_constant__ CUtensorMap x_map,
                                                                    const __grid_constant__ CUtensorMap b_map, int split) {
  static_assert(kStages >= 2, "a step in flight while one is multiplied");
  using Smem = Fp4WideSmem<kWG, kTok, kStages>;
  extern __shared__ uint8_t smem_raw[];
  Smem &sm = *reinterpret_cast<Smem *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  // Tiles in bands of kFp4WideBand row tiles: a band's CTAs take its row tiles for one token tile,
  // then the next token tile, so that the band's weights and one token tile's activations stay in
  // the L2 together.
  constexpr int kRows = 64 * kWG;
  const int token_tiles = (p.M + kTok - 1) / kTok, row_tiles = (p.N + kRows - 1) / kRows;
  // K split over clusters of `split` CTAs, for one-warpgroup CTAs only (the launcher's rule): each
  // warpgroup frees the ring on its own, so a second one could still be reading it when the first
  // writes its partial sums there. The launcher also gives every CTA a step or more.
  const int tile = blockIdx.x / split, rank = blockIdx.x % split;
  const int band = tile / (kFp4WideBand * token_tiles), in_band = tile % (kFp4WideBand * token_tiles);
  const int band_rows = min(kFp4WideBand, row_tiles - band * kFp4WideBand);
  const int tok0 = in_band / band_rows * kTok, row0 = (band * kFp4WideBand + in_band % band_rows) * kRows;
  // This CTA's steps of 128 K: s0 .. s0 + steps - 1. Below, a step index s counts from s0.
  const int s0 = rank * p.steps / split, steps = (rank + 1) * p.steps / split - s0;

  const uint32_t codes_full0 = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.full[0][0]));
  const uint32_t x_full0 = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.full[1][0]));
  const uint32_t x0 = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.x[0][0][0]));
  const uint32_t codes0 = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.codes[0][0]));
  constexpr uint32_t kXStage = sizeof(sm.x[0]), kCodesStage = sizeof(sm.codes[0]);
  // Step n goes into stage n % kStages: steps 0 .. kStages - 1 first, by thread 0; then each
  // step once every warpgroup is done with the step kStages before it in that stage. The warpgroup
  // that finishes that step last (a count in shared memory) issues the copies, so no warpgroup
  // waits for another.
  // The codes and the activations land on barriers of their own: the dequantization waits for the
  // codes only, the step's wgmma for the activations (8 KB against 64 KB a stage at 256 tokens), so
  // that a late activation tile overlaps the dequantization (M = 2048 0.4-5.3% faster, H100,
  // bench/results/h100-dev-nvfp4-split-barriers-ab.jsonl).
  auto fetch = [&](int n, int st) {
    if (n >= steps) return;
    const uint32_t cbar = codes_full0 + 8 * st, xbar = x_full0 + 8 * st;
    mbarrier_arrive_expect_tx(cbar, kCodesStage);
    cp_async_bulk_tensor_2d_g2s(codes0 + st * kCodesStage, &b_map, cbar, 64 * (s0 + n), row0);
    mbarrier_arrive_expect_tx(xbar, kXStage);
    for (int atom = 0; atom < 2; atom++)
      cp_async_bulk_tensor_2d_g2s(x0 + st * kXStage + atom * (kXStage / 2), &x_map, xbar, kFp4StepK * (s0 + n) + 64 * atom,
                                  tok0);
  };
  if (threadIdx.x == 0) {
    prefetch_tensormap(&x_map);
    prefetch_tensormap(&b_map);
    for (int st = 0; st < kStages; st++)
      mbarrier_init(codes_full0 + 8 * st, 1), mbarrier_init(x_full0 + 8 * st, 1), sm.done[st] = 0;
    fence_mbarrier_init();
  }
  __syncthreads();

  const int wg = kWG == 1 ? 0 : threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, g = lane / 4,
            t = lane % 4;
  const int r0 = 64 * wg + warp * 16 + g; // the lane's rows in the CTA's tile: r0 and r0 + 8
  const int row = row0 + r0;
  const bool rows_ok = row < p.N; // warp-uniform: N is a multiple of 16
  constexpr int kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const uint32_t rot = qf_nvfp4_pair_rot(t, kBf16); // the lane decodes pair t of each word
  // The lane's two scale bytes of each of its rows (slices 2t, 2t + 1 of a step; x: row r0, y:
  // r0 + 8), zero past K or N. Loaded three steps ahead and kept apart until the dequantization
  // uses them: combined right after the loads, they held each step's issue for the loads' whole
  // latency (ncu: a tenth of the warps' stall samples on that one combining instruction).
  const uint16_t *sc0 = reinterpret_cast<const uint16_t *>(p.scales + row * p.lds + 8 * s0 + 2 * t);
  const uint16_t *sc1 = sc0 + 4 * p.lds;
  auto load_scales = [&](int s) {
    const bool ok = rows_ok && s < steps && kFp4StepK * (s0 + s) + 32 * t < p.K;
    return ok ? make_uint2(__ldg(sc0 + 4 * s), __ldg(sc1 + 4 * s)) : make_uint2(0u, 0u);
  };
  // Chunk q (16 bytes: slices 2q, 2q + 1) of row r0 in a stage, 64-byte swizzled; row r0 + 8 is
  // 512 bytes on, with the same swizzle.
  const uint32_t row_codes = codes0 + r0 * 64, swz = (r0 / 2 % 4) * 16;
  // Step s's A fragments of the lane, a[j] for the slice of K 16 j .. 16 j + 15, from its codes
  // in stage st and its scale bytes sc.
  auto dequant = [&](int st, uint2 sc, uint32_t(&a)[8][4]) {
    uint32_t pr0[2], pr8[2]; // (s, s) of rows r0 and r0 + 8 for slices 2t and 2t + 1
    fp4_scales<T>(sc.x, pr0);
    fp4_scales<T>(sc.y, pr8);
    const uint32_t base = row_codes + st * kCodesStage;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const uint4 w0 = ld_shared_v4(base + ((16 * q) ^ swz)), w8 = ld_shared_v4(base + 512 + ((16 * q) ^ swz));
#pragma unroll
      for (int h = 0; h < 2; h++) { // slice 2q + h: its scales come from lane t = q of the group
        const uint32_t sr = __shfl_sync(0xFFFFFFFFu, pr0[h], q, 4), sr8 = __shfl_sync(0xFFFFFFFFu, pr8[h], q, 4);
        uint32_t(&f)[4] = a[2 * q + h];
        f[0] = mul2(T(), qf_nvfp4_pair(h ? w0.z : w0.x, rot, kBf16), sr);
        f[1] = mul2(T(), qf_nvfp4_pair(h ? w8.z : w8.x, rot, kBf16), sr8);
        f[2] = mul2(T(), qf_nvfp4_pair(h ? w0.w : w0.y, rot, kBf16), sr);
        f[3] = mul2(T(), qf_nvfp4_pair(h ? w8.w : w8.y, rot, kBf16), sr8);
      }
    }
  };
  // Keeps fragments that a wgmma in flight reads in their registers (the asm statements of the
  // wgmma cannot say that they are read after issue) until a wait has shown it done.
  auto hold = [](uint32_t(&a)[8][4]) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int i = 0; i < 4; i++) wgmma_fence_operand(a[j][i]);
  };

  float acc[kTok / 2] = {};
  uint32_t a0[8][4], a1[8][4] = {};
  uint2 sc_next = load_scales(1), sc_after = load_scales(2); // steps s + 1 and s + 2
  int st = 0;                                                    // step s's stage
  uint32_t ph = 0;                                               // and the parity of its barriers' phase
  // Step s: wgmma with fragments `cur`; once step s - 1's are done (its fragments `nxt` and its
  // stage free), step s + 1's fragments into `nxt` while step s's run.
  auto step = [&](int s, const uint32_t(&cur)[8][4], uint32_t(&nxt)[8][4]) {
    const uint32_t x_addr = x0 + st * kXStage;
    mbarrier_wait_parity(x_full0 + 8 * st, ph);
#pragma unroll
    for (int i = 0; i < kTok / 2; i++) wgmma_fence_operand(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < kFp4StepK / 16; j++)
      wgmma_rs<T, kTok>(acc, cur[j], wgmma_desc_kmajor_sw128(x_addr + j / 4 * (kXStage / 2) + j % 4 * 32));
    wgmma_commit_group();
    wgmma_wait_group<1>();
#pragma unroll
    for (int i = 0; i < kTok / 2; i++) wgmma_fence_operand(acc[i]);
    hold(nxt);
    if (s > 0 && threadIdx.x % 128 == 0) { // step s - 1 is done here: the last warpgroup refills its stage
      const int prev = st == 0 ? kStages - 1 : st - 1;
      bool last = true;
      if constexpr (kWG > 1) {
        __threadfence_block();
        last = atomicAdd(&sm.done[prev], 1) == kWG - 1;
        if (last) sm.done[prev] = 0, __threadfence_block();
      }
      if (last) fetch(s - 1 + kStages, prev);
    }
    ph ^= st == kStages - 1;
    st = st == kStages - 1 ? 0 : st + 1;
    if (s + 1 < steps) {
      mbarrier_wait_parity(codes_full0 + 8 * st, ph);
      dequant(st, sc_next, nxt);
    }
    sc_next = sc_after, sc_after = load_scales(s + 3);
  };

  const uint2 sc_first = load_scales(0); // the weights do not depend on the kernel before this one
  griddep_wait();
  if (threadIdx.x == 0)
    for (int n = 0; n < kStages; n++) fetch(n, n);
  mbarrier_wait_parity(codes_full0, 0);
  dequant(0, sc_first, a0);
  for (int s = 0; s < steps; s += 2) { // two steps an iteration: the fragment sets keep their names
    step(s, a0, a1);
    if (s + 1 < steps) step(s + 1, a1, a0);
  }
  wgmma_wait_group<0>();
#pragma unroll
  for (int i = 0; i < kTok / 2; i++) wgmma_fence_operand(acc[i]);
  hold(a0);
  hold(a1);

  // acc[4 j + i]: row `row` (i < 2) or row + 8, token tok0 + 8 j + 2 t + i % 2.
  const float out_scale = 128.0f * *p.tensor_scale;
  if (split > 1) { // the cluster's partial sums meet in shared memory (the ring is free)
    static_assert(sizeof(sm.x) >= sizeof(float) * kTok / 2 * 128 * kWG, "partial sums fit the ring");
    float *part = reinterpret_cast<float *>(&sm.x[0][0][0]); // [kTok / 2][128 kWG]
#pragma unroll
    for (int i = 0; i < kTok / 2; i++) part[i * 128 * kWG + threadIdx.x] = acc[i];
    cluster_sum_store<Tout, kTok / 2>(p, part, 128 * kWG, rank, split, rows_ok, row, tok0, t, out_scale);
    return;
  }
  if (!rows_ok) return;
#pragma unroll
  for (int j = 0; j < kTok / 8; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) store_out<Tout>(p, row + 8 * (i / 2), tok0 + 8 * j + 2 * t + i % 2, acc[4 * j + i] * out_scale);
}
