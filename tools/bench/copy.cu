// Device-to-device copy with 16-byte accesses (the bandwidth ceiling of qfuse-bench), and the
// read pass that flushes the L2 before each timed run.
#include "bench.h"

#include <cstdint>
#include <cstdio>

namespace {

constexpr int kThreads = 256;
constexpr int kLoadsInFlight = 4;  // independent 16-byte loads per thread per iteration

static_assert(sizeof(uint4) == 16, "copy16 moves 16-byte vectors");
static_assert(kThreads % 32 == 0, "blocks are whole warps");

// NOTES: the kLoadsInFlight loads of an iteration are one grid stride apart, so each warp-wide
// access is a contiguous 512-byte segment, and all of them are issued before the first store:
// 64 bytes in flight per thread keeps DRAM busy with a grid of a single wave.
__global__ void __launch_bounds__(kThreads)
    copy16_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;

  // main loop: every thread has all kLoadsInFlight vectors
  for (; i + (kLoadsInFlight - 1) * stride < n; i += kLoadsInFlight * stride) {
    uint4 v[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) dst[i + u * stride] = v[u];
  }

  // remainder: fewer than kLoadsInFlight strides left
  for (; i < n; i += stride) dst[i] = src[i];
}

// The last bytes % 16 bytes, one thread each.
__global__ void copy_tail_kernel(const unsigned char* __restrict__ src,
                                 unsigned char* __restrict__ dst, unsigned n) {
  if (threadIdx.x < n) dst[threadIdx.x] = src[threadIdx.x];
}

// Reads n vectors as copy16_kernel does (kLoadsInFlight loads per thread, one grid stride apart,
// all issued before any is used) and leaves one word per warp in sink (so that no load can be
// dropped): about the least time any kernel takes to read those bytes once, at whatever size (the
// read floor of qfuse-bench's rows); after it the L2 holds clean lines of src (the flush).
__global__ void __launch_bounds__(kThreads)
    read16_kernel(const uint4* __restrict__ src, size_t n, unsigned* __restrict__ sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
  unsigned acc = 0;
  for (; i + (kLoadsInFlight - 1) * stride < n; i += kLoadsInFlight * stride) {
    uint4 v[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (threadIdx.x % 32 == 0) sink[(static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x) / 32] = acc;
}

bool cuda_ok(cudaError_t err, const char* call, int line) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, line, call, cudaGetErrorName(err),
               cudaGetErrorString(err));
  return false;
}

}  // namespace

#define QFB_CUDA_TRY(call)                                        \
  do {                                                            \
    const cudaError_t qfb_err_ = (call);                          \
    if (!cuda_ok(qfb_err_, #call, __LINE__)) return (int)qfb_err_; \
  } while (0)

// Blocks for kernel k over n16 vectors (kLoadsInFlight a thread) into grid: one full wave, fewer
// when the vectors do not need them. Returns 0, or the cudaError_t after printing it.
template <typename Kernel>
static int full_wave(Kernel k, size_t n16, size_t& grid) {
  int dev = 0, sms = 0, per_sm = 0;
  QFB_CUDA_TRY(cudaGetDevice(&dev));
  QFB_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  QFB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, 0));
  const size_t per_block = static_cast<size_t>(kThreads) * kLoadsInFlight;
  const size_t needed = (n16 + per_block - 1) / per_block;
  grid = static_cast<size_t>(sms) * static_cast<size_t>(per_sm > 0 ? per_sm : 1);
  if (grid > needed) grid = needed;
  return 0;
}

extern "C" int qfb_copy16(const void* src, void* dst, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return 0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) != 0) {
    std::fprintf(stderr, "qfb_copy16: src %p and dst %p must be 16-byte aligned\n", src, dst);
    return (int)cudaErrorInvalidValue;
  }
  const size_t n16 = bytes / 16;
  const unsigned tail = static_cast<unsigned>(bytes % 16);

  if (n16 > 0) {
    size_t grid = 0;
    if (const int err = full_wave(copy16_kernel, n16, grid)) return err;
    copy16_kernel<<<static_cast<unsigned>(grid), kThreads, 0, s>>>(
        static_cast<const uint4*>(src), static_cast<uint4*>(dst), n16);
    QFB_CUDA_TRY(cudaGetLastError());
  }
  if (tail > 0) {
    copy_tail_kernel<<<1, 32, 0, s>>>(static_cast<const unsigned char*>(src) + n16 * 16,
                                      static_cast<unsigned char*>(dst) + n16 * 16, tail);
    QFB_CUDA_TRY(cudaGetLastError());
  }
  return 0;
}

extern "C" int qfb_read16(const void* src, size_t bytes, unsigned* sink, unsigned sink_words, cudaStream_t s) {
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0 || bytes % 16 != 0 || sink_words < kThreads / 32) {
    std::fprintf(stderr, "qfb_read16: src %p and bytes %zu must be multiples of 16, sink_words %u at least %d\n",
                 src, bytes, sink_words, kThreads / 32);
    return (int)cudaErrorInvalidValue;
  }
  const size_t n16 = bytes / 16;
  if (n16 == 0) return 0;
  size_t grid = 0;
  if (const int err = full_wave(read16_kernel, n16, grid)) return err;
  if (grid > sink_words / (kThreads / 32)) grid = sink_words / (kThreads / 32);  // a word per warp
  read16_kernel<<<static_cast<unsigned>(grid), kThreads, 0, s>>>(static_cast<const uint4*>(src), n16, sink);
  QFB_CUDA_TRY(cudaGetLastError());
  return 0;
}
