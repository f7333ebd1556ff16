/* GEMM benchmarks, with L2 flushed, each against a cuBLASLt peer run on the same inputs:
 *  gemm_fp8_blockscale: qf_gemm_fp8_blockscale against cuBLASLt's block-scaled FP8 GEMM (A scales
 *    VEC128_32F, B scales BLK128x128_32F, bf16 D) on the DeepSeek-V3 shapes.
 *  gemm_fp8_blockscale_grid (only when named): the same on more weights and M (below).
 *  gemm_fp8_blockscale_plans (only when named): the heuristic's plan and every plan forced
 *    (qf_gemm_fp8_blockscale_with), for checking the heuristic (below).
 *  gemm_fp8_blockscale_lt_algos (only when named): the bench's shapes against every configuration
 *    cuBLASLt accepts for them, not only its heuristic's first (algo_rows).
 *  gemm_scaled: qf_gemm_scaled with per-token a_scale [M], per-channel b_scale [N] and bf16 D on
 *    Llama-style shapes; e4m3 against cuBLASLt's FP8 GEMM with OUTER_VEC scales (bf16 D), int8
 *    against cuBLASLt's INT8 GEMM with int32 D and no scaling (the fastest INT8 GEMM it has). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ops.h"
#include "formats/formats.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "core/backend.h"
#include "cublaslt.h"

typedef struct {
  qf_ctx *ctx;
  DLTensor a, as, b, bs, d;
  int64_t ashape[2], asshape[2], asstride[2], bshape[2], bsshape[2], dshape[2];
  const qf_gemm_blockscale_opts *opts;
} gemm_call;

static int run_qfuse(void *arg) {
  gemm_call *c = arg;
  qf_status st = qf_gemm_fp8_blockscale(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->d, c->opts);
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

/* Random operand bytes: e4m3 without the NaN codes (fp8), or any int8. */
static void fill_operand(uint8_t *h, size_t n, int fp8, uint64_t *s) {
  for (size_t i = 0; i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    uint8_t v = (uint8_t)(*s >> 24);
    h[i] = fp8 && (v & 0x7f) == 0x7f ? 0x3f : v;
  }
}

/* Scales around 1. */
static void fill_scales(float *h, int64_t n) {
  for (int64_t i = 0; i < n; i++) h[i] = 0.5f + (float)(i % 7) * 0.125f;
}

/* One forced plan of the engine (qf_gemm_fp8_blockscale_with). */
typedef struct {
  gemm_call *q;
  int block_m, block_n, splits;
} plan_call;

static int run_plan(void *arg) {
  plan_call *c = arg;
  gemm_call *q = c->q;
  qf_status st = qf_gemm_fp8_blockscale_with(q->ctx, &q->a, &q->as, &q->b, &q->bs, &q->d, NULL, c->block_m, c->block_n,
                                             c->splits);
  if (st != QF_OK) fprintf(stderr, "qf_gemm_fp8_blockscale_with: %s\n", qf_ctx_last_error(q->ctx));
  return st != QF_OK;
}

/* Op gemm_fp8_blockscale_plans: the row `auto` (the heuristic's plan, named BMxBN/splits, "+tail"
 * for a last round of owners and helpers) has been emitted; now every plan of the engine's tiles
 * with the tiles past the last whole wave unsplit or split 2 to 16 ways (at most one wave of split
 * units, at least two K-blocks a range) that the engine takes, each against the same peer time. */
static int plan_rows(qfb *b, gemm_call *q, qfb_row *row, int64_t M, int64_t N) {
  static const int tiles_of[][2] = {{64, 64}, {64, 128}, {128, 64}, {128, 96}, {128, 128}, {192, 128}, {256, 128}};
  int sms = 0, rc = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (size_t t = 0; t < sizeof tiles_of / sizeof tiles_of[0]; t++) {
    const int bm = tiles_of[t][0], bn = tiles_of[t][1];
    if (bm > 128 && M <= 128) continue;
    const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn), rem = tiles < sms ? tiles : tiles % sms;
    const int fill = rem ? (int)(sms / rem) : 0;  /* the ranges that fill the SMs */
    int splits[9] = {1, 2, 3, 4, 6, 8, 12, 16}, n = 8, listed = 0;
    for (int i = 0; i < n; i++) listed |= splits[i] == fill;
    if (!listed && fill > 1) splits[n++] = fill;
    for (int i = 0; i < n; i++) {
      const int s = splits[i];
      if (s > fill && s > 1) continue; /* (one round of split units at most; the engine refuses what it cannot run) */
      plan_call c = {q, bm, bn, s};
      if (qf_gemm_fp8_blockscale_with(q->ctx, &q->a, &q->as, &q->b, &q->bs, &q->d, NULL, bm, bn, s) != QF_OK) continue;
      char variant[48];
      snprintf(variant, sizeof variant, "plan=%dx%d/%d", bm, bn, s);
      qfb_row r = *row;
      r.variant = variant;
      r.us = qfb_time_us(b, run_plan, &c);
      qfb_emit(b, &r);
      rc |= r.us > 0 ? 0 : 1;
    }
  }
  return rc;
}

/* Op gemm_fp8_blockscale_lt_algos: the row of the heuristic's first algorithm (the bench's peer)
 * has been emitted and its D is in c->d (n bf16 values); now a row for each algorithm cuBLASLt can
 * run the shape with (qfb_lt_gemm_algos: its heuristic's list, then the configurations of every
 * algorithm id that cublasLtMatmulAlgoCheck accepts; at most 96) as the peer of the same qfuse time. One that fails to run or whose D
 * differs from the first's by more than 1e-2 (relative Frobenius) gets no row, with a message. */
static int algo_rows(qfb *b, lt_call *c, const qfb_row *row, int64_t n) {
  int checked = 0;
  const int found = qfb_lt_gemm_algos(c->g, 96, &checked);
  uint16_t *ref = malloc(sizeof(uint16_t) * (size_t)n), *got = malloc(sizeof(uint16_t) * (size_t)n);
  int rc = found < 1 || !ref || !got || cudaMemcpy(ref, c->d, sizeof(uint16_t) * (size_t)n, cudaMemcpyDeviceToHost);
  for (int i = 0; i < found && !rc; i++) {
    if (qfb_lt_gemm_use_algo(c->g, i) || run_lt(c) || cudaDeviceSynchronize()) {
      fprintf(stderr, "bench_gemm: %s: cuBLASLt algorithm %d of %d did not run: no row\n", row->shape, i, found);
      cudaGetLastError();
      continue;
    }
    if (cudaMemcpy(got, c->d, sizeof(uint16_t) * (size_t)n, cudaMemcpyDeviceToHost)) {
      rc = 1;
      break;
    }
    const double err = qfb_bf16_distance(got, ref, (size_t)n);
    if (!(err <= 1e-2)) {
      fprintf(stderr, "bench_gemm: %s: cuBLASLt algorithm %d of %d differs from the first (relative error %.3g): no row\n",
              row->shape, i, found, err);
      continue;
    }
    char variant[96], peer[96], name[64];
    qfb_lt_gemm_algo_name(c->g, i, name, sizeof name);
    snprintf(variant, sizeof variant, "lt_algo=%d,%s%s", i, name, qfb_lt_gemm_algo_is_planned(c->g, i) ? ",planned" : "");
    snprintf(peer, sizeof peer, "cublaslt_blk algorithm %d of %d (%d configurations checked)", i, found, checked);
    qfb_row r = *row;
    r.variant = variant, r.peer = peer;
    const double p1 = qfb_time_us(b, run_lt, c), p2 = qfb_time_us(b, run_lt, c);
    r.peer_us = p1 > 0 && p2 > 0 ? 0.5 * (p1 + p2) : -1.0;
    qfb_emit(b, &r);
    rc |= r.peer_us > 0 ? 0 : 1;
  }
  free(ref), free(got);
  return rc;
}

static int one_shape(qfb *b, qf_ctx *ctx, qfb_lt *lt, const char *op, int64_t M, int64_t N, int64_t K) {
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4;
  const size_t a_bytes = (size_t)(Mp * K), b_bytes = (size_t)(N * K);
  uint8_t *h = malloc(a_bytes > b_bytes ? a_bytes : b_bytes);
  const int64_t hs_n = KB * Mp > NB * ((KB + 3) / 4 * 4) ? KB * Mp : NB * ((KB + 3) / 4 * 4);
  float *hs = malloc(sizeof(float) * (size_t)hs_n);
  void *a = NULL, *bm = NULL, *d = NULL, *dl = NULL;
  float *as = NULL, *bs = NULL, *bs_lt = NULL;
  uint64_t seed = 0x51ED2701ull ^ (uint64_t)(M * 131 + N * 7 + K);
  int rc = 1;
  const int fine = !strcmp(op, "gemm_fp8_blockscale_fine"); /* fp32 D, with and without fine promotion */
  if (!h || !hs || cudaMalloc(&a, a_bytes) || cudaMalloc(&bm, b_bytes) || cudaMalloc(&d, (size_t)(Mp * N) * (fine ? 4 : 2)) ||
      cudaMalloc(&dl, (size_t)(Mp * N) * 2) || cudaMalloc((void **)&as, sizeof(float) * (size_t)(KB * Mp)) ||
      cudaMalloc((void **)&bs, sizeof(float) * (size_t)(NB * KB)) ||
      cudaMalloc((void **)&bs_lt, sizeof(float) * (size_t)(NB * ((KB + 3) / 4 * 4))))
    goto done;
  fill_operand(h, a_bytes, 1, &seed);
  if (cudaMemcpy(a, h, a_bytes, cudaMemcpyHostToDevice)) goto done;
  fill_operand(h, b_bytes, 1, &seed);
  if (cudaMemcpy(bm, h, b_bytes, cudaMemcpyHostToDevice)) goto done;
  fill_scales(hs, hs_n); /* all of it: the weight scales can outnumber the activation scales */
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
  q.d = dev_tensor(d, fine ? QF_F32 : QF_BF16, q.dshape, NULL);

  char shape[64];
  snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
  const double flops = 2.0 * (double)M * (double)N * (double)K;
  const double bytes = (double)(M * K + N * K) + 4.0 * (double)(KB * M + NB * KB) + (fine ? 4.0 : 2.0) * (double)(M * N);
  const int plans = !strcmp(op, "gemm_fp8_blockscale_plans");
  if (fine) {
    /* The cost of the finer promotions (every 32 and every 64 of K): each one's time against the
     * same call's without it, the three alternated (f32, f64, plain, plain, f64, f32). */
    static const qf_gemm_blockscale_opts opts32 = {.fine_promotion = 32}, opts64 = {.fine_promotion = 64};
    gemm_call f32 = q, f64 = q;
    f32.opts = &opts32, f64.opts = &opts64;
    const double a1 = qfb_time_us(b, run_qfuse, &f32), b1 = qfb_time_us(b, run_qfuse, &f64);
    const double p1 = qfb_time_us(b, run_qfuse, &q), p2 = qfb_time_us(b, run_qfuse, &q);
    const double b2 = qfb_time_us(b, run_qfuse, &f64), a2 = qfb_time_us(b, run_qfuse, &f32);
    const double plain = p1 > 0 && p2 > 0 ? 0.5 * (p1 + p2) : -1.0;
    rc = 0;
    for (int i = 0; i < 2; i++) {
      const double t1 = i ? b1 : a1, t2 = i ? b2 : a2;
      qfb_row row = {.op = op, .variant = i ? "e4m3->fp32,fine64" : "e4m3->fp32,fine", .shape = shape, .bytes = bytes,
                     .flops = flops, .peer = "qfuse e4m3->fp32 (same run)"};
      row.us = t1 > 0 && t2 > 0 ? 0.5 * (t1 + t2) : -1.0;
      row.peer_us = plain;
      row.floor_us = qfb_floor_us(b, bytes, flops, 0);
      qfb_emit(b, &row);
      rc |= row.us > 0 && row.peer_us > 0 ? 0 : 1;
    }
    goto done;
  }
  char auto_variant[48] = "e4m3->bf16";
  if (plans) {
    int bm, bn, splits, tail_kb;
    qf_cuda_gemm_fp8_blockscale_plan(ctx, M, N, K, &bm, &bn, &splits, &tail_kb);
    snprintf(auto_variant, sizeof auto_variant, "auto=%dx%d/%d%s", bm, bn, splits, tail_kb > 0 ? "+tail" : "");
  }
  qfb_row row = {.op = op, .variant = auto_variant, .shape = shape, .bytes = bytes, .flops = flops};
  /* Timed in the order qfuse, cuBLASLt, cuBLASLt, qfuse, each side's two medians averaged, so that
   * a GPU slowing (or speeding up) over the series favours neither side (tools/bench/README.md). */
  row.us = qfb_time_us(b, run_qfuse, &q);
  row.floor_us = qfb_floor_us(b, bytes, flops, 0);
  /* cuBLASLt's block scaling needs M a multiple of 4: the peer computes Mp rows. */
  qfb_lt_gemm *g = qfb_lt_gemm_plan(lt, Mp, N, K, QFB_LT_SCALE_BLK);
  if (g) {
    lt_call c = {g, a, bm, as, bs_lt, dl};
    row.peer = Mp == M ? "cublaslt_blk" : "cublaslt_blk(M padded to 4)";
    const double p1 = qfb_time_us(b, run_lt, &c), p2 = qfb_time_us(b, run_lt, &c);
    row.peer_us = p1 > 0 && p2 > 0 ? 0.5 * (p1 + p2) : -1.0;
    const double q2 = qfb_time_us(b, run_qfuse, &q);
    row.us = row.us > 0 && q2 > 0 ? 0.5 * (row.us + q2) : -1.0;
    qfb_emit(b, &row);
    rc = row.us > 0 ? 0 : 1;
    if (!strcmp(op, "gemm_fp8_blockscale_lt_algos")) rc |= algo_rows(b, &c, &row, Mp * N);
    qfb_lt_gemm_free(g);
  } else {
    qfb_emit(b, &row);
    rc = row.us > 0 ? 0 : 1;
  }
  if (plans) rc |= plan_rows(b, &q, &row, M, N);
done:
  if (rc) fprintf(stderr, "bench_gemm: M=%lld N=%lld K=%lld failed\n", (long long)M, (long long)N, (long long)K);
  cudaFree(a), cudaFree(bm), cudaFree(d), cudaFree(dl), cudaFree(as), cudaFree(bs), cudaFree(bs_lt);
  free(h), free(hs);
  return rc;
}

/* ---- gemm_scaled ---- */

typedef struct {
  qf_ctx *ctx;
  DLTensor a, as, b, bs, d;
  int64_t ashape[2], asshape[2], bshape[2], bsshape[2], dshape[2];
  const qf_gemm_scaled_opts *opts; /* NULL: the plain ScaledEpilogue */
} scaled_call;

static int run_scaled(void *arg) {
  scaled_call *c = arg;
  qf_status st = qf_gemm_scaled(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->d, c->opts);
  if (st != QF_OK) fprintf(stderr, "qf_gemm_scaled: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

typedef struct {
  qfb_lt_gemm *g;
  const void *a, *b;
  int32_t *d;
} lt_i8_call;

static int run_lt_i8(void *arg) {
  lt_i8_call *c = arg;
  return qfb_lt_gemm_run_i8(c->g, c->a, c->b, c->d, 0);
}

static qfb_lt_gemm *plan_scaled_peer(qfb_lt *lt, int fp8, int64_t M, int64_t N, int64_t K) {
  return fp8 ? qfb_lt_gemm_plan(lt, M, N, K, QFB_LT_SCALE_OUTER_VEC) : qfb_lt_gemm_plan_i8(lt, M, N, K);
}

/* The epilogue variants of one large-M row, each against the plain epilogue timed right before
 * and right after it (their mean is the peer, so ratio = plain / variant): the W8A8 goal bounds
 * their cost at 3%, finer than the drift of a long run's clocks between the plain row and these.
 * Bias [N] bf16, zero-point terms [N] and [M] int32 (int8 only), small random values. */
static int scaled_variants(qfb *b, scaled_call *q, int fp8, int64_t M, int64_t N, const char *shape, double bytes,
                           double flops) {
  uint16_t *hb = malloc(sizeof(uint16_t) * (size_t)N);
  int32_t *hi = malloc(sizeof(int32_t) * (size_t)(M > N ? M : N));
  void *bias = NULL, *adj = NULL, *azp = NULL;
  int rc = 1;
  if (!hb || !hi || cudaMalloc(&bias, sizeof(uint16_t) * (size_t)N) || cudaMalloc(&adj, sizeof(int32_t) * (size_t)N) ||
      cudaMalloc(&azp, sizeof(int32_t) * (size_t)M))
    goto done;
  for (int64_t i = 0; i < N; i++) hb[i] = qf_bf16_from_f32((float)(i % 13) * 0.25f - 1.5f);
  for (int64_t i = 0; i < (M > N ? M : N); i++) hi[i] = (int32_t)(i % 255) - 127;
  if (cudaMemcpy(bias, hb, sizeof(uint16_t) * (size_t)N, cudaMemcpyHostToDevice) ||
      cudaMemcpy(adj, hi, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice) ||
      cudaMemcpy(azp, hi, sizeof(int32_t) * (size_t)M, cudaMemcpyHostToDevice))
    goto done;
  int64_t nshape = N, mshape = M;
  const DLTensor tb = {.data = bias, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_BF16), .shape = &nshape};
  const DLTensor ta = {.data = adj, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = &nshape};
  const DLTensor tz = {.data = azp, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = &mshape};
  const struct {
    const char *name;
    qf_gemm_scaled_opts o;
    double extra_bytes;
  } variants[] = {
      {"+bias", {.bias = &tb}, 2.0 * (double)N},
      {"+azp", {.azp_adj = &ta}, 4.0 * (double)N},
      {"+azp per token,+bias", {.bias = &tb, .azp_adj = &ta, .azp = &tz}, 6.0 * (double)N + 4.0 * (double)M},
  };
  rc = 0;
  for (size_t v = 0; v < (fp8 ? 1 : sizeof variants / sizeof variants[0]); v++) {
    char name[96];
    snprintf(name, sizeof name, "%s,token x channel%s", fp8 ? "e4m3->bf16" : "int8->bf16", variants[v].name);
    scaled_call c = *q;
    c.opts = &variants[v].o;
    qfb_row row = {.op = "gemm_scaled", .variant = name, .shape = shape, .bytes = bytes + variants[v].extra_bytes,
                   .flops = flops, .peer = "gemm_scaled plain (timed around it)"};
    const double before = qfb_time_us(b, run_scaled, q);
    row.us = qfb_time_us(b, run_scaled, &c);
    row.peer_us = 0.5 * (before + qfb_time_us(b, run_scaled, q));
    row.floor_us = qfb_floor_us(b, row.bytes, flops, 0);
    qfb_emit(b, &row);
    rc |= row.us > 0 ? 0 : 1;
  }
done:
  if (rc) fprintf(stderr, "bench_gemm: gemm_scaled epilogue variants at %s failed\n", shape);
  cudaFree(bias), cudaFree(adj), cudaFree(azp);
  free(hb), free(hi);
  return rc;
}

/* One row: M tokens against the weight bm [N, K] with its scales bs [N], both on the device. The
 * activations, their scales and the peer's D hold Mp rows, for a peer that needs them. */
static int scaled_shape(qfb *b, qf_ctx *ctx, qfb_lt *lt, int fp8, int64_t M, int64_t N, int64_t K, void *bm,
                        float *bs) {
  const int64_t Mp = (M + 3) / 4 * 4;
  const size_t a_bytes = (size_t)(Mp * K);
  uint8_t *h = malloc(a_bytes);
  float *hs = malloc(sizeof(float) * (size_t)Mp);
  void *a = NULL, *d = NULL, *dl = NULL;
  float *as = NULL;
  uint64_t seed = 0x5CA1EDull ^ (uint64_t)(M * 131 + N * 7 + K);
  int rc = 1;
  if (!h || !hs || cudaMalloc(&a, a_bytes) || cudaMalloc((void **)&as, sizeof(float) * (size_t)Mp) ||
      cudaMalloc(&d, (size_t)(M * N) * 2) || cudaMalloc(&dl, (size_t)(Mp * N) * (fp8 ? 2 : 4)))
    goto done;
  fill_operand(h, a_bytes, fp8, &seed);
  fill_scales(hs, Mp);
  if (cudaMemcpy(a, h, a_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(as, hs, sizeof(float) * (size_t)Mp, cudaMemcpyHostToDevice))
    goto done;

  /* Scales as [M, 1] and [1, N]: the 2-D forms of per token and per channel. */
  const qf_dtype ab = fp8 ? QF_E4M3FN : QF_I8;
  scaled_call q = {.ctx = ctx};
  q.ashape[0] = M, q.ashape[1] = K;
  q.asshape[0] = M, q.asshape[1] = 1;
  q.bshape[0] = N, q.bshape[1] = K;
  q.bsshape[0] = 1, q.bsshape[1] = N;
  q.dshape[0] = M, q.dshape[1] = N;
  q.a = dev_tensor(a, ab, q.ashape, NULL);
  q.as = dev_tensor(as, QF_F32, q.asshape, NULL);
  q.b = dev_tensor(bm, ab, q.bshape, NULL);
  q.bs = dev_tensor(bs, QF_F32, q.bsshape, NULL);
  q.d = dev_tensor(d, QF_BF16, q.dshape, NULL);

  char shape[64];
  snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
  const double flops = 2.0 * (double)M * (double)N * (double)K;
  const double bytes = (double)(M * K + N * K) + 4.0 * (double)(M + N) + 2.0 * (double)(M * N);
  qfb_row row = {.op = "gemm_scaled", .variant = fp8 ? "e4m3->bf16,token x channel" : "int8->bf16,token x channel",
                 .shape = shape, .bytes = bytes, .flops = flops};
  row.us = qfb_time_us(b, run_scaled, &q);
  /* Hopper's dense INT8 and FP8 tensor rates are equal: the FP8 ceiling serves both. */
  row.floor_us = qfb_floor_us(b, bytes, flops, 0);
  /* Neither OUTER_VEC nor IMMA documents a condition on our M (cuBLAS n); should cuBLASLt still
   * find no algorithm for an M that is not a multiple of 4, the peer computes Mp rows. */
  int64_t peer_m = M;
  qfb_lt_gemm *g = plan_scaled_peer(lt, fp8, M, N, K);
  if (!g && Mp != M) {
    fprintf(stderr, "bench_gemm: planning the peer again with M padded to %lld\n", (long long)Mp);
    g = plan_scaled_peer(lt, fp8, peer_m = Mp, N, K);
  }
  if (g && fp8) {
    lt_call c = {g, a, bm, as, bs, dl};
    row.peer = peer_m == M ? "cublaslt_outer_vec" : "cublaslt_outer_vec(M padded to 4)";
    row.peer_us = qfb_time_us(b, run_lt, &c);
  } else if (g) {
    lt_i8_call c = {g, a, bm, dl};
    row.peer = peer_m == M ? "cublaslt_int8_i32out" : "cublaslt_int8_i32out(M padded to 4)";
    row.peer_us = qfb_time_us(b, run_lt_i8, &c);
  }
  qfb_lt_gemm_free(g);
  qfb_emit(b, &row);
  rc = row.us > 0 ? 0 : 1;
  if (rc == 0 && M >= 4096) rc = scaled_variants(b, &q, fp8, M, N, shape, bytes, flops);
done:
  if (rc)
    fprintf(stderr, "bench_gemm: gemm_scaled %s M=%lld N=%lld K=%lld failed\n", fp8 ? "e4m3" : "int8", (long long)M,
            (long long)N, (long long)K);
  cudaFree(a), cudaFree(as), cudaFree(d), cudaFree(dl);
  free(h), free(hs);
  return rc;
}

/* The rows of one weight [N, K] (random, per-channel scales around 1), made once for every M. */
static int scaled_rows(qfb *b, qf_ctx *ctx, qfb_lt *lt, int fp8, const int64_t *ms, size_t n_ms, int64_t N, int64_t K,
                       const qfb_select *sel, int *rows) {
  size_t selected = 0;
  for (size_t i = 0; i < n_ms; i++) selected += !sel->m || ms[i] == sel->m;
  if (!selected) return 0;
  const size_t b_bytes = (size_t)(N * K);
  uint8_t *h = malloc(b_bytes);
  float *hs = malloc(sizeof(float) * (size_t)N);
  void *bm = NULL;
  float *bs = NULL;
  uint64_t seed = 0xB0B5ull ^ (uint64_t)(N * 7 + K);
  int ok = h && hs && !cudaMalloc(&bm, b_bytes) && !cudaMalloc((void **)&bs, sizeof(float) * (size_t)N);
  if (ok) {
    fill_operand(h, b_bytes, fp8, &seed);
    fill_scales(hs, N);
    ok = !cudaMemcpy(bm, h, b_bytes, cudaMemcpyHostToDevice) &&
         !cudaMemcpy(bs, hs, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice);
  }
  if (!ok)
    fprintf(stderr, "bench_gemm: gemm_scaled N=%lld K=%lld: could not set up the weight\n", (long long)N, (long long)K);
  int rc = !ok;
  for (size_t i = 0; i < n_ms && ok; i++) {
    if (sel->m && ms[i] != sel->m) continue;
    rc |= scaled_shape(b, ctx, lt, fp8, ms[i], N, K, bm, bs);
    ++*rows;
  }
  cudaFree(bm), cudaFree(bs);
  free(h), free(hs);
  return rc;
}

/* ---- the chains: a quantization, then the GEMM reading its output ----
 * gemm_fp8_blockscale_chain: qf_quant_group (1 x 128, TMA-aligned scales), qf_gemm_fp8_blockscale;
 * gemm_scaled_chain: qf_quant_token (e4m3), qf_gemm_scaled (per-token x per-channel scales);
 * gemm_rms_chain: qf_gemm_fp8_blockscale, then qf_rms_norm_quant of its D with a residual (a
 * layer's last GEMM and the next one's input: per 1 x 128 groups, TMA-aligned scales, where N is
 * a multiple of 128, else per token);
 * gemm_silu_chain: qf_gemm_fp8_blockscale, then qf_silu_mul_quant_group of its D as [gate | up]
 * (the gate / up projection and the down projection's input: 1 x 128 groups of N / 2 columns,
 * TMA-aligned scales; N / 2 a multiple of 128);
 * gemm_token_chain: qf_gemm_scaled (per-token x per-channel scales), then qf_quant_token of its D
 * (e4m3, per-token scales). */

enum { CHAIN_GROUP, CHAIN_TOKEN, CHAIN_RMS, CHAIN_SILU, CHAIN_TOKEN_AFTER, CHAIN_KINDS };
static const char *const chain_ops[CHAIN_KINDS] = {"gemm_fp8_blockscale_chain", "gemm_scaled_chain", "gemm_rms_chain",
                                                   "gemm_silu_chain", "gemm_token_chain"};
static const char *const chain_variants[CHAIN_KINDS] = {"quant_group+gemm,pdl", "quant_token+gemm,pdl",
                                                        "gemm+rms_norm_quant,pdl", "gemm+silu_mul_quant_group,pdl",
                                                        "gemm_scaled+quant_token,pdl"};

typedef struct {
  qf_ctx *ctx;
  int kind;
  DLTensor x, a, as, b, bs, d;
  DLTensor res, w, q, qs; /* CHAIN_RMS; q and qs CHAIN_SILU and CHAIN_TOKEN_AFTER too */
  int64_t xshape[2], ashape[2], asshape[2], asstride[2], bshape[2], bsshape[2], dshape[2];
  int64_t wshape[1], qshape[2], qsshape[2], qsstride[2];
} chain_call;

static int run_chain(void *arg) {
  chain_call *c = arg;
  const qf_group_quant_opts o = {.group_size = 128, .scale_layout = QF_SCALE_COL_MAJOR_TMA};
  const qf_rms_norm_quant_opts ro = {.group_size = c->qs.ndim == 2 ? 128 : -1, .group = o};
  qf_status st = c->kind == CHAIN_TOKEN ? qf_quant_token(c->ctx, &c->x, &c->a, &c->as, NULL, NULL)
                 : c->kind == CHAIN_GROUP ? qf_quant_group(c->ctx, &c->x, &c->a, &c->as, &o)
                                          : QF_OK;
  if (st == QF_OK)
    st = c->kind == CHAIN_TOKEN || c->kind == CHAIN_TOKEN_AFTER ? qf_gemm_scaled(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->d, NULL)
                                                                : qf_gemm_fp8_blockscale(c->ctx, &c->a, &c->as, &c->b, &c->bs, &c->d, NULL);
  if (st == QF_OK && c->kind == CHAIN_RMS) st = qf_rms_norm_quant(c->ctx, &c->d, &c->res, &c->w, &c->q, &c->qs, &ro);
  if (st == QF_OK && c->kind == CHAIN_SILU) st = qf_silu_mul_quant_group(c->ctx, &c->d, &c->q, &c->qs, NULL, &o);
  if (st == QF_OK && c->kind == CHAIN_TOKEN_AFTER) st = qf_quant_token(c->ctx, &c->d, &c->q, &c->qs, NULL, NULL);
  if (st != QF_OK) fprintf(stderr, "chain: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

/* The two calls on a context with programmatic dependent launch (qf_ctx_set_pdl) against the
 * same calls on one without (qfb_emit_pdl_pair). */
static int chain_shape(qfb *b, qf_ctx *plain, qf_ctx *pdl, int kind, int64_t M, int64_t N, int64_t K) {
  const int after = kind == CHAIN_TOKEN_AFTER, scaled = kind == CHAIN_TOKEN || after, rms = kind == CHAIN_RMS;
  const int silu = kind == CHAIN_SILU, requant = rms || silu || after; /* quantizes D, not x */
  const int groups = !after && (silu || N % 128 == 0); /* the quantized output per 128 groups, else per token */
  const int64_t qcols = silu ? N / 2 : N; /* the quantized output's columns */
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4;
  /* the scales: block-scaled [KB, Mp] and [NB, KB], scaled [M] and [N] */
  const size_t as_n = (size_t)(scaled ? M : KB * Mp), bs_n = (size_t)(scaled ? N : NB * KB);
  const size_t x_bytes = (size_t)(M * K) * 2, b_bytes = (size_t)(N * K);
  uint8_t *h = malloc(x_bytes > b_bytes ? x_bytes : b_bytes);
  float *hs = malloc(sizeof(float) * bs_n);
  void *x = NULL, *a = NULL, *bm = NULL, *d = NULL, *res = NULL, *w = NULL, *q = NULL, *qs = NULL;
  float *as = NULL, *bs = NULL;
  uint64_t seed = 0xC4A1Dull ^ (uint64_t)(M * 131 + N * 7 + K);
  int rc = 1;
  if (!h || !hs || cudaMalloc(&x, x_bytes) || cudaMalloc(&a, (size_t)(M * K)) || cudaMalloc(&bm, b_bytes) ||
      cudaMalloc(&d, (size_t)(M * N) * 2) || cudaMalloc((void **)&as, sizeof(float) * as_n) ||
      cudaMalloc((void **)&bs, sizeof(float) * bs_n))
    goto done;
  const size_t qs_n = (size_t)(groups ? (qcols / 128) * Mp : M);
  /* residual and weight: every bf16 0x3C3C (0.0115) and 0x3F3F (0.75) */
  if (requant && (cudaMalloc(&q, (size_t)(M * qcols)) || cudaMalloc(&qs, sizeof(float) * qs_n))) goto done;
  if (rms && (cudaMalloc(&res, (size_t)(M * N) * 2) || cudaMalloc(&w, (size_t)N * 2) ||
              cudaMemset(res, 0x3C, (size_t)(M * N) * 2) || cudaMemset(w, 0x3F, (size_t)N * 2)))
    goto done;
  for (size_t i = 0; i < x_bytes / 2; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    ((uint16_t *)h)[i] = qf_bf16_from_f32((float)((int)(seed >> 40) % 2001 - 1000) * 0.002f);
  }
  if (cudaMemcpy(x, h, x_bytes, cudaMemcpyHostToDevice)) goto done;
  fill_operand(h, b_bytes, 1, &seed);
  fill_scales(hs, (int64_t)bs_n);
  if (cudaMemcpy(bm, h, b_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(bs, hs, sizeof(float) * bs_n, cudaMemcpyHostToDevice))
    goto done;
  /* the chains that quantize D quantize no A: e4m3 0x30 (0.5) with scales of 0x3C3C3C3C (0.0115) */
  if (requant && (cudaMemset(a, 0x30, (size_t)(M * K)) || cudaMemset(as, 0x3C, sizeof(float) * as_n))) goto done;

  chain_call c = {.ctx = pdl, .kind = kind};
  c.xshape[0] = M, c.xshape[1] = K;
  c.ashape[0] = M, c.ashape[1] = K;
  c.asshape[0] = scaled ? M : KB, c.asshape[1] = scaled ? 1 : M, c.asstride[0] = scaled ? 1 : Mp, c.asstride[1] = 1;
  c.bshape[0] = N, c.bshape[1] = K;
  c.bsshape[0] = scaled ? 1 : NB, c.bsshape[1] = scaled ? N : KB;
  c.dshape[0] = M, c.dshape[1] = N;
  c.x = dev_tensor(x, QF_BF16, c.xshape, NULL);
  c.a = dev_tensor(a, QF_E4M3FN, c.ashape, NULL);
  c.as = dev_tensor(as, QF_F32, c.asshape, c.asstride);
  c.b = dev_tensor(bm, QF_E4M3FN, c.bshape, NULL);
  c.bs = dev_tensor(bs, QF_F32, c.bsshape, NULL);
  c.d = dev_tensor(d, QF_BF16, c.dshape, NULL);
  if (requant) {
    c.wshape[0] = N;
    c.qshape[0] = M, c.qshape[1] = qcols;
    c.qsshape[0] = groups ? qcols / 128 : M, c.qsshape[1] = M, c.qsstride[0] = Mp, c.qsstride[1] = 1;
    c.q = dev_tensor(q, QF_E4M3FN, c.qshape, NULL);
    c.qs = dev_tensor(qs, QF_F32, c.qsshape, groups ? c.qsstride : NULL);
    c.qs.ndim = groups ? 2 : 1;
  }
  if (rms) {
    c.res = dev_tensor(res, QF_BF16, c.dshape, NULL);
    c.w = dev_tensor(w, QF_BF16, c.wshape, NULL);
    c.w.ndim = 1;
  }
  chain_call p = c; /* (its tensors' shapes stay c's) */
  p.ctx = plain;

  char shape[64];
  snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
  /* x read, A written and read, the scales, B, its scales and D (CHAIN_RMS: A and its scales
   * read; D read again, the residual read and written, q and its scales written, the weight) */
  const double scale_words = (requant ? 1.0 : 2.0) * (double)as_n + (double)bs_n; /* As written and read, Bs read */
  const double a_bytes = (requant ? 1.0 : 4.0) * (double)(M * K);
  /* D read again: CHAIN_RMS the residual read and written, q; CHAIN_SILU q [M, N / 2]; CHAIN_TOKEN_AFTER q */
  const double d_bytes = (rms ? 7.0 : silu ? 4.5 : after ? 5.0 : 2.0) * (double)(M * N);
  const double bytes = a_bytes + 4.0 * scale_words + (double)(N * K) + d_bytes + (requant ? 4.0 * (double)qs_n : 0) +
                       (rms ? 2.0 * (double)N : 0);
  qfb_row row = {.op = chain_ops[kind], .variant = chain_variants[kind], .shape = shape, .bytes = bytes,
                 .flops = 2.0 * (double)M * (double)N * (double)K};
  row.floor_us = qfb_floor_us(b, bytes, row.flops, 0);
  rc = qfb_emit_pdl_pair(b, &row, run_chain, &c, &p);
done:
  if (rc) fprintf(stderr, "bench_gemm: chain M=%lld N=%lld K=%lld failed\n", (long long)M, (long long)N, (long long)K);
  cudaFree(x), cudaFree(a), cudaFree(bm), cudaFree(d), cudaFree(as), cudaFree(bs);
  cudaFree(res), cudaFree(w), cudaFree(q), cudaFree(qs);
  free(h), free(hs);
  return rc;
}
#endif

int bench_gemm(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  const int blockscale = qfb_op_selected(sel->ops, "gemm_fp8_blockscale");
  const int grid = sel->ops && qfb_op_selected(sel->ops, "gemm_fp8_blockscale_grid");
  const int plans = sel->ops && qfb_op_selected(sel->ops, "gemm_fp8_blockscale_plans");
  const int lt_algos = sel->ops && qfb_op_selected(sel->ops, "gemm_fp8_blockscale_lt_algos");
  const int fine = sel->ops && qfb_op_selected(sel->ops, "gemm_fp8_blockscale_fine");
  const int scaled = qfb_op_selected(sel->ops, "gemm_scaled");
  int chains = 0;
#ifdef QF_WITH_CUDA
  for (int kind = 0; kind < CHAIN_KINDS; kind++) chains |= qfb_op_selected(sel->ops, chain_ops[kind]);
#endif
  if (!(blockscale || grid || plans || lt_algos || fine || scaled || chains) || !qfb_uses_gpu(b)) return 0; /* the CPU reference is float64: not timed */
#ifdef QF_WITH_CUDA
  static const int64_t ms[] = {1, 16, 32, 64, 128, 512, 2048, 4096};
  static const int64_t nk[][2] = {{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {4096, 7168}, {7168, 2048}};
  /* gemm_scaled: Llama-3 8B's qkv, gate+up and down projections, 70B's o, gate+up and down */
  static const int64_t scaled_ms[] = {1, 16, 64, 128, 512, 4096, 8192};
  static const int64_t scaled_nk[][2] = {{6144, 4096}, {28672, 4096}, {4096, 14336},
                                         {8192, 8192}, {57344, 8192}, {8192, 28672}};
  qfb_lt *lt = qfb_lt_open();
  if (!lt) return 1;
  int rc = 0;
  for (size_t j = 0; j < sizeof nk / sizeof nk[0] && blockscale; j++)
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
      if ((sel->m && ms[i] != sel->m) || (sel->k && nk[j][1] != sel->k)) continue;
      rc |= one_shape(b, ctx, lt, "gemm_fp8_blockscale", ms[i], nk[j][0], nk[j][1]);
      ++*rows;
    }
  /* gemm_fp8_blockscale_fine, only when named: the bench's shapes with fp32 D, fine promotion
   * against none */
  for (size_t j = 0; j < sizeof nk / sizeof nk[0] && fine; j++)
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
      if ((sel->m && ms[i] != sel->m) || (sel->k && nk[j][1] != sel->k)) continue;
      rc |= one_shape(b, ctx, lt, "gemm_fp8_blockscale_fine", ms[i], nk[j][0], nk[j][1]);
      ++*rows;
    }
  /* gemm_fp8_blockscale_lt_algos, only when named: the bench's shapes against each configuration
   * cuBLASLt accepts (algo_rows) */
  for (size_t j = 0; j < sizeof nk / sizeof nk[0] && lt_algos; j++)
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
      if ((sel->m && ms[i] != sel->m) || (sel->k && nk[j][1] != sel->k)) continue;
      rc |= one_shape(b, ctx, lt, "gemm_fp8_blockscale_lt_algos", ms[i], nk[j][0], nk[j][1]);
      ++*rows;
    }
  /* gemm_fp8_blockscale_grid, only when named: the heuristic's plans past the bench's shapes, on
   * the other DeepSeek-V3 weights (q_a, kv_a, the dense MLP's gate + up and down) and Llama-3
   * 70B's (a block-scaled checkpoint's qkv, o, gate + up and down), at M between the bench's */
  static const int64_t grid_ms[] = {1, 8, 48, 96, 192, 256, 384, 768, 1024, 3072, 8192};
  static const int64_t grid_nk[][2] = {{1536, 7168}, {576, 7168},   {36864, 7168}, {7168, 18432},
                                       {10240, 8192}, {8192, 8192}, {57344, 8192}, {8192, 28672}};
  for (size_t j = 0; j < sizeof grid_nk / sizeof grid_nk[0] && grid; j++)
    for (size_t i = 0; i < sizeof grid_ms / sizeof grid_ms[0]; i++) {
      if ((sel->m && grid_ms[i] != sel->m) || (sel->k && grid_nk[j][1] != sel->k)) continue;
      rc |= one_shape(b, ctx, lt, "gemm_fp8_blockscale_grid", grid_ms[i], grid_nk[j][0], grid_nk[j][1]);
      ++*rows;
    }
  /* gemm_fp8_blockscale_plans, only when named: on the bench's and the grid's weights, at M from 1
   * to 4096, the heuristic's plan and every plan forced */
  static const int64_t plan_ms[] = {1, 16, 64, 96, 128, 160, 192, 256, 384, 512, 576, 768, 1024, 2048, 3072, 4096};
  for (int set = 0; set < 2 && plans; set++) {
    const int64_t(*wk)[2] = set ? grid_nk : nk;
    const size_t weights = set ? sizeof grid_nk / sizeof grid_nk[0] : sizeof nk / sizeof nk[0];
    for (size_t j = 0; j < weights; j++)
      for (size_t i = 0; i < sizeof plan_ms / sizeof plan_ms[0]; i++) {
        if ((sel->m && plan_ms[i] != sel->m) || (sel->k && wk[j][1] != sel->k)) continue;
        rc |= one_shape(b, ctx, lt, "gemm_fp8_blockscale_plans", plan_ms[i], wk[j][0], wk[j][1]);
        ++*rows;
      }
  }
  for (int fp8 = 1; fp8 >= 0 && scaled; fp8--)
    for (size_t j = 0; j < sizeof scaled_nk / sizeof scaled_nk[0]; j++)
      if (!sel->k || scaled_nk[j][1] == sel->k)
        rc |= scaled_rows(b, ctx, lt, fp8, scaled_ms, sizeof scaled_ms / sizeof scaled_ms[0], scaled_nk[j][0],
                        scaled_nk[j][1], sel, rows);
  qfb_lt_close(lt);
  /* the chains at decode, where a kernel's start and its first bytes weigh most */
  qf_ctx *pdl = chains ? qfb_pdl_context("bench_gemm") : NULL;
  if (chains && !pdl) rc = 1;
  /* each kind on its GEMM's weights: the block-scaled bench's, or the W8A8 one's */
  static const int64_t chain_ms[] = {1, 16, 64, 128};
  for (int kind = 0; kind < CHAIN_KINDS && pdl; kind++) {
    if (!qfb_op_selected(sel->ops, chain_ops[kind])) continue;
    const int w8a8 = kind == CHAIN_TOKEN || kind == CHAIN_TOKEN_AFTER;
    const int64_t(*wk)[2] = w8a8 ? scaled_nk : nk;
    const size_t weights = w8a8 ? sizeof scaled_nk / sizeof scaled_nk[0] : sizeof nk / sizeof nk[0];
    for (size_t j = 0; j < weights; j++)
      for (size_t i = 0; i < sizeof chain_ms / sizeof chain_ms[0]; i++) {
        if ((sel->m && chain_ms[i] != sel->m) || (sel->k && wk[j][1] != sel->k)) continue;
        if (kind == CHAIN_SILU && (wk[j][0] / 2) % 128) continue; /* groups of 128 of N / 2 */
        rc |= chain_shape(b, ctx, pdl, kind, chain_ms[i], wk[j][0], wk[j][1]);
        ++*rows;
      }
  }
  qf_ctx_destroy(pdl);
  return rc;
#else
  (void)ctx, (void)rows;
  return 0;
#endif
}
