/* Malformed DLTensors never crash an op: for every tensor argument of every op, replace it with
 * each malformed form (NULL tensor, NULL shape, ndim -1, 0 or 9, a NULL data pointer, an
 * unknown dtype, lanes 4, negative extents) and check that the call fails with a message naming
 * the op and leaves every output untouched. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

enum { M = 4, K = 128, N = 16, ARGS = 7 };
static _Alignas(16) uint8_t pool[ARGS][M * K * 4 + 64];

typedef struct {
  DLTensor t[ARGS];
  int64_t shape[ARGS][4], strides[ARGS][4];
  int n;
} args;

static void arg(args *a, qf_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int i = a->n++;
  int64_t dims[4] = {d0, d1, d2, d3};
  memcpy(a->shape[i], dims, sizeof dims);
  DLTensor t = {.data = pool[i], .device = {kDLCPU, 0}, .ndim = ndim, .dtype = qf_dtype_to_dl(dt), .shape = a->shape[i]};
  a->t[i] = t;
}

typedef enum { OP_GROUP, OP_TOKEN, OP_RMS, OP_GEMM_BS, OP_GEMM_SCALED, OP_VQ_DEQ, OP_QUANT_FP4, OP_GEMM_FP4, OP_COUNT } op_id;
static const char *names[] = {"qf_quant_group", "qf_quant_token", "qf_rms_norm_quant", "qf_gemm_fp8_blockscale",
                              "qf_gemm_scaled", "qf_vq_dequantize", "qf_quant_nvfp4", "qf_gemm_nvfp4"};

static const qf_vq_format vq_fmt = {4, 8, 1, 0, 0, QF_F16, 0, 0};

/* Valid arguments of each op; the outputs are the args listed in outs. */
static void valid(op_id op, args *a, int *outs, int *n_outs) {
  memset(a, 0, sizeof *a);
  *n_outs = 0;
  switch (op) {
    case OP_GROUP:
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 2, M, 1, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 2;
      break;
    case OP_TOKEN:
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_I8, 2, M, K, 0, 0), arg(a, QF_F32, 1, M, 0, 0, 0), arg(a, QF_I32, 1, M, 0, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 2, outs[(*n_outs)++] = 3;
      break;
    case OP_RMS:
      arg(a, QF_BF16, 2, M, K, 0, 0), arg(a, QF_BF16, 2, M, K, 0, 0), arg(a, QF_BF16, 1, K, 0, 0, 0);
      arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 1, M, 0, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 3, outs[(*n_outs)++] = 4;
      break;
    case OP_GEMM_BS:
      arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 2, 1, M, 0, 0), arg(a, QF_E4M3FN, 2, N, K, 0, 0);
      arg(a, QF_F32, 2, 1, 1, 0, 0), arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 4;
      break;
    case OP_GEMM_SCALED:
      arg(a, QF_I8, 2, M, K, 0, 0), arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_I8, 2, N, K, 0, 0), arg(a, QF_F32, 1, N, 0, 0, 0);
      arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 4;
      break;
    case OP_QUANT_FP4: /* w [M, K], tensor scale [1], codes [M, K] e2m1x2, scales [M, K / 16] */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_E2M1X2, 2, M, K, 0, 0);
      arg(a, QF_E4M3FN, 2, M, K / 16, 0, 0);
      outs[(*n_outs)++] = 2, outs[(*n_outs)++] = 3;
      break;
    case OP_GEMM_FP4: /* a [M, K] bf16, b [N, K] packed, b_scales [N, K / 16], tensor scale [1], d [M, N] */
      arg(a, QF_BF16, 2, M, K, 0, 0), arg(a, QF_E2M1X2, 2, N, K, 0, 0), arg(a, QF_E4M3FN, 2, N, K / 16, 0, 0);
      arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 4;
      break;
    default: /* VQ: codes [1, M, 48], codebooks [1, 1, 256, 4], w [M, K] */
      arg(a, QF_U8, 3, 1, M, 48, 0), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_F32, 2, M, K, 0, 0);
      outs[(*n_outs)++] = 2;
      break;
  }
}

static qf_status call(op_id op, args *a, DLTensor **p) {
  switch (op) {
    case OP_GROUP: {
      qf_group_quant_opts o = {.group_size = 128};
      return qf_quant_group(ctx, p[0], p[1], p[2], &o);
    }
    case OP_TOKEN: return qf_quant_token(ctx, p[0], p[1], p[2], p[3], NULL);
    case OP_RMS: {
      qf_rms_norm_quant_opts o = {.group_size = -1};
      return qf_rms_norm_quant(ctx, p[0], p[1], p[2], p[3], p[4], &o);
    }
    case OP_GEMM_BS: return qf_gemm_fp8_blockscale(ctx, p[0], p[1], p[2], p[3], p[4], NULL);
    case OP_GEMM_SCALED: return qf_gemm_scaled(ctx, p[0], p[1], p[2], p[3], p[4], NULL);
    case OP_QUANT_FP4: return qf_quant_nvfp4(ctx, p[0], p[1], p[2], p[3]);
    case OP_GEMM_FP4: return qf_gemm_nvfp4(ctx, p[0], p[1], p[2], p[3], p[4]);
    default: (void)a; return qf_vq_dequantize(ctx, p[0], p[1], NULL, &vq_fmt, p[2]);
  }
}

enum { BAD_NULL, BAD_SHAPE_NULL, BAD_NDIM_NEG, BAD_NDIM_0, BAD_NDIM_9, BAD_DATA_NULL, BAD_DTYPE, BAD_LANES, BAD_NEG, BAD_COUNT };

static void poison(void) { memset(pool, 0xA5, sizeof pool); }
static int clean(int i) {
  for (size_t j = 0; j < sizeof pool[i]; j++)
    if (pool[i][j] != 0xA5) return 0;
  return 1;
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  for (op_id op = 0; op < OP_COUNT; op++) {
    args a;
    int outs[ARGS], n_outs;
    valid(op, &a, outs, &n_outs);
    DLTensor *p[ARGS];
    for (int i = 0; i < a.n; i++) p[i] = &a.t[i];
    poison();
    CHECK(call(op, &a, p) == QF_OK, "%s: the valid call fails: %s", names[op], qf_ctx_last_error(ctx));
    for (int i = 0; i < a.n; i++)
      for (int bad = 0; bad < BAD_COUNT; bad++) {
        valid(op, &a, outs, &n_outs);
        for (int j = 0; j < a.n; j++) p[j] = &a.t[j];
        DLTensor *t = &a.t[i];
        switch (bad) {
          case BAD_NULL: p[i] = NULL; break;
          case BAD_SHAPE_NULL: t->shape = NULL; break;
          case BAD_NDIM_NEG: t->ndim = -1; break;
          case BAD_NDIM_0: t->ndim = 0; break;
          case BAD_NDIM_9: t->ndim = 9; break;
          case BAD_DATA_NULL: t->data = NULL; break;
          case BAD_DTYPE: t->dtype.code = 99; break;
          case BAD_LANES: t->dtype.lanes = 4; break;
          default: a.shape[i][0] = -3; break;
        }
        /* residual (OP_RMS arg 1) and azp (OP_TOKEN arg 3) may be absent: NULL is valid there */
        const int optional = (op == OP_RMS && i == 1) || (op == OP_TOKEN && i == 3);
        poison();
        qf_status st = call(op, &a, p);
        if (optional && bad == BAD_NULL) {
          CHECK(st == QF_OK, "%s: absent optional argument %d refused: %s", names[op], i, qf_ctx_last_error(ctx));
          continue;
        }
        /* a 0-d or shapeless scalar scale can be valid (per-tensor) */
        if (st == QF_OK && ((op == OP_GEMM_SCALED && i == 1) && (bad == BAD_NDIM_0 || bad == BAD_SHAPE_NULL))) continue;
        CHECK(st != QF_OK, "%s: argument %d, malformed form %d accepted", names[op], i, bad);
        CHECK(strstr(qf_ctx_last_error(ctx), names[op]) != NULL, "%s: argument %d, form %d: message '%s'", names[op], i, bad,
              qf_ctx_last_error(ctx));
        int untouched = 1;
        for (int o = 0; o < n_outs; o++) untouched &= clean(outs[o]);
        CHECK(untouched, "%s: argument %d, form %d: an output was written", names[op], i, bad);
      }
  }
  qf_ctx_destroy(ctx);
  return check_finish("test_robust");
}
