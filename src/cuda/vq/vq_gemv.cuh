// VQ-GeMV: y[m, n] = sum_k x[m, k] * W[n, k] for M of 1 to 16, W [N, K] vector-quantized (qfuse.h,
// "Vector quantization"): W[n, j * vs + c] = scale[n] * sum_r entry_r(book(n, j), index_r(n, j))[c].
//
// NOTES:
// - The floor is the bytes: codes + codebooks + scales + x + y, codes by far the most. A block
//   owns a contiguous run of row tiles (persistent grid), so what it stages in shared memory (x,
//   and the codebooks of its row scope) is paid once per block, not once per tile.
// - Each warp owns kRows rows of a tile and walks K in steps of 32 x V vectors, V = floor(32 /
//   bits): lane l decodes the V consecutive vectors whose bits start at its 32-bit window. A step
//   reads one contiguous stretch of every code row, a coalesced word per lane (plus the next word
//   when bits does not divide 32, which L1 mostly already holds). The words of the warp's next
//   step are loaded before this step's decoding, so two steps of codes are in flight per warp.
// - kRows, kR (residuals: 1, 2, or up to 4) and kM are compile-time so that the code words,
//   decoded values and accumulators stay in registers (vq_heuristic.h sizes kRows to fit).
// - A lane reads its x values once per step and reuses them for its kRows rows; the entries of a
//   row are summed over residuals in fp32 and multiplied into kM fp32 accumulators. x is staged
//   as fp32 with 4 pad floats after every 32: lanes read it V * vs floats apart (16 for the paper's
//   formats), which the pad spreads over all banks.
// - Codebook placement is a compile-time policy, for the ablation: CodebookInShared copies the
//   books of the tile's row scope into shared memory when the scope changes (the paper's SC);
//   CodebookInGlobal reads entries through the read-only path, each row from its own scope.
// - For small N the heuristic splits K over warps_k warps of a tile (each takes every warps_k-th
//   step); per warp, a butterfly of shuffles sums the lanes, one lane leaves the (row, m) partials
//   in shared memory, and the block adds the warps_k partials, applies the row scale and writes y
//   in its dtype along n. M is bucketed (1, 2, 4, 8, 16); x rows past M are staged as zeros.
#pragma once

#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_heuristic.h"

struct CodebookInGlobal {
  static constexpr bool kShared = false;
};
struct CodebookInShared {
  static constexpr bool kShared = true;
};

constexpr int kVqGemvMaxThreads = QF_VQ_GEMV_MAX_WARPS * 32;

struct vq_gemv_params {
  const uint32_t *codes;      // [R, N, row_words]
  const uint16_t *books;      // [R, n_books, entries, vs], fp16 or bf16 bits
  const float *scales;        // [N] or NULL
  const void *x;              // [M, K], row pitch x_ld
  void *y;                    // [M, N], row pitch y_ld
  int64_t x_ld, y_ld, n_books;
  int x_dtype, y_dtype;       // qf_dtype
  int M, N, K, vectors;       // vectors = K / vs
  int vs, bits, residuals, entries;
  uint32_t row_words;         // words per code row
  int vectors_per_book;       // along K
  int book_shift;             // log2(vectors_per_book) when a power of two (31: one book per row), else -1
  int scope_rows;             // 0: one row scope
  int books_per_row;
  int warps_k, tile_rows, tiles;
  int k_chunk, x_pitch;       // columns per staged chunk of x (a multiple of 32 * vs, or K); floats per row
  uint32_t books_smem_bytes;  // 0 in global placement
};

// Columns [k0, k0 + kc) of the M rows of x into x_s as fp32; rows M..kM-1 as zeros.
template <typename T, int kM>
__device__ __forceinline__ void vq_stage_x_as(const vq_gemv_params &p, int k0, int kc, float *x_s) {
  const T *x = static_cast<const T *>(p.x);
  for (int m = 0; m < kM; m++)
    for (int k = threadIdx.x; k < kc; k += blockDim.x)
      x_s[m * p.x_pitch + k + ((k >> 5) << 2)] = m < p.M ? vq_to_f32(x[m * p.x_ld + k0 + k]) : 0.0f;
}

template <int kM>
__device__ __forceinline__ void vq_stage_x(const vq_gemv_params &p, int k0, int kc, float *x_s) {
  switch (p.x_dtype) {
    case QF_BF16: vq_stage_x_as<__nv_bfloat16, kM>(p, k0, kc, x_s); break;
    case QF_F16: vq_stage_x_as<__half, kM>(p, k0, kc, x_s); break;
    default: vq_stage_x_as<float, kM>(p, k0, kc, x_s); break;
  }
}

// The books of row scope `scope` (all residuals) into books_s: [R, books_per_row, entries, vs].
__device__ __forceinline__ void vq_stage_books(const vq_gemv_params &p, int scope, uint16_t *books_s) {
  const int64_t book_elems = static_cast<int64_t>(p.entries) * p.vs, per_res = p.books_per_row * book_elems;
  for (int r = 0; r < p.residuals; r++) {
    const uint16_t *src = p.books + (r * p.n_books + static_cast<int64_t>(scope) * p.books_per_row) * book_elems;
    uint16_t *dst = books_s + r * per_res;
    if (book_elems % 8 == 0) {  // every scope's books start 16-byte aligned
#pragma unroll 4
      for (int64_t i = threadIdx.x; i < per_res / 8; i += blockDim.x)
        reinterpret_cast<uint4 *>(dst)[i] = __ldg(reinterpret_cast<const uint4 *>(src) + i);
    } else {
      for (int64_t i = threadIdx.x; i < per_res; i += blockDim.x) dst[i] = src[i];
    }
  }
}

// N consecutive staged x values from column k (a multiple of N when N is 2, 4 or 8).
template <int N>
__device__ __forceinline__ void vq_load_x(const float *row, int k, float (&v)[N]) {
  const float *p = row + k + ((k >> 5) << 2);
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int q = 0; q < N / 4; q++) {
      const float4 f = reinterpret_cast<const float4 *>(p)[q];
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  } else if constexpr (N == 2) {
    const float2 f = *reinterpret_cast<const float2 *>(p);
    v[0] = f.x, v[1] = f.y;
  } else {
    static_assert(N == 1, "x is read 1, 2 or a multiple of 4 values at a time");
    v[0] = *p;
  }
}

__device__ __forceinline__ void vq_store_y(const vq_gemv_params &p, int m, int n, float v) {
  const int64_t i = m * p.y_ld + n;
  switch (p.y_dtype) {
    case QF_BF16: vq_store(static_cast<__nv_bfloat16 *>(p.y) + i, v); break;
    case QF_F16: vq_store(static_cast<__half *>(p.y) + i, v); break;
    default: vq_store(static_cast<float *>(p.y) + i, v); break;
  }
}

template <int kVS, typename E, int kM, int kR, class Placement>
__global__ void __launch_bounds__(kVqGemvMaxThreads, 1) vq_gemv_kernel(const __grid_constant__ vq_gemv_params p) {
  constexpr int kRows = QF_VQ_GEMV_ROWS_PER_WARP(kM, kVS, kR);
  constexpr int kC = kVS ? kVS : 1;  // entry elements handled together
  constexpr bool kShared = Placement::kShared;
  static_assert(kVS == 0 || kVS == 2 || kVS == 4 || kVS == 8, "vector sizes 2, 4, 8, or 0 for any other");
  static_assert(kM == 1 || kM == 2 || kM == 4 || kM == 8 || kM == 16, "M buckets are powers of two up to 16");
  static_assert(kR == 1 || kR == 2 || kR == 4, "residual buckets: 1, 2, or up to 4");

  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t *books_s = reinterpret_cast<uint16_t *>(smem);
  float *x_s = reinterpret_cast<float *>(smem + p.books_smem_bytes);
  float *red = x_s + kM * p.x_pitch;  // [warps_k, tile_rows, kM] partial sums

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wk = warp % p.warps_k, wn = warp / p.warps_k;
  if (p.tile_rows != static_cast<int>(blockDim.x >> 5) / p.warps_k * kRows) __trap();  // the heuristic's rows per warp
  const int vs = kVS ? kVS : p.vs;
  const int residuals = kR < 4 ? kR : p.residuals;
  const int bits = p.bits, per_lane = 32 / bits, step = 32 * per_lane;
  const uint32_t mask = (1u << bits) - 1u;
  const int book_elems = p.entries * vs;
  const int64_t code_res_stride = static_cast<int64_t>(p.N) * p.row_words;
  const int64_t book_res_stride = (kShared ? static_cast<int64_t>(p.books_per_row) : p.n_books) * book_elems;
  const int chunk_vectors = p.k_chunk / vs, chunks = (p.vectors + chunk_vectors - 1) / chunk_vectors;

  const int t_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * p.tiles / gridDim.x);
  const int t_end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * p.tiles / gridDim.x);
  int staged_scope = -1;
  bool x_staged = false;

  for (int tile = t_begin; tile < t_end; tile++) {
    const int n0 = tile * p.tile_rows;
    __syncthreads();  // the previous tile is done with red, x_s and books_s
    bool fresh = false;
    if constexpr (kShared) {
      const int scope = p.scope_rows ? n0 / p.scope_rows : 0;
      if (scope != staged_scope) {
        vq_stage_books(p, scope, books_s);
        staged_scope = scope;
        fresh = true;
      }
    }

    // This warp's rows (past N: row N - 1 again, never stored) and where their entries start.
    const uint32_t *crow[kRows];
    const uint16_t *bbase[kRows];
#pragma unroll
    for (int i = 0; i < kRows; i++) {
      const int n = min(n0 + wn * kRows + i, p.N - 1);
      crow[i] = p.codes + static_cast<int64_t>(n) * p.row_words;
      if constexpr (kShared)
        bbase[i] = books_s;
      else
        bbase[i] = p.books + static_cast<int64_t>(p.scope_rows ? n / p.scope_rows : 0) * p.books_per_row * book_elems;
    }
    float acc[kRows][kM];
#pragma unroll
    for (int i = 0; i < kRows; i++)
#pragma unroll
      for (int m = 0; m < kM; m++) acc[i][m] = 0.0f;

    for (int c = 0; c < chunks; c++) {
      // ---- stage x (once per block when K fits, else each chunk of each tile) ----
      if (chunks > 1 || !x_staged) {
        if (c > 0) __syncthreads();  // every warp is done with the previous chunk
        vq_stage_x<kM>(p, c * p.k_chunk, min(p.k_chunk, p.K - c * p.k_chunk), x_s);
        x_staged = true;
        fresh = true;
      }
      if (fresh) {
        __syncthreads();
        fresh = false;
      }

      // ---- walk the chunk's vectors: this warp takes every warps_k-th step ----
      const int cj0 = c * chunk_vectors, cj1 = min(p.vectors, cj0 + chunk_vectors);
      const int steps = (cj1 - cj0 + step - 1) / step;
      // The code words under a lane's bits in step s, every row and residual (0 past the chunk):
      // the word holding the first bit, and the next one when the bits do not start a word.
      uint32_t lo[kRows][kR], hi[kRows][kR];
      auto load_step = [&](int s) {
        const int j0 = cj0 + s * step + lane * per_lane;
        const bool live = s < steps && j0 < cj1;
        const uint32_t bit = static_cast<uint32_t>(j0) * static_cast<uint32_t>(bits), q = bit >> 5;
        const bool two = (bit & 31u) != 0u && q + 1u < p.row_words;
#pragma unroll
        for (int i = 0; i < kRows; i++)
#pragma unroll
          for (int r = 0; r < kR; r++) {
            const uint32_t *row = crow[i] + r * code_res_stride;
            lo[i][r] = live && r < residuals ? __ldg(row + q) : 0u;
            hi[i][r] = live && r < residuals && two ? __ldg(row + q + 1u) : 0u;
          }
      };
      load_step(wk);
      for (int s = wk; s < steps; s += p.warps_k) {
        const int j0 = cj0 + s * step + lane * per_lane;
        const int count = min(per_lane, cj1 - j0);
        const uint32_t shift = (static_cast<uint32_t>(j0) * static_cast<uint32_t>(bits)) & 31u;
        uint32_t win[kRows][kR];
#pragma unroll
        for (int i = 0; i < kRows; i++)
#pragma unroll
          for (int r = 0; r < kR; r++) win[i][r] = __funnelshift_r(lo[i][r], hi[i][r], shift);
        load_step(s + p.warps_k);  // the next step's words are in flight while this one computes

        for (int v = 0; v < count; v++) {
          const int j = j0 + v;
          const int book = p.book_shift >= 0 ? j >> p.book_shift : j / p.vectors_per_book;
          const int64_t book_off = static_cast<int64_t>(book) * book_elems;
          const int kl = (j - cj0) * vs;  // column inside the staged chunk
          for (int e0 = 0; e0 < vs; e0 += kC) {
            // The decoded values of every row: entries summed over residuals.
            float w[kRows][kC];
#pragma unroll
            for (int i = 0; i < kRows; i++) {
#pragma unroll
              for (int cc = 0; cc < kC; cc++) w[i][cc] = -0.0f;  // -0 + e is e: the first add folds away
#pragma unroll
              for (int r = 0; r < kR; r++) {
                if (r < residuals) {
                  float e[kC];
                  const int64_t off = r * book_res_stride + book_off + (win[i][r] & mask) * vs + e0;
                  vq_load_entry<kC, !kShared>(E{}, bbase[i] + off, e);
#pragma unroll
                  for (int cc = 0; cc < kC; cc++) w[i][cc] += e[cc];
                }
              }
            }
            // Each x value once, into every row's accumulators.
#pragma unroll
            for (int m = 0; m < kM; m++) {
              float xv[kC];
              vq_load_x<kC>(x_s + m * p.x_pitch, kl + e0, xv);
#pragma unroll
              for (int i = 0; i < kRows; i++)
#pragma unroll
                for (int cc = 0; cc < kC; cc++) acc[i][m] = fmaf(xv[cc], w[i][cc], acc[i][m]);
            }
          }
#pragma unroll
          for (int i = 0; i < kRows; i++)
#pragma unroll
            for (int r = 0; r < kR; r++) win[i][r] >>= bits;
        }
      }
    }

    // ---- reduce: lanes by shuffles, warps along K through shared memory ----
#pragma unroll
    for (int i = 0; i < kRows; i++)
#pragma unroll
      for (int m = 0; m < kM; m++)
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) acc[i][m] += __shfl_xor_sync(0xffffffffu, acc[i][m], d);
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < kRows; i++)
#pragma unroll
        for (int m = 0; m < kM; m++) red[(wk * p.tile_rows + wn * kRows + i) * kM + m] = acc[i][m];
    }
    __syncthreads();

    // ---- epilogue: y[m, n] = scale[n] * sum of the partials, along n ----
    for (int t = threadIdx.x; t < p.tile_rows * p.M; t += blockDim.x) {
      const int m = t / p.tile_rows, rr = t - m * p.tile_rows, n = n0 + rr;
      if (n >= p.N) continue;
      float sum = 0.0f;
      for (int q = 0; q < p.warps_k; q++) sum += red[(q * p.tile_rows + rr) * kM + m];
      if (p.scales) sum *= p.scales[n];
      vq_store_y(p, m, n, sum);
    }
  }
}

// The launchers of each placement (vq_gemv_global.cu, vq_gemv_shared.cu): the kernel of the
// config's buckets on a persistent grid.
qf_status qf_cuda_vq_gemv_run_global(qf_ctx *ctx, const vq_gemv_params &p, const qf_vq_gemv_config &cfg, bool bf16_entries);
qf_status qf_cuda_vq_gemv_run_shared(qf_ctx *ctx, const vq_gemv_params &p, const qf_vq_gemv_config &cfg, bool bf16_entries);
