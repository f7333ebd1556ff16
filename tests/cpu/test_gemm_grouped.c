/* qf_gemm_fp8_blockscale_grouped and qf_gemm_fp8_blockscale_masked on the CPU backend: each
 * 128-row block against a direct evaluation with its expert's weights and scales, blocks of
 * padding (or past an expert's token count) left untouched, the SwiGLU epilogue on interleaved
 * gate / up rows, expert_ids as a strided view of per-row indices, and every error path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

/* e4m3fn code -> value from the format's definition (no shared code with src/). */
static double e4m3(uint8_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  double mag = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  return (c & 0x80) ? -mag : mag;
}

/* Three row blocks (the last one short) on experts 2, padding, 0; N spans a partial weight-scale
 * block; K a partial K-block. */
enum { E = 3, M = 300, N = 144, K = 272, KB = 3, NB = 2, MB = 3, MP = 300, DN = N + 16 };
static const int32_t kBlockExpert[MB] = {2, -1, 0};

typedef struct {
  _Alignas(16) uint8_t a[M * K], b[E * N * K];
  _Alignas(16) float as[KB * MP], bs[E * NB * KB], d[M * DN];
  int32_t row_expert[M]; /* per row, as an engine keeps it; the op reads every 128th */
  tensor2d at, ast, dt;
  DLTensor bt, bst, ids;
  int64_t b_shape[3], b_strides[3], bs_shape[3], ids_shape[1], ids_strides[1];
  qf_gemm_grouped_opts o;
} gem;

static void gem_init(gem *g, qf_grouped_epilogue epilogue) {
  uint64_t seed = 42;
  for (int i = 0; i < M * K; i++) g->a[i] = (uint8_t)(rng_next(&seed) % 0x7e) | (rng_next(&seed) & 0x80);
  for (int i = 0; i < E * N * K; i++) g->b[i] = (uint8_t)(rng_next(&seed) % 0x7e) | (rng_next(&seed) & 0x80);
  for (int i = 0; i < KB * MP; i++) g->as[i] = expf(rng_normal(&seed) * 2.0f) * 1e-2f;
  for (int i = 0; i < E * NB * KB; i++) g->bs[i] = expf(rng_normal(&seed) * 2.0f) * 1e-2f;
  for (int m = 0; m < M; m++) g->row_expert[m] = kBlockExpert[m / 128];
  memset(g->d, 0xff, sizeof g->d);
  tensor2d_init(&g->at, g->a, QF_E4M3FN, M, K, K, kDLCPU);
  tensor2d_init(&g->ast, g->as, QF_F32, KB, M, MP, kDLCPU);
  tensor2d_init(&g->dt, g->d, QF_F32, M, epilogue == QF_GROUPED_SWIGLU ? N / 2 : N, DN, kDLCPU);
  g->b_shape[0] = E, g->b_shape[1] = N, g->b_shape[2] = K;
  g->b_strides[0] = (int64_t)N * K, g->b_strides[1] = K, g->b_strides[2] = 1;
  g->bt = dl_tensor(g->b, QF_E4M3FN, 3, g->b_shape, kDLCPU);
  g->bt.strides = g->b_strides;
  g->bs_shape[0] = E, g->bs_shape[1] = NB, g->bs_shape[2] = KB;
  g->bst = dl_tensor(g->bs, QF_F32, 3, g->bs_shape, kDLCPU);
  g->ids_shape[0] = MB, g->ids_strides[0] = 128;
  g->ids = dl_tensor(g->row_expert, QF_I32, 1, g->ids_shape, kDLCPU);
  g->ids.strides = g->ids_strides;
  memset(&g->o, 0, sizeof g->o);
  g->o.epilogue = epilogue;
}

static qf_status run(gem *g) {
  return qf_gemm_fp8_blockscale_grouped(ctx, &g->at.t, &g->ast.t, &g->bt, &g->bst, &g->ids, &g->dt.t, &g->o);
}

/* Y[m, n] of row m of a (column-major scales as, pitch mp) with expert e of g's weights, scales
 * applied per element (the same sum as the blockwise one, another order). */
static double y_ref(const uint8_t *a, const float *as, int mp, const gem *g, int m, int n, int e) {
  double y = 0.0;
  for (int k = 0; k < K; k++)
    y += (double)as[(k / 128) * mp + m] * g->bs[(e * NB + n / 128) * KB + k / 128] * e4m3(a[m * K + k]) *
         e4m3(g->b[((size_t)e * N + n) * K + k]);
  return y;
}

/* D[m, j]: Y itself, or with SwiGLU silu(gate) * up of the gate / up columns interleaved by 8. */
static double d_ref(const uint8_t *a, const float *as, int mp, const gem *g, int m, int j, int e, int swiglu) {
  if (!swiglu) return y_ref(a, as, mp, g, m, j, e);
  const double gate = y_ref(a, as, mp, g, m, j / 8 * 16 + j % 8, e), up = y_ref(a, as, mp, g, m, j / 8 * 16 + 8 + j % 8, e);
  return gate / (1.0 + exp(-gate)) * up;
}

/* An error case: the status, the op and the text in its message, and d untouched. */
static void check_error(const char *what, qf_status st, qf_status want, const char *op, const char *mentions, int untouched) {
  const char *msg = qf_ctx_last_error(ctx);
  CHECK(st == want, "%s: got %s, want %s (%s)", what, qf_status_str(st), qf_status_str(want), msg);
  CHECK(strstr(msg, op) && strstr(msg, mentions), "%s: message '%s' lacks '%s'", what, msg, mentions);
  CHECK(untouched, "%s: d was written", what);
}

static int row_untouched(const gem *g, int m) {
  int clean = 1;
  for (int n = 0; n < DN; n++) clean &= ((const uint32_t *)g->d)[m * DN + n] == 0xffffffffu;
  return clean;
}

static void test_formula(void) {
  static gem g;
  for (int swiglu = 0; swiglu < 2; swiglu++) {
    gem_init(&g, swiglu ? QF_GROUPED_SWIGLU : QF_GROUPED_NONE);
    CHECK(run(&g) == QF_OK, "grouped gemm: %s", qf_ctx_last_error(ctx));
    const int cols = swiglu ? N / 2 : N;
    double worst = 0;
    int padding_clean = 1, gaps_clean = 1;
    for (int m = 0; m < M; m++) {
      const int e = kBlockExpert[m / 128];
      if (e < 0) {
        padding_clean &= row_untouched(&g, m);
        continue;
      }
      for (int j = 0; j < cols; j++) {
        const double want = d_ref(g.a, g.as, MP, &g, m, j, e, swiglu);
        double err = fabs(g.d[m * DN + j] - want) / (fabs(want) + 1e-30);
        if (err > worst) worst = err;
      }
      for (int j = cols; j < DN; j++) gaps_clean &= ((uint32_t *)g.d)[m * DN + j] == 0xffffffffu;
    }
    CHECK(worst < 1e-6, "swiglu %d: worst relative error %g (fp32 output)", swiglu, worst);
    CHECK(padding_clean, "swiglu %d: the padding block's rows were written", swiglu);
    CHECK(gaps_clean, "swiglu %d: D's row gaps were written", swiglu);
  }
}

typedef struct {
  const char *what;
  qf_status want;
  const char *mentions;
  void (*mutate)(gem *g);
} bad;

static void m_b_ndim(gem *g) { g->bt.ndim = 2, g->bt.strides = NULL, g->b_shape[0] = E * N, g->b_shape[1] = K; }
static void m_b_gap(gem *g) { g->b_strides[0] = (int64_t)N * K + 16; }
static void m_n16(gem *g) { g->b_shape[1] = 136, g->b_strides[0] = 136 * K, g->bs_shape[1] = 2; }
static void m_b_k(gem *g) { g->b_shape[2] = 256, g->b_strides[1] = 256, g->b_strides[0] = (int64_t)N * 256; }
static void m_bs_shape(gem *g) { g->bs_shape[0] = 2; }
static void m_ids_shape(gem *g) { g->ids_shape[0] = 2; }
static void m_ids_dtype(gem *g) { g->ids.dtype = qf_dtype_to_dl(QF_F32); }
static void m_ids_value(gem *g) { g->row_expert[256] = E; }
static void m_ids_negative(gem *g) { g->row_expert[0] = -2; }
static void m_epilogue(gem *g) { g->o.epilogue = (qf_grouped_epilogue)7; }
static void m_d_swiglu(gem *g) { g->o.epilogue = QF_GROUPED_SWIGLU; }
static void m_as_shape(gem *g) { g->ast.shape[0] = 2; }

static void test_errors(void) {
  static const bad cases[] = {
      {"b 2-D", QF_ERR_SHAPE, "b has ndim=2; expected 3", m_b_ndim},
      {"b experts apart", QF_ERR_LAYOUT, "b.strides[0]=39184; the experts must be stacked", m_b_gap},
      {"N % 16", QF_ERR_SHAPE, "N=136 (b.shape[1]) must be a multiple of 16", m_n16},
      {"b K differs", QF_ERR_SHAPE, "b.shape[2]=256 differs from a's K=272", m_b_k},
      {"b_scales shape", QF_ERR_SHAPE, "b_scales has shape [2, 2, 3]; expected [3, 2, 3]", m_bs_shape},
      {"expert_ids shape", QF_ERR_SHAPE, "expert_ids has shape [2]; expected [3]", m_ids_shape},
      {"expert_ids dtype", QF_ERR_DTYPE, "expert_ids has dtype fp32", m_ids_dtype},
      {"expert id E", QF_ERR_VALUE, "expert_ids[2]=3 is outside [-1, 3)", m_ids_value},
      {"expert id -2", QF_ERR_VALUE, "expert_ids[0]=-2 is outside [-1, 3)", m_ids_negative},
      {"epilogue", QF_ERR_VALUE, "opts->epilogue=7", m_epilogue},
      {"d of SwiGLU", QF_ERR_SHAPE, "d has shape [300, 144]; expected [300, 72]", m_d_swiglu},
      {"a_scales shape", QF_ERR_SHAPE, "a_scales has shape [2, 300]; expected [3, 300]", m_as_shape},
  };
  static gem g;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gem_init(&g, QF_GROUPED_NONE);
    cases[i].mutate(&g);
    const qf_status st = run(&g);
    int untouched = 1;
    for (int m = 0; m < M; m++) untouched &= row_untouched(&g, m);
    check_error(cases[i].what, st, cases[i].want, "qf_gemm_fp8_blockscale_grouped", cases[i].mentions, untouched);
  }
}

/* ---- the masked layout: E = 3 experts of MAXM = 256 rows, 200, 0 and 256 tokens ---- */
enum { MAXM = 256, MM = E * MAXM, MMP = MM };
static const int32_t kTokens[E] = {200, 0, 256};

typedef struct {
  _Alignas(16) uint8_t a[MM * K];
  _Alignas(16) float as[KB * MMP], d[MM * DN];
  int32_t tokens[E];
  DLTensor at, dt, mt;
  tensor2d ast;
  int64_t a_shape[3], d_shape[3], d_strides[3], m_shape[1];
} masked;

static void masked_init(masked *q, gem *g, qf_grouped_epilogue epilogue) {
  gem_init(g, epilogue); /* b, b_scales and the options */
  uint64_t seed = 7;
  for (int i = 0; i < MM * K; i++) q->a[i] = (uint8_t)(rng_next(&seed) % 0x7e) | (rng_next(&seed) & 0x80);
  for (int i = 0; i < KB * MMP; i++) q->as[i] = expf(rng_normal(&seed) * 2.0f) * 1e-2f;
  memcpy(q->tokens, kTokens, sizeof kTokens);
  memset(q->d, 0xff, sizeof q->d);
  q->a_shape[0] = E, q->a_shape[1] = MAXM, q->a_shape[2] = K;
  q->at = dl_tensor(q->a, QF_E4M3FN, 3, q->a_shape, kDLCPU);
  tensor2d_init(&q->ast, q->as, QF_F32, KB, MM, MMP, kDLCPU);
  const int64_t cols = epilogue == QF_GROUPED_SWIGLU ? N / 2 : N;
  q->d_shape[0] = E, q->d_shape[1] = MAXM, q->d_shape[2] = cols;
  q->d_strides[0] = (int64_t)MAXM * DN, q->d_strides[1] = DN, q->d_strides[2] = 1;
  q->dt = dl_tensor(q->d, QF_F32, 3, q->d_shape, kDLCPU);
  q->dt.strides = q->d_strides;
  q->m_shape[0] = E;
  q->mt = dl_tensor(q->tokens, QF_I32, 1, q->m_shape, kDLCPU);
}

static qf_status run_masked(masked *q, gem *g) {
  return qf_gemm_fp8_blockscale_masked(ctx, &q->at, &q->ast.t, &g->bt, &g->bst, &q->mt, &q->dt, &g->o);
}

static void test_masked(void) {
  static gem g;
  static masked q;
  for (int swiglu = 0; swiglu < 2; swiglu++) {
    masked_init(&q, &g, swiglu ? QF_GROUPED_SWIGLU : QF_GROUPED_NONE);
    CHECK(run_masked(&q, &g) == QF_OK, "masked gemm: %s", qf_ctx_last_error(ctx));
    const int cols = swiglu ? N / 2 : N;
    double worst = 0;
    int skipped_clean = 1;
    for (int m = 0; m < MM; m++) {
      const int e = m / MAXM, r = m % MAXM;
      const uint32_t *row = (const uint32_t *)q.d + m * DN;
      if (r / 128 * 128 >= kTokens[e]) { /* a block past the expert's tokens */
        for (int j = 0; j < DN; j++) skipped_clean &= row[j] == 0xffffffffu;
        continue;
      }
      for (int j = 0; j < cols; j++) {
        const double want = d_ref(q.a, q.as, MMP, &g, m, j, e, swiglu);
        double err = fabs(q.d[m * DN + j] - want) / (fabs(want) + 1e-30);
        if (err > worst) worst = err;
      }
    }
    CHECK(worst < 1e-6, "masked, swiglu %d: worst relative error %g (fp32 output)", swiglu, worst);
    CHECK(skipped_clean, "masked, swiglu %d: rows of skipped blocks were written", swiglu);
  }
}

typedef struct {
  const char *what;
  qf_status want;
  const char *mentions;
  void (*mutate)(masked *q);
} bad_masked;

static void mm_max_m(masked *q) { q->a_shape[1] = 192, q->ast.shape[1] = E * 192; }
static void mm_a_gap(masked *q) {
  static int64_t strides[3] = {MAXM * K + 16, K, 1};
  q->at.strides = strides;
}
static void mm_experts(masked *q) { q->a_shape[0] = 2, q->ast.shape[1] = 2 * MAXM; }
static void mm_tokens(masked *q) { q->tokens[1] = MAXM + 1; }
static void mm_tokens_shape(masked *q) { q->m_shape[0] = 2; }
static void mm_d_shape(masked *q) { q->d_shape[1] = 128; }

static void test_masked_errors(void) {
  static const bad_masked cases[] = {
      {"max_m % 128", QF_ERR_SHAPE, "max_m=192 (a.shape[1]) must be a multiple of 128", mm_max_m},
      {"a experts apart", QF_ERR_LAYOUT, "a.strides[0]=69648; the experts must be stacked", mm_a_gap},
      {"experts differ", QF_ERR_SHAPE, "a has 2 experts, b 3", mm_experts},
      {"tokens > max_m", QF_ERR_VALUE, "masked_m[1]=257 is outside [0, 256]", mm_tokens},
      {"masked_m shape", QF_ERR_SHAPE, "masked_m", mm_tokens_shape},
      {"d shape", QF_ERR_SHAPE, "d has shape [3, 128, 144]; expected [3, 256, 144]", mm_d_shape},
  };
  static gem g;
  static masked q;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    masked_init(&q, &g, QF_GROUPED_NONE);
    cases[i].mutate(&q);
    const qf_status st = run_masked(&q, &g);
    int untouched = 1;
    for (int j = 0; j < MM * DN; j++) untouched &= ((uint32_t *)q.d)[j] == 0xffffffffu;
    check_error(cases[i].what, st, cases[i].want, "qf_gemm_fp8_blockscale_masked", cases[i].mentions, untouched);
  }
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  test_formula();
  test_errors();
  test_masked();
  test_masked_errors();
  qf_ctx_destroy(ctx);
  return check_finish("test_gemm_grouped");
}
