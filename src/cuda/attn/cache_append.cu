// qf_attention_cache_append on CUDA: one thread per 16-byte chunk (8 elements) of a new row of K
// or V, which it copies to its slot's row of the cache or turns into eight e4m3fn codes there.
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common.cuh"
#include "cuda/ptx/cvt.cuh"

namespace {

const char kOp[] = "qf_attention_cache_append";

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Chunk i of the T x Hkv rows of K (D / 8 chunks a row) and then of V (Dv / 8), in (token, head,
// chunk) order.
template <typename T, bool kFp8>
__global__ void __launch_bounds__(256) cache_append_kernel(const qf_cache_append_args a) {
  const int64_t kc = a.D / 8, chunks = kc + a.Dv / 8, total = a.T * a.Hkv * chunks;
  const int64_t slots = a.num_pages * a.page_size;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / (a.Hkv * chunks), g = i / chunks % a.Hkv;
    const int32_t slot = a.slots[t];
    if (slot < 0 || slot >= slots) continue;  // padding, or past the cache
    const bool is_v = i % chunks >= kc;
    const int64_t c = is_v ? i % chunks - kc : i % chunks, page = slot / a.page_size, row = slot % a.page_size;
    const int64_t *src_st = is_v ? a.vs : a.ks, *dst_st = is_v ? a.vcs : a.kcs;
    const T *src = static_cast<const T *>(is_v ? a.v : a.k) + t * src_st[0] + g * src_st[1] + c * 8;
    const int64_t dst = page * dst_st[0] + row * dst_st[1] + g * dst_st[2] + c * 8;
    const uint4 x = *reinterpret_cast<const uint4 *>(src);
    if constexpr (!kFp8) {
      *reinterpret_cast<uint4 *>(static_cast<T *>(is_v ? a.v_cache : a.k_cache) + dst) = x;
    } else {
      const float *scale = is_v ? a.v_scale : a.k_scale;
      const float inv = 1.0f / (scale ? scale[g * (is_v ? a.v_scale_step : a.k_scale_step)] : 1.0f);
      const T *e = reinterpret_cast<const T *>(&x);
      uint32_t w[2];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint32_t lo = cvt_rn_satfinite_e4m3x2_f32(to_float(e[4 * h + 1]) * inv, to_float(e[4 * h]) * inv);
        const uint32_t hi = cvt_rn_satfinite_e4m3x2_f32(to_float(e[4 * h + 3]) * inv, to_float(e[4 * h + 2]) * inv);
        w[h] = lo | hi << 16;
      }
      *reinterpret_cast<uint2 *>(static_cast<uint8_t *>(is_v ? a.v_cache : a.k_cache) + dst) = make_uint2(w[0], w[1]);
    }
  }
}

template <typename T>
qf_status run(qf_ctx *ctx, const qf_cache_append_args *a) {
  const int64_t total = a->T * a->Hkv * ((a->D + a->Dv) / 8);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, int64_t{1} << 20));
  if (a->cache_dtype == QF_E4M3FN) cache_append_kernel<T, true><<<blocks, 256, 0, qf_stream(ctx)>>>(*a);
  else cache_append_kernel<T, false><<<blocks, 256, 0, qf_stream(ctx)>>>(*a);
  return qf_cuda_check_launch(ctx, kOp);
}

}  // namespace

extern "C" qf_status qf_cuda_attention_cache_append(qf_ctx *ctx, const qf_cache_append_args *a) {
  if (a->dtype == QF_BF16) return run<__nv_bfloat16>(ctx, a);
  return run<__half>(ctx, a);
}
