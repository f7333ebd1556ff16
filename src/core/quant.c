/* Front end of the quantization family: validate, then dispatch to the CPU reference or the
 * CUDA kernels. */
#include <inttypes.h>

#include "core/backend.h"

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
