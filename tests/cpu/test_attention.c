/* qf_attention on the CPU backend: a hand-computed case, every mask (causal, window, both, none)
 * with GQA, sinks, strided [B, H, S, D] storage and both output types against a direct
 * evaluation of the documented formula, rows with nothing visible, and every error path (outputs
 * untouched); the paged and packed (varlen) forms against the dense call per sequence; e4m3fn keys
 * and values against the 16-bit call on their dequantized values; appends to a cache by slot. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "oracle.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;


/* A 4-D tensor over a buffer: shape and element strides. */
typedef struct {
  DLTensor t;
  int64_t shape[4], strides[4];
} t4;

static void t4_init(t4 *x, void *data, qf_dtype dt, const int64_t shape[4], const int64_t strides[4]) {
  memset(x, 0, sizeof *x);
  memcpy(x->shape, shape, sizeof x->shape);
  memcpy(x->strides, strides, sizeof x->strides);
  x->t = dl_tensor(data, dt, 4, x->shape, kDLCPU);
  x->t.strides = x->strides;
}

static int64_t off4(const int64_t st[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * st[0] + b * st[1] + c * st[2] + d * st[3];
}

/* The shape under test: GQA 2 query heads per kv head, fewer queries than keys, odd sizes. */
enum { B = 2, SQ = 5, SKV = 9, HQ = 4, HKV = 2, D = 24, DV = 16 };

typedef struct {
  uint16_t q[B * SQ * HQ * D], k[B * SKV * HKV * D], v[B * SKV * HKV * DV];
  float o[B * SQ * HQ * DV + 8], lse[B * HQ * SQ + 8], sinks[HQ];
  t4 qt, kt, vt, ot;
  DLTensor lt, st;
  int64_t lse_shape[3], sinks_shape[1];
} att;

/* q, k compact [B, S, H, D]; v stored [B, H, S, Dv] and described by strides; o fp32 or bf16. */
static void att_init(att *a, qf_dtype in, qf_dtype out) {
  uint64_t seed = 7;
  for (size_t i = 0; i < sizeof a->q / 2; i++) float_put(a->q, in, i, rng_normal(&seed));
  for (size_t i = 0; i < sizeof a->k / 2; i++) float_put(a->k, in, i, rng_normal(&seed));
  for (size_t i = 0; i < sizeof a->v / 2; i++) float_put(a->v, in, i, rng_normal(&seed));
  for (int h = 0; h < HQ; h++) a->sinks[h] = rng_normal(&seed) * 2.0f;
  memset(a->o, POISON, sizeof a->o);
  memset(a->lse, POISON, sizeof a->lse);
  const int64_t qs[4] = {B, SQ, HQ, D}, qst[4] = {SQ * HQ * D, HQ * D, D, 1};
  const int64_t ks[4] = {B, SKV, HKV, D}, kst[4] = {SKV * HKV * D, HKV * D, D, 1};
  const int64_t vs[4] = {B, SKV, HKV, DV}, vst[4] = {HKV * SKV * DV, DV, SKV * DV, 1};
  const int64_t os[4] = {B, SQ, HQ, DV}, ost[4] = {SQ * HQ * DV, HQ * DV, DV, 1};
  t4_init(&a->qt, a->q, in, qs, qst);
  t4_init(&a->kt, a->k, in, ks, kst);
  t4_init(&a->vt, a->v, in, vs, vst);
  t4_init(&a->ot, a->o, out, os, ost);
  a->lse_shape[0] = B, a->lse_shape[1] = HQ, a->lse_shape[2] = SQ;
  a->lt = dl_tensor(a->lse, QF_F32, 3, a->lse_shape, kDLCPU);
  a->sinks_shape[0] = HQ;
  a->st = dl_tensor(a->sinks, QF_F32, 1, a->sinks_shape, kDLCPU);
}

/* The formula evaluated directly: the weights exp(s_j) / Z with Z over the visible keys and the
 * sink, without a running maximum (the inputs keep exp in range). */
static void expect(const att *a, qf_dtype in, const qf_attention_opts *opt, int sinks, int b, int i, int h, double *o,
                   double *lse) {
  const int g = h / (HQ / HKV), p = i + SKV - SQ;
  const double scale = opt->sm_scale > 0 ? opt->sm_scale : 1.0 / sqrt((double)D);
  double z = sinks ? exp(a->sinks[h]) : 0.0, e[SKV];
  for (int j = 0; j < SKV; j++) {
    e[j] = 0.0;
    if (opt->causal && j > p) continue;
    if (opt->window > 0 && p - j >= opt->window) continue;
    double s = 0.0;
    for (int d = 0; d < D; d++)
      s += (double)float_get(a->q, in, off4(a->qt.strides, b, i, h, d)) * float_get(a->k, in, off4(a->kt.strides, b, j, g, d));
    e[j] = exp(scale * s);
    z += e[j];
  }
  for (int d = 0; d < DV; d++) {
    o[d] = 0.0;
    for (int j = 0; j < SKV; j++) o[d] += z > 0 ? e[j] / z * float_get(a->v, in, off4(a->vt.strides, b, j, g, d)) : 0.0;
  }
  *lse = z > 0 ? log(z) : -INFINITY;
}

static void check_case(qf_dtype in, qf_dtype out, qf_attention_opts opt, int sinks) {
  static att a;
  att_init(&a, in, out);
  qf_status st = qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, sinks ? &a.st : NULL, &opt, &a.ot.t, &a.lt);
  if (!CHECK(st == QF_OK, "causal %d window %lld sinks %d: %s", opt.causal, (long long)opt.window, sinks,
             qf_ctx_last_error(ctx)))
    return;
  const double tol = out == QF_F32 ? 1e-6 : 1.0 / 256;
  int bad = 0;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < SQ; i++)
      for (int h = 0; h < HQ; h++) {
        double o[DV], lse;
        expect(&a, in, &opt, sinks, b, i, h, o, &lse);
        const float got_lse = a.lse[(b * HQ + h) * SQ + i];
        if (lse == -INFINITY ? got_lse != -INFINITY : fabs(got_lse - lse) > 1e-6 * fmax(1.0, fabs(lse))) bad++;
        for (int d = 0; d < DV; d++) {
          const double got = float_get(a.o, out, off4(a.ot.strides, b, i, h, d));
          if (!(fabs(got - o[d]) <= tol * fmax(fabs(o[d]), 1e-3))) bad++;
        }
      }
  CHECK(bad == 0, "in %s out %s causal %d window %lld sinks %d: %d values off", qf_dtype_name(in), qf_dtype_name(out),
        opt.causal, (long long)opt.window, sinks, bad);
  int touched = 0;
  for (size_t i = B * SQ * HQ * DV * float_size(out); i < sizeof a.o; i++) touched += ((uint8_t *)a.o)[i] != POISON;
  for (size_t i = B * HQ * SQ * sizeof(float); i < sizeof a.lse; i++) touched += ((uint8_t *)a.lse)[i] != POISON;
  CHECK(touched == 0, "%d bytes past o and lse written", touched);
}

/* One query, keys 0 and 1, values 0 and 1 (D = Dv = 1, sm_scale 1): o = e / (1 + e), lse =
 * log(1 + e); with a sink s = 0 the denominator gains 1. A causal query before every key
 * (Sq > Skv) sees nothing. */
static void check_by_hand(void) {
  uint16_t q[2], k[2], v[2];
  float o[2], lse[2], sink = 0.0f;
  q[0] = q[1] = qf_bf16_from_f32(1.0f), k[0] = v[0] = qf_bf16_from_f32(0.0f), k[1] = v[1] = qf_bf16_from_f32(1.0f);
  int64_t qs[4] = {1, 1, 1, 1}, ks[4] = {1, 2, 1, 1}, ls[3] = {1, 1, 1}, ss[1] = {1};
  DLTensor qt = dl_tensor(q, QF_BF16, 4, qs, kDLCPU), kt = dl_tensor(k, QF_BF16, 4, ks, kDLCPU);
  DLTensor vt = dl_tensor(v, QF_BF16, 4, ks, kDLCPU), ot = dl_tensor(o, QF_F32, 4, qs, kDLCPU);
  DLTensor lt = dl_tensor(lse, QF_F32, 3, ls, kDLCPU), st = dl_tensor(&sink, QF_F32, 1, ss, kDLCPU);
  qf_attention_opts opt = {.sm_scale = 1.0f};
  const double e = exp(1.0);
  CHECK(qf_attention(ctx, &qt, &kt, &vt, NULL, &opt, &ot, &lt) == QF_OK, "%s", qf_ctx_last_error(ctx));
  CHECK(fabs(o[0] - e / (1 + e)) < 1e-6 && fabs(lse[0] - log(1 + e)) < 1e-6, "by hand: o %g lse %g", o[0], lse[0]);
  CHECK(qf_attention(ctx, &qt, &kt, &vt, &st, &opt, &ot, &lt) == QF_OK, "%s", qf_ctx_last_error(ctx));
  CHECK(fabs(o[0] - e / (2 + e)) < 1e-6 && fabs(lse[0] - log(2 + e)) < 1e-6, "sink: o %g lse %g", o[0], lse[0]);
  opt.causal = 1;
  CHECK(qf_attention(ctx, &qt, &kt, &vt, NULL, &opt, &ot, &lt) == QF_OK && fabs(o[0] - e / (1 + e)) < 1e-6, "causal last query");
  /* Sq = 2 > Skv = 1 with the causal mask: query 0 sits at position -1 and sees nothing. */
  int64_t q2[4] = {1, 2, 1, 1}, k1[4] = {1, 1, 1, 1}, l2[3] = {1, 1, 2};
  qt = dl_tensor(q, QF_BF16, 4, q2, kDLCPU), kt = dl_tensor(k + 1, QF_BF16, 4, k1, kDLCPU);
  vt = dl_tensor(v + 1, QF_BF16, 4, k1, kDLCPU), ot = dl_tensor(o, QF_F32, 4, q2, kDLCPU), lt = dl_tensor(lse, QF_F32, 3, l2, kDLCPU);
  CHECK(qf_attention(ctx, &qt, &kt, &vt, NULL, &opt, &ot, &lt) == QF_OK, "%s", qf_ctx_last_error(ctx));
  CHECK(o[0] == 0.0f && lse[0] == -INFINITY && fabs(o[1] - 1.0) < 1e-6 && fabs(lse[1] - 1.0) < 1e-6,
        "nothing visible: o %g lse %g; last: o %g lse %g", o[0], lse[0], o[1], lse[1]);
  CHECK(qf_attention(ctx, &qt, &kt, &vt, &st, &opt, &ot, &lt) == QF_OK && o[0] == 0.0f && lse[0] == 0.0f,
        "only the sink: o %g lse %g", o[0], lse[0]);
}

/* Each bad argument gets its status, and o and lse stay as they were. */
static void check_errors(void) {
  static att a;
  att_init(&a, QF_BF16, QF_F32);
  const qf_attention_opts opt = {0};
  uint8_t o_before[sizeof a.o], lse_before[sizeof a.lse];
  memcpy(o_before, a.o, sizeof a.o);
  memcpy(lse_before, a.lse, sizeof a.lse);
#define EXPECT(status, call, what)                                                                          \
  do {                                                                                                      \
    qf_status s_ = (call);                                                                                  \
    CHECK(s_ == (status), "%s: got %s (%s)", what, qf_status_str(s_), qf_ctx_last_error(ctx));              \
    CHECK(!memcmp(o_before, a.o, sizeof a.o) && !memcmp(lse_before, a.lse, sizeof a.lse), "%s: outputs written", what); \
  } while (0)
  EXPECT(QF_ERR_NULL, qf_attention(ctx, NULL, &a.kt.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "q NULL");
  EXPECT(QF_ERR_NULL, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &opt, NULL, &a.lt), "o NULL");
  t4 bad = a.kt;
  bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.shape[0] = 1;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &bad.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "k batch");
  bad = a.kt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.shape[3] = D - 8;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &bad.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "k head dim");
  bad = a.vt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.shape[1] = SKV - 1;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &a.kt.t, &bad.t, NULL, &opt, &a.ot.t, &a.lt), "v tokens");
  bad = a.kt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.shape[2] = 3, bad.strides[0] = SKV * 3 * D;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &bad.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "Hq % Hkv");
  bad = a.kt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.strides[3] = 2;
  EXPECT(QF_ERR_LAYOUT, qf_attention(ctx, &a.qt.t, &bad.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "k head dim strided");
  bad = a.kt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.strides[1] = -D;
  EXPECT(QF_ERR_LAYOUT, qf_attention(ctx, &a.qt.t, &bad.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "negative stride");
  bad = a.kt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.t.dtype = qf_dtype_to_dl(QF_F16);
  EXPECT(QF_ERR_DTYPE, qf_attention(ctx, &a.qt.t, &bad.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "k dtype differs");
  bad = a.qt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.t.dtype = qf_dtype_to_dl(QF_F32);
  EXPECT(QF_ERR_DTYPE, qf_attention(ctx, &bad.t, &a.kt.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "fp32 q");
  bad = a.qt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.t.ndim = 3;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &bad.t, &a.kt.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "q ndim 3");
  bad = a.ot, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.shape[3] = DV / 2;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &opt, &bad.t, &a.lt), "o head dim");
  bad = a.ot, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.strides[2] = DV / 2;
  EXPECT(QF_ERR_LAYOUT, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &opt, &bad.t, &a.lt), "o heads overlap");
  bad = a.ot, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.t.dtype = qf_dtype_to_dl(QF_F16);
  EXPECT(QF_ERR_DTYPE, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &opt, &bad.t, &a.lt), "fp16 o for bf16 q");
  DLTensor l2 = a.lt;
  int64_t lsh[3] = {B, SQ, HQ};
  l2.shape = lsh;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &opt, &a.ot.t, &l2), "lse [B, Sq, Hq]");
  DLTensor s2 = a.st;
  int64_t ssh[1] = {HQ - 1};
  s2.shape = ssh;
  EXPECT(QF_ERR_SHAPE, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, &s2, &opt, &a.ot.t, &a.lt), "sinks length");
  qf_attention_opts o2 = {.window = -1};
  EXPECT(QF_ERR_VALUE, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &o2, &a.ot.t, &a.lt), "negative window");
  o2 = (qf_attention_opts){.sm_scale = NAN};
  EXPECT(QF_ERR_VALUE, qf_attention(ctx, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &o2, &a.ot.t, &a.lt), "NaN sm_scale");
  bad = a.qt, bad.t.shape = bad.shape, bad.t.strides = bad.strides;
  bad.t.device.device_type = kDLCUDA;
  EXPECT(QF_ERR_DEVICE, qf_attention(ctx, &bad.t, &a.kt.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt), "q on CUDA");
#undef EXPECT
  CHECK(qf_attention(NULL, &a.qt.t, &a.kt.t, &a.vt.t, NULL, &opt, &a.ot.t, &a.lt) == QF_ERR_NULL, "ctx NULL");
}

/* qf_attention_paged: two sequences of 7 and 3 keys over shuffled pages of 2 keys give the bytes of
 * the dense call on each sequence's keys; lengths and pages out of range are refused, o untouched. */
static void check_paged(void) {
  enum { P = 2, NP = 7, MAXP = 4, H = 2, DD = 8, SQ2 = 2 };
  const int32_t lens[2] = {7, 3}, table[2][MAXP] = {{5, 0, 3, 6}, {2, 4, -1, 99}};
  uint16_t kc[NP * P * H * DD], vc[NP * P * H * DD], q[2 * SQ2 * H * DD], kd[7 * H * DD], vd[7 * H * DD];
  float o[2 * SQ2 * H * DD], want[SQ2 * H * DD];
  uint64_t seed = 11;
  for (size_t i = 0; i < sizeof kc / 2; i++) kc[i] = qf_bf16_from_f32(rng_normal(&seed)), vc[i] = qf_bf16_from_f32(rng_normal(&seed));
  for (size_t i = 0; i < sizeof q / 2; i++) q[i] = qf_bf16_from_f32(rng_normal(&seed));
  int64_t cs[4] = {NP, P, H, DD}, qs[4] = {2, SQ2, H, DD}, ts[2] = {2, MAXP}, ls[1] = {2};
  DLTensor kt = dl_tensor(kc, QF_BF16, 4, cs, kDLCPU), vt = dl_tensor(vc, QF_BF16, 4, cs, kDLCPU);
  DLTensor qt = dl_tensor(q, QF_BF16, 4, qs, kDLCPU), ot = dl_tensor(o, QF_F32, 4, qs, kDLCPU);
  DLTensor tt = dl_tensor((void *)table, QF_I32, 2, ts, kDLCPU), lt = dl_tensor((void *)lens, QF_I32, 1, ls, kDLCPU);
  const qf_attention_opts opt = {.causal = 1};
  CHECK(qf_attention_paged(ctx, &qt, &kt, &vt, &tt, &lt, NULL, &opt, &ot, NULL) == QF_OK, "paged: %s", qf_ctx_last_error(ctx));
  for (int b = 0; b < 2; b++) {
    for (int j = 0; j < lens[b]; j++) /* gather the sequence's keys */
      for (int e = 0; e < H * DD; e++) {
        const int src = (table[b][j / P] * P + j % P) * H * DD + e;
        kd[j * H * DD + e] = kc[src], vd[j * H * DD + e] = vc[src];
      }
    int64_t ds[4] = {1, lens[b], H, DD}, q1[4] = {1, SQ2, H, DD};
    DLTensor kdt = dl_tensor(kd, QF_BF16, 4, ds, kDLCPU), vdt = dl_tensor(vd, QF_BF16, 4, ds, kDLCPU);
    DLTensor q1t = dl_tensor(q + b * SQ2 * H * DD, QF_BF16, 4, q1, kDLCPU), wt = dl_tensor(want, QF_F32, 4, q1, kDLCPU);
    CHECK(qf_attention(ctx, &q1t, &kdt, &vdt, NULL, &opt, &wt, NULL) == QF_OK, "dense: %s", qf_ctx_last_error(ctx));
    CHECK(!memcmp(want, o + b * SQ2 * H * DD, sizeof want), "paged sequence %d differs from the dense call", b);
  }
  float before[sizeof o / sizeof o[0]];
  memcpy(before, o, sizeof o);
  const int32_t long_lens[2] = {9, 3}, bad_table[2][MAXP] = {{5, 0, 3, 7}, {2, 4, -1, 99}};
  DLTensor l2 = dl_tensor((void *)long_lens, QF_I32, 1, ls, kDLCPU), t2 = dl_tensor((void *)bad_table, QF_I32, 2, ts, kDLCPU);
  CHECK(qf_attention_paged(ctx, &qt, &kt, &vt, &tt, &l2, NULL, &opt, &ot, NULL) == QF_ERR_VALUE, "a length past the table");
  CHECK(qf_attention_paged(ctx, &qt, &kt, &vt, &t2, &lt, NULL, &opt, &ot, NULL) == QF_ERR_VALUE, "page 7 of 7: %s",
        qf_ctx_last_error(ctx));
  CHECK(qf_attention_paged(ctx, &qt, &kt, &vt, NULL, &lt, NULL, &opt, &ot, NULL) == QF_ERR_NULL, "no table");
  int64_t ts3[2] = {3, MAXP};
  DLTensor t3 = dl_tensor((void *)table, QF_I32, 2, ts3, kDLCPU);
  CHECK(qf_attention_paged(ctx, &qt, &kt, &vt, &t3, &lt, NULL, &opt, &ot, NULL) == QF_ERR_SHAPE, "table of 3 rows");
  DLTensor ft = dl_tensor((void *)lens, QF_F32, 1, ls, kDLCPU);
  CHECK(qf_attention_paged(ctx, &qt, &kt, &vt, &tt, &ft, NULL, &opt, &ot, NULL) == QF_ERR_DTYPE, "fp32 kv_lens");
  CHECK(!memcmp(before, o, sizeof o), "a refused paged call wrote o");
}

/* qf_attention_varlen: three packed sequences (3, 0 and 5 queries over 6, 2 and 5 keys; one token
 * past the last sequence) give, per sequence, the bytes of qf_attention on its own tokens;
 * qf_attention_paged_varlen on the pages of check_paged likewise; offsets out of range, a bad
 * offsets tensor and packed tensors of the wrong rank are refused with o and lse untouched. */
static void check_varlen(void) {
  enum { NS = 3, TQ = 9, TK = 13, HQ2 = 4, HKV2 = 2, DD = 8 };
  const int32_t cuq[NS + 1] = {0, 3, 3, 8}, cuk[NS + 1] = {0, 6, 8, 13};
  uint16_t q[TQ * HQ2 * DD], k[TK * HKV2 * DD], v[TK * HKV2 * DD];
  float o[TQ * HQ2 * DD], lse[HQ2 * TQ], want_o[5 * HQ2 * DD], want_lse[HQ2 * 5];
  uint64_t seed = 5;
  for (size_t i = 0; i < sizeof q / 2; i++) q[i] = qf_bf16_from_f32(rng_normal(&seed));
  for (size_t i = 0; i < sizeof k / 2; i++) k[i] = qf_bf16_from_f32(rng_normal(&seed)), v[i] = qf_bf16_from_f32(rng_normal(&seed));
  memset(o, POISON, sizeof o), memset(lse, POISON, sizeof lse);
  int64_t qs[3] = {TQ, HQ2, DD}, ks[3] = {TK, HKV2, DD}, cs[1] = {NS + 1}, ls[2] = {HQ2, TQ};
  DLTensor qt = dl_tensor(q, QF_BF16, 3, qs, kDLCPU), kt = dl_tensor(k, QF_BF16, 3, ks, kDLCPU);
  DLTensor vt = dl_tensor(v, QF_BF16, 3, ks, kDLCPU), ot = dl_tensor(o, QF_F32, 3, qs, kDLCPU);
  DLTensor lt = dl_tensor(lse, QF_F32, 2, ls, kDLCPU);
  DLTensor cqt = dl_tensor((void *)cuq, QF_I32, 1, cs, kDLCPU), ckt = dl_tensor((void *)cuk, QF_I32, 1, cs, kDLCPU);
  const qf_attention_opts opt = {.causal = 1, .window = 4};
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, &ckt, 5, 6, NULL, &opt, &ot, &lt) == QF_OK, "varlen: %s",
        qf_ctx_last_error(ctx));
  for (int b = 0; b < NS; b++) {
    const int sq = cuq[b + 1] - cuq[b], len = cuk[b + 1] - cuk[b];
    if (!sq) continue;
    int64_t q1[4] = {1, sq, HQ2, DD}, k1[4] = {1, len, HKV2, DD}, l1[3] = {1, HQ2, sq};
    DLTensor q1t = dl_tensor(q + cuq[b] * HQ2 * DD, QF_BF16, 4, q1, kDLCPU), o1t = dl_tensor(want_o, QF_F32, 4, q1, kDLCPU);
    DLTensor k1t = dl_tensor(k + cuk[b] * HKV2 * DD, QF_BF16, 4, k1, kDLCPU), v1t = dl_tensor(v + cuk[b] * HKV2 * DD, QF_BF16, 4, k1, kDLCPU);
    DLTensor l1t = dl_tensor(want_lse, QF_F32, 3, l1, kDLCPU);
    CHECK(qf_attention(ctx, &q1t, &k1t, &v1t, NULL, &opt, &o1t, &l1t) == QF_OK, "dense: %s", qf_ctx_last_error(ctx));
    CHECK(!memcmp(want_o, o + cuq[b] * HQ2 * DD, (size_t)sq * HQ2 * DD * 4), "varlen sequence %d: o differs from the dense call", b);
    int same = 1;
    for (int h = 0; h < HQ2; h++) same &= !memcmp(want_lse + h * sq, lse + h * TQ + cuq[b], (size_t)sq * 4);
    CHECK(same, "varlen sequence %d: lse differs from the dense call", b);
  }
  int touched = 0; /* token 8, past cu_seqlens_q[3] */
  for (size_t i = 8 * HQ2 * DD * 4; i < sizeof o; i++) touched += ((uint8_t *)o)[i] != POISON;
  for (int h = 0; h < HQ2; h++) touched += memcmp(&lse[h * TQ + 8], (uint8_t[4]){POISON, POISON, POISON, POISON}, 4) != 0;
  CHECK(touched == 0, "varlen: %d bytes past the last sequence written", touched);

  float o_before[sizeof o / 4], lse_before[sizeof lse / 4];
  memcpy(o_before, o, sizeof o), memcpy(lse_before, lse, sizeof lse);
  const int32_t down[NS + 1] = {0, 3, 2, 8}, past[NS + 1] = {0, 3, 3, 10}, big[NS + 1] = {0, 6, 8, 13};
  DLTensor dt_ = dl_tensor((void *)down, QF_I32, 1, cs, kDLCPU), pt = dl_tensor((void *)past, QF_I32, 1, cs, kDLCPU);
  DLTensor bt = dl_tensor((void *)big, QF_I32, 1, cs, kDLCPU);
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &dt_, &ckt, 5, 6, NULL, &opt, &ot, &lt) == QF_ERR_VALUE, "decreasing offsets");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &pt, &ckt, 5, 6, NULL, &opt, &ot, &lt) == QF_ERR_VALUE, "offsets past total_q");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, &bt, 5, 5, NULL, &opt, &ot, &lt) == QF_ERR_VALUE, "a step above max_seqlen_k");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, &ckt, 4, 6, NULL, &opt, &ot, &lt) == QF_ERR_VALUE, "a step above max_seqlen_q");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, &ckt, -1, 6, NULL, &opt, &ot, &lt) == QF_ERR_VALUE, "negative max_seqlen_q");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, NULL, 5, 6, NULL, &opt, &ot, &lt) == QF_ERR_NULL, "no cu_seqlens_k");
  int64_t cs2[1] = {NS};
  DLTensor short_k = dl_tensor((void *)cuk, QF_I32, 1, cs2, kDLCPU), f32_q = dl_tensor((void *)cuq, QF_F32, 1, cs, kDLCPU);
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, &short_k, 5, 6, NULL, &opt, &ot, &lt) == QF_ERR_SHAPE, "cu_seqlens_k of B");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &f32_q, &ckt, 5, 6, NULL, &opt, &ot, &lt) == QF_ERR_DTYPE, "fp32 offsets");
  int64_t q4[4] = {1, TQ, HQ2, DD}, l3[3] = {1, HQ2, TQ};
  DLTensor q4t = dl_tensor(q, QF_BF16, 4, q4, kDLCPU), l3t = dl_tensor(lse, QF_F32, 3, l3, kDLCPU);
  CHECK(qf_attention_varlen(ctx, &q4t, &kt, &vt, &cqt, &ckt, 5, 6, NULL, &opt, &ot, &lt) == QF_ERR_SHAPE, "q of 4 dims");
  CHECK(qf_attention_varlen(ctx, &qt, &kt, &vt, &cqt, &ckt, 5, 6, NULL, &opt, &ot, &l3t) == QF_ERR_SHAPE, "lse [1, Hq, total_q]");
  CHECK(!memcmp(o_before, o, sizeof o) && !memcmp(lse_before, lse, sizeof lse), "a refused varlen call wrote o or lse");

  /* Paged: sequences of 7 and 3 keys (check_paged's table) with 2 and 1 packed queries. */
  enum { P = 2, NP = 7, MAXP = 4, H = 2 };
  const int32_t lens[2] = {7, 3}, table[2][MAXP] = {{5, 0, 3, 6}, {2, 4, -1, 99}}, cup[3] = {0, 2, 3};
  uint16_t kc[NP * P * H * DD], vc[NP * P * H * DD], kd[7 * H * DD], vd[7 * H * DD];
  float po[3 * H * DD], pw[2 * H * DD];
  for (size_t i = 0; i < sizeof kc / 2; i++) kc[i] = qf_bf16_from_f32(rng_normal(&seed)), vc[i] = qf_bf16_from_f32(rng_normal(&seed));
  int64_t pcs[4] = {NP, P, H, DD}, pqs[3] = {3, H, DD}, pts[2] = {2, MAXP}, pls[1] = {2}, pcu[1] = {3};
  DLTensor kct = dl_tensor(kc, QF_BF16, 4, pcs, kDLCPU), vct = dl_tensor(vc, QF_BF16, 4, pcs, kDLCPU);
  DLTensor pqt = dl_tensor(q, QF_BF16, 3, pqs, kDLCPU), pot = dl_tensor(po, QF_F32, 3, pqs, kDLCPU);
  DLTensor tt = dl_tensor((void *)table, QF_I32, 2, pts, kDLCPU), lnt = dl_tensor((void *)lens, QF_I32, 1, pls, kDLCPU);
  DLTensor pcut = dl_tensor((void *)cup, QF_I32, 1, pcu, kDLCPU);
  const qf_attention_opts popt = {.causal = 1};
  CHECK(qf_attention_paged_varlen(ctx, &pqt, &kct, &vct, &tt, &lnt, &pcut, 2, NULL, &popt, &pot, NULL) == QF_OK,
        "paged varlen: %s", qf_ctx_last_error(ctx));
  for (int b = 0; b < 2; b++) {
    for (int j = 0; j < lens[b]; j++)
      for (int e = 0; e < H * DD; e++) {
        const int src = (table[b][j / P] * P + j % P) * H * DD + e;
        kd[j * H * DD + e] = kc[src], vd[j * H * DD + e] = vc[src];
      }
    const int sq = cup[b + 1] - cup[b];
    int64_t d1[4] = {1, lens[b], H, DD}, q1[4] = {1, sq, H, DD};
    DLTensor kdt = dl_tensor(kd, QF_BF16, 4, d1, kDLCPU), vdt = dl_tensor(vd, QF_BF16, 4, d1, kDLCPU);
    DLTensor q1t = dl_tensor(q + cup[b] * H * DD, QF_BF16, 4, q1, kDLCPU), wt = dl_tensor(pw, QF_F32, 4, q1, kDLCPU);
    CHECK(qf_attention(ctx, &q1t, &kdt, &vdt, NULL, &popt, &wt, NULL) == QF_OK, "dense: %s", qf_ctx_last_error(ctx));
    CHECK(!memcmp(pw, po + cup[b] * H * DD, (size_t)sq * H * DD * 4), "paged varlen sequence %d differs from the dense call", b);
  }
  CHECK(qf_attention_paged_varlen(ctx, &pqt, &kct, &vct, &tt, &lnt, &pcut, 1, NULL, &popt, &pot, NULL) == QF_ERR_VALUE,
        "paged varlen: a step above max_seqlen_q");
}

/* e4m3fn k and v with scales per kv head (powers of two, so that code x scale is a bf16 value): the
 * bytes of the call on those bf16 values; a scale of [1] for the tensor and no scales likewise;
 * the paged form over a cache of the same codes; scales with bf16 k and v, mixed dtypes and a
 * scale of the wrong length refused, o untouched. */
static void check_fp8(void) {
  enum { B2 = 2, SQ2 = 3, SKV2 = 8, HQ2 = 4, HKV2 = 2, DD = 16, P = 4 };
  const int n_kv = B2 * SKV2 * HKV2 * DD;
  uint8_t k8[B2 * SKV2 * HKV2 * DD], v8[B2 * SKV2 * HKV2 * DD];
  uint16_t q[B2 * SQ2 * HQ2 * DD], k[B2 * SKV2 * HKV2 * DD], v[B2 * SKV2 * HKV2 * DD];
  float o[B2 * SQ2 * HQ2 * DD], want[B2 * SQ2 * HQ2 * DD], lse[B2 * HQ2 * SQ2], want_lse[B2 * HQ2 * SQ2];
  const float per_head[2][HKV2] = {{0.5f, 4.0f}, {0.125f, 2.0f}}, whole[2][1] = {{0.25f}, {8.0f}}, ones[HKV2] = {1.0f, 1.0f};
  uint64_t seed = 13;
  for (size_t i = 0; i < sizeof q / 2; i++) q[i] = qf_bf16_from_f32(rng_normal(&seed));
  for (int i = 0; i < n_kv; i++) k8[i] = oracle_e4m3fn(rng_normal(&seed) * 4.0f), v8[i] = oracle_e4m3fn(rng_normal(&seed) * 4.0f);
  int64_t qs[4] = {B2, SQ2, HQ2, DD}, ks[4] = {B2, SKV2, HKV2, DD}, ls[3] = {B2, HQ2, SQ2}, hs[1] = {HKV2}, one[1] = {1};
  DLTensor qt = dl_tensor(q, QF_BF16, 4, qs, kDLCPU), k8t = dl_tensor(k8, QF_E4M3FN, 4, ks, kDLCPU);
  DLTensor v8t = dl_tensor(v8, QF_E4M3FN, 4, ks, kDLCPU), kt = dl_tensor(k, QF_BF16, 4, ks, kDLCPU);
  DLTensor vt = dl_tensor(v, QF_BF16, 4, ks, kDLCPU), ot = dl_tensor(o, QF_F32, 4, qs, kDLCPU);
  DLTensor wt = dl_tensor(want, QF_F32, 4, qs, kDLCPU), lt = dl_tensor(lse, QF_F32, 3, ls, kDLCPU);
  DLTensor wlt = dl_tensor(want_lse, QF_F32, 3, ls, kDLCPU);
  for (int form = 0; form < 3; form++) { /* scales per kv head, one for the tensor, none */
    const float *ksc = form == 0 ? per_head[0] : form == 1 ? whole[0] : ones, *vsc = form == 0 ? per_head[1] : form == 1 ? whole[1] : ones;
    DLTensor kst = dl_tensor((void *)ksc, QF_F32, 1, form == 1 ? one : hs, kDLCPU);
    DLTensor vst = dl_tensor((void *)vsc, QF_F32, 1, form == 1 ? one : hs, kDLCPU);
    for (int i = 0; i < n_kv; i++) {
      const int g = (i / DD) % HKV2, s = form == 1 ? 0 : g;
      k[i] = qf_bf16_from_f32((float)(oracle_e4m3fn_value(k8[i]) * ksc[s]));
      v[i] = qf_bf16_from_f32((float)(oracle_e4m3fn_value(v8[i]) * vsc[s]));
    }
    qf_attention_opts opt = {.causal = 1, .k_scale = form < 2 ? &kst : NULL, .v_scale = form < 2 ? &vst : NULL};
    CHECK(qf_attention(ctx, &qt, &k8t, &v8t, NULL, &opt, &ot, &lt) == QF_OK, "fp8 form %d: %s", form, qf_ctx_last_error(ctx));
    CHECK(qf_attention(ctx, &qt, &kt, &vt, NULL, &(qf_attention_opts){.causal = 1}, &wt, &wlt) == QF_OK, "bf16: %s",
          qf_ctx_last_error(ctx));
    CHECK(!memcmp(o, want, sizeof o) && !memcmp(lse, want_lse, sizeof lse), "fp8 form %d differs from bf16 on its values", form);
  }
  /* Paged: each sequence's keys in pages of P, the pages in reverse order; per-head scales. */
  uint8_t kc[B2 * SKV2 * HKV2 * DD], vc[B2 * SKV2 * HKV2 * DD];
  const int np = B2 * SKV2 / P;
  int32_t table[B2][SKV2 / P], lens[B2] = {SKV2, SKV2};
  for (int b = 0; b < B2; b++)
    for (int pg = 0; pg < SKV2 / P; pg++) {
      table[b][pg] = np - 1 - (b * SKV2 / P + pg);
      memcpy(kc + table[b][pg] * P * HKV2 * DD, k8 + (b * SKV2 + pg * P) * HKV2 * DD, P * HKV2 * DD);
      memcpy(vc + table[b][pg] * P * HKV2 * DD, v8 + (b * SKV2 + pg * P) * HKV2 * DD, P * HKV2 * DD);
    }
  int64_t cs[4] = {np, P, HKV2, DD}, ts[2] = {B2, SKV2 / P}, bs[1] = {B2};
  DLTensor kct = dl_tensor(kc, QF_E4M3FN, 4, cs, kDLCPU), vct = dl_tensor(vc, QF_E4M3FN, 4, cs, kDLCPU);
  DLTensor tt = dl_tensor(table, QF_I32, 2, ts, kDLCPU), lnt = dl_tensor(lens, QF_I32, 1, bs, kDLCPU);
  DLTensor kst = dl_tensor((void *)per_head[0], QF_F32, 1, hs, kDLCPU), vst = dl_tensor((void *)per_head[1], QF_F32, 1, hs, kDLCPU);
  qf_attention_opts opt = {.causal = 1, .k_scale = &kst, .v_scale = &vst};
  CHECK(qf_attention(ctx, &qt, &k8t, &v8t, NULL, &opt, &wt, &wlt) == QF_OK, "fp8 dense: %s", qf_ctx_last_error(ctx));
  CHECK(qf_attention_paged(ctx, &qt, &kct, &vct, &tt, &lnt, NULL, &opt, &ot, &lt) == QF_OK, "fp8 paged: %s", qf_ctx_last_error(ctx));
  CHECK(!memcmp(o, want, sizeof o) && !memcmp(lse, want_lse, sizeof lse), "fp8 paged differs from fp8 dense");

  float before[sizeof o / sizeof o[0]];
  memcpy(before, o, sizeof o);
  int64_t three[1] = {3};
  DLTensor k3 = dl_tensor((void *)per_head[0], QF_F32, 1, three, kDLCPU);
  CHECK(qf_attention(ctx, &qt, &kt, &vt, NULL, &opt, &ot, &lt) == QF_ERR_VALUE, "scales with bf16 k and v");
  CHECK(qf_attention(ctx, &qt, &k8t, &vt, NULL, &(qf_attention_opts){0}, &ot, &lt) == QF_ERR_DTYPE, "e4m3fn k with bf16 v");
  CHECK(qf_attention(ctx, &qt, &kt, &v8t, NULL, &(qf_attention_opts){0}, &ot, &lt) == QF_ERR_DTYPE, "bf16 k with e4m3fn v");
  CHECK(qf_attention(ctx, &qt, &k8t, &v8t, NULL, &(qf_attention_opts){.k_scale = &k3}, &ot, &lt) == QF_ERR_SHAPE, "k_scale of 3");
  DLTensor q8 = dl_tensor(k8, QF_E4M3FN, 4, qs, kDLCPU);
  CHECK(qf_attention(ctx, &q8, &k8t, &v8t, NULL, &(qf_attention_opts){0}, &ot, &lt) == QF_ERR_DTYPE, "e4m3fn q");
  CHECK(!memcmp(before, o, sizeof o), "a refused fp8 call wrote o");
}

/* qf_attention_cache_append: 5 tokens (one padding) into pages of 3 slots, [T, H, D] rows of bf16
 * with padded heads; a bf16 cache gets the rows' bytes, an e4m3fn one the oracle's codes of x *
 * (1 / scale) per kv head (Inf and NaN among the inputs), every other slot keeps its poison; a slot
 * past the cache, a slot named twice, scales with a bf16 cache and mismatched shapes are refused
 * with the caches untouched. */
static void check_cache_append(void) {
  enum { T = 5, H = 2, DD = 16, PAD = 8, NP = 3, P = 3 };
  uint16_t k[T * H * (DD + PAD)], v[T * H * (DD + PAD)], kc16[NP * P * H * DD], vc16[NP * P * H * DD];
  uint8_t kc8[NP * P * H * DD], vc8[NP * P * H * DD];
  const int32_t slots[T] = {7, -1, 0, 4, 8}, past[T] = {7, -1, 0, 4, 9}, twice[T] = {7, -1, 0, 7, 8};
  const float ksc[H] = {0.3f, 2.5f}, vsc[1] = {0.07f};
  uint64_t seed = 21;
  for (size_t i = 0; i < sizeof k / 2; i++) k[i] = qf_bf16_from_f32(rng_normal(&seed) * 50.0f), v[i] = qf_bf16_from_f32(rng_normal(&seed));
  k[3] = qf_bf16_from_f32(INFINITY), k[5] = qf_bf16_from_f32(NAN), v[2] = qf_bf16_from_f32(-1e4f);
  int64_t ns[3] = {T, H, DD}, nst[3] = {H * (DD + PAD), DD + PAD, 1}, cs[4] = {NP, P, H, DD}, ts[1] = {T}, hs[1] = {H}, one[1] = {1};
  DLTensor kt = dl_tensor(k, QF_BF16, 3, ns, kDLCPU), vt = dl_tensor(v, QF_BF16, 3, ns, kDLCPU);
  kt.strides = nst, vt.strides = nst;
  DLTensor k16 = dl_tensor(kc16, QF_BF16, 4, cs, kDLCPU), v16 = dl_tensor(vc16, QF_BF16, 4, cs, kDLCPU);
  DLTensor k8 = dl_tensor(kc8, QF_E4M3FN, 4, cs, kDLCPU), v8 = dl_tensor(vc8, QF_E4M3FN, 4, cs, kDLCPU);
  DLTensor st = dl_tensor((void *)slots, QF_I32, 1, ts, kDLCPU), kst = dl_tensor((void *)ksc, QF_F32, 1, hs, kDLCPU);
  DLTensor vst = dl_tensor((void *)vsc, QF_F32, 1, one, kDLCPU);
  memset(kc16, POISON, sizeof kc16), memset(vc16, POISON, sizeof vc16), memset(kc8, POISON, sizeof kc8), memset(vc8, POISON, sizeof vc8);
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &st, NULL, NULL, &k16, &v16) == QF_OK, "append bf16: %s", qf_ctx_last_error(ctx));
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &st, &kst, &vst, &k8, &v8) == QF_OK, "append e4m3fn: %s", qf_ctx_last_error(ctx));
  int bad = 0;
  for (int s = 0; s < NP * P; s++) {
    int t = -1;
    for (int i = 0; i < T; i++) t = slots[i] == s ? i : t;
    for (int g = 0; g < H; g++)
      for (int d = 0; d < DD; d++) {
        const int c = (s * H + g) * DD + d, x = t * H * (DD + PAD) + g * (DD + PAD) + d;
        if (t < 0) {
          bad += kc16[c] != (POISON | POISON << 8) || vc16[c] != (POISON | POISON << 8) || kc8[c] != POISON || vc8[c] != POISON;
          continue;
        }
        bad += kc16[c] != k[x] || vc16[c] != v[x];
        bad += kc8[c] != oracle_e4m3fn(qf_bf16_to_f32(k[x]) * (1.0f / ksc[g]));
        bad += vc8[c] != oracle_e4m3fn(qf_bf16_to_f32(v[x]) * (1.0f / vsc[0]));
      }
  }
  CHECK(bad == 0, "cache append: %d elements not as expected", bad);
  CHECK(kc8[(7 * H) * DD + 3] == 0x7E && (kc8[(7 * H) * DD + 5] & 0x7F) == 0x7F, "Inf saturates to 448, NaN stays NaN");

  uint8_t before[sizeof kc8];
  memcpy(before, kc8, sizeof kc8);
  DLTensor pt = dl_tensor((void *)past, QF_I32, 1, ts, kDLCPU), tw = dl_tensor((void *)twice, QF_I32, 1, ts, kDLCPU);
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &pt, &kst, &vst, &k8, &v8) == QF_ERR_VALUE, "a slot past the cache");
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &tw, &kst, &vst, &k8, &v8) == QF_ERR_VALUE, "a slot named twice");
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &st, &kst, NULL, &k16, &v16) == QF_ERR_VALUE, "scales with a bf16 cache");
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &st, NULL, NULL, &k8, &v16) == QF_ERR_DTYPE, "caches of two dtypes");
  int64_t cs2[4] = {NP, P, H, DD / 2};
  DLTensor k8s = dl_tensor(kc8, QF_E4M3FN, 4, cs2, kDLCPU);
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, &st, NULL, NULL, &k8s, &v8) == QF_ERR_SHAPE, "k_cache head dim");
  CHECK(qf_attention_cache_append(ctx, &kt, &vt, NULL, NULL, NULL, &k8, &v8) == QF_ERR_NULL, "no slots");
  CHECK(!memcmp(before, kc8, sizeof kc8), "a refused append wrote the cache");
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  check_by_hand();
  const qf_attention_opts masks[] = {{0}, {.causal = 1}, {.window = 3}, {.causal = 1, .window = 4}, {.sm_scale = 0.3f, .causal = 1}};
  for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++)
    for (int sinks = 0; sinks < 2; sinks++) {
      check_case(QF_BF16, QF_F32, masks[m], sinks);
      check_case(QF_F16, QF_F16, masks[m], sinks);
    }
  check_case(QF_BF16, QF_BF16, masks[1], 1);
  check_errors();
  check_paged();
  check_varlen();
  check_fp8();
  check_cache_append();
  qf_ctx_destroy(ctx);
  return check_finish("test_attention");
}
