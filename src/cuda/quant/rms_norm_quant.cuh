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
//   never crosses a tile (tiles are multiples of 256 elements). The group's first lane stores
//   its scale through qf_store_group_scale. Block 0 writes the 0 scales of the padding rows of
//   COL_MAJOR_TMA; the lane of the last group of a row writes the 0 bytes that complete its last
//   UE8M0 word.
// - Per token: y stays in registers between the amax and the quantization when the row is one
//   tile, and v is recomputed from it and w: half the registers of keeping v in fp32. Longer
//   rows re-read y (from residual or x).
#pragma once

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
  qf_scale_out scales;
};

// y rounded to T as qf_bf16_from_f32 / qf_f16_from_f32 do: RNE (the hardware conversion), with
// NaN stored as the positive canonical NaN.
__device__ __forceinline__ __nv_bfloat16 round_to(__nv_bfloat16, float f) {
  return f != f ? __ushort_as_bfloat16(0x7fc0) : __float2bfloat16_rn(f);
}
__device__ __forceinline__ __half round_to(__half, float f) {
  return f != f ? __ushort_as_half(0x7e00) : __float2half_rn(f);
}

// NaN-propagating max over the G / 8 lanes of a group.
__device__ __forceinline__ float group_amax(float a, int group_shift) {
  return group_shift == 5 ? group_max_shfl<4>(a) : group_shift == 6 ? group_max_shfl<8>(a) : group_max_shfl<16>(a);
}

// NOTES: registers decide how many rows an SM holds, hence the bytes in flight. These caps are
// the fewest registers that compile without spills (nvcc 13, -Xptxas -v): K = 18432 (288
// threads x 96) keeps two rows per SM instead of one, K = 7168 (224 x 72) four.
__host__ __device__ constexpr int rms_max_regs(int vpt) { return vpt >= 8 ? 96 : vpt >= 4 ? 72 : 64; }

template <typename T, typename Tout, ScaleGranularity GRAN, RowAccess ACC, int VPT>
__global__ void __maxnreg__(rms_max_regs(VPT)) rms_norm_quant_kernel(RmsNormQuantParams p) {
  static_assert(sizeof(T) == 2, "bf16 or fp16 rows");
  static_assert(VPT >= 1 && VPT <= row_vpt_max(sizeof(T)), "chunks per thread");
  constexpr bool kPerGroup = GRAN == ScaleGranularity::kPerGroup;
  __shared__ double sum_slots[32];
  __shared__ float max_slots[32];
  const int tile_chunks = blockDim.x * VPT;
  const int tiles = ((p.cols + 7) / 8 + tile_chunks - 1) / tile_chunks;
  const qf_scale_out &so = p.scales;
  const float qmax = qmax_of<Tout>(), ub = so.ub ? *so.ub : 0.0f;
  const T *w = static_cast<const T *>(p.weight);

  if (kPerGroup && blockIdx.x == 0 && so.pad_rows > 0) {
    const int64_t groups = p.cols >> p.group_shift;
    const int64_t n = so.format == QF_SCALE_UE8M0_PACKED ? (groups + 3) / 4 * 4 : groups;
    for (int64_t e = threadIdx.x; e < so.pad_rows * n; e += blockDim.x)
      qf_store_group_scale(so.data, so.ld, so.layout, so.format, p.rows + e / n, e % n, 0.0f);
  }

  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T *xr = static_cast<const T *>(p.x) + r * p.x_ld;
    T *resr = p.residual ? static_cast<T *>(p.residual) + r * p.res_ld : nullptr;
    Tout *qr = static_cast<Tout *>(p.q) + r * p.q_ld;
    Chunk<T> y[VPT];
    auto load_y = [&](int t, const T *src) {  // x, or y where pass 1 left it
#pragma unroll
      for (int i = 0; i < VPT; i++) y[i] = load_chunk<ACC>(src, chunk_col<VPT>(t, i), p.cols);
    };
    // v = (y * r) * w of one tile, chunk by chunk, into f(c, v); w is loaded here, not kept.
    auto for_each_v = [&](int t, float rs, auto &&f) {
      Chunk<T> wc[VPT];
#pragma unroll
      for (int i = 0; i < VPT; i++) wc[i] = load_chunk<ACC>(w, chunk_col<VPT>(t, i), p.cols);
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
        if (c < p.cols) prefetch_global_l1(w + c);
      }
    }

    // Pass 1: y (written back to residual) and the sum of its squares.
    double sumsq = 0.0;
    for (int t = 0; t < tiles; t++) {
      load_y(t, xr);
      if (resr) {
        Chunk<T> res[VPT];
#pragma unroll
        for (int i = 0; i < VPT; i++) res[i] = load_chunk<ACC>(resr, chunk_col<VPT>(t, i), p.cols);
#pragma unroll
        for (int i = 0; i < VPT; i++) {
#pragma unroll
          for (int j = 0; j < 8; j++) y[i][j] = round_to(T{}, y[i].f32(j) + res[i].f32(j));
          store_chunk<ACC>(resr, chunk_col<VPT>(t, i), p.cols, y[i]);
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
    // NOTES: explicit roundings, so that no compiler flag changes this line's bits.
    const double total = block_allreduce(sumsq, Sum{}, sum_slots);
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__double2float_rn(total / static_cast<double>(p.cols)), p.eps)));
    auto quantize = [&](int c, float inv, float (&v)[8]) {
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = QF_MUL_RN(v[j], inv);
      store_q_chunk<ACC>(qr, c, p.cols, v);
    };

    // Pass 2: per group, the group scales and q; per token, the row's amax.
    float amax = 0.0f;
    for (int t = 0; t < tiles; t++) {
      if (tiles > 1) load_y(t, resr ? resr : xr);
      for_each_v(t, rs, [&](int c, float (&v)[8]) {
        float a = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) a = qf_nan_max(a, qf_absf(v[j]));
        if (!kPerGroup) {
          amax = qf_nan_max(amax, a);
          return;
        }
        // Every lane takes part in the shuffle; past the row (K % G == 0) lie only whole groups.
        a = group_amax(a, p.group_shift);
        if (c >= p.cols) return;
        const float s = qf_group_scale(a, qmax, so.ub != nullptr, ub, so.scale_min, so.format != QF_SCALE_F32);
        if ((c & ((1 << p.group_shift) - 1)) == 0) {  // the group's first lane
          const int g = c >> p.group_shift, groups = p.cols >> p.group_shift;
          qf_store_group_scale(so.data, so.ld, so.layout, so.format, r, g, s);
          if (so.format == QF_SCALE_UE8M0_PACKED && g == groups - 1)
            for (int e = groups; e % 4; e++) qf_store_group_scale(so.data, so.ld, so.layout, so.format, r, e, 0.0f);
        }
        quantize(c, qf_inv_scale(s), v);
      });
    }

    // Per token: the row's scale, then q from y and w (y re-read for rows of several tiles).
    if (!kPerGroup) {
      amax = block_allreduce(amax, NanMax{}, max_slots);
      const float s = qf_group_scale(amax, qmax, so.ub != nullptr, ub, so.scale_min, 0);
      if (threadIdx.x == 0) static_cast<float *>(so.data)[r] = s;
      const float inv = qf_inv_scale(s);
      for (int t = 0; t < tiles; t++) {
        if (tiles > 1) load_y(t, resr ? resr : xr);
        for_each_v(t, rs, [&](int c, float (&v)[8]) { quantize(c, inv, v); });
      }
    }
    __syncthreads();  // the slots are reused by the block's next row
  }
}
