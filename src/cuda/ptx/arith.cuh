// Arithmetic the CUDA C intrinsics do not spell directly. One asm statement each.
#pragma once

// min.NaN.f32 / max.NaN.f32: NaN if either input is NaN. Equal to qf_nan_min / qf_nan_max up to
// the NaN's payload whenever the two inputs are not zeros of opposite signs (true when one is
// nonzero, as where the clamps of qf_glu use them).
__device__ __forceinline__ float min_nan_f32(float a, float b) {
  float d;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float max_nan_f32(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// rcp.approx.ftz.f32: the hardware reciprocal estimate.
__device__ __forceinline__ float rcp_approx_ftz_f32(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// ex2.approx.ftz.f32: the hardware 2^x estimate (at most 2 ulp off; -Inf gives 0, +Inf +Inf).
__device__ __forceinline__ float ex2_approx_ftz_f32(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
