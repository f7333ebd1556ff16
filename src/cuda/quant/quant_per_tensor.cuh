// Static per-tensor quantization: q = encode(x * inv_scale).
//
// NOTES: purely memory-bound (3 to 5 bytes per element). Each thread moves 8 elements with
// 16-byte loads and 8-byte stores; the grid covers rows with blockIdx.y (looping when there are
// more than 65535 rows) and columns with blockIdx.x, so strided rows cost nothing extra and no
// 64-bit division is needed. VEC = 1 is the path for rows that are not 16-byte aligned.
#pragma once

#include "cuda/quant/vec.cuh"
#include "cuda/ptx/griddep.cuh"

// kPdl (qf_ctx_set_pdl): launched as a programmatic dependent, an instantiation of its own that
// waits for the kernel before it (a GEMM writing x) before touching memory.
template <typename Tin, typename Tout, int VEC, bool kPdl = false>
__global__ void quant_per_tensor_kernel(const Tin *__restrict__ x, int64_t x_ld, Tout *__restrict__ q, int64_t q_ld,
                                        const float *__restrict__ scale, int64_t rows, int64_t cols) {
  if constexpr (kPdl) {
    griddep_wait();
    griddep_launch_dependents();  // (a dependent GEMM may start now)
  }
  static_assert(VEC == 1 || VEC == 8, "8-wide vectors or scalars");
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (c >= cols) return;
  const float s = *scale;

  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const Tin *xr = x + r * x_ld;
    Tout *qr = q + r * q_ld;
    if (VEC == 8 && c + 8 <= cols) {
      float v[8];
      load8(xr + c, v);
      const float inv = inv_scale(s);  // after the load is issued: the division hides under it
#pragma unroll
      for (int i = 0; i < 8; i++) v[i] *= inv;
      store8(qr + c, v);
    } else {
      const float inv = inv_scale(s);
      for (int64_t i = c; i < c + VEC && i < cols; i++)
        reinterpret_cast<uint8_t *>(qr)[i] = encode(Tout{}, to_f32(xr[i]) * inv);
    }
  }
}
