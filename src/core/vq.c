/* Front end of the vector-quantization family: formats, sizes, validation, dispatch. */
#include <inttypes.h>

#include "core/backend.h"
#include "formats/vq.h"

qf_status qf_vq_format_preset(qf_vq_preset preset, qf_vq_format *out) {
  static const qf_vq_format presets[] = {
      [QF_VQ_GPTVQ_2] = {4, 8, 1, 256, 256, QF_F16, 0},
      [QF_VQ_CQ_2] = {4, 8, 1, 0, 4, QF_F16, 0},
      [QF_VQ_CQ_4] = {2, 8, 1, 0, 2, QF_F16, 0},
      [QF_VQ_AQLM_3] = {8, 12, 2, 0, 0, QF_F16, 0},
  };
  if (!out) return QF_ERR_NULL;
  if ((unsigned)preset >= sizeof presets / sizeof presets[0]) return QF_ERR_VALUE;
  *out = presets[preset];
  return QF_OK;
}

static qf_status sizes(qf_ctx *ctx, const char *op, const qf_vq_format *f, int64_t N, int64_t K, qf_vq_sizes *out) {
  if (!f) return qf_fail(ctx, QF_ERR_NULL, "%s: fmt is NULL", op);
  if (f->vector_size < 1 || f->vector_size > 16 || f->index_bits < 1 || f->index_bits > 16 || f->residuals < 1 ||
      f->residuals > 4 || f->scope_rows < 0 || f->scope_cols < 0 || (f->entry_dtype != QF_F16 && f->entry_dtype != QF_BF16))
    return qf_fail(ctx, QF_ERR_VALUE,
                   "%s: fmt {vector_size %d, index_bits %d, residuals %d, scope %d x %d, entries %s} is out of range "
                   "(vector_size 1-16, index_bits 1-16, residuals 1-4, scopes >= 0, fp16 or bf16 entries)",
                   op, f->vector_size, f->index_bits, f->residuals, f->scope_rows, f->scope_cols, qf_dtype_name(f->entry_dtype));
  if (f->scope_cols % f->vector_size)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scope_cols=%d is not a multiple of vector_size=%d", op, f->scope_cols, f->vector_size);
  if (K % f->vector_size || (f->scope_cols && K % f->scope_cols))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: K=%" PRId64 " must be a multiple of vector_size=%d and of scope_cols=%d", op, K,
                   f->vector_size, f->scope_cols);
  const int64_t rows = f->scope_rows ? f->scope_rows : (N ? N : 1), cols = f->scope_cols ? f->scope_cols : (K ? K : 1);
  out->row_bytes = qf_vq_row_bytes(K / f->vector_size, f->index_bits);
  out->books_per_row = (K + cols - 1) / cols;
  out->n_books = ((N + rows - 1) / rows) * out->books_per_row;
  out->entries = (int64_t)1 << f->index_bits;
  out->bits_per_value = (double)f->residuals * f->index_bits / f->vector_size;
  return QF_OK;
}

qf_status qf_vq_sizes_of(qf_ctx *ctx, const qf_vq_format *fmt, int64_t N, int64_t K, qf_vq_sizes *out) {
  if (!ctx || !out) return QF_ERR_NULL;
  if (N < 0 || K < 0) return qf_fail(ctx, QF_ERR_SHAPE, "qf_vq_sizes_of: N=%" PRId64 ", K=%" PRId64 " must be >= 0", N, K);
  return sizes(ctx, "qf_vq_sizes_of", fmt, N, K, out);
}

/* The quantized tensors of a [N, K] weight in format fmt. */
static qf_status check_quantized(qf_ctx *ctx, const char *op, const qf_vq_format *fmt, int64_t N, int64_t K,
                                 const DLTensor *codes, const DLTensor *books, const DLTensor *scales, qf_vq_tensors *t) {
  qf_status st;
  if ((st = sizes(ctx, op, fmt, N, K, &t->sz))) return st;
  t->fmt = *fmt, t->N = N, t->K = K;
  const int64_t R = fmt->residuals;
  const int64_t code_shape[3] = {R, N, t->sz.row_bytes};
  const int64_t book_shape[4] = {R, t->sz.n_books, t->sz.entries, fmt->vector_size};
  if ((st = qf_check_dense(ctx, op, "codes", codes, QF_U8, 3, code_shape, 16, (void **)&t->codes)) ||
      (st = qf_check_dense(ctx, op, "codebooks", books, fmt->entry_dtype, 4, book_shape, 16, &t->books)))
    return st;
  t->scales = NULL;
  if (fmt->row_scale) {
    if ((st = qf_check_dense(ctx, op, "scales", scales, QF_F32, 1, &N, 16, (void **)&t->scales))) return st;
  } else if (scales) {
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scales given but fmt->row_scale is 0", op);
  }
  return QF_OK;
}

qf_status qf_vq_quantize(qf_ctx *ctx, const DLTensor *w, const qf_vq_format *fmt, const qf_vq_quantize_opts *opts,
                         DLTensor *codes, DLTensor *codebooks, DLTensor *scales, qf_vq_stats *stats) {
  static const char op[] = "qf_vq_quantize";
  if (!ctx) return QF_ERR_NULL;
  if (ctx->device != QF_DEVICE_CPU)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the quantizer runs on CPU contexts (an offline step)", op);
  qf_mat wm;
  qf_vq_tensors t;
  qf_status st;
  if ((st = qf_check_mat(ctx, op, "w", w, QF_DT(QF_F32) | QF_DT(QF_F16) | QF_DT(QF_BF16), 1, &wm))) return st;
  if (w->ndim != 2) return qf_fail(ctx, QF_ERR_SHAPE, "%s: w has ndim=%d; expected 2", op, (int)w->ndim);
  if ((st = check_quantized(ctx, op, fmt, wm.rows, wm.cols, codes, codebooks, scales, &t))) return st;
  const int iterations = opts && opts->iterations > 0 ? opts->iterations : 10;
  const uint64_t seed = opts && opts->seed ? opts->seed : 0x9E3779B97F4A7C15ull;
  if (wm.rows * wm.cols == 0) return QF_OK;
  return qf_cpu_vq_quantize(ctx, &wm, &t, iterations, seed, stats);
}

qf_status qf_vq_dequantize(qf_ctx *ctx, const DLTensor *codes, const DLTensor *codebooks, const DLTensor *scales,
                           const qf_vq_format *fmt, DLTensor *w) {
  static const char op[] = "qf_vq_dequantize";
  if (!ctx) return QF_ERR_NULL;
  qf_mat wm;
  qf_vq_tensors t;
  qf_status st;
  if ((st = qf_check_mat(ctx, op, "w", w, QF_DT(QF_F32) | QF_DT(QF_F16) | QF_DT(QF_BF16), 1, &wm))) return st;
  if (w->ndim != 2) return qf_fail(ctx, QF_ERR_SHAPE, "%s: w has ndim=%d; expected 2", op, (int)w->ndim);
  if ((st = check_quantized(ctx, op, fmt, wm.rows, wm.cols, codes, codebooks, scales, &t))) return st;
  if (wm.rows * wm.cols == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CUDA)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the CUDA kernel of this op is not built yet (CPU reference only)", op);
  return qf_cpu_vq_dequantize(ctx, &t, &wm);
}
