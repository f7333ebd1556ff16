// NVFP4 weights times 16-bit activations: d[M, N] = a[M, K] . w^[N, K]^T on the tensor cores
// (mma.sync m16n8k16), each weight dequantized once, in registers, on its way from memory.
//
// Up to 8 tokens (decode; the wgmma kernel of nvfp4_gemm_wide.cuh is faster beyond). The weight is
// the mma's A operand (16 rows of N) and the tokens its B operand (8 columns), so a decode step
// with one token wastes 7 of 8 columns rather than 15 of 16 rows. A warp owns 16
// weight rows (rows r and r + 8 for lane group g = lane / 4); per step of 128 K each lane t =
// lane % 4 of a group takes 16 bytes of each of its two rows: 32 codes, K 32 t .. 32 t + 31 of
// the step. An mma's 16 columns of K need not be 16 consecutive K of the weight: any order does,
// as long as the activations come in the same one. Lane t's mma k-columns 2t, 2t + 1, 2t + 8,
// 2t + 9 are 4 consecutive K of its own 32, which makes its B fragment one 8-byte piece of the
// activation row, and the weight's fragment the four pairs of one packed word (formats/nvfp4.h):
//   pair -> 16-bit pair (bit operations) -> times the block scale (exact) -> mma.
// Each code times its e4m3 scale is exact in fp16 and bf16 (at most 5 significant bits), held at
// 2^-7 of its value so that the smallest products stay normal; the epilogue multiplies by 2^7
// and the tensor scale.
//
// The codes stream in chunks of 4 steps (256 contiguous bytes of a row) through a two-chunk ring
// (three chunks for CTAs of kFp4LongChunks chunks or more) in shared memory that each lane fills
// with cp.async and reads back alone (no barrier; no registers held while a chunk loads); the
// scales, 2 bytes a row and step, come through the L1.
// K is split across the CTAs of a cluster where the row tiles alone leave SMs idle; their fp32
// partial sums meet in shared memory (distributed shared memory, rank order), so no workspace and
// no second kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/cvt.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/mma.cuh"
#include "formats/nvfp4.h"

constexpr int kFp4Warps = 4;             // a CTA: 4 warps of 16 weight rows
constexpr int kFp4Rows = 16 * kFp4Warps; // weight rows per CTA
constexpr int kFp4StepK = 128;           // K per step: 4 lanes x 32 codes per row
constexpr int kFp4Chunk = 4;             // steps per load: 256 contiguous bytes of each row
constexpr int kFp4Stages = 2;            // chunks in the shared-memory ring
constexpr int kFp4LongStages = 3;        // and for CTAs of kFp4LongChunks chunks or more
constexpr int kFp4LongChunks = 8;
constexpr int kFp4MaxSplit = 16;         // CTAs per cluster (past 8: the non-portable size)
constexpr int kFp4NarrowMaxM = 8;        // tokens: one B fragment

struct Fp4Params {
  const void *a;             // [M, K] T, row pitch lda elements
  const uint8_t *b;          // packed codes [N, K / 2 bytes], row pitch ldb bytes
  const uint8_t *scales;     // e4m3fn [N, K / 16], row pitch lds bytes
  const float *tensor_scale; // [1]
  void *d;                   // [M, N] Tout, row pitch ldd elements
  int64_t lda, ldb, lds, ldd;
  int M, N, K;
  int steps; // ceil(K / 128)
};

__device__ __forceinline__ uint32_t mul2(__half, uint32_t x, uint32_t y) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2 *>(&x), *reinterpret_cast<const __half2 *>(&y));
  return *reinterpret_cast<const uint32_t *>(&r);
}
__device__ __forceinline__ uint32_t mul2(__nv_bfloat16, uint32_t x, uint32_t y) {
  const __nv_bfloat162 r =
      __hmul2(*reinterpret_cast<const __nv_bfloat162 *>(&x), *reinterpret_cast<const __nv_bfloat162 *>(&y));
  return *reinterpret_cast<const uint32_t *>(&r);
}

// The two e4m3fn block scales of `pair` (low byte first) as T pairs (s, s) that turn the codes
// of qf_nvfp4_f16x2 / qf_nvfp4_bf16x2 into code * s * 2^-7: s * 2^7 for fp16, s * 2^119 for bf16.
template <typename T>
__device__ __forceinline__ void fp4_scales(uint32_t pair, uint32_t (&s)[2]) {
  const uint32_t h = cvt_rn_f16x2_e4m3x2(static_cast<uint16_t>(pair));
  if constexpr (std::is_same_v<T, __half>) {
    const uint32_t h128 = mul2(T(), h, 0x58005800u); // x 128
    s[0] = __byte_perm(h128, 0, 0x1010);
    s[1] = __byte_perm(h128, 0, 0x3232);
  } else {
    const __half2 hh = *reinterpret_cast<const __half2 *>(&h);
    const float lo = __low2float(hh) * 0x1p119f, hi = __high2float(hh) * 0x1p119f;
    const __nv_bfloat162 l2 = __floats2bfloat162_rn(lo, lo), h2 = __floats2bfloat162_rn(hi, hi);
    s[0] = *reinterpret_cast<const uint32_t *>(&l2);
    s[1] = *reinterpret_cast<const uint32_t *>(&h2);
  }
}

// A packed word of 8 codes, dequantized: r[p] = pair p (at 2^-14 or 2^-126 of the codes) times
// the scale pair s.
template <typename T>
__device__ __forceinline__ void fp4_dequant(uint32_t q, uint32_t s, uint32_t (&r)[4]) {
#pragma unroll
  for (int p = 0; p < 4; p++) r[p] = mul2(T(), std::is_same_v<T, __half> ? qf_nvfp4_f16x2(q, p) : qf_nvfp4_bf16x2(q, p), s);
}

template <typename Tout>
__device__ __forceinline__ void store_out(const Fp4Params &p, int row, int tok, float v) {
  if (tok >= p.M) return;
  Tout *d = static_cast<Tout *>(p.d) + static_cast<int64_t>(tok) * p.ldd + row;
  if constexpr (std::is_same_v<Tout, float>) *d = v;
  else if constexpr (std::is_same_v<Tout, __half>) *d = __float2half_rn(v);
  else *d = __float2bfloat16_rn(v);
}

// K split over a cluster: each CTA has written its kVals partial sums per thread into
// part[j * stride + threadIdx.x] of its own shared memory (j as acc[0][j] below, or
// the wide kernel's acc[j]); CTA `rank` of `split` sums accumulators rank, rank + split, ... over
// the cluster in rank order (the same result on every run) and stores them.
template <typename Tout, int kVals>
__device__ __forceinline__ void cluster_sum_store(const Fp4Params &p, const float *part, int stride, int rank, int split,
                                                  bool rows_ok, int row, int tok0, int t, float out_scale) {
  cluster_sync();
  for (int j = rank; j < kVals; j += split) { // this CTA's share of the outputs, summed in rank order
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(&part[j * stride + threadIdx.x]));
    float v = 0.0f;
    for (int q = 0; q < split; q++) v += ld_shared_cluster_f32(mapa_shared_cluster(addr, q));
    if (rows_ok) store_out<Tout>(p, row + 8 * ((j % 4) / 2), tok0 + 8 * (j / 4) + 2 * t + j % 2, v * out_scale);
  }
  cluster_sync_relaxed(); // no CTA leaves while a peer may still read its partial sums
}

// A lane's 32 activations for one step (x at the step's K); zero for a lane whose 32 K lie past
// K (a partial last step: k_ok false).
template <typename T>
__device__ __forceinline__ void fp4_load_x(const T *x, bool k_ok, uint4 (&xv)[4]) {
#pragma unroll
  for (int w = 0; w < 4; w++) xv[w] = k_ok ? __ldg(reinterpret_cast<const uint4 *>(x + 8 * w)) : uint4{};
}

// One step of a lane: its 32 codes of rows r and r + 8 (c0, c1, scales sc) times the matching
// activations xv, into acc: words 0 and 1 (block scale 2t) into acc[0], words 2 and 3
// (block 2t + 1) into acc[1], two independent chains.
template <typename T>
__device__ __forceinline__ void fp4_step(uint4 c0, uint4 c1, uint32_t sc, const uint4 (&xv)[4], float (&acc)[2][4]) {
  uint32_t sr[2], sr8[2];
  fp4_scales<T>(sc & 0xFFFFu, sr);
  fp4_scales<T>(sc >> 16, sr8);
  const uint32_t w0[4] = {c0.x, c0.y, c0.z, c0.w}, w1[4] = {c1.x, c1.y, c1.z, c1.w};
#pragma unroll
  for (int w = 0; w < 4; w++) { // word w: K 32 t + 8 w .. + 7 of the step
    uint32_t r[4], r8[4];
    fp4_dequant<T>(w0[w], sr[w / 2], r);
    fp4_dequant<T>(w1[w], sr8[w / 2], r8);
    mma_m16n8k16(T(), acc[w / 2], {r[0], r8[0], r[1], r8[1]}, {xv[w].x, xv[w].y});
    mma_m16n8k16(T(), acc[w / 2], {r[2], r8[2], r[3], r8[3]}, {xv[w].z, xv[w].w});
  }
}

// Grid (split, 1, row tiles), clusters of `split` CTAs along x:
// the CTAs of a cluster take consecutive ranges of whole chunks of its row tile.
template <typename T, typename Tout, int kStages>
__global__ void __launch_bounds__(32 * kFp4Warps) nvfp4_gemm_kernel(const __grid_constant__ Fp4Params p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int split = gridDim.x, rank = blockIdx.x;
  const int row = blockIdx.z * kFp4Rows + warp * 16 + g; // and row + 8; N is a multiple of 16
  const bool rows_ok = row < p.N;
  // Split in whole chunks; the last CTA of a row tile also takes the steps past them.
  const int chunks = p.steps / kFp4Chunk;
  const int s0 = kFp4Chunk * (rank * chunks / split);
  const int s1 = rank + 1 == split ? p.steps : kFp4Chunk * ((rank + 1) * chunks / split);
  const int s_full = min(s1, p.K / kFp4StepK); // steps that every lane's 32 K fill

  const uint4 *b0 = reinterpret_cast<const uint4 *>(p.b + row * p.ldb + 16 * t);
  const uint4 *b1 = b0 + 8 * p.ldb / 16;
  const uint16_t *sc0 = reinterpret_cast<const uint16_t *>(p.scales + row * p.lds + 2 * t);
  const uint16_t *sc1 = sc0 + 4 * p.lds;

  // Whole chunks stream through a ring of lane-private slots in shared memory (cp.async: no
  // registers held while they load; each lane reads back only what it copied); their scales,
  // 8 bytes a chunk, come into registers a chunk ahead.
  __shared__ uint4 ring[kStages][kFp4Chunk][2][32 * kFp4Warps];
  const int n_chunks = max(0, s_full - s0) / kFp4Chunk;
  auto issue = [&](int c) { // chunk c (of this CTA's) into its slot; one commit group either way
    if (rows_ok && c < n_chunks)
#pragma unroll
      for (int j = 0; j < kFp4Chunk; j++) {
        const int step = s0 + kFp4Chunk * c + j;
        cp_async_cg_shared_global_16(static_cast<uint32_t>(__cvta_generic_to_shared(&ring[c % kStages][j][0][threadIdx.x])), b0 + 4 * step);
        cp_async_cg_shared_global_16(static_cast<uint32_t>(__cvta_generic_to_shared(&ring[c % kStages][j][1][threadIdx.x])), b1 + 4 * step);
      }
    cp_async_commit_group();
  };
  auto load_scales = [&](int c, uint32_t (&sc)[kFp4Chunk]) {
#pragma unroll
    for (int j = 0; j < kFp4Chunk; j++) {
      const int step = s0 + kFp4Chunk * c + j;
      sc[j] = rows_ok && c < n_chunks ? uint32_t{__ldg(sc0 + 4 * step)} | uint32_t{__ldg(sc1 + 4 * step)} << 16 : 0;
    }
  };
#pragma unroll
  for (int c = 0; c + 1 < kStages; c++) issue(c); // the weights do not depend on the kernel before this one
  uint32_t sc[kFp4Chunk];
  load_scales(0, sc);
  griddep_wait();

  // The lane's activation row (token g), past M clamped to the last token (computed, never stored).
  const T *x = static_cast<const T *>(p.a) + min(g, p.M - 1) * p.lda + 32 * t + kFp4StepK * static_cast<int64_t>(s0);

  float acc[2][4] = {};
  for (int c = 0; c < n_chunks; c++) {
    issue(c + kStages - 1);
    uint32_t sc_next[kFp4Chunk];
    load_scales(c + 1, sc_next);
    cp_async_wait_group<kStages - 1>(); // chunk c has landed
#pragma unroll
    for (int j = 0; j < kFp4Chunk; j++) {
      uint4 c0 = {}, c1 = {};
      if (rows_ok) c0 = ring[c % kStages][j][0][threadIdx.x], c1 = ring[c % kStages][j][1][threadIdx.x];
      uint4 xv[4];
      fp4_load_x<T>(x, true, xv);
      fp4_step<T>(c0, c1, sc[j], xv, acc);
      x += kFp4StepK;
    }
#pragma unroll
    for (int j = 0; j < kFp4Chunk; j++) sc[j] = sc_next[j];
  }
  cp_async_wait_all();
  int s = s0 + kFp4Chunk * n_chunks;
  // The steps left (fewer than a chunk, a partial last one among them), one at a time.
  for (; s < s1; s++) {
    uint4 c0 = {}, c1 = {};
    uint32_t sc = 0;
    const bool k_ok = kFp4StepK * s + 32 * t < p.K;
    if (rows_ok && k_ok) {
      c0 = __ldg(b0 + 4 * s), c1 = __ldg(b1 + 4 * s);
      sc = uint32_t{__ldg(sc0 + 4 * s)} | uint32_t{__ldg(sc1 + 4 * s)} << 16;
    }
    uint4 xv[4];
    fp4_load_x<T>(x, k_ok, xv);
    fp4_step<T>(c0, c1, sc, xv, acc);
    x += kFp4StepK;
  }
#pragma unroll
  for (int i = 0; i < 4; i++) acc[0][i] += acc[1][i];

  // acc[0][i]: row (i < 2 ? row : row + 8), token 2 t + i % 2.
  const float out_scale = 128.0f * *p.tensor_scale;
  if (split == 1) {
    if (!rows_ok) return;
#pragma unroll
    for (int i = 0; i < 4; i++) store_out<Tout>(p, row + 8 * (i / 2), 2 * t + i % 2, acc[0][i] * out_scale);
    return;
  }
  // The partial sums go into the ring once every warp is done with it (three stages and a buffer
  // of their own would pass the 48 KB of static shared memory).
  __syncthreads();
  float *part = reinterpret_cast<float *>(&ring[0][0][0][0]);
#pragma unroll
  for (int i = 0; i < 4; i++) part[i * 32 * kFp4Warps + threadIdx.x] = acc[0][i];
  cluster_sum_store<Tout, 4>(p, part, 32 * kFp4Warps, rank, split, rows_ok, row, 0, t, out_scale);
}
