// Dynamic per-tensor quantization, pass 1: the scale of the whole tensor. Pass 2 is the static
// kernel of quant_per_tensor.cuh, which reads the scale this pass leaves in device memory.
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
#pragma once

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
        const int64_t r = r0 + u * stride;
        ch[u] = load_chunk<ACC>(x + (r < p.rows ? r : r0) * p.x_ld, c, p.cols);
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
