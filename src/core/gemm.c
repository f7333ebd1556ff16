/* Front end of the GEMM family: validate, then dispatch. */
#include <inttypes.h>

#include "core/backend.h"

/* An 8-bit operand [rows, K] with K contiguous and a row pitch TMA can use. */
static qf_status check_operand(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype_set accept,
                               qf_mat *m) {
  qf_status st = qf_check_mat(ctx, op, name, t, accept, 16, m);
  if (st) return st;
  if (t->ndim != 2) return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 2", op, name, (int)t->ndim);
  if (m->rows > 1 && m->ld % 16)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[0]=%" PRId64 " is not a multiple of 16 elements (TMA needs 16-byte row pitches)",
                   op, name, m->ld);
  return QF_OK;
}

static qf_status check_out(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype_set accept,
                           int64_t M, int64_t N, qf_mat *m) {
  qf_status st = qf_check_mat(ctx, op, name, t, accept, 16, m);
  if (st) return st;
  int64_t want[2] = {M, N};
  return qf_check_shape(ctx, op, name, t, 2, want);
}

/* A [M, K] and B [N, K] of one 8-bit dtype from `accept` (B must match A), N and K positive
 * multiples of 16. */
static qf_status check_ab(qf_ctx *ctx, const char *op, const DLTensor *a, const DLTensor *b, qf_dtype_set accept,
                          qf_mat *am, qf_mat *bm) {
  qf_status st;
  if ((st = check_operand(ctx, op, "a", a, accept, am)) || (st = check_operand(ctx, op, "b", b, QF_DT(am->dtype), bm)))
    return st;
  if (bm->cols != am->cols)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b.shape[1]=%" PRId64 " differs from a.shape[1]=%" PRId64 " (K)", op, bm->cols, am->cols);
  if (am->cols % 16 || bm->rows % 16 || am->cols == 0)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 " and K=%" PRId64 " must be positive multiples of 16", op, bm->rows,
                   am->cols);
  return QF_OK;
}

/* As of A [M, K]: column-major [KB, Mp] (M padded to a multiple of 4) or row-major [M, KB]. */
static qf_status check_a_scales(qf_ctx *ctx, const char *op, const DLTensor *a_scales, int row_major,
                                qf_gemm_blockscale_args *g) {
  const int64_t KB = (g->K + 127) / 128, Mp = (g->M + 3) / 4 * 4;
  qf_mat s;
  qf_status st;
  if ((st = qf_check_mat(ctx, op, "a_scales", a_scales, QF_DT(QF_F32), 16, &s))) return st;
  int64_t want[2] = {row_major ? g->M : KB, row_major ? KB : g->M};
  if ((st = qf_check_shape(ctx, op, "a_scales", a_scales, 2, want))) return st;
  if (row_major) {
    g->as_m = s.ld, g->as_k = 1;
  } else {
    if (s.rows > 1 && s.ld != Mp)
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: a_scales.strides[0]=%" PRId64 " but the column-major layout needs %" PRId64
                     " (M rounded up to a multiple of 4)", op, s.ld, Mp);
    g->as_m = 1, g->as_k = Mp;
  }
  g->a_scales = s.data;
  return QF_OK;
}

qf_status qf_gemm_fp8_blockscale(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                 const DLTensor *b_scales, DLTensor *d, const qf_gemm_blockscale_opts *opts) {
  static const char op[] = "qf_gemm_fp8_blockscale";
  if (!ctx) return QF_ERR_NULL;
  static const qf_gemm_blockscale_opts defaults;
  const qf_gemm_blockscale_opts *o = opts ? opts : &defaults;
  qf_gemm_blockscale_args g = {0};
  qf_status st;
  if ((st = check_ab(ctx, op, a, b, QF_DT(QF_E4M3FN), &g.a, &g.b))) return st;
  g.M = g.a.rows, g.K = g.a.cols, g.N = g.b.rows, g.experts = 1;
  const int64_t KB = (g.K + 127) / 128, NB = (g.N + 127) / 128;
  if ((st = check_a_scales(ctx, op, a_scales, o->a_scales_row_major, &g))) return st;

  qf_mat bs;
  int64_t want_b[2] = {NB, KB};
  if ((st = qf_check_mat(ctx, op, "b_scales", b_scales, QF_DT(QF_F32), 16, &bs)) ||
      (st = qf_check_shape(ctx, op, "b_scales", b_scales, 2, want_b)))
    return st;
  if (bs.rows > 1 && bs.ld != KB)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: b_scales.strides[0]=%" PRId64 "; expected %" PRId64 " (contiguous)", op, bs.ld, KB);
  g.b_scales = bs.data;

  if ((st = check_out(ctx, op, "d", d, QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32), g.M, g.N, &g.d))) return st;
  if (o->c && (st = check_out(ctx, op, "c", o->c, QF_DT(QF_F32), g.M, g.N, &g.c))) return st;
  if (g.M == 0 || g.N == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_fp8_blockscale(ctx, &g);
#endif
  return qf_cpu_gemm_fp8_blockscale(ctx, &g);
}

qf_status qf_gemm_fp8_blockscale_grouped(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                         const DLTensor *b_scales, const DLTensor *expert_ids, DLTensor *d,
                                         const qf_gemm_grouped_opts *opts) {
  static const char op[] = "qf_gemm_fp8_blockscale_grouped";
  if (!ctx) return QF_ERR_NULL;
  static const qf_gemm_grouped_opts defaults;
  const qf_gemm_grouped_opts *o = opts ? opts : &defaults;
  if (o->epilogue != QF_GROUPED_NONE && o->epilogue != QF_GROUPED_SWIGLU)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: opts->epilogue=%d is not a qf_grouped_epilogue", op, (int)o->epilogue);
  qf_gemm_blockscale_args g = {0};
  qf_status st;

  /* b [E, N, K] with the experts stacked: checked as the matrix [E * N, K] of its rows. */
  if (!b) return qf_fail(ctx, QF_ERR_NULL, "%s: b is NULL", op);
  if (b->ndim != 3 || !b->shape)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b has ndim=%d; expected 3 ([experts, N, K])", op, (int)b->ndim);
  const int64_t E = b->shape[0], N = b->shape[1];
  if (E < 1 || N < 0)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b has shape [%" PRId64 ", %" PRId64 ", %" PRId64 "]; expected at least one expert",
                   op, E, N, b->shape[2]);
  if (N % 16)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 " (b.shape[1]) must be a multiple of 16", op, N);
  if (a && a->ndim == 2 && a->shape && a->shape[1] != b->shape[2])
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b.shape[2]=%" PRId64 " differs from a.shape[1]=%" PRId64 " (K)", op, b->shape[2],
                   a->shape[1]);
  int64_t rows_shape[2] = {E * N, b->shape[2]}, rows_strides[2] = {b->shape[2], 1};
  if (b->strides) {
    rows_strides[0] = b->strides[1], rows_strides[1] = b->strides[2];
    if (E > 1 && b->strides[0] != N * b->strides[1])
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: b.strides[0]=%" PRId64 "; the experts must be stacked (N * strides[1] = %" PRId64 ")",
                     op, b->strides[0], N * b->strides[1]);
  }
  DLTensor rows = *b;
  rows.ndim = 2;
  rows.shape = rows_shape;
  rows.strides = rows_strides;
  if ((st = check_ab(ctx, op, a, &rows, QF_DT(QF_E4M3FN), &g.a, &g.b))) return st;
  g.M = g.a.rows, g.K = g.a.cols, g.N = N, g.experts = E;
  g.swiglu = o->epilogue == QF_GROUPED_SWIGLU;
  const int64_t KB = (g.K + 127) / 128, NB = (g.N + 127) / 128, MB = (g.M + 127) / 128;
  if ((st = check_a_scales(ctx, op, a_scales, o->a_scales_row_major, &g))) return st;

  int64_t want_bs[3] = {E, NB, KB};
  if ((st = qf_check_dense(ctx, op, "b_scales", b_scales, QF_F32, 3, want_bs, 16, (void **)&g.b_scales))) return st;

  /* expert_ids [MB] with any stride: checked as a column [MB, 1] whose row pitch is the stride. */
  if (!expert_ids) return qf_fail(ctx, QF_ERR_NULL, "%s: expert_ids is NULL", op);
  int64_t want_ids[1] = {MB};
  if ((st = qf_check_shape(ctx, op, "expert_ids", expert_ids, 1, want_ids))) return st;
  const int64_t ids_stride = expert_ids->strides ? expert_ids->strides[0] : 1;
  if (MB > 1 && ids_stride < 1)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: expert_ids.strides[0]=%" PRId64 "; expected a positive stride", op, ids_stride);
  int64_t col_shape[2] = {MB, 1}, col_strides[2] = {MB > 1 ? ids_stride : 1, 1};
  DLTensor col = *expert_ids;
  col.ndim = 2;
  col.shape = col_shape;
  col.strides = col_strides;
  qf_mat ids;
  if ((st = qf_check_mat(ctx, op, "expert_ids", &col, QF_DT(QF_I32), 4, &ids))) return st;
  g.expert_ids = ids.data;
  g.ids_stride = ids.ld;

  if ((st = check_out(ctx, op, "d", d, QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32), g.M, g.swiglu ? g.N / 2 : g.N, &g.d)))
    return st;
  if (g.M == 0 || g.N == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_fp8_blockscale(ctx, &g);
#endif
  return qf_cpu_gemm_fp8_blockscale(ctx, &g);
}

/* A scale of one value (per tensor) or n values (per token / per channel). */
static qf_status check_scale(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, int64_t n,
                             const float **data, int *per_row) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  int64_t count = 1;
  for (int d = 0; d < t->ndim && t->shape; d++) count *= t->shape[d];
  if (count != 1 && count != n)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has %" PRId64 " elements; expected 1 or %" PRId64, op, name, count, n);
  *per_row = count != 1;
  return qf_check_vec(ctx, op, name, t, QF_F32, count, (void **)data);
}

qf_status qf_gemm_scaled(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scale, const DLTensor *b,
                         const DLTensor *b_scale, DLTensor *d, const qf_gemm_scaled_opts *opts) {
  static const char op[] = "qf_gemm_scaled";
  if (!ctx) return QF_ERR_NULL;
  static const qf_gemm_scaled_opts defaults;
  const qf_gemm_scaled_opts *o = opts ? opts : &defaults;
  qf_gemm_scaled_args g = {0};
  qf_status st;
  if ((st = check_ab(ctx, op, a, b, QF_DT(QF_E4M3FN) | QF_DT(QF_I8), &g.a, &g.b))) return st;
  g.M = g.a.rows, g.K = g.a.cols, g.N = g.b.rows;
  if ((st = check_scale(ctx, op, "a_scale", a_scale, g.M, &g.a_scale, &g.a_per_token)) ||
      (st = check_scale(ctx, op, "b_scale", b_scale, g.N, &g.b_scale, &g.b_per_channel)) ||
      (st = check_out(ctx, op, "d", d, QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32), g.M, g.N, &g.d)))
    return st;
  if (o->bias && (st = qf_check_vec(ctx, op, "bias", o->bias, g.d.dtype, g.N, (void **)&g.bias))) return st;
  if ((o->azp_adj || o->azp) && g.a.dtype != QF_I8)
    return qf_fail(ctx, QF_ERR_DTYPE, "%s: zero points need int8 operands, a is %s", op, qf_dtype_name(g.a.dtype));
  if (o->azp && !o->azp_adj)
    return qf_fail(ctx, QF_ERR_NULL, "%s: azp (per-token zero points) needs azp_adj (column sums of b)", op);
  if (o->azp_adj && (st = qf_check_vec(ctx, op, "azp_adj", o->azp_adj, QF_I32, g.N, (void **)&g.azp_adj))) return st;
  if (o->azp && (st = qf_check_vec(ctx, op, "azp", o->azp, QF_I32, g.M, (void **)&g.azp))) return st;
  if (g.M == 0 || g.N == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_scaled(ctx, &g);
#endif
  return qf_cpu_gemm_scaled(ctx, &g);
}

qf_status qf_gemm_azp_adj(qf_ctx *ctx, const DLTensor *b, int32_t multiplier, DLTensor *adj) {
  static const char op[] = "qf_gemm_azp_adj";
  if (!ctx) return QF_ERR_NULL;
  qf_mat bm;
  int32_t *out;
  qf_status st;
  if ((st = qf_check_mat(ctx, op, "b", b, QF_DT(QF_I8), 1, &bm))) return st;
  if (b->ndim != 2) return qf_fail(ctx, QF_ERR_SHAPE, "%s: b has ndim=%d; expected 2", op, (int)b->ndim);
  if ((st = qf_check_vec(ctx, op, "adj", adj, QF_I32, bm.rows, (void **)&out))) return st;
  if (bm.rows == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_azp_adj(ctx, &bm, multiplier, out);
#endif
  return qf_cpu_gemm_azp_adj(ctx, &bm, multiplier, out);
}
