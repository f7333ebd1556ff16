// Quantize-on-append (qf_vq_encode on CUDA): new rows x [T, K] encoded with existing codebooks,
// equal to the CPU reference (src/cpu/vq.c, qf_cpu_vq_encode) byte for byte.
//
// NOTES:
// - One warp per vector: every lane holds the vector (at most 16 values) in registers, and for
//   each residual the 32 lanes split the scope's codebook (lane l scans entries l, l + 32, ...,
//   so a warp's entry loads are contiguous), then the warp reduces the lanes' nearest entries
//   and all lanes subtract the winner. The distances and the subtraction are the CPU's fp32
//   operations in the same order, with explicit round-to-nearest intrinsics so that no
//   contraction into FMAs changes a bit.
// - The CPU keeps the first entry and replaces it only by a strictly smaller distance: the
//   lowest index of the smallest non-NaN distance, or entry 0 when entry 0's distance is NaN.
//   Each lane keeps its own first non-NaN minimum (its entries ascend), the warp reduction
//   prefers the smaller distance and then the lower index, and lane 0 says whether entry 0 was
//   NaN: the same entry for every input.
// - A block (32 warps) takes 32 consecutive vectors of one row. Their indices go to
//   shared memory, and the block packs them into the code rows a 32-bit word at a time: 32
//   indices of `bits` bits are `bits` whole words, so no two blocks write the same word. The
//   last block of a row also zeroes the row's padding words (as the CPU leaves them), so every
//   word of the code rows is written once and no memset is needed.
// - Row scales (fmt->row_scale): each block of a row computes the row's sum of squares in fp64
//   with the same fixed reduction tree, so every block of the row divides by the same scale. The
//   CPU sums left to right; the products are exact in fp64, so the two sums differ only in how
//   the additions round (2^-53 relative), which changes the fp32 scale only when its rounding
//   falls on a tie.
// - Parallelism: a decode step appends a few thousand vectors; one thread per vector left most
//   SMs idle and each thread walked its own 256-entry book one uncoalesced load at a time
//   (110-160 us for one step's K rows on an H200). A warp per vector spreads a step over
//   thousands of warps with coalesced book loads, and the entry loop is unrolled so that a lane's
//   loads are in flight together (a 256-entry book: 8 entries per lane, one unrolled pass; with
//   passes of 4 entries the second waited for the first's loads: CQ-4 at 1 row of 4096 5.1 ->
//   4.6 us on an H200). The last residual's winner is not subtracted (nothing reads it): one
//   dependent load fewer at the end of every warp's chain.
// - One row of 2- or 4-element vectors (a decode step at batch 1) is few blocks of 32 vectors
//   (CQ-2, K = 4096: 32 blocks of 1024 threads on 32 SMs); where blocks of 8 vectors (256
//   threads, as many registers as they want) are at most four per SM they take them instead: on
//   an H200 one row of 4096 in 3.7 us (CQ-2, 128 blocks; 5.4 in blocks of 32) and 3.5 us (CQ-4,
//   256 blocks; 4.65), 2 rows of CQ-4 and 4 of CQ-2 5-12% faster than in blocks of 32, one row of
//   K and V of CQ-4 (512 blocks) 9%. 8 indices of a multiple of 4 bits are whole words, as 32 are
//   of any width.
// - qf_vq_encode_kv_slots: K's rows and V's in one grid (blockIdx.z), each kernel's pair form
//   calling the same code with the K or the V parameters: a decode step's two appends in one
//   launch (1 row of 4096: CQ-2 4.3 us against 7.2 for the two calls, CQ-4 4.6 against 7.0; 2
//   and 4 rows 1.05-1.5x; 8 rows of CQ-4 14.7 against 16.6, of CQ-2 as the two calls).
// - Vector sizes 2, 4 and 8 have their own instantiations: an entry is one 4-, 8- or 16-byte load
//   and the vector takes vs registers, not 16, so sizes 2 and 4 fit 32 registers and two blocks
//   per SM (vs = 4 spilled 20 bytes until the past-the-row vectors were clamped instead of
//   skipped). H200, K = 4096: T = 8 rows 12-17 us instead of 22-42, T = 512 0.42-0.65 ms instead
//   of 1.0-2.0.
// - Appends of many rows (from 32 for CQ-4, 64 for CQ-2: the launcher's rows_min) that share their
//   codebooks and have no row scales (a prefill chunk into a CQ cache) take the row-parallel form
//   instead (vq_encode_rows_kernel): a lane per row and a warp per vector position of 32 rows,
//   each lane scanning the whole book in order from broadcast loads, with no reduction across
//   lanes (no shuffles, one entry load per step for 32 vectors); the same operations in the same
//   order, so the same codes. 512 rows of 4096 3.0-3.3x faster (H200, docs/VQ.md). For one
//   residual of 8-bit indices and 2- or 4-element vectors (the CQ formats) each warp first stages
//   its position's book in shared memory as fp32, so that an entry is one broadcast load with no
//   widenings, in blocks of 8 positions: 1.3-2.6x at 32 to 512 rows (H200, with each distance
//   starting from its first square, entry_distance).
// - Where x has the books' 16-bit type (or is bf16 into fp16 books), 4-element vectors (CQ-2)
//   take the tensor-core form instead (vq_encode_rows_tc_kernel): approximate distances of 16
//   rows by 8 entries from one m16n8k8 product, each row's nearest entry taken where the
//   runner-up is past a proven error bound and scanned exactly otherwise, so the same codes: from
//   16 rows in the launch (K and V of 8 rows), 1.14-1.41x faster than the staged form from 64
//   rows and 1.10-2.03x than the book-resident form at 16 and 32 rows of an H200
//   (bench/results/h200-5a9c1a2-vq-encode.txt), 1.14x at K and V of 8 rows.
// - 2-element vectors from 8 rows on take 16 lanes per vector (two vectors a warp, blocks of 512
//   threads) where the book-resident form below does not take them (row scopes or scales, other
//   index widths): 8 rows of 4096 are one wave of warps instead of two, 11.5 -> 8.7 us on an H200
//   for CQ-4 when it ran them (8 lanes per vector, four vectors a warp, measured too: 11.2 us).
// - A decode step's rows at batches above one (from 4 rows in the launch, 2 of K and V, below the
//   row-parallel form) of one residual of 8-bit indices and 2- or 4-element vectors take the
//   book-resident form (vq_encode_resident_kernel): each lane group keeps its vector position's
//   book in registers and encodes the block's rows two or four at a time. The warp-per-vector
//   kernel reads a position's 2 KB book again for every row (8 rows of CQ-2 at K = 4096: 16 MB
//   from the L2, which bound it); this form reads it once per block, before the wait: 4 rows
//   1.12-1.33x, 8 rows 1.26-1.42x, K and V of 2 to 8 rows 1.17-1.93x, 32 rows of CQ-2 1.31-1.84x
//   (H200).
// - Under qf_ctx_set_pdl the kernels launch as programmatic dependents and wait for the kernel
//   before (griddepcontrol.wait; a no-op otherwise) at their start, the book-resident and staged
//   forms after reading their books (no decode step writes them): what they save is the gap
//   between the kernels (docs/VQ.md).
// - By slot (qf_vq_encode_slots): row i goes to code row slots[i] (read on the device, after the
//   wait), which is also its row of the codebooks' matrix; a negative slot or one past the codes
//   skips the row. Each x row is still one block's (warp per vector) or one lane's (row-parallel),
//   so the work and the codes are the same as qf_vq_encode's for that row.
// - By the lengths (qf_cuda_vq_encode_append, vq_encode.h: the fallback of
//   qf_vq_attention_decode_append): the K and V pair kernels with row b going to batch entry b's
//   new token, its row found on the device from kv_lens and the block table after the wait, where
//   a kernel of its own wrote slots for them before (the one call with grouped heads was then
//   0.95-0.98x the two calls, now 0.99-1.00x; docs/VQ.md).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/vq/vq_common.cuh"
#include "cuda/vq/vq_encode.h"
#include "cuda/vq/vq_nearest.cuh"
#include "cuda/vq/vq_rows.cuh"

namespace {

const char kOp[] = "qf_vq_encode";
constexpr int kVecs = 32;          // vectors per block: 32 indices of `bits` bits fill `bits` words
constexpr int kSmallVecs = 8;      // or, for one row of few vectors, 8 (bits a multiple of 4)
constexpr int kStagedVecs = 8;     // vector positions per block of the staged row-parallel form
constexpr int kThreads = 1024;     // a block of the warp-per-vector and row-parallel kernels
constexpr int kMaxVs = 16;     // the format's largest vector size
constexpr int kMaxR = 4;       // and residual count

struct vq_encode_params {
  const void *x;          // [T, K], row pitch x_ld
  const uint16_t *books;  // [R, n_books, entries, vs]
  uint32_t *codes;        // [R, out_rows, row_words]
  float *scales;          // [out_rows] or NULL
  const int32_t *slots;   // [rows]: x row i's code row, or NULL: row i (out_rows = rows)
  int64_t x_ld, row0, rows, out_rows, n_books;
  int x_dtype, entry_bf16;
  int K, vectors, vs, bits, residuals, entries;
  int scope_rows, books_per_row, vectors_per_book;
  uint32_t row_words;
};

// Where x row i goes, a template parameter of the kernels (kRows), so that qf_vq_encode's code
// does not carry the slots (read at run time, they made its row-parallel CQ-4 kernel 7-8% slower
// on an H200): row i (kRowsOwn), slots[i] (kRowsSlots: qf_vq_encode_slots, qf_vq_encode_kv_slots),
// or batch entry i's new token (kRowsAppend: qf_cuda_vq_encode_append, vq_encode.h).
constexpr int kRowsOwn = 0, kRowsSlots = 1, kRowsAppend = 2;

// Entry b's new token's code row, or -1 (vq_encode.h; the attention's rule, vq_rows.cuh). A call,
// not inlined: inlined into every store of the pair kernels, with the loops versioned on its
// branches, it made the book-resident and tensor-core kernels a fifth longer (76 -> 96 KB, 100 ->
// 122 KB of sm_90a code, each block running its half once, straight through) and 1.3-1.5x slower
// at the same bytes and instructions (H200, Nsight Compute); called, they are within 1.5% of the
// by-slot kernels' size.
__device__ __noinline__ int64_t appended_row(const qf_vq_append_rows &a, int64_t b) {
  const int64_t len = vq_attn_len(a.kv_lens, a.seq_len, b);
  return len == 0 ? -1 : vq_attn_row(a, b, len - 1);
}

// x row i's code row (and with slots or an append its row of the codebooks' matrix), or -1 where
// the row is skipped (a negative slot, one past the codes, an entry with no new token). `at`: the
// append's rows (kRowsAppend), a kernel parameter of the pair kernels apart from p (as a member of
// vq_encode_params, or of a type derived from it, it changed the code of the other kernels: ptxas
// gave the book-resident pair kernel twice the registers).
template <int kRows>
__device__ __forceinline__ int64_t out_row(const vq_encode_params &p, const qf_vq_append_rows *at, int64_t i) {
  if constexpr (kRows == kRowsOwn) return i;
  int64_t s;
  if constexpr (kRows == kRowsSlots) s = p.slots[i];
  else s = appended_row(*at, i);
  return s < p.out_rows ? s : -1;
}

__device__ __forceinline__ float entry_f32(const vq_encode_params &p, uint16_t h) {
  return p.entry_bf16 ? __uint_as_float(static_cast<uint32_t>(h) << 16) : __half2float(__ushort_as_half(h));
}

// The kV values of entry `e` (those past vs read as 0): one 4-, 8- or 16-byte load for
// KVS = 2, 4, 8 (the launcher checks the books' alignment), element by element for KVS = 0.
template <int KVS, int kV>
__device__ __forceinline__ void load_entry(const vq_encode_params &p, const uint16_t *e, float (&out)[kV]) {
  uint16_t h[kV];
  if constexpr (KVS == 2) {
    *reinterpret_cast<uint32_t *>(h) = *reinterpret_cast<const uint32_t *>(e);
  } else if constexpr (KVS == 4) {
    *reinterpret_cast<uint2 *>(h) = *reinterpret_cast<const uint2 *>(e);
  } else if constexpr (KVS == 8) {
    *reinterpret_cast<uint4 *>(h) = *reinterpret_cast<const uint4 *>(e);
  } else {
#pragma unroll
    for (int c = 0; c < kV; c++) h[c] = c < p.vs ? e[c] : uint16_t(0);
  }
#pragma unroll
  for (int c = 0; c < kV; c++) out[c] = entry_f32(p, h[c]);
}

template <int KVS, int kV>
__device__ __forceinline__ float entry_distance(const vq_encode_params &p, const uint16_t *entry, const float (&v)[kV],
                                                int vs) {
  float w[kV];
  load_entry<KVS>(p, entry, w);
  return distance(w, v, vs);
}

// Word w of the words that n indices of `bits` bits fill (bits [32 w, 32 w + 32) of them), the
// indices at idx[0], idx[stride], ...
__device__ __forceinline__ uint32_t packed_word(const uint32_t *idx, int stride, int w, int bits, int n = kVecs) {
  const int first = (32 * w) / bits, last = min((32 * w + 31) / bits, n - 1);
  uint32_t word = 0u;
  for (int jl = first; jl <= last; jl++) {
    const int pos = jl * bits - 32 * w;  // may be negative for the index that starts in the word before
    const uint32_t v = idx[jl * stride];
    word |= pos >= 0 ? v << pos : v >> -pos;
  }
  return word;
}

// The row's scale as the CPU computes it: sqrt(sum x^2 / K) in fp64, to fp32 (1 for a zero row),
// by a block of kT threads.
template <int kT>
__device__ float row_scale(const vq_encode_params &p, const void *row, double *red) {
  double ss = 0.0;
  for (int k = threadIdx.x; k < p.K; k += kT) {
    const double v = vq_load_as_f32(row, p.x_dtype, k);
    ss = __fma_rn(v, v, ss);  // v * v is exact in fp64
  }
  for (int d = 16; d > 0; d >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, d);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kT / 32; w++) total += red[w];
  return total > 0.0 ? __double2float_rn(__dsqrt_rn(total / static_cast<double>(p.K))) : 1.0f;
}

// The warp-per-vector kernels' work for the tensors of p. KVS: the vector size when it is 2, 4 or 8
// (registers and loads sized for it), else 0. kLanes: lanes per vector (32: a warp; 16: two
// vectors a warp), so a block of kBV vectors (32, or kSmallVecs for one row of few vectors, where
// the launcher checks that kBV indices fill whole words) has kBV kLanes threads.
template <int KVS, int kLanes, int kRows, int kBV>
__device__ __forceinline__ void encode_vectors(const vq_encode_params &p, const qf_vq_append_rows *at = nullptr) {
  constexpr int kV = KVS ? KVS : kMaxVs;
  constexpr int kT = kBV * kLanes;
  const int vs = KVS ? KVS : p.vs;
  __shared__ uint32_t idx_s[kMaxR][kBV];
  __shared__ double red[kT / 32];
  const int bwords = kBV * p.bits / 32;  // the code words of the block's indices
  const int lane = static_cast<int>(threadIdx.x) % 32, sub = lane % kLanes;
  const int jl = static_cast<int>(threadIdx.x) / kLanes;  // this lane group's vector of the block
  const int j0 = blockIdx.x * kBV;
  griddep_wait();  // (qf_ctx_set_pdl: the kernel before may have written x and still read the codes)

  for (int64_t i = blockIdx.y; i < p.rows; i += gridDim.y) {
    const int64_t out = out_row<kRows>(p, at, i);  // (the same for the whole block)
    if (out < 0) continue;
    const void *xrow = static_cast<const char *>(p.x) + i * p.x_ld * (p.x_dtype == QF_F32 ? 4 : 2);
    const float s = p.scales ? row_scale<kT>(p, xrow, red) : 1.0f;
    if (p.scales && blockIdx.x == 0 && threadIdx.x == 0) p.scales[out] = s;

    {
      // Past the row: zero bits; the group still scans the row's last vector, so that every lane
      // of the warp takes part in the shuffles.
      const bool past = j0 + jl >= p.vectors;
      const int j = past ? p.vectors - 1 : j0 + jl;
      float v[kV];
#pragma unroll
      for (int c = 0; c < kV; c++) v[c] = c < vs ? __fdiv_rn(vq_load_as_f32(xrow, p.x_dtype, j * vs + c), s) : 0.0f;
      const int64_t scope = p.scope_rows ? (kRows != kRowsOwn ? out : p.row0 + i) / p.scope_rows : 0;
      const int64_t book = scope * p.books_per_row + j / p.vectors_per_book;
      for (int r = 0; r < p.residuals; r++) {
        const uint16_t *b = p.books + (static_cast<int64_t>(r) * p.n_books + book) * p.entries * vs;
        const int best = nearest_by_group<kLanes>(
            [&](int e) { return entry_distance<KVS>(p, b + static_cast<int64_t>(e) * vs, v, vs); }, p.entries, lane, sub);
        if (sub == 0) idx_s[r][jl] = past ? 0u : static_cast<uint32_t>(best);
        if (r + 1 == p.residuals) break;  // no residual left to subtract it from
        float w[kV];
        load_entry<KVS>(p, b + static_cast<int64_t>(best) * vs, w);
#pragma unroll
        for (int c = 0; c < kV; c++)
          if (c < vs) v[c] = __fsub_rn(v[c], w[c]);
      }
    }
    __syncthreads();

    // Pack: word w of the block holds bits [32 w, 32 w + 32) of its kBV indices.
    for (int t = threadIdx.x; t < p.residuals * bwords; t += kT) {
      const int r = t / bwords, w = t - r * bwords;
      const uint32_t word = packed_word(idx_s[r], 1, w, p.bits, kBV);
      const uint32_t gw = static_cast<uint32_t>(blockIdx.x) * static_cast<uint32_t>(bwords) + static_cast<uint32_t>(w);
      if (gw < p.row_words) p.codes[(static_cast<int64_t>(r) * p.out_rows + out) * p.row_words + gw] = word;
    }
    // The row's padding words past the last block's: zero, as the CPU leaves them.
    if (blockIdx.x == gridDim.x - 1) {
      const uint32_t tail = gridDim.x * static_cast<uint32_t>(bwords), n = p.row_words > tail ? p.row_words - tail : 0u;
      for (uint32_t t = threadIdx.x; t < p.residuals * n; t += kT)
        p.codes[(static_cast<int64_t>(t / n) * p.out_rows + out) * p.row_words + tail + t % n] = 0u;
    }
    __syncthreads();  // idx_s and red are reused by the next row
  }
}

// The blocks of 32 vectors and sizes 2 and 4 run two to an SM (32 registers); the small blocks have
// no such floor: held to 32 registers, their lanes' 8 entries were not all in flight at once (CQ-2,
// 1 row of 4096: 4.9 us against 3.7 on an H200).
template <int KVS, int kLanes, int kBV>
constexpr int encode_min_blocks() {
  return kBV < kVecs ? 1 : (KVS == 2 || KVS == 4 ? 2048 : 1024) / (kBV * kLanes);
}

template <int KVS, int kLanes, int kRows, int kBV = kVecs>
__global__ void __launch_bounds__(kBV * kLanes, encode_min_blocks<KVS, kLanes, kBV>())
    vq_encode_kernel(const vq_encode_params p) {
  encode_vectors<KVS, kLanes, kRows, kBV>(p);
}

// qf_vq_encode_kv_slots: the K tensors' blocks (blockIdx.z 0) and the V tensors' (1) in one grid.
// Each branch reads its own parameter block, so the one-tensor kernels keep their code (pointers
// picked from arrays of two by blockIdx.z, indexed or selected, made the 32-register kernels'
// code a quarter longer and 3-6% slower at 8 rows on an H200).
template <int KVS, int kLanes, int kRows, int kBV = kVecs>
__global__ void __launch_bounds__(kBV * kLanes, encode_min_blocks<KVS, kLanes, kBV>())
    vq_encode_kv_kernel(const vq_encode_params k, const vq_encode_params v,
                        const qf_vq_append_rows at) {
  if (blockIdx.z == 0)
    encode_vectors<KVS, kLanes, kRows, kBV>(k, &at);
  else
    encode_vectors<KVS, kLanes, kRows, kBV>(v, &at);
}

// The book-resident form, for appends of several rows where every row takes the same codebooks,
// one residual of 8-bit indices, vectors of 2 or 4 elements and no row scale (a decode step's rows
// into a CQ cache): lane group jl of a block keeps its vector position's book in registers (lane
// `sub` entries sub, sub + kLanes, ..., as the warp-per-vector kernel scans them), loaded once
// before the wait (no decode step writes the books), and then encodes that position of the
// block's rows kG (2, 4 or 8) at a time, the rows' scans and reductions interleaved. Per row the
// same operations in the same order as the warp-per-vector kernel, so the same codes; where that
// kernel reads the position's book again for every row (from L2: 8 rows of CQ-2 at K = 4096 read
// 16 MB of books), this one reads it once per block. 16 lanes per vector for 2 elements (16
// entries each), 32 for 4 (8 each); blocks of kResidentThreads.
constexpr int kResidentThreads = 256;
__host__ __device__ constexpr int resident_lanes(int vs) { return vs == 2 ? 16 : 32; }

template <int KVS, int kRows, int kG>
__device__ __forceinline__ void encode_resident(const vq_encode_params &p, const qf_vq_append_rows *at = nullptr) {
  constexpr int kLanes = resident_lanes(KVS);
  constexpr int kE = 256 / kLanes;                     // entries per lane
  constexpr int kBV = kResidentThreads / kLanes;       // vectors per block: kBV * 8 bits are whole words
  constexpr int kWords = kBV * 8 / 32;
  __shared__ uint32_t idx_s[kG][kBV];
  const int lane = static_cast<int>(threadIdx.x) % 32, sub = lane % kLanes;
  const int jl = static_cast<int>(threadIdx.x) / kLanes, j0 = blockIdx.x * kBV;
  const bool past = j0 + jl >= p.vectors;  // (scans the row's last vector, so that its group takes part)
  const int j = past ? p.vectors - 1 : j0 + jl;
  const uint16_t *b = p.books + static_cast<int64_t>(j / p.vectors_per_book) * 256 * KVS;
  float w[kE][KVS];
#pragma unroll
  for (int q = 0; q < kE; q++) load_entry<KVS>(p, b + (sub + q * kLanes) * KVS, w[q]);
  griddep_wait();  // (as in vq_encode_kernel)

  const int esz = p.x_dtype == QF_F32 ? 4 : 2;
  for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kG; i0 < p.rows; i0 += static_cast<int64_t>(gridDim.y) * kG) {
    // (rows past the end scan zeros, rows of skipped slots their x: neither is stored)
    float v[kG][KVS];
#pragma unroll
    for (int g = 0; g < kG; g++) {
      const bool in = i0 + g < p.rows;
      const void *xrow = static_cast<const char *>(p.x) + (in ? i0 + g : 0) * p.x_ld * esz;
#pragma unroll
      for (int c = 0; c < KVS; c++) v[g][c] = in ? vq_load_as_f32(xrow, p.x_dtype, j * KVS + c) : 0.0f;
    }
    int best[kG];  // each row's first smallest non-NaN distance of this lane
    float best_d[kG];
    bool nan0[kG];
#pragma unroll
    for (int g = 0; g < kG; g++) best[g] = -1, best_d[g] = INFINITY, nan0[g] = false;
#pragma unroll
    for (int q = kE - 1; q >= 0; q--)  // (entry 0 for the group's first lane at q = 0)
      nearest_step_down(w[q], v, KVS, sub + q * kLanes, q == 0, best, best_d, nan0);
#pragma unroll
    for (int o = kLanes / 2; o > 0; o /= 2)
#pragma unroll
      for (int g = 0; g < kG; g++) nearest_reduce(best[g], best_d[g], o);
#pragma unroll
    for (int g = 0; g < kG; g++) {
      best[g] = nearest_pick(nan0[g], best[g], lane, sub);
      if (sub == 0) idx_s[g][jl] = past ? 0u : static_cast<uint32_t>(best[g]);
    }
    __syncthreads();

    // Pack each row's kBV indices into its kWords words; the last block of a row also zeroes the
    // row's padding words.
    const uint32_t tail = gridDim.x * static_cast<uint32_t>(kWords), pad = p.row_words > tail ? p.row_words - tail : 0u;
    const uint32_t per_row = kWords + (blockIdx.x == gridDim.x - 1 ? pad : 0u);
    for (uint32_t t = threadIdx.x; t < kG * per_row; t += blockDim.x) {
      const int g = static_cast<int>(t / per_row);
      const uint32_t w = t % per_row;
      const int64_t o = i0 + g < p.rows ? out_row<kRows>(p, at, i0 + g) : -1;
      if (o < 0) continue;
      const uint32_t gw = w < kWords ? blockIdx.x * static_cast<uint32_t>(kWords) + w : tail + (w - kWords);
      const uint32_t word = w < kWords ? packed_word(idx_s[g], 1, static_cast<int>(w), 8, kBV) : 0u;
      if (gw < p.row_words) p.codes[o * p.row_words + gw] = word;
    }
    __syncthreads();  // idx_s is reused by the next rows
  }
}

template <int KVS, int kRows, int kG>
__global__ void __launch_bounds__(kResidentThreads) vq_encode_resident_kernel(const vq_encode_params p) {
  encode_resident<KVS, kRows, kG>(p);
}

template <int KVS, int kRows, int kG>
__global__ void __launch_bounds__(kResidentThreads) vq_encode_resident_kv_kernel(const vq_encode_params k,
                                                                                const vq_encode_params v,
                                                                                const qf_vq_append_rows at) {
  if (blockIdx.z == 0)
    encode_resident<KVS, kRows, kG>(k, &at);
  else
    encode_resident<KVS, kRows, kG>(v, &at);
}

// The row-parallel forms' stores, for a block of kP vector positions and the 32 rows from i0,
// whose indices are idx_s[residual][position][row]: packed as the warp-per-vector kernel packs
// them (word w of the block holds bits [32 w, 32 w + 32) of its kP indices of a row, kP indices of
// `bits` bits filling whole words); the last block of a row also zeroes the row's padding words.
template <int kRows, int kP>
__device__ __forceinline__ void store_rows(const vq_encode_params &p, const qf_vq_append_rows *at, const uint32_t (&idx_s)[kMaxR][kP][33],
                                           int64_t i0) {
  const int wpb = kP * p.bits / 32, words = p.residuals * wpb;
  for (int t = threadIdx.x; t < 32 * words; t += kP * 32) {
    const int row = t / words, r = (t % words) / wpb, w = t % wpb;
    const int64_t ii = i0 + row, out = ii < p.rows ? out_row<kRows>(p, at, ii) : -1;
    if (out < 0) continue;
    const uint32_t word = packed_word(&idx_s[r][0][row], 33, w, p.bits, kP);
    const uint32_t gw = static_cast<uint32_t>(blockIdx.x) * static_cast<uint32_t>(wpb) + static_cast<uint32_t>(w);
    if (gw < p.row_words) p.codes[(static_cast<int64_t>(r) * p.out_rows + out) * p.row_words + gw] = word;
  }
  if (blockIdx.x == gridDim.x - 1) {
    const uint32_t tail = gridDim.x * static_cast<uint32_t>(wpb), n = p.row_words > tail ? p.row_words - tail : 0u;
    for (uint32_t t = threadIdx.x; t < 32u * p.residuals * n; t += kP * 32) {
      const int64_t ii = i0 + t / (p.residuals * n), out = ii < p.rows ? out_row<kRows>(p, at, ii) : -1;
      const uint32_t rest = t % (p.residuals * n);
      if (out >= 0) p.codes[(static_cast<int64_t>(rest / n) * p.out_rows + out) * p.row_words + tail + rest % n] = 0u;
    }
  }
}

// The row-parallel form, for appends of many rows (a prefill chunk) where every row takes the
// same codebooks and no row scale (fmt->scope_rows 0, no row_scale): a block takes 32 rows x 32
// vector positions, warp w position j0 + w and lane l row i0 + l, so that at each step the warp's
// lanes read the same entry (one broadcast load) and each lane scans the whole book in order,
// keeping the first strictly smallest distance: the CPU's rule as it stands, with no reduction
// across lanes (NaN distances never replace; a NaN at entry 0 keeps entry 0). The same fp32
// operations in the same order as the warp-per-vector kernel, so the same codes.
// kStaged (one residual of 256 entries, KVS 2 or 4): each warp first copies its position's book
// into shared memory as fp32 (the dynamic shared memory, kP x 256 x KVS floats), so that the
// scan reads an entry with one 8- or 16-byte broadcast load and no widenings. kP: vector
// positions (warps) per block, whose kP indices of `bits` bits fill whole words.
template <int KVS, int kRows, bool kStaged = false, int kP = kVecs>
__device__ __forceinline__ void encode_rows(const vq_encode_params &p, const qf_vq_append_rows *at = nullptr) {
  constexpr int kV = KVS ? KVS : kMaxVs;
  const int vs = KVS ? KVS : p.vs;
  __shared__ uint32_t idx_s[kMaxR][kP][33];  // [residual][position][row] (+1: the pack reads along positions)
  extern __shared__ float4 staged_raw[];  // (kStaged)
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int j = blockIdx.x * kP + warp;
  const int64_t book = j < p.vectors ? j / p.vectors_per_book : 0;
  const int esz = p.x_dtype == QF_F32 ? 4 : 2;
  float *mine = reinterpret_cast<float *>(staged_raw) + warp * 256 * KVS;
  if constexpr (kStaged) {  // (before the wait: no decode step writes the books)
    const uint16_t *b = p.books + book * 256 * KVS;
    for (int e = lane; e < 256; e += 32) {
      float w[KVS];
      load_entry<KVS>(p, b + e * KVS, w);
#pragma unroll
      for (int c = 0; c < KVS; c++) mine[e * KVS + c] = w[c];
    }
    __syncwarp();
  }
  griddep_wait();  // (as in vq_encode_kernel)

  for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * 32; i0 < p.rows; i0 += static_cast<int64_t>(gridDim.y) * 32) {
    const int64_t i = i0 + lane;
    if (j < p.vectors && i < p.rows && out_row<kRows>(p, at, i) >= 0) {
      const void *xrow = static_cast<const char *>(p.x) + i * p.x_ld * esz;
      float v[kV];
#pragma unroll
      for (int c = 0; c < kV; c++) v[c] = c < vs ? vq_load_as_f32(xrow, p.x_dtype, j * vs + c) : 0.0f;
      for (int r = 0; r < p.residuals; r++) {
        const uint16_t *b = p.books + (static_cast<int64_t>(r) * p.n_books + book) * p.entries * vs;
        float best_d;
        int best = 0;
        if constexpr (kStaged) {
          float w0[KVS];
#pragma unroll
          for (int c = 0; c < KVS; c++) w0[c] = mine[c];
          best_d = distance(w0, v, vs);
#pragma unroll 4
          for (int e = 1; e < 256; e++) {
            float w[KVS];
            if constexpr (KVS == 4) {
              const float4 t = reinterpret_cast<const float4 *>(mine)[e];
              w[0] = t.x, w[1] = t.y, w[2] = t.z, w[3] = t.w;
            } else {
              const float2 t = reinterpret_cast<const float2 *>(mine)[e];
              w[0] = t.x, w[1] = t.y;
            }
            const float d = distance(w, v, vs);
            if (d < best_d) best_d = d, best = e;
          }
        } else {
          best_d = entry_distance<KVS>(p, b, v, vs);
#pragma unroll 4
          for (int e = 1; e < p.entries; e++) {
            const float d = entry_distance<KVS>(p, b + static_cast<int64_t>(e) * vs, v, vs);
            if (d < best_d) best_d = d, best = e;
          }
        }
        idx_s[r][warp][lane] = static_cast<uint32_t>(best);
        if (r + 1 == p.residuals) break;  // no residual left to subtract it from
        float w[kV];
        load_entry<KVS>(p, b + static_cast<int64_t>(best) * vs, w);
#pragma unroll
        for (int c = 0; c < kV; c++)
          if (c < vs) v[c] = __fsub_rn(v[c], w[c]);
      }
    } else {
      for (int r = 0; r < p.residuals; r++) idx_s[r][warp][lane] = 0u;  // past the row: zero bits
    }
    __syncthreads();

    store_rows<kRows, kP>(p, at, idx_s, i0);
    __syncthreads();  // idx_s is reused by the next rows
  }
}

template <int KVS, int kRows>
__global__ void __launch_bounds__(kThreads, KVS == 2 || KVS == 4 ? 2 : 1) vq_encode_rows_kernel(const vq_encode_params p) {
  encode_rows<KVS, kRows>(p);
}

// The staged row-parallel kernels: blocks of kStagedVecs positions x 32 rows (16 or 32 KB of
// books for KVS 2 or 4; with the blocks of 32 positions, 64 or 128 KB, one per SM, prefill
// chunks of 512 rows ran 1.09-1.22x slower and those of 32-128 rows up to 1.67x).
template <int KVS, int kRows>
__global__ void __launch_bounds__(kStagedVecs * 32, 4) vq_encode_rows_staged_kernel(const vq_encode_params p) {
  encode_rows<KVS, kRows, true, kStagedVecs>(p);
}

template <int KVS, int kRows>
__global__ void __launch_bounds__(kStagedVecs * 32, 4) vq_encode_rows_staged_kv_kernel(const vq_encode_params k,
                                                                                        const vq_encode_params v,
                                                                                        const qf_vq_append_rows at) {
  if (blockIdx.z == 0)
    encode_rows<KVS, kRows, true, kStagedVecs>(k, &at);
  else
    encode_rows<KVS, kRows, true, kStagedVecs>(v, &at);
}

// A float rounded to the 16-bit type of an entry tag (vq_f16, vq_bf16), as raw bits (the inverse
// of vq_widen_lo).
__device__ __forceinline__ uint32_t vq_narrow(vq_f16, float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ uint32_t vq_narrow(vq_bf16, float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// The two smallest of keys seen, (b, s), after key k: three FMNMX.
__device__ __forceinline__ void keep_two(float &b, float &s, float k) {
  s = fminf(s, fmaxf(b, k));
  b = fminf(b, k);
}

// The tensor-core row-parallel form: the staged form's work (a warp per vector position, 32 rows
// of a block at a time) for one residual of 256 entries of 4 elements (CQ-2) when x has the
// books' 16-bit type (tag E), or x is bf16 into fp16 books (tag X) (v converted to fp16: exact from 2^-17 to
// 65280; rows with an element of 65536 or more are scanned exactly, and the bound gains a term
// for the smaller elements' rounding). The position's book is the B operand of 32 m16n8k8 products (n-tile nt:
// entries 8 nt .. 8 nt + 7), 16 rows of x their A operand, so that a product gives
// M = |w|^2 / 2 - v.w + c (c a constant of the row) for 16 rows and 8 entries: k runs over the 4
// elements (A: v, B: -w, both exact), then c (A: c, B: 1), then |w|^2 / 2 in three 16-bit parts
// (A: 1, B: the parts). Each M differs from (|v - w|^2 - |v|^2) / 2 + c by the tensor cores' fp32
// sums and the parts' rounding only, so the entry that minimizes it is the nearest up to those
// errors. Each lane keeps, per row and column parity, the smallest and second-smallest keys (M
// with its low 8 mantissa bits replaced by the entry: one LOP3 and three FMNMX a value), the
// quads merge them, and a row takes the smallest key's entry when the second is more than G past
// it; otherwise (a near tie, or inputs outside the bound's range: NaN, Inf, |v|^2 + max |w|^2 >=
// 2^100, fp16 half-norms past 65504) the warp scans the row's book exactly (nearest_by_group). So
// every row gets the CPU's entry; docs/VQ.md derives G. c = |v|^2 / 2 rounded to E (at most 65504
// for fp16) shifts every entry of the row alike and brings the keys near |v - w|^2 / 2, so that
// the 8 replaced bits cost little against G.
// 2-element vectors (CQ-4) keep the staged form: their exact scan is shorter (2 differences per
// entry), and this form, whose cost per entry does not depend on the vector size, ran them
// 0.53-0.66x as fast on an H200 (docs/VQ.md).
constexpr int kTcWarps = 8;      // vector positions (warps) per block
constexpr int kTcRowsMin = 16;   // rows in the launch (of K and V together) from which the launcher takes it

template <typename E, typename X, int kRows>
__device__ __forceinline__ void encode_rows_tc(const vq_encode_params &p, const qf_vq_append_rows *at = nullptr) {
  using mma_t = std::conditional_t<std::is_same_v<E, vq_bf16>, __nv_bfloat16, __half>;
  constexpr bool kHalf = std::is_same_v<E, vq_f16>;
  constexpr bool kMixed = !std::is_same_v<E, X>;  // (bf16 x, fp16 books: v converted, below)
  constexpr uint32_t kOne = kHalf ? 0x3C00u : 0x3F80u;
  __shared__ uint32_t idx_s[kMaxR][kTcWarps][33];  // ([0][position][row]: store_rows' layout)
  __shared__ uint32_t bfrag_s[kTcWarps][32][32];   // [warp][n-tile][lane]: the B fragments
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;  // the fragments' row (column of B) and k pair
  const int j0 = blockIdx.x * kTcWarps + warp;
  const bool live = j0 < p.vectors;
  const int j = live ? j0 : p.vectors - 1;  // (a position past the row scans the last one, stores nothing)
  const uint16_t *book = p.books + static_cast<int64_t>(j / p.vectors_per_book) * 256 * 4;

  // The B fragments (lane (g, t): k = 2 t, 2 t + 1 of entry 8 nt + g), read before the wait (no
  // decode step writes the books); W = max |w|^2 (fp32); `bad` where the bound does not apply.
  // In shared memory, so that the scan's loop need not be unrolled whole (with the fragments in
  // registers it was, and spilled at 128 registers). This loop is unrolled whole, so that the
  // book's loads are in flight together: with a book's first use a DRAM round trip each, in
  // batches of 4 they were most of a 32-row call (H200: 32 rows 10.9 -> 9.5 us, 512 rows the same).
  float W = 0.0f;
  bool bad = false;
#pragma unroll
  for (int nt = 0; nt < 32; nt++) {
    const uint2 u = *reinterpret_cast<const uint2 *>(book + (8 * nt + g) * 4);  // (two elements a word)
    const float w[4] = {vq_widen_lo(E{}, u.x), vq_widen_hi(E{}, u.x), vq_widen_lo(E{}, u.y), vq_widen_hi(E{}, u.y)};
    float n2 = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; c++) n2 = fmaf(w[c], w[c], n2);
    bad = bad || !(n2 < 0x1p100f) || (kHalf && !(0.5f * n2 <= 65504.0f));
    W = fmaxf(W, n2);
    const float half_norm = 0.5f * n2;
    const uint32_t hi = vq_narrow(E{}, half_norm);
    const float r1 = half_norm - vq_widen_lo(E{}, hi);
    const uint32_t mid = vq_narrow(E{}, r1), lo = vq_narrow(E{}, r1 - vq_widen_lo(E{}, mid));
    const uint32_t minus_w = (t == 0 ? u.x : u.y) ^ 0x80008000u;  // (the sign bits flipped)
    bfrag_s[warp][nt][lane] = t < 2 ? minus_w : t == 2 ? kOne | hi << 16 : mid | lo << 16;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) W = fmaxf(W, __shfl_xor_sync(0xffffffffu, W, o));
  bad = __any_sync(0xffffffffu, bad);
  __syncwarp();  // (the fragments' stores before the warp's loads)
  // The bound's absolute term: the parts' fp16 underflow, and with bf16 x the fp16 rounding of
  // its elements below 2^-17 (docs/VQ.md).
  const float abs_term = (kHalf ? 0x1p-22f : 0x1p-100f) + (kMixed ? 0x1p-22f * sqrtf(W) : 0.0f);
  griddep_wait();  // (as in vq_encode_kernel)

  for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * 32; i0 < p.rows; i0 += static_cast<int64_t>(gridDim.y) * 32) {
#pragma unroll 1
    for (int m = 0; m < 2 && i0 + 16 * m < p.rows; m++) {  // (a half past the rows is skipped: 16 rows 1.19-1.30x)
      // The A fragments: lane (g, t) rows g and g + 8 of the tile, k = 2 t, 2 t + 1.
      uint32_t a[2], xraw[2];  // (xraw: x's two elements as read, for the exact scans)
      float n2[2];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int64_t i = i0 + 16 * m + 8 * h + g;
        uint32_t x01 = 0u;
        if (t < 2 && i < p.rows) {
          const uint16_t *xr = reinterpret_cast<const uint16_t *>(static_cast<const char *>(p.x) + i * p.x_ld * 2);
          x01 = xr[j * 4 + 2 * t] | static_cast<uint32_t>(xr[j * 4 + 2 * t + 1]) << 16;
        }
        xraw[h] = x01;
        const float v0 = vq_widen_lo(X{}, x01), v1 = vq_widen_hi(X{}, x01);
        if (kMixed) x01 = vq_narrow(E{}, v0) | vq_narrow(E{}, v1) << 16;  // (exact from 2^-17 to 65280)
        float s = fmaf(v1, v1, v0 * v0);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);  // (the same sum in the quad's four lanes)
        n2[h] = s;
        const uint32_t c = vq_narrow(E{}, fminf(0.5f * s, kHalf ? 65504.0f : 0x1p126f));
        a[h] = t < 2 ? x01 : t == 2 ? c | kOne << 16 : kOne | kOne << 16;
      }
      // The scan: per n-tile one product, then per value its key (even entries: the odd column's
      // keys take their low bit after the scan) and the two smallest of its row and parity.
      float best[4] = {INFINITY, INFINITY, INFINITY, INFINITY}, second[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
#pragma unroll 8
      for (int nt = 0; nt < 32; nt++) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_m16n8k8(mma_t{}, d, a, bfrag_s[warp][nt][lane]);
        const uint32_t e = 8 * nt + 2 * t;
#pragma unroll
        for (int q = 0; q < 4; q++) keep_two(best[q], second[q], __uint_as_float((__float_as_uint(d[q]) & 0xFFFFFF00u) | e));
      }
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float b = best[2 * h], s2 = second[2 * h];
        keep_two(b, s2, __uint_as_float(__float_as_uint(best[2 * h + 1]) | 1u));
        s2 = fminf(s2, __uint_as_float(__float_as_uint(second[2 * h + 1]) | 1u));
#pragma unroll
        for (int o = 1; o < 4; o *= 2) {  // (the quad's four lanes: the row's 256 entries)
          const float ob = __shfl_xor_sync(0xffffffffu, b, o), os = __shfl_xor_sync(0xffffffffu, s2, o);
          s2 = fminf(fminf(s2, os), fmaxf(b, ob));
          b = fminf(b, ob);
        }
        const int row = 16 * m + 8 * h + g;
        const int64_t i = i0 + row;
        const float S = n2[h] + W;
        const bool in_range = S < 0x1p100f && (!kMixed || n2[h] < 0x1p32f);  // (bf16 x: every |v| < 65536)
        const bool sure = !bad && in_range && s2 - b > S * 0x1p-15f + fabsf(b) * 0x1p-13f + abs_term;
        const bool stored = live && i < p.rows && out_row<kRows>(p, at, i) >= 0;
        if (t == 0) idx_s[0][warp][row] = live ? __float_as_uint(b) & 0xFFu : 0u;  // (past the row: zero bits)
        // The rows left undecided, one at a time by the whole warp: v from its quad's lanes 0
        // and 1, lane l the entries l, l + 32, ... from the B fragments (-w: the sign bits
        // flipped back), the CPU's rule.
        for (uint32_t todo = __ballot_sync(0xffffffffu, t == 0 && stored && !sure); todo; todo &= todo - 1) {
          const int q = __ffs(todo) - 1, r = 16 * m + 8 * h + q / 4;
          const uint32_t v01 = __shfl_sync(0xffffffffu, xraw[h], q), v23 = __shfl_sync(0xffffffffu, xraw[h], q + 1);
          const float v[4] = {vq_widen_lo(X{}, v01), vq_widen_hi(X{}, v01), vq_widen_lo(X{}, v23), vq_widen_hi(X{}, v23)};
          const int e = nearest_by_group<32>(
              [&](int ee) {
                const uint32_t w01 = bfrag_s[warp][ee / 8][ee % 8 * 4] ^ 0x80008000u,
                               w23 = bfrag_s[warp][ee / 8][ee % 8 * 4 + 1] ^ 0x80008000u;
                const float w[4] = {vq_widen_lo(E{}, w01), vq_widen_hi(E{}, w01), vq_widen_lo(E{}, w23),
                                    vq_widen_hi(E{}, w23)};
                return distance(w, v, 4);
              },
              256, lane, lane);
          if (lane == q) idx_s[0][warp][r] = static_cast<uint32_t>(e);  // (the lane that wrote it above)
        }
      }
    }
    __syncthreads();
    store_rows<kRows, kTcWarps>(p, at, idx_s, i0);
    __syncthreads();  // idx_s is reused by the next rows
  }
}

// Four blocks per SM (64 registers, no spills): 3-4% faster from 512 rows than three (80
// registers; H200, `h200-dev-vq-encode-tc-occupancy-ab.txt`).
template <typename E, typename X, int kRows>
__global__ void __launch_bounds__(kTcWarps * 32, 4) vq_encode_rows_tc_kernel(const vq_encode_params p) {
  encode_rows_tc<E, X, kRows>(p);
}

template <typename E, typename X, int kRows>
__global__ void __launch_bounds__(kTcWarps * 32, 4) vq_encode_rows_tc_kv_kernel(const vq_encode_params k,
                                                                                 const vq_encode_params v,
                                                                                 const qf_vq_append_rows at) {
  if (blockIdx.z == 0)
    encode_rows_tc<E, X, kRows>(k, &at);
  else
    encode_rows_tc<E, X, kRows>(v, &at);
}

template <int KVS, int kRows>
__global__ void __launch_bounds__(kThreads, KVS == 2 || KVS == 4 ? 2 : 1)
    vq_encode_rows_kv_kernel(const vq_encode_params k, const vq_encode_params v,
                             const qf_vq_append_rows at) {
  if (blockIdx.z == 0)
    encode_rows<KVS, kRows>(k, &at);
  else
    encode_rows<KVS, kRows>(v, &at);
}

using encode_kernel_t = void (*)(vq_encode_params);
using encode_kv_kernel_t = void (*)(vq_encode_params, vq_encode_params, qf_vq_append_rows);

// The encode kernel of a form (row-parallel, 16 lanes per vector, a warp per vector in blocks of
// kSmallVecs vectors (`small`, KVS buckets 1 and 2 only) or of kVecs) and a KVS bucket k (0: any
// vector size or unaligned books; 1, 2, 3: sizes 2, 4, 8).
template <int kRows>
encode_kernel_t pick_encode(bool rows_form, bool half_warps, bool small, int k) {
  const encode_kernel_t per_vector[] = {vq_encode_kernel<0, 32, kRows>, vq_encode_kernel<2, 32, kRows>,
                                        vq_encode_kernel<4, 32, kRows>, vq_encode_kernel<8, 32, kRows>};
  const encode_kernel_t per_row[] = {vq_encode_rows_kernel<0, kRows>, vq_encode_rows_kernel<2, kRows>,
                                     vq_encode_rows_kernel<4, kRows>, vq_encode_rows_kernel<8, kRows>};
  if (rows_form) return per_row[k];
  if (small) return k == 1 ? vq_encode_kernel<2, 32, kRows, kSmallVecs> : vq_encode_kernel<4, 32, kRows, kSmallVecs>;
  if (half_warps) return k == 1 ? vq_encode_kernel<2, 16, kRows> : vq_encode_kernel<0, 16, kRows>;  // (unaligned books: 0)
  return per_vector[k];
}

// The same for a K and V pair.
template <int kRows>
encode_kv_kernel_t pick_encode_kv(bool rows_form, bool half_warps, bool small, int k) {
  const encode_kv_kernel_t per_vector[] = {vq_encode_kv_kernel<0, 32, kRows>, vq_encode_kv_kernel<2, 32, kRows>,
                                           vq_encode_kv_kernel<4, 32, kRows>, vq_encode_kv_kernel<8, 32, kRows>};
  const encode_kv_kernel_t per_row[] = {vq_encode_rows_kv_kernel<0, kRows>, vq_encode_rows_kv_kernel<2, kRows>,
                                        vq_encode_rows_kv_kernel<4, kRows>, vq_encode_rows_kv_kernel<8, kRows>};
  if (rows_form) return per_row[k];
  if (small) return k == 1 ? vq_encode_kv_kernel<2, 32, kRows, kSmallVecs> : vq_encode_kv_kernel<4, 32, kRows, kSmallVecs>;
  if (half_warps) return k == 1 ? vq_encode_kv_kernel<2, 16, kRows> : vq_encode_kv_kernel<0, 16, kRows>;
  return per_vector[k];
}

// The book-resident kernel of a KVS bucket (1, 2: sizes 2, 4) taking rows kg (2 or 4, and 8 for
// size 2) at a time, for one tensor and for a K and V pair.
template <int kRows>
encode_kernel_t pick_resident(int k, int kg) {
  if (k == 1 && kg == 8) return vq_encode_resident_kernel<2, kRows, 8>;
  if (k == 1) return kg == 2 ? vq_encode_resident_kernel<2, kRows, 2> : vq_encode_resident_kernel<2, kRows, 4>;
  return kg == 2 ? vq_encode_resident_kernel<4, kRows, 2> : vq_encode_resident_kernel<4, kRows, 4>;
}

template <int kRows>
encode_kv_kernel_t pick_resident_kv(int k, int kg) {
  if (k == 1 && kg == 8) return vq_encode_resident_kv_kernel<2, kRows, 8>;
  if (k == 1) return kg == 2 ? vq_encode_resident_kv_kernel<2, kRows, 2> : vq_encode_resident_kv_kernel<2, kRows, 4>;
  return kg == 2 ? vq_encode_resident_kv_kernel<4, kRows, 2> : vq_encode_resident_kv_kernel<4, kRows, 4>;
}

// The staged row-parallel kernel of a KVS bucket (1, 2: sizes 2, 4), for one tensor and for a K
// and V pair.
template <int kRows>
encode_kernel_t pick_rows_staged(int k) {
  return k == 1 ? vq_encode_rows_staged_kernel<2, kRows> : vq_encode_rows_staged_kernel<4, kRows>;
}

template <int kRows>
encode_kv_kernel_t pick_rows_staged_kv(int k) {
  return k == 1 ? vq_encode_rows_staged_kv_kernel<2, kRows> : vq_encode_rows_staged_kv_kernel<4, kRows>;
}

// The tensor-core row-parallel kernel for the books' and x's 16-bit types (both fp16, both bf16,
// or fp16 books and bf16 x), for one tensor and for a K and V pair.
template <int kRows>
encode_kernel_t pick_rows_tc(qf_dtype books, qf_dtype x) {
  if (books == QF_BF16) return vq_encode_rows_tc_kernel<vq_bf16, vq_bf16, kRows>;
  return x == QF_BF16 ? vq_encode_rows_tc_kernel<vq_f16, vq_bf16, kRows> : vq_encode_rows_tc_kernel<vq_f16, vq_f16, kRows>;
}

template <int kRows>
encode_kv_kernel_t pick_rows_tc_kv(qf_dtype books, qf_dtype x) {
  if (books == QF_BF16) return vq_encode_rows_tc_kv_kernel<vq_bf16, vq_bf16, kRows>;
  return x == QF_BF16 ? vq_encode_rows_tc_kv_kernel<vq_f16, vq_bf16, kRows> : vq_encode_rows_tc_kv_kernel<vq_f16, vq_f16, kRows>;
}

// A K and V pair's kernel: by slot, or for an append (its parameters extended by the rows' place).
qf_status launch_kv(qf_ctx *ctx, const qf_vq_append_rows *append, encode_kv_kernel_t by_slot, encode_kv_kernel_t by_append,
                    dim3 grid, dim3 block, size_t smem, const vq_encode_params &k, const vq_encode_params &v) {
  const encode_kv_kernel_t kernel = append ? by_append : by_slot;
  return qf_cuda_launch(ctx, kOp, kernel, kernel, grid, block, smem, k, v, append ? *append : qf_vq_append_rows{});
}

// n tensors' rows (n = 2: a K and V pair) at their own rows from row0, at slots, or (a pair) at
// the rows of an append.
qf_status encode(qf_ctx *ctx, int n, const qf_mat *xs, int64_t row0, const int32_t *slots, const qf_vq_append_rows *append,
                 const qf_vq_tensors *ts) {
  const qf_mat *x = &xs[0];
  const qf_vq_tensors *t = &ts[0];  // (a pair's second: the same shapes, dtypes and format)
  const qf_vq_format &f = t->fmt;
  if (t->sz.row_bytes > (INT64_C(1) << 28) || t->K > INT32_MAX / 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: rows of K=%lld are too long for 32-bit code offsets", kOp,
                   static_cast<long long>(t->K));
  vq_encode_params p = {};
  p.x = x->data;
  p.books = static_cast<const uint16_t *>(t->books);
  p.codes = reinterpret_cast<uint32_t *>(t->codes);
  p.scales = t->scales;
  p.x_ld = x->ld;
  p.slots = slots;
  p.row0 = row0;
  p.rows = x->rows;
  p.out_rows = t->N;
  p.n_books = t->sz.n_books;
  p.x_dtype = x->dtype;
  p.entry_bf16 = f.entry_dtype == QF_BF16;
  p.K = static_cast<int>(t->K);
  p.vectors = static_cast<int>(t->K / f.vector_size);
  p.vs = f.vector_size;
  p.bits = f.index_bits;
  p.residuals = f.residuals;
  p.entries = static_cast<int>(t->sz.entries);
  p.scope_rows = f.scope_rows;
  p.books_per_row = static_cast<int>(t->sz.books_per_row);
  p.vectors_per_book = f.scope_cols ? f.scope_cols / f.vector_size : p.vectors;
  p.row_words = static_cast<uint32_t>(t->sz.row_bytes / 4);

  // A block per 32 vectors of a row, or with the row-parallel form (one row scope, no row scales)
  // per 32 vectors of 32 rows. The row-parallel form takes about one lane's scan of the whole book
  // until its blocks fill the GPU, the warp-per-vector kernel a time that grows with the rows: the
  // first is faster from about 16 vs entries / 256 rows on (H200, K = 4096: CQ-4 from 32, CQ-2
  // from 64; docs/VQ.md), and never below 32 (a lane per row).
  const int64_t rows_min = std::max<int64_t>(32, INT64_C(16) * f.vector_size * t->sz.entries / 256);
  const bool rows_form = x->rows >= rows_min && f.scope_rows == 0 && t->scales == nullptr;
  const int64_t row_blocks = rows_form ? (x->rows + 31) / 32 : x->rows;
  const dim3 grid(static_cast<unsigned>((p.vectors + kVecs - 1) / kVecs),
                  static_cast<unsigned>(row_blocks < 65535 ? row_blocks : 65535), static_cast<unsigned>(n));
  // Vector sizes 2, 4, 8 with books aligned to an entry load their entries in one load each.
  const int vs = f.vector_size;
  bool aligned = true;
  for (int i = 0; i < n; i++) aligned = aligned && reinterpret_cast<uintptr_t>(ts[i].books) % (2 * vs) == 0;
  const int k = !aligned ? 0 : vs == 2 ? 1 : vs == 4 ? 2 : vs == 8 ? 3 : 0;  // the KVS bucket
  const int64_t launch_rows = x->rows * n;  // (K's and V's together for a pair)
  // 2-element vectors from 8 rows (below the row-parallel form) take 16 lanes per vector: their
  // grid of warps is over a wave from there at K = 4096, and with two vectors a warp it is one
  // (CQ-4, 8 rows of 4096: 11.5 -> 8.7 us on an H200; 8 lanes: 11.2).
  const bool half_warps = !rows_form && vs == 2 && x->rows >= 8;
  // Few rows whose blocks of kSmallVecs vectors (of both tensors of a pair) are at most four per SM
  // take them (above).
  const int64_t small_blocks = (p.vectors + kSmallVecs - 1) / kSmallVecs;
  const bool small = !rows_form && !half_warps && (k == 1 || k == 2) && f.index_bits % 4 == 0 &&
                     small_blocks * launch_rows <= 4 * static_cast<int64_t>(ctx->sm_count);
  const dim3 block(small ? kSmallVecs * 32 : half_warps ? kVecs * 16 : kThreads);
  const dim3 blocks = small ? dim3(static_cast<unsigned>(small_blocks), grid.y, grid.z) : grid;
  vq_encode_params v = p;  // (a pair's V tensors)
  if (n == 2) {
    v.x = xs[1].data;
    v.x_ld = xs[1].ld;
    v.books = static_cast<const uint16_t *>(ts[1].books);
    v.codes = reinterpret_cast<uint32_t *>(ts[1].codes);
    v.scales = ts[1].scales;
  }
  // Rows that share one codebook per vector position, with no row scales, one residual of 8-bit
  // indices and vectors of 2 or 4 elements (the CQ formats) keep or stage their books: the
  // book-resident form below the row-parallel one, the staged row-parallel form from there.
  const bool books_kept = f.scope_rows == 0 && t->scales == nullptr && f.residuals == 1 && f.index_bits == 8 &&
                          (k == 1 || k == 2);
  // 4-element vectors, where x has the books' 16-bit type (or is bf16 into fp16 books), take the
  // tensor-core form (above) from 16 rows in the launch (against the book-resident form on an
  // H200: 16 rows of one tensor 1.10-1.16x and of K and V 1.22x before the skipped half chunk,
  // K and V of 8 rows 1.14x with it; one tensor's 8 rows, half as many blocks, 0.82-0.88x;
  // docs/VQ.md), each block's warps over as many 32-row chunks as leave about 8 blocks per SM in
  // the launch (each warp reads its book once per block).
  const bool tc_types = x->dtype == f.entry_dtype || (x->dtype == QF_BF16 && f.entry_dtype == QF_F16);
  if (books_kept && k == 2 && tc_types && launch_rows >= kTcRowsMin) {
    const int64_t gx = (p.vectors + kTcWarps - 1) / kTcWarps, chunks = (x->rows + 31) / 32;
    const int64_t gy = std::min<int64_t>({chunks, std::max<int64_t>(1, 8 * ctx->sm_count / (gx * n)), 65535});
    const dim3 tgrid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(n));
    if (n == 2)
      return launch_kv(ctx, append, pick_rows_tc_kv<kRowsSlots>(f.entry_dtype, x->dtype),
                       pick_rows_tc_kv<kRowsAppend>(f.entry_dtype, x->dtype), tgrid, dim3(kTcWarps * 32), 0, p, v);
    const encode_kernel_t kernel = slots ? pick_rows_tc<kRowsSlots>(f.entry_dtype, x->dtype) : pick_rows_tc<kRowsOwn>(f.entry_dtype, x->dtype);
    return qf_cuda_launch(ctx, kOp, kernel, kernel, tgrid, dim3(kTcWarps * 32), 0, p);
  }
  // The book-resident form (above) from 4 rows in the launch (2 of K and V): 16 lanes per vector
  // for 2 elements, a warp for 4, the rows spread over as many blocks as 8 per SM, two rows at a
  // time where the launch has 4 (more blocks), eight for 2 elements from 16 rows in the launch
  // (K and V of 8 rows: 256 blocks of 86 registers, one wave, where four at a time made 512 of 75,
  // three per SM), else four. H200, K = 4096 (docs/VQ.md): 4 rows 1.12-1.33x, 8 rows 1.26-1.42x,
  // K and V of 2 rows 1.17-1.39x, of 4 rows 1.36-1.93x, 32 rows of CQ-2 1.31-1.84x; 2 rows of one
  // tensor stay in the small blocks (0.77-0.97x in this form). Eight rows at a time: CQ-4's K and
  // V of 8 rows 1.25x, 16 rows of one tensor 1.16-1.33x; not for one tensor's 8 rows (0.77-0.81x:
  // 128 blocks).
  if (books_kept && !rows_form && launch_rows >= 4) {
    const int bv = kResidentThreads / resident_lanes(vs), kg = launch_rows <= 4 ? 2 : k == 1 && launch_rows >= 16 ? 8 : 4;
    const int64_t gx = (p.vectors + bv - 1) / bv, groups = (x->rows + kg - 1) / kg;
    const int64_t gy = std::min<int64_t>({groups, std::max<int64_t>(1, 8 * ctx->sm_count / (gx * n)), 65535});
    const dim3 rgrid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(n));
    if (n == 2)
      return launch_kv(ctx, append, pick_resident_kv<kRowsSlots>(k, kg), pick_resident_kv<kRowsAppend>(k, kg), rgrid,
                       dim3(kResidentThreads), 0, p, v);
    const encode_kernel_t kernel = slots ? pick_resident<kRowsSlots>(k, kg) : pick_resident<kRowsOwn>(k, kg);
    return qf_cuda_launch(ctx, kOp, kernel, kernel, rgrid, dim3(kResidentThreads), 0, p);
  }
  // The row-parallel form stages such books in shared memory as fp32, in blocks of kStagedVecs
  // positions (16 or 32 KB of books): with the first-square distances, 512 rows of 4096
  // 1.46-1.53x (CQ-2) and 1.75-1.89x (CQ-4) faster than the unstaged form on an H200.
  if (books_kept && rows_form) {
    const size_t smem = static_cast<size_t>(kStagedVecs) * 256 * vs * 4;
    const dim3 sgrid(static_cast<unsigned>((p.vectors + kStagedVecs - 1) / kStagedVecs), grid.y, grid.z);
    const dim3 sblock(kStagedVecs * 32);
    if (n == 2)
      return launch_kv(ctx, append, pick_rows_staged_kv<kRowsSlots>(k), pick_rows_staged_kv<kRowsAppend>(k), sgrid, sblock,
                       smem, p, v);
    const encode_kernel_t kernel = slots ? pick_rows_staged<kRowsSlots>(k) : pick_rows_staged<kRowsOwn>(k);
    return qf_cuda_launch(ctx, kOp, kernel, kernel, sgrid, sblock, smem, p);
  }
  // (the same kernel either way: it waits for the kernel before at its start)
  if (n == 2)
    return launch_kv(ctx, append, pick_encode_kv<kRowsSlots>(rows_form, half_warps, small, k),
                     pick_encode_kv<kRowsAppend>(rows_form, half_warps, small, k), blocks, block, 0, p, v);
  const encode_kernel_t kernel = slots ? pick_encode<kRowsSlots>(rows_form, half_warps, small, k)
                                       : pick_encode<kRowsOwn>(rows_form, half_warps, small, k);
  return qf_cuda_launch(ctx, kOp, kernel, kernel, blocks, block, 0, p);
}

}  // namespace

extern "C" qf_status qf_cuda_vq_encode(qf_ctx *ctx, int n, const qf_mat *xs, int64_t row0, const int32_t *slots,
                                       const qf_vq_tensors *ts) {
  return encode(ctx, n, xs, row0, slots, nullptr, ts);
}

extern "C" qf_status qf_cuda_vq_encode_append(qf_ctx *ctx, const qf_mat *xs, const qf_vq_tensors *ts,
                                              const qf_vq_append_rows *at) {
  return encode(ctx, 2, xs, 0, nullptr, at, ts);
}
