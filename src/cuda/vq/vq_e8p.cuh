// The E8P lattice decoder of VQ-GeMV and VQ-GeMM (qfuse.h, QF_VQ_LATTICE_E8P): an entry of a book
// that is the lattice times a scale, computed from its index instead of read from the 1 MiB book.
//
// NOTES:
// - A 4 KB table holds the 256 patterns of absolute values as fp16 (16 bytes a pattern, one
//   vector's load), built at compile time from qf_e8p_patterns (formats/vq.h), as the CPU table
//   is; value 0's sign bit holds the pattern's parity (below). The general kernel (vq_gemm.cuh)
//   reads it through L1 at x tiles of 8 and 16 rows; at x tiles of 32 rows, and the E8P GeMV
//   (vq_gemv_e8p.cu) and the tiled GeMM (vq_gemm_tiled.cu), stage 8 copies of it in shared
//   memory (32 KB), pattern p of copy c at 16-byte slot 8 p + c, so that a quarter warp's 8 lanes
//   (one 128-byte wavefront of 16-byte loads) each read their own copy, c = lane % 8, and never
//   meet in a bank. Staged, the general kernel's GeMM ran 9-15% faster at M = 64, its GeMV 3-16%
//   slower at M = 1 and between 13% faster and 9% slower at M = 16 (H200, docs/VQ.md).
// - Index bits 7-1 flip the signs of values 1-7 (bit 8 - j for value j), value 0 flips when they
//   hold an odd number of minus signs; bit 0 picks the shift +1/4 or -1/4. The signs take two
//   integer ops per word: idx * (2^(7 + 2i) + 2^(24 + 2i)) carries bit 8 - 2i to bit 15 and bit
//   7 - 2i to bit 31 of word i (the two shifted copies of a 16-bit index never overlap, so no
//   carry reaches either bit), masked and XORed into the pattern. In word 0 that puts index bit
//   8, the pattern's lowest bit, on value 0's sign, so the table stores value 0's sign bit as the
//   pattern's parity (its sum odd) XOR its lowest bit; the count of minus signs is added at bit
//   15 (an add there flips bit 15 and carries at most into bit 23, which is clear).
// - The value is then scale * (+-a) + scale * shift in one fp16 fma: a has at most 3
//   significant bits and the scale at most 7, so the product, the shift (scale / 4, the book's
//   entry 0) and their sum are exact in fp16, and the decoded bits equal the stored entry's.
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
    t.w[p][0] |= static_cast<uint32_t>(odd[p] ^ (p & 1)) << 15;  // value 0's sign bit: parity ^ lowest bit
  }
  return t;
}

__device__ const vq_e8p_table kVqE8p = vq_e8p_build();

// The table in global memory, as 256 patterns of 16 bytes.
__device__ __forceinline__ const uint4 *vq_e8p_global() { return reinterpret_cast<const uint4 *>(kVqE8p.w); }

// The 8 interleaved copies of the table into shared memory (QF_VQ_E8P_TABLE_BYTES), by the
// block's kThreads threads, every load issued before the first store; the caller synchronizes.
template <int kThreads>
__device__ __forceinline__ void vq_e8p_stage(uint4 *patterns) {
  constexpr int kPerThread = 256 * 8 / kThreads;
  static_assert(256 * 8 % kThreads == 0, "whole slots per thread");
  uint4 v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; k++)
    v[k] = __ldg(reinterpret_cast<const uint4 *>(kVqE8p.w[(static_cast<int>(threadIdx.x) + k * kThreads) / 8]));
#pragma unroll
  for (int k = 0; k < kPerThread; k++) patterns[threadIdx.x + k * kThreads] = v[k];
}

// The signs of entry idx (16 bits) applied to its pattern e (the table's 16 bytes).
__device__ __forceinline__ uint4 vq_e8p_signed(uint4 e, uint32_t idx) {
  constexpr uint32_t kSigns = 0x80008000u;  // the sign bits of a word's two fp16 values
  e.x ^= (idx * 0x01000080u + (__popc(idx & 0xFEu) << 15)) & kSigns;
  e.y ^= idx * 0x04000200u & kSigns;
  e.z ^= idx * 0x10000800u & kSigns;
  e.w ^= idx * 0x40002000u & kSigns;
  return e;
}

// fp16 values of one E8P book (2^16 entries of 8): book b's entry 0 starts at books + b * this.
constexpr int64_t kVqE8pBookValues = 65536 * 8;

// A book's scale as the decoder uses it, from `quarter` (fp16 bits of entry 0's values: the
// scale / 4): the scale and -scale / 4, each in both halves.
struct vq_e8p_scale {
  __half2 scale;
  uint32_t neg_quarter;
};
__device__ __forceinline__ vq_e8p_scale vq_e8p_scale_of(uint32_t quarter) {
  const __half q = __ushort_as_half(static_cast<unsigned short>(quarter));
  return {__half2half2(__hmul(q, __float2half(4.0f))), (quarter | quarter << 16) ^ 0x80008000u};
}

// Entry idx of a book of scale s from its pattern e: scale * (+-a) +- scale / 4 per value.
__device__ __forceinline__ uint4 vq_e8p_entry(uint4 e, uint32_t idx, const vq_e8p_scale &s) {
  e = vq_e8p_signed(e, idx);
  const __half2 scale = s.scale;
  const uint32_t shift_bits = s.neg_quarter ^ (idx * 0x80008000u & 0x80008000u);  // bit 0 set: +scale / 4
  const __half2 shift = *reinterpret_cast<const __half2 *>(&shift_bits);
  auto fma = [&](uint32_t w) {
    const __half2 v = __hfma2(*reinterpret_cast<const __half2 *>(&w), scale, shift);
    return *reinterpret_cast<const uint32_t *>(&v);
  };
  return make_uint4(fma(e.x), fma(e.y), fma(e.z), fma(e.w));
}

// Entry idx of a book whose entry 0 has `quarter` (fp16 bits: the book's scale / 4) in every
// value, as 4 words of fp16 pairs. `patterns`: kShared, the staged table plus this lane's copy
// (lane % 8); else vq_e8p_global().
template <bool kShared>
__device__ __forceinline__ uint4 vq_e8p_decode(const uint4 *patterns, uint32_t idx, uint32_t quarter) {
  const uint4 e = kShared ? patterns[(idx >> 8) * 8] : __ldg(patterns + (idx >> 8));
  return vq_e8p_entry(e, idx, vq_e8p_scale_of(quarter));
}
