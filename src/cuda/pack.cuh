// Two fp32 values rounded to nearest even into a 16-bit type and packed in one 32-bit word (`x` in
// the low half), for stores of two or more outputs at once.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ uint32_t pack_pair(__nv_bfloat16, float x, float y) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t pack_pair(__half, float x, float y) {
  const __half2 v = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&v);
}
