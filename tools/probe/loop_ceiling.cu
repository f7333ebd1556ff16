// qfuse-probe-loop: what the block-scaled GEMM's two-set consumer loop costs per K-block with its
// operands already in shared memory (no copies), piece by piece. Each warpgroup runs the loop of
// sm90_gemm.cuh's two-set tiles: per K-block 4 wgmma m64nNk32 (K = 128) per 64-row sub-tile into
// one of two accumulator sets, the wait for the block before, and its promotion (total += block x
// the row scale); the modes add the ring's synchronization one piece at a time. "128x64/1" is a
// 128 x 64 tile run by one warpgroup of two sub-tiles instead of two (not a kernel tile). One CTA
// per SM on every SM; prints the mean and the slowest warpgroup's cycles per K-block and the share
// of the dense FP8 tensor rate (4096 multiply-adds per SM cycle) that mean reaches. Timing only:
// the operand bytes are arbitrary FP8 patterns. docs/GEMM.md, "The decode loop's own cost", has
// the figures.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/gemm/sm90_gemm_heuristic.h"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"

enum Mode {
  kBare,        // wgmma and promotions only
  kWaits,       // + a full-barrier wait per K-block, on phases already complete (no producer)
  kArrivals,    // + an empty-barrier arrival per K-block and warp (no waits, no producer)
  kHandshake,   // full / empty barriers per stage with a producer warp making bare arrivals
  kKernel,      // kHandshake + the row scales read from the stage: the kernel's loop, nothing copied
  kRelaxed,     // kKernel with relaxed (not release) arrivals
  kOneArrival,  // kKernel with one arrival per warpgroup instead of one per warp
  kPairs,       // kKernel with one barrier pair per two K-blocks (stages of K = 256)
};
const char *const kModeNames[] = {"bare",        "waits only",       "arrivals only",   "handshake",
                                  "kernel loop", "+ relaxed arrive", "+ one arrival/WG", "+ K-256 stages"};

constexpr int kLaunchSmem = 200 * 1024;  // each launch's shared memory: one CTA per SM

// N columns, W consumer warpgroups of S 64-row sub-tiles each (a K-block's wgmma of all S in one
// group, each sub-tile in its own accumulators), Stages stages of K = 128 (kPairs: Stages / 2
// barrier pairs over two K-blocks each). Threads [0, 128 W) consume; warp 4 W is the producer.
template <int N, int W, int S, int Stages, Mode M>
__global__ void __launch_bounds__(128 * W + 32) loop(int iters, long long *cycles, float *sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kRows = 64 * W * S, kA = kRows * 128, kB = N * 128, kStage = kA + kB;
  constexpr int kBars = M == kPairs ? Stages / 2 : Stages;
  static_assert(Stages * kStage + 16 * Stages + Stages * kRows * 4 <= kLaunchSmem, "the launch's shared memory");
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t bars = base + Stages * kStage;
  auto full = [&](int b) { return bars + 8 * b; };
  auto empty = [&](int b) { return bars + 8 * (Stages + b); };
  float *sa = reinterpret_cast<float *>(smem + Stages * kStage + 16 * Stages);  // row scales, kRows a stage
  for (int i = threadIdx.x; i < Stages * kStage / 4; i += blockDim.x)
    reinterpret_cast<uint32_t *>(smem)[i] = 0x38383838u ^ (i * 2654435761u & 0x07070707u);
  for (int i = threadIdx.x; i < Stages * kRows; i += blockDim.x) sa[i] = 1.0f + i * 1e-6f;
  if (threadIdx.x == 0) {
    const uint32_t arrivals = M == kArrivals ? (1u << 20) - 1 : M == kOneArrival ? W : 4 * W;
    for (int b = 0; b < Stages; b++) mbarrier_init(full(b), 1), mbarrier_init(empty(b), arrivals);
  }
  fence_mbarrier_init();
  __syncthreads();
  constexpr bool kProducer = M >= kHandshake;
  constexpr int kPer = M == kPairs ? 2 : 1;  // K-blocks per barrier pair
  if (threadIdx.x >= 128 * W) {
    if (kProducer && threadIdx.x == 128 * W)
      for (int q = 0; q < iters / kPer; q++) {
        mbarrier_wait_parity(empty(q % kBars), ((q / kBars) & 1) ^ 1);
        mbarrier_arrive(full(q % kBars));
      }
    return;
  }
  if constexpr (M == kWaits) {  // complete phase 0 of every full barrier; the waits ask for parity 0
    if (threadIdx.x == 0)
      for (int b = 0; b < Stages; b++) mbarrier_arrive(full(b));
    named_barrier_sync(1, 128 * W);
  }
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const int row = wg * 64 * S + threadIdx.x % 128 / 32 * 16 + lane / 4;  // the thread's first row
  float set0[S][N / 2], set1[S][N / 2], total[S][N / 2];
#pragma unroll
  for (int u = 0; u < S; u++)
#pragma unroll
    for (int i = 0; i < N / 2; i++) total[u][i] = 0.f;
  const long long t0 = clock64();
  auto fence_set = [&](float(&a)[S][N / 2]) {
#pragma unroll
    for (int u = 0; u < S; u++)
#pragma unroll
      for (int i = 0; i < N / 2; i++) wgmma_fence_operand(a[u][i]);
  };
  auto issue = [&](float(&a)[S][N / 2], int j) {  // block j's wgmma into `a`
    if constexpr (M == kWaits) {
      mbarrier_wait_parity(full(j % Stages), 0);
    } else if constexpr (kProducer) {
      if (j % kPer == 0) mbarrier_wait_parity(full(j / kPer % kBars), (j / kPer / kBars) & 1);
    }
    const uint64_t da = wgmma_desc_kmajor_sw128(base + j % Stages * kStage + wg * S * 64 * 128);
    const uint64_t db = wgmma_desc_kmajor_sw128(base + j % Stages * kStage + kA);
    fence_set(a);
    wgmma_fence();
#pragma unroll
    for (int u = 0; u < S; u++)
#pragma unroll
      for (int k = 0; k < 4; k++) wgmma_m64k32_f32_e4m3<N>(a[u], da + (u * 64 * 128 >> 4) + 2 * k, db + 2 * k, k);
    wgmma_commit_group();
    fence_set(a);
  };
  // block j, its wgmma done; s0[u], s1[u]: sub-tile u's two row scales
  auto promote = [&](float(&a)[S][N / 2], int j, const float(&s0)[S], const float(&s1)[S]) {
    if constexpr (M == kArrivals || (kProducer && M != kOneArrival && M != kRelaxed)) {
      if (lane == 0 && (j + 1) % kPer == 0) mbarrier_arrive(empty(j / kPer % kBars));
    } else if constexpr (M == kRelaxed) {
      if (lane == 0) mbarrier_arrive_relaxed(empty(j % Stages));
    } else if constexpr (M == kOneArrival) {
      if (threadIdx.x % 128 == 0) mbarrier_arrive(empty(j % Stages));
    }
    fence_set(a);
#pragma unroll
    for (int u = 0; u < S; u++)
#pragma unroll
      for (int i = 0; i < N / 2; i++) total[u][i] = fmaf(a[u][i], i % 4 < 2 ? s0[u] : s1[u], total[u][i]);
  };
  auto row_scales = [&](int j, float(&s0)[S], float(&s1)[S]) {
#pragma unroll
    for (int u = 0; u < S; u++) {
      s0[u] = s1[u] = 1.0f + j * 1e-7f;
      if constexpr (M >= kKernel)
        s0[u] *= sa[j % Stages * kRows + row + 64 * u], s1[u] *= sa[j % Stages * kRows + row + 64 * u + 8];
    }
  };
  // As in the kernel: one group in flight at the head of every step, and the only way out is the
  // last block's step, which waits for all (so ptxas keeps the wgmma pipelined).
  auto step = [&](float(&cur)[S][N / 2], float(&other)[S][N / 2], int j) {
    float s0[S], s1[S];
    if (j + 1 < iters) {
      issue(other, j + 1);
      row_scales(j, s0, s1);
      wgmma_wait_group<1>();
      promote(cur, j, s0, s1);
      return false;
    }
    row_scales(j, s0, s1);
    wgmma_wait_group<0>();
    promote(cur, j, s0, s1);
    return true;
  };
  issue(set0, 0);
  if constexpr (S == 1) {
    for (int j = 0;; j += 2) {
      if (step(set0, set1, j)) break;
      if (step(set1, set0, j + 1)) break;
    }
  } else {
    // (two sub-tiles: with the loop above ptxas merges both ways out and serializes the wgmma;
    // here every path round the loop keeps block j + 1's group in flight. One sub-tile keeps the
    // loop above: in this form ptxas serializes the modes without a producer instead.)
    for (int j = 0; j + 2 < iters; j += 2) {
      step(set0, set1, j);
      step(set1, set0, j + 1);
    }
    step(set0, set1, iters - 2);
    step(set1, set0, iters - 1);
  }
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int u = 0; u < S; u++)
#pragma unroll
    for (int i = 0; i < N / 2; i++) s += total[u][i];
  if (s == 12345.f) sink[threadIdx.x] = s;  // (keeps the promotions)
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * W + wg] = t1 - t0;
}

template <int N, int W, int S, int Stages, Mode M>
void run(const char *tile, int sms) {
  const int iters = 2048;  // even
  auto k = loop<N, W, S, Stages, M>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kLaunchSmem);
  long long *c = nullptr;
  float *sink = nullptr;
  cudaMalloc(&c, sms * W * sizeof(long long));
  cudaMalloc(&sink, 1024 * sizeof(float));
  for (int rep = 0; rep < 2; rep++) k<<<sms, 128 * W + 32, kLaunchSmem>>>(iters, c, sink);  // (the first warms up)
  std::vector<long long> h(sms * W);
  const cudaError_t err = cudaMemcpy(h.data(), c, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
  double mean = 0, worst = 0;
  for (int i = 0; i < sms * W; i++) mean += h[i], worst = h[i] > worst ? h[i] : worst;
  mean /= sms * W;
  const double tensor = 4.0 * 64 * N * 32 * W * S / 4096.0;  // cycles a K-block at the dense FP8 rate
  printf("%-8s %-18s stages %2d: %6.1f cycles/K-block (slowest %6.1f), %5.1f%% of the tensor rate%s%s\n", tile,
         kModeNames[M], Stages, mean / iters, worst / iters, 100.0 * tensor / (mean / iters),
         err == cudaSuccess ? "" : ": ", err == cudaSuccess ? "" : cudaGetErrorString(err));
  cudaFree(c);
  cudaFree(sink);
}

// (two sub-tiles: only the modes with a producer, whose loops ptxas keeps pipelined; in the others
// it serializes the wgmma, warning C7514)
template <int N, int W, int S, int Stages>
void tile(const char *name, int sms) {
  if constexpr (S == 1) {
    run<N, W, S, Stages, kBare>(name, sms);
    run<N, W, S, Stages, kWaits>(name, sms);
    run<N, W, S, Stages, kArrivals>(name, sms);
  }
  run<N, W, S, Stages, kHandshake>(name, sms);
  run<N, W, S, Stages, kKernel>(name, sms);
  run<N, W, S, Stages, kRelaxed>(name, sms);
  run<N, W, S, Stages, kOneArrival>(name, sms);
  run<N, W, S, Stages / 2 * 2, kPairs>(name, sms);
}

int main() {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    fprintf(stderr, "qfuse-probe-loop: needs a Hopper GPU (sm_90a)\n");
    return 1;
  }
  printf("%s, %d SMs; stages as the kernel's tiles have them (16-bit D)\n", prop.name, prop.multiProcessorCount);
  tile<64, 1, 1, sm90_gemm_stages(64, 64, 2)>("64x64", prop.multiProcessorCount);
  tile<64, 2, 1, sm90_gemm_stages(128, 64, 2)>("128x64", prop.multiProcessorCount);
  tile<64, 1, 2, sm90_gemm_stages(128, 64, 2)>("128x64/1", prop.multiProcessorCount);  // one warpgroup, two sub-tiles
  tile<128, 1, 1, sm90_gemm_stages(64, 128, 2)>("64x128", prop.multiProcessorCount);
  // 128 x 96 (two warpgroups). Wider two-warpgroup tiles spill here (ptxas: 140-900 bytes at 112
  // and 128 columns): the probe's 288 threads get 224 registers a thread, and the kernel's consumers
  // reach their 232 only by setmaxnreg, which needs a whole producer warpgroup.
  tile<96, 2, 1, sm90_gemm_stages(128, 96, 2)>("128x96", prop.multiProcessorCount);
  return 0;
}
