// The E8P lattice decoder of VQ-GeMV and VQ-GeMM (qfuse.h, QF_VQ_LATTICE_E8P): an entry of a book
// that is the lattice times a scale, computed from its index instead of read from the 1 MiB book.
//
// NOTES:
// - A 4 KB table holds the 256 patterns of absolute values as fp16 (16 bytes a pattern, one
//   vector's load), built at compile time from qf_e8p_patterns (formats/vq.h), as the CPU table
//   is; value 0's sign bit holds whether the pattern's sum is odd, so that the parity rule is one
//   XOR. The
//   GeMV reads it through L1; the GeMM (x tiles of 32 rows) stages 8 copies of it in shared
//   memory (32 KB), pattern p of copy c at 16-byte slot 8 p + c, so that a quarter warp's 8 lanes
//   (one 128-byte wavefront of 16-byte loads) each read their own copy, c = lane % 8, and never
//   meet in a bank. Staged, the GeMM ran 9-15% faster at M = 64; the GeMV ran 3-16% slower at
//   M = 1 and between 13% faster and 9% slower at M = 16 (H200, A/B run twice, docs/VQ.md).
// - Index bits 7-1 flip the signs of values 1-7, value 0 flips when they hold an odd number of
//   minus signs (XOR the pattern's parity bit); bit 0 picks the shift +1/4 or -1/4. The value is
//   then scale * (+-a) + scale * shift in one fp16 fma: a has at most 3 significant bits and the
//   scale at most 7, so the product, the shift (scale / 4, the book's entry 0) and their sum are
//   exact in fp16, and the decoded bits equal the stored entry's.
#pragma once

#include <cstdint>
#include <cuda_fp16.h>

#include "formats/vq.h"

struct vq_e8p_table {
  uint32_t w[256][4];  // pattern p: values 2i (low half) and 2i + 1 (high half) of word i, fp16
};

constexpr uint32_t vq_e8p_half(int twice) {  // fp16 bits of twice / 2 for twice in {1, 3, 5}
  return twice == 1 ? 0x3800u : twice == 3 ? 0x3E00u : 0x4100u;
}

constexpr vq_e8p_table vq_e8p_build() {
  uint8_t twice[256][8] = {}, odd[256] = {};
  qf_e8p_patterns(twice, odd);
  vq_e8p_table t{};
  for (int p = 0; p < 256; p++) {
    for (int i = 0; i < 4; i++) t.w[p][i] = vq_e8p_half(twice[p][2 * i]) | vq_e8p_half(twice[p][2 * i + 1]) << 16;
    t.w[p][0] |= static_cast<uint32_t>(odd[p]) << 15;  // value 0's sign bit: the parity
  }
  return t;
}

__device__ const vq_e8p_table kVqE8p = vq_e8p_build();

// The table in global memory, as 256 patterns of 16 bytes.
__device__ __forceinline__ const uint4 *vq_e8p_global() { return reinterpret_cast<const uint4 *>(kVqE8p.w); }

// The 8 interleaved copies of the table into shared memory (QF_VQ_E8P_TABLE_BYTES), by the
// block's threads; the caller synchronizes.
__device__ __forceinline__ void vq_e8p_stage(uint4 *patterns) {
  for (int i = static_cast<int>(threadIdx.x); i < 256 * 8; i += static_cast<int>(blockDim.x))
    patterns[i] = __ldg(reinterpret_cast<const uint4 *>(kVqE8p.w[i / 8]));
}

// Entry idx of a book whose entry 0 has `quarter` (fp16 bits: the book's scale / 4) in every
// value, as 4 words of fp16 pairs. `patterns`: kShared, the staged table plus this lane's copy
// (lane % 8); else vq_e8p_global().
template <bool kShared>
__device__ __forceinline__ uint4 vq_e8p_decode(const uint4 *patterns, uint32_t idx, uint32_t quarter) {
  uint4 e = kShared ? patterns[(idx >> 8) * 8] : __ldg(patterns + (idx >> 8));
  const uint32_t f = idx >> 1 & 127u;
  e.x ^= (__popc(f) & 1u) << 15 | (f >> 6 & 1u) << 31;
  e.y ^= (f >> 5 & 1u) << 15 | (f >> 4 & 1u) << 31;
  e.z ^= (f >> 3 & 1u) << 15 | (f >> 2 & 1u) << 31;
  e.w ^= (f >> 1 & 1u) << 15 | (f & 1u) << 31;
  const __half q = __ushort_as_half(static_cast<unsigned short>(quarter));
  const __half2 scale = __half2half2(__hmul(q, __float2half(4.0f)));
  const __half2 shift = __half2half2(idx & 1u ? q : __hneg(q));
  auto fma = [&](uint32_t w) {
    const __half2 v = __hfma2(*reinterpret_cast<const __half2 *>(&w), scale, shift);
    return *reinterpret_cast<const uint32_t *>(&v);
  };
  return make_uint4(fma(e.x), fma(e.y), fma(e.z), fma(e.w));
}
