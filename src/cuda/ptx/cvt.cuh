// cvt: conversions the CUDA C intrinsics do not spell directly. One asm statement each.
#pragma once

#include <cstdint>

// cvt.rn.satfinite.e4m3x2.f32: round to nearest even, clamp finite overflow and Inf to +-448,
// NaN to NaN. `hi` lands in the upper byte. sm_89+.
__device__ __forceinline__ uint16_t cvt_rn_satfinite_e4m3x2_f32(float hi, float lo) {
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

// cvt.rni.s32.f32: round to nearest even integer; NaN gives 0, out-of-range clamps to int32.
__device__ __forceinline__ int32_t cvt_rni_s32_f32(float x) {
  int32_t d;
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(d) : "f"(x));
  return d;
}

// cvt.pack.sat.s8.s32.b32 twice: four int32 values saturated to int8, `a` in the lowest byte.
// (The instruction puts its first operand above its second and shifts its third in above both.)
__device__ __forceinline__ uint32_t cvt_pack_sat_s8x4(int32_t a, int32_t b, int32_t c, int32_t d) {
  uint32_t hi, w;
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;" : "=r"(hi) : "r"(d), "r"(c));
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;" : "=r"(w) : "r"(b), "r"(a), "r"(hi));
  return w;
}

// cvt.rn.f16x2.e4m3x2: two e4m3fn values (the high byte into the high half) as fp16, exactly.
// sm_89+.
__device__ __forceinline__ uint32_t cvt_rn_f16x2_e4m3x2(uint16_t a) {
  uint32_t d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(a));
  return d;
}
