// Device pieces shared by the VQ kernels: codebook entries widened to fp32, indices read from the
// packed code rows in 32-bit words, outputs rounded to their dtype.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/ptx/sync.cuh"
#include "qfuse.h"

// Entry dtypes, as tags: entries travel as raw 16-bit words and are widened on use.
struct vq_f16 {};
struct vq_bf16 {};

__device__ __forceinline__ float vq_widen_lo(vq_f16, uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w))); }
__device__ __forceinline__ float vq_widen_hi(vq_f16, uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))); }
__device__ __forceinline__ float vq_widen_lo(vq_bf16, uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float vq_widen_hi(vq_bf16, uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// N consecutive entry elements at p (aligned to 2 * N bytes for N = 2, 4, 8) widened to fp32, in
// one load. kGlobal: through the read-only path.
template <int N, bool kGlobal, typename E>
__device__ __forceinline__ void vq_load_entry(E tag, const uint16_t *p, float (&v)[N]) {
  if constexpr (N == 8) {
    const uint4 r = kGlobal ? __ldg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
    v[0] = vq_widen_lo(tag, r.x), v[1] = vq_widen_hi(tag, r.x), v[2] = vq_widen_lo(tag, r.y), v[3] = vq_widen_hi(tag, r.y);
    v[4] = vq_widen_lo(tag, r.z), v[5] = vq_widen_hi(tag, r.z), v[6] = vq_widen_lo(tag, r.w), v[7] = vq_widen_hi(tag, r.w);
  } else if constexpr (N == 4) {
    const uint2 r = kGlobal ? __ldg(reinterpret_cast<const uint2 *>(p)) : *reinterpret_cast<const uint2 *>(p);
    v[0] = vq_widen_lo(tag, r.x), v[1] = vq_widen_hi(tag, r.x), v[2] = vq_widen_lo(tag, r.y), v[3] = vq_widen_hi(tag, r.y);
  } else if constexpr (N == 2) {
    const uint32_t r = kGlobal ? __ldg(reinterpret_cast<const unsigned int *>(p)) : *reinterpret_cast<const uint32_t *>(p);
    v[0] = vq_widen_lo(tag, r), v[1] = vq_widen_hi(tag, r);
  } else {
#pragma unroll
    for (int i = 0; i < N; i++) v[i] = vq_widen_lo(tag, kGlobal ? __ldg(reinterpret_cast<const unsigned short *>(p + i)) : p[i]);
  }
}

// The 32 bits of a code row that start at bit `bit`; bits past the row's `words` words read as 0
// (an index never needs them: its bits lie inside the row). Rows are 4-byte aligned.
__device__ __forceinline__ uint32_t vq_code_window(const uint32_t *row, uint32_t bit, uint32_t words) {
  const uint32_t q = bit >> 5, sh = bit & 31u;
  const uint32_t lo = __ldg(row + q);
  const uint32_t hi = sh != 0u && q + 1u < words ? __ldg(row + q + 1u) : 0u;
  return __funnelshift_r(lo, hi, sh);
}

// Index j of a row of `bits`-bit indices: equal to qf_vq_get_index (formats/vq.h), word-based.
__device__ __forceinline__ uint32_t vq_index(const uint32_t *row, uint32_t j, int bits, uint32_t words) {
  return vq_code_window(row, j * static_cast<uint32_t>(bits), words) & ((1u << bits) - 1u);
}

// Host: the shift that stands for the division in a book index along K (`unit >> shift` for
// `unit / per_book`, the kernels divide when it is -1): 31 when one book spans K (every unit index
// is below 2^31), log2(per_book) for a power of two, else -1.
inline int vq_book_shift(int64_t per_book, bool one_book) {
  if (one_book) return 31;
  for (int sh = 0; sh < 31; sh++)
    if ((INT64_C(1) << sh) == per_book) return sh;
  return -1;
}

// Host: the weight's fields that the parameters of every VQ kernel over a quantized matrix share
// (codes, books, scales, n_books), from its qf_vq_tensors.
template <class Params, class Tensors>
void vq_weight_params(Params &p, const Tensors *w) {
  p.codes = reinterpret_cast<const uint32_t *>(w->codes);
  p.books = static_cast<const uint16_t *>(w->books);
  p.scales = w->scales;
  p.n_books = w->sz.n_books;
}

// Register arrays of fp32 accumulators set to zero.
template <int A, int B>
__device__ __forceinline__ void vq_zero(float (&v)[A][B]) {
#pragma unroll
  for (int a = 0; a < A; a++)
#pragma unroll
    for (int b = 0; b < B; b++) v[a][b] = 0.0f;
}
template <int A, int B, int C>
__device__ __forceinline__ void vq_zero(float (&v)[A][B][C]) {
#pragma unroll
  for (int a = 0; a < A; a++) vq_zero(v[a]);
}

__device__ __forceinline__ void vq_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void vq_store(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void vq_store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ float vq_to_f32(float v) { return v; }
__device__ __forceinline__ float vq_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float vq_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// Element i of an array of qf_dtype `dtype` (fp32, fp16 or bf16: x, q) as fp32.
__device__ __forceinline__ float vq_load_as_f32(const void *a, int dtype, int64_t i) {
  switch (dtype) {
    case QF_BF16: return vq_to_f32(static_cast<const __nv_bfloat16 *>(a)[i]);
    case QF_F16: return vq_to_f32(static_cast<const __half *>(a)[i]);
    default: return static_cast<const float *>(a)[i];
  }
}

// The same in two steps, so that a load can be asked for well before its value is used: the
// element's bits (a 16-bit one zero-extended), then those bits as fp32 (vq_load_as_f32's value).
__device__ __forceinline__ uint32_t vq_load_bits(const void *a, int dtype, int64_t i) {
  return dtype == QF_BF16 || dtype == QF_F16 ? static_cast<const uint16_t *>(a)[i] : static_cast<const uint32_t *>(a)[i];
}
__device__ __forceinline__ float vq_bits_as_f32(uint32_t bits, int dtype) {
  switch (dtype) {
    case QF_BF16: return __uint_as_float(bits << 16);
    case QF_F16: return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    default: return __uint_as_float(bits);
  }
}

// v rounded into element i of an array of qf_dtype `dtype` (fp32, fp16 or bf16: y).
__device__ __forceinline__ void vq_store_as(void *a, int dtype, int64_t i, float v) {
  switch (dtype) {
    case QF_BF16: vq_store(static_cast<__nv_bfloat16 *>(a) + i, v); break;
    case QF_F16: vq_store(static_cast<__half *>(a) + i, v); break;
    default: vq_store(static_cast<float *>(a) + i, v); break;
  }
}

// Split-K's sum in the tile's last unit: the splits' partials of one value, partial o at
// part[o * stride], added in split order. They are loaded kBatch at a time and unconditionally
// (a batch's loads past the last split load that one again), so that the compiler issues a
// batch's loads before its adds: one L2 round trip per batch. (Loaded one after another, or
// behind `o < splits`, the adds went between the loads: a round trip each, or each few.)
template <int kBatch>
__device__ __forceinline__ float vq_split_sum(const float *part, int64_t stride, int splits) {
  float sum = 0.0f;
  for (int o0 = 0; o0 < splits; o0 += kBatch) {
    float v[kBatch];
#pragma unroll
    for (int o = 0; o < kBatch; o++) v[o] = __ldcg(part + min(o0 + o, splits - 1) * stride);
#pragma unroll
    for (int o = 0; o < kBatch; o++)
      if (o0 + o < splits) sum = o0 + o == 0 ? v[o] : __fadd_rn(sum, v[o]);
  }
  return sum;
}

// Split-K's hand-off, once every thread of the block has stored its unit's partial: counts the
// unit done on its tile's counter; true in every thread of the unit that counted last, to which
// the other units' partials are then visible. A block may call it once per unit, units in turn.
__device__ __forceinline__ bool vq_split_counted_last(int *counter, int splits) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) last = atom_add_acq_rel_gpu(counter, 1) == splits - 1;
  __syncthreads();
  return last != 0;
}
