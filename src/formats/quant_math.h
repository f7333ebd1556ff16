/* The arithmetic of the quantization contract (docs/NUMERICS.md), shared by the CPU reference
 * and the CUDA kernels so that both compute the same bits: NaN-propagating min/max, the group
 * scale rule, where a scale is stored, qfuse's fp32 exp and the gated activation.
 *
 * NOTES: nvcc contracts a*b+c into one FMA even across statements, which changes rounding; every
 * product that feeds an addition here goes through QF_MUL_RN, which forbids that on the device. */
#ifndef QF_FORMATS_QUANT_MATH_H
#define QF_FORMATS_QUANT_MATH_H

#include "formats/formats.h"

#if defined(__CUDA_ARCH__)
#define QF_MUL_RN(a, b) __fmul_rn((a), (b))
#define QF_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#include <math.h>
#define QF_MUL_RN(a, b) ((a) * (b))
#define QF_FMA(a, b, c) fmaf((a), (b), (c))
#endif

#define QF_SCALE_MIN_DEFAULT 1e-10f
#define QF_F32_MAX 3.4028234663852886e38f

QF_HD float qf_qnan(void) { return qf_f32_from_bits(0x7fc00000u); }
QF_HD int qf_isnan(float x) { return x != x; }
QF_HD float qf_absf(float x) { return qf_f32_from_bits(qf_f32_bits(x) & 0x7fffffffu); }
/* max/min that return NaN when either input is NaN (fmaxf/fminf would drop it). */
QF_HD float qf_nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
QF_HD float qf_nan_min(float a, float b) { return (a < b || a != a) ? a : b; }

/* The largest value the scale maps to, per output format (int8 127, e4m3fn 448, e4m3fnuz 224). */
QF_HD float qf_qmax(int is_int8, int is_fnuz) { return is_int8 ? 127.0f : is_fnuz ? 224.0f : 448.0f; }

/* a / qmax for a >= 0, correctly rounded (the IEEE quotient). On the GPU, from a >= 2^-120 on,
 * through the rounded reciprocal y = 1 / qmax and two FMAs (q0 = a y, r = a - q0 qmax exactly,
 * q = q0 + r y): three instructions instead of the division's sequence, and the same bits for every
 * such a with qmax = 127, 224 or 448 (checked exhaustively over the 2^31 non-negative floats; with
 * 224 and 448 the two forms differ only below 7.6e-37, which keeps the division). */
QF_HD float qf_div_qmax(float a, float qmax) {
#ifdef __CUDA_ARCH__
  if (a >= 0x1p-120f) {
    const float y = __frcp_rn(qmax);
    const float q0 = __fmul_rn(a, y);
    return __fmaf_rn(__fmaf_rn(-q0, qmax, a), y, q0);
  }
#endif
  return a / qmax;
}

/* The group scale rule. amax: NaN-propagating max |v| of the group. ub: upper bound, used when
 * has_ub. floor > 0. pow2: round the result up to a power of two. Non-finite amax gives the
 * canonical NaN (so CPU and GPU store the same bits). */
QF_HD float qf_group_scale(float amax, float qmax, int has_ub, float ub, float floor, int pow2) {
  if (!(amax <= QF_F32_MAX)) return qf_qnan();
  float s = qf_div_qmax(amax, qmax);
  if (has_ub) s = qf_nan_min(s, ub);
  s = qf_nan_max(s, floor);
  if (qf_isnan(s)) return qf_qnan();
  return pow2 ? qf_pow2_ceil_f32(s) : s;
}

/* 1/s, correctly rounded; NaN when s is not finite and positive. */
QF_HD float qf_inv_scale(float s) {
#ifdef __CUDA_ARCH__
  return (s > 0.0f && s <= QF_F32_MAX) ? __frcp_rn(s) : qf_qnan(); /* the correctly rounded 1 / s too */
#else
  return (s > 0.0f && s <= QF_F32_MAX) ? 1.0f / s : qf_qnan();
#endif
}

/* Round to nearest even integer, as int32, for |x| < 2^30 (clamped first); NaN gives 0. */
QF_HD int32_t qf_rne_i32(float x) {
  if (x != x) return 0;
  x = x > 1073741824.0f ? 1073741824.0f : x < -1073741824.0f ? -1073741824.0f : x;
  if (qf_absf(x) >= 8388608.0f) return (int32_t)x; /* already an integer */
  float big = x >= 0.0f ? 8388608.0f : -8388608.0f;  /* adding 2^23 rounds away the fraction */
  float r = (x + big) - big;
  return (int32_t)r;
}

/* Where the scale of row m, group g goes (layouts and formats of qfuse.h). ld is the pitch:
 * ROW_MAJOR: floats per row of scales; COL_MAJOR(_TMA): floats (or int32 words) per group. */
QF_HD void qf_store_group_scale(void *scales, int64_t ld, int layout, int format, int64_t m, int64_t g,
                                float s) {
  if (format == 2) { /* UE8M0_PACKED: byte g % 4 of word (g / 4, m) */
    uint8_t *w = (uint8_t *)scales + 4 * ((g / 4) * ld + m);
    w[g % 4] = qf_ue8m0_from_f32_ceil(s);
  } else if (layout == 0) {
    ((float *)scales)[m * ld + g] = s;
  } else {
    ((float *)scales)[g * ld + m] = s;
  }
}

/* qfuse's fp32 exp: 2^(x log2 e) with the fraction in [-0.5, 0.5] through a degree-7 Taylor
 * polynomial of 2^f (relative error < 2e-7, about 2 ulp). Results below 2^-125 flush to 0;
 * from 2^127.5 up they are +Inf; NaN stays NaN. Defined by these exact operations, so CPU and GPU
 * agree bit for bit. */
QF_HD float qf_expf(float x) {
  if (x != x) return x;
  float t = QF_MUL_RN(x, 1.44269504088896341f);
  if (t >= 128.0f) return qf_f32_from_bits(0x7f800000u);
  if (t <= -125.0f) return 0.0f;
  float big = t >= 0.0f ? 8388608.0f : -8388608.0f;
  float n = (t + big) - big; /* round to nearest even */
  float f = t - n;           /* exact, in [-0.5, 0.5] */
  float p = 1.5252733804059840e-05f;
  p = QF_FMA(p, f, 1.5403530393381606e-04f);
  p = QF_FMA(p, f, 1.3333558146428443e-03f);
  p = QF_FMA(p, f, 9.6181291076284772e-03f);
  p = QF_FMA(p, f, 5.5504108664821580e-02f);
  p = QF_FMA(p, f, 2.4022650695910071e-01f);
  p = QF_FMA(p, f, 6.9314718055994531e-01f);
  p = QF_FMA(p, f, 1.0f);
  /* times 2^n, n in [-125, 127]: exact for normal results */
  return QF_MUL_RN(p, qf_f32_from_bits((uint32_t)((int32_t)n + 127) << 23));
}

/* Gated activation of qf_glu_opts (alpha already resolved: 0 means 1):
 * v = g' * (1 / (1 + exp(-alpha g'))) * (u' + plus_one). */
QF_HD float qf_glu(float g, float u, float alpha, float limit, int up_plus_one) {
  if (limit > 0.0f) {
    g = qf_nan_min(g, limit);
    u = qf_nan_max(qf_nan_min(u, limit), -limit);
  }
  float e = qf_expf(-QF_MUL_RN(alpha, g));
  float sig = 1.0f / (1.0f + e);
  float up = up_plus_one ? u + 1.0f : u;
  return QF_MUL_RN(QF_MUL_RN(g, sig), up);
}

#endif
