/* VQ code streams and codebook addressing (qfuse.h, "Vector quantization"), shared by the CPU
 * reference and the kernels. */
#ifndef QF_FORMATS_VQ_H
#define QF_FORMATS_VQ_H

#include "formats/formats.h"

/* (constexpr in C++, so that the CUDA decoder builds its table at compile time) */
#ifdef __cplusplus
#define QF_CONSTEXPR constexpr
#else
#define QF_CONSTEXPR
#endif

/* The E8P lattice book's 256 patterns of absolute values (qfuse.h, QF_VQ_LATTICE_E8P), the one
 * definition behind the CPU table (src/cpu/vq_e8p.c) and the CUDA decoder's (vq_e8p.cuh):
 * twice[p][j] is twice value j of pattern p (1, 3 or 5), odd[p] whether the pattern's sum is odd.
 * First the 227 vectors of {1/2, 3/2, 5/2}^8 with squared norm <= 10 in lexicographic order, then
 * 29 of squared norm 12 (five 3/2 and three 1/2; the positions of the 1/2 below, in E8P's order,
 * the 22nd and the 28th the same pattern). */
static QF_CONSTEXPR inline void qf_e8p_patterns(uint8_t twice[256][8], uint8_t odd[256]) {
  const uint8_t halves[29] = {0x0E, 0x0D, 0x0B, 0x07, 0xC8, 0xA8, 0x98, 0x68, 0x58, 0x38,
                              0xC4, 0xA4, 0x94, 0x64, 0x54, 0x34, 0xC2, 0xA2, 0x92, 0x62,
                              0x52, 0x31, 0xC1, 0xA1, 0x91, 0x61, 0x51, 0x31, 0x8C};
  int p = 0;
  for (int code = 0; code < 6561; code++) { /* 3^8 digit strings, value = digit + 1/2, first digit most significant */
    int d[8] = {0}, c = code, norm4 = 0, sum = 0;
    for (int j = 7; j >= 0; j--) d[j] = c % 3, c /= 3;
    for (int j = 0; j < 8; j++) norm4 += (2 * d[j] + 1) * (2 * d[j] + 1), sum += d[j];
    if (norm4 > 40) continue; /* squared norm > 10 */
    for (int j = 0; j < 8; j++) twice[p][j] = (uint8_t)(2 * d[j] + 1);
    odd[p++] = (uint8_t)((sum + 4) & 1); /* sum of the values: sum of digits + 8 / 2 */
  }
  for (int i = 0; i < 29; i++, p++) {
    for (int j = 0; j < 8; j++) twice[p][j] = (halves[i] >> j) & 1 ? 1 : 3;
    odd[p] = 1; /* 5 * 3/2 + 3 * 1/2 = 9 */
  }
}

/* Index j of a row's little-endian bit stream of `bits`-bit indices (bits <= 16). */
QF_HD uint32_t qf_vq_get_index(const uint8_t *row, int64_t j, int bits) {
  int64_t bit = j * bits;
  const uint8_t *p = row + (bit >> 3);
  uint32_t w = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16); /* 24 bits cover 16 + 7 */
  return (w >> (bit & 7)) & ((1u << bits) - 1u);
}

QF_HD void qf_vq_set_index(uint8_t *row, int64_t j, int bits, uint32_t index) {
  for (int b = 0; b < bits; b++) {
    int64_t bit = j * bits + b;
    uint8_t mask = (uint8_t)(1u << (bit & 7));
    if ((index >> b) & 1u) row[bit >> 3] |= mask;
    else row[bit >> 3] &= (uint8_t)~mask;
  }
}

/* Bytes per row of codes for `vectors` indices: the packed indices plus the 2 bytes that the
 * 24-bit read of the last index may touch, rounded up to 16 so that every row starts 16-byte
 * aligned (the banked VQ-GeMV loads a lane's indices 16 bytes at a time). */
QF_HD int64_t qf_vq_row_bytes(int64_t vectors, int bits) {
  int64_t bytes = (vectors * bits + 7) / 8 + 2;
  return (bytes + 15) / 16 * 16;
}

/* The table VQ-GeMV's packed layout of codes (qf_vq_pack_gemv): for each residual r, tile of
 * QF_VQ_PACK_ROWS rows and chunk c of 8 vectors, the tile's rows' bytes [c * bits, (c + 1) * bits)
 * of their code rows (a chunk's 8 indices: `bits` bytes), each padded with zeros to
 * qf_vq_pack_chunk_bytes, rows back to back; rows past N and bytes past a code row are zeros.
 * Shape [R, ceil(N / QF_VQ_PACK_ROWS), chunks, QF_VQ_PACK_ROWS * chunk bytes]. */
#define QF_VQ_PACK_ROWS 512
QF_HD int64_t qf_vq_pack_chunk_bytes(int bits) { return (bits + 3) / 4 * 4; }
QF_HD int64_t qf_vq_pack_chunks(int64_t vectors) { return (vectors + 7) / 8; }
QF_HD int64_t qf_vq_pack_tiles(int64_t N) { return (N + QF_VQ_PACK_ROWS - 1) / QF_VQ_PACK_ROWS; }
/* How many of chunk c's `bits` bytes (from byte c * bits) lie in a code row of row_bytes bytes:
 * the packed chunk's leading bytes; the rest of it is zeros. */
QF_HD int64_t qf_vq_pack_span(int64_t row_bytes, int64_t c, int bits) {
  const int64_t left = row_bytes - c * bits;
  return left < 0 ? 0 : left < bits ? left : bits;
}
/* Packed byte b of chunk c of a code row of row_bytes bytes. */
QF_HD uint8_t qf_vq_pack_byte(const uint8_t *row, int64_t row_bytes, int64_t c, int64_t b, int bits) {
  return b < qf_vq_pack_span(row_bytes, c, bits) ? row[c * bits + b] : 0;
}
/* Offset of row n's chunk c of residual r in the packed codes of `tiles` tiles and `chunks` chunks. */
QF_HD int64_t qf_vq_pack_offset(int64_t r, int64_t n, int64_t c, int64_t tiles, int64_t chunks, int bits) {
  const int64_t cb = qf_vq_pack_chunk_bytes(bits);
  return ((r * tiles + n / QF_VQ_PACK_ROWS) * chunks + c) * QF_VQ_PACK_ROWS * cb + (n % QF_VQ_PACK_ROWS) * cb;
}

/* The banked VQ attention's packed V codebooks (qf_vq_pack_attention_books): per kv head g, the
 * 2^8 entries of its S = D / vector_size vectors as the kernel lays them out in shared memory,
 * [Hkv][256][S][vector_size]; column c holds vector qf_vq_attn_packed_vector(S, c) of the head (S
 * = 64: vectors 2c and 2c + 1 side by side in columns c and 32 + c, so that a lane's two adjacent
 * indices address columns lane and 32 + lane; S = 32: vector c). */
QF_HD int qf_vq_attn_packed_vector(int S, int c) { return S == 64 ? 2 * (c & 31) + (c >> 5) : c; }
/* Element offset, in the standard codebooks [1, n_books, 256, vs] of a row of Hkv heads (a book per
 * `cols` columns), of packed entry i = (g 256 + e) S + c: what packing copies to element i vs. */
QF_HD int64_t qf_vq_attn_packed_source(int64_t i, int S, int vs, int64_t cols) {
  const int64_t g = i / (256 * S), e = i / S % 256, J = g * S + qf_vq_attn_packed_vector(S, (int)(i % S));
  return (J * vs / cols * 256 + e) * vs;
}

#endif
