/* VQ code streams and codebook addressing (qfuse.h, "Vector quantization"), shared by the CPU
 * reference and the kernels. */
#ifndef QF_FORMATS_VQ_H
#define QF_FORMATS_VQ_H

#include "formats/formats.h"

/* The E8P lattice book (qfuse.h, QF_VQ_LATTICE_E8P): after its 227 patterns of squared norm <= 10
 * come 29 of squared norm 12, given here as the positions holding 1/2 (the other five hold 3/2),
 * in E8P's order; the 22nd and the 28th are the same pattern. The CPU table (src/cpu/vq_e8p.c)
 * and the CUDA decoder's (src/cuda/vq/vq_e8p.cuh) are built from it. */
#define QF_E8P_NORM12_HALVES                                                                               \
  {0x0E, 0x0D, 0x0B, 0x07, 0xC8, 0xA8, 0x98, 0x68, 0x58, 0x38, 0xC4, 0xA4, 0x94, 0x64, 0x54,             \
   0x34, 0xC2, 0xA2, 0x92, 0x62, 0x52, 0x31, 0xC1, 0xA1, 0x91, 0x61, 0x51, 0x31, 0x8C}

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

#endif
