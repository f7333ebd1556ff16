// Cache prefetches. One asm statement each.
#pragma once

// prefetch.global.L1: start moving the line holding p into L1; no register is written.
__device__ __forceinline__ void prefetch_global_l1(const void *p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }
