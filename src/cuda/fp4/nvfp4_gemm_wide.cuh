// NVFP4 GEMM for many tokens (prefill): the weight dequantized into shared memory, multiplied by
// wgmma with the activations from shared memory, so that each dequantized weight serves a whole
// tile of 128 tokens on the warpgroup tensor cores.
//
// A CTA is kWG warpgroups, each 64 weight rows (16 a warp, the lanes' rows and codes as in
// nvfp4_gemm.cuh), by 128 tokens. Per step of 128 K:
//   codes (loaded two steps ahead into registers) -> pairs -> times the block scales -> one
//   16-byte store per row and word into the warpgroup's A tile (bf16 / fp16, [64 rows][128 K] as
//   two 128-byte-swizzled 64-column atoms, double-buffered) -> fence.proxy.async, CTA barrier ->
//   8 wgmma m64n128k16 against the step's activation tile, which TMA brought into a ring (two
//   128-token x 64-column boxes a stage) shared by the warpgroups.
// The wgmma of a step runs while the next step is dequantized. Thread 0 refills the ring: with one
// warpgroup, step s - 1's stage once its wait shows step s - 1 done; with two, after the barrier
// of step s (every warpgroup has then waited for step s - 2), step s - 2's stage. The accumulators hold d^T (rows of N by tokens); the epilogue multiplies by 2^7 and the
// tensor scale (as nvfp4_gemm.cuh) and stores each element.
//
// Every CTA reads its token tile's activations once per 64 x kWG weight rows: with one warpgroup
// that was 9.2 GB of L2 traffic at 2048 x 7168 x 16384 (ncu), about the L2's bandwidth for the
// time it took; two warpgroups halve it.
#pragma once

#include <cuda.h>

#include "cuda/fp4/nvfp4_gemm.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"

constexpr int kFp4WideTokens = 128; // tokens per CTA (the wgmma's N)
constexpr int kFp4WideBand = 16;    // row tiles per band of the raster

// Dynamic shared memory of the wide kernel: a ring of kStages activation tiles, two A tiles per
// warpgroup, barriers. A lone warpgroup refills a stage as soon as its own wait frees it, so three
// stages keep two steps in flight and two keep one; several warpgroups refill only after the next
// barrier, which takes four for two steps.
template <int kWG, int kStages>
struct Fp4WideSmem {
  alignas(1024) uint8_t x[kStages][2][kFp4WideTokens * 128]; // [stage][atom][token row of 128 bytes]
  alignas(1024) uint8_t a[kWG][2][2][64 * 128];              // [warpgroup][buffer][atom][weight row]
  alignas(8) uint64_t full[kStages];
};

// The K-major, 128-byte-swizzled offset of 16-byte chunk `chunk` (0..7) of row `row` in an atom.
__device__ __forceinline__ uint32_t sw128_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row % 8)) * 16); }

template <typename T, int N>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) wgmma_m64k16_f32_f16<N>(d, desc_a, desc_b, 1);
  else wgmma_m64k16_f32_bf16<N>(d, desc_a, desc_b, 1);
}

// Grid: token tiles x row tiles (64 kWG rows) CTAs; 128 kWG threads; Fp4WideSmem<kWG, kStages>
// (+ 1 KB to align it) of dynamic shared memory.
template <typename T, typename Tout, int kWG, int kStages>
__global__ void __launch_bounds__(128 * kWG) nvfp4_gemm_wide_kernel(const __grid_constant__ Fp4Params p,
                                                                     const __grid_constant__ CUtensorMap x_map) {
  static_assert(kStages >= (kWG == 1 ? 2 : 4), "several warpgroups refill two steps back");
  constexpr int kAhead = kWG == 1 ? kStages - 1 : 2; // steps of activations in flight
  extern __shared__ uint8_t smem_raw[];
  Fp4WideSmem<kWG, kStages> &sm = *reinterpret_cast<Fp4WideSmem<kWG, kStages> *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // Tiles in bands of kFp4WideBand row tiles: a band's CTAs take its row tiles for one token tile,
  // then the next token tile, so that the band's weights and one token tile's activations stay in
  // the L2 together.
  constexpr int kRows = 64 * kWG;
  const int token_tiles = (p.M + kFp4WideTokens - 1) / kFp4WideTokens, row_tiles = (p.N + kRows - 1) / kRows;
  const int band = blockIdx.x / (kFp4WideBand * token_tiles), in_band = blockIdx.x % (kFp4WideBand * token_tiles);
  const int band_rows = min(kFp4WideBand, row_tiles - band * kFp4WideBand);
  const int tok0 = in_band / band_rows * kFp4WideTokens;
  const int r0 = warp * 16 + g; // the lane's rows in its warpgroup's tile: r0 and r0 + 8
  const int row = (band * kFp4WideBand + in_band % band_rows) * kRows + 64 * wg + r0;
  const bool rows_ok = row < p.N; // warp-uniform: N is a multiple of 16

  const uint4 *b0 = reinterpret_cast<const uint4 *>(p.b + row * p.ldb + 16 * t);
  const uint4 *b1 = b0 + 8 * p.ldb / 16;
  const uint16_t *sc0 = reinterpret_cast<const uint16_t *>(p.scales + row * p.lds + 2 * t);
  const uint16_t *sc1 = sc0 + 4 * p.lds;
  struct Codes {
    uint4 c0, c1;
    uint32_t sc;
  };
  auto load = [&](int s) { // step s's codes of the lane, zero past K or past the steps
    Codes c = {};
    if (rows_ok && s < p.steps && kFp4StepK * s + 32 * t < p.K) {
      c.c0 = __ldg(b0 + 4 * s), c.c1 = __ldg(b1 + 4 * s);
      c.sc = uint32_t{__ldg(sc0 + 4 * s)} | uint32_t{__ldg(sc1 + 4 * s)} << 16;
    }
    return c;
  };

  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.full[0]));
  auto fetch_x = [&](int s) { // thread 0: step s's activation tile into its stage
    if (s >= p.steps) return;
    const int st = s % kStages;
    mbarrier_arrive_expect_tx(full0 + 8 * st, 2 * kFp4WideTokens * 128);
    for (int atom = 0; atom < 2; atom++)
      cp_async_bulk_tensor_2d_g2s(static_cast<uint32_t>(__cvta_generic_to_shared(sm.x[st][atom])), &x_map, full0 + 8 * st,
                                  kFp4StepK * s + 64 * atom, tok0);
  };
  if (threadIdx.x == 0) {
    prefetch_tensormap(&x_map);
    for (int st = 0; st < kStages; st++) mbarrier_init(full0 + 8 * st, 1);
    fence_mbarrier_init();
  }
  Codes next = load(0), after = load(1); // the weights do not depend on the kernel before this one
  __syncthreads();
  griddep_wait();
  if (threadIdx.x == 0)
    for (int s = 0; s < kAhead; s++) fetch_x(s);

  float acc[kFp4WideTokens / 2] = {};
  for (int s = 0; s < p.steps; s++) {
    const Codes c = next;
    next = after;
    after = load(s + 2);
    // Dequantize into A tile s % 2 (its wgmma, two steps back, has completed).
    uint8_t *a_tile = &sm.a[wg][s % 2][0][0];
    uint32_t sr[2], sr8[2];
    fp4_scales<T>(c.sc & 0xFFFFu, sr);
    fp4_scales<T>(c.sc >> 16, sr8);
    const uint32_t w0[4] = {c.c0.x, c.c0.y, c.c0.z, c.c0.w}, w1[4] = {c.c1.x, c.c1.y, c.c1.z, c.c1.w};
#pragma unroll
    for (int w = 0; w < 4; w++) { // word w: K 32 t + 8 w .. + 7, one 16-byte chunk of a row
      uint32_t r[4], r8[4];
      fp4_dequant<T>(w0[w], sr[w / 2], r);
      fp4_dequant<T>(w1[w], sr8[w / 2], r8);
      const int atom = t / 2, chunk = (4 * t + w) % 8;
      *reinterpret_cast<uint4 *>(a_tile + atom * 64 * 128 + sw128_offset(r0, chunk)) = uint4{r[0], r[1], r[2], r[3]};
      *reinterpret_cast<uint4 *>(a_tile + atom * 64 * 128 + sw128_offset(r0 + 8, chunk)) = uint4{r8[0], r8[1], r8[2], r8[3]};
    }
    fence_proxy_async_shared_cta();
    __syncthreads();
    if (kWG > 1 && threadIdx.x == 0) fetch_x(s + 2); // into step s - 2's stage
    mbarrier_wait_parity(full0 + 8 * (s % kStages), (s / kStages) & 1);

    const uint32_t a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(a_tile));
    const uint32_t x_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sm.x[s % kStages][0]));
#pragma unroll
    for (int i = 0; i < kFp4WideTokens / 2; i++) wgmma_fence_operand(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kFp4StepK / 16; kk++) {
      const int atom = kk / 4, koff = (kk % 4) * 32;
      wgmma_m64k16<T, kFp4WideTokens>(acc, wgmma_desc_kmajor_sw128(a_addr + atom * 64 * 128 + koff),
                                      wgmma_desc_kmajor_sw128(x_addr + atom * kFp4WideTokens * 128 + koff));
    }
    wgmma_commit_group();
    wgmma_wait_group<1>(); // step s - 1's products are done: its A tile and activation stage are free
#pragma unroll
    for (int i = 0; i < kFp4WideTokens / 2; i++) wgmma_fence_operand(acc[i]);
    if (kWG == 1 && threadIdx.x == 0) fetch_x(s + kAhead); // into step s - 1's stage
  }
  wgmma_wait_group<0>();
#pragma unroll
  for (int i = 0; i < kFp4WideTokens / 2; i++) wgmma_fence_operand(acc[i]);

  // acc[4 j + i]: row r0 (i < 2) or r0 + 8, token tok0 + 8 j + 2 t + i % 2.
  if (!rows_ok) return;
  const float out_scale = 128.0f * *p.tensor_scale;
#pragma unroll
  for (int j = 0; j < kFp4WideTokens / 8; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) store_out<Tout>(p, row + 8 * (i / 2), tok0 + 8 * j + 2 * t + i % 2, acc[4 * j + i] * out_scale);
}
