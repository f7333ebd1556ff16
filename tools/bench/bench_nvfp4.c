/* qfuse-bench rows of the NVFP4 GEMM: qf_gemm_nvfp4 against cuBLASLt's bf16 GEMM on the same
 * weight dequantized to bf16 (on Hopper, which has no FP4 tensor cores, the GEMM an engine runs
 * instead), timed in the same run; bf16 activations and outputs.
 *
 * Shapes: the (N, K) of DeepSeek-V3's projections (the block-scaled GEMM's) and of Llama-70B
 * (8192 x 8192, 28672 x 8192) at M in {1, 16, 64, 128, 2048}, as bench/peers/nvfp4_torch.py (whose
 * peer is torch's bf16 GEMM). The weight: random packed codes (every 32-bit word is a packed word
 * of 8 codes), random e4m3 block scales in [0.5, 4) and a tensor scale of 2^-6; the peer's weight
 * is those values decoded, exact in bf16.
 *
 * Rows:
 *  - op "gemm_nvfp4", variant "bf16": the public call.
 *  - op "gemm_nvfp4_plans", only when --only names it: the wgmma kernel's launch plans forced
 *    (qf_gemm_nvfp4_with), variant "bf16,plan=WGxTOK/SPLIT" (warpgroups, tokens per tile, CTAs
 *    splitting K), at M in {8, 16, 64, 128, 144, 192, 256, 300, 384, 416, 512, 1024, 2048}: the fewest
 *    one-warpgroup token tiles of at most 128 tokens, each M / tiles rounded up to 16, unsplit
 *    and split 2, 4 and 8, and past 128 tokens (where the heuristic may take them) the
 *    two-warpgroup tiles of 256 tokens and of the fewest of at most 256, each M / tiles rounded up
 *    to 32 (160, 192, 224 or 256 tokens; the token tiles of both kinds are the heuristic's own,
 *    qf_cuda_gemm_nvfp4_balanced_tok);
 *    variant "bf16,auto=WGxTOK/SPLIT" is the heuristic's own (nvfp4_heuristic.h), "bf16,auto=narrow"
 *    its mma.sync kernel (M <= 8, against the wgmma kernel's 16-token tiles there). For sweeps of
 *    the heuristic's rules in one run.
 * The peer, "cublaslt_bf16", runs once per (M, N, K). Every qfuse output is compared with the
 * peer's before it is timed: both add the same exact products in fp32 and round to bf16, so a
 * relative Frobenius error past 1e-2 (or NaN: d is poisoned first) gives a FAILED row.
 * Bytes (the floor's and GB/s): codes N K / 2 + scales N K / 16 + a 2 M K + d 2 M N; flops
 * 2 M N K, with the bf16 tensor peak taken as half the measured FP8 ceiling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ops.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "core/backend.h"
#include "cublaslt.h"
#include "formats/formats.h"
#include "formats/nvfp4.h"

static int fp4b_cuda(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return 1;
  fprintf(stderr, "bench_nvfp4: %s: %s\n", what, cudaGetErrorString(err));
  return 0;
}

static uint64_t fp4b_rand(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* One weight on the device: packed codes, block scales, the tensor scale and the peer's bf16
 * copy of the dequantized weight. */
typedef struct {
  int64_t N, K;
  void *codes, *scales, *w16;
  float *ts;
} fp4b_weight;

static void fp4b_weight_free(fp4b_weight *w) {
  cudaFree(w->codes), cudaFree(w->scales), cudaFree(w->w16), cudaFree(w->ts);
  memset(w, 0, sizeof *w);
}

static int fp4b_weight_make(fp4b_weight *w, int64_t N, int64_t K) {
  memset(w, 0, sizeof *w);
  w->N = N, w->K = K;
  const size_t code_bytes = (size_t)(N * K / 2), scale_bytes = (size_t)(N * K / 16), w16_bytes = (size_t)(N * K) * 2;
  const float ts = 0x1p-6f;
  uint32_t *hc = malloc(code_bytes);
  uint8_t *hs = malloc(scale_bytes);
  uint16_t *hw = malloc(w16_bytes);
  int ok = hc && hs && hw;
  if (!ok) fprintf(stderr, "bench_nvfp4: no host memory for the %lld x %lld weight\n", (long long)N, (long long)K);
  uint64_t seed = 0xF4F4F4F4ull ^ (uint64_t)(N * 131 + K);
  for (size_t i = 0; ok && i < code_bytes / 4; i++) hc[i] = (uint32_t)(fp4b_rand(&seed) >> 16);
  for (size_t i = 0; ok && i < scale_bytes; i++) hs[i] = (uint8_t)(0x30 + fp4b_rand(&seed) % 24); /* 0.5 .. 3.75 */
  for (int64_t n = 0; ok && n < N; n++)
    for (int64_t j = 0; j < K / 8; j++) {
      const uint32_t codes = qf_nvfp4_unpack_word(hc[n * (K / 8) + j]);
      const float s = qf_e4m3fn_to_f32(hs[n * (K / 16) + j / 2]) * ts;
      for (int i = 0; i < 8; i++)
        hw[n * K + 8 * j + i] = qf_bf16_from_f32(qf_e2m1_to_f32((uint8_t)(codes >> (4 * i))) * s);
    }
  ok = ok && fp4b_cuda(cudaMalloc(&w->codes, code_bytes), "cudaMalloc codes") &&
       fp4b_cuda(cudaMalloc(&w->scales, scale_bytes), "cudaMalloc scales") &&
       fp4b_cuda(cudaMalloc(&w->w16, w16_bytes), "cudaMalloc bf16 weight") &&
       fp4b_cuda(cudaMalloc((void **)&w->ts, 4), "cudaMalloc tensor scale") &&
       fp4b_cuda(cudaMemcpy(w->codes, hc, code_bytes, cudaMemcpyHostToDevice), "codes to the device") &&
       fp4b_cuda(cudaMemcpy(w->scales, hs, scale_bytes, cudaMemcpyHostToDevice), "scales to the device") &&
       fp4b_cuda(cudaMemcpy(w->w16, hw, w16_bytes, cudaMemcpyHostToDevice), "bf16 weight to the device") &&
       fp4b_cuda(cudaMemcpy(w->ts, &ts, 4, cudaMemcpyHostToDevice), "tensor scale to the device");
  free(hc), free(hs), free(hw);
  if (!ok) fp4b_weight_free(w);
  return ok;
}

typedef struct {
  qf_ctx *ctx;
  DLTensor a, b, s, t, d;
  int64_t ashape[2], bshape[2], sshape[2], tshape[1], dshape[2];
  int wg, tok, split; /* wg > 0: the plan forced */
} fp4b_call;

static int fp4b_run(void *arg) {
  fp4b_call *c = arg;
  const qf_status st = c->wg ? qf_gemm_nvfp4_with(c->ctx, &c->a, &c->b, &c->s, &c->t, &c->d, c->wg, c->tok, c->split)
                             : qf_gemm_nvfp4(c->ctx, &c->a, &c->b, &c->s, &c->t, &c->d);
  if (st != QF_OK) fprintf(stderr, "%s: %s\n", c->wg ? "qf_gemm_nvfp4_with" : "qf_gemm_nvfp4", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}


/* Relative Frobenius distance of two bf16 [M, N] device arrays (host copies in h0, h1); -1 when
 * a copy fails. */
static double fp4b_distance(const void *d0, const void *d1, size_t n, uint16_t *h0, uint16_t *h1) {
  if (!fp4b_cuda(cudaMemcpy(h0, d0, 2 * n, cudaMemcpyDeviceToHost), "output to the host") ||
      !fp4b_cuda(cudaMemcpy(h1, d1, 2 * n, cudaMemcpyDeviceToHost), "peer output to the host"))
    return -1.0;
  return qfb_bf16_distance(h0, h1, n);
}

/* Checks one call's output (the public call's, or a forced plan's) against the peer's, then times
 * the call and emits its row. Returns nonzero when the call, the check or the timing failed. */
static int fp4b_row(qfb *b, fp4b_call *c, const char *op, const char *variant, const char *shape, double peer_us,
                    const void *peer_d, uint16_t *h0, uint16_t *h1, int *rows) {
  const int64_t M = c->dshape[0], N = c->dshape[1], K = c->ashape[1];
  const double bytes = (double)(N * K / 2 + N * K / 16 + 2 * M * K + 2 * M * N), flops = 2.0 * (double)M * (double)N * (double)K;
  const double fp8 = qfb_fp8_tflops(b);
  qfb_row row = {.op = op, .variant = variant, .shape = shape, .bytes = bytes, .flops = flops, .peer = "cublaslt_bf16",
                 .peer_us = peer_us, .us = -1.0};
  row.floor_us = qfb_floor_us(b, bytes, flops, fp8 > 0.0 ? fp8 / 2.0 : 0.0);
  double err = -1.0;
  if (fp4b_cuda(cudaMemset(c->d.data, 0xFF, (size_t)(M * N) * 2), "poisoning d") && !fp4b_run(c) &&
      fp4b_cuda(cudaDeviceSynchronize(), "the call"))
    err = fp4b_distance(c->d.data, peer_d, (size_t)(M * N), h0, h1);
  if (err >= 0.0 && err <= 1e-2)
    row.us = qfb_time_us(b, fp4b_run, c);
  else if (err >= 0.0 || isnan(err))
    fprintf(stderr, "bench_nvfp4: %s %s %s: relative Frobenius error %.3g against the peer\n", op, variant, shape, err);
  qfb_emit(b, &row); /* a FAILED row where the call, its check or its timing failed */
  ++*rows;
  return row.us > 0 ? 0 : 1;
}

/* The rows of one weight at M: the public call and, with plans, the forced plans. a, d, peer_d:
 * device bf16 buffers large enough for M; h0, h1: host buffers of M N bf16 values. */
static int fp4b_rows(qfb *b, qf_ctx *ctx, qfb_lt *lt, const fp4b_weight *w, int64_t M, int public_row, int plans,
                     void *a, void *d, void *peer_d, uint16_t *h0, uint16_t *h1, int *rows) {
  const int64_t N = w->N, K = w->K;
  qfb_lt_gemm *g = qfb_lt_gemm_plan_bf16(lt, M, N, K);
  if (!g) return 1;
  qfb_lt_call16 peer = {g, a, w->w16, peer_d};
  const double peer_us = qfb_time_us(b, qfb_lt_run_call16, &peer); /* (its runs leave peer_d) */
  int rc = peer_us > 0 && fp4b_cuda(cudaDeviceSynchronize(), "the peer") ? 0 : 1;
  qfb_lt_gemm_free(g);
  if (rc) return rc;

  fp4b_call c;
  memset(&c, 0, sizeof c);
  c.ctx = ctx;
  c.ashape[0] = M, c.ashape[1] = K, c.bshape[0] = N, c.bshape[1] = K, c.sshape[0] = N, c.sshape[1] = K / 16;
  c.tshape[0] = 1, c.dshape[0] = M, c.dshape[1] = N;
  const DLDevice dev = {kDLCUDA, 0};
  c.a = (DLTensor){.data = a, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_BF16), .shape = c.ashape};
  c.b = (DLTensor){.data = w->codes, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_E2M1X2), .shape = c.bshape};
  c.s = (DLTensor){.data = w->scales, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_E4M3FN), .shape = c.sshape};
  c.t = (DLTensor){.data = w->ts, .device = dev, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = c.tshape};
  c.d = (DLTensor){.data = d, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_BF16), .shape = c.dshape};
  char shape[64], variant[64];
  snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
  if (public_row) rc |= fp4b_row(b, &c, "gemm_nvfp4", "bf16", shape, peer_us, peer_d, h0, h1, rows);
  if (!plans) return rc;

  /* The heuristic's plan, then the sweep's. */
  const int steps = (int)((K + 127) / 128);
  int auto_wg, auto_tok, auto_split;
  qf_cuda_gemm_nvfp4_plan(ctx, M, N, K, &auto_wg, &auto_tok, &auto_split);
  const int tok = qf_cuda_gemm_nvfp4_balanced_tok(M, 1), tok2 = qf_cuda_gemm_nvfp4_balanced_tok(M, 2);
  const int sweep[][3] = {{auto_wg, auto_tok, auto_split}, {1, tok, 1}, {1, tok, 2}, {1, tok, 4}, {1, tok, 8},
                          {2, 256, 1}, {2, tok2, 1}};
  for (size_t i = 0; i < sizeof sweep / sizeof *sweep; i++) {
    c.wg = sweep[i][0], c.tok = sweep[i][1], c.split = sweep[i][2];
    if (c.split > steps || (c.wg == 2 && M <= 128)) continue;
    size_t same = 0; /* a plan an earlier row of the sweep (the auto row first) has timed */
    while (same < i && memcmp(sweep[same], sweep[i], sizeof sweep[i])) same++;
    if (same < i) continue;
    if (c.wg == 0) /* the heuristic's mma.sync kernel (M <= 8), through the public call */
      snprintf(variant, sizeof variant, "bf16,auto=narrow");
    else
      snprintf(variant, sizeof variant, "bf16,%s=%dx%d/%d", i ? "plan" : "auto", c.wg, c.tok, c.split);
    rc |= fp4b_row(b, &c, "gemm_nvfp4_plans", variant, shape, peer_us, peer_d, h0, h1, rows);
  }
  return rc;
}
#endif

int bench_nvfp4(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  const int public_rows = qfb_op_selected(sel->ops, "gemm_nvfp4");
  const int plans = sel->ops && qfb_op_selected(sel->ops, "gemm_nvfp4_plans");
  if (!(public_rows || plans) || !qfb_uses_gpu(b)) return 0; /* the CPU reference is float64: not timed */
#ifdef QF_WITH_CUDA
  static const int64_t nk[][2] = {{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384},
                                  {4096, 7168}, {7168, 2048}, {8192, 8192}, {28672, 8192}};
  static const int64_t public_ms[] = {1, 16, 64, 128, 2048};
  static const int64_t plan_ms[] = {8, 16, 64, 128, 144, 192, 256, 300, 384, 416, 512, 1024, 2048};
  int64_t ms[32], max_m = 0, max_n = 0, max_k = 0;
  size_t n_ms = 0;
  for (size_t i = 0; public_rows && i < sizeof public_ms / sizeof *public_ms; i++) ms[n_ms++] = public_ms[i];
  for (size_t i = 0; plans && i < sizeof plan_ms / sizeof *plan_ms; i++) {
    size_t j = 0;
    while (j < n_ms && ms[j] != plan_ms[i]) j++;
    if (j == n_ms) ms[n_ms++] = plan_ms[i];
  }
  for (size_t i = 0; i < n_ms; i++) max_m = ms[i] > max_m ? ms[i] : max_m;
  for (size_t j = 0; j < sizeof nk / sizeof *nk; j++) {
    max_n = nk[j][0] > max_n ? nk[j][0] : max_n;
    max_k = nk[j][1] > max_k ? nk[j][1] : max_k;
  }
  qfb_lt *lt = qfb_lt_open();
  if (!lt) return 1;
  void *a = NULL, *d = NULL, *peer_d = NULL;
  uint16_t *h0 = malloc((size_t)(max_m * max_n) * 2), *h1 = malloc((size_t)(max_m * max_n) * 2),
           *ha = malloc((size_t)(max_m * max_k) * 2);
  int rc = h0 && h1 && ha && fp4b_cuda(cudaMalloc(&a, (size_t)(max_m * max_k) * 2), "cudaMalloc a") &&
                   fp4b_cuda(cudaMalloc(&d, (size_t)(max_m * max_n) * 2), "cudaMalloc d") &&
                   fp4b_cuda(cudaMalloc(&peer_d, (size_t)(max_m * max_n) * 2), "cudaMalloc peer d")
               ? 0
               : 1;
  if (!rc) { /* activations uniform in [-2, 2) */
    uint64_t seed = 0xA11CEull;
    for (int64_t i = 0; i < max_m * max_k; i++)
      ha[i] = qf_bf16_from_f32((float)((double)(fp4b_rand(&seed) >> 11) * 0x1p-51 - 2.0));
    rc = fp4b_cuda(cudaMemcpy(a, ha, (size_t)(max_m * max_k) * 2, cudaMemcpyHostToDevice), "a to the device") ? 0 : 1;
  }
  const int setup_failed = rc; /* rows that fail do not stop the shapes after them */
  for (size_t j = 0; j < sizeof nk / sizeof *nk && !setup_failed; j++) {
    if (sel->k && nk[j][1] != sel->k) continue;
    int any = 0;
    for (size_t i = 0; i < n_ms; i++) any |= !sel->m || ms[i] == sel->m;
    if (!any) continue;
    fp4b_weight w;
    if (!fp4b_weight_make(&w, nk[j][0], nk[j][1])) {
      rc = 1;
      continue;
    }
    for (size_t i = 0; i < n_ms; i++) {
      if (sel->m && ms[i] != sel->m) continue;
      int public_m = 0;
      for (size_t p = 0; public_rows && p < sizeof public_ms / sizeof *public_ms; p++) public_m |= public_ms[p] == ms[i];
      rc |= fp4b_rows(b, ctx, lt, &w, ms[i], public_m, plans, a, d, peer_d, h0, h1, rows);
    }
    fp4b_weight_free(&w);
  }
  cudaFree(a), cudaFree(d), cudaFree(peer_d);
  free(h0), free(h1), free(ha);
  qfb_lt_close(lt);
  return rc;
#else
  (void)ctx, (void)sel, (void)rows;
  return 0;
#endif
}
