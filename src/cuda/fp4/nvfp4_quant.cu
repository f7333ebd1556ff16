// NVFP4 weight preparation on the GPU: the block quantizer (one thread per block of 16) and the
// packed layout (one thread per word of 8 codes), with the CPU reference's formulas from
// formats/nvfp4.h, so both backends write the same bytes. Run once per weight; plain kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common.cuh"
#include "formats/nvfp4.h"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_float(const void *base, qf_dtype dt, int64_t i) {
  if (dt == QF_F32) return static_cast<const float *>(base)[i];
  const uint16_t h = static_cast<const uint16_t *>(base)[i];
  return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

__global__ void quant_kernel(qf_quant_nvfp4_args a, int64_t blocks_per_row, int64_t blocks) {
  const float ts = *a.tensor_scale;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < blocks; i += int64_t{gridDim.x} * kThreads) {
    const int64_t n = i / blocks_per_row, kb = i % blocks_per_row;
    const int64_t w0 = n * a.w.ld + 16 * kb;
    float v[16], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
      v[j] = load_float(a.w.data, a.w.dtype, w0 + j);
      const float m = fabsf(v[j]);
      amax = m > amax ? m : amax; // NaN ignored, as on the CPU
    }
    const uint8_t s = qf_nvfp4_block_scale(amax, ts);
    static_cast<uint8_t *>(a.scales.data)[n * a.scales.ld + kb] = s;
    const float sv = qf_e4m3fn_to_f32(s);
    uint8_t *codes = static_cast<uint8_t *>(a.codes.data) + n * (a.codes.ld / 2) + 8 * kb;
#pragma unroll
    for (int j = 0; j < 16; j += 2)
      codes[j / 2] = qf_e2m1x2_pack(qf_nvfp4_code(v[j], sv, ts), qf_nvfp4_code(v[j + 1], sv, ts));
  }
}

__global__ void pack_kernel(qf_mat codes, qf_mat packed, int64_t words_per_row, int64_t words) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < words; i += int64_t{gridDim.x} * kThreads) {
    const int64_t n = i / words_per_row, w = i % words_per_row;
    const uint32_t q = static_cast<const uint32_t *>(codes.data)[n * (codes.ld / 8) + w];
    static_cast<uint32_t *>(packed.data)[n * (packed.ld / 8) + w] = qf_nvfp4_pack_word(q);
  }
}

unsigned grid_for(int64_t items) {
  const int64_t ctas = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(ctas < 65535 * 16 ? ctas : 65535 * 16);
}

} // namespace

extern "C" qf_status qf_cuda_quant_nvfp4(qf_ctx *ctx, const qf_quant_nvfp4_args *a) {
  const int64_t per_row = a->w.cols / 16, blocks = a->w.rows * per_row;
  quant_kernel<<<grid_for(blocks), kThreads, 0, qf_stream(ctx)>>>(*a, per_row, blocks);
  return qf_cuda_check_launch(ctx, "qf_quant_nvfp4");
}

extern "C" qf_status qf_cuda_nvfp4_pack(qf_ctx *ctx, const qf_mat *codes, const qf_mat *packed) {
  const int64_t per_row = codes->cols / 8, words = codes->rows * per_row;
  pack_kernel<<<grid_for(words), kThreads, 0, qf_stream(ctx)>>>(*codes, *packed, per_row, words);
  return qf_cuda_check_launch(ctx, "qf_nvfp4_pack");
}
