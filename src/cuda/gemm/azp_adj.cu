// qf_gemm_azp_adj on CUDA: adj[n] = multiplier * sum_k b[n, k] for an int8 weight b [N, K].
//
// NOTES: one warp per row; lanes read 16-byte chunks (four int8x4 words each, summed with dp4a
// against ones) when the rows allow it, bytes otherwise. The host refuses multipliers for which
// the product could leave int32 (|multiplier| * 128 * K > INT32_MAX), so the kernel cannot
// overflow and needs no error path.
#include <cstdint>

#include "cuda/common.cuh"

namespace {

constexpr int kWarps = 8;

template <bool VEC>
__global__ void __launch_bounds__(kWarps * 32) azp_adj_kernel(const int8_t *__restrict__ b, int64_t ld, int64_t N, int64_t K,
                                                             int32_t multiplier, int32_t *__restrict__ adj) {
  const int lane = threadIdx.x % 32;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; n < N; n += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int8_t *row = b + n * ld;
    int32_t sum = 0;
    if (VEC) {
      for (int64_t k = static_cast<int64_t>(lane) * 16; k < K; k += 32 * 16) {
        const int4 v = *reinterpret_cast<const int4 *>(row + k);
        sum = __dp4a(v.x, 0x01010101, sum);
        sum = __dp4a(v.y, 0x01010101, sum);
        sum = __dp4a(v.z, 0x01010101, sum);
        sum = __dp4a(v.w, 0x01010101, sum);
      }
    } else {
      for (int64_t k = lane; k < K; k += 32) sum += row[k];
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    if (lane == 0) adj[n] = sum * multiplier;
  }
}

}  // namespace

extern "C" qf_status qf_cuda_gemm_azp_adj(qf_ctx *ctx, const qf_mat *b, int32_t multiplier, int32_t *adj) {
  static const char op[] = "qf_gemm_azp_adj";
  const int64_t m = multiplier < 0 ? -static_cast<int64_t>(multiplier) : multiplier;
  if (m * 128 * b->cols > INT32_MAX)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: multiplier %d times K=%lld may overflow int32 (CUDA refuses |multiplier| * 128 * K > 2^31 - 1)",
                   op, static_cast<int>(multiplier), static_cast<long long>(b->cols));
  const bool vec = reinterpret_cast<uintptr_t>(b->data) % 16 == 0 && b->ld % 16 == 0 && b->cols % 16 == 0;
  const int64_t blocks = (b->rows + kWarps - 1) / kWarps;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
  auto kernel = vec ? azp_adj_kernel<true> : azp_adj_kernel<false>;
  kernel<<<grid, kWarps * 32, 0, qf_stream(ctx)>>>(static_cast<const int8_t *>(b->data), b->ld, b->rows, b->cols, multiplier, adj);
  return qf_cuda_check_launch(ctx, op);
}
