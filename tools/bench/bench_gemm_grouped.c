/* The grouped MoE GEMM benchmark, L2 flushed: qf_gemm_fp8_blockscale_grouped (contiguous layout,
 * each expert's run padded to 128 rows) and qf_gemm_fp8_blockscale_masked (decode: each expert's
 * tokens at the head of its max_m rows) on DeepSeek-V3's expert shapes (gate + up: N = 4096,
 * K = 7168; down: N = 7168, K = 2048) for E experts whose token counts vary around a mean,
 * against cuBLASLt's block-scaled FP8 GEMM called once per expert on the same inputs (what an
 * engine without a grouped kernel runs; masked: on each expert's tokens only, rounded up to 4).
 * The SwiGLU rows (gate + up) time the fused epilogue against the same per-expert calls, which
 * leave Y unactivated: the peer does less work there. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_ops.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "cublaslt.h"

enum { MAX_EXPERTS = 16 };

typedef struct {
  qf_ctx *ctx;
  int masked;
  DLTensor a, as, b, bs, ids, d; /* masked: a and d [E, max_m, ...], ids the token counts */
  int64_t ashape[3], asshape[2], asstride[2], bshape[3], bsshape[3], idsshape[1], dshape[3];
  qf_gemm_grouped_opts opts;
} grouped_call;

static int run_qfuse(void *arg) {
  grouped_call *c = arg;
  qf_status st = c->masked ? qf_gemm_fp8_blockscale_masked(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->ids, &c->d, &c->opts)
                           : qf_gemm_fp8_blockscale_grouped(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->ids, &c->d, &c->opts);
  if (st != QF_OK) fprintf(stderr, "qfuse-bench grouped GEMM: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

/* The peer: expert e's rows [row0[e], row0[e] + rows[e]) through its own cuBLASLt plan. */
typedef struct {
  int experts;
  qfb_lt_gemm *plan[MAX_EXPERTS];
  const uint8_t *a, *b;
  float *as[MAX_EXPERTS], *bs[MAX_EXPERTS]; /* cuBLASLt's per-expert scale layouts */
  uint16_t *d;
  int64_t row0[MAX_EXPERTS], rows[MAX_EXPERTS], N, K;
} lt_loop;

static int run_lt(void *arg) {
  lt_loop *c = arg;
  for (int e = 0; e < c->experts; e++)
    if (c->rows[e] && qfb_lt_gemm_run(c->plan[e], c->a + c->row0[e] * c->K, c->b + e * c->N * c->K, c->as[e], c->bs[e],
                                      c->d + c->row0[e] * c->N, 0))
      return 1;
  return 0;
}

static DLTensor dev_tensor(void *data, qf_dtype dt, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor t = {.data = data, .device = {kDLCUDA, 0}, .ndim = ndim, .dtype = qf_dtype_to_dl(dt), .shape = shape, .strides = strides};
  return t;
}

/* Random e4m3 bytes without the NaN codes. */
static void fill_e4m3(uint8_t *h, size_t n, uint64_t *s) {
  for (size_t i = 0; i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    uint8_t v = (uint8_t)(*s >> 24);
    h[i] = (v & 0x7f) == 0x7f ? 0x3f : v;
  }
}

/* E experts, mean tokens each, counts drawn in [mean / 2, 3 mean / 2]: each run padded to 128
 * rows (contiguous), or at the head of max_m rows, the largest count rounded up to 128 (masked). */
static int one_shape(qfb *b, qf_ctx *ctx, qfb_lt *lt, int E, int64_t mean, int64_t N, int64_t K, int swiglu, int masked) {
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128, L4 = (KB + 3) / 4 * 4, cols = swiglu ? N / 2 : N;
  uint64_t seed = 0x6A09E667ull ^ (uint64_t)(mean * 31 + N * 7 + K + E);
  lt_loop peer = {.experts = E, .N = N, .K = K};
  int64_t count[MAX_EXPERTS], tokens = 0, max_m = 0, M = 0, tile_rows = 0;
  for (int e = 0; e < E; e++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    count[e] = mean / 2 + (int64_t)(seed % (uint64_t)(mean + 1));
    tokens += count[e], tile_rows += (count[e] + 127) / 128 * 128;
    if ((count[e] + 127) / 128 * 128 > max_m) max_m = (count[e] + 127) / 128 * 128;
  }
  for (int e = 0; e < E; e++) {
    peer.row0[e] = masked ? e * max_m : M;
    peer.rows[e] = masked ? (count[e] + 3) / 4 * 4 : (count[e] + 127) / 128 * 128;
    M = masked ? M + max_m : M + peer.rows[e];
  }
  const int64_t MB = M / 128;
  uint8_t *h = malloc((size_t)(M * K > E * N * K ? M * K : E * N * K));
  float *hs = malloc(sizeof(float) * (size_t)(KB * M > E * NB * L4 ? KB * M : E * NB * L4));
  int32_t *hids = malloc(sizeof(int32_t) * (size_t)MB);
  uint8_t *a = NULL, *bm = NULL;
  void *d = NULL, *dl = NULL;
  float *as = NULL, *bs = NULL;
  int32_t *ids = NULL;
  int rc = 1;
  if (!h || !hs || !hids || cudaMalloc((void **)&a, (size_t)(M * K)) || cudaMalloc((void **)&bm, (size_t)(E * N * K)) ||
      cudaMalloc(&d, (size_t)(M * cols) * 2) || cudaMalloc(&dl, (size_t)(M * N) * 2) ||
      cudaMalloc((void **)&as, sizeof(float) * (size_t)(KB * M)) || cudaMalloc((void **)&bs, sizeof(float) * (size_t)(E * NB * KB)) ||
      cudaMalloc((void **)&ids, sizeof(int32_t) * (size_t)MB))
    goto done;
  fill_e4m3(h, (size_t)(M * K), &seed);
  if (cudaMemcpy(a, h, (size_t)(M * K), cudaMemcpyHostToDevice)) goto done;
  fill_e4m3(h, (size_t)(E * N * K), &seed);
  if (cudaMemcpy(bm, h, (size_t)(E * N * K), cudaMemcpyHostToDevice)) goto done;
  for (int64_t i = 0; i < (KB * M > E * NB * L4 ? KB * M : E * NB * L4); i++) hs[i] = 0.5f + (float)(i % 7) * 0.125f;
  if (cudaMemcpy(as, hs, sizeof(float) * (size_t)(KB * M), cudaMemcpyHostToDevice) ||
      cudaMemcpy(bs, hs, sizeof(float) * (size_t)(E * NB * KB), cudaMemcpyHostToDevice))
    goto done;
  for (int e = 0; e < E; e++) { /* masked: the token counts; contiguous: each block's expert */
    if (masked) hids[e] = (int32_t)count[e];
    for (int64_t mb = peer.row0[e] / 128; !masked && mb < (peer.row0[e] + peer.rows[e]) / 128; mb++) hids[mb] = e;
  }
  if (cudaMemcpy(ids, hids, sizeof(int32_t) * (size_t)(masked ? E : MB), cudaMemcpyHostToDevice)) goto done;
  for (int e = 0; e < E; e++) {
    peer.plan[e] = qfb_lt_gemm_plan(lt, peer.rows[e], N, K, QFB_LT_SCALE_BLK);
    if (!peer.plan[e] || cudaMalloc((void **)&peer.as[e], sizeof(float) * (size_t)(KB * peer.rows[e])) ||
        cudaMalloc((void **)&peer.bs[e], sizeof(float) * (size_t)(NB * L4)) ||
        cudaMemcpy(peer.as[e], hs, sizeof(float) * (size_t)(KB * peer.rows[e]), cudaMemcpyHostToDevice) ||
        cudaMemcpy(peer.bs[e], hs, sizeof(float) * (size_t)(NB * L4), cudaMemcpyHostToDevice))
      goto done;
  }
  peer.a = a, peer.b = bm, peer.d = dl;

  grouped_call q = {.ctx = ctx, .masked = masked, .opts = {.epilogue = swiglu ? QF_GROUPED_SWIGLU : QF_GROUPED_NONE}};
  const int dims = masked ? 3 : 2;
  q.ashape[0] = masked ? E : M, q.ashape[1] = masked ? max_m : K, q.ashape[2] = K;
  q.asshape[0] = KB, q.asshape[1] = M, q.asstride[0] = M, q.asstride[1] = 1;
  q.bshape[0] = E, q.bshape[1] = N, q.bshape[2] = K;
  q.bsshape[0] = E, q.bsshape[1] = NB, q.bsshape[2] = KB;
  q.idsshape[0] = masked ? E : MB;
  q.dshape[0] = masked ? E : M, q.dshape[1] = masked ? max_m : cols, q.dshape[2] = cols;
  q.a = dev_tensor(a, QF_E4M3FN, dims, q.ashape, NULL);
  q.as = dev_tensor(as, QF_F32, 2, q.asshape, q.asstride);
  q.b = dev_tensor(bm, QF_E4M3FN, 3, q.bshape, NULL);
  q.bs = dev_tensor(bs, QF_F32, 3, q.bsshape, NULL);
  q.ids = dev_tensor(ids, QF_I32, 1, q.idsshape, NULL);
  q.d = dev_tensor(d, QF_BF16, dims, q.dshape, NULL);

  char shape[112];
  snprintf(shape, sizeof shape, "E=%d,tokens=%lld,M=%lld,N=%lld,K=%lld", E, (long long)tokens, (long long)M, (long long)N,
           (long long)K);
  /* the rows of the tiles that run (padding included) are read and written; only the tokens count as work */
  const double flops = 2.0 * (double)tokens * (double)N * (double)K;
  const double bytes =
      (double)(tile_rows * K + E * N * K) + 4.0 * (double)(KB * tile_rows + E * NB * KB) + 2.0 * (double)(tile_rows * cols);
  const char *variant[2][2] = {{"e4m3->bf16", "e4m3->bf16,swiglu"}, {"e4m3->bf16,masked", "e4m3->bf16,swiglu,masked"}};
  qfb_row row = {.op = "gemm_fp8_blockscale_grouped", .variant = variant[masked][swiglu], .shape = shape, .bytes = bytes,
                 .flops = flops};
  row.us = qfb_time_us(b, run_qfuse, &q);
  row.floor_us = qfb_floor_us(b, bytes, flops, 0);
  row.peer = swiglu ? "cublaslt_blk per expert (no SwiGLU)" : "cublaslt_blk per expert";
  row.peer_us = qfb_time_us(b, run_lt, &peer);
  qfb_emit(b, &row);
  rc = row.us > 0 && row.peer_us > 0 ? 0 : 1;
done:
  if (rc) fprintf(stderr, "bench_gemm_grouped: E=%d mean=%lld N=%lld K=%lld failed\n", E, (long long)mean, (long long)N, (long long)K);
  for (int e = 0; e < E; e++) {
    if (peer.plan[e]) qfb_lt_gemm_free(peer.plan[e]);
    cudaFree(peer.as[e]), cudaFree(peer.bs[e]);
  }
  cudaFree(a), cudaFree(bm), cudaFree(d), cudaFree(dl), cudaFree(as), cudaFree(bs), cudaFree(ids);
  free(h), free(hs), free(hids);
  return rc;
}
#endif

int bench_gemm_grouped(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  if (!qfb_op_selected(sel->ops, "gemm_fp8_blockscale_grouped") || !qfb_uses_gpu(b)) return 0;
#ifdef QF_WITH_CUDA
  /* 8 experts of a device (DeepSeek-V3's 256 over 32 devices), tokens per expert from decode
   * batches (masked) to prefill (contiguous) */
  static const int64_t means[] = {64, 256, 1024, 4096}, masked_means[] = {4, 16, 64};
  static const int64_t nk[][3] = {{4096, 7168, 1}, {4096, 7168, 0}, {7168, 2048, 0}}; /* N, K, SwiGLU */
  qfb_lt *lt = qfb_lt_open();
  if (!lt) return 1;
  int rc = 0;
  for (int masked = 0; masked < 2; masked++)
    for (size_t j = 0; j < sizeof nk / sizeof nk[0]; j++)
      for (size_t i = 0; i < (masked ? sizeof masked_means : sizeof means) / sizeof means[0]; i++) {
        const int64_t mean = masked ? masked_means[i] : means[i];
        if ((sel->m && mean != sel->m) || (sel->k && nk[j][1] != sel->k)) continue;
        rc |= one_shape(b, ctx, lt, 8, mean, nk[j][0], nk[j][1], (int)nk[j][2], masked);
        ++*rows;
      }
  qfb_lt_close(lt);
  return rc;
#else
  (void)ctx, (void)rows;
  return 0;
#endif
}
