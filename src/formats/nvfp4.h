/* NVFP4 weights: the block quantizer's two roundings and the packed word layout of
 * qf_gemm_nvfp4. Header-only, shared by the CPU reference and the CUDA kernels.
 *
 * Packed layout. A row's codes come in 32-bit words of 8 (little-endian: code i of the word in
 * the low nibble of byte i / 2 when i is even, the high nibble when odd). qf_nvfp4_pack moves the
 * bits of each word so that pair p (codes 2p and 2p + 1) sits at the same place in both 16-bit
 * halves, code 2p in the low half and 2p + 1 in the high half, at
 *     pair 0: sign bit 15, magnitude bits 11..9      pair 1: sign 12, magnitude 5..3
 *     pair 2: sign 13, magnitude 2..0                pair 3: sign 14, magnitude 8..6
 * (magnitude = the code's three low bits e1 e0 m, in that order from high to low). Pair 0 is
 * then an fp16 pair as it stands once masked: e1 e0 land in the exponent's two low bits and m in
 * the mantissa's top bit, which makes each half code * 2^-14, subnormal codes included; the other
 * pairs take one or two shifts (qf_nvfp4_f16x2, qf_nvfp4_bf16x2 below). Of the ways to
 * place four codes in 16 bits, this one needs the fewest bit operations for fp16 and bf16 targets
 * together (13 and 12 per word). */
#ifndef QF_FORMATS_NVFP4_H
#define QF_FORMATS_NVFP4_H

#include "formats/formats.h"

/* Where pair p's sign bit and lowest magnitude bit sit in a half of a packed word. */
#define QF_NVFP4_SIGN_BITS 0xEDCFu /* 4 bits per pair, pair p at bits 4p..4p+3: 15, 12, 13, 14 */
#define QF_NVFP4_MAG_BITS 0x6039u  /* 9, 3, 0, 6 */

QF_HD uint32_t qf_nvfp4_sign_pos(int p) { return (QF_NVFP4_SIGN_BITS >> (4 * p)) & 0xFu; }
QF_HD uint32_t qf_nvfp4_mag_pos(int p) { return (QF_NVFP4_MAG_BITS >> (4 * p)) & 0xFu; }

/* A word of 8 codes as stored into the packed layout. */
QF_HD uint32_t qf_nvfp4_pack_word(uint32_t w)
{
    uint32_t out = 0;
    for (int i = 0; i < 8; i++) {
        const uint32_t code = (w >> (4 * i)) & 0xFu;
        const int p = i / 2, half = 16 * (i % 2);
        out |= ((code >> 3) & 1u) << (half + qf_nvfp4_sign_pos(p));
        out |= (code & 7u) << (half + qf_nvfp4_mag_pos(p));
    }
    return out;
}

/* The inverse: a packed word back into 8 codes as stored. */
QF_HD uint32_t qf_nvfp4_unpack_word(uint32_t w)
{
    uint32_t out = 0;
    for (int i = 0; i < 8; i++) {
        const int p = i / 2, half = 16 * (i % 2);
        const uint32_t sign = (w >> (half + qf_nvfp4_sign_pos(p))) & 1u;
        const uint32_t mag = (w >> (half + qf_nvfp4_mag_pos(p))) & 7u;
        out |= (sign << 3 | mag) << (4 * i);
    }
    return out;
}

/* Pair p (0..3) of a packed word as two fp16 values (low half: code 2p) equal to code * 2^-14,
 * subnormals included: e1 e0 go to the exponent's two low bits, m to the mantissa's top bit. */
QF_HD uint32_t qf_nvfp4_f16x2(uint32_t q, int p)
{
    switch (p) {
    case 0: return q & 0x8E008E00u;
    case 1: return ((q << 6) & 0x0E000E00u) | ((q << 3) & 0x80008000u);
    case 2: return ((q << 9) & 0x0E000E00u) | ((q << 2) & 0x80008000u);
    default: return ((q << 3) & 0x0E000E00u) | ((q << 1) & 0x80008000u);
    }
}

/* ... as two bf16 values equal to code * 2^-126 (0.5 is a bf16 subnormal there). */
QF_HD uint32_t qf_nvfp4_bf16x2(uint32_t q, int p)
{
    switch (p) {
    case 0: return ((q >> 3) & 0x01C001C0u) | (q & 0x80008000u);
    case 1: return (q << 3) & 0x81C081C0u;
    case 2: return ((q << 6) & 0x01C001C0u) | ((q << 2) & 0x80008000u);
    default: return (q & 0x01C001C0u) | ((q << 1) & 0x80008000u);
    }
}

/* Pair p of a packed word for a decoder that takes p at run time (the prefill kernel's lanes each
 * decode one pair of every word): the same bits as qf_nvfp4_f16x2 / qf_nvfp4_bf16x2, by two
 * rotations of the word (the bits a rotation brings around are masked off) whose counts
 * qf_nvfp4_pair_rot gives, magnitude in bits 0..7 and sign in 8..15: fp16 magnitude 0, 6, 9, 3;
 * bf16 magnitude 29 (>> 3), 3, 6, 0; sign 0, 3, 2, 1 for both. */
QF_HD uint32_t qf_nvfp4_pair_rot(int p, int bf16)
{
    const uint32_t mag = bf16 ? 0x0006031Du : 0x03090600u;
    return (mag >> (8 * p) & 0xFFu) | (0x01020300u >> (8 * p) & 0xFFu) << 8;
}

QF_HD uint32_t qf_nvfp4_rotl(uint32_t q, uint32_t n)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_l(q, q, n);
#else
    n &= 31u;
    return n ? q << n | q >> (32u - n) : q;
#endif
}

QF_HD uint32_t qf_nvfp4_pair(uint32_t q, uint32_t rot, int bf16)
{
    const uint32_t mag = qf_nvfp4_rotl(q, rot & 0xFFu), sign = qf_nvfp4_rotl(q, rot >> 8);
    return (mag & (bf16 ? 0x01C001C0u : 0x0E000E00u)) | (sign & 0x80008000u);
}

/* The block scale for a block whose largest magnitude is amax: e4m3fn(amax / (6 * ts)). */
QF_HD uint8_t qf_nvfp4_block_scale(float amax, float ts)
{
    return qf_e4m3fn_from_f32(amax / (QF_E2M1_MAX * ts));
}

/* The code of x in a block whose scale decodes to s: e2m1(x / (s * ts)), 0 when s is 0. */
QF_HD uint8_t qf_nvfp4_code(float x, float s, float ts)
{
    const float den = s * ts;
    return den == 0.0f ? 0 : qf_e2m1_from_f32(x / den);
}

#endif
