/* Argument validation shared by every op. Each failure names the op, the argument and the
 * values, and returns the status of its class; nothing is written anywhere else. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

static void dtype_set_names(qf_dtype_set accept, char *buf, size_t n) {
  buf[0] = '\0';
  size_t used = 0;
  for (int t = 0; t < QF_DTYPE_COUNT; t++) {
    if (!(accept & QF_DT(t))) continue;
    int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", qf_dtype_name((qf_dtype)t));
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
  }
}

static qf_status check_device(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t) {
  DLDeviceType want = ctx->device == QF_DEVICE_CUDA ? kDLCUDA : kDLCPU;
  if (t->device.device_type != want ||
      (ctx->device == QF_DEVICE_CUDA && t->device.device_id != ctx->device_id))
    return qf_fail(ctx, QF_ERR_DEVICE,
                   "%s: %s is on DLPack device (type %d, id %d) but the context is %s device %d",
                   op, name, (int)t->device.device_type, (int)t->device.device_id,
                   ctx->device == QF_DEVICE_CUDA ? "CUDA" : "CPU", ctx->device_id);
  return QF_OK;
}

qf_status qf_check_mat(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t,
                       qf_dtype_set accept, size_t align, qf_mat *out) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  qf_status st = check_device(ctx, op, name, t);
  if (st != QF_OK) return st;

  qf_dtype dt;
  if (qf_dtype_from_dl(t->dtype, &dt) != QF_OK || !(accept & QF_DT(dt))) {
    char names[160];
    dtype_set_names(accept, names, sizeof names);
    return qf_fail(ctx, QF_ERR_DTYPE, "%s: %s has dtype %s (DLPack code %u, bits %u, lanes %u); expected one of: %s",
                   op, name, qf_dtype_from_dl(t->dtype, &dt) == QF_OK ? qf_dtype_name(dt) : "unknown",
                   t->dtype.code, t->dtype.bits, t->dtype.lanes, names);
  }
  if (t->ndim != 1 && t->ndim != 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 1 or 2", op, name, (int)t->ndim);
  if (!t->shape) return qf_fail(ctx, QF_ERR_NULL, "%s: %s.shape is NULL", op, name);
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] < 0)
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s.shape[%d]=%" PRId64 " is negative", op, name, d, t->shape[d]);

  int64_t rows = t->ndim == 2 ? t->shape[0] : 1;
  int64_t cols = t->shape[t->ndim - 1];
  int64_t ld = cols;
  if (t->strides) {
    int64_t inner = t->strides[t->ndim - 1];
    if (cols > 1 && inner != 1)
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[%d]=%" PRId64 "; the last dimension must be contiguous (stride 1)",
                     op, name, t->ndim - 1, inner);
    if (t->ndim == 2 && rows > 1) {
      ld = t->strides[0];
      if (ld < cols)
        return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[0]=%" PRId64 " is smaller than shape[1]=%" PRId64 " (rows would overlap)",
                       op, name, ld, cols);
    }
  }

  size_t esz = qf_dtype_size(dt);
  if (dt == QF_E2M1X2) {
    if (cols % 2 || ld % 2)
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s is packed e2m1x2 and needs an even last dimension and row stride (got %" PRId64 ", %" PRId64 ")",
                     op, name, cols, ld);
  }
  /* Byte extent must fit in int64 (offsets are 64-bit everywhere). */
  double bytes = (double)ld * (double)(rows ? rows - 1 : 0) + (double)cols;
  bytes *= esz ? (double)esz : 0.5;
  if (bytes > 9.0e18)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s spans %.3g bytes, more than 64-bit offsets allow", op, name, bytes);

  char *data = (char *)t->data;
  if (esz > align) align = esz; /* every element at its natural alignment */
  if (rows > 0 && cols > 0) {
    if (!data) return qf_fail(ctx, QF_ERR_NULL, "%s: %s.data is NULL", op, name);
    data += t->byte_offset;
    if (align > 1 && ((uintptr_t)data % align) != 0)
      return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: %s data pointer %p (data + byte_offset) is not %zu-byte aligned",
                     op, name, (void *)data, align);
  } else if (data) {
    data += t->byte_offset;
  }
  out->data = data;
  out->dtype = dt;
  out->rows = rows;
  out->cols = cols;
  out->ld = ld;
  return QF_OK;
}

qf_status qf_check_mat_2d(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype_set accept,
                          size_t align, int64_t rows, int64_t cols, int64_t pitch, qf_mat *out) {
  qf_status st = qf_check_mat(ctx, op, name, t, accept, align, out);
  if (st) return st;
  const int64_t want[2] = {rows, cols};
  if ((st = qf_check_shape(ctx, op, name, t, 2, want))) return st;
  if (rows > 1 && out->ld % pitch)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[0]=%" PRId64 " is not a multiple of %" PRId64, op, name, out->ld,
                   pitch);
  return QF_OK;
}

qf_status qf_check_shape(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, int ndim,
                         const int64_t *shape) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  if (!t->shape && t->ndim > 0) return qf_fail(ctx, QF_ERR_NULL, "%s: %s.shape is NULL", op, name);
  int same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
  if (same) return QF_OK;
  char want[96] = "", got[96] = "";
  size_t uw = 0, ug = 0;
  for (int d = 0; d < ndim && uw < sizeof want; d++)
    uw += (size_t)snprintf(want + uw, sizeof want - uw, "%s%" PRId64, d ? ", " : "", shape[d]);
  for (int d = 0; d < t->ndim && d < 8 && ug < sizeof got; d++)
    ug += (size_t)snprintf(got + ug, sizeof got - ug, "%s%" PRId64, d ? ", " : "", t->shape[d]);
  return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has shape [%s]; expected [%s]", op, name, got, want);
}

qf_status qf_check_dense(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype dt, int ndim,
                         const int64_t *shape, size_t align, void **data) {
  qf_status st = qf_check_shape(ctx, op, name, t, ndim, shape);
  if (st) return st;
  int64_t n = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    if (t->strides && shape[d] > 1 && t->strides[d] != n)
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[%d]=%" PRId64 "; expected %" PRId64 " (compact row-major)", op, name, d,
                     t->strides[d], n);
    n *= shape[d];
  }
  DLTensor view = *t; /* device, dtype and alignment, checked on the flat view */
  view.ndim = 1;
  view.shape = &n;
  view.strides = NULL;
  qf_mat m;
  if ((st = qf_check_mat(ctx, op, name, &view, QF_DT(dt), align, &m))) return st;
  *data = m.data;
  return QF_OK;
}

qf_status qf_check_vec(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype dt, int64_t n,
                       void **data) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  int64_t shape[2] = {n, 1};
  if (t->ndim == 2 && t->shape && t->shape[0] == 1 && n != 1) shape[0] = 1, shape[1] = n;
  return qf_check_dense(ctx, op, name, t, dt, t->ndim == 2 ? 2 : 1, shape, 4, data);
}
