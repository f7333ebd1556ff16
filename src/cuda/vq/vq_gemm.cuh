// VQ-GeMM: y[m, n] = sum_k x[m, k] * W[n, k] on the tensor cores (mma.sync m16n8k16, fp32
// accumulators), W [N, K] vector-quantized and decoded tile by tile into shared memory inside the
// mainloop: W[n, j * vs + c] = scale[n] * sum_r entry_r(book(n, j), index_r(n, j))[c].
//
// NOTES:
// - One block computes a 64 x kBN tile of y (kBN = 64 or 32) with 4 warps of 32 x kBN/2 outputs,
//   walking K in stages of 64 columns. Per stage, shared memory holds x and W as 16-bit planes
//   [rows][64 + 8] (the pad of 16 bytes puts the 8 rows an ldmatrix phase reads in 8 different
//   bank groups), double-buffered, and one buffer of the stage's code words.
// - Exact operands: the MMA type T is fp16 when x and the entries are fp16, bf16 otherwise. Each
//   x value is split into x_parts values of T that sum to it exactly (fp32 into three bf16: 8 + 8
//   + 8 significand bits; fp16 into two bf16: 8 + 3), and each entry likewise (an fp16 entry under
//   bf16: two parts). Each residual gets its own W planes, so the planes hold the entries
//   themselves, never their rounded sum: the tensor cores multiply every pair of parts (products
//   of 16-bit values are exact in fp32) and their sum over parts and residuals is exactly
//   x[m, k] * (sum_r entry_r). Only the accumulation rounds: the tensor core's own fp32 sum within
//   a stage (into a zeroed fragment), then one round-to-nearest fp32 add per stage into the
//   accumulators. The row scale multiplies the finished sum (as in the GeMV).
// - Pipeline, per stage s (buffer s & 1): (A) cp.async the code words of stage s + 1 (and, in
//   shared placement, the books of its columns when they are not staged yet) and load its x
//   values into registers; (B) the tensor cores on stage s; (C) wait for the copies, then decode
//   stage s + 1 into the other buffer: each thread takes one (residual, row, vector) at a time,
//   extracts the index from the staged words, loads the entry (shared or global, per the
//   placement policy), splits it and stores it; x is split and stored the same way. One barrier
//   after the copies land, one at the end of the stage.
// - Edges: rows of x past M, rows of W past N and columns past K are stored as zeros (never
//   read from global memory); outputs outside [M, N] are not written. x and y rows may be strided
//   and need only be aligned to their elements (x is read element by element).
// - Codebook placement is a compile-time policy, as in the GeMV (vq_gemv.cuh): CodebookInShared
//   stages the books of the tile's row scope and of the stage's columns (the tile lies in one row
//   scope, vq_gemm_heuristic.h); CodebookInGlobal reads each row's own books through L1/L2.
#pragma once

#include <type_traits>

#include "cuda/ptx/arch.cuh"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_gemm_heuristic.h"
#include "cuda/vq/vq_gemv.cuh"  // CodebookInGlobal, CodebookInShared

struct vq_gemm_params {
  const uint32_t *codes;      // [R, N, row_words]
  const uint16_t *books;      // [R, n_books, entries, vs], fp16 or bf16 bits
  const float *scales;        // [N] or NULL
  const void *x;              // [M, K], row pitch x_ld elements
  void *y;                    // [M, N], row pitch y_ld elements
  int64_t x_ld, y_ld, n_books, tiles_m;
  int x_dtype, y_dtype;       // qf_dtype
  int M, N, K, vectors;       // vectors = K / vs
  int vs, bits, residuals, entries;
  uint32_t row_words;         // words per code row
  int vectors_per_book;       // along K: scope_cols / vs, or K / vs for one book per row
  int scope_rows;             // 0: one row scope
  int books_per_row;
  int x_parts, planes, code_words, stage_books;
  uint32_t books_smem_bytes, codes_smem_bytes, stage_smem_bytes;
};

namespace vq_gemm_detail {

constexpr int kBM = QF_VQ_GEMM_BM, kBK = QF_VQ_GEMM_BK, kPitch = QF_VQ_GEMM_PITCH, kThreads = QF_VQ_GEMM_THREADS;
static_assert(kBM == 64 && kThreads == 128, "the warp layout is 2 x 2 warps of 32 rows of x");
static_assert(kBK == 64 && kPitch % 8 == 0, "stages of 64 columns; staged rows a multiple of 16 bytes");

// ---- PTX: cp.async, ldmatrix, mma.sync (sm_80+; this library builds for sm_90a) ----

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 4 bytes, or zeros without reading `src` when src_bytes is 0.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, uint32_t src_bytes) {
  QF_ASM_SM90("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src) {
  QF_ASM_SM90("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// Waits for every cp.async this thread issued (the barrier that follows publishes them).
__device__ __forceinline__ void cp_async_wait_all() { QF_ASM_SM90("cp.async.wait_all;\n" ::: "memory"); }

// Four 8 x 8 matrices of 16-bit elements; lanes 8i .. 8i + 7 give the row addresses of matrix i,
// r[i] receives its fragment (lane t: row t / 4, elements 2 (t % 4) and 2 (t % 4) + 1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  r[0] = r[1] = r[2] = r[3] = 0u;
  QF_ASM_SM90("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
              : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3])
              : "r"(addr));
}

// d[16 x 8] += a[16 x 16] . b[16 x 8] with fp32 accumulators (a row-major, b column-major, the
// fragments of the PTX manual's m16n8k16 layouts).
__device__ __forceinline__ void mma_16816(__half, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  QF_ASM_SM90("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
              "{%0, %1, %2, %3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_16816(__nv_bfloat16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  QF_ASM_SM90("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
              "{%0, %1, %2, %3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- exact splits into 16-bit parts ----

__device__ __forceinline__ uint16_t to_bits(__half, float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ uint16_t to_bits(__nv_bfloat16, float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float from_bits(__half, uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float from_bits(__nv_bfloat16, uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// v = sum of the P parts, exactly, where v's significand fits in the parts (fp32 in three bf16,
// fp16 in two bf16, any fp16 / bf16 value in one of its own type): each part is the remainder
// rounded to T, and the remainder v - part is exact in fp32. Inf and NaN go whole into the first
// part (the rest 0), as does a finite fp32 value that rounds to Inf in bf16 (|v| > 3.39e38).
// Below 2^-110 in magnitude an fp32 value's last part can fall under bf16's subnormals; the error
// is then below 2^-133.
template <typename T, int P>
__device__ __forceinline__ void split(float v, uint16_t (&parts)[P]) {
#pragma unroll
  for (int p = 0; p < P; p++) {
    parts[p] = to_bits(T{}, v);
    const float f = from_bits(T{}, parts[p]);
    v = isfinite(f) ? v - f : 0.0f;
  }
}

__device__ __forceinline__ float entry_value(vq_f16, uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float entry_value(vq_bf16, uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// kN consecutive 16-bit entry elements at p (aligned to 2 kN bytes for kN = 2, 4, 8), raw.
template <int kN, bool kGlobal>
__device__ __forceinline__ void load_raw(const uint16_t *p, uint16_t (&v)[kN]) {
  uint32_t w[kN / 2];
  if constexpr (kN == 8) {
    const uint4 r = kGlobal ? __ldg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
    w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
  } else if constexpr (kN == 4) {
    const uint2 r = kGlobal ? __ldg(reinterpret_cast<const uint2 *>(p)) : *reinterpret_cast<const uint2 *>(p);
    w[0] = r.x, w[1] = r.y;
  } else {
    static_assert(kN == 2, "entries are loaded 2, 4 or 8 elements at a time");
    w[0] = kGlobal ? __ldg(reinterpret_cast<const unsigned int *>(p)) : *reinterpret_cast<const uint32_t *>(p);
  }
#pragma unroll
  for (int i = 0; i < kN / 2; i++) {
    v[2 * i] = static_cast<uint16_t>(w[i] & 0xffffu);
    v[2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
  }
}

// kN 16-bit values to shared memory at p (aligned to 2 kN bytes), in one store.
template <int kN>
__device__ __forceinline__ void store_raw(uint16_t *p, const uint16_t (&v)[kN]) {
  uint32_t w[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; i++) w[i] = static_cast<uint32_t>(v[2 * i]) | (static_cast<uint32_t>(v[2 * i + 1]) << 16);
  if constexpr (kN == 8)
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  else if constexpr (kN == 4)
    *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
  else
    *reinterpret_cast<uint32_t *>(p) = w[0];
}

// Index at bit `bit` of a staged code row (the bits lie inside the staged words).
__device__ __forceinline__ uint32_t staged_index(const uint32_t *words, uint32_t bit, int bits) {
  const uint32_t q = bit >> 5, sh = bit & 31u;
  const uint32_t lo = words[q];
  const uint32_t hi = sh + static_cast<uint32_t>(bits) > 32u ? words[q + 1] : 0u;
  return __funnelshift_r(lo, hi, sh) & ((1u << bits) - 1u);
}

// Values of x per thread and stage, as pairs of adjacent columns.
constexpr int kXPairs = kBM * kBK / 2 / kThreads;

template <typename X>
__device__ __forceinline__ void load_x_as(const vq_gemm_params &p, int m0, int k0, float (&xr)[kXPairs][2]) {
  const X *x = static_cast<const X *>(p.x);
#pragma unroll
  for (int i = 0; i < kXPairs; i++) {
    const int e = static_cast<int>(threadIdx.x) + i * kThreads;
    const int m = m0 + e / (kBK / 2), k = k0 + (e % (kBK / 2)) * 2;
    const X *row = x + static_cast<int64_t>(m) * p.x_ld;
    xr[i][0] = m < p.M && k < p.K ? vq_to_f32(row[k]) : 0.0f;
    xr[i][1] = m < p.M && k + 1 < p.K ? vq_to_f32(row[k + 1]) : 0.0f;
  }
}

__device__ __forceinline__ void load_x(const vq_gemm_params &p, int m0, int k0, float (&xr)[kXPairs][2]) {
  switch (p.x_dtype) {
    case QF_BF16: load_x_as<__nv_bfloat16>(p, m0, k0, xr); break;
    case QF_F16: load_x_as<__half>(p, m0, k0, xr); break;
    default: load_x_as<float>(p, m0, k0, xr); break;
  }
}

}  // namespace vq_gemm_detail

template <int kBN, int kVS, typename E, typename T, class Placement>
__global__ void __launch_bounds__(QF_VQ_GEMM_THREADS) vq_gemm_kernel(const __grid_constant__ vq_gemm_params p) {
  using namespace vq_gemm_detail;
  constexpr bool kShared = Placement::kShared;
  constexpr int kEP = std::is_same<E, vq_f16>::value && std::is_same<T, __nv_bfloat16>::value ? 2 : 1;  // entry parts
  constexpr int kXP = std::is_same<T, __half>::value ? 1 : 3;  // the most x parts
  constexpr int kWN = kBN / 2, kNT = kWN / 8;  // a warp's columns of y, its n8 tiles
  static_assert(kBN == 32 || kBN == 64, "tiles of 32 or 64 rows of W");
  static_assert(kVS == 0 || kVS == 2 || kVS == 4 || kVS == 8, "vector sizes 2, 4, 8, or 0 for any other");
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<E, vq_f16>::value,
                "fp16 tensor-core operands only with fp16 entries");

  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t *books_s = reinterpret_cast<uint16_t *>(smem);
  uint32_t *codes_s = reinterpret_cast<uint32_t *>(smem + p.books_smem_bytes);
  uint8_t *stages = smem + p.books_smem_bytes + p.codes_smem_bytes;
  // Stage b: x planes [x_parts][kBM][kPitch], then W planes [planes][kBN][kPitch].
  auto x_plane = [&](int b, int part) {
    return reinterpret_cast<uint16_t *>(stages + b * p.stage_smem_bytes) + part * (kBM * kPitch);
  };
  auto w_plane = [&](int b, int plane) {
    return reinterpret_cast<uint16_t *>(stages + b * p.stage_smem_bytes) + p.x_parts * (kBM * kPitch) +
           plane * (kBN * kPitch);
  };

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int wm = warp & 1, wn = warp >> 1;
  const int64_t tile = blockIdx.x;
  const int m0 = static_cast<int>(tile % p.tiles_m) * kBM, n0 = static_cast<int>(tile / p.tiles_m) * kBN;
  const int vs = kVS ? kVS : p.vs;
  const int bits = p.bits, residuals = p.residuals, cw = p.code_words;
  const int book_elems = p.entries * vs;
  const int stages_k = (p.K + kBK - 1) / kBK;
  [[maybe_unused]] int staged_b0 = 0, staged_b1 = -1;  // books in the buffer (shared placement)
  // fp16 operands are only built for fp16 x (the launcher's choice): anything else is a bug.
  if (std::is_same<T, __half>::value && p.x_dtype != QF_F16) __trap();

  // The vectors stage s touches, [j_begin, j_end), and the first code word staged for them.
  auto stage_vectors = [&](int s, int &j_begin, int &j_end, uint32_t &q0) {
    const int k0 = s * kBK;
    j_begin = k0 / vs;
    j_end = min(p.vectors, (k0 + kBK + vs - 1) / vs);
    q0 = (static_cast<uint32_t>(j_begin) * static_cast<uint32_t>(bits)) >> 5;
  };

  // (A) Asynchronous copies for stage s: its code words, and the books of its columns.
  auto issue_copies = [&](int s) {
    int jb, je;
    uint32_t q0;
    stage_vectors(s, jb, je, q0);
    const uint32_t q1 = (static_cast<uint32_t>(je) * static_cast<uint32_t>(bits) + 31u) >> 5;
    const int words = static_cast<int>(q1 - q0);
    const int total = residuals * kBN * cw;
    for (int t = tid; t < total; t += kThreads) {
      const int r = t / (kBN * cw), rem = t - r * (kBN * cw), n = rem / cw, w = rem - n * cw;
      const bool live = n0 + n < p.N && w < words;
      const uint32_t *src = live ? p.codes + (static_cast<int64_t>(r) * p.N + n0 + n) * p.row_words + q0 + w : p.codes;
      cp_async4(smem_addr(codes_s + t), src, live ? 4u : 0u);
    }
    if constexpr (kShared) {
      const int b0 = jb / p.vectors_per_book, b1 = (je - 1) / p.vectors_per_book;
      if (b0 < staged_b0 || b1 > staged_b1) {  // uniform across the block
        staged_b0 = b0, staged_b1 = b1;
        const int64_t scope = p.scope_rows ? n0 / p.scope_rows : 0;  // the tile lies in one row scope
        const int elems = (b1 - b0 + 1) * book_elems;  // per residual, <= stage_books books
        const bool wide = book_elems % 8 == 0;         // every book starts 16-byte aligned
        const int chunk = wide ? 8 : 2, per_res = elems / chunk;
        for (int t = tid; t < residuals * per_res; t += kThreads) {
          const int r = t / per_res, i = t - r * per_res;
          const uint16_t *src = p.books +
                                ((static_cast<int64_t>(r) * p.n_books + scope * p.books_per_row + b0) *
                                     book_elems + static_cast<int64_t>(i) * chunk);
          uint16_t *dst = books_s + static_cast<int64_t>(r) * p.stage_books * book_elems + i * chunk;
          if (wide)
            cp_async16(smem_addr(dst), src);
          else
            cp_async4(smem_addr(dst), src, 4u);
        }
      }
    }
  };

  // Where row n's (tile-relative) entry `idx` of book `book`, residual r, starts.
  auto entry_ptr = [&](int r, int n, int book, uint32_t idx) -> const uint16_t * {
    if constexpr (kShared) {
      return books_s + (static_cast<int64_t>(r) * p.stage_books + (book - staged_b0)) * book_elems +
             static_cast<int64_t>(idx) * vs;
    } else {
      const int64_t sc = p.scope_rows ? (n0 + n) / p.scope_rows : 0;
      return p.books + ((static_cast<int64_t>(r) * p.n_books + sc * p.books_per_row + book) * book_elems +
                        static_cast<int64_t>(idx) * vs);
    }
  };

  // (C) Stage s into buffer b: the copies landed, W decoded and x split into their planes.
  auto decode = [&](int s, int b, const float (&xr)[kXPairs][2]) {
    cp_async_wait_all();
    __syncthreads();
    int jb, je;
    uint32_t q0;
    stage_vectors(s, jb, je, q0);
    if constexpr (kVS != 0) {
      constexpr int kVP = kBK / kVS;  // vectors per staged row (stages start on vector boundaries)
      for (int t = tid; t < residuals * kBN * kVP; t += kThreads) {
        const int r = t / (kBN * kVP), rem = t % (kBN * kVP), n = rem / kVP, jl = rem % kVP;
        const int j = jb + jl;
        uint16_t out[kEP][kVS];
        if (n0 + n < p.N && j < p.vectors) {
          const uint32_t bit = static_cast<uint32_t>(j) * static_cast<uint32_t>(bits) - q0 * 32u;
          const uint32_t idx = staged_index(codes_s + (r * kBN + n) * cw, bit, bits);
          uint16_t e[kVS];
          load_raw<kVS, !kShared>(entry_ptr(r, n, j / p.vectors_per_book, idx), e);
#pragma unroll
          for (int c = 0; c < kVS; c++) {
            if constexpr (kEP == 1) {
              out[0][c] = e[c];
            } else {
              uint16_t parts[kEP];
              split<T, kEP>(entry_value(E{}, e[c]), parts);
#pragma unroll
              for (int q = 0; q < kEP; q++) out[q][c] = parts[q];
            }
          }
        } else {
#pragma unroll
          for (int q = 0; q < kEP; q++)
#pragma unroll
            for (int c = 0; c < kVS; c++) out[q][c] = 0;
        }
#pragma unroll
        for (int q = 0; q < kEP; q++) store_raw<kVS>(w_plane(b, r * kEP + q) + n * kPitch + jl * kVS, out[q]);
      }
    } else {
      // Any vector size: element by element (vectors may straddle stages).
      const int k0 = s * kBK;
      for (int t = tid; t < kBN * kBK; t += kThreads) {
        const int n = t / kBK, kl = t % kBK, k = k0 + kl;
        const bool live = n0 + n < p.N && k < p.K;
        const int j = live ? k / vs : jb, c = k - j * vs;
        const uint32_t bit = static_cast<uint32_t>(j) * static_cast<uint32_t>(bits) - q0 * 32u;
        for (int r = 0; r < residuals; r++) {
          uint16_t parts[kEP];
          if (live) {
            const uint32_t idx = staged_index(codes_s + (r * kBN + n) * cw, bit, bits);
            const uint16_t *ep = entry_ptr(r, n, j / p.vectors_per_book, idx) + c;
            const uint16_t e = kShared ? *ep : __ldg(reinterpret_cast<const unsigned short *>(ep));
            if constexpr (kEP == 1)
              parts[0] = e;
            else
              split<T, kEP>(entry_value(E{}, e), parts);
          } else {
#pragma unroll
            for (int q = 0; q < kEP; q++) parts[q] = 0;
          }
#pragma unroll
          for (int q = 0; q < kEP; q++) w_plane(b, r * kEP + q)[n * kPitch + kl] = parts[q];
        }
      }
    }
    // x: each pair of columns split into x_parts planes.
#pragma unroll
    for (int i = 0; i < kXPairs; i++) {
      const int e = tid + i * kThreads, m = e / (kBK / 2), kl = (e % (kBK / 2)) * 2;
      uint16_t lo[kXP], hi[kXP];
      split<T, kXP>(xr[i][0], lo);
      split<T, kXP>(xr[i][1], hi);
#pragma unroll
      for (int q = 0; q < kXP; q++)
        if (q < p.x_parts)
          *reinterpret_cast<uint32_t *>(x_plane(b, q) + m * kPitch + kl) =
              static_cast<uint32_t>(lo[q]) | (static_cast<uint32_t>(hi[q]) << 16);
    }
  };

  // (B) The tensor cores on buffer b: acc += this stage's products, summed per stage in `part`.
  float acc[2][kNT][4];
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int ni = 0; ni < kNT; ni++)
#pragma unroll
      for (int c = 0; c < 4; c++) acc[mi][ni][c] = 0.0f;

  auto mma_stage = [&](int b) {
    float part[2][kNT][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
      for (int ni = 0; ni < kNT; ni++)
#pragma unroll
        for (int c = 0; c < 4; c++) part[mi][ni][c] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ks++) {
      uint32_t a[kXP][2][4];
#pragma unroll
      for (int q = 0; q < kXP; q++)
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
          if (q < p.x_parts) {
            const int row = wm * 32 + mi * 16 + (lane & 15), col = ks * 16 + (lane >> 4) * 8;
            ldmatrix_x4(a[q][mi], smem_addr(x_plane(b, q) + row * kPitch + col));
          } else {
            a[q][mi][0] = a[q][mi][1] = a[q][mi][2] = a[q][mi][3] = 0u;
          }
        }
      for (int pl = 0; pl < p.planes; pl++) {
        uint32_t bf[kNT][2];
#pragma unroll
        for (int nj = 0; nj < kNT / 2; nj++) {
          const int row = wn * kWN + nj * 16 + (lane & 7) + ((lane >> 4) << 3), col = ks * 16 + ((lane >> 3) & 1) * 8;
          uint32_t r4[4];
          ldmatrix_x4(r4, smem_addr(w_plane(b, pl) + row * kPitch + col));
          bf[2 * nj][0] = r4[0], bf[2 * nj][1] = r4[1], bf[2 * nj + 1][0] = r4[2], bf[2 * nj + 1][1] = r4[3];
        }
#pragma unroll
        for (int q = 0; q < kXP; q++)
          if (q < p.x_parts)
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
              for (int ni = 0; ni < kNT; ni++) mma_16816(T{}, part[mi][ni], a[q][mi], bf[ni]);
      }
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
      for (int ni = 0; ni < kNT; ni++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[mi][ni][c] = __fadd_rn(acc[mi][ni][c], part[mi][ni][c]);
  };

  // ---- mainloop: stage 0 up front, then each stage's copies and loads under the previous MMAs ----
  float xr[kXPairs][2];
  issue_copies(0);
  load_x(p, m0, 0, xr);
  decode(0, 0, xr);
  __syncthreads();
  for (int s = 0; s < stages_k; s++) {
    const bool next = s + 1 < stages_k;
    if (next) {
      issue_copies(s + 1);
      load_x(p, m0, (s + 1) * kBK, xr);
    }
    mma_stage(s & 1);
    if (next) decode(s + 1, (s + 1) & 1, xr);
    __syncthreads();
  }

  // ---- epilogue: y = scale[n] * acc, masked to [M, N] ----
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int ni = 0; ni < kNT; ni++)
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
          const int m = m0 + wm * 32 + mi * 16 + g + 8 * h, n = n0 + wn * kWN + ni * 8 + tq * 2 + c;
          if (m >= p.M || n >= p.N) continue;
          float v = acc[mi][ni][2 * h + c];
          if (p.scales) v *= p.scales[n];
          const int64_t i = static_cast<int64_t>(m) * p.y_ld + n;
          switch (p.y_dtype) {
            case QF_BF16: vq_store(static_cast<__nv_bfloat16 *>(p.y) + i, v); break;
            case QF_F16: vq_store(static_cast<__half *>(p.y) + i, v); break;
            default: vq_store(static_cast<float *>(p.y) + i, v); break;
          }
        }
}

// The launchers of each placement (vq_gemm_global.cu, vq_gemm_shared.cu): the kernel of the
// config's tile, vector size and operand types, one block per output tile.
qf_status qf_cuda_vq_gemm_mma_run_global(qf_ctx *ctx, const vq_gemm_params &p, const qf_vq_gemm_config &cfg,
                                         bool bf16_entries);
qf_status qf_cuda_vq_gemm_mma_run_shared(qf_ctx *ctx, const vq_gemm_params &p, const qf_vq_gemm_config &cfg,
                                         bool bf16_entries);

// ---- host: the instantiation for a config, and its launch ----

#include <atomic>

#include "cuda/common.cuh"

namespace vq_gemm_detail {

using kernel_t = void (*)(vq_gemm_params);
// Kernels per placement: 2 tile heights x 4 vector-size buckets x 3 (entry, operand) type pairs.
constexpr int kKernels = 2 * 4 * 3;

template <class Placement, int kBN, typename E, typename T>
kernel_t pick_vs(int vs, int &slot) {
  slot *= 4;
  if (vs == 2) return vq_gemm_kernel<kBN, 2, E, T, Placement>;
  slot++;
  if (vs == 4) return vq_gemm_kernel<kBN, 4, E, T, Placement>;
  slot++;
  if (vs == 8) return vq_gemm_kernel<kBN, 8, E, T, Placement>;
  slot++;
  return vq_gemm_kernel<kBN, 0, E, T, Placement>;
}

template <class Placement, int kBN>
kernel_t pick_types(bool bf16_entries, bool bf16_mma, int vs, int &slot) {
  slot *= 3;
  if (bf16_entries) return pick_vs<Placement, kBN, vq_bf16, __nv_bfloat16>(vs, slot);
  slot++;
  if (bf16_mma) return pick_vs<Placement, kBN, vq_f16, __nv_bfloat16>(vs, slot);
  slot++;
  return pick_vs<Placement, kBN, vq_f16, __half>(vs, slot);
}

}  // namespace vq_gemm_detail

template <class Placement>
qf_status vq_gemm_launch(qf_ctx *ctx, const vq_gemm_params &p, const qf_vq_gemm_config &cfg, bool bf16_entries) {
  using namespace vq_gemm_detail;
  static const char op[] = "qf_vq_gemm";
  if (bf16_entries && !cfg.mma_bf16)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: bf16 entries need bf16 tensor-core operands", op);
  if (cfg.bn != 32 && cfg.bn != 64)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for tiles of %d rows of W", op, cfg.bn);
  const int vs = QF_VQ_GEMM_VS_BUCKET(p.vs);
  int slot = cfg.bn == 64 ? 1 : 0;
  const kernel_t kernel = cfg.bn == 64 ? pick_types<Placement, 64>(bf16_entries, cfg.mma_bf16 != 0, vs, slot)
                                       : pick_types<Placement, 32>(bf16_entries, cfg.mma_bf16 != 0, vs, slot);

  // Raised to the device's limit: the heuristic has sized the block's shared memory within it.
  static std::atomic<uint64_t> opted_in[kKernels];
  if (qf_status st = qf_cuda_smem_opt_in(ctx, op, kernel, ctx->smem_optin, opted_in[slot]); st != QF_OK) return st;
  cudaError_t err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, QF_VQ_GEMM_THREADS, cfg.smem_bytes);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  if (per_sm < 1)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: a block of %d threads with %zu bytes of shared memory does not fit an SM",
                   op, QF_VQ_GEMM_THREADS, cfg.smem_bytes);
  const int64_t blocks = cfg.tiles_m * cfg.tiles_n;
  if (blocks > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld output tiles exceed the grid", op, static_cast<long long>(blocks));
  kernel<<<static_cast<unsigned>(blocks), QF_VQ_GEMM_THREADS, cfg.smem_bytes, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, op);
}
