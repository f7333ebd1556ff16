// Element types and 8-wide vector access for the quantization kernels: inputs widen to fp32,
// outputs round with the shared numerics contract (docs/NUMERICS.md).
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/ptx/arith.cuh"
#include "cuda/ptx/cvt.cuh"
#include "formats/quant_math.h"

__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }

__device__ __forceinline__ float inv_scale(float s) { return qf_inv_scale(s); }

// Output storage tags.
struct e4m3fn_t { uint8_t bits; };
struct e4m3fnuz_t { uint8_t bits; };  // no hardware conversion: through e4m3fn's (below)
struct int8_out_t { int8_t bits; };

__device__ __forceinline__ uint8_t encode(e4m3fn_t, float v) {
  return static_cast<uint8_t>(cvt_rn_satfinite_e4m3x2_f32(0.0f, v) & 0xff);
}
// e4m3fnuz through the hardware e4m3fn conversion. Every e4m3fnuz code is the e4m3fn code of
// twice its value (same bits, bias 8 instead of 7), so encode(y) = e4m3fn(2y) except where the
// formats differ: NaN (0x7F -> 0x80), no negative zero (0x80 -> 0x00), and magnitudes above 232,
// which e4m3fnuz rounds to 240 (0x7F) where e4m3fn saturates at 448 (0x7E, e4m3fnuz 224). 2y is
// exact (or +-Inf, which saturates like any magnitude above 232). Equal to qf_e4m3fnuz_from_f32
// for all 2^32 inputs, at a few integer operations per value instead of the software encoder.
// w: four e4m3fn codes of 2y; big: 0x01 in each byte whose |y| > 232.
__device__ __forceinline__ uint32_t e4m3fnuz_fix4(uint32_t w, uint32_t big) {
  const uint32_t mag = w & 0x7f7f7f7fu;
  const uint32_t nan_hi = (mag + 0x01010101u) & 0x80808080u;  // magnitude 0x7F: NaN
  const uint32_t nz_hi = (mag + 0x7f7f7f7fu) & 0x80808080u;   // magnitude not 0
  const uint32_t keep = ((nz_hi & ~nan_hi) >> 7) * 0xffu;
  return (w & keep) | nan_hi | big;
}

__device__ __forceinline__ uint32_t e4m3fnuz_x4(float a, float b, float c, float d) {
  const uint32_t w = cvt_rn_satfinite_e4m3x2_f32(__fmul_rn(b, 2.0f), __fmul_rn(a, 2.0f)) |
                     uint32_t(cvt_rn_satfinite_e4m3x2_f32(__fmul_rn(d, 2.0f), __fmul_rn(c, 2.0f))) << 16;
  const uint32_t big = uint32_t(fabsf(a) > 232.0f) | uint32_t(fabsf(b) > 232.0f) << 8 |
                       uint32_t(fabsf(c) > 232.0f) << 16 | uint32_t(fabsf(d) > 232.0f) << 24;
  return e4m3fnuz_fix4(w, big);
}

__device__ __forceinline__ uint8_t encode(e4m3fnuz_t, float v) {
  return static_cast<uint8_t>(e4m3fnuz_x4(v, 0.0f, 0.0f, 0.0f) & 0xffu);
}
__device__ __forceinline__ uint8_t encode(int8_out_t, float v) {
  int32_t i = cvt_rni_s32_f32(v);
  return static_cast<uint8_t>(max(-128, min(127, i)));
}

// Eight consecutive inputs from a 16-byte aligned address, widened to fp32.
template <typename T>
__device__ __forceinline__ void load8(const T *p, float (&v)[8]) {
  static_assert(sizeof(T) == 2, "16-bit inputs: one 16-byte load");
  uint4 raw = *reinterpret_cast<const uint4 *>(p);
  const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
  for (int i = 0; i < 8; i++) v[i] = to_f32(e[i]);
}
template <>
__device__ __forceinline__ void load8<float>(const float *p, float (&v)[8]) {
  float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// Eight encoded outputs to an 8-byte aligned address.
__device__ __forceinline__ void store8(e4m3fn_t *p, const float (&v)[8]) {
  uint2 out;
  out.x = cvt_rn_satfinite_e4m3x2_f32(v[1], v[0]) | (uint32_t(cvt_rn_satfinite_e4m3x2_f32(v[3], v[2])) << 16);
  out.y = cvt_rn_satfinite_e4m3x2_f32(v[5], v[4]) | (uint32_t(cvt_rn_satfinite_e4m3x2_f32(v[7], v[6])) << 16);
  *reinterpret_cast<uint2 *>(p) = out;
}
__device__ __forceinline__ void store8(e4m3fnuz_t *p, const float (&v)[8]) {
  *reinterpret_cast<uint2 *>(p) = make_uint2(e4m3fnuz_x4(v[0], v[1], v[2], v[3]), e4m3fnuz_x4(v[4], v[5], v[6], v[7]));
}
// int8: the rounding of encode() (NaN to 0, saturation to [-128, 127]) with the packing
// instruction doing the clamp, one conversion per value.
__device__ __forceinline__ void store8(int8_out_t *p, const float (&v)[8]) {
  int32_t i[8];
#pragma unroll
  for (int k = 0; k < 8; k++) i[k] = cvt_rni_s32_f32(v[k]);
  *reinterpret_cast<uint2 *>(p) =
      make_uint2(cvt_pack_sat_s8x4(i[0], i[1], i[2], i[3]), cvt_pack_sat_s8x4(i[4], i[5], i[6], i[7]));
}

// The group max of B values per lane over groups of `lanes` consecutive lanes (B <= lanes <= 32,
// powers of two), scattered: lane l ends with the max over its group of value `slot` =
// (l % lanes) / (lanes / B), in log2(lanes) shuffles where B separate group maxes take
// B log2(lanes). First log2(B) halving steps: at distance d a lane with bit d set keeps the upper
// half of its values and sends the lower half, its partner the reverse; then plain butterflies.
// Inputs are magnitudes (>= 0 or NaN): a NaN propagates.
template <int B>
__device__ __forceinline__ float reduce_scatter_max(float (&a)[B], int lanes, int &slot) {
  static_assert(B >= 1 && B <= 4 && (B & (B - 1)) == 0, "1, 2 or 4 values");
  const int lane = threadIdx.x % 32;
  int d = lanes / 2;
  slot = 0;
#pragma unroll
  for (int half = B / 2; half >= 1; half /= 2, d /= 2) {
    const bool upper = (lane & d) != 0;
#pragma unroll
    for (int k = 0; k < half; k++) {
      const float send = upper ? a[k] : a[k + half], keep = upper ? a[k + half] : a[k];
      a[k] = max_nan_f32(keep, __shfl_xor_sync(0xffffffffu, send, d));
    }
    if (upper) slot += half;
  }
  for (; d >= 1; d /= 2) a[0] = max_nan_f32(a[0], __shfl_xor_sync(0xffffffffu, a[0], d));
  return a[0];
}
