// fp16 split-KV decode attention over an uncompressed cache: the peer of qf_vq_attention_decode
// in qfuse-bench (written for the comparison, in the manner of flash-decoding).
//
// NOTES:
// - The cost is reading K and V once: a block takes one (chunk of tokens, kv head, batch entry),
//   with enough chunks for about four blocks per SM; each of its 4 warps walks every 4th group of
//   kSteps tokens, a lane holding D / 32 channels (one 4-, 8- or 16-byte load per row), and issues
//   the K and V rows of kSteps tokens before using them, so 2 x kSteps row loads are in flight
//   per warp.
// - The query heads of the kv head (up to kHeads per block; larger groups take more blocks, each
//   reading the rows again) sit in registers, scaled by sm_scale * log2(e); scores are reduced
//   across the warp by shuffles, and each warp keeps its own running max, sum and fp32
//   accumulators (online softmax, exp2f).
// - The warps' partials are combined through shared memory into the chunk's (m, l, o~), and a
//   second kernel merges the chunks with the LSE rule, as qfuse does.
#include "fp16_decode.h"

#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kSteps = 4;           // tokens per warp step
constexpr int kMinChunk = 128;      // tokens
constexpr float kLog2e = 1.4426950408889634f;

struct params {
  const __half *q, *k, *v;
  float *part_o, *part_ml;  // [B, Hq, n_chunks, D], [B, Hq, n_chunks, 2]
  __half *o;
  float *lse;
  int64_t seq_len, chunk_len;
  float scale;              // sm_scale * log2(e)
  int Hq, Hkv, D, group, head_tiles, n_chunks;
};

__device__ __forceinline__ void widen(uint32_t w, float &lo, float &hi) {
  lo = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  hi = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// N consecutive fp16 values at p (aligned to 2 N bytes) as fp32, in one load.
template <int N>
__device__ __forceinline__ void load_row(const __half *p, float (&v)[N]) {
  if constexpr (N == 8) {
    const uint4 r = __ldg(reinterpret_cast<const uint4 *>(p));
    widen(r.x, v[0], v[1]), widen(r.y, v[2], v[3]), widen(r.z, v[4], v[5]), widen(r.w, v[6], v[7]);
  } else if constexpr (N == 4) {
    const uint2 r = __ldg(reinterpret_cast<const uint2 *>(p));
    widen(r.x, v[0], v[1]), widen(r.y, v[2], v[3]);
  } else {
    static_assert(N == 2, "2, 4 or 8 values per lane");
    widen(__ldg(reinterpret_cast<const unsigned int *>(p)), v[0], v[1]);
  }
}

template <int kDPL, int kHeads>
__global__ void __launch_bounds__(kThreads) chunk_kernel(const params p) {
  extern __shared__ float sm[];  // [kWarps][kHeads][D + 2]: each warp's acc, m, l
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunk = blockIdx.x, g = blockIdx.y / p.head_tiles, tile = blockIdx.y - g * p.head_tiles;
  const int64_t b = blockIdx.z;
  const int h0 = g * p.group + tile * kHeads, nh = min(kHeads, p.group - tile * kHeads);
  const int C = p.Hkv * p.D, d0 = lane * kDPL;

  float q[kHeads][kDPL];
#pragma unroll
  for (int h = 0; h < kHeads; h++) {
#pragma unroll
    for (int i = 0; i < kDPL; i++) q[h][i] = 0.0f;
    if (h < nh) {
      const __half *qp = p.q + b * p.Hq * p.D + static_cast<int64_t>(h0 + h) * p.D + d0;
#pragma unroll
      for (int i = 0; i < kDPL; i++) q[h][i] = __half2float(qp[i]) * p.scale;
    }
  }
  float m[kHeads], l[kHeads], acc[kHeads][kDPL];
#pragma unroll
  for (int h = 0; h < kHeads; h++) {
    m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDPL; i++) acc[h][i] = 0.0f;
  }

  const int64_t t_begin = chunk * p.chunk_len;
  const int64_t t_end = t_begin + p.chunk_len < p.seq_len ? t_begin + p.chunk_len : p.seq_len;
  const __half *kbase = p.k + (b * p.seq_len) * C + static_cast<int64_t>(g) * p.D + d0;
  const __half *vbase = p.v + (b * p.seq_len) * C + static_cast<int64_t>(g) * p.D + d0;
  for (int64_t t0 = t_begin + warp * kSteps; t0 < t_end; t0 += kWarps * kSteps) {
    float kr[kSteps][kDPL], vr[kSteps][kDPL];
#pragma unroll
    for (int u = 0; u < kSteps; u++) {
      const int64_t t = t0 + u < t_end ? t0 + u : t_end - 1;  // past the chunk: a valid row, weight 0
      load_row<kDPL>(kbase + t * C, kr[u]);
      load_row<kDPL>(vbase + t * C, vr[u]);
    }
#pragma unroll
    for (int h = 0; h < kHeads; h++) {
      if (h >= nh) break;
      float s[kSteps];
#pragma unroll
      for (int u = 0; u < kSteps; u++) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < kDPL; i++) d = fmaf(q[h][i], kr[u][i], d);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        s[u] = t0 + u < t_end ? d : -INFINITY;
      }
      float mx = s[0];
#pragma unroll
      for (int u = 1; u < kSteps; u++) mx = fmaxf(mx, s[u]);
      const float m_new = fmaxf(m[h], mx), corr = exp2f(m[h] - m_new);
      l[h] *= corr;
#pragma unroll
      for (int i = 0; i < kDPL; i++) acc[h][i] *= corr;
#pragma unroll
      for (int u = 0; u < kSteps; u++) {
        const float pr = exp2f(s[u] - m_new);
        l[h] += pr;
#pragma unroll
        for (int i = 0; i < kDPL; i++) acc[h][i] = fmaf(pr, vr[u][i], acc[h][i]);
      }
      m[h] = m_new;
    }
  }

  // the warps' partials, then the block's: M = max m_w, o~ = sum_w exp2(m_w - M) acc_w
  const int stride = p.D + 2;
#pragma unroll
  for (int h = 0; h < kHeads; h++) {
    if (h >= nh) break;
    float *w = sm + (warp * kHeads + h) * stride;
#pragma unroll
    for (int i = 0; i < kDPL; i++) w[d0 + i] = acc[h][i];
    if (lane == 0) w[p.D] = m[h], w[p.D + 1] = l[h];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nh * (p.D + 1); i += kThreads) {
    const int h = i / (p.D + 1), d = i - h * (p.D + 1);
    float M = -INFINITY;
    for (int w = 0; w < kWarps; w++) M = fmaxf(M, sm[(w * kHeads + h) * stride + p.D]);
    float sum = 0.0f;
    for (int w = 0; w < kWarps; w++) {
      const float *ws = sm + (w * kHeads + h) * stride;
      const float wt = ws[p.D] == -INFINITY ? 0.0f : exp2f(ws[p.D] - M);  // a warp without tokens adds nothing
      sum = fmaf(wt, d < p.D ? ws[d] : ws[p.D + 1], sum);
    }
    const int64_t part = (b * p.Hq + h0 + h) * p.n_chunks + chunk;
    if (d < p.D) p.part_o[part * p.D + d] = sum;
    else p.part_ml[part * 2] = M, p.part_ml[part * 2 + 1] = sum;
  }
}

__global__ void __launch_bounds__(128) merge_kernel(const params p) {
  const int64_t bh = blockIdx.x;
  const float *ml = p.part_ml + bh * p.n_chunks * 2, *po = p.part_o + bh * p.n_chunks * p.D;
  float M = -INFINITY;
  for (int c = 0; c < p.n_chunks; c++) M = fmaxf(M, ml[2 * c]);
  float L = 0.0f;
  for (int c = 0; c < p.n_chunks; c++) L = fmaf(exp2f(ml[2 * c] - M), ml[2 * c + 1], L);
  for (int d = threadIdx.x; d < p.D; d += blockDim.x) {
    float a = 0.0f;
    for (int c = 0; c < p.n_chunks; c++) a = fmaf(exp2f(ml[2 * c] - M), po[static_cast<int64_t>(c) * p.D + d], a);
    p.o[bh * p.D + d] = __float2half_rn(a / L);
  }
  if (threadIdx.x == 0) p.lse[bh] = (M + log2f(L)) * 0.6931471805599453f;
}

template <int kDPL, int kHeads>
cudaError_t launch(const params &p, int64_t B, cudaStream_t s) {
  const size_t smem = sizeof(float) * kWarps * kHeads * (p.D + 2);
  const dim3 grid(static_cast<unsigned>(p.n_chunks), static_cast<unsigned>(p.Hkv * p.head_tiles), static_cast<unsigned>(B));
  chunk_kernel<kDPL, kHeads><<<grid, kThreads, smem, s>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  merge_kernel<<<static_cast<unsigned>(B * p.Hq), 128, 0, s>>>(p);
  return cudaGetLastError();
}

int64_t chunks_for(int64_t B, int64_t Hkv, int64_t head_tiles, int64_t seq_len, int sms) {
  const int64_t blocks = B * Hkv * head_tiles, want = (4 * static_cast<int64_t>(sms) + blocks - 1) / blocks;
  const int64_t most = (seq_len + kMinChunk - 1) / kMinChunk;
  return want < 1 ? 1 : want > most ? most : want;
}

int sm_count() {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
  }
  return sms;
}

}  // namespace

extern "C" size_t qfb_fp16_decode_workspace(int64_t B, int64_t Hq, int64_t D, int64_t seq_len) {
  const int64_t most = (seq_len + kMinChunk - 1) / kMinChunk;  // chunks, at most
  return static_cast<size_t>(B * Hq * most * (D + 2)) * sizeof(float) + 256;
}

extern "C" int qfb_fp16_decode(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B, int64_t Hq,
                               int64_t Hkv, int64_t D, int64_t seq_len, float sm_scale, void *workspace,
                               size_t workspace_bytes, cudaStream_t s) {
  if ((D != 64 && D != 128 && D != 256) || Hkv <= 0 || Hq % Hkv != 0 || B <= 0 || seq_len <= 0) {
    std::fprintf(stderr, "qfb_fp16_decode: unsupported shape B=%lld Hq=%lld Hkv=%lld D=%lld seq_len=%lld\n",
                 static_cast<long long>(B), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                 static_cast<long long>(D), static_cast<long long>(seq_len));
    return 1;
  }
  if (workspace_bytes < qfb_fp16_decode_workspace(B, Hq, D, seq_len)) {
    std::fprintf(stderr, "qfb_fp16_decode: workspace of %zu bytes is too small\n", workspace_bytes);
    return 1;
  }
  params p = {};
  p.q = static_cast<const __half *>(q);
  p.k = static_cast<const __half *>(k);
  p.v = static_cast<const __half *>(v);
  p.o = static_cast<__half *>(o);
  p.lse = lse;
  p.seq_len = seq_len;
  p.scale = sm_scale * kLog2e;
  p.Hq = static_cast<int>(Hq);
  p.Hkv = static_cast<int>(Hkv);
  p.D = static_cast<int>(D);
  p.group = static_cast<int>(Hq / Hkv);
  const int heads = p.group == 1 ? 1 : 8;
  p.head_tiles = (p.group + heads - 1) / heads;
  const int64_t n_chunks = chunks_for(B, Hkv, p.head_tiles, seq_len, sm_count());
  p.chunk_len = (seq_len + n_chunks - 1) / n_chunks;
  p.n_chunks = static_cast<int>((seq_len + p.chunk_len - 1) / p.chunk_len);
  p.part_o = static_cast<float *>(workspace);
  p.part_ml = p.part_o + B * Hq * p.n_chunks * D;

  cudaError_t err;
  if (D == 64) err = heads == 1 ? launch<2, 1>(p, B, s) : launch<2, 8>(p, B, s);
  else if (D == 128) err = heads == 1 ? launch<4, 1>(p, B, s) : launch<4, 8>(p, B, s);
  else err = heads == 1 ? launch<8, 1>(p, B, s) : launch<8, 8>(p, B, s);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "qfb_fp16_decode: launch failed: %s (%s)\n", cudaGetErrorName(err), cudaGetErrorString(err));
    return static_cast<int>(err);
  }
  return 0;
}
