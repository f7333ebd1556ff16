// Dynamic per-tensor quantization. Small tensors: one kernel (tensor_dynamic_fused_kernel, below).
// Larger ones: pass 1 here computes the scale of the whole tensor, pass 2 is the static kernel of
// quant_per_tensor.cuh, which reads the scale this pass leaves in device memory.
//
// NOTES:
// - The scale is s(amax) = qf_group_scale(amax, qmax, no bound, scale_min), a non-decreasing
//   function of amax when non-finite amax counts as largest (it gives the canonical NaN, whose
//   bits 0x7FC00000 sort above every finite positive float). So max over blocks of s(block amax)
//   equals s(tensor amax): each block computes its own scale and merges it with an integer
//   atomicMax on the bits (positive floats order like their bits). The output itself is the
//   accumulator, zeroed beforehand, and needs no second kernel to turn amax into a scale.
// - A block is 2-D: threadIdx.x walks 8-element chunks along a row, threadIdx.y rows, so narrow
//   tensors keep every lane busy; each thread issues kUnroll rows' loads before reducing them.
//   A grid of a few blocks per SM walks the rows, which keeps the atomics to a few thousand, and
//   a block skips its atomic when the stored value is already at least its own.
// - The fused kernel's grid barrier counts with acq_rel atomics and spins on an acquire load
//   (src/cuda/ptx/sync.cuh) instead of fence.sc around relaxed atomics: M = 1 to 128 3-7% faster
//   ((128, 7168) 6.26 -> 5.79 us; H200, A/B run twice).
// - The grid walks the rows last to first, and pass 2 walks them first to last: the rows this pass
//   read last are still in the L2 when pass 2 starts, and pass 2 wants them first. Walking both
//   the same way, pass 2 asks first for the rows evicted first and misses on all of them once x
//   is larger than the L2. H200, A/B run twice: M = 4096, K = 7168 (59 MB) 44.3 -> 42.0 us,
//   16384 x 2048 48.6 -> 46.4 us, 4096 x 18432 98.0 -> 95.9 us, the rest unchanged: far less than
//   a whole L2 of hits would give (pass 2's own q lines share the L2, and its hashing is not LRU).
#pragma once

#include "cuda/ptx/sync.cuh"
#include "cuda/quant/token_quant.cuh"

constexpr int kAmaxThreads = 256;
constexpr int kAmaxUnroll = 4;

struct TensorAmaxParams {
  const void *x;
  int64_t x_ld, rows;
  int cols;
  float qmax, scale_min;
  unsigned int *scale_bits;  // the fp32 scale, zeroed before the launch
};

template <typename Tin, RowAccess ACC>
__global__ void __launch_bounds__(kAmaxThreads) tensor_scale_kernel(TensorAmaxParams p) {
  __shared__ float slots[kAmaxThreads / 32];
  const Tin *x = static_cast<const Tin *>(p.x);
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.y;

  float amax = 0.0f;  // columns past the row read as 0: no effect
  if (c < p.cols) {
    for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r0 < p.rows; r0 += kAmaxUnroll * stride) {
      Chunk<Tin> ch[kAmaxUnroll];
#pragma unroll
      for (int u = 0; u < kAmaxUnroll; u++) {
        const int64_t r = r0 + u * stride;  // counted from the last row (NOTES)
        ch[u] = load_chunk<ACC>(x + (p.rows - 1 - (r < p.rows ? r : r0)) * p.x_ld, c, p.cols);
      }
#pragma unroll
      for (int u = 0; u < kAmaxUnroll; u++)
#pragma unroll
        for (int j = 0; j < 8; j++) amax = qf_nan_max(amax, qf_absf(ch[u].f32(j)));
    }
  }
  amax = block_allreduce(amax, NanMax{}, slots);
  if (threadIdx.x + threadIdx.y == 0) {
    const unsigned int bits = qf_f32_bits(qf_group_scale(amax, p.qmax, 0, 0.0f, p.scale_min, 0));
    if (*reinterpret_cast<volatile unsigned int *>(p.scale_bits) < bits) atomicMax(p.scale_bits, bits);
  }
}

// ---- small tensors: one kernel -----------------------------------------------------------------
//
// NOTES: below a few million elements the two passes cost two launches and a memset on top of a
// tiny amount of data (8.3 us against a 3.6 us copy of the same bytes at 1 x 2048 on an H200).
// Here the whole tensor fits in the registers of one resident grid (cooperative launch, every
// block on an SM at once): each thread loads its kFusedVpt chunks, the blocks merge their scales
// as in pass 1 into a workspace word, meet at a grid barrier, and quantize from the registers.
// The workspace words (scale bits, barrier count, leaving count) are zero between calls: the
// last block to leave resets them.

constexpr int kFusedThreads = 256, kFusedVpt = 4;

struct TensorFusedParams {
  const void *x;
  void *q;
  int64_t x_ld, q_ld;
  int rows, cols, row_chunks;  // chunks of 8 per row
  float qmax, scale_min;
  float *scale;                // the output scale
  unsigned int *ws;            // [0] scale bits, [1] blocks at the barrier, [2] blocks done
};

template <typename Tin, typename Tout, RowAccess ACC>
__global__ void __launch_bounds__(kFusedThreads) tensor_dynamic_fused_kernel(TensorFusedParams p) {
  __shared__ float slots[kFusedThreads / 32];
  const Tin *x = static_cast<const Tin *>(p.x);
  const int64_t total = static_cast<int64_t>(p.rows) * p.row_chunks, threads = int64_t(gridDim.x) * kFusedThreads;
  const int64_t first = int64_t(blockIdx.x) * kFusedThreads + threadIdx.x;
  // Chunk i of this thread: k = first + i * threads of the tensor, row r, first column c.
  auto locate = [&](int i, int64_t &k, int &r, int &c) {
    k = first + i * threads;
    r = static_cast<int>(k / p.row_chunks), c = static_cast<int>(k - int64_t(r) * p.row_chunks) * 8;
  };
  Chunk<Tin> ch[kFusedVpt];
  float amax = 0.0f;  // columns past the row and chunks past the tensor read as 0
#pragma unroll
  for (int i = 0; i < kFusedVpt; i++) {
    int64_t k;
    int r, c;
    locate(i, k, r, c);
    ch[i] = load_chunk<ACC>(x + int64_t(k < total ? r : 0) * p.x_ld, c, k < total ? p.cols : 0);
  }
#pragma unroll
  for (int i = 0; i < kFusedVpt; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) amax = qf_nan_max(amax, qf_absf(ch[i].f32(j)));
  amax = block_allreduce(amax, NanMax{}, slots);

  // The tensor's scale: merge, then a grid barrier (every block is resident).
  if (threadIdx.x == 0) {
    const unsigned int bits = qf_f32_bits(qf_group_scale(amax, p.qmax, 0, 0.0f, p.scale_min, 0));
    atomicMax(p.ws, bits);
    // (the count releases the merge above; the spin's load acquires every block's)
    atom_add_acq_rel_gpu(reinterpret_cast<int *>(p.ws + 1), 1);
    while (ld_acquire_gpu(reinterpret_cast<const int *>(p.ws + 1)) < static_cast<int>(gridDim.x)) __nanosleep(64);
    slots[0] = __uint_as_float(*reinterpret_cast<volatile unsigned int *>(p.ws));
    if (blockIdx.x == 0) *p.scale = slots[0];
    // the read above is done before the count says so (release): the reset cannot overtake it
    if (atom_add_acq_rel_gpu(reinterpret_cast<int *>(p.ws + 2), 1) == static_cast<int>(gridDim.x) - 1)
      p.ws[0] = 0, p.ws[1] = 0, p.ws[2] = 0;  // the last to leave
  }
  __syncthreads();
  const float inv = inv_scale(slots[0]);

  Tout *q = static_cast<Tout *>(p.q);
#pragma unroll
  for (int i = 0; i < kFusedVpt; i++) {
    int64_t k;
    int r, c;
    locate(i, k, r, c);
    if (k >= total) break;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = ch[i].f32(j) * inv;
    store_q_chunk<ACC>(q + int64_t(r) * p.q_ld, c, p.cols, v);
  }
}
