/* Front end of the quantization family: validate, then dispatch to the CPU reference or the
 * CUDA kernels. */
#include <inttypes.h>
#include <math.h>

#include "core/backend.h"
#include "formats/quant_math.h"

#define QF_IN_TYPES (QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32))
#define QF_HALF_TYPES (QF_DT(QF_BF16) | QF_DT(QF_F16))
#define QF_Q_TYPES (QF_DT(QF_E4M3FN) | QF_DT(QF_E4M3FNUZ) | QF_DT(QF_I8))

/* A [1] (or 0-d) fp32 scalar tensor on the context's device. */
static qf_status check_scalar_f32(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t,
                                  const float **out) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  int64_t one = 1;
  if (t->ndim != 0) {
    qf_status st = qf_check_shape(ctx, op, name, t, 1, &one);
    if (st != QF_OK) return st;
  }
  DLTensor view = *t; /* checked as a 1-element row: device, dtype, alignment */
  view.ndim = 1;
  view.shape = &one;
  view.strides = NULL;
  qf_mat m;
  qf_status st = qf_check_mat(ctx, op, name, &view, QF_DT(QF_F32), 4, &m);
  if (st != QF_OK) return st;
  *out = (const float *)m.data;
  return QF_OK;
}

static qf_status check_same_shape(qf_ctx *ctx, const char *op, const char *a_name, const DLTensor *a,
                                  const char *b_name, const DLTensor *b) {
  if (a->ndim != b->ndim)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d but %s has ndim=%d", op, b_name, (int)b->ndim, a_name, (int)a->ndim);
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d])
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s.shape[%d]=%" PRId64 " differs from %s.shape[%d]=%" PRId64, op, b_name, d,
                     b->shape[d], a_name, d, a->shape[d]);
  return QF_OK;
}

qf_status qf_quant_per_tensor(qf_ctx *ctx, const DLTensor *x, const DLTensor *scale, DLTensor *q) {
  static const char op[] = "qf_quant_per_tensor";
  if (!ctx) return QF_ERR_NULL;
  qf_quant_tensor_args a;
  qf_status st;
  if ((st = qf_check_mat(ctx, op, "x", x, QF_DT(QF_BF16) | QF_DT(QF_F16) | QF_DT(QF_F32), 16, &a.x)) ||
      (st = qf_check_mat(ctx, op, "q", q, QF_DT(QF_E4M3FN) | QF_DT(QF_I8), 16, &a.q)) ||
      (st = check_same_shape(ctx, op, "x", x, "q", q)) ||
      (st = check_scalar_f32(ctx, op, "scale", scale, &a.scale)))
    return st;
  if (a.x.rows * a.x.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_per_tensor(ctx, &a);
#endif
  return qf_cpu_quant_per_tensor(ctx, &a);
}

/* ---- shared pieces of the dynamic ops ---------------------------------------------------- */

static qf_status check_2d(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype_set accept,
                          qf_mat *m) {
  qf_status st = qf_check_mat(ctx, op, name, t, accept, 16, m);
  if (st == QF_OK && t->ndim != 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 2", op, name, (int)t->ndim);
  return st;
}

static qf_status check_floor(qf_ctx *ctx, const char *op, float scale_min, float *out) {
  if (!(scale_min >= 0.0f && scale_min <= QF_F32_MAX))
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scale_min=%g must be finite and >= 0", op, (double)scale_min);
  *out = scale_min > 0.0f ? scale_min : QF_SCALE_MIN_DEFAULT;
  return QF_OK;
}

static qf_status check_ub(qf_ctx *ctx, const char *op, const DLTensor *ub, const float **out) {
  *out = NULL;
  return ub ? check_scalar_f32(ctx, op, "scale_ub", ub, out) : QF_OK;
}

static int valid_group(int g) { return g == 32 || g == 64 || g == 128; }

/* The scales tensor of a grouped op for M rows and K columns in groups of G (layouts and
 * formats as documented in qfuse.h), plus the resolved floor and bound. */
static qf_status check_group_scales(qf_ctx *ctx, const char *op, const DLTensor *scales, int64_t M, int64_t K, int G,
                                    const qf_group_quant_opts *o, qf_scale_out *out) {
  static const char *layouts[] = {"ROW_MAJOR", "COL_MAJOR", "COL_MAJOR_TMA"};
  qf_status st;
  if ((unsigned)o->scale_layout > QF_SCALE_COL_MAJOR_TMA)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scale_layout=%d is not a qf_scale_layout", op, (int)o->scale_layout);
  if ((unsigned)o->scale_format > QF_SCALE_UE8M0_PACKED)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scale_format=%d is not a qf_scale_format", op, (int)o->scale_format);
  if (o->scale_format == QF_SCALE_UE8M0_PACKED && o->scale_layout != QF_SCALE_COL_MAJOR_TMA)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: UE8M0_PACKED scales need the COL_MAJOR_TMA layout (got %s)", op,
                   layouts[o->scale_layout]);
  if ((st = check_floor(ctx, op, o->scale_min, &out->scale_min)) || (st = check_ub(ctx, op, o->scale_ub, &out->ub)))
    return st;

  const int packed = o->scale_format == QF_SCALE_UE8M0_PACKED;
  const int tma = o->scale_layout == QF_SCALE_COL_MAJOR_TMA;
  const int64_t KG = K / G, Mp = (M + 3) / 4 * 4;
  qf_mat m;
  if ((st = qf_check_mat(ctx, op, "scales", scales, QF_DT(packed ? QF_I32 : QF_F32), tma ? 16 : 4, &m))) return st;
  if (scales->ndim != 2) return qf_fail(ctx, QF_ERR_SHAPE, "%s: scales has ndim=%d; expected 2", op, (int)scales->ndim);
  int64_t want[2];
  if (o->scale_layout == QF_SCALE_ROW_MAJOR) want[0] = M, want[1] = KG;
  else want[0] = packed ? (KG + 3) / 4 : KG, want[1] = M;
  if ((st = qf_check_shape(ctx, op, "scales", scales, 2, want))) return st;
  int64_t want_ld = o->scale_layout == QF_SCALE_ROW_MAJOR ? -1 : tma ? Mp : M;
  if (want_ld >= 0 && m.rows > 1 && m.ld != want_ld)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: scales.strides[0]=%" PRId64 " but the %s layout needs %" PRId64 "%s", op, m.ld,
                   layouts[o->scale_layout], want_ld, tma ? " (M rounded up to a multiple of 4)" : " (contiguous)");
  out->data = m.data;
  out->ld = want_ld >= 0 ? want_ld : m.ld;
  out->pad_rows = tma ? Mp - M : 0;
  out->layout = (int)o->scale_layout;
  out->format = (int)o->scale_format;
  return QF_OK;
}

static qf_status check_divisible(qf_ctx *ctx, const char *op, const char *what, int64_t K, int G) {
  if (K % G)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s=%" PRId64 " is not divisible by group_size=%d", op, what, K, G);
  return QF_OK;
}

static qf_status check_group_size(qf_ctx *ctx, const char *op, int G) {
  if (!valid_group(G)) return qf_fail(ctx, QF_ERR_VALUE, "%s: group_size=%d; expected 32, 64 or 128", op, G);
  return QF_OK;
}

static const qf_group_quant_opts default_group_opts;

/* ---- the ops ------------------------------------------------------------------------------ */

qf_status qf_quant_group(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales,
                         const qf_group_quant_opts *opts) {
  static const char op[] = "qf_quant_group";
  if (!ctx) return QF_ERR_NULL;
  const qf_group_quant_opts *o = opts ? opts : &default_group_opts;
  qf_group_quant_args a = {0};
  a.group_size = o->group_size ? o->group_size : 128;
  qf_status st;
  if ((st = check_group_size(ctx, op, a.group_size)) || (st = check_2d(ctx, op, "x", x, QF_IN_TYPES, &a.x)) ||
      (st = check_2d(ctx, op, "q", q, QF_Q_TYPES, &a.q)) || (st = check_same_shape(ctx, op, "x", x, "q", q)) ||
      (st = check_divisible(ctx, op, "x.shape[1]", a.x.cols, a.group_size)) ||
      (st = check_group_scales(ctx, op, scales, a.x.rows, a.x.cols, a.group_size, o, &a.scales)))
    return st;
  if (a.x.rows * a.x.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_group(ctx, &a);
#endif
  return qf_cpu_quant_group(ctx, &a);
}

qf_status qf_silu_mul_quant_group(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales,
                                  const qf_glu_opts *glu, const qf_group_quant_opts *opts) {
  static const char op[] = "qf_silu_mul_quant_group";
  if (!ctx) return QF_ERR_NULL;
  const qf_group_quant_opts *o = opts ? opts : &default_group_opts;
  qf_group_quant_args a = {0};
  a.group_size = o->group_size ? o->group_size : 128;
  a.glu = 1;
  a.alpha = 1.0f;
  if (glu) {
    if (!(fabsf(glu->alpha) <= QF_F32_MAX) || !(glu->limit >= 0.0f && glu->limit <= QF_F32_MAX))
      return qf_fail(ctx, QF_ERR_VALUE, "%s: glu alpha=%g and limit=%g must be finite, limit >= 0", op,
                     (double)glu->alpha, (double)glu->limit);
    a.alpha = glu->alpha != 0.0f ? glu->alpha : 1.0f;
    a.limit = glu->limit;
    a.up_plus_one = glu->up_plus_one != 0;
    a.fast_exp = glu->fast_exp != 0;
  }
  qf_status st;
  if ((st = check_group_size(ctx, op, a.group_size)) || (st = check_2d(ctx, op, "x", x, QF_HALF_TYPES, &a.x)) ||
      (st = check_2d(ctx, op, "q", q, QF_Q_TYPES, &a.q)))
    return st;
  if (a.x.cols % 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: x.shape[1]=%" PRId64 " is odd; expected [gate | up] of 2H columns", op, a.x.cols);
  if (a.q.rows != a.x.rows || a.q.cols != a.x.cols / 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: q has shape [%" PRId64 ", %" PRId64 "]; expected [%" PRId64 ", %" PRId64 "] (x is [M, 2H])",
                   op, a.q.rows, a.q.cols, a.x.rows, a.x.cols / 2);
  if ((st = check_divisible(ctx, op, "H = x.shape[1] / 2", a.q.cols, a.group_size)) ||
      (st = check_group_scales(ctx, op, scales, a.q.rows, a.q.cols, a.group_size, o, &a.scales)))
    return st;
  if (a.q.rows * a.q.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_group(ctx, &a);
#endif
  return qf_cpu_quant_group(ctx, &a);
}

qf_status qf_quant_token(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales, DLTensor *azp,
                         const qf_token_quant_opts *opts) {
  static const char op[] = "qf_quant_token";
  if (!ctx) return QF_ERR_NULL;
  static const qf_token_quant_opts defaults;
  const qf_token_quant_opts *o = opts ? opts : &defaults;
  qf_token_quant_args a = {0};
  qf_status st;
  if ((st = check_2d(ctx, op, "x", x, QF_IN_TYPES, &a.x)) || (st = check_2d(ctx, op, "q", q, QF_Q_TYPES, &a.q)) ||
      (st = check_same_shape(ctx, op, "x", x, "q", q)) ||
      (st = qf_check_vec(ctx, op, "scales", scales, QF_F32, a.x.rows, (void **)&a.scales)) ||
      (st = check_floor(ctx, op, o->scale_min, &a.scale_min)) || (st = check_ub(ctx, op, o->scale_ub, &a.ub)))
    return st;
  if (azp) {
    if (a.q.dtype != QF_I8)
      return qf_fail(ctx, QF_ERR_DTYPE, "%s: azp (asymmetric) needs q of dtype int8, got %s", op, qf_dtype_name(a.q.dtype));
    if (a.ub) return qf_fail(ctx, QF_ERR_VALUE, "%s: scale_ub applies to symmetric quantization only (azp given)", op);
    if ((st = qf_check_vec(ctx, op, "azp", azp, QF_I32, a.x.rows, (void **)&a.azp))) return st;
  }
  if (a.x.rows * a.x.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_token(ctx, &a);
#endif
  return qf_cpu_quant_token(ctx, &a);
}

qf_status qf_quant_tensor(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scale,
                          const qf_tensor_quant_opts *opts) {
  static const char op[] = "qf_quant_tensor";
  if (!ctx) return QF_ERR_NULL;
  qf_quant_tensor_args a;
  qf_status st;
  if ((st = qf_check_mat(ctx, op, "x", x, QF_IN_TYPES, 16, &a.x)) || (st = qf_check_mat(ctx, op, "q", q, QF_Q_TYPES, 16, &a.q)) ||
      (st = check_same_shape(ctx, op, "x", x, "q", q)) || (st = check_scalar_f32(ctx, op, "scale", scale, &a.scale)))
    return st;
  if (opts && opts->dynamic) {
    qf_tensor_dynamic_args d = {a.x, a.q, (float *)a.scale, 0};
    if ((st = check_floor(ctx, op, opts->scale_min, &d.scale_min))) return st;
    if (a.x.rows * a.x.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
    if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_tensor_dynamic(ctx, &d);
#endif
    return qf_cpu_quant_tensor_dynamic(ctx, &d);
  }
  if (a.x.rows * a.x.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_per_tensor(ctx, &a);
#endif
  return qf_cpu_quant_per_tensor(ctx, &a);
}

qf_status qf_rms_norm_quant(qf_ctx *ctx, const DLTensor *x, DLTensor *residual, const DLTensor *weight, DLTensor *q,
                            DLTensor *scales, const qf_rms_norm_quant_opts *opts) {
  static const char op[] = "qf_rms_norm_quant";
  if (!ctx) return QF_ERR_NULL;
  static const qf_rms_norm_quant_opts defaults;
  const qf_rms_norm_quant_opts *o = opts ? opts : &defaults;
  qf_rms_norm_quant_args a = {0};
  qf_status st;
  if (!(o->eps >= 0.0f && o->eps <= QF_F32_MAX))
    return qf_fail(ctx, QF_ERR_VALUE, "%s: eps=%g must be finite and >= 0", op, (double)o->eps);
  a.eps = o->eps > 0.0f ? o->eps : 1e-6f;
  a.group_size = o->group_size ? o->group_size : 128;
  if (a.group_size != -1 && (st = check_group_size(ctx, op, a.group_size))) return st;
  if ((st = check_2d(ctx, op, "x", x, QF_HALF_TYPES, &a.x)) || (st = check_2d(ctx, op, "q", q, QF_Q_TYPES, &a.q)) ||
      (st = check_same_shape(ctx, op, "x", x, "q", q)))
    return st;
  if (residual) {
    if ((st = check_2d(ctx, op, "residual", residual, QF_DT(a.x.dtype), &a.residual)) ||
        (st = check_same_shape(ctx, op, "x", x, "residual", residual)))
      return st;
  }
  qf_mat w;
  int64_t K = a.x.cols;
  if ((st = qf_check_mat(ctx, op, "weight", weight, QF_DT(a.x.dtype), 16, &w)) || (st = qf_check_shape(ctx, op, "weight", weight, 1, &K)))
    return st;
  a.weight = w.data;
  if (a.group_size == -1) {
    if ((st = qf_check_vec(ctx, op, "scales", scales, QF_F32, a.x.rows, &a.scales.data)) ||
        (st = check_floor(ctx, op, o->group.scale_min, &a.scales.scale_min)) ||
        (st = check_ub(ctx, op, o->group.scale_ub, &a.scales.ub)))
      return st;
  } else if ((st = check_divisible(ctx, op, "x.shape[1]", K, a.group_size)) ||
             (st = check_group_scales(ctx, op, scales, a.x.rows, K, a.group_size, &o->group, &a.scales))) {
    return st;
  }
  if (a.x.rows * a.x.cols == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_rms_norm_quant(ctx, &a);
#endif
  return qf_cpu_rms_norm_quant(ctx, &a);
}
