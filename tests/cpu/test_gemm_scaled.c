/* qf_gemm_scaled and qf_gemm_azp_adj on the CPU backend: the four epilogues against direct
 * integer / float64 evaluation, an end-to-end check with qf_quant_token's zero points, and every
 * error path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

enum { M = 5, N = 32, K = 48 };
typedef struct {
  _Alignas(16) int8_t a[M * K], b[N * K];
  _Alignas(16) float sa[M], sb[N], bias[N], d[M * N + 8];
  _Alignas(16) int32_t adj[N], azp[M];
  tensor2d at, bt, dt;
  int64_t sa_n, sb_n, n_n, m_n;
  DLTensor sat, sbt, biast, adjt, azpt;
  qf_gemm_scaled_opts o;
} fx;

static void fx_init(fx *f) {
  uint64_t s = 17;
  for (int i = 0; i < M * K; i++) f->a[i] = (int8_t)(rng_next(&s) % 256 - 128);
  for (int i = 0; i < N * K; i++) f->b[i] = (int8_t)(rng_next(&s) % 255 - 127);
  for (int i = 0; i < M; i++) f->sa[i] = 0.01f + rng_uniform(&s), f->azp[i] = (int32_t)(rng_next(&s) % 256) - 128;
  for (int i = 0; i < N; i++) f->sb[i] = 0.001f + rng_uniform(&s) * 0.01f, f->bias[i] = rng_normal(&s);
  memset(f->d, 0xff, sizeof f->d);
  tensor2d_init(&f->at, f->a, QF_I8, M, K, K, kDLCPU);
  tensor2d_init(&f->bt, f->b, QF_I8, N, K, K, kDLCPU);
  tensor2d_init(&f->dt, f->d, QF_F32, M, N, N, kDLCPU);
  f->sa_n = M, f->sb_n = N, f->n_n = N, f->m_n = M;
  f->sat = dl_tensor(f->sa, QF_F32, 1, &f->sa_n, kDLCPU);
  f->sbt = dl_tensor(f->sb, QF_F32, 1, &f->sb_n, kDLCPU);
  f->biast = dl_tensor(f->bias, QF_F32, 1, &f->n_n, kDLCPU);
  f->adjt = dl_tensor(f->adj, QF_I32, 1, &f->n_n, kDLCPU);
  f->azpt = dl_tensor(f->azp, QF_I32, 1, &f->m_n, kDLCPU);
  memset(&f->o, 0, sizeof f->o);
  CHECK(qf_gemm_azp_adj(ctx, &f->bt.t, 1, &f->adjt) == QF_OK, "azp_adj: %s", qf_ctx_last_error(ctx));
}

static qf_status run(fx *f) { return qf_gemm_scaled(ctx, &f->at.t, &f->sat, &f->bt.t, &f->sbt, &f->dt.t, &f->o); }

/* The four epilogues, per-tensor and per-row scales, against integer arithmetic done here. */
static void test_epilogues(void) {
  static fx f;
  for (int epi = 0; epi < 4; epi++)
    for (int per_row = 0; per_row < 2; per_row++) {
      fx_init(&f);
      for (int n = 0; n < N; n++) {
        int64_t sum = 0;
        for (int k = 0; k < K; k++) sum += f.b[n * K + k];
        CHECK(f.adj[n] == sum, "azp_adj[%d] = %d, column sum %lld", n, f.adj[n], (long long)sum);
      }
      const int32_t za = 7; /* per-tensor zero point for epilogue 2 */
      if (epi >= 1) f.o.bias = &f.biast;
      if (epi == 2) CHECK(qf_gemm_azp_adj(ctx, &f.bt.t, za, &f.adjt) == QF_OK, "azp_with_adj"), f.o.azp_adj = &f.adjt;
      if (epi == 3) f.o.azp_adj = &f.adjt, f.o.azp = &f.azpt;
      if (!per_row) f.sa_n = f.sb_n = 1;
      CHECK(run(&f) == QF_OK, "epilogue %d: %s", epi, qf_ctx_last_error(ctx));
      double worst = 0;
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          int64_t acc = 0, colsum = 0;
          for (int k = 0; k < K; k++) acc += (int64_t)f.a[m * K + k] * f.b[n * K + k], colsum += f.b[n * K + k];
          if (epi == 2) acc -= za * colsum;
          if (epi == 3) acc -= (int64_t)f.azp[m] * colsum;
          double want = (double)f.sa[per_row ? m : 0] * f.sb[per_row ? n : 0] * (double)acc + (epi ? f.bias[n] : 0.0);
          worst = fmax(worst, fabs(f.d[m * N + n] - want) / (fabs(want) + 1e-6));
        }
      CHECK(worst < 1e-6, "epilogue %d per_row %d: relative error %g", epi, per_row, worst);
      CHECK(((uint32_t *)f.d)[M * N] == 0xffffffffu, "sentinel after D");
    }
}

/* End to end: activations quantized per token with zero points, weights per channel; the
 * product must match the float GEMM of the dequantized operands. */
static void test_with_quant_token(void) {
  enum { R = 4, C = 64, O = 16 };
  static float x[R * C], w[O * C], sx[R], sw[O], out[R * O];
  static int8_t qx[R * C], qw[O * C];
  static int32_t zx[R], adj[O];
  uint64_t s = 99;
  for (int i = 0; i < R * C; i++) x[i] = rng_normal(&s) + 2.0f; /* skewed: zero points matter */
  for (int o = 0; o < O; o++) {
    float amax = 0;
    for (int k = 0; k < C; k++) w[o * C + k] = rng_normal(&s), amax = fmaxf(amax, fabsf(w[o * C + k]));
    sw[o] = amax / 127.0f;
    for (int k = 0; k < C; k++) qw[o * C + k] = (int8_t)lrintf(w[o * C + k] / sw[o]);
  }
  tensor2d xt, qxt, qwt, ot;
  tensor2d_init(&xt, x, QF_F32, R, C, C, kDLCPU);
  tensor2d_init(&qxt, qx, QF_I8, R, C, C, kDLCPU);
  tensor2d_init(&qwt, qw, QF_I8, O, C, C, kDLCPU);
  tensor2d_init(&ot, out, QF_F32, R, O, O, kDLCPU);
  int64_t r = R, o = O;
  DLTensor sxt = dl_tensor(sx, QF_F32, 1, &r, kDLCPU), zxt = dl_tensor(zx, QF_I32, 1, &r, kDLCPU), swt = dl_tensor(sw, QF_F32, 1, &o, kDLCPU), adjt = dl_tensor(adj, QF_I32, 1, &o, kDLCPU);
  CHECK(qf_quant_token(ctx, &xt.t, &qxt.t, &sxt, &zxt, NULL) == QF_OK, "quant_token: %s", qf_ctx_last_error(ctx));
  CHECK(qf_gemm_azp_adj(ctx, &qwt.t, 1, &adjt) == QF_OK, "azp_adj");
  qf_gemm_scaled_opts opt = {.azp_adj = &adjt, .azp = &zxt};
  CHECK(qf_gemm_scaled(ctx, &qxt.t, &sxt, &qwt.t, &swt, &ot.t, &opt) == QF_OK, "gemm: %s", qf_ctx_last_error(ctx));
  double num = 0, den = 0;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < O; j++) {
      double want = 0;
      for (int k = 0; k < C; k++) want += (double)x[i * C + k] * sw[j] * qw[j * C + k];
      num += (out[i * O + j] - want) * (out[i * O + j] - want), den += want * want;
    }
  CHECK(sqrt(num / den) < 0.01, "asymmetric int8 GEMM vs float: relative error %g", sqrt(num / den));
}

static void test_fp8(void) {
  enum { R = 3, O = 16, C = 32 };
  static uint8_t a[R * C], b[O * C];
  static uint16_t bias[O];
  _Alignas(16) static float sa[4] = {0.5f}, sb[4] = {0.25f};
  static uint16_t outh[R * O];
  uint64_t s = 5;
  for (int i = 0; i < R * C; i++) a[i] = (uint8_t)(rng_next(&s) % 0x70) | (rng_next(&s) & 0x80);
  for (int i = 0; i < O * C; i++) b[i] = (uint8_t)(rng_next(&s) % 0x70) | (rng_next(&s) & 0x80);
  for (int i = 0; i < O; i++) bias[i] = 0x3f80 + (uint16_t)i; /* bf16 just above 1 */
  tensor2d at, bt, dt;
  tensor2d_init(&at, a, QF_E4M3FN, R, C, C, kDLCPU);
  tensor2d_init(&bt, b, QF_E4M3FN, O, C, C, kDLCPU);
  tensor2d_init(&dt, outh, QF_BF16, R, O, O, kDLCPU);
  int64_t one = 1, o = O;
  DLTensor sat = dl_tensor(sa, QF_F32, 1, &one, kDLCPU), sbt = dl_tensor(sb, QF_F32, 1, &one, kDLCPU), bt2 = dl_tensor(bias, QF_BF16, 1, &o, kDLCPU);
  qf_gemm_scaled_opts opt = {.bias = &bt2};
  CHECK(qf_gemm_scaled(ctx, &at.t, &sat, &bt.t, &sbt, &dt.t, &opt) == QF_OK, "fp8: %s", qf_ctx_last_error(ctx));
  double worst = 0;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < O; j++) {
      double want = 0;
      for (int k = 0; k < C; k++) {
        uint8_t ca = a[i * C + k], cb = b[j * C + k];
        double va = ((ca >> 3) & 15) ? ldexp(1 + (ca & 7) / 8.0, ((ca >> 3) & 15) - 7) : ldexp((ca & 7) / 8.0, -6);
        double vb = ((cb >> 3) & 15) ? ldexp(1 + (cb & 7) / 8.0, ((cb >> 3) & 15) - 7) : ldexp((cb & 7) / 8.0, -6);
        want += ((ca & 0x80) ? -va : va) * ((cb & 0x80) ? -vb : vb);
      }
      uint32_t bb = (uint32_t)bias[j] << 16;
      float bf;
      memcpy(&bf, &bb, 4);
      want = want * 0.125 + bf;
      uint32_t ob = (uint32_t)outh[i * O + j] << 16;
      float got;
      memcpy(&got, &ob, 4);
      worst = fmax(worst, fabs(got - want) / (fabs(want) + 1e-3));
    }
  CHECK(worst < 8e-3, "fp8 + bias, bf16 out: relative error %g", worst);
}

typedef struct {
  const char *what;
  qf_status want;
  const char *mentions;
  void (*mutate)(fx *f);
} bad;

static void m_a_fp16(fx *f) { f->at.t.dtype = qf_dtype_to_dl(QF_F16); }
static void m_b_fp8(fx *f) { f->bt.t.dtype = qf_dtype_to_dl(QF_E4M3FN); }
static void m_sa_count(fx *f) { f->sa_n = 3; }
static void m_sb_count(fx *f) { f->sb_n = 5; }
static void m_bias_dtype(fx *f) { f->biast.dtype = qf_dtype_to_dl(QF_BF16), f->o.bias = &f->biast; }
static void m_bias_shape(fx *f) { f->n_n = 16, f->o.bias = &f->biast; }
static void m_azp_no_adj(fx *f) { f->o.azp = &f->azpt; }
static void m_azp_fp8(fx *f) { f->at.t.dtype = f->bt.t.dtype = qf_dtype_to_dl(QF_E4M3FN), f->o.azp_adj = &f->adjt; }
static void m_adj_dtype(fx *f) { f->adjt.dtype = qf_dtype_to_dl(QF_F32), f->o.azp_adj = &f->adjt; }
static void m_azp_shape(fx *f) { f->m_n = 4, f->o.azp_adj = &f->adjt, f->o.azp = &f->azpt; }
static void m_k(fx *f) { f->at.shape[1] = f->bt.shape[1] = 40; }
static void m_n(fx *f) { f->bt.shape[0] = 24; }
static void m_d_shape(fx *f) { f->dt.shape[0] = 4; }

static void test_errors(void) {
  static const bad cases[] = {
      {"a fp16", QF_ERR_DTYPE, "a has dtype fp16", m_a_fp16},
      {"b differs", QF_ERR_DTYPE, "b has dtype e4m3fn", m_b_fp8},
      {"a_scale count", QF_ERR_SHAPE, "a_scale has 3 elements; expected 1 or 5", m_sa_count},
      {"b_scale count", QF_ERR_SHAPE, "b_scale has 5 elements; expected 1 or 32", m_sb_count},
      {"bias dtype", QF_ERR_DTYPE, "bias has dtype bf16", m_bias_dtype},
      {"bias shape", QF_ERR_SHAPE, "bias has shape [16]; expected [32]", m_bias_shape},
      {"azp without adj", QF_ERR_NULL, "azp (per-token zero points) needs azp_adj", m_azp_no_adj},
      {"zero points with fp8", QF_ERR_DTYPE, "zero points need int8 operands", m_azp_fp8},
      {"adj dtype", QF_ERR_DTYPE, "azp_adj has dtype fp32", m_adj_dtype},
      {"azp shape", QF_ERR_SHAPE, "azp has shape [4]; expected [5]", m_azp_shape},
      {"K % 16", QF_ERR_SHAPE, "K=40 must be positive multiples of 16", m_k},
      {"N % 16", QF_ERR_SHAPE, "N=24", m_n},
      {"d shape", QF_ERR_SHAPE, "d has shape [4, 32]; expected [5, 32]", m_d_shape},
  };
  static fx f;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fx_init(&f);
    cases[i].mutate(&f);
    qf_status st = run(&f);
    const char *msg = qf_ctx_last_error(ctx);
    CHECK(st == cases[i].want, "%s: got %s, want %s (%s)", cases[i].what, qf_status_str(st), qf_status_str(cases[i].want), msg);
    CHECK(strstr(msg, "qf_gemm_scaled") && strstr(msg, cases[i].mentions), "%s: message '%s' lacks '%s'", cases[i].what, msg,
          cases[i].mentions);
    int untouched = 1;
    for (int j = 0; j < M * N + 8; j++) untouched &= ((uint32_t *)f.d)[j] == 0xffffffffu;
    CHECK(untouched, "%s: d was written", cases[i].what);
  }
  /* azp_adj: an int32 overflow is refused and leaves adj untouched */
  fx_init(&f);
  for (int i = 0; i < N * K; i++) f.b[i] = 127;
  memset(f.adj, 0x5a, sizeof f.adj);
  CHECK(qf_gemm_azp_adj(ctx, &f.bt.t, 1 << 20, &f.adjt) == QF_ERR_VALUE && strstr(qf_ctx_last_error(ctx), "overflows int32"),
        "azp_adj overflow: %s", qf_ctx_last_error(ctx));
  CHECK(f.adj[0] == 0x5a5a5a5a && f.adj[N - 1] == 0x5a5a5a5a, "azp_adj untouched after the overflow");
  f.n_n = 8;
  CHECK(qf_gemm_azp_adj(ctx, &f.bt.t, 1, &f.adjt) == QF_ERR_SHAPE, "azp_adj of the wrong length");
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  test_epilogues();
  test_with_quant_token();
  test_fp8();
  test_errors();
  qf_ctx_destroy(ctx);
  return check_finish("test_gemm_scaled");
}
