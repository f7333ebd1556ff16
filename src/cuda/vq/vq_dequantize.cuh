// VQ dequantization, the reference path of the CUDA side:
//   w[n, j * vs + c] = scale[n] * sum_r entry_r(book(n, j), index_r(n, j))[c]
// with the sum formed in fp32 in residual order from +0, as the CPU's decode_row does, so fp32
// output equals it bit for bit and fp16 / bf16 outputs are that value rounded to nearest even.
//
// NOTES: one thread per vector (n, j), grid-stride, 64-bit offsets; entries are read from global
// memory. Compile-time vector sizes (2, 4, 8) load an entry in one access and keep the sums in
// registers; other sizes (kVS = 0) loop over the elements.
#pragma once

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
};

template <int kVS, typename E, typename Out>
__global__ void vq_dequantize_kernel(const vq_dequantize_params p) {
  constexpr int kMaxResiduals = 4;
  const int vs = kVS ? kVS : p.vs;
  const int64_t total = p.N * p.vectors;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = t / p.vectors;
    const uint32_t j = static_cast<uint32_t>(t - n * p.vectors);
    const int64_t book = (p.scope_rows ? n / p.scope_rows : 0) * p.books_per_row + j / p.vectors_per_book;

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
      for (int c = 0; c < kVS; c++) vq_store(out + c, acc[c] * s);
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
