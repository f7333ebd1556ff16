/* GEMM benchmarks: qf_gemm_fp8_blockscale against cuBLASLt's block-scaled FP8 GEMM (A scales
 * VEC128_32F, B scales BLK128x128_32F, bf16 D) on the same shapes, with L2 flushed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ops.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "cublaslt.h"

typedef struct {
  qf_ctx *ctx;
  DLTensor a, as, b, bs, d;
  int64_t ashape[2], asshape[2], asstride[2], bshape[2], bsshape[2], dshape[2];
} gemm_call;

static int run_qfuse(void *arg) {
  gemm_call *c = arg;
  qf_status st = qf_gemm_fp8_blockscale(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->d, NULL);
  if (st != QF_OK) fprintf(stderr, "qf_gemm_fp8_blockscale: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

typedef struct {
  qfb_lt_gemm *g;
  const void *a, *b;
  const float *as, *bs;
  void *d;
} lt_call;

static int run_lt(void *arg) {
  lt_call *c = arg;
  return qfb_lt_gemm_run(c->g, c->a, c->b, c->as, c->bs, c->d, 0);
}

static DLTensor dev_tensor(void *data, qf_dtype dt, int64_t *shape, int64_t *strides) {
  DLTensor t = {.data = data, .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(dt), .shape = shape, .strides = strides};
  return t;
}

/* Random e4m3 bytes without the NaN codes, and scales around 1. */
static void fill_fp8(uint8_t *h, size_t n, uint64_t *s) {
  for (size_t i = 0; i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    uint8_t v = (uint8_t)(*s >> 24);
    h[i] = (v & 0x7f) == 0x7f ? 0x3f : v;
  }
}

static int one_shape(qfb *b, qf_ctx *ctx, qfb_lt *lt, int64_t M, int64_t N, int64_t K) {
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4;
  const size_t a_bytes = (size_t)(Mp * K), b_bytes = (size_t)(N * K);
  uint8_t *h = malloc(a_bytes > b_bytes ? a_bytes : b_bytes);
  float *hs = malloc(sizeof(float) * (size_t)((KB * Mp > NB * ((KB + 3) / 4 * 4) ? KB * Mp : NB * ((KB + 3) / 4 * 4))));
  void *a = NULL, *bm = NULL, *d = NULL, *dl = NULL;
  float *as = NULL, *bs = NULL, *bs_lt = NULL;
  uint64_t seed = 0x51ED2701ull ^ (uint64_t)(M * 131 + N * 7 + K);
  int rc = 1;
  if (!h || !hs || cudaMalloc(&a, a_bytes) || cudaMalloc(&bm, b_bytes) || cudaMalloc(&d, (size_t)(Mp * N) * 2) ||
      cudaMalloc(&dl, (size_t)(Mp * N) * 2) || cudaMalloc((void **)&as, sizeof(float) * (size_t)(KB * Mp)) ||
      cudaMalloc((void **)&bs, sizeof(float) * (size_t)(NB * KB)) ||
      cudaMalloc((void **)&bs_lt, sizeof(float) * (size_t)(NB * ((KB + 3) / 4 * 4))))
    goto done;
  fill_fp8(h, a_bytes, &seed);
  if (cudaMemcpy(a, h, a_bytes, cudaMemcpyHostToDevice)) goto done;
  fill_fp8(h, b_bytes, &seed);
  if (cudaMemcpy(bm, h, b_bytes, cudaMemcpyHostToDevice)) goto done;
  for (int64_t i = 0; i < KB * Mp; i++) hs[i] = 0.5f + (float)(i % 7) * 0.125f;
  if (cudaMemcpy(as, hs, sizeof(float) * (size_t)(KB * Mp), cudaMemcpyHostToDevice) ||
      cudaMemcpy(bs, hs, sizeof(float) * (size_t)(NB * KB), cudaMemcpyHostToDevice) ||
      cudaMemcpy(bs_lt, hs, sizeof(float) * (size_t)(NB * ((KB + 3) / 4 * 4)), cudaMemcpyHostToDevice))
    goto done;

  gemm_call q = {.ctx = ctx};
  q.ashape[0] = M, q.ashape[1] = K;
  q.asshape[0] = KB, q.asshape[1] = M, q.asstride[0] = Mp, q.asstride[1] = 1;
  q.bshape[0] = N, q.bshape[1] = K;
  q.bsshape[0] = NB, q.bsshape[1] = KB;
  q.dshape[0] = M, q.dshape[1] = N;
  q.a = dev_tensor(a, QF_E4M3FN, q.ashape, NULL);
  q.as = dev_tensor(as, QF_F32, q.asshape, q.asstride);
  q.b = dev_tensor(bm, QF_E4M3FN, q.bshape, NULL);
  q.bs = dev_tensor(bs, QF_F32, q.bsshape, NULL);
  q.d = dev_tensor(d, QF_BF16, q.dshape, NULL);

  char shape[64];
  snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
  const double flops = 2.0 * (double)M * (double)N * (double)K;
  const double bytes = (double)(M * K + N * K) + 4.0 * (double)(KB * M + NB * KB) + 2.0 * (double)(M * N);
  qfb_row row = {.op = "gemm_fp8_blockscale", .variant = "e4m3->bf16", .shape = shape, .bytes = bytes, .flops = flops};
  row.us = qfb_time_us(b, run_qfuse, &q);
  row.floor_us = qfb_floor_us(b, bytes, flops, 0);
  /* cuBLASLt's block scaling needs M a multiple of 4: the peer computes Mp rows. */
  qfb_lt_gemm *g = qfb_lt_gemm_plan(lt, Mp, N, K, QFB_LT_SCALE_BLK);
  if (g) {
    lt_call c = {g, a, bm, as, bs_lt, dl};
    row.peer = Mp == M ? "cublaslt_blk" : "cublaslt_blk(M padded to 4)";
    row.peer_us = qfb_time_us(b, run_lt, &c);
    qfb_lt_gemm_free(g);
  }
  qfb_emit(b, &row);
  rc = row.us > 0 ? 0 : 1;
done:
  if (rc) fprintf(stderr, "bench_gemm: M=%lld N=%lld K=%lld failed\n", (long long)M, (long long)N, (long long)K);
  cudaFree(a), cudaFree(bm), cudaFree(d), cudaFree(dl), cudaFree(as), cudaFree(bs), cudaFree(bs_lt);
  free(h), free(hs);
  return rc;
}
#endif

int bench_gemm(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  if (!qfb_op_selected(sel->ops, "gemm_fp8_blockscale") || !qfb_uses_gpu(b)) return 0; /* the CPU reference is float64: not timed */
#ifdef QF_WITH_CUDA
  static const int64_t ms[] = {1, 16, 32, 64, 128, 4096};
  static const int64_t nk[][2] = {{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {4096, 7168}, {7168, 2048}};
  qfb_lt *lt = qfb_lt_open();
  if (!lt) return 1;
  int rc = 0;
  for (size_t j = 0; j < sizeof nk / sizeof nk[0]; j++)
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
      if (sel->m && ms[i] != sel->m) continue;
      rc |= one_shape(b, ctx, lt, ms[i], nk[j][0], nk[j][1]);
      ++*rows;
    }
  qfb_lt_close(lt);
  return rc;
#else
  (void)ctx, (void)rows;
  return 0;
#endif
}
