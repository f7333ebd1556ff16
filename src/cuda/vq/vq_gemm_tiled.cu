// The tiled VQ-GeMM (placement QF_VQ_BOOKS_TILED, the public call's choice for M > 16 where it
// applies): y[m, n] = scale[n] * sum_k x[m, k] * W[n, k] with W decoded once per block tile into
// shared memory and multiplied against x tiles by wgmma (fp32 accumulators).
//
// NOTES:
// - Why a second GeMM kernel. vq_gemm.cuh decodes W straight into each warp's MMA registers, so
//   every warp that uses a W fragment decodes it again, and x comes from L1 in 8-byte pieces: at
//   M = 256 that kernel ran at 0.09-0.21x cuBLASLt fp16 (H200), behind even decoding all of W to
//   fp16 first. Here a block tile is 128 rows of W by BM = 64 or 128 rows of x: each W element is
//   decoded once per block and used BM times.
// - Block: two warpgroups. BM = 128: warpgroup w multiplies x rows 64 w.. by all 128 W rows
//   (wgmma m64n128k16); BM = 64: the 64 x rows by W rows 64 w.. (m64n64k16). A k-step is 64
//   columns of K (128-byte rows of 16-bit values), four wgmma per residual.
// - Two rings filled by thread 0 with TMA and bulk copies, each stage with its mbarrier: x tiles
//   and each k-step's books and indices (the k-step's one book per residual, copied whole, 256
//   entries of vs values, 1-4 KB, and a box of the tile rows' indices). W is decoded into a double
//   buffer. Per k-step, one barrier; then the k-step's wgmma are issued, and while they run the
//   threads decode the next k-step, fence their stores to the async proxy and wait for the wgmma.
// - Bank-private books (one residual). Lookups at random entries collide in the banks (4-5-way;
//   a timing-only build where every lane read its own bank pair ran 13-25% faster). When the
//   k-step to decode starts a new book, the threads expand it into 128 / (2 vs) copies of each
//   entry, entry e's filling the 128-byte row e (32 KB), behind one extra barrier, and lane l
//   reads copy l % copies: 1-8% faster on every GPTVQ-2 layer (H200, A/B run twice). The 32 KB
//   leave room for two blocks per SM only with x copied one k-step ahead and books and indices
//   two (decoding runs one ahead); two residuals (64 KB of copies) keep the plain books with x
//   two ahead and books three.
// - Measured on the way (GPTVQ-2, H200, bench/results/h200-dev-vq-tiled-*): mma.sync with
//   ldmatrix (warp tiles 64 x 32) issued about 7 instructions per MMA (M = 256: 0.25-0.38x
//   cuBLASLt fp16); wgmma, which reads both operands from shared memory, and per-thread copy
//   addresses fixed at the start (runtime-bounded copy loops had grown the loop severalfold) took
//   it to 0.33-0.54x; TMA instead of per-thread cp.async moved it by -2 to +5%; 256-row x tiles
//   (one block per SM) were slower. ncu at M = 256 (before the banked books): tensor pipe 18%
//   busy; the warps stall on the decode chain (index loads, the lookups' bank conflicts, the
//   stores and the fence that waits for them: without the fence, a timing-only build, 5-11%
//   faster) and on the barrier, not on the wgmma.
// - Decoding: thread t owns half t % 2 (32 columns) of W row t / 2; its 32 / vs indices of a
//   k-step are consecutive bytes in the stage's index box, each a lookup of vs * 2 bytes in the
//   banked or the stage's book; all lookups first, then the 16-byte stores into the W tile.
// - Tiles (x and W) are K-major with the 128-byte swizzle the wgmma descriptors name: row r's
//   16-byte chunk c at c ^ (r % 8), tiles on 1024-byte boundaries (TMA writes x that way). The
//   decoding writes W through the generic proxy, so each thread fences to the async proxy before
//   the barrier that precedes the wgmma.
// - Residuals are separate W planes, each its own B operand (the entries' values, never their
//   rounded sum); x and the entries have the same 16-bit type, so every product is exact and what
//   rounds is the fp32 accumulation of the tensor cores over the block's K range. The row scale
//   multiplies the finished sum.
// - Split-K when the tiles leave SMs idle: each of `splits` K ranges leaves an fp32 partial tile
//   in the workspace and the tile's last unit adds them in split order (a call repeats bit for
//   bit), as in the banked GeMV.
// - E8P lattice formats (QuIP#-4): each W chunk is decoded from its 16-bit index with the
//   pattern table's 8 bank-private copies, staged once per block where the banked book would be
//   (vq_e8p.cuh), and the scale from entry 0 of the k-step's book; only the indices are copied
//   per k-step (16 bytes per W row). The decoded entries equal the books', so the numerics are
//   those below.
// - Whole books (AQLM: 12-bit indices, vector size 8, one book of 4096 entries per residual for
//   the whole weight, 64 KB each) run a kernel of their own, vq_gemm_regs_kernel. Thread 0 copies
//   the books into shared memory once per block; one ring carries the x tiles, another each
//   k-step's indices (a 32-byte TMA box per W row and residual holding its 12 bytes, which start
//   4-byte aligned at (12 kt) % 16), four stages each (225 KB at BM = 128: one block per SM). W
//   never passes through shared memory: it is the wgmma's A operand, decoded from the books
//   straight into the fragments (per residual and k-step a thread's 16 4-byte pieces of its two
//   rows' entries), and x the B operand. The fragments are double-buffered in registers, so one
//   barrier per k-step orders the rings, with no W tile stored, fenced and read back. A first form
//   decoded into a W tile in shared memory as the kernel above (the books leave room for one
//   residual's plane double-buffered: a step and a barrier per residual); the register form is
//   1.29-1.44x faster on every AQLM-3 layer at M = 64 and 256 (H100, same call). That form was
//   latency-bound on the decode chain (ncu, H200, M = 64: 0.16 eligible warps per scheduler at 8
//   warps per SM, a third of the shared-memory wavefronts bank conflicts of the lookups), and its
//   lookups run a step ahead into registers were 0.6-3.8% slower.
// - The same register form runs GPTVQ-2 (8-bit indices, vectors of 4, one residual) at 64-row x
//   tiles: each k-step's book comes with its indices, and when the book changes the threads expand
//   it into the bank-private copies (entry e's 16 copies fill the 128-byte row e), where lane l
//   reads byte 4 l of its entry's row: no bank conflicts. Two blocks per SM (118 registers). On an
//   H100 against the shared-memory W tile, same call: M = 64 1.07-1.18x faster on every Llama
//   layer; at 128-row x tiles (128 registers and a spill) 0.82-1.03x, five of six layers slower,
//   so those stay above.
// - Limits (qf_cuda_vq_tiled_refusal): 8-bit indices, vector size 2, 4 or 8, or the E8P
//   lattice, or whole books (above); one or two residuals, x of the entries' type with 16-byte
//   aligned rows, K a multiple of 64, codebook scopes of 0 or a multiple of 128 rows and of 64
//   columns. Rows of x past M read zeros, rows of W past N decode row N - 1; neither is stored.
#include <atomic>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/ptx/wgmma_rs.cuh"
#include "cuda/tma_map.h"
#include "cuda/vq/vq_e8p.cuh"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_gemm_heuristic.h"
#include "cuda/vq/vq_heuristic.h"

namespace vq_tiled_detail {

constexpr int kBN = 128;      // rows of W per block tile
constexpr int kBK = 64;       // columns of K per k-step
// One residual: the k-step's book is expanded into bank-private copies (NOTES), whose 32 KB leave
// room for x tiles copied one k-step ahead and books and indices two ahead (decoding runs one
// ahead). Two residuals read their books as copied: x two ahead, books and indices three.
constexpr bool banked_books(int r) { return r == 1; }
constexpr int x_stages(int r) { return banked_books(r) ? 2 : 3; }
constexpr int d_stages(int r) { return banked_books(r) ? 3 : 4; }
constexpr int kBankedBytes = 256 * 128;  // a book's bank-private copies: entry e's fill row e
constexpr int kThreads = 256; // two warpgroups
constexpr int kEntries = 256;
constexpr int kRowBytes = kBK * 2;
// Whole books (NOTES): 4096 entries of 8 values, 12-bit indices (12 bytes per W row and k-step).
constexpr int kWholeEntries = 4096, kWholeBookBytes = kWholeEntries * 8 * 2, kWholeStepCodeBytes = 12;

// W rows of a warpgroup (its wgmma N): 64 x rows by all 128 W rows (BM = 128), or by 64 (BM = 64).
constexpr int warpgroup_n(int bm) { return bm == 128 ? 128 : 64; }
// Bytes per W row of a k-step's index box: its 64 / vs indices, at least the 16 bytes of a TMA box
// row (vs = 8's 8 bytes then sit in the first or second half).
constexpr int code_pitch(int vs) { return 64 / vs < 16 ? 16 : 64 / vs; }
// Whole books: a k-step's 12 bytes start 4-byte aligned at (12 kt) % 16 of a 32-byte box row.
constexpr int kWholeCodePitch = 32;

struct params {
  const uint32_t *codes;  // [R, N, row words] (read through the tensor map)
  const uint16_t *books;  // [R, n_books, 256, vs]
  const float *scales;    // [N] or NULL
  const void *x;          // [M, K], row pitch x_ld elements (read through the tensor map)
  void *y;                // [M, N], row pitch y_ld elements
  int64_t x_ld, y_ld, n_books;
  int y_dtype;
  int M, N;
  int ksteps;             // K / 64
  int ksteps_per_book;    // 0: one book along K
  int scope_rows, books_per_row;
  int tiles_m, splits;
  float *partials;        // splits > 1: [tiles][splits][kWN / 8 float4][threads]
  int *counters;          // splits > 1: [tiles], zero between calls
};

// E8P (the lattice decoded from 16-bit indices, vq_e8p.cuh): a k-step's indices are 16 bytes
// per W row; no books are copied (the pattern table is staged once per block, the scale is entry
// 0 of each book).
template <int VS, int R, int BM, bool E8P>
struct shape {
  static constexpr int kWN = warpgroup_n(BM);
  static constexpr int kCodeWords = E8P ? 2 : 8 / VS;  // a thread's 32 columns of 8-bit (E8P: 16-bit) indices
  static constexpr int kStepCodeBytes = E8P ? 16 : 64 / VS;  // a W row's indices of a k-step
  static constexpr int kCodePitch = code_pitch(VS);
  static constexpr int kBookBytes = E8P ? 0 : kEntries * VS * 2, kCodeBytes = kBN * kCodePitch;
  static constexpr int kXBytes = BM * kRowBytes, kWBytes = kBN * kRowBytes;
  static constexpr int kDBytes = R * (kBookBytes + kCodeBytes);  // one k-step's books and indices
  static constexpr bool kBanked = !E8P && banked_books(R);
  static constexpr int kXStages = x_stages(R), kDStages = d_stages(R);
  static_assert(kXBytes % 1024 == 0 && kWBytes % 1024 == 0 && kDBytes % 1024 == 0,
                "every tile starts on a 1024-byte boundary");
};

// The 16-byte chunk c of tile row r (128-byte rows, chunks XOR-swizzled by r % 8: the layout of
// the 128-byte swizzle that the wgmma descriptors name, for tiles on 1024-byte boundaries).
__device__ __forceinline__ uint32_t tile_at(uint32_t tile, int r, int c) {
  return tile + r * kRowBytes + ((c ^ (r & 7)) << 4);
}

// A book's bank-private copies (256 entries of VS 16-bit values): thread t (one per entry) writes
// entry t's 128 / (2 VS) copies over the 128-byte row t of `copies`, its eight 16-byte stores
// rotated by t so that the 8 threads of a store phase hit 8 bank groups.
template <int VS>
__device__ __forceinline__ void expand_book(uint32_t book, uint32_t copies, int t) {
  uint4 v;
  if constexpr (VS == 8) {
    v = ld_shared_v4(book + t * 16);
  } else if constexpr (VS == 4) {
    const uint2 e = ld_shared_v2(book + t * 8);
    v = make_uint4(e.x, e.y, e.x, e.y);
  } else {
    const uint32_t e = ld_shared_b32(book + t * 4);
    v = make_uint4(e, e, e, e);
  }
#pragma unroll
  for (int j = 0; j < 8; j++) st_shared_v4(copies + t * 128 + ((j + t) & 7) * 16, v);
}

// A block's unit: its tile (x rows from m0, W rows from n0) and its split's k-steps [kb0, kb0 + nk).
struct unit {
  int tile, split, m0, n0, kb0, nk;
};
template <int BM>
__device__ __forceinline__ unit unit_of(const params &p) {
  unit u;
  u.tile = blockIdx.x / p.splits, u.split = blockIdx.x % p.splits;
  u.m0 = (u.tile % p.tiles_m) * BM, u.n0 = (u.tile / p.tiles_m) * kBN;
  u.kb0 = static_cast<int>(static_cast<int64_t>(p.ksteps) * u.split / p.splits);
  u.nk = static_cast<int>(static_cast<int64_t>(p.ksteps) * (u.split + 1) / p.splits) - u.kb0;
  return u;
}

// Split-K (NOTES): leaves a unit's kAcc accumulators per thread as its fp32 partial (thread-major
// 16-byte words); in the tile's last unit to count, sets acc to the sum of all units' partials in
// split order, puts the counter back to zero and returns true; false in the others.
template <int kAcc>
__device__ __forceinline__ bool tiled_split_sum(float (&acc)[kAcc], const params &p, int tile, int split) {
  const int tid = threadIdx.x;
  constexpr int kSlots = kAcc / 4 * kThreads;  // float4 per unit
  float4 *part = reinterpret_cast<float4 *>(p.partials) + static_cast<int64_t>(tile) * p.splits * kSlots;
#pragma unroll
  for (int j = 0; j < kAcc / 4; j++)
    __stcg(part + static_cast<int64_t>(split) * kSlots + j * kThreads + tid,
           make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
  if (!vq_split_counted_last(p.counters + tile, p.splits)) return false;
#pragma unroll
  for (int j = 0; j < kAcc / 4; j++)
    for (int other = 0; other < p.splits; other++) {
      const float4 v = __ldcg(part + static_cast<int64_t>(other) * kSlots + j * kThreads + tid);
      if (other == 0) {
        acc[4 * j] = v.x, acc[4 * j + 1] = v.y, acc[4 * j + 2] = v.z, acc[4 * j + 3] = v.w;
      } else {
        acc[4 * j] = __fadd_rn(acc[4 * j], v.x), acc[4 * j + 1] = __fadd_rn(acc[4 * j + 1], v.y);
        acc[4 * j + 2] = __fadd_rn(acc[4 * j + 2], v.z), acc[4 * j + 3] = __fadd_rn(acc[4 * j + 3], v.w);
      }
    }
  if (tid == 0) p.counters[tile] = 0;
  return true;
}

template <typename T, int VS, int R, int BM, bool E8P>
__global__ void __launch_bounds__(kThreads, 2)
    vq_gemm_tiled_kernel(const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_codes,
                         const params p) {
  using S = shape<VS, R, BM, E8P>;
  constexpr int kWN = S::kWN, kXStages = S::kXStages, kDStages = S::kDStages;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
  // x ring, then the books-and-indices ring, then the two W buffers, then the banked book (E8P:
  // the pattern table's 8 copies)
  auto x_tile = [&](int s) { return base + s * S::kXBytes; };
  auto d_stage = [&](int s) { return base + kXStages * S::kXBytes + s * S::kDBytes; };
  auto book = [&](int s, int r) { return d_stage(s) + r * S::kBookBytes; };
  auto code_box = [&](int s, int r) { return d_stage(s) + R * S::kBookBytes + r * S::kCodeBytes; };
  auto w_tile = [&](int b, int r) { return base + kXStages * S::kXBytes + kDStages * S::kDBytes + (b * R + r) * S::kWBytes; };
  const uint32_t banked = base + kXStages * S::kXBytes + kDStages * S::kDBytes + 2 * R * S::kWBytes;
  __shared__ __align__(8) uint64_t full[kXStages + kDStages];  // a stage's copies have landed
  auto bar = [&](int i) { return static_cast<uint32_t>(__cvta_generic_to_shared(&full[i])); };

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = tid / 128;
  const unit u = unit_of<BM>(p);
  const int tile = u.tile, split = u.split, m0 = u.m0, n0 = u.n0, kb0 = u.kb0, nk = u.nk;
  const int64_t scope_book = static_cast<int64_t>(p.scope_rows ? n0 / p.scope_rows : 0) * p.books_per_row;

  // ---- the rings: thread 0 copies k-step kt's x tile (TMA, the 128-byte swizzle; rows past M
  // read as zeros) into x stage kt % kXStages, and its books (bulk copies) and the tile rows'
  // indices (TMA boxes of kCodePitch bytes by 128 rows, starting on a 16-byte boundary: vs = 8's
  // 8 bytes per k-step sit in the first or second half) into d stage kt % kDStages, each counted
  // on its stage's barrier. Local k-step i uses its stages in phase (i / stages) % 2 ----
  if constexpr (E8P)  // the pattern table (read after the barrier below)
    vq_e8p_stage<kThreads>(reinterpret_cast<uint4 *>(smem + (banked - static_cast<uint32_t>(__cvta_generic_to_shared(smem)))));
  if (tid == 0) {
    for (int i = 0; i < kXStages + kDStages; i++) mbarrier_init(bar(i), 1);
    fence_mbarrier_init();
    prefetch_tensormap(&tmap_x);
    prefetch_tensormap(&tmap_codes);
  }
  __syncthreads();
  auto book_of = [&](int kt) { return scope_book + (p.ksteps_per_book ? kt / p.ksteps_per_book : 0); };
  auto load_x = [&](int i) {
    const int s = i % kXStages;
    mbarrier_arrive_expect_tx(bar(s), S::kXBytes);
    cp_async_bulk_tensor_2d_g2s(x_tile(s), &tmap_x, bar(s), (kb0 + i) * kBK, m0);
  };
  auto load_d = [&](int i) {
    const int s = i % kDStages, kt = kb0 + i;
    mbarrier_arrive_expect_tx(bar(kXStages + s), S::kDBytes);
    const int64_t b = book_of(kt);
#pragma unroll
    for (int r = 0; r < R; r++) {
      if constexpr (!E8P)
        cp_async_bulk_g2s(book(s, r), p.books + ((r * p.n_books + b) * kEntries) * VS, S::kBookBytes, bar(kXStages + s));
      cp_async_bulk_tensor_2d_g2s(code_box(s, r), &tmap_codes, bar(kXStages + s), kt * S::kStepCodeBytes & ~15, r * p.N + n0);
    }
  };
  auto wait_x = [&](int i) { mbarrier_wait_parity(bar(i % kXStages), (i / kXStages) & 1); };
  auto wait_d = [&](int i) { mbarrier_wait_parity(bar(kXStages + i % kDStages), (i / kDStages) & 1); };

  // ---- decoding: thread t owns half t % 2 (32 columns) of W row t / 2 ----
  const int drow = tid / 2, dhalf = tid % 2;
  const uint32_t code_at = drow * S::kCodePitch + dhalf * 4 * S::kCodeWords;  // in a code box
  uint32_t w_dst[4];  // the thread's 16-byte chunks in a W tile
#pragma unroll
  for (int c = 0; c < 4; c++) w_dst[c] = tile_at(0, drow, dhalf * 4 + c);
  // Banked book (one residual, expand_book): lane l reads copy l % copies, at bytes (2 vs l) % 128
  // of the entry's row: the lanes of a phase never share a bank.
  auto expand = [&](int s) { expand_book<VS>(book(s, 0), banked, tid); };
  const uint32_t copy_at = (lane * VS * 2) & 127;
  // All lookups first, then the stores (the shared-memory accesses keep their program order).
  auto decode = [&](int kt, int s, int b) {
    const uint32_t at = code_at + (kt * S::kStepCodeBytes & 15);
#pragma unroll
    for (int r = 0; r < R; r++) {
      if constexpr (E8P) {  // vectors c = 0..3 of the thread's 32 columns, each one 16-byte chunk
        const uint2 v = ld_shared_v2(code_box(s, r) + at);
        const vq_e8p_scale scale = vq_e8p_scale_of(__ldg(p.books + (r * p.n_books + book_of(kt)) * kVqE8pBookValues));
        uint4 e[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const uint32_t w = c < 2 ? v.x : v.y, idx = c & 1 ? w >> 16 : w & 0xFFFFu;
          e[c] = vq_e8p_entry(ld_shared_v4(banked + (idx >> 8) * 128 + (lane & 7) * 16), idx, scale);
        }
#pragma unroll
        for (int c = 0; c < 4; c++) st_shared_v4(w_tile(b, r) + w_dst[c], e[c]);
        continue;
      }
      uint32_t codes[S::kCodeWords];
      if constexpr (S::kCodeWords == 4) {
        const uint4 v = ld_shared_v4(code_box(s, r) + at);
        codes[0] = v.x, codes[1] = v.y, codes[2] = v.z, codes[3] = v.w;
      } else if constexpr (S::kCodeWords == 2) {
        const uint2 v = ld_shared_v2(code_box(s, r) + at);
        codes[0] = v.x, codes[1] = v.y;
      } else {
        codes[0] = ld_shared_b32(code_box(s, r) + at);
      }
      auto entry = [&](int v) {
        const uint32_t idx = (codes[v / 4] >> (8 * (v % 4))) & 0xffu;
        return S::kBanked ? banked + idx * 128 + copy_at : book(s, r) + idx * (VS * 2);
      };
      uint4 q[4];  // the thread's 16-byte chunks: vectors c * 8 / VS ...
#pragma unroll
      for (int c = 0; c < 4; c++) {
        if constexpr (VS == 8) {
          q[c] = ld_shared_v4(entry(c));
        } else if constexpr (VS == 4) {
          const uint2 e0 = ld_shared_v2(entry(2 * c)), e1 = ld_shared_v2(entry(2 * c + 1));
          q[c] = make_uint4(e0.x, e0.y, e1.x, e1.y);
        } else {
          q[c] = make_uint4(ld_shared_b32(entry(4 * c)), ld_shared_b32(entry(4 * c + 1)), ld_shared_b32(entry(4 * c + 2)),
                            ld_shared_b32(entry(4 * c + 3)));
        }
      }
#pragma unroll
      for (int c = 0; c < 4; c++) st_shared_v4(w_tile(b, r) + w_dst[c], q[c]);
    }
  };

  // ---- the MMAs of one k-step: warpgroup wg owns x rows 64 wg.. (BM 128) or W rows 64 wg.. (BM 64) ----
  const int wg_m = BM == 128 ? 64 * wg : 0, wg_n = BM == 128 ? 0 : 64 * wg;
  float acc[kWN / 2];
#pragma unroll
  for (int i = 0; i < kWN / 2; i++) acc[i] = 0.0f;
  auto issue = [&](int s, int b) {
    const uint64_t da = wgmma_desc_kmajor_sw128(x_tile(s) + wg_m * kRowBytes);
#pragma unroll
    for (int i = 0; i < kWN / 2; i++) wgmma_fence_operand(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint64_t db = wgmma_desc_kmajor_sw128(w_tile(b, r) + wg_n * kRowBytes);
#pragma unroll
      for (int kk = 0; kk < kBK / 16; kk++) {  // 32 bytes of K each (+ 2 in the address field)
        if constexpr (std::is_same_v<T, __half>)
          wgmma_m64k16_f32_f16<kWN>(acc, da + 2 * kk, db + 2 * kk, 1);
        else
          wgmma_m64k16_f32_bf16<kWN>(acc, da + 2 * kk, db + 2 * kk, 1);
      }
    }
    wgmma_commit_group();
#pragma unroll
    for (int i = 0; i < kWN / 2; i++) wgmma_fence_operand(acc[i]);
  };

  // ---- main loop (NOTES: one barrier per k-step) ----
  if (nk > 0) {
    if (tid == 0) {
      for (int i = 0; i < kXStages - 1 && i < nk; i++) load_x(i);
      for (int i = 0; i < kDStages - 1 && i < nk; i++) load_d(i);
    }
    wait_d(0);
    if constexpr (S::kBanked) {
      expand(0);
      __syncthreads();
    }
    decode(kb0, 0, 0);
    fence_proxy_async_shared_cta();  // this thread's W stores, to the wgmma's proxy
    for (int i = 0; i < nk; i++) {
      __syncthreads();
      // Refill the stages k-step i - 1 used (its wgmma and decoding are done: waited before this
      // barrier), run k-step i's wgmma and, while they run, decode k-step i + 1 into the other W
      // buffer.
      if (tid == 0) {
        if (i + kXStages - 1 < nk) load_x(i + kXStages - 1);
        if (i + kDStages - 1 < nk) load_d(i + kDStages - 1);
      }
      wait_x(i);
      issue(i % kXStages, i % 2);
      if (i + 1 < nk) {
        wait_d(i + 1);
        // A new book: every thread has decoded k-step i (before the barrier above), so the
        // copies can be rewritten; a second barrier before they are read (uniform: it depends
        // on the k-step only).
        if (S::kBanked && book_of(kb0 + i + 1) != book_of(kb0 + i)) {
          expand((i + 1) % kDStages);
          __syncthreads();
        }
        decode(kb0 + i + 1, (i + 1) % kDStages, (i + 1) % 2);
      }
      fence_proxy_async_shared_cta();
      wgmma_wait_group<0>();
    }
  }

  // ---- split-K: leave the partial; the tile's last unit adds them all in split order ----
  if (p.splits > 1 && !tiled_split_sum(acc, p, tile, split)) return;

  // ---- y = row scale x sum: thread (g, t) of warp w of its warpgroup holds x rows 16 w + g (+ 8)
  // by W rows 8 j + 2 t (+ 1) of the warpgroup's block (the wgmma accumulator layout) ----
  const int g = lane / 4, t = lane % 4;
  auto store_y = [&](auto *y) {
#pragma unroll
    for (int j = 0; j < kWN / 8; j++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        const int n = n0 + wg_n + 8 * j + 2 * t + c;
        if (n >= p.N) continue;
        const float sc = p.scales ? p.scales[n] : 1.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int m = m0 + wg_m + 16 * (warp % 4) + g + 8 * h;
          if (m < p.M) vq_store(y + m * p.y_ld + n, p.scales ? acc[4 * j + 2 * h + c] * sc : acc[4 * j + 2 * h + c]);
        }
      }
  };
  switch (p.y_dtype) {
    case QF_BF16: store_y(static_cast<__nv_bfloat16 *>(p.y)); break;
    case QF_F16: store_y(static_cast<__half *>(p.y)); break;
    default: store_y(static_cast<float *>(p.y)); break;
  }
}

// ---- the register form (NOTES): W the wgmma's A operand, decoded from the books straight into
// its fragments; x the B operand from the x ring ----
constexpr int kRegsXStages = 4, kRegsDStages = 4;

// Whole: AQLM's books (above); else GPTVQ's (8-bit indices, vectors of 4, one residual, books per
// scope: each k-step's book copied with its indices, expanded into bank-private copies when it
// changes, so that lane l reads byte 4 l of an entry's 128-byte row: no bank conflicts).
template <typename T, int R, int BM, bool Whole>
__global__ void __launch_bounds__(kThreads, Whole ? 1 : 2)
    vq_gemm_regs_kernel(const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_codes,
                         const params p) {
  static_assert(Whole || R == 1, "the register form of scoped books takes one residual");
  // a W row's indices per k-step and residual in the ring (16: code_pitch(4)); a scoped book
  constexpr int kCodePitch = Whole ? kWholeCodePitch : 16, kBookBytes = Whole ? 0 : kEntries * 4 * 2;
  constexpr int kXBytes = BM * kRowBytes, kCodeBytes = kBN * kCodePitch, kDBytes = R * kCodeBytes + kBookBytes;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
  // x ring, then the indices ring, then the R books
  auto x_tile = [&](int s) { return base + s * kXBytes; };
  auto code_box = [&](int s, int r) { return base + kRegsXStages * kXBytes + s * kDBytes + r * kCodeBytes; };
  auto book = [&](int s) { return base + kRegsXStages * kXBytes + s * kDBytes + R * kCodeBytes; };  // scoped
  const uint32_t books = base + kRegsXStages * kXBytes + kRegsDStages * kDBytes;  // whole, or the copies
  __shared__ __align__(8) uint64_t full[kRegsXStages + kRegsDStages + 1];  // stages, then the books
  auto bar = [&](int i) { return static_cast<uint32_t>(__cvta_generic_to_shared(&full[i])); };
  constexpr int kBooksBar = kRegsXStages + kRegsDStages;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = tid / 128;
  const unit u = unit_of<BM>(p);
  const int tile = u.tile, split = u.split, m0 = u.m0, n0 = u.n0, kb0 = u.kb0, nk = u.nk;
  const int64_t scope_book = static_cast<int64_t>(p.scope_rows ? n0 / p.scope_rows : 0) * p.books_per_row;
  auto book_of = [&](int kt) { return scope_book + (p.ksteps_per_book ? kt / p.ksteps_per_book : 0); };

  if (tid == 0) {
    for (int i = 0; i <= kBooksBar; i++) mbarrier_init(bar(i), 1);
    fence_mbarrier_init();
    prefetch_tensormap(&tmap_x);
    prefetch_tensormap(&tmap_codes);
    if constexpr (Whole) {
      mbarrier_arrive_expect_tx(bar(kBooksBar), R * kWholeBookBytes);
#pragma unroll
      for (int r = 0; r < R; r++)
        cp_async_bulk_g2s(books + r * kWholeBookBytes,
                          p.books + static_cast<int64_t>(r) * p.n_books * kWholeEntries * 8, kWholeBookBytes,
                          bar(kBooksBar));
    }
  }
  __syncthreads();
  // k-step i's x tile into x stage i % 4; its indices (per W row and residual a box row of 32 bytes
  // for whole books, 16 for scoped ones) and, for scoped books, its book into stage i % 4 of the
  // indices ring
  auto load_x = [&](int i) {
    const int s = i % kRegsXStages;
    mbarrier_arrive_expect_tx(bar(s), kXBytes);
    cp_async_bulk_tensor_2d_g2s(x_tile(s), &tmap_x, bar(s), (kb0 + i) * kBK, m0);
  };
  auto load_d = [&](int i) {
    const int s = i % kRegsDStages, kt = kb0 + i;
    mbarrier_arrive_expect_tx(bar(kRegsXStages + s), kDBytes);
    if constexpr (!Whole)
      cp_async_bulk_g2s(book(s), p.books + book_of(kt) * kEntries * 4, kBookBytes, bar(kRegsXStages + s));
#pragma unroll
    for (int r = 0; r < R; r++)
      cp_async_bulk_tensor_2d_g2s(code_box(s, r), &tmap_codes, bar(kRegsXStages + s),
                                  Whole ? kt * kWholeStepCodeBytes & ~15 : kt * 16, r * p.N + n0);
  };
  auto wait_x = [&](int i) { mbarrier_wait_parity(bar(i % kRegsXStages), (i / kRegsXStages) & 1); };
  auto wait_d = [&](int i) { mbarrier_wait_parity(bar(kRegsXStages + i % kRegsDStages), (i / kRegsDStages) & 1); };

  // ---- decoding into A fragments: thread (g, c) = (lane / 4, lane % 4) of warp w of its
  // warpgroup holds tile rows 64 wg + 16 w + g (+ 8) and, per 16 columns kk of a k-step, columns
  // 2c, 2c + 1 (+ 8): 4 bytes of an entry per register (whole books: of vectors 2 kk and 2 kk + 1
  // of 8 values; scoped: of vectors 4 kk + c / 2 and 4 kk + 2 + c / 2 of 4) ----
  const int g = lane / 4, c = lane % 4, wrow = 64 * wg + 16 * (warp % 4) + g;
  // Scoped books: each new book into its 16 bank-private copies per entry (expand_book).
  auto expand = [&](int s) { expand_book<4>(book(s), books, tid); };
  auto decode = [&](int i, uint32_t(&a)[R][4][4]) {
    const int s = i % kRegsDStages;
    if constexpr (!Whole) {  // vectors 4 kk + c / 2 (columns 2c, 2c + 1) and + 2 (+ 8): word c % 2
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint4 v = ld_shared_v4(code_box(s, 0) + (wrow + 8 * h) * kCodePitch);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w}, sh = 8 * (c / 2);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          a[0][kk][h] = ld_shared_b32(books + (w[kk] >> sh & 0xffu) * 128 + 4 * lane);
          a[0][kk][2 + h] = ld_shared_b32(books + (w[kk] >> (sh + 16) & 0xffu) * 128 + 4 * lane);
        }
      }
    } else {
      const uint32_t o = (kb0 + i) * kWholeStepCodeBytes & 15;
#pragma unroll
      for (int r = 0; r < R; r++)
#pragma unroll
        for (int h = 0; h < 2; h++) {  // row wrow + 8 h: its 8 indices, 96 bits from byte o
          const uint32_t at = code_box(s, r) + (wrow + 8 * h) * kWholeCodePitch + o;
          const uint32_t w[3] = {ld_shared_b32(at), ld_shared_b32(at + 4), ld_shared_b32(at + 8)};
          uint32_t idx[8];
#pragma unroll
          for (int j = 0; j < 8; j++) {
            const int bit = 12 * j, word = bit / 32, sh = bit % 32;
            idx[j] = (sh <= 20 ? w[word] >> sh : __funnelshift_r(w[word], w[word + 1], sh)) & 0xfffu;
          }
#pragma unroll
          for (int kk = 0; kk < 4; kk++) {
            a[r][kk][h] = ld_shared_b32(books + r * kWholeBookBytes + idx[2 * kk] * 16 + 4 * c);
            a[r][kk][2 + h] = ld_shared_b32(books + r * kWholeBookBytes + idx[2 * kk + 1] * 16 + 4 * c);
          }
        }
    }
  };
  // Keeps fragments that a wgmma in flight reads in their registers until a wait shows it done.
  auto hold = [](uint32_t(&a)[R][4][4]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int j = 0; j < 4; j++) wgmma_fence_operand(a[r][kk][j]);
  };

  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; i++) acc[i] = 0.0f;
  // k-step i: its wgmma from `cur`; once k-step i - 1's are done in every warp (its x stage,
  // indices and fragments `nxt` free), refill those stages and decode k-step i + 1 into `nxt`.
  auto step = [&](int i, uint32_t(&cur)[R][4][4], uint32_t(&nxt)[R][4][4]) {
    wait_x(i);
#pragma unroll
    for (int j = 0; j < BM / 2; j++) wgmma_fence_operand(acc[j]);
    wgmma_fence();
    const uint64_t db = wgmma_desc_kmajor_sw128(x_tile(i % kRegsXStages));
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {  // 32 bytes of K each (+ 2 in the address field)
        if constexpr (std::is_same_v<T, __half>)
          wgmma_m64k16_f32_f16_rs_kmajor<BM>(acc, cur[r][kk], db + 2 * kk, 1);
        else
          wgmma_m64k16_f32_bf16_rs_kmajor<BM>(acc, cur[r][kk], db + 2 * kk, 1);
      }
    wgmma_commit_group();
    wgmma_wait_group<1>();
#pragma unroll
    for (int j = 0; j < BM / 2; j++) wgmma_fence_operand(acc[j]);
    hold(nxt);
    __syncthreads();
    if (tid == 0 && i > 0) {
      if (i - 1 + kRegsXStages < nk) load_x(i - 1 + kRegsXStages);
      if (i - 1 + kRegsDStages < nk) load_d(i - 1 + kRegsDStages);
    }
    if (i + 1 < nk) {
      wait_d(i + 1);
      // A new scoped book: every thread decoded k-step i before the barrier above, so the copies
      // can be rewritten; a second barrier before they are read (uniform: it depends on i only).
      if (!Whole && book_of(kb0 + i + 1) != book_of(kb0 + i)) {
        expand((i + 1) % kRegsDStages);
        __syncthreads();
      }
      decode(i + 1, nxt);
    }
  };
  if (nk > 0) {
    if (tid == 0) {
      for (int i = 0; i < kRegsXStages && i < nk; i++) load_x(i);
      for (int i = 0; i < kRegsDStages && i < nk; i++) load_d(i);
    }
    uint32_t a0[R][4][4], a1[R][4][4];
    if constexpr (Whole) mbarrier_wait_parity(bar(kBooksBar), 0);
    wait_d(0);
    if constexpr (!Whole) {
      expand(0);
      __syncthreads();
    }
    decode(0, a0);
    for (int i = 0; i < nk; i += 2) {
      step(i, a0, a1);
      if (i + 1 < nk) step(i + 1, a1, a0);
    }
    wgmma_wait_group<0>();
#pragma unroll
    for (int j = 0; j < BM / 2; j++) wgmma_fence_operand(acc[j]);
  }

  // ---- split-K, as the tiled kernel ----
  if (p.splits > 1 && !tiled_split_sum(acc, p, tile, split)) return;

  // ---- y = row scale x sum: acc[4 j + 2 h + e] is W row wrow + 8 h by x row 8 j + 2 c + e ----
  auto store_y = [&](auto *y) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int n = n0 + wrow + 8 * h;
      if (n >= p.N) continue;
      const float sc = p.scales ? p.scales[n] : 1.0f;
#pragma unroll
      for (int j = 0; j < BM / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int m = m0 + 8 * j + 2 * c + e;
          if (m < p.M) vq_store(y + m * p.y_ld + n, p.scales ? acc[4 * j + 2 * h + e] * sc : acc[4 * j + 2 * h + e]);
        }
    }
  };
  switch (p.y_dtype) {
    case QF_BF16: store_y(static_cast<__nv_bfloat16 *>(p.y)); break;
    case QF_F16: store_y(static_cast<__half *>(p.y)); break;
    default: store_y(static_cast<float *>(p.y)); break;
  }
}

using kernel_t = void (*)(CUtensorMap, CUtensorMap, params);

// Whole books (NOTES): 12-bit indices of vectors of 8, one book per residual for the whole weight.
bool whole_books(const qf_vq_format &f) {
  return !f.lattice && f.index_bits == 12 && f.vector_size == 8 && f.scope_rows == 0 && f.scope_cols == 0;
}
// Scoped 8-bit books that take the register form (NOTES: GPTVQ-2 at 64-row x tiles).
__host__ __device__ constexpr bool scoped_regs(int vs, int residuals, int bm) {
  return vs == 4 && residuals == 1 && bm == 64;
}

// The kernel of a learned-book format (8-bit indices, or whole books) at a tile height.
template <typename T, int R, int BM>
kernel_t pick(const qf_vq_format &f) {
  if (whole_books(f)) return vq_gemm_regs_kernel<T, R, BM, true>;
  if (f.vector_size == 2) return vq_gemm_tiled_kernel<T, 2, R, BM, false>;
  if (f.vector_size == 8) return vq_gemm_tiled_kernel<T, 8, R, BM, false>;
  if constexpr (scoped_regs(4, R, BM))
    return vq_gemm_regs_kernel<T, R, BM, false>;
  else
    return vq_gemm_tiled_kernel<T, 4, R, BM, false>;
}

template <typename T>
kernel_t pick(const qf_vq_format &f, int bm) {
  if (f.residuals == 1) return bm == 64 ? pick<T, 1, 64>(f) : pick<T, 1, 128>(f);
  return bm == 64 ? pick<T, 2, 64>(f) : pick<T, 2, 128>(f);
}

kernel_t pick_e8p(int residuals, int bm) {
  if (residuals == 1)
    return bm == 64 ? vq_gemm_tiled_kernel<__half, 8, 1, 64, true> : vq_gemm_tiled_kernel<__half, 8, 1, 128, true>;
  return bm == 64 ? vq_gemm_tiled_kernel<__half, 8, 2, 64, true> : vq_gemm_tiled_kernel<__half, 8, 2, 128, true>;
}

// Shared memory of the books a block holds: staged ones (the rings' share) and copies or whole
// books (beside the rings).
size_t books_bytes(const qf_vq_format &f, int bm) {
  const size_t vs = f.vector_size, r = f.residuals;
  if (f.lattice) return QF_VQ_E8P_TABLE_BYTES;
  if (whole_books(f)) return r * kWholeBookBytes;
  if (scoped_regs(f.vector_size, f.residuals, bm)) return kRegsDStages * kEntries * vs * 2 + kBankedBytes;
  return d_stages(f.residuals) * r * kEntries * vs * 2 + (banked_books(f.residuals) ? kBankedBytes : 0);
}

// + 1024: the base is rounded up to the 1024-byte period of the 128-byte swizzle.
size_t smem_bytes(const qf_vq_format &f, int bm) {
  const bool e8p = f.lattice == QF_VQ_LATTICE_E8P;
  const int vs = f.vector_size, residuals = f.residuals;
  if (!e8p && scoped_regs(vs, residuals, bm))  // the register form of scoped books
    return kRegsXStages * static_cast<size_t>(bm) * kRowBytes +
           kRegsDStages * static_cast<size_t>(kBN * code_pitch(4) + kEntries * 4 * 2) + kBankedBytes + 1024;
  if (whole_books(f))
    return kRegsXStages * static_cast<size_t>(bm) * kRowBytes +
           kRegsDStages * static_cast<size_t>(residuals) * kBN * kWholeCodePitch +
           static_cast<size_t>(residuals) * kWholeBookBytes + 1024;
  const size_t book = e8p ? 0 : kEntries * vs * 2, d_stage = static_cast<size_t>(residuals) * (book + kBN * code_pitch(vs));
  const size_t after_w = e8p ? QF_VQ_E8P_TABLE_BYTES : banked_books(residuals) ? kBankedBytes : 0;
  return x_stages(residuals) * static_cast<size_t>(bm) * kRowBytes + d_stages(residuals) * d_stage +
         2u * residuals * kBN * kRowBytes + after_w + 1024;
}

}  // namespace vq_tiled_detail

// ---- host: the limits, the split, the launch ----

namespace {
const char kOp[] = "qf_vq_gemm";
}

extern "C" int qf_cuda_vq_whole_books(const qf_vq_format *f) { return vq_tiled_detail::whole_books(*f); }

extern "C" const char *qf_cuda_vq_tiled_refusal(const qf_mat *x, const qf_vq_tensors *w) {
  using namespace vq_tiled_detail;
  const qf_vq_format &f = w->fmt;
  const bool vs_248 = f.vector_size == 2 || f.vector_size == 4 || f.vector_size == 8;
  if (!f.lattice && !whole_books(f) && (f.index_bits != 8 || !vs_248))
    return "the tiled VQ-GeMM needs 8-bit indices and vector size 2, 4 or 8, the E8P lattice, or 12-bit indices of "
           "vector size 8 with one codebook per residual (AQLM)";
  if (f.residuals > 2) return "the tiled VQ-GeMM takes one or two residuals";
  if (x->dtype != f.entry_dtype) return "the tiled VQ-GeMM needs x of the codebook entries' type (fp16 or bf16)";
  if (reinterpret_cast<uintptr_t>(x->data) % 16 != 0 || (x->rows > 1 && x->ld % 8 != 0))
    return "the tiled VQ-GeMM needs x rows aligned to 16 bytes";
  if (w->K == 0 || w->K % kBK != 0) return "the tiled VQ-GeMM needs K a positive multiple of 64";
  if (reinterpret_cast<uintptr_t>(w->codes) % 16 != 0 || reinterpret_cast<uintptr_t>(w->books) % 16 != 0)
    return "the tiled VQ-GeMM needs codes and codebooks aligned to 16 bytes";
  if (f.scope_rows % kBN != 0 || f.scope_cols % kBK != 0)
    return "the tiled VQ-GeMM needs codebook scopes of 0 or a multiple of 128 rows and of 64 columns";
  return nullptr;
}

extern "C" qf_status qf_cuda_vq_gemm_tiled_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                                int splits, qf_vq_mma_config *used) {
  using namespace vq_tiled_detail;
  if (const char *why = qf_cuda_vq_tiled_refusal(x, w)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %s", kOp, why);
  const qf_vq_format &f = w->fmt;
  if (qf_status st = vq_gemm_offset_limits(ctx, kOp, x, w, y); st != QF_OK) return st;
  const int64_t M = x->rows, N = w->N, K = w->K;
  if (M == 0 || N == 0) return QF_OK;
  const int bm = M <= 64 ? 64 : 128;  // rows of x per tile
  const bool bf16 = f.entry_dtype == QF_BF16;
  const bool e8p = f.lattice == QF_VQ_LATTICE_E8P, whole = whole_books(f);
  const kernel_t kernel = e8p    ? pick_e8p(f.residuals, bm)
                          : bf16 ? pick<__nv_bfloat16>(f, bm)
                                 : pick<__half>(f, bm);
  const size_t smem = smem_bytes(f, bm);
  static std::atomic<uint64_t> opted_in[2][2][2][5];
  const int vs_slot = whole ? 4 : e8p ? 3 : f.vector_size == 2 ? 0 : f.vector_size == 4 ? 1 : 2;
  int per_sm = 0;
  if (qf_status st = vq_blocks_per_sm(ctx, kOp, "tiled VQ-GeMM", kernel, kThreads, smem,
                                      opted_in[bf16][f.residuals - 1][bm / 128][vs_slot], &per_sm);
      st != QF_OK)
    return st;

  const int ksteps = static_cast<int>(K / kBK);
  const int64_t tiles_m = (M + bm - 1) / bm, tiles_n = (N + kBN - 1) / kBN, tiles = tiles_m * tiles_n;
  // Split: qf_vq_tiled_splits (vq_gemm_heuristic.h), the traffic balance weighted by the waves.
  const int64_t slots = static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * per_sm;
  if (splits <= 0) splits = qf_vq_tiled_splits(tiles, slots, ksteps, bm, kQfWorkspaceCounters);
  if (qf_status st = vq_split_check(ctx, kOp, splits, ksteps, "k-steps", tiles); st != QF_OK) return st;

  CUtensorMap tmap_x = {}, tmap_codes = {};
  if (qf_status st = qf_cuda_make_tmap(ctx, kOp, &tmap_x, "x", *x, bm); st != QF_OK) return st;
  if (qf_status st = qf_cuda_make_tmap_bytes(ctx, kOp, &tmap_codes, "codes", w->codes, f.residuals * N, w->sz.row_bytes,
                                             w->sz.row_bytes, whole ? kWholeCodePitch : code_pitch(f.vector_size), kBN);
      st != QF_OK)
    return st;
  params p = {};
  vq_weight_call_params(p, x, w, y);
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.ksteps = ksteps;
  p.ksteps_per_book = f.scope_cols ? f.scope_cols / kBK : 0;
  p.scope_rows = f.scope_rows;
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.tiles_m = static_cast<int>(tiles_m);
  p.splits = splits;
  if (splits > 1) {
    const size_t partial_bytes = static_cast<size_t>(tiles) * splits * warpgroup_n(bm) / 8 * kThreads * sizeof(float4);
    if (qf_status st = vq_split_workspace(ctx, kOp, partial_bytes, &p.counters, &p.partials); st != QF_OK) return st;
  }
  if (used) {
    *used = qf_vq_mma_config{};
    used->m_tiles8 = bm / 8;
    used->tile_n = kBN;
    used->tile_m = bm;
    used->placement = QF_VQ_BOOKS_TILED;
    used->mma_bf16 = bf16;
    used->x_parts = 1;
    used->entry_parts = 1;
    used->warps = kThreads / 32;
    used->warps_k = 1;
    used->x_direct = 1;
    used->tiles_n = tiles_n;
    used->tiles_m = tiles_m;
    used->tiles = tiles * splits;
    used->splits = splits;
    used->books_bytes = books_bytes(f, bm);
    used->smem_bytes = smem;
  }
  kernel<<<static_cast<unsigned>(tiles * splits), kThreads, smem, qf_stream(ctx)>>>(tmap_x, tmap_codes, p);
  return qf_cuda_check_launch(ctx, kOp);
}
