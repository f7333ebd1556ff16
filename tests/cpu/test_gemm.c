/* qf_gemm_fp8_blockscale on the CPU backend: the blockwise formula against a direct evaluation,
 * both scale layouts, accumulation into C, and every error path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/backend.h"
#include "cuda/fastdiv.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

/* e4m3fn code -> value from the format's definition (no shared code with src/). */
static double e4m3(uint8_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  double mag = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  return (c & 0x80) ? -mag : mag;
}

enum { M = 3, N = 144, K = 272, KB = 3, NB = 2, MP = 4 };
typedef struct {
  _Alignas(16) uint8_t a[M * K], b[N * K];
  _Alignas(16) float as_col[KB * MP], as_row[M * KB], bs[NB * KB], c[M * N], d[M * N + 16];
  tensor2d at, bt, ast, bst, dt, ct;
  qf_gemm_blockscale_opts o;
} gem;

static void gem_init(gem *g, int row_major_scales) {
  uint64_t seed = 42;
  for (int i = 0; i < M * K; i++) g->a[i] = (uint8_t)(rng_next(&seed) % 0x7e) | (rng_next(&seed) & 0x80);
  for (int i = 0; i < N * K; i++) g->b[i] = (uint8_t)(rng_next(&seed) % 0x7e) | (rng_next(&seed) & 0x80);
  for (int m = 0; m < M; m++)
    for (int kb = 0; kb < KB; kb++) g->as_row[m * KB + kb] = g->as_col[kb * MP + m] = expf(rng_normal(&seed) * 3.0f);
  for (int i = 0; i < NB * KB; i++) g->bs[i] = expf(rng_normal(&seed) * 3.0f);
  for (int i = 0; i < M * N; i++) g->c[i] = rng_normal(&seed);
  memset(g->d, 0xff, sizeof g->d);
  tensor2d_init(&g->at, g->a, QF_E4M3FN, M, K, K, kDLCPU);
  tensor2d_init(&g->bt, g->b, QF_E4M3FN, N, K, K, kDLCPU);
  if (row_major_scales) tensor2d_init(&g->ast, g->as_row, QF_F32, M, KB, KB, kDLCPU);
  else tensor2d_init(&g->ast, g->as_col, QF_F32, KB, M, MP, kDLCPU);
  tensor2d_init(&g->bst, g->bs, QF_F32, NB, KB, KB, kDLCPU);
  tensor2d_init(&g->dt, g->d, QF_F32, M, N, N, kDLCPU);
  tensor2d_init(&g->ct, g->c, QF_F32, M, N, N, kDLCPU);
  memset(&g->o, 0, sizeof g->o);
  g->o.a_scales_row_major = row_major_scales;
}

static qf_status run(gem *g) { return qf_gemm_fp8_blockscale(ctx, &g->at.t, &g->ast.t, &g->bt.t, &g->bst.t, &g->dt.t, &g->o); }

static void test_formula(void) {
  static gem g;
  for (int layout = 0; layout < 2; layout++)
    for (int with_c = 0; with_c < 6; with_c++) { /* 2-5: fine promotion (the CPU sums in float64 either way) */
      gem_init(&g, layout);
      if (with_c % 2) g.o.c = &g.ct.t;
      g.o.fine_promotion = (int[]){0, 32, 64}[with_c / 2];
      CHECK(run(&g) == QF_OK, "gemm: %s", qf_ctx_last_error(ctx));
      double worst = 0;
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          double want = with_c % 2 ? g.c[m * N + n] : 0.0;
          for (int k = 0; k < K; k++) /* scales applied per element: the same sum, another order */
            want += (double)g.as_row[m * KB + k / 128] * g.bs[(n / 128) * KB + k / 128] * e4m3(g.a[m * K + k]) * e4m3(g.b[n * K + k]);
          double err = fabs(g.d[m * N + n] - want) / (fabs(want) + 1e-30);
          if (err > worst) worst = err;
        }
      CHECK(worst < 1e-6, "layout %d, C %d: worst relative error %g (fp32 output)", layout, with_c, worst);
      CHECK(((uint32_t *)g.d)[M * N] == 0xffffffffu, "nothing written past D");
    }
}

typedef struct {
  const char *what;
  qf_status want;
  const char *mentions;
  void (*mutate)(gem *g);
} bad;

static void m_a_dtype(gem *g) { g->at.t.dtype = qf_dtype_to_dl(QF_E5M2); }
static void m_b_k(gem *g) { g->bt.shape[1] = K - 16; }
static void m_k16(gem *g) { g->at.shape[1] = g->bt.shape[1] = 264; }
static void m_n16(gem *g) { g->bt.shape[0] = 136; }
static void m_a_pitch(gem *g) { g->at.strides[0] = K + 8, g->at.shape[1] = g->bt.shape[1] = 256, g->ast.shape[0] = 2, g->bst.shape[1] = 2; }
static void m_as_pitch(gem *g) { g->ast.strides[0] = M; }
static void m_as_shape(gem *g) { g->ast.shape[0] = 2; }
static void m_as_rowmajor(gem *g) { g->o.a_scales_row_major = 1, g->ast.shape[1] = 2; }
static void m_bs_shape(gem *g) { g->bst.shape[0] = 1; }
static void m_bs_dtype(gem *g) { g->bst.t.dtype = qf_dtype_to_dl(QF_BF16); }
static void m_d_shape(gem *g) { g->dt.shape[1] = 128; }
static void m_d_dtype(gem *g) { g->dt.t.dtype = qf_dtype_to_dl(QF_I32); }
static void m_c_dtype(gem *g) { g->ct.t.dtype = qf_dtype_to_dl(QF_BF16), g->o.c = &g->ct.t; }
static void m_fine_bf16(gem *g) { g->dt.t.dtype = qf_dtype_to_dl(QF_BF16), g->o.fine_promotion = 1; }
static void m_fine_value(gem *g) { g->o.fine_promotion = 16; }
static void m_c_shape(gem *g) { g->ct.shape[0] = 2, g->o.c = &g->ct.t; }
static void m_d_misaligned(gem *g) { g->dt.t.byte_offset = 4; }
static void m_b_device(gem *g) { g->bt.t.device.device_type = kDLCUDA; }

static void test_errors(void) {
  static const bad cases[] = {
      {"a e5m2", QF_ERR_DTYPE, "a has dtype e5m2", m_a_dtype},
      {"b K differs", QF_ERR_SHAPE, "b.shape[1]=256 differs from a.shape[1]=272", m_b_k},
      {"K % 16", QF_ERR_SHAPE, "K=264 must be positive multiples of 16", m_k16},
      {"N % 16", QF_ERR_SHAPE, "N=136 and K=272", m_n16},
      {"a pitch", QF_ERR_LAYOUT, "a.strides[0]=280 is not a multiple of 16", m_a_pitch},
      {"a_scales pitch", QF_ERR_LAYOUT, "a_scales.strides[0]=3 but the column-major layout needs 4", m_as_pitch},
      {"a_scales shape", QF_ERR_SHAPE, "a_scales has shape [2, 3]; expected [3, 3]", m_as_shape},
      {"a_scales row-major shape", QF_ERR_SHAPE, "a_scales has shape [3, 2]; expected [3, 3]", m_as_rowmajor},
      {"b_scales shape", QF_ERR_SHAPE, "b_scales has shape [1, 3]; expected [2, 3]", m_bs_shape},
      {"b_scales dtype", QF_ERR_DTYPE, "b_scales has dtype bf16", m_bs_dtype},
      {"d shape", QF_ERR_SHAPE, "d has shape [3, 128]; expected [3, 144]", m_d_shape},
      {"d int32", QF_ERR_DTYPE, "d has dtype int32", m_d_dtype},
      {"c bf16", QF_ERR_DTYPE, "c has dtype bf16", m_c_dtype},
      {"fine promotion, bf16 d", QF_ERR_DTYPE, "opts->fine_promotion needs fp32 d; d has dtype bf16", m_fine_bf16},
      {"fine promotion 16", QF_ERR_VALUE, "opts->fine_promotion=16; expected 0, 32 (or 1) or 64", m_fine_value},
      {"c shape", QF_ERR_SHAPE, "c has shape [2, 144]", m_c_shape},
      {"d misaligned", QF_ERR_ALIGNMENT, "d data pointer", m_d_misaligned},
      {"b on CUDA", QF_ERR_DEVICE, "b is on DLPack device", m_b_device},
  };
  static gem g;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gem_init(&g, 0);
    cases[i].mutate(&g);
    qf_status st = run(&g);
    const char *msg = qf_ctx_last_error(ctx);
    CHECK(st == cases[i].want, "%s: got %s, want %s (%s)", cases[i].what, qf_status_str(st), qf_status_str(cases[i].want), msg);
    CHECK(strstr(msg, "qf_gemm_fp8_blockscale") && strstr(msg, cases[i].mentions), "%s: message '%s' lacks '%s'", cases[i].what, msg,
          cases[i].mentions);
    int untouched = 1;
    for (int j = 0; j < M * N + 16; j++) untouched &= ((uint32_t *)g.d)[j] == 0xffffffffu;
    CHECK(untouched, "%s: d was written", cases[i].what);
  }
}

/* The entry with the engine's plan forced (qfuse-bench's plan sweep, the GPU test) checks the
 * tensors as qf_gemm_fp8_blockscale does, then refuses a CPU context; d stays as it was. */
static void test_forced_plan(void) {
  static gem g;
  gem_init(&g, 0);
  m_a_dtype(&g);
  qf_status st = qf_gemm_fp8_blockscale_with(ctx, &g.at.t, &g.ast.t, &g.bt.t, &g.bst.t, &g.dt.t, &g.o, 128, 128, 1);
  CHECK(st == QF_ERR_DTYPE, "forced plan, a e5m2: got %s (%s)", qf_status_str(st), qf_ctx_last_error(ctx));
  gem_init(&g, 0);
  st = qf_gemm_fp8_blockscale_with(ctx, &g.at.t, &g.ast.t, &g.bt.t, &g.bst.t, &g.dt.t, &g.o, 128, 128, 1);
  CHECK(st == QF_ERR_UNSUPPORTED && strstr(qf_ctx_last_error(ctx), "qf_gemm_fp8_blockscale_with"),
        "forced plan on the CPU: got %s (%s)", qf_status_str(st), qf_ctx_last_error(ctx));
  int untouched = 1;
  for (int j = 0; j < M * N + 16; j++) untouched &= ((uint32_t *)g.d)[j] == 0xffffffffu;
  CHECK(untouched, "forced plan on the CPU: d was written");
}

/* The GPU GEMM's fast division (src/cuda/fastdiv.h, the same code on both sides) against the
 * division: every n < 2^16 for d < 2^12, then the edges (multiples of d and their neighbours,
 * 2^31 - 1) and random n for divisors up to 2^31 - 1. */
static void test_fastdiv(void) {
  uint64_t seed = 7;
  long bad = 0;
  for (uint32_t d = 1; d < 4096; d++) {
    const qf_fastdiv f = qf_fastdiv_make(d);
    for (int n = 0; n < 65536; n++) bad += qf_fastdiv_div(n, f) != n / (int)d;
  }
  for (int i = 0; i < 200000; i++) {
    const int sh = (int)(rng_next(&seed) % 31);
    uint32_t d = (uint32_t)((rng_next(&seed) >> 33) & ((1u << sh) | ((1u << sh) - 1)));
    if (i % 4 == 0) d = (1u << sh) + (uint32_t)(i % 3) - 1; /* 2^k - 1, 2^k, 2^k + 1 */
    if (d == 0 || d > 0x7fffffffu) d = 1 + (uint32_t)i % 1000;
    const qf_fastdiv f = qf_fastdiv_make(d);
    const int64_t k = (int64_t)((rng_next(&seed) >> 33) / d);
    const int n[5] = {(int)(rng_next(&seed) >> 33), 0x7fffffff, (int)(k * d < 0x80000000LL ? k * d : 0),
                      (int)(k * d + d - 1 < 0x80000000LL ? k * d + d - 1 : 5), (int)(k * d + d < 0x80000000LL ? k * d + d : 9)};
    for (int j = 0; j < 5; j++) bad += qf_fastdiv_div(n[j], f) != n[j] / (int)d;
  }
  CHECK(bad == 0, "fastdiv: %ld quotients differ from the division", bad);
}

int main(void) {
  test_fastdiv();
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  test_formula();
  test_errors();
  test_forced_plan();
  qf_ctx_destroy(ctx);
  return check_finish("test_gemm");
}
