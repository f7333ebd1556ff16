/* Independent oracles for the tests: brute force over all codes, no shared code with src/. */
#ifndef QF_TEST_ORACLE_H
#define QF_TEST_ORACLE_H

#include <math.h>
#include <stdint.h>

/* Brute-force e4m3fn: nearest finite code to v, ties to even mantissa, saturating, NaN -> 0x7F. */
static inline uint8_t oracle_e4m3fn(float v) {
  if (isnan(v)) return 0x7f;
  double best_err = INFINITY;
  int best = 0;
  for (int c = 0; c < 256; c++) {
    int e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) continue; /* NaN */
    double mag = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    double val = (c & 0x80) ? -mag : mag;
    if ((c & 0x80) != (signbit(v) ? 0x80 : 0)) continue; /* same sign, so -0 stays -0 */
    double err = fabs(val - (double)v);
    if (err < best_err || (err == best_err && (c & 1) == 0)) best_err = err, best = c;
  }
  return (uint8_t)best;
}

/* The value of e4m3fn code c (NaN for 0x7F and 0xFF), from the format's definition. */
static inline double oracle_e4m3fn_value(uint8_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  double mag = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  return (c & 0x80) ? -mag : mag;
}

#endif
