/* The dynamic quantization ops on the CPU backend: every invalid argument gets its own status
 * and message and leaves outputs untouched; results agree with independent formulas (scales
 * from float64 amax, the nearest FP8 code by brute force, SiLU in float64) and the ops agree
 * with each other where their contracts coincide. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "formats/quant_math.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

/* ---- error paths ---------------------------------------------------------------------------- */

enum { M = 5, K = 256, G = 128, KG = K / G, MP = 8 };
typedef struct {
  _Alignas(16) float x[M * K];
  _Alignas(16) uint16_t xg[M * 2 * K]; /* [gate | up] bf16 */
  _Alignas(16) uint16_t w[K];
  _Alignas(16) uint8_t q[M * K];
  _Alignas(16) float sc[KG * MP + 16];
  _Alignas(16) float ub[4];
  tensor2d xt, xgt, qt, st;
  int64_t wshape, ubshape;
  DLTensor wt, ubt;
  qf_group_quant_opts go;
} fam;

static void fam_init(fam *f) {
  for (int i = 0; i < M * K; i++) f->x[i] = (float)((i * 37) % 101) - 50.0f;
  for (int i = 0; i < M * 2 * K; i++) f->xg[i] = qf_bf16_from_f32((float)((i * 13) % 29) - 14.0f);
  for (int i = 0; i < K; i++) f->w[i] = 0x3f80;
  memset(f->q, POISON, sizeof f->q);
  memset(f->sc, POISON, sizeof f->sc);
  f->ub[0] = 1.0f;
  tensor2d_init(&f->xt, f->x, QF_F32, M, K, K, kDLCPU);
  tensor2d_init(&f->xgt, f->xg, QF_BF16, M, 2 * K, 2 * K, kDLCPU);
  tensor2d_init(&f->qt, f->q, QF_E4M3FN, M, K, K, kDLCPU);
  tensor2d_init(&f->st, f->sc, QF_F32, KG, M, MP, kDLCPU); /* COL_MAJOR_TMA: [KG, M], pitch Mp */
  f->wshape = K;
  f->wt = dl_tensor(f->w, QF_BF16, 1, &f->wshape, kDLCPU);
  f->ubshape = 1;
  f->ubt = dl_tensor(f->ub, QF_F32, 1, &f->ubshape, kDLCPU);
  memset(&f->go, 0, sizeof f->go);
  f->go.group_size = G;
  f->go.scale_layout = QF_SCALE_COL_MAJOR_TMA;
}

static int untouched(const fam *f) {
  for (size_t i = 0; i < sizeof f->q; i++)
    if (f->q[i] != POISON) return 0;
  const uint8_t *s = (const uint8_t *)f->sc;
  for (size_t i = 0; i < sizeof f->sc; i++)
    if (s[i] != POISON) return 0;
  return 1;
}

typedef enum { OP_GROUP, OP_SILU, OP_TOKEN, OP_TENSOR, OP_RMS } op_kind;
typedef struct {
  const char *what;
  op_kind op;
  qf_status want;
  const char *mentions;
  void (*mutate)(fam *f);
} bad;

static qf_status call(fam *f, op_kind op) {
  switch (op) {
    case OP_GROUP: return qf_quant_group(ctx, &f->xt.t, &f->qt.t, &f->st.t, &f->go);
    case OP_SILU: return qf_silu_mul_quant_group(ctx, &f->xgt.t, &f->qt.t, &f->st.t, NULL, &f->go);
    case OP_TOKEN: {
      qf_token_quant_opts o = {0};
      return qf_quant_token(ctx, &f->xt.t, &f->qt.t, &f->st.t, NULL, &o);
    }
    case OP_TENSOR: {
      qf_tensor_quant_opts o = {.dynamic = 1};
      return qf_quant_tensor(ctx, &f->xt.t, &f->qt.t, &f->ubt, &o);
    }
    case OP_RMS: {
      qf_rms_norm_quant_opts o = {.group_size = f->go.group_size, .group = f->go};
      tensor2d xh;
      tensor2d_init(&xh, f->xg, QF_BF16, M, K, 2 * K, kDLCPU);
      if (f->xt.t.dtype.code == kDLInt) xh.t.dtype = f->xt.t.dtype; /* a mutation of x's dtype */
      return qf_rms_norm_quant(ctx, &xh.t, NULL, &f->wt, &f->qt.t, &f->st.t, &o);
    }
  }
  return QF_OK;
}

static void m_g_bad(fam *f) { f->go.group_size = 96; }
static void m_k_indivisible(fam *f) { f->xt.shape[1] = f->qt.shape[1] = 192; }
static void m_layout(fam *f) { f->go.scale_layout = (qf_scale_layout)7; }
static void m_format(fam *f) { f->go.scale_format = (qf_scale_format)9; }
static void m_packed_rowmajor(fam *f) { f->go.scale_format = QF_SCALE_UE8M0_PACKED, f->go.scale_layout = QF_SCALE_ROW_MAJOR; }
static void m_floor(fam *f) { f->go.scale_min = -1.0f; }
static void m_floor_nan(fam *f) { f->go.scale_min = NAN; }
static void m_ub_shape(fam *f) { f->ubshape = 2, f->go.scale_ub = &f->ubt; }
static void m_ub_dtype(fam *f) { f->ubt.dtype = qf_dtype_to_dl(QF_BF16), f->go.scale_ub = &f->ubt; }
static void m_sc_pitch(fam *f) { f->st.strides[0] = M; }
static void m_sc_shape(fam *f) { f->st.shape[0] = 3; }
static void m_sc_rowmajor_shape(fam *f) { f->go.scale_layout = QF_SCALE_ROW_MAJOR; }
static void m_sc_dtype(fam *f) { f->st.t.dtype = qf_dtype_to_dl(QF_BF16); }
static void m_sc_packed_dtype(fam *f) { f->go.scale_format = QF_SCALE_UE8M0_PACKED; }
static void m_sc_misaligned(fam *f) { f->st.t.byte_offset = 4; }
static void m_sc_null(fam *f) { f->st.t.data = NULL; }
static void m_x_dtype(fam *f) { f->xt.t.dtype = qf_dtype_to_dl(QF_I8); }
static void m_q_dtype(fam *f) { f->qt.t.dtype = qf_dtype_to_dl(QF_E5M2); }
static void m_x_misaligned(fam *f) { f->xt.t.byte_offset = 4; }
static void m_x_1d(fam *f) { f->xt.t.ndim = 1, f->xt.t.strides = NULL; }
static void m_q_shape(fam *f) { f->qt.shape[0] = 4; }
static void m_silu_odd(fam *f) { f->xgt.shape[1] = 2 * K - 1, f->xgt.strides[0] = 2 * K; }
static void m_silu_fp32(fam *f) { f->xgt.t.dtype = qf_dtype_to_dl(QF_F32); }
static void m_silu_q_shape(fam *f) { f->xgt.shape[1] = 2 * K - 64; }
static void m_silu_h(fam *f) { f->xgt.shape[1] = 192, f->qt.shape[1] = 96, f->qt.strides[0] = 96, f->go.group_size = 64; }
static void m_tok_scales_shape(fam *f) { f->st.shape[0] = M, f->st.shape[1] = 2, f->st.strides[0] = 2; }
static void m_rms_w_shape(fam *f) { f->wshape = K - 8; }
static void m_rms_w_dtype(fam *f) { f->wt.dtype = qf_dtype_to_dl(QF_F16); }
static void m_rms_x_dtype(fam *f) { f->xt.t.dtype = qf_dtype_to_dl(QF_I8); }

static void test_errors(void) {
  static const bad cases[] = {
      {"group 96", OP_GROUP, QF_ERR_VALUE, "group_size=96", m_g_bad},
      {"K % G", OP_GROUP, QF_ERR_SHAPE, "x.shape[1]=192 is not divisible by group_size=128", m_k_indivisible},
      {"bad layout", OP_GROUP, QF_ERR_VALUE, "scale_layout=7", m_layout},
      {"bad format", OP_GROUP, QF_ERR_VALUE, "scale_format=9", m_format},
      {"packed row-major", OP_GROUP, QF_ERR_VALUE, "UE8M0_PACKED scales need the COL_MAJOR_TMA", m_packed_rowmajor},
      {"negative floor", OP_GROUP, QF_ERR_VALUE, "scale_min=-1", m_floor},
      {"NaN floor", OP_GROUP, QF_ERR_VALUE, "scale_min=nan", m_floor_nan},
      {"ub [2]", OP_GROUP, QF_ERR_SHAPE, "scale_ub has shape [2]", m_ub_shape},
      {"ub bf16", OP_GROUP, QF_ERR_DTYPE, "scale_ub has dtype bf16", m_ub_dtype},
      {"TMA pitch", OP_GROUP, QF_ERR_LAYOUT, "scales.strides[0]=5 but the COL_MAJOR_TMA layout needs 8", m_sc_pitch},
      {"scales shape", OP_GROUP, QF_ERR_SHAPE, "scales has shape [3, 5]; expected [2, 5]", m_sc_shape},
      {"row-major shape", OP_GROUP, QF_ERR_SHAPE, "scales has shape [2, 5]; expected [5, 2]", m_sc_rowmajor_shape},
      {"scales bf16", OP_GROUP, QF_ERR_DTYPE, "scales has dtype bf16", m_sc_dtype},
      {"packed needs int32", OP_GROUP, QF_ERR_DTYPE, "scales has dtype fp32 (DLPack code 2, bits 32, lanes 1); expected one of: int32", m_sc_packed_dtype},
      {"scales misaligned", OP_GROUP, QF_ERR_ALIGNMENT, "scales data pointer", m_sc_misaligned},
      {"scales NULL data", OP_GROUP, QF_ERR_NULL, "scales.data", m_sc_null},
      {"x int8", OP_GROUP, QF_ERR_DTYPE, "x has dtype int8", m_x_dtype},
      {"q e5m2", OP_GROUP, QF_ERR_DTYPE, "q has dtype e5m2", m_q_dtype},
      {"x misaligned", OP_GROUP, QF_ERR_ALIGNMENT, "x data pointer", m_x_misaligned},
      {"x 1-D", OP_GROUP, QF_ERR_SHAPE, "x has ndim=1; expected 2", m_x_1d},
      {"q rows", OP_GROUP, QF_ERR_SHAPE, "q.shape[0]=4 differs", m_q_shape},
      {"silu odd 2H", OP_SILU, QF_ERR_SHAPE, "x.shape[1]=511 is odd", m_silu_odd},
      {"silu fp32", OP_SILU, QF_ERR_DTYPE, "x has dtype fp32", m_silu_fp32},
      {"silu q shape", OP_SILU, QF_ERR_SHAPE, "q has shape [5, 256]; expected [5, 224]", m_silu_q_shape},
      {"silu H % G", OP_SILU, QF_ERR_SHAPE, "H = x.shape[1] / 2=96 is not divisible by group_size=64", m_silu_h}, 
      {"token scales shape", OP_TOKEN, QF_ERR_SHAPE, "scales has shape [5, 2]; expected [5, 1]", m_tok_scales_shape},
      {"token q dtype", OP_TOKEN, QF_ERR_DTYPE, "q has dtype e5m2", m_q_dtype},
      {"tensor x dtype", OP_TENSOR, QF_ERR_DTYPE, "x has dtype int8", m_x_dtype},
      {"rms weight shape", OP_RMS, QF_ERR_SHAPE, "weight has shape [248]; expected [256]", m_rms_w_shape},
      {"rms weight dtype", OP_RMS, QF_ERR_DTYPE, "weight has dtype fp16", m_rms_w_dtype},
      {"rms x dtype", OP_RMS, QF_ERR_DTYPE, "x has dtype int8", m_rms_x_dtype},
      {"rms group 96", OP_RMS, QF_ERR_VALUE, "group_size=96", m_g_bad},
  };
  fam *f = calloc(1, sizeof *f);
  for (op_kind op = OP_GROUP; op <= OP_RMS; op++) {
    fam_init(f);
    if (op == OP_TOKEN) f->st.shape[0] = M, f->st.shape[1] = 1, f->st.strides[0] = 1;
    qf_status st = call(f, op);
    CHECK(st == QF_OK, "valid call of op %d: %s", (int)op, qf_ctx_last_error(ctx));
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fam_init(f);
    if (cases[i].op == OP_TOKEN) f->st.shape[0] = M, f->st.shape[1] = 1, f->st.strides[0] = 1;
    cases[i].mutate(f);
    qf_status st = call(f, cases[i].op);
    const char *msg = qf_ctx_last_error(ctx);
    CHECK(st == cases[i].want, "%s: got %s, want %s (%s)", cases[i].what, qf_status_str(st), qf_status_str(cases[i].want), msg);
    CHECK(strstr(msg, cases[i].mentions) != NULL, "%s: message '%s' lacks '%s'", cases[i].what, msg, cases[i].mentions);
    CHECK(untouched(f), "%s: an output was written", cases[i].what);
  }
  free(f);
}

/* ---- numerics ------------------------------------------------------------------------------- */

#include "oracle.h"

static float expect_scale(const float *v, int n, float qmax) {
  double amax = 0;
  for (int i = 0; i < n; i++) {
    if (!isfinite(v[i])) return NAN;
    amax = fmax(amax, fabs((double)v[i]));
  }
  float s = (float)amax / qmax;
  return s > 1e-10f ? s : 1e-10f;
}

static int same_float(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

/* Runs qf_quant_group on fp32 x [R, C] with G and the given layout/format into q and scales. */
static qf_status group(float *x, int R, int C, int g, qf_scale_layout lay, qf_scale_format fmt, uint8_t *q, void *sc) {
  tensor2d xt, qt, st;
  tensor2d_init(&xt, x, QF_F32, R, C, C, kDLCPU);
  tensor2d_init(&qt, q, QF_E4M3FN, R, C, C, kDLCPU);
  int Rp = (R + 3) / 4 * 4, CG = C / g;
  if (lay == QF_SCALE_ROW_MAJOR) tensor2d_init(&st, sc, QF_F32, R, CG, CG, kDLCPU);
  else if (fmt == QF_SCALE_UE8M0_PACKED) tensor2d_init(&st, sc, QF_I32, (CG + 3) / 4, R, Rp, kDLCPU);
  else tensor2d_init(&st, sc, QF_F32, CG, R, lay == QF_SCALE_COL_MAJOR_TMA ? Rp : R, kDLCPU);
  qf_group_quant_opts o = {.group_size = g, .scale_layout = lay, .scale_format = fmt};
  return qf_quant_group(ctx, &xt.t, &qt.t, &st.t, &o);
}

static void test_group_oracle(void) {
  enum { R = 7, C = 384, GG = 64, CG = C / GG, RP = 8 };
  static float x[R * C], s_row[R * CG], s_col[CG * R], s_tma[CG * RP], s_pow2[R * CG];
  static int32_t s_pack[((CG + 3) / 4) * RP];
  static uint8_t q[R * C], q2[R * C], q3[R * C];
  uint64_t seed = 5;
  for (int i = 0; i < R * C; i++) x[i] = rng_activation(&seed, 3.0f, 0);
  for (int i = 0; i < GG; i++) x[1 * C + 64 + i] = 0.0f; /* an all-zero group */
  x[2 * C + 130] = NAN;                                  /* a NaN in group 2 of row 2 */
  x[3 * C + 300] = INFINITY;                              /* an Inf in group 4 of row 3 */
  memset(s_tma, POISON, sizeof s_tma);
  memset(s_pack, POISON, sizeof s_pack);
  CHECK(group(x, R, C, GG, QF_SCALE_ROW_MAJOR, QF_SCALE_F32, q, s_row) == QF_OK, "row-major: %s", qf_ctx_last_error(ctx));
  for (int r = 0; r < R; r++)
    for (int g = 0; g < CG; g++) {
      float want = expect_scale(x + r * C + g * GG, GG, 448.0f);
      CHECK(same_float(s_row[r * CG + g], want), "scale (%d, %d) = %g, want %g", r, g, s_row[r * CG + g], want);
      float inv = 1.0f / want;
      for (int i = 0; i < GG; i++) {
        int k = r * C + g * GG + i;
        uint8_t w = isnan(want) ? 0x7f : oracle_e4m3fn(x[k] * inv);
        CHECK(q[k] == w, "q(%d, %d) = 0x%02x, want 0x%02x", r, g * GG + i, q[k], w);
      }
    }
  CHECK(s_row[1 * CG + 1] == 1e-10f && q[1 * C + 64] == 0, "all-zero group: floor scale, zero codes");
  CHECK(group(x, R, C, GG, QF_SCALE_COL_MAJOR, QF_SCALE_F32, q2, s_col) == QF_OK, "col-major");
  CHECK(group(x, R, C, GG, QF_SCALE_COL_MAJOR_TMA, QF_SCALE_F32, q3, s_tma) == QF_OK, "tma");
  for (int r = 0; r < RP; r++)
    for (int g = 0; g < CG; g++) {
      if (r < R) {
        CHECK(same_float(s_col[g * R + r], s_row[r * CG + g]), "col-major scale (%d, %d)", r, g);
        CHECK(same_float(s_tma[g * RP + r], s_row[r * CG + g]), "tma scale (%d, %d)", r, g);
      } else {
        CHECK(s_tma[g * RP + r] == 0.0f, "tma padding (%d, %d) = %g, want 0", r, g, s_tma[g * RP + r]);
      }
    }
  CHECK(!memcmp(q, q2, sizeof q) && !memcmp(q, q3, sizeof q), "layouts change the scales' place, not the codes");

  CHECK(group(x, R, C, GG, QF_SCALE_ROW_MAJOR, QF_SCALE_F32_POW2, q2, s_pow2) == QF_OK, "pow2");
  CHECK(group(x, R, C, GG, QF_SCALE_COL_MAJOR_TMA, QF_SCALE_UE8M0_PACKED, q3, s_pack) == QF_OK, "ue8m0");
  for (int r = 0; r < RP; r++)
    for (int g = 0; g < 8; g++) { /* 6 groups, padded to 2 words of 4 */
      uint8_t byte = ((uint8_t *)s_pack)[4 * ((g / 4) * RP + r) + g % 4];
      if (r >= R || g >= CG) {
        CHECK(byte == 0, "ue8m0 padding (%d, %d) = %u", r, g, byte);
        continue;
      }
      float s = s_row[r * CG + g], p2 = s_pow2[r * CG + g];
      if (isnan(s)) {
        CHECK(isnan(p2) && byte == 0xff, "NaN group (%d, %d): pow2 %g, byte 0x%02x", r, g, p2, byte);
        continue;
      }
      int e;
      double fr = frexp((double)s, &e); /* s = fr * 2^e, fr in [0.5, 1) */
      double want = fr == 0.5 ? s : ldexp(1.0, e);
      CHECK((double)p2 == want, "pow2 scale (%d, %d) = %g, want %g (from %g)", r, g, p2, want, s);
      CHECK(byte == (uint8_t)(127 + (int)log2(want)), "ue8m0 byte (%d, %d) = %u for %g", r, g, byte, want);
    }
  CHECK(!memcmp(q2, q3, sizeof q), "UE8M0 and fp32 power-of-two scales quantize alike");
}

static void test_silu(void) {
  enum { R = 3, H = 256 };
  static uint16_t x[R * 2 * H];
  static float v[R * H], s1[R * 2], s2[R * 2];
  static uint8_t q1[R * H], q2[R * H];
  uint64_t seed = 11;
  for (int i = 0; i < R * 2 * H; i++) x[i] = qf_bf16_from_f32(rng_activation(&seed, 4.0f, 0));
  const qf_glu_opts variants[] = {{0, 0, 0, 0}, {1.702f, 7.0f, 1, 0}, {1.0f, 3.0f, 0, 0}};
  for (int vi = 0; vi < 3; vi++) {
    const qf_glu_opts *o = &variants[vi];
    float alpha = o->alpha ? o->alpha : 1.0f;
    double worst = 0;
    for (int r = 0; r < R; r++)
      for (int k = 0; k < H; k++) {
        float g = qf_bf16_to_f32(x[r * 2 * H + k]), u = qf_bf16_to_f32(x[r * 2 * H + H + k]);
        v[r * H + k] = qf_glu(g, u, alpha, o->limit, o->up_plus_one);
        double gd = g, ud = u;
        if (o->limit > 0) gd = fmin(gd, o->limit), ud = fmax(fmin(ud, o->limit), -o->limit);
        double want = gd / (1.0 + exp(-alpha * gd)) * (ud + (o->up_plus_one ? 1.0 : 0.0));
        double err = fabs(v[r * H + k] - want) / (fabs(want) + 1e-30);
        if (fabs(want) > 1e-30 && err > worst) worst = err;
      }
    CHECK(worst < 2e-6, "glu variant %d: relative error %g vs float64", vi, worst);
    tensor2d xt, qt, st;
    tensor2d_init(&xt, x, QF_BF16, R, 2 * H, 2 * H, kDLCPU);
    tensor2d_init(&qt, q1, QF_E4M3FN, R, H, H, kDLCPU);
    tensor2d_init(&st, s1, QF_F32, R, 2, 2, kDLCPU);
    qf_group_quant_opts go = {.group_size = 128};
    CHECK(qf_silu_mul_quant_group(ctx, &xt.t, &qt.t, &st.t, vi ? o : NULL, &go) == QF_OK, "silu: %s", qf_ctx_last_error(ctx));
    CHECK(group(v, R, H, 128, QF_SCALE_ROW_MAJOR, QF_SCALE_F32, q2, s2) == QF_OK, "group on v");
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(s1, s2, sizeof s1), "glu variant %d: fused != activation then quant_group", vi);
    /* fast_exp is a permission for CUDA only: the CPU computes exactly with or without it. */
    qf_glu_opts fast = *o;
    fast.fast_exp = 1;
    memset(q2, 0, sizeof q2), memset(s2, 0, sizeof s2);
    tensor2d_init(&qt, q2, QF_E4M3FN, R, H, H, kDLCPU);
    tensor2d_init(&st, s2, QF_F32, R, 2, 2, kDLCPU);
    CHECK(qf_silu_mul_quant_group(ctx, &xt.t, &qt.t, &st.t, &fast, &go) == QF_OK, "silu fast_exp: %s", qf_ctx_last_error(ctx));
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(s1, s2, sizeof s1), "glu variant %d: the CPU's fast_exp result differs", vi);
  }
}

static void test_token_and_tensor(void) {
  enum { R = 6, C = 128 };
  static float x[R * C], sg[R], st_[R], sa[R], s_t[4], s_static[4];
  static uint8_t qg[R * C], qt_[R * C], qa[R * C], qd[R * C], qs[R * C];
  static int32_t azp[R];
  uint64_t seed = 3;
  for (int i = 0; i < R * C; i++) x[i] = rng_activation(&seed, 2.0f, 0) + (i / C == 4 ? 30.0f : 0.0f);
  x[5 * C + 7] = NAN;
  CHECK(group(x, R, C, 128, QF_SCALE_ROW_MAJOR, QF_SCALE_F32, qg, sg) == QF_OK, "group");
  tensor2d xt, qt, qat;
  tensor2d_init(&xt, x, QF_F32, R, C, C, kDLCPU);
  tensor2d_init(&qt, qt_, QF_E4M3FN, R, C, C, kDLCPU);
  int64_t rs = R;
  DLTensor sct = dl_tensor(st_, QF_F32, 1, &rs, kDLCPU), sat = dl_tensor(sa, QF_F32, 1, &rs, kDLCPU), azt = dl_tensor(azp, QF_I32, 1, &rs, kDLCPU);
  CHECK(qf_quant_token(ctx, &xt.t, &qt.t, &sct, NULL, NULL) == QF_OK, "token: %s", qf_ctx_last_error(ctx));
  CHECK(!memcmp(qg, qt_, sizeof qg), "per-token == one group of the whole row");
  for (int r = 0; r < R; r++) CHECK(same_float(sg[r], st_[r]), "token scale %d", r);

  tensor2d_init(&qat, qa, QF_I8, R, C, C, kDLCPU);
  CHECK(qf_quant_token(ctx, &xt.t, &qat.t, &sat, &azt, NULL) == QF_OK, "asym: %s", qf_ctx_last_error(ctx));
  for (int r = 0; r < R; r++) {
    if (r == 5) {
      int zero = 1;
      for (int k = 0; k < C; k++) zero &= qa[r * C + k] == 0;
      CHECK(isnan(sa[r]) && azp[r] == 0 && zero, "asym NaN row: scale NaN, azp 0, codes 0");
      continue;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < C; k++) lo = fmin(lo, x[r * C + k]), hi = fmax(hi, x[r * C + k]);
    CHECK(fabs(sa[r] - (hi - lo) / 255.0) <= 1e-6 * sa[r], "asym scale row %d: %g vs %g", r, sa[r], (hi - lo) / 255.0);
    double worst = 0;
    for (int k = 0; k < C; k++) worst = fmax(worst, fabs(sa[r] * ((int8_t)qa[r * C + k] - azp[r]) - x[r * C + k]));
    CHECK(worst <= 0.5001 * sa[r], "asym row %d: dequantization error %g > scale/2 (%g)", r, worst, sa[r]);
  }

  int64_t one = 1;
  DLTensor s1 = dl_tensor(s_t, QF_F32, 1, &one, kDLCPU), s2 = dl_tensor(s_static, QF_F32, 1, &one, kDLCPU);
  tensor2d qdt, qst;
  tensor2d_init(&qdt, qd, QF_E4M3FN, R - 1, C, C, kDLCPU); /* rows without the NaN */
  tensor2d_init(&qst, qs, QF_E4M3FN, R - 1, C, C, kDLCPU);
  xt.shape[0] = R - 1;
  qf_tensor_quant_opts dyn = {.dynamic = 1};
  CHECK(qf_quant_tensor(ctx, &xt.t, &qdt.t, &s1, &dyn) == QF_OK, "dynamic tensor: %s", qf_ctx_last_error(ctx));
  CHECK(same_float(s_t[0], expect_scale(x, (R - 1) * C, 448.0f)), "dynamic tensor scale %g", s_t[0]);
  s_static[0] = s_t[0];
  CHECK(qf_quant_tensor(ctx, &xt.t, &qst.t, &s2, NULL) == QF_OK && !memcmp(qd, qs, (R - 1) * C), "dynamic == static with its scale");
  xt.shape[0] = R;
  CHECK(qf_quant_tensor(ctx, &xt.t, &qt.t, &s1, &dyn) == QF_OK && isnan(s_t[0]) && qt_[0] == 0x7f, "a NaN makes the tensor scale NaN");
}

static void test_rms(void) {
  enum { R = 4, C = 256 };
  static uint16_t x[R * C], res[R * C], res0[R * C], w[C];
  static float v[R * C], sa[R * 2], sb[R * 2], st[R];
  static uint8_t qa[R * C], qb[R * C];
  uint64_t seed = 21;
  for (int i = 0; i < R * C; i++) x[i] = qf_bf16_from_f32(rng_activation(&seed, 1.0f, 0)), res0[i] = qf_bf16_from_f32(rng_normal(&seed));
  for (int i = 0; i < C; i++) w[i] = qf_bf16_from_f32(0.5f + rng_uniform(&seed));
  memcpy(res, res0, sizeof res);
  double worst = 0;
  for (int r = 0; r < R; r++) { /* expected: y = bf16(x + res), v = (y * r) * w */
    double ss = 0;
    float y[C];
    for (int k = 0; k < C; k++) {
      y[k] = qf_bf16_to_f32(qf_bf16_from_f32(qf_bf16_to_f32(x[r * C + k]) + qf_bf16_to_f32(res0[r * C + k])));
      ss += (double)y[k] * y[k];
    }
    float rr = 1.0f / sqrtf((float)(ss / C) + 1e-6f);
    for (int k = 0; k < C; k++) {
      v[r * C + k] = (y[k] * rr) * qf_bf16_to_f32(w[k]);
      double exact = y[k] / sqrt(ss / C + 1e-6) * qf_bf16_to_f32(w[k]);
      worst = fmax(worst, fabs(v[r * C + k] - exact) / (fabs(exact) + 1e-3));
    }
  }
  CHECK(worst < 1e-6, "rms formula vs float64: %g", worst);
  tensor2d xt, rt, qt, sct;
  tensor2d_init(&xt, x, QF_BF16, R, C, C, kDLCPU);
  tensor2d_init(&rt, res, QF_BF16, R, C, C, kDLCPU);
  tensor2d_init(&qt, qa, QF_E4M3FN, R, C, C, kDLCPU);
  tensor2d_init(&sct, sa, QF_F32, R, 2, 2, kDLCPU);
  int64_t cs = C, rs = R;
  DLTensor wt = dl_tensor(w, QF_BF16, 1, &cs, kDLCPU), tokt = dl_tensor(st, QF_F32, 1, &rs, kDLCPU);
  qf_rms_norm_quant_opts o = {.group_size = 128, .eps = 1e-6f};
  CHECK(qf_rms_norm_quant(ctx, &xt.t, &rt.t, &wt, &qt.t, &sct.t, &o) == QF_OK, "rms: %s", qf_ctx_last_error(ctx));
  int res_ok = 1;
  for (int i = 0; i < R * C; i++)
    res_ok &= res[i] == qf_bf16_from_f32(qf_bf16_to_f32(x[i]) + qf_bf16_to_f32(res0[i]));
  CHECK(res_ok, "residual written back as bf16(x + residual)");
  CHECK(group(v, R, C, 128, QF_SCALE_ROW_MAJOR, QF_SCALE_F32, qb, sb) == QF_OK, "group on v");
  CHECK(!memcmp(qa, qb, sizeof qa) && !memcmp(sa, sb, sizeof sa), "rms + group quant == group quant of the normalized values");
  memcpy(res, res0, sizeof res);
  o.group_size = -1;
  CHECK(qf_rms_norm_quant(ctx, &xt.t, &rt.t, &wt, &qt.t, &tokt, &o) == QF_OK, "rms per token: %s", qf_ctx_last_error(ctx));
  for (int r = 0; r < R; r++) CHECK(same_float(st[r], expect_scale(v + r * C, C, 448.0f)), "rms per-token scale %d", r);
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  test_errors();
  test_group_oracle();
  test_silu();
  test_token_and_tensor();
  test_rms();
  qf_ctx_destroy(ctx);
  return check_finish("test_quant_family");
}
