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
  return qf_check_mat_2d(ctx, op, name, t, accept, 16, M, N, 1, m);
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

/* The blockwise GEMM, plain or grouped, on the context's backend. */
static qf_status run_blockscale(qf_ctx *ctx, const qf_gemm_blockscale_args *g) {
  if (g->M == 0 || g->N == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_fp8_blockscale(ctx, g);
#endif
  return qf_cpu_gemm_fp8_blockscale(ctx, g);
}

/* The checked arguments of qf_gemm_fp8_blockscale and qf_gemm_fp8_blockscale_with in *g. */
static qf_status blockscale_args(qf_ctx *ctx, const char *op, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                 const DLTensor *b_scales, DLTensor *d, const qf_gemm_blockscale_opts *opts,
                                 qf_gemm_blockscale_args *g) {
  static const qf_gemm_blockscale_opts defaults;
  const qf_gemm_blockscale_opts *o = opts ? opts : &defaults;
  qf_status st;
  if ((st = check_ab(ctx, op, a, b, QF_DT(QF_E4M3FN), &g->a, &g->b))) return st;
  g->M = g->a.rows, g->K = g->a.cols, g->N = g->b.rows, g->experts = 1;
  const int64_t KB = (g->K + 127) / 128, NB = (g->N + 127) / 128;
  if ((st = check_a_scales(ctx, op, a_scales, o->a_scales_row_major, g))) return st;

  qf_mat bs;
  int64_t want_b[2] = {NB, KB};
  if ((st = qf_check_mat(ctx, op, "b_scales", b_scales, QF_DT(QF_F32), 16, &bs)) ||
      (st = qf_check_shape(ctx, op, "b_scales", b_scales, 2, want_b)))
    return st;
  if (bs.rows > 1 && bs.ld != KB)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: b_scales.strides[0]=%" PRId64 "; expected %" PRId64 " (contiguous)", op, bs.ld, KB);
  g->b_scales = bs.data;

  if ((st = check_out(ctx, op, "d", d, QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32), g->M, g->N, &g->d))) return st;
  if (o->c && (st = check_out(ctx, op, "c", o->c, QF_DT(QF_F32), g->M, g->N, &g->c))) return st;
  if (o->fine_promotion != 0 && o->fine_promotion != 1 && o->fine_promotion != 32 && o->fine_promotion != 64)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: opts->fine_promotion=%d; expected 0, 32 (or 1) or 64", op, o->fine_promotion);
  if (o->fine_promotion && g->d.dtype != QF_F32)
    return qf_fail(ctx, QF_ERR_DTYPE, "%s: opts->fine_promotion needs fp32 d; d has dtype %s", op, qf_dtype_name(g->d.dtype));
  g->fine_promotion = o->fine_promotion == 1 ? 32 : o->fine_promotion;
  return QF_OK;
}

qf_status qf_gemm_fp8_blockscale(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                 const DLTensor *b_scales, DLTensor *d, const qf_gemm_blockscale_opts *opts) {
  if (!ctx) return QF_ERR_NULL;
  qf_gemm_blockscale_args g = {0};
  const qf_status st = blockscale_args(ctx, "qf_gemm_fp8_blockscale", a, a_scales, b, b_scales, d, opts, &g);
  return st ? st : run_blockscale(ctx, &g);
}

qf_status qf_gemm_fp8_blockscale_with(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                      const DLTensor *b_scales, DLTensor *d, const qf_gemm_blockscale_opts *opts,
                                      int block_m, int block_n, int splits) {
  static const char op[] = "qf_gemm_fp8_blockscale_with";
  if (!ctx) return QF_ERR_NULL;
  qf_gemm_blockscale_args g = {0};
  const qf_status st = blockscale_args(ctx, op, a, a_scales, b, b_scales, d, opts, &g);
  if (st) return st;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_fp8_blockscale_with(ctx, &g, block_m, block_n, splits);
#else
  (void)block_m, (void)block_n, (void)splits;
#endif
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the sm_90 engine's plans are CUDA's; this context is not", op);
}

/* A [groups, rows, cols] tensor with its groups stacked (strides[0] = rows * strides[1]) as the
 * 2-D view [groups * rows, cols] of its rows, in *view over shape and strides. */
static qf_status stacked_view(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, const char *dims,
                              DLTensor *view, int64_t shape[2], int64_t strides[2]) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  if (t->ndim != 3 || !t->shape)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 3 (%s)", op, name, (int)t->ndim, dims);
  if (t->shape[0] < 1 || t->shape[1] < 0 || t->shape[2] < 0)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 "]; expected [%s], at least one expert",
                   op, name, t->shape[0], t->shape[1], t->shape[2], dims);
  if (__builtin_mul_overflow(t->shape[0], t->shape[1], &shape[0]))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has %" PRId64 " x %" PRId64 " rows, more than 64-bit offsets allow", op, name,
                   t->shape[0], t->shape[1]);
  shape[1] = t->shape[2];
  strides[0] = t->shape[2], strides[1] = 1;
  if (t->strides) {
    strides[0] = t->strides[1], strides[1] = t->strides[2];
    int64_t stacked = 0;
    if (t->shape[0] > 1 && (__builtin_mul_overflow(t->shape[1], t->strides[1], &stacked) || t->strides[0] != stacked))
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[0]=%" PRId64 "; the experts must be stacked (shape[1] * strides[1])",
                     op, name, t->strides[0]);
  }
  *view = *t;
  view->ndim = 2;
  view->shape = shape;
  view->strides = strides;
  return QF_OK;
}

/* What both grouped forms check: the epilogue, A's rows [M, K] (a_rows), b [E, N, K] and the
 * scales; fills g but for the expert map and d. */
static qf_status grouped_operands(qf_ctx *ctx, const char *op, const DLTensor *a_rows, const DLTensor *a_scales,
                                  const DLTensor *b, const DLTensor *b_scales, const qf_gemm_grouped_opts *o,
                                  qf_gemm_blockscale_args *g) {
  if (o->epilogue != QF_GROUPED_NONE && o->epilogue != QF_GROUPED_SWIGLU)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: opts->epilogue=%d is not a qf_grouped_epilogue", op, (int)o->epilogue);
  DLTensor b_rows;
  int64_t shape[2], strides[2];
  qf_status st;
  if ((st = stacked_view(ctx, op, "b", b, "experts, N, K", &b_rows, shape, strides))) return st;
  const int64_t E = b->shape[0], N = b->shape[1];
  if (N % 16) return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 " (b.shape[1]) must be a multiple of 16", op, N);
  if (a_rows && a_rows->ndim == 2 && a_rows->shape && a_rows->shape[1] != b->shape[2])
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b.shape[2]=%" PRId64 " differs from a's K=%" PRId64, op, b->shape[2], a_rows->shape[1]);
  if ((st = check_ab(ctx, op, a_rows, &b_rows, QF_DT(QF_E4M3FN), &g->a, &g->b))) return st;
  g->M = g->a.rows, g->K = g->a.cols, g->N = N, g->experts = E;
  g->swiglu = o->epilogue == QF_GROUPED_SWIGLU;
  if ((st = check_a_scales(ctx, op, a_scales, o->a_scales_row_major, g))) return st;
  int64_t want_bs[3] = {E, (N + 127) / 128, (g->K + 127) / 128};
  return qf_check_dense(ctx, op, "b_scales", b_scales, QF_F32, 3, want_bs, 16, (void **)&g->b_scales);
}

qf_status qf_gemm_fp8_blockscale_grouped(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                         const DLTensor *b_scales, const DLTensor *expert_ids, DLTensor *d,
                                         const qf_gemm_grouped_opts *opts) {
  static const char op[] = "qf_gemm_fp8_blockscale_grouped";
  if (!ctx) return QF_ERR_NULL;
  static const qf_gemm_grouped_opts defaults;
  qf_gemm_blockscale_args g = {0};
  qf_status st;
  if ((st = grouped_operands(ctx, op, a, a_scales, b, b_scales, opts ? opts : &defaults, &g))) return st;

  /* expert_ids [MB] with any stride: checked as a column [MB, 1] whose row pitch is the stride. */
  const int64_t MB = (g.M + 127) / 128;
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
  return run_blockscale(ctx, &g);
}

qf_status qf_gemm_fp8_blockscale_masked(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                        const DLTensor *b_scales, const DLTensor *masked_m, DLTensor *d,
                                        const qf_gemm_grouped_opts *opts) {
  static const char op[] = "qf_gemm_fp8_blockscale_masked";
  if (!ctx) return QF_ERR_NULL;
  static const qf_gemm_grouped_opts defaults;
  qf_gemm_blockscale_args g = {0};
  DLTensor a_rows, d_rows;
  int64_t a_shape[2], a_strides[2], d_shape[2], d_strides[2];
  qf_status st;
  if ((st = stacked_view(ctx, op, "a", a, "experts, max_m, K", &a_rows, a_shape, a_strides))) return st;
  const int64_t max_m = a->shape[1];
  if (max_m % 128)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: max_m=%" PRId64 " (a.shape[1]) must be a multiple of 128", op, max_m);
  if (b && b->ndim == 3 && b->shape && a->shape[0] != b->shape[0])
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: a has %" PRId64 " experts, b %" PRId64, op, a->shape[0], b->shape[0]);
  if ((st = grouped_operands(ctx, op, &a_rows, a_scales, b, b_scales, opts ? opts : &defaults, &g))) return st;
  if ((st = qf_check_vec(ctx, op, "masked_m", masked_m, QF_I32, g.experts, (void **)&g.masked_m))) return st;
  g.expert_rows = max_m;

  int64_t want_d[3] = {g.experts, max_m, g.swiglu ? g.N / 2 : g.N};
  if ((st = qf_check_shape(ctx, op, "d", d, 3, want_d)) ||
      (st = stacked_view(ctx, op, "d", d, "experts, max_m, N", &d_rows, d_shape, d_strides)) ||
      (st = check_out(ctx, op, "d", &d_rows, QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32), g.M, want_d[2], &g.d)))
    return st;
  return run_blockscale(ctx, &g);
}

/* A scale of one value (per tensor) or n values (per token / per channel). */
static qf_status check_scale(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, int64_t n,
                             const float **data, int *per_row) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  int64_t count = 1;
  for (int d = 0; d < t->ndim && t->shape; d++)
    if (t->shape[d] < 0 || __builtin_mul_overflow(count, t->shape[d], &count))
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s.shape[%d]=%" PRId64 " is negative or makes more than 2^63 elements", op, name, d,
                     t->shape[d]);
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
