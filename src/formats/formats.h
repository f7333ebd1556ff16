/* Portable number-format codecs shared by the CPU reference and the CUDA kernels.
 *
 * Every conversion works on the integer bits of the float, so host and device give
 * bit-identical results whatever the rounding mode or flush-to-zero setting. All
 * encoders round to nearest, ties to even, on the exact input value (subnormal
 * results included). Header-only: C11 and C++/CUDA. */
#ifndef QF_FORMATS_FORMATS_H
#define QF_FORMATS_FORMATS_H

#include <stdint.h>

#if defined(__CUDACC__)
#define QF_HD static __host__ __device__ __forceinline__
#else
#define QF_HD static inline
#endif

#define QF_E4M3FN_MAX 448.0f
#define QF_E4M3FNUZ_MAX 240.0f
#define QF_E5M2_MAX 57344.0f
#define QF_INT8_MAX 127.0f
#define QF_E2M1_MAX 6.0f

#define QF_F32_SIGN 0x80000000u
#define QF_F32_ABS 0x7FFFFFFFu
#define QF_F32_INF 0x7F800000u
#define QF_F32_QNAN 0x7FC00000u

/* ---- f32 bit casts ---------------------------------------------------------------- */

/* The float whose IEEE-754 binary32 encoding is `u`. */
QF_HD float qf_f32_from_bits(uint32_t u)
{
    union { uint32_t u; float f; } v;
    v.u = u;
    return v.f;
}

/* The IEEE-754 binary32 encoding of `f`. */
QF_HD uint32_t qf_f32_bits(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    return v.u;
}

/* ---- shared small-float machinery -------------------------------------------------- */

/* sig / 2^shift rounded to nearest, ties to even. Requires sig < 2^24 and shift >= 0. */
QF_HD uint32_t qf_fmt_rne_shr(uint32_t sig, int shift)
{
    uint32_t q, rem, half;
    if (shift == 0) return sig;
    if (shift >= 25) return 0; /* sig < 2^24 <= half of 2^shift: below the tie */
    q = sig >> shift;
    rem = sig & ((1u << shift) - 1u);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

/* Magnitude code of |x| (abs_bits: its f32 bits, not NaN) in a binary format with
 * `mant_bits` mantissa bits and exponent bias `bias` (subnormals at exponent field 0).
 * Rounds to nearest even on the exact value; a rounded code above `max_code`, and Inf,
 * gives `overflow_code` (the Inf code for IEEE formats, max_code for satfinite ones).
 * Because a code is (exponent field << mant_bits) + mantissa, adding the rounded
 * significand to the scaled exponent carries into the exponent as it should, and the
 * parity of the code is the parity of the mantissa. Requires bias <= 127. */
QF_HD uint32_t qf_fmt_encode_mag(uint32_t abs_bits, int mant_bits, int bias,
                                 uint32_t max_code, uint32_t overflow_code)
{
    int exp = (int)(abs_bits >> 23);
    uint32_t sig = abs_bits & 0x7FFFFFu;
    int min_exp = 1 - bias; /* unbiased exponent of the smallest normal and of subnormals */
    int unb, tgt;
    uint32_t q, code;
    if (abs_bits >= QF_F32_INF) return overflow_code;
    if (exp == 0)
        exp = 1; /* f32 subnormal: no implicit bit, same scale as the smallest normal */
    else
        sig |= 0x800000u;
    unb = exp - 127;
    tgt = unb > min_exp ? unb : min_exp;
    q = qf_fmt_rne_shr(sig, 23 - mant_bits + (tgt - unb));
    code = ((uint32_t)(tgt - min_exp) << mant_bits) + q;
    return code > max_code ? overflow_code : code;
}

/* f32 bits of a finite magnitude code of the format above. Requires every value of the
 * format to be an f32 normal or zero (bias + mant_bits <= 126). */
QF_HD uint32_t qf_fmt_decode_mag(uint32_t mag, int mant_bits, int bias)
{
    uint32_t frac_mask = (1u << mant_bits) - 1u;
    uint32_t frac = mag & frac_mask;
    int exp = (int)(mag >> mant_bits);
    if (exp == 0) {
        if (frac == 0) return 0;
        exp = 1; /* subnormal: move the leading one into the implicit position */
        while (!(frac & (1u << mant_bits))) {
            frac <<= 1;
            exp--;
        }
        frac &= frac_mask;
    }
    return ((uint32_t)(exp - bias + 127) << 23) | (frac << (23 - mant_bits));
}

/* ---- bf16 ---------------------------------------------------------------------------- */

/* Exact; NaN payloads and Inf are kept. */
QF_HD float qf_bf16_to_f32(uint16_t h)
{
    return qf_f32_from_bits((uint32_t)h << 16);
}

/* RNE; values that round past the largest finite bf16 become +-Inf (IEEE); Inf stays
 * Inf; NaN -> 0x7FC0 | sign. */
QF_HD uint16_t qf_bf16_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t sign = (b >> 16) & 0x8000u;
    uint32_t a = b & QF_F32_ABS;
    if (a > QF_F32_INF) return (uint16_t)(0x7FC0u | sign);
    return (uint16_t)(sign | qf_fmt_encode_mag(a, 7, 127, 0x7F7Fu, 0x7F80u));
}

/* ---- f16 (IEEE binary16) -------------------------------------------------------------- */

/* Exact, subnormals included; Inf -> Inf; NaN -> quiet NaN keeping sign and payload. */
QF_HD float qf_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t mag = (uint32_t)h & 0x7FFFu;
    if (mag == 0x7C00u) return qf_f32_from_bits(sign | QF_F32_INF);
    if (mag > 0x7C00u) return qf_f32_from_bits(sign | QF_F32_QNAN | ((mag & 0x3FFu) << 13));
    return qf_f32_from_bits(sign | qf_fmt_decode_mag(mag, 10, 15));
}

/* RNE (subnormal results correctly rounded); values that round past 65504 and Inf become
 * +-Inf (IEEE); NaN -> 0x7E00 | sign; zero sign kept. */
QF_HD uint16_t qf_f16_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t sign = (b >> 16) & 0x8000u;
    uint32_t a = b & QF_F32_ABS;
    if (a > QF_F32_INF) return (uint16_t)(0x7E00u | sign);
    return (uint16_t)(sign | qf_fmt_encode_mag(a, 10, 15, 0x7BFFu, 0x7C00u));
}

/* ---- e4m3fn (OCP FP8: bias 7, no Inf, NaN = S.1111.111, max 448) ------------------------ */

/* RNE, satfinite like PTX cvt.rn.satfinite.e4m3x2.f32: anything whose magnitude exceeds
 * 448 (Inf included) -> +-448 (0x7E / 0xFE); NaN of any sign -> 0x7F; zero sign kept, so
 * -0.0 and negative values rounding to zero give 0x80. */
QF_HD uint8_t qf_e4m3fn_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t sign = (b >> 24) & 0x80u;
    uint32_t a = b & QF_F32_ABS;
    if (a > QF_F32_INF) return 0x7F;
    return (uint8_t)(sign | qf_fmt_encode_mag(a, 3, 7, 0x7Eu, 0x7Eu));
}

/* Exact; 0x7F and 0xFF decode to NaN. */
QF_HD float qf_e4m3fn_to_f32(uint8_t c)
{
    uint32_t sign = ((uint32_t)c & 0x80u) << 24;
    uint32_t mag = (uint32_t)c & 0x7Fu;
    if (mag == 0x7Fu) return qf_f32_from_bits(sign | QF_F32_QNAN);
    return qf_f32_from_bits(sign | qf_fmt_decode_mag(mag, 3, 7));
}

/* ---- e4m3fnuz (bias 8, no Inf, no -0, single NaN 0x80, max 240) ------------------------- */

/* RNE, satfinite: magnitudes above 240 and +-Inf -> +-240 (0x7F / 0xFF); NaN -> 0x80;
 * every zero result, -0.0 and negative values rounding to zero included, -> 0x00. */
QF_HD uint8_t qf_e4m3fnuz_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t sign = (b >> 24) & 0x80u;
    uint32_t a = b & QF_F32_ABS;
    uint32_t mag;
    if (a > QF_F32_INF) return 0x80;
    mag = qf_fmt_encode_mag(a, 3, 8, 0x7Fu, 0x7Fu);
    return (uint8_t)(mag ? (sign | mag) : 0u);
}

/* Exact; 0x80 decodes to NaN. */
QF_HD float qf_e4m3fnuz_to_f32(uint8_t c)
{
    if (c == 0x80) return qf_f32_from_bits(QF_F32_QNAN);
    return qf_f32_from_bits((((uint32_t)c & 0x80u) << 24) | qf_fmt_decode_mag((uint32_t)c & 0x7Fu, 3, 8));
}

/* ---- e5m2 (OCP FP8: bias 15, IEEE-like, Inf 0x7C/0xFC, max 57344) ----------------------- */

/* RNE, satfinite: magnitudes above 57344 and +-Inf -> +-57344 (0x7B / 0xFB), so the Inf
 * codes are never produced; NaN of any sign -> 0x7F; zero sign kept. */
QF_HD uint8_t qf_e5m2_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t sign = (b >> 24) & 0x80u;
    uint32_t a = b & QF_F32_ABS;
    if (a > QF_F32_INF) return 0x7F;
    return (uint8_t)(sign | qf_fmt_encode_mag(a, 2, 15, 0x7Bu, 0x7Bu));
}

/* Exact; 0x7C/0xFC -> +-Inf, 0x7D..0x7F and 0xFD..0xFF -> NaN. e5m2 is the high byte of
 * an f16, which decodes it. */
QF_HD float qf_e5m2_to_f32(uint8_t c)
{
    return qf_f16_to_f32((uint16_t)((uint32_t)c << 8));
}

/* ---- ue8m0 (unsigned power-of-two scale 2^(e-127); 0xFF is NaN) ------------------------- */

/* The smallest e with 2^(e-127) >= x (scales round up to a power of two). +-0 and
 * 0 < x <= 2^-127 (f32 subnormals) -> 0x00; x > 2^127 and +Inf -> 0xFE (saturates at
 * 2^127); NaN and negative x (tiny negatives and -Inf included) -> 0xFF. */
QF_HD uint8_t qf_ue8m0_from_f32_ceil(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t a = b & QF_F32_ABS;
    uint32_t e;
    if (a > QF_F32_INF) return 0xFF;
    if (a == 0) return 0x00;
    if (b & QF_F32_SIGN) return 0xFF;
    if (a <= 0x00400000u) return 0x00; /* x <= 2^-127 */
    e = (b >> 23) + ((b & 0x7FFFFFu) != 0u);
    return (uint8_t)(e > 254u ? 254u : e);
}

/* 2^(c-127), exact: 0x00 -> 2^-127 (an f32 subnormal); 0xFF -> NaN. */
QF_HD float qf_ue8m0_to_f32(uint8_t c)
{
    if (c == 0xFF) return qf_f32_from_bits(QF_F32_QNAN);
    if (c == 0x00) return qf_f32_from_bits(0x00400000u);
    return qf_f32_from_bits((uint32_t)c << 23);
}

/* Smallest power of two >= x for positive finite x (normal or subnormal), exactly;
 * x > 2^127 and +Inf -> +Inf; +-0 -> +0; NaN -> NaN (the input); negative x -> NaN. */
QF_HD float qf_pow2_ceil_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t e = b >> 23, m = b & 0x7FFFFFu, p = 1;
    if ((b & QF_F32_ABS) > QF_F32_INF) return x;
    if ((b & QF_F32_ABS) == 0) return 0.0f;
    if (b & QF_F32_SIGN) return qf_f32_from_bits(QF_F32_QNAN);
    if (m == 0) return x; /* a power of two, or +Inf */
    if (e == 0) {         /* subnormal: the power-of-two bit pattern >= m */
        while (p < m) p <<= 1;
        return qf_f32_from_bits(p);
    }
    return qf_f32_from_bits((e + 1u) << 23); /* e + 1 == 255 gives +Inf */
}

/* ---- e2m1 (FP4: bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6; code = s<<3 | e<<1 | m) ------- */

/* RNE (ties to the even mantissa bit: 0.25 -> 0, 2.5 -> 2, 5 -> 4), saturates magnitudes
 * above 6 and +-Inf to +-6; zero sign kept (-0.0 -> 0x8). e2m1 cannot carry NaN: NaN
 * -> 0x7 (+6), so callers must check their inputs. */
QF_HD uint8_t qf_e2m1_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t sign = (b >> 28) & 0x8u;
    uint32_t a = b & QF_F32_ABS;
    if (a > QF_F32_INF) return 0x7;
    return (uint8_t)(sign | qf_fmt_encode_mag(a, 1, 1, 0x7u, 0x7u));
}

/* Exact; only the low nibble of code4 is read. */
QF_HD float qf_e2m1_to_f32(uint8_t code4)
{
    uint32_t sign = ((uint32_t)code4 & 0x8u) << 28;
    return qf_f32_from_bits(sign | qf_fmt_decode_mag((uint32_t)code4 & 0x7u, 1, 1));
}

/* Two e2m1 codes in one byte: element 2i in the low nibble, element 2i+1 in the high. */
QF_HD uint8_t qf_e2m1x2_pack(uint8_t lo, uint8_t hi)
{
    return (uint8_t)(((uint32_t)lo & 0xFu) | (((uint32_t)hi & 0xFu) << 4));
}

/* Element 2i of a packed byte. */
QF_HD uint8_t qf_e2m1x2_lo(uint8_t packed)
{
    return (uint8_t)(packed & 0xFu);
}

/* Element 2i+1 of a packed byte. */
QF_HD uint8_t qf_e2m1x2_hi(uint8_t packed)
{
    return (uint8_t)(packed >> 4);
}

/* ---- int8 ------------------------------------------------------------------------------ */

/* Round to nearest, ties to even, independent of the rounding mode; saturates to
 * [-128, 127] (127.5 -> 127, -128.5 -> -128, +-Inf -> 127 / -128); NaN -> 0. */
QF_HD int8_t qf_int8_from_f32(float x)
{
    uint32_t b = qf_f32_bits(x);
    uint32_t a = b & QF_F32_ABS;
    uint32_t mag;
    int v;
    if (a > QF_F32_INF) return 0;
    if (a >= 0x43800000u) { /* |x| >= 256, Inf included: saturates either way */
        mag = 256;
    } else {
        int exp = (int)(a >> 23);
        uint32_t sig = a & 0x7FFFFFu;
        if (exp == 0)
            exp = 1;
        else
            sig |= 0x800000u;
        mag = qf_fmt_rne_shr(sig, 150 - exp); /* |x| = sig * 2^(exp - 150) */
    }
    v = (b & QF_F32_SIGN) ? -(int)mag : (int)mag;
    if (v > 127) v = 127;
    if (v < -128) v = -128;
    return (int8_t)v;
}

#endif /* QF_FORMATS_FORMATS_H */
