/* Context, version and status strings. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"

#define QF_STR2_(x) #x
#define QF_STR_(x) QF_STR2_(x)

const char *qf_version(void) {
  return QF_STR_(QF_VERSION_MAJOR) "." QF_STR_(QF_VERSION_MINOR) "." QF_STR_(QF_VERSION_PATCH);
}

int qf_version_number(void) { return QF_VERSION_NUMBER; }

const char *qf_status_str(qf_status status) {
  switch (status) {
#define QF_STATUS_CASE_(name, value, text) \
  case name:                               \
    return text;
    QF_STATUS_LIST(QF_STATUS_CASE_)
#undef QF_STATUS_CASE_
  }
  return "unknown status";
}

qf_status qf_fail(qf_ctx *ctx, qf_status status, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
  }
  return status;
}

qf_status qf_ctx_create(qf_ctx **out, qf_device device, int device_id) {
  if (!out) return QF_ERR_NULL;
  *out = NULL;
  if (device != QF_DEVICE_CPU && device != QF_DEVICE_CUDA) return QF_ERR_VALUE;
  qf_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return QF_ERR_OUT_OF_MEMORY;
  ctx->device = device;
  if (device == QF_DEVICE_CUDA) {
#ifdef QF_WITH_CUDA
    qf_status st = qf_cuda_ctx_init(ctx, device_id);
#else
    (void)device_id;
    qf_status st = QF_ERR_UNSUPPORTED;
#endif
    if (st != QF_OK) {
      free(ctx);
      return st;
    }
  }
  *out = ctx;
  return QF_OK;
}

void qf_ctx_destroy(qf_ctx *ctx) {
#ifdef QF_WITH_CUDA
  if (ctx && ctx->device == QF_DEVICE_CUDA) qf_cuda_ctx_release(ctx);
#endif
  free(ctx);
}

qf_status qf_ctx_set_stream(qf_ctx *ctx, void *cuda_stream) {
  if (!ctx) return QF_ERR_NULL;
  if (ctx->device != QF_DEVICE_CUDA)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_ctx_set_stream: the context is not a CUDA context");
  ctx->stream = cuda_stream;
#ifdef QF_WITH_CUDA
  ctx->stream_sms = qf_cuda_stream_sms(ctx);
#endif
  return QF_OK;
}

qf_status qf_ctx_set_pdl(qf_ctx *ctx, int enable) {
  if (!ctx) return QF_ERR_NULL;
  if (ctx->device != QF_DEVICE_CUDA)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_ctx_set_pdl: the context is not a CUDA context");
  ctx->pdl = enable != 0;
  return QF_OK;
}

qf_status qf_ctx_reserve_workspace(qf_ctx *ctx, size_t bytes) {
  if (!ctx) return QF_ERR_NULL;
  if (ctx->device != QF_DEVICE_CUDA)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "qf_ctx_reserve_workspace: the context is not a CUDA context");
#ifdef QF_WITH_CUDA
  return qf_cuda_reserve_workspace(ctx, bytes);
#else
  (void)bytes;
  return QF_ERR_UNSUPPORTED;
#endif
}

size_t qf_ctx_workspace_bytes(const qf_ctx *ctx) { return ctx ? ctx->workspace_bytes : 0; }

const char *qf_ctx_last_error(const qf_ctx *ctx) { return ctx ? ctx->error : "ctx is NULL"; }
