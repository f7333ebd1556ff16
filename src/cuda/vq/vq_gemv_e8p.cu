// VQ-GeMV (M of 1 to 16) for the E8P lattice (QuIP#-4): y[m, n] = sum_k x[m, k] * W[n, k], each
// entry of W decoded from its index bits (vq_e8p.cuh) straight into the A registers of mma.sync
// m16n8k16. The banked placement's kernel for lattice formats: the pattern table is read from 8
// bank-private copies in shared memory, as the banked GeMV reads its books.
//
// NOTES:
// - Why a kernel of its own: the general kernel (vq_gemm.cuh) decodes E8P at 12-16% of the memory
//   floor at batch 1 (80 registers for 3 blocks per SM with spills, the pattern table through L1
//   at about 20 wavefronts per warp-wide lookup, an x quad per k-step). Here a lane's work per
//   entry is the index, the pattern's address, one conflict-free 16-byte load (4 wavefronts per
//   warp), the signs (two integer ops per word), the fp16 fmas and half of two MMAs.
// - Work: a warp owns 16 rows of W, a block's 8 warps 128 rows (a tile). A unit is a tile by a
//   range of 256-column chunks; the K ranges of a tile (splits) leave fp32 partials that the
//   tile's last unit adds in split order (a call repeats bit for bit), as in the banked GeMV.
//   Blocks are persistent (the table is staged once per block) and take units round robin.
// - Permuted K (a dot product may visit K in any order if both operands follow it): at step s
//   (0..7) of a chunk lane (g, c) takes the chunk's vector 4s + c, so the 4 lanes of a row read
//   x as 64 contiguous bytes a step (vectors 8c + s, 16 bytes per lane 128 bytes apart, ran
//   M = 16 1.35-1.6x slower and M = 1 0-2% faster). Words 0 and 1 of the decoded entry are the
//   lane's A registers of one k16 MMA (logical columns 2c, 2c + 1 and 2c + 8, 2c + 9), words 2
//   and 3 those of a second; rows g and g + 8 from the lane's two code rows. B is x's same 8
//   values of row g of each n8 tile, one 16-byte load (from L1) a step ahead.
// - Codes: the 4 lanes of a row copy its 64 bytes of a chunk (cp.async, 16 bytes each) into
//   their warp's ring in shared memory two chunks ahead (rows at an 80-byte pitch, so that a
//   step's word reads hit 8 bank groups); after the copies land (each lane's wait, then the
//   warp's barrier) each lane reads the 4-byte word that holds its index, a step at a time. The
//   books' scales load a chunk ahead.
// - Numerics: every product is exact (the decoded fp16 entries equal the books', x is fp16); the
//   tensor core sums each residual's share of a chunk (256 columns) into a zeroed fragment (x
//   tiles of 8 rows: two independent MMA chains; of 16: one fragment for both residuals), added
//   into the accumulators in residual order with round-to-nearest adds, then the split partials
//   in split order; the row scale multiplies the finished sum.
// - Limits (else QF_ERR_UNSUPPORTED with the reason): the E8P lattice with at most 2 residuals,
//   x fp16 with 16-byte aligned rows, codes 16-byte aligned, K a multiple of 256, scope_rows 0 or
//   a multiple of 16, scope_cols 0 or a multiple of 256, M <= 16.
#include <atomic>

#include "cuda/common.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/vq/vq_e8p.cuh"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_heuristic.h"

struct vq_e8p_params {
  const uint32_t *codes;  // [R, N, row_words]
  const uint16_t *books;  // [R, n_books, 2^16, 8]: of each book only entry 0's first value (scale / 4)
  const float *scales;    // [N] or NULL
  const void *x;          // [M, K] fp16, row pitch x_ld elements
  void *y;                // [M, N], row pitch y_ld elements
  int64_t x_ld, y_ld, n_books;
  int y_dtype;
  int M, N, chunks;
  uint32_t row_words;
  int chunks_per_book;  // 256-column chunks per book along K
  int book_shift;       // log2(chunks_per_book) when a power of two (31: one book along K), else -1
  int books_per_row, scope_rows;
  int splits, units;  // K ranges per tile; tiles x splits
  float *partials;    // splits > 1: [tiles][splits][kMT][256 threads] float4
  int *counters;      // splits > 1: [tiles], zero between calls
};

namespace vq_e8p_detail {

constexpr int kWarps = 8, kThreads = kWarps * 32, kRows = kWarps * 16;
constexpr int kStages = 3;  // code chunks in a warp's ring
constexpr int kMaxSplits = 8;  // the heuristic's (a forced split may take up to one per chunk)
constexpr int kBatch = 8;      // partials loaded at once by the last unit

}  // namespace vq_e8p_detail

template <int kMT, int kR>
__global__ void __launch_bounds__(vq_e8p_detail::kThreads, 2) vq_gemv_e8p_kernel(const __grid_constant__ vq_e8p_params p) {
  using namespace vq_e8p_detail;
  // The table's 8 interleaved copies (vq_e8p.cuh), then each warp's ring of code chunks: stage,
  // residual, row half (g or g + 8), lane: 16 bytes each.
  extern __shared__ __align__(128) uint8_t smem[];
  // A slot holds 8 rows' 64 bytes of a chunk at an 80-byte pitch (the word reads below then hit
  // 8 different bank groups).
  constexpr int kRowPitch = 80, kSlotBytes = 8 * kRowPitch, kWarpRing = kStages * kR * 2 * kSlotBytes;
  vq_e8p_stage<kThreads>(reinterpret_cast<uint4 *>(smem));
  __syncthreads();

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, c = lane & 3;
  const uint32_t copy = (lane & 7) * 16;  // this lane's copy of a pattern: byte offset in its 128-byte slot row
  const uint32_t half = 16 * (c & 1);     // this lane's index in a code word
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + QF_VQ_E8P_TABLE_BYTES +
                        warp * kWarpRing + g * kRowPitch;  // row g of slot 0
  auto slot = [&](int stage, int r, int h) { return ring + ((stage * kR + r) * 2 + h) * kSlotBytes; };
  const int64_t res_vecs = static_cast<int64_t>(p.N) * p.row_words / 4;  // 16-byte code vectors per residual
  // Lane c's x values of a chunk, row g of each n8 tile: 16 bytes a step. Rows past M read row
  // M - 1: their products land in columns of y that are never stored, so they need no zeros.
  const uint4 *xrow[kMT];
#pragma unroll
  for (int j = 0; j < kMT; j++)
    xrow[j] = reinterpret_cast<const uint4 *>(static_cast<const __half *>(p.x) + min(8 * j + g, p.M - 1) * p.x_ld) + c;

  for (int unit = static_cast<int>(blockIdx.x); unit < p.units; unit += static_cast<int>(gridDim.x)) {
    const int tile = unit / p.splits, split = unit % p.splits;
    const int c_begin = static_cast<int>(static_cast<int64_t>(split) * p.chunks / p.splits);
    const int c_end = static_cast<int>(static_cast<int64_t>(split + 1) * p.chunks / p.splits);
    const int n0 = tile * kRows + warp * 16;  // the warp's first row
    const int64_t book_first = static_cast<int64_t>(p.scope_rows ? min(n0, p.N - 1) / p.scope_rows : 0) * p.books_per_row;

    // Lane c's 16 bytes of a chunk of each residual's rows g and g + 8 (rows past N read row
    // N - 1, never stored), copied into the ring kStages - 1 chunks ahead, and the residuals'
    // book scales (entry 0: a quarter of the scale), loaded a chunk ahead.
    const uint4 *crow[kR][2];
#pragma unroll
    for (int r = 0; r < kR; r++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        crow[r][h] = reinterpret_cast<const uint4 *>(p.codes + static_cast<int64_t>(min(n0 + g + 8 * h, p.N - 1)) * p.row_words) +
                     r * res_vecs + c;
    auto copy_chunk = [&](int ch) {  // then one commit per chunk position, copied or not
      if (ch < c_end)
#pragma unroll
        for (int r = 0; r < kR; r++)
#pragma unroll
          for (int h = 0; h < 2; h++)
            cp_async_cg_shared_global_16(slot((ch - c_begin) % kStages, r, h) + 16 * c, crow[r][h] + 4 * ch);
      cp_async_commit_group();
    };
    auto load_scales = [&](int ch, uint32_t (&q)[kR]) {
      const int kb = p.book_shift >= 0 ? ch >> p.book_shift : ch / p.chunks_per_book;
#pragma unroll
      for (int r = 0; r < kR; r++) q[r] = __ldg(p.books + (static_cast<int64_t>(r) * p.n_books + book_first + kb) * kVqE8pBookValues);
    };

    float acc[kMT][4];
    vq_zero(acc);
    uint4 xq[kMT], xn[kMT];
    uint32_t q_cur[kR], q_nxt[kR];
#pragma unroll
    for (int k = 0; k < kStages - 1; k++) copy_chunk(c_begin + k);
    if (c_begin < c_end) {
      load_scales(c_begin, q_nxt);
#pragma unroll
      for (int j = 0; j < kMT; j++) xn[j] = __ldg(xrow[j] + 32 * c_begin);
    }
    for (int ch = c_begin; ch < c_end; ch++) {
      __syncwarp();  // the warp is done with the slot the next copy refills
      copy_chunk(ch + kStages - 1);
      cp_async_wait_group<kStages - 1>();  // chunk ch has landed (this lane's copies) ...
      __syncwarp();                        // ... and the other lanes' (their words are read too)
      const uint32_t stage = slot((ch - c_begin) % kStages, 0, 0);
#pragma unroll
      for (int r = 0; r < kR; r++) {
        q_cur[r] = q_nxt[r];
      }
      if (ch + 1 < c_end) load_scales(ch + 1, q_nxt);
      vq_e8p_scale scale[kR];
#pragma unroll
      for (int r = 0; r < kR; r++) scale[r] = vq_e8p_scale_of(q_cur[r]);

      // One fragment per residual at kMT = 1 (two independent MMA chains; at kMT = 2 the two
      // tiles' chains are independent already and registers are short), zeroed per chunk.
      constexpr int kChains = kMT == 1 ? kR : 1;
      float part[kChains][kMT][4];
      vq_zero(part);
#pragma unroll
      for (int s = 0; s < 8; s++) {
        // x of this step, and the next step's (the next chunk's first at s = 7) loaded now.
        const int next_ch = s < 7 ? ch : min(ch + 1, c_end - 1), next_s = (s + 1) & 7;
#pragma unroll
        for (int j = 0; j < kMT; j++) {
          xq[j] = xn[j];
          xn[j] = __ldg(xrow[j] + 32 * next_ch + 4 * next_s);
        }
#pragma unroll
        for (int r = 0; r < kR; r++) {
          uint4 e[2];
#pragma unroll
          for (int h = 0; h < 2; h++) {
            // vector 4s + c of the row: the word of vectors 4s + (c & 2) and + 1, half c & 1
            const uint32_t w = ld_shared_b32(stage + (r * 2 + h) * kSlotBytes + 8 * s + 2 * (c & 2));
            const uint32_t idx = (w >> half) & 0xFFFFu;
            const uint32_t pattern = ((w >> (half + 1)) & 0x7F80u) | copy;  // idx >> 8: 128 bytes each
            e[h] = vq_e8p_entry(*reinterpret_cast<const uint4 *>(smem + pattern), idx, scale[r]);
          }
          const uint32_t a0[4] = {e[0].x, e[1].x, e[0].y, e[1].y}, a1[4] = {e[0].z, e[1].z, e[0].w, e[1].w};
#pragma unroll
          for (int j = 0; j < kMT; j++) {
            const uint32_t b0[2] = {xq[j].x, xq[j].y}, b1[2] = {xq[j].z, xq[j].w};
            mma_m16n8k16(__half{}, part[r % kChains][j], a0, b0);
            mma_m16n8k16(__half{}, part[r % kChains][j], a1, b1);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kChains; r++)
#pragma unroll
        for (int j = 0; j < kMT; j++)
#pragma unroll
          for (int k = 0; k < 4; k++) acc[j][k] = __fadd_rn(acc[j][k], part[r][j][k]);
    }

    // ---- split-K: leave the partial; the tile's last unit adds them all in split order ----
    // Lane (g, c) holds rows g, g + 8 of the warp's 16 by columns 2c, 2c + 1 of each n8 tile of x.
    if (p.splits > 1) {
      constexpr int kSlots = kMT * kThreads;  // float4 per unit
      float4 *part = reinterpret_cast<float4 *>(p.partials) + static_cast<int64_t>(tile) * p.splits * kSlots;
#pragma unroll
      for (int j = 0; j < kMT; j++)
        if (8 * j + 2 * c < p.M)
          __stcg(part + split * kSlots + j * kThreads + threadIdx.x, make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
      if (!vq_split_counted_last(p.counters + tile, p.splits)) continue;
#pragma unroll
      for (int j = 0; j < kMT; j++) {
        if (8 * j + 2 * c >= p.M) continue;
        for (int o0 = 0; o0 < p.splits; o0 += kBatch) {  // kBatch partials loaded together, added in split order
          float4 v[kBatch];
#pragma unroll
          for (int o = 0; o < kBatch; o++)
            if (o0 + o < p.splits) v[o] = __ldcg(part + (o0 + o) * kSlots + j * kThreads + threadIdx.x);
#pragma unroll
          for (int o = 0; o < kBatch; o++) {
            if (o0 + o >= p.splits) break;
            if (o0 + o == 0) {
              acc[j][0] = v[o].x, acc[j][1] = v[o].y, acc[j][2] = v[o].z, acc[j][3] = v[o].w;
            } else {
              acc[j][0] = __fadd_rn(acc[j][0], v[o].x), acc[j][1] = __fadd_rn(acc[j][1], v[o].y);
              acc[j][2] = __fadd_rn(acc[j][2], v[o].z), acc[j][3] = __fadd_rn(acc[j][3], v[o].w);
            }
          }
        }
      }
      if (threadIdx.x == 0) p.counters[tile] = 0;
    }

    // ---- y = row scale x sum ----
#pragma unroll
    for (int j = 0; j < kMT; j++)
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int n = n0 + g + 8 * (k >> 1), m = 8 * j + 2 * c + (k & 1);
        if (n >= p.N || m >= p.M) continue;
        const float v = p.scales ? acc[j][k] * p.scales[n] : acc[j][k];
        vq_store_as(p.y, p.y_dtype, m * p.y_ld + n, v);
      }
  }
}

// ---- host: the limits, the split, the launch ----

namespace {

const char kOp[] = "qf_vq_gemm";

}  // namespace

extern "C" const char *qf_cuda_vq_e8p_refusal(const qf_mat *x, const qf_vq_tensors *w) {
  using namespace vq_e8p_detail;
  const qf_vq_format &f = w->fmt;
  if (f.lattice != QF_VQ_LATTICE_E8P) return "the E8P GeMV decodes the E8P lattice only";
  if (f.residuals > 2) return "the E8P GeMV takes at most 2 residuals";
  if (x->rows > QF_VQ_GEMV_MAX_M) return "the E8P GeMV takes M of 1 to 16";
  if (w->packed) return "the E8P GeMV reads the standard code layout";
  if (x->dtype != QF_F16) return "the E8P GeMV needs fp16 x";
  if (reinterpret_cast<uintptr_t>(x->data) % 16 != 0 || (x->rows > 1 && x->ld % 8 != 0))
    return "the E8P GeMV needs x rows aligned to 16 bytes";
  if (w->K % QF_VQ_MMA_CHUNK != 0) return "the E8P GeMV needs K a multiple of 256";
  if (reinterpret_cast<uintptr_t>(w->codes) % 16 != 0) return "the E8P GeMV needs codes aligned to 16 bytes";
  if (f.scope_rows % 16 != 0 || f.scope_cols % QF_VQ_MMA_CHUNK != 0)
    return "the E8P GeMV needs codebook scopes of 0 or a multiple of 16 rows and of 256 columns";
  return nullptr;
}

extern "C" qf_status qf_cuda_vq_gemv_e8p_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                              int splits, qf_vq_mma_config *used) {
  using namespace vq_e8p_detail;
  if (const char *why = qf_cuda_vq_e8p_refusal(x, w)) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: %s", kOp, why);
  const qf_vq_format &f = w->fmt;
  if (qf_status st = vq_gemm_offset_limits(ctx, kOp, x, w, y); st != QF_OK) return st;
  const int64_t M = x->rows, N = w->N, K = w->K;
  const int mt = M <= 8 ? 1 : 2;
  void (*const kernel)(vq_e8p_params) = f.residuals == 1 ? (mt == 1 ? vq_gemv_e8p_kernel<1, 1> : vq_gemv_e8p_kernel<2, 1>)
                                                         : (mt == 1 ? vq_gemv_e8p_kernel<1, 2> : vq_gemv_e8p_kernel<2, 2>);
  const size_t smem = QF_VQ_E8P_TABLE_BYTES + static_cast<size_t>(kWarps) * kStages * f.residuals * 2 * 8 * 80;
  static std::atomic<uint64_t> opted_in[2][2];
  int per_sm = 0;
  if (qf_status st = vq_blocks_per_sm(ctx, kOp, "E8P GeMV", kernel, kThreads, smem,
                                      opted_in[mt - 1][f.residuals - 1], &per_sm);
      st != QF_OK)
    return st;

  // Split: a call takes about as long as its busiest SM. An SM's blocks share its issue slots:
  // with 2 or more units an SM takes ceil(units / SMs) times a unit's time, and a unit costs its
  // chunks plus one for its start (the first copies' latency, the partial's store); an SM with
  // one unit (8 warps) runs it at about 0.6 the rate of two (an estimate: the kernel is latency
  // bound at 16 warps per SM). The split with the least of that, at most kMaxSplits, fewer on a tie.
  const int chunks = static_cast<int>(K / QF_VQ_MMA_CHUNK);
  const int tiles = static_cast<int>((N + kRows - 1) / kRows);
  const int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
  if (splits <= 0) {
    int64_t best = INT64_MAX;
    for (int s = 1; s <= kMaxSplits && s <= chunks; s++) {
      const int64_t units = static_cast<int64_t>(tiles) * s;
      const int64_t cost = (units <= sms ? 5 : 3 * ((units + sms - 1) / sms)) * ((chunks + s - 1) / s + 1);
      if (cost < best) best = cost, splits = s;
    }
    if (tiles > kQfWorkspaceCounters) splits = 1;
  }
  if (qf_status st = vq_split_check(ctx, kOp, splits, chunks, "chunks", tiles); st != QF_OK) return st;

  vq_e8p_params p = {};
  vq_chunked_call_params(p, x, w, y, chunks);
  p.splits = splits;
  p.units = tiles * splits;
  if (splits > 1) {
    const size_t partial_bytes = static_cast<size_t>(tiles) * splits * mt * kThreads * sizeof(float4);
    if (qf_status st = vq_split_workspace(ctx, kOp, partial_bytes, &p.counters, &p.partials); st != QF_OK) return st;
  }
  const int64_t grid = p.units < sms * per_sm ? p.units : sms * per_sm;
  if (used) *used = vq_gemv_shape(mt, kRows, kWarps, tiles, splits, smem);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}
