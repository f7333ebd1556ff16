/* Division of non-negative 31-bit integers by a divisor fixed at launch: one high multiply, one
 * add and one shift instead of the division's sequence (a float reciprocal and conversions, which
 * the compiler moves through uniform registers: about 130 cycles each). The host builds the
 * divisor; the kernels divide. C and CUDA (the CPU tests check it against the division).
 *
 * NOTES: with s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, floor(n / d) =
 * (mulhi(n, m) + n) >> s for every 0 <= n < 2^31 (division by invariant integers, Granlund and
 * Montgomery 1994, with a 33-bit multiplier 2^32 + m); the sum stays below 2^32 because
 * mulhi(n, m) <= n. d = 1 gives s = 0, m = 1 and mulhi = 0. */
#ifndef QF_CUDA_FASTDIV_H
#define QF_CUDA_FASTDIV_H

#include <stdint.h>

#include "formats/formats.h"

typedef struct {
  uint32_t mul, shift;
} qf_fastdiv;

/* The divisor d, 1 <= d < 2^31. */
static inline qf_fastdiv qf_fastdiv_make(uint32_t d) {
  uint32_t s = 0;
  while (((uint64_t)1 << s) < d) s++;
  const qf_fastdiv f = {(uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << s) - d)) / d + 1), s};
  return f;
}

/* n / d for 0 <= n < 2^31, f made from d. */
QF_HD int qf_fastdiv_div(int n, qf_fastdiv f) {
#ifdef __CUDA_ARCH__
  const uint32_t hi = __umulhi((uint32_t)n, f.mul);
#else
  const uint32_t hi = (uint32_t)(((uint64_t)(uint32_t)n * f.mul) >> 32);
#endif
  return (int)((hi + (uint32_t)n) >> f.shift);
}

#endif
