// qfuse-probe-wgmma-rate: does the copy engine's writing into shared memory slow the tensor cores'
// reading of their operands from it? One CTA per SM: W consumer warpgroups issue e4m3 wgmma
// m64nNk32 back to back on resident operands (a group of four k-steps is one 128-K block of each of
// the warpgroup's S sub-tiles: "rows" sub-tiles are 64-row strips sharing B, "cols" sub-tiles the
// column blocks of one strip, sharing A), one accumulator set per sub-tile, the next group issued
// before the one before is waited for. A comes from shared memory through its descriptor (SS) or
// from registers loaded once ("RS once": no A traffic at all; reloading them every block made
// ptxas serialize the wgmma, C7515, in every form tried). Beside them a producer warp (of a
// warpgroup that gives its registers to the consumers, as in the GEMM kernel) streams 16 KB
// cp.async.bulk copies from an L2-resident buffer into a scratch region of shared memory, at a set
// pace (cycles per copy) or as fast as six copies in flight allow. No promotion, no ring: the
// pipes alone. Prints an SM's cycles per block (its warpgroups' first start to last end), the
// share of the dense FP8 tensor rate (4096 multiply-adds per SM cycle), and the bytes per SM cycle
// that the wgmma read (A and B) and the copies write. Timing only: the operands are arbitrary
// bytes. docs/GEMM.md, "Shared-memory bandwidth: the wgmma's reads and the copies' writes", has
// the figures.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/shared.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/ptx/wgmma_rs.cuh"

enum AFrom { kSS, kRSOnce };
const char *const kAFromNames[] = {"SS", "RS once"};

constexpr int kLaunchSmem = 200 * 1024;
constexpr int kCopy = 16 * 1024, kSlots = 6;  // the producer's copies and scratch slots
constexpr int kSource = 256 * 1024;           // the copies' source, read by every CTA (stays in L2)

// Shared memory: A [W][S or 1][64 rows x 128 B], B [1 or S][N rows x 128 B], the scratch slots,
// their barriers, the consumers' end count.
template <int N, int W, int S, bool kCols>
struct Layout {
  static constexpr int kA = W * (kCols ? 1 : S) * 64 * 128;
  static constexpr int kB = N * (kCols ? S : 1) * 128;
  static constexpr int kScratch = kA + kB;
  static constexpr int kBars = kScratch + kSlots * kCopy;
  static constexpr int kFlag = kBars + 8 * kSlots;
  static_assert(kFlag + 16 <= kLaunchSmem, "the launch's shared memory");
};

template <int N, int W, int S, bool kCols, AFrom kFrom>
__global__ void __launch_bounds__(128 * W + 128, 1)
    rate(int blocks, int pace, const uint8_t *source, long long *cycles, long long *copied, float *sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  using L = Layout<N, W, S, kCols>;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto bar = [&](int s) { return base + L::kBars + 8 * s; };
  int *done = reinterpret_cast<int *>(smem + L::kFlag);  // consumer warpgroups done
  for (int i = threadIdx.x; i < L::kScratch / 4; i += blockDim.x)
    reinterpret_cast<uint32_t *>(smem)[i] = 0x38383838u ^ (i * 2654435761u & 0x07070707u);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; s++) mbarrier_init(bar(s), 1);
    *done = 0;
  }
  fence_mbarrier_init();
  __syncthreads();

  if (threadIdx.x >= 128 * W) {  // the producer warp: copies until the consumers are done
    if constexpr (W > 1) setmaxnreg_dec<40>();
    if (threadIdx.x != 128 * W || pace == 0) return;
    const long long t0 = clock64();
    int n = 0;
    for (; *reinterpret_cast<volatile int *>(done) < W; n++) {
      const int slot = n % kSlots;
      if (n >= kSlots) mbarrier_wait_parity(bar(slot), (n / kSlots - 1) & 1);
      while (clock64() - t0 < static_cast<long long>(n) * pace) {
      }
      mbarrier_arrive_expect_tx(bar(slot), kCopy);
      cp_async_bulk_g2s(base + L::kScratch + slot * kCopy, source + n % (kSource / kCopy) * kCopy, kCopy, bar(slot));
    }
    for (int m = n > kSlots ? n - kSlots : 0; m < n; m++) mbarrier_wait_parity(bar(m % kSlots), (m / kSlots) & 1);
    copied[2 * blockIdx.x] = static_cast<long long>(n) * kCopy;
    copied[2 * blockIdx.x + 1] = clock64() - t0;
    return;
  }

  if constexpr (W > 1) setmaxnreg_inc<232>();
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  constexpr int kStrips = kCols ? 1 : S;  // A strips a warpgroup reads a block
  // sub-tile u's A strip and B tile
  auto a_at = [&](int u) { return base + (wg * kStrips + (kCols ? 0 : u)) * 64 * 128; };
  auto b_at = [&](int u) { return base + L::kA + (kCols ? u : 0) * N * 128; };
  float acc[S][N / 2];
#pragma unroll
  for (int u = 0; u < S; u++)
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[u][i] = 0.f;
  // RS once: A's bytes from shared memory into registers, 16 bytes a thread per k-step and strip
  auto load_frags = [&](uint32_t(&f)[kStrips][4][4]) {
    if constexpr (kFrom != kSS) {
#pragma unroll
      for (int v = 0; v < kStrips; v++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
          const uint4 q = ld_shared_v4(a_at(v) + k * 2048 + t * 16);
          f[v][k][0] = q.x, f[v][k][1] = q.y, f[v][k][2] = q.z, f[v][k][3] = q.w;
        }
    }
  };
  auto fence_acc = [&]() {
#pragma unroll
    for (int u = 0; u < S; u++)
#pragma unroll
      for (int i = 0; i < N / 2; i++) wgmma_fence_operand(acc[u][i]);
  };
  // keeps the fragments that the wgmma in flight read in their registers
  auto hold = [&](uint32_t(&f)[kStrips][4][4]) {
    if constexpr (kFrom != kSS) {
#pragma unroll
      for (int v = 0; v < kStrips; v++)
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
          for (int r = 0; r < 4; r++) wgmma_fence_operand(f[v][k][r]);
    }
  };
  auto issue = [&](const uint32_t(&f)[kStrips][4][4]) {  // one block: 4 k-steps of every sub-tile
    fence_acc();
    wgmma_fence();
#pragma unroll
    for (int u = 0; u < S; u++)
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const uint64_t db = wgmma_desc_kmajor_sw128(b_at(u)) + 2 * k;
        if constexpr (kFrom == kSS)
          wgmma_m64k32_f32_e4m3<N>(acc[u], wgmma_desc_kmajor_sw128(a_at(u)) + 2 * k, db, 1);
        else
          wgmma_m64k32_f32_e4m3_rs<N>(acc[u], f[kCols ? 0 : u][k], db, 1);
      }
    wgmma_commit_group();
  };
  // block j; the wait leaves it in flight and retires block j - 1
  uint32_t a[kStrips][4][4];
  load_frags(a);
  named_barrier_sync(1, 128 * W);
  const long long t0 = clock64();
  for (int j = 0; j < blocks; j++) {
    issue(a);
    wgmma_wait_group<1>();
    hold(a);
  }
  wgmma_wait_group<0>();
  fence_acc();
  hold(a);
  const long long t1 = clock64();
  if (t == 0) atomicAdd(done, 1);
  float s = 0.f;
#pragma unroll
  for (int u = 0; u < S; u++)
#pragma unroll
    for (int i = 0; i < N / 2; i++) s += acc[u][i];
  if (s == 12345.f) sink[threadIdx.x] = s;  // (keeps the products)
  if (t == 0) cycles[2 * (blockIdx.x * W + wg)] = t0, cycles[2 * (blockIdx.x * W + wg) + 1] = t1;
}

// paces: 0 no copies, 1 as fast as they go, else cycles per 16 KB copy
template <int N, int W, int S, bool kCols, AFrom kFrom>
void run(const char *tile, int sms, const uint8_t *source, const std::vector<int> &paces) {
  const int blocks = 2048;
  auto k = rate<N, W, S, kCols, kFrom>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kLaunchSmem);
  long long *c = nullptr, *copied = nullptr;
  float *sink = nullptr;
  cudaMalloc(&c, 2 * sms * W * sizeof(long long));
  cudaMalloc(&copied, 2 * sms * sizeof(long long));
  cudaMalloc(&sink, 1024 * sizeof(float));
  // shared-memory bytes a block: the wgmma's reads of A (SS) and B
  constexpr int kAReads = kFrom == kSS ? S * 8192 : 0;
  constexpr int kReads = W * (kAReads + S * N * 128);
  const double tensor = 4.0 * 64 * N * 32 * W * S / 4096.0;  // cycles a block at the dense FP8 rate
  for (int pace : paces) {
    cudaMemset(copied, 0, 2 * sms * sizeof(long long));
    for (int rep = 0; rep < 2; rep++) k<<<sms, 128 * W + 128, kLaunchSmem>>>(blocks, pace, source, c, copied, sink);
    std::vector<long long> h(2 * sms * W), hc(2 * sms);
    cudaError_t err = cudaMemcpy(h.data(), c, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    if (err == cudaSuccess) err = cudaMemcpy(hc.data(), copied, hc.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    // an SM's time: from its first warpgroup's start to its last one's end (one warpgroup may
    // take more than its share of the tensor cores while the other waits)
    double mean = 0, bytes = 0, span = 0;
    for (int b = 0; b < sms; b++) {
      long long first = h[2 * b * W], last = h[2 * b * W + 1];
      for (int w = 1; w < W; w++) first = std::min(first, h[2 * (b * W + w)]), last = std::max(last, h[2 * (b * W + w) + 1]);
      mean += last - first;
    }
    for (int i = 0; i < sms; i++) bytes += hc[2 * i], span += hc[2 * i + 1];
    mean /= sms;
    const double per_block = mean / blocks, copy_rate = span > 0 ? bytes / span : 0.0;
    const std::string copies = pace == 0 ? "none" : pace == 1 ? "max" : std::to_string(pace) + " cyc";
    printf("%-8s %-4s %-7s copies %-8s: %7.1f cycles/block, %5.1f%% of the tensor rate; wgmma reads %5.1f B/cycle, "
           "copies %5.1f B/cycle%s%s\n",
           tile, kCols ? "cols" : "rows", kAFromNames[kFrom], copies.c_str(), per_block, 100.0 * tensor / per_block,
           kReads / per_block, copy_rate, err == cudaSuccess ? "" : ": ", err == cudaSuccess ? "" : cudaGetErrorString(err));
  }
  cudaFree(c);
  cudaFree(copied);
  cudaFree(sink);
}

int main() {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    fprintf(stderr, "qfuse-probe-wgmma-rate: needs a Hopper GPU (sm_90a)\n");
    return 1;
  }
  const int sms = prop.multiProcessorCount;
  uint8_t *source = nullptr;
  cudaMalloc(&source, kSource);
  cudaMemset(source, 0x38, kSource);
  printf("%s, %d SMs; a block is 128 of K per sub-tile; copies of 16 KB\n", prop.name, sms);
  // paces: none, 32 / 48 / 64 bytes a cycle (512 / 341 / 256 cycles a copy), as fast as they go
  const std::vector<int> paces = {0, 512, 341, 256, 1};
  run<64, 2, 1, false, kSS>("128x64", sms, source, paces);
  run<128, 1, 1, false, kSS>("64x128", sms, source, paces);
  run<128, 2, 1, false, kSS>("128x128", sms, source, paces);
  run<128, 2, 1, false, kRSOnce>("128x128", sms, source, paces);
  run<128, 2, 2, false, kSS>("256x128", sms, source, paces);
  run<256, 2, 1, false, kSS>("128x256", sms, source, paces);
  run<256, 2, 1, false, kRSOnce>("128x256", sms, source, paces);
  run<128, 2, 2, true, kSS>("128x256", sms, source, paces);
  run<128, 2, 2, true, kRSOnce>("128x256", sms, source, paces);
  cudaFree(source);
  return 0;
}
