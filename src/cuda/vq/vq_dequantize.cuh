// VQ dequantization, the reference path of the CUDA side:
//   w[n, j * vs + c] = scale[n] * sum_r entry_r(book(n, j), index_r(n, j))[c]
// with the sum formed in fp32 in residual order from +0, as the CPU's decode_row does, so fp32
// output equals it bit for bit and fp16 / bf16 outputs are that value rounded to nearest even.
//
// NOTES: one thread per vector (n, j): rows along the grid's y (striding past 65535 rows),
// vectors along x, so that no thread splits a flat 64-bit index; entries are read from global
// memory. Compile-time vector sizes (2, 4, 8) load an entry in one access, keep the sums in
// registers and, where w's start and pitch allow (vec_store), store the vector's outputs in one
// access (two for 8 fp32 values); other sizes (kVS = 0) loop over the elements. Against the flat
// grid-stride form (a 64-bit division per vector, a 2-byte store per value): AQLM-3 22016 x 8192
// about 454 -> 207 us, GPTVQ-2 363 -> 315 us (H200; GPTVQ-2's 8-byte entries come from L2, a
// 32-byte sector per lookup).
#pragma once

#include "cuda/pack.cuh"
#include "cuda/vq/vq_common.cuh"

struct vq_dequantize_params {
  const uint32_t *codes;  // [R, N, row_words]
  const uint16_t *books;  // [R, n_books, entries, vs]
  const float *scales;    // [N] or NULL
  void *w;                // [N, K], row pitch w_ld elements
  int64_t w_ld;
  int64_t N, n_books, books_per_row;
  int64_t scope_rows;     // 0: one row scope
  uint32_t row_words, vectors;  // words per code row; vectors per row (K / vs)
  uint32_t vectors_per_book;    // along K: scope_cols / vs, or K / vs for a whole row
  int vs, bits, residuals, entries;
  int vec_store;          // w's start and pitch are aligned to a vector's outputs
};

// The kVS outputs of one vector (already scaled) in one access: 2-byte outputs packed in pairs
// (each rounded to nearest even, as vq_store does), fp32 as they are.
template <int kVS>
__device__ __forceinline__ void vq_store_vector(float *out, const float (&v)[kVS]) {
  if constexpr (kVS == 2) {
    *reinterpret_cast<float2 *>(out) = make_float2(v[0], v[1]);
  } else {
#pragma unroll
    for (int c = 0; c < kVS; c += 4) *reinterpret_cast<float4 *>(out + c) = make_float4(v[c], v[c + 1], v[c + 2], v[c + 3]);
  }
}
template <int kVS, typename Out>
__device__ __forceinline__ void vq_store_vector(Out *out, const float (&v)[kVS]) {
  uint32_t w[kVS / 2];
#pragma unroll
  for (int c = 0; c < kVS / 2; c++) w[c] = pack_pair(Out{}, v[2 * c], v[2 * c + 1]);
  if constexpr (kVS == 2) *reinterpret_cast<uint32_t *>(out) = w[0];
  else if constexpr (kVS == 4) *reinterpret_cast<uint2 *>(out) = make_uint2(w[0], w[1]);
  else *reinterpret_cast<uint4 *>(out) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <int kVS, typename E, typename Out>
__global__ void vq_dequantize_kernel(const vq_dequantize_params p) {
  constexpr int kMaxResiduals = 4;
  const int vs = kVS ? kVS : p.vs;
  const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.vectors) return;
  const int64_t book_col = j / p.vectors_per_book;
  for (int64_t n = blockIdx.y; n < p.N; n += gridDim.y) {
    const int64_t book = (p.scope_rows ? n / p.scope_rows : 0) * p.books_per_row + book_col;

    // The entry of each residual.
    const uint16_t *e[kMaxResiduals];
#pragma unroll
    for (int r = 0; r < kMaxResiduals; r++) {
      e[r] = p.books;
      if (r < p.residuals) {
        const uint32_t idx = vq_index(p.codes + (r * p.N + n) * p.row_words, j, p.bits, p.row_words);
        e[r] = p.books + ((r * p.n_books + book) * p.entries + idx) * vs;
      }
    }

    // Sum from +0 in residual order, then the row scale (1 without scales, as on the CPU).
    const float s = p.scales ? p.scales[n] : 1.0f;
    Out *out = static_cast<Out *>(p.w) + n * p.w_ld + static_cast<int64_t>(j) * vs;
    if constexpr (kVS != 0) {
      float acc[kVS];
#pragma unroll
      for (int c = 0; c < kVS; c++) acc[c] = 0.0f;
#pragma unroll
      for (int r = 0; r < kMaxResiduals; r++) {
        if (r >= p.residuals) break;
        float v[kVS];
        vq_load_entry<kVS, true>(E{}, e[r], v);
#pragma unroll
        for (int c = 0; c < kVS; c++) acc[c] += v[c];
      }
#pragma unroll
      for (int c = 0; c < kVS; c++) acc[c] *= s;
      if (p.vec_store) {
        vq_store_vector<kVS>(out, acc);
      } else {
#pragma unroll
        for (int c = 0; c < kVS; c++) vq_store(out + c, acc[c]);
      }
    } else {
      for (int c = 0; c < vs; c++) {
        float acc = 0.0f;
#pragma unroll
        for (int r = 0; r < kMaxResiduals; r++) {
          if (r >= p.residuals) break;
          float v[1];
          vq_load_entry<1, true>(E{}, e[r] + c, v);
          acc += v[0];
        }
        vq_store(out + c, acc * s);
      }
    }
  }
}
