/* Front end of the vector-quantization family: formats, sizes, validation, dispatch. */
#define _GNU_SOURCE /* sched_getaffinity: the CPUs this process may run on */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

#include "core/backend.h"
#include "formats/vq.h"

#define QF_FLOATS (QF_DT(QF_F32) | QF_DT(QF_F16) | QF_DT(QF_BF16))

/* A 2-D fp32, fp16 or bf16 matrix, rows may be strided. */
static qf_status check_float_2d(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_mat *m) {
  qf_status st = qf_check_mat(ctx, op, name, t, QF_FLOATS, 1, m);
  if (st == QF_OK && t->ndim != 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 2", op, name, (int)t->ndim);
  return st;
}

#ifndef QF_WITH_CUDA
static qf_status no_cuda_kernel(qf_ctx *ctx, const char *op) {
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: this build has no CUDA backend", op);
}
#endif

qf_status qf_vq_format_preset(qf_vq_preset preset, qf_vq_format *out) {
  static const qf_vq_format presets[] = {
      [QF_VQ_GPTVQ_2] = {4, 8, 1, 256, 256, QF_F16, 0, 0},
      [QF_VQ_CQ_2] = {4, 8, 1, 0, 4, QF_F16, 0, 0},
      [QF_VQ_CQ_4] = {2, 8, 1, 0, 2, QF_F16, 0, 0},
      [QF_VQ_AQLM_3] = {8, 12, 2, 0, 0, QF_F16, 0, 0},
      [QF_VQ_QUIP_4] = {8, 16, 2, 0, 0, QF_F16, 1, QF_VQ_LATTICE_E8P},
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
  if (f->lattice != 0 && f->lattice != QF_VQ_LATTICE_E8P)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: lattice=%d is unknown (0: k-means codebooks, %d: E8P)", op, f->lattice,
                   QF_VQ_LATTICE_E8P);
  if (f->lattice == QF_VQ_LATTICE_E8P && (f->vector_size != 8 || f->index_bits != 16 || f->entry_dtype != QF_F16))
    return qf_fail(ctx, QF_ERR_VALUE,
                   "%s: the E8P lattice needs vector_size 8, index_bits 16 and fp16 entries (fmt has %d, %d, %s)", op,
                   f->vector_size, f->index_bits, qf_dtype_name(f->entry_dtype));
  if (f->scope_cols % f->vector_size)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scope_cols=%d is not a multiple of vector_size=%d", op, f->scope_cols, f->vector_size);
  if (K % f->vector_size || (f->scope_cols && K % f->scope_cols))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: K=%" PRId64 " must be a multiple of vector_size=%d and of scope_cols=%d", op, K,
                   f->vector_size, f->scope_cols);
  const int64_t rows = f->scope_rows ? f->scope_rows : (N ? N : 1), cols = f->scope_cols ? f->scope_cols : (K ? K : 1);
  /* (bounds for the code rows' bits and the packed layout's tiles of QF_VQ_PACK_ROWS rows) */
  if (K / f->vector_size > (INT64_MAX - 64) / f->index_bits || N > INT64_MAX - QF_VQ_PACK_ROWS)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 ", K=%" PRId64 " make code rows of more than 2^63 bits or row indices "
                   "past 2^63 - %d", op, N, K, QF_VQ_PACK_ROWS);
  out->row_bytes = qf_vq_row_bytes(K / f->vector_size, f->index_bits);
  out->books_per_row = K / cols + (K % cols != 0);
  if (__builtin_mul_overflow(N / rows + (N % rows != 0), out->books_per_row, &out->n_books))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: a [%" PRId64 ", %" PRId64 "] weight in this format has more than 2^63 codebooks", op, N, K);
  out->entries = (int64_t)1 << f->index_bits;
  out->bits_per_value = (double)f->residuals * f->index_bits / f->vector_size;
  return QF_OK;
}

qf_status qf_vq_sizes_of(qf_ctx *ctx, const qf_vq_format *fmt, int64_t N, int64_t K, qf_vq_sizes *out) {
  if (!ctx || !out) return QF_ERR_NULL;
  if (N < 0 || K < 0) return qf_fail(ctx, QF_ERR_SHAPE, "qf_vq_sizes_of: N=%" PRId64 ", K=%" PRId64 " must be >= 0", N, K);
  return sizes(ctx, "qf_vq_sizes_of", fmt, N, K, out);
}

/* The format, codebooks and scales of a [N, K] weight in format fmt into *t; the codes are the
 * caller's (standard layout: check_quantized; packed: qf_vq_gemm). */
static qf_status check_books(qf_ctx *ctx, const char *op, const qf_vq_format *fmt, int64_t N, int64_t K,
                             const DLTensor *books, const DLTensor *scales, qf_vq_tensors *t) {
  qf_status st;
  if ((st = sizes(ctx, op, fmt, N, K, &t->sz))) return st;
  t->fmt = *fmt, t->N = N, t->K = K, t->codes = NULL, t->packed = 0;
  const int64_t book_shape[4] = {fmt->residuals, t->sz.n_books, t->sz.entries, fmt->vector_size};
  if ((st = qf_check_dense(ctx, op, "codebooks", books, fmt->entry_dtype, 4, book_shape, 16, &t->books))) return st;
  t->scales = NULL;
  if (fmt->row_scale) {
    if ((st = qf_check_dense(ctx, op, "scales", scales, QF_F32, 1, &N, 16, (void **)&t->scales))) return st;
  } else if (scales) {
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scales given but fmt->row_scale is 0", op);
  }
  return QF_OK;
}

/* Codes in the standard layout [R, N, row_bytes] for t's format and shape. */
static qf_status check_codes(qf_ctx *ctx, const char *op, const DLTensor *codes, qf_vq_tensors *t) {
  const int64_t code_shape[3] = {t->fmt.residuals, t->N, t->sz.row_bytes};
  return qf_check_dense(ctx, op, "codes", codes, QF_U8, 3, code_shape, 16, (void **)&t->codes);
}

/* The quantized tensors of a [N, K] weight in format fmt, codes in the standard layout. */
static qf_status check_quantized(qf_ctx *ctx, const char *op, const qf_vq_format *fmt, int64_t N, int64_t K,
                                 const DLTensor *codes, const DLTensor *books, const DLTensor *scales, qf_vq_tensors *t) {
  qf_status st = check_books(ctx, op, fmt, N, K, books, scales, t);
  return st ? st : check_codes(ctx, op, codes, t);
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
  if ((st = check_float_2d(ctx, op, "w", w, &wm))) return st;
  if ((st = check_quantized(ctx, op, fmt, wm.rows, wm.cols, codes, codebooks, scales, &t))) return st;
  const int iterations = opts && opts->iterations > 0 ? opts->iterations : 10;
  const uint64_t seed = opts && opts->seed ? opts->seed : 0x9E3779B97F4A7C15ull;
  if (opts && opts->threads < 0)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: threads=%d must be >= 0 (0: one per CPU it may run on)", op, opts->threads);
  int threads = opts ? opts->threads : 0;
  if (threads == 0) { /* the CPUs of the affinity mask (taskset, a cpuset), else the online ones */
    cpu_set_t set;
    const long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    threads = cpus < 1 ? 1 : cpus > INT32_MAX ? INT32_MAX : (int)cpus; /* (the quantizer caps it) */
  }
  if (wm.rows * wm.cols == 0) return QF_OK;
  return qf_cpu_vq_quantize(ctx, &wm, &t, iterations, seed, threads, stats);
}

qf_status qf_vq_dequantize(qf_ctx *ctx, const DLTensor *codes, const DLTensor *codebooks, const DLTensor *scales,
                           const qf_vq_format *fmt, DLTensor *w) {
  static const char op[] = "qf_vq_dequantize";
  if (!ctx) return QF_ERR_NULL;
  qf_mat wm;
  qf_vq_tensors t;
  qf_status st;
  if ((st = check_float_2d(ctx, op, "w", w, &wm))) return st;
  if ((st = check_quantized(ctx, op, fmt, wm.rows, wm.cols, codes, codebooks, scales, &t))) return st;
  if (wm.rows * wm.cols == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CUDA)
#ifdef QF_WITH_CUDA
    return qf_cuda_vq_dequantize(ctx, &t, &wm);
#else
    return no_cuda_kernel(ctx, op);
#endif
  return qf_cpu_vq_dequantize(ctx, &t, &wm);
}

/* The encodes of n (1 or 2) validated row sets into their codes: one CUDA launch, or the CPU's
 * encodes in turn (the CPU checks the slots before it writes; a pair's caches have the same rows,
 * so the first refuses what the second would). */
static qf_status encode(qf_ctx *ctx, const char *op, int n, const qf_mat *xm, int64_t row0, const int32_t *slots,
                        const qf_vq_tensors *t) {
  (void)op; /* (named only by a build without CUDA, in its refusal) */
  if (xm[0].rows * xm[0].cols == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CUDA)
#ifdef QF_WITH_CUDA
    return qf_cuda_vq_encode(ctx, n, xm, row0, slots, t);
#else
    return no_cuda_kernel(ctx, op);
#endif
  qf_status st = QF_OK;
  for (int i = 0; i < n && st == QF_OK; i++) st = qf_cpu_vq_encode(ctx, &xm[i], row0, slots, &t[i]);
  return st;
}

/* An append by slot: x [T, K] (named xname) into codes [R, N, row_bytes] (named cname: the whole
 * cache of an [N, K] matrix) with its codebooks and scales. */
static qf_status check_slot_append(qf_ctx *ctx, const char *op, const char *xname, const DLTensor *x, const char *cname,
                                   const DLTensor *codes, const DLTensor *codebooks, const qf_vq_format *fmt,
                                   const DLTensor *scales, qf_mat *xm, qf_vq_tensors *t) {
  qf_status st = check_float_2d(ctx, op, xname, x, xm);
  if (st) return st;
  if (!codes || codes->ndim != 3 || !codes->shape)
    return qf_fail(ctx, codes ? QF_ERR_SHAPE : QF_ERR_NULL, "%s: %s must be a 3-D tensor [R, N, row_bytes] (the cache)", op, cname);
  return check_quantized(ctx, op, fmt, codes->shape[1], xm->cols, codes, codebooks, scales, t);
}

qf_status qf_vq_encode(qf_ctx *ctx, const DLTensor *x, int64_t row0, const DLTensor *codebooks, const qf_vq_format *fmt,
                       DLTensor *codes, DLTensor *scales) {
  static const char op[] = "qf_vq_encode";
  if (!ctx) return QF_ERR_NULL;
  qf_mat xm;
  qf_vq_tensors t;
  qf_status st;
  if ((st = check_float_2d(ctx, op, "x", x, &xm))) return st;
  if (row0 < 0) return qf_fail(ctx, QF_ERR_VALUE, "%s: row0=%" PRId64 " is negative", op, row0);
  if ((st = sizes(ctx, op, fmt, xm.rows, xm.cols, &t.sz))) return st;
  /* the codebooks belong to a matrix of at least row0 + T rows */
  const int64_t rows = fmt->scope_rows ? fmt->scope_rows : INT64_MAX;
  if (!codebooks || codebooks->ndim != 4 || !codebooks->shape)
    return qf_fail(ctx, codebooks ? QF_ERR_SHAPE : QF_ERR_NULL, "%s: codebooks must be a 4-D tensor [R, n_books, entries, vector_size]", op);
  int64_t last = row0, need = 0;  /* the last row, the books that rows row0 .. last need */
  if (xm.rows && (__builtin_add_overflow(row0, xm.rows - 1, &last) ||
                  __builtin_mul_overflow(last / rows + 1, t.sz.books_per_row, &need)))
    return qf_fail(ctx, QF_ERR_VALUE, "%s: row0=%" PRId64 " and %" PRId64 " rows go past 64-bit row indices", op, row0, xm.rows);
  t.sz.n_books = codebooks->shape[1];
  if ((t.sz.books_per_row && t.sz.n_books % t.sz.books_per_row) || t.sz.n_books < need ||
      (!fmt->scope_rows && t.sz.n_books != t.sz.books_per_row))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: codebooks.shape[1]=%" PRId64 " books do not cover rows %" PRId64 "..%" PRId64
                   " (%" PRId64 " books per row block)", op, t.sz.n_books, row0, last, t.sz.books_per_row);
  t.fmt = *fmt, t.N = xm.rows, t.K = xm.cols;
  const int64_t code_shape[3] = {fmt->residuals, xm.rows, t.sz.row_bytes};
  const int64_t book_shape[4] = {fmt->residuals, t.sz.n_books, t.sz.entries, fmt->vector_size};
  if ((st = qf_check_dense(ctx, op, "codebooks", codebooks, fmt->entry_dtype, 4, book_shape, 16, &t.books)) ||
      (st = qf_check_dense(ctx, op, "codes", codes, QF_U8, 3, code_shape, 16, (void **)&t.codes)))
    return st;
  t.scales = NULL;
  if (fmt->row_scale) {
    if ((st = qf_check_dense(ctx, op, "scales", scales, QF_F32, 1, &xm.rows, 16, (void **)&t.scales))) return st;
  } else if (scales) {
    return qf_fail(ctx, QF_ERR_VALUE, "%s: scales given but fmt->row_scale is 0", op);
  }
  return encode(ctx, op, 1, &xm, row0, NULL, &t);
}

qf_status qf_vq_encode_slots(qf_ctx *ctx, const DLTensor *x, const DLTensor *slots, const DLTensor *codebooks,
                             const qf_vq_format *fmt, DLTensor *codes, DLTensor *scales) {
  static const char op[] = "qf_vq_encode_slots";
  if (!ctx) return QF_ERR_NULL;
  qf_mat xm;
  qf_vq_tensors t;
  const int32_t *sl;
  qf_status st;
  if ((st = check_slot_append(ctx, op, "x", x, "codes", codes, codebooks, fmt, scales, &xm, &t)) ||
      (st = qf_check_vec(ctx, op, "slots", slots, QF_I32, xm.rows, (void **)&sl)))
    return st;
  return encode(ctx, op, 1, &xm, 0, sl, &t);
}

qf_status qf_vq_encode_kv_slots(qf_ctx *ctx, const DLTensor *k_new, const DLTensor *v_new, const DLTensor *slots,
                                const DLTensor *k_books, const DLTensor *v_books, const qf_vq_format *fmt,
                                DLTensor *k_codes, DLTensor *v_codes, DLTensor *k_scales, DLTensor *v_scales) {
  static const char op[] = "qf_vq_encode_kv_slots";
  if (!ctx) return QF_ERR_NULL;
  qf_mat xm[2];
  qf_vq_tensors t[2];
  const int32_t *sl;
  qf_status st;
  if ((st = check_slot_append(ctx, "qf_vq_encode_kv_slots (K)", "k_new", k_new, "k_codes", k_codes, k_books, fmt, k_scales,
                              &xm[0], &t[0])) ||
      (st = check_slot_append(ctx, "qf_vq_encode_kv_slots (V)", "v_new", v_new, "v_codes", v_codes, v_books, fmt, v_scales,
                              &xm[1], &t[1])))
    return st;
  if (xm[1].rows != xm[0].rows || xm[1].cols != xm[0].cols || xm[1].dtype != xm[0].dtype)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: v_new [%" PRId64 ", %" PRId64 "] %s differs from k_new [%" PRId64 ", %" PRId64 "] %s", op,
                   xm[1].rows, xm[1].cols, qf_dtype_name(xm[1].dtype), xm[0].rows, xm[0].cols, qf_dtype_name(xm[0].dtype));
  if (t[1].N != t[0].N)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: v_codes has %" PRId64 " rows, k_codes %" PRId64, op, t[1].N, t[0].N);
  if ((st = qf_check_vec(ctx, op, "slots", slots, QF_I32, xm[0].rows, (void **)&sl))) return st;
  return encode(ctx, op, 2, xm, 0, sl, t);
}

static void pack_shape(const qf_vq_format *f, int64_t N, int64_t K, int64_t shape[4]) {
  shape[0] = f->residuals;
  shape[1] = qf_vq_pack_tiles(N);
  shape[2] = qf_vq_pack_chunks(K / f->vector_size);
  shape[3] = QF_VQ_PACK_ROWS * qf_vq_pack_chunk_bytes(f->index_bits);
}

/* Codes in the table GeMV's packed layout for t's format and shape (`name` in the messages). */
static qf_status check_packed(qf_ctx *ctx, const char *op, const char *name, const DLTensor *packed,
                              const qf_vq_tensors *t, uint8_t **data) {
  int64_t shape[4];
  pack_shape(&t->fmt, t->N, t->K, shape);
  return qf_check_dense(ctx, op, name, packed, QF_U8, 4, shape, 16, (void **)data);
}

qf_status qf_vq_pack_gemv_shape(qf_ctx *ctx, const qf_vq_format *fmt, int64_t N, int64_t K, int64_t shape[4]) {
  static const char op[] = "qf_vq_pack_gemv_shape";
  if (!ctx || !shape) return QF_ERR_NULL;
  if (N < 0 || K < 0) return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 ", K=%" PRId64 " must be >= 0", op, N, K);
  qf_vq_sizes sz;
  qf_status st = sizes(ctx, op, fmt, N, K, &sz);
  if (st) return st;
  pack_shape(fmt, N, K, shape);
  return QF_OK;
}

qf_status qf_vq_pack_gemv(qf_ctx *ctx, const DLTensor *codes, const qf_vq_format *fmt, int64_t K, DLTensor *packed) {
  static const char op[] = "qf_vq_pack_gemv";
  if (!ctx) return QF_ERR_NULL;
  if (!codes || codes->ndim != 3 || !codes->shape)
    return qf_fail(ctx, codes ? QF_ERR_SHAPE : QF_ERR_NULL, "%s: codes must be a 3-D tensor [R, N, row_bytes]", op);
  if (K < 0) return qf_fail(ctx, QF_ERR_SHAPE, "%s: K=%" PRId64 " must be >= 0", op, K);
  const int64_t N = codes->shape[1];
  qf_vq_tensors t;
  qf_status st;
  if ((st = sizes(ctx, op, fmt, N, K, &t.sz))) return st;
  t.fmt = *fmt, t.N = N, t.K = K, t.books = NULL, t.scales = NULL, t.packed = 0;
  uint8_t *out;
  if ((st = check_codes(ctx, op, codes, &t)) || (st = check_packed(ctx, op, "packed", packed, &t, &out))) return st;
  if (N == 0 || K / fmt->vector_size == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CUDA)
#ifdef QF_WITH_CUDA
    return qf_cuda_vq_pack_gemv(ctx, &t, out);
#else
    return no_cuda_kernel(ctx, op);
#endif
  return qf_cpu_vq_pack_gemv(ctx, &t, out);
}

qf_status qf_vq_gemm(qf_ctx *ctx, const DLTensor *x, const DLTensor *codes, const DLTensor *codebooks,
                     const DLTensor *scales, const qf_vq_format *fmt, DLTensor *y) {
  static const char op[] = "qf_vq_gemm";
  if (!ctx) return QF_ERR_NULL;
  qf_mat xm, ym;
  qf_vq_tensors w;
  qf_status st;
  if ((st = check_float_2d(ctx, op, "x", x, &xm)) || (st = check_float_2d(ctx, op, "y", y, &ym))) return st;
  if (!codes || (codes->ndim != 3 && codes->ndim != 4) || !codes->shape)
    return qf_fail(ctx, codes ? QF_ERR_SHAPE : QF_ERR_NULL,
                   "%s: codes must be a 3-D tensor [R, N, row_bytes] or the 4-D packed layout (qf_vq_pack_gemv)", op);
  /* The packed layout does not give N: y does (its rows past N are zeros). */
  const int packed = codes->ndim == 4;
  const int64_t N = packed ? ym.cols : codes->shape[1];
  if (ym.rows != xm.rows || ym.cols != N)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: y has shape [%" PRId64 ", %" PRId64 "]; expected [%" PRId64 ", %" PRId64 "]", op, ym.rows,
                   ym.cols, xm.rows, N);
  if (packed) {
    if ((st = check_books(ctx, op, fmt, N, xm.cols, codebooks, scales, &w)) ||
        (st = check_packed(ctx, op, "codes (packed)", codes, &w, &w.codes)))
      return st;
    w.packed = 1;
  } else if ((st = check_quantized(ctx, op, fmt, N, xm.cols, codes, codebooks, scales, &w))) {
    return st;
  }
  if (ym.rows * ym.cols == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CUDA)
#ifdef QF_WITH_CUDA
    return qf_cuda_vq_gemm(ctx, &xm, &w, &ym);
#else
    return no_cuda_kernel(ctx, op);
#endif
  return qf_cpu_vq_gemm(ctx, &xm, &w, &ym);
}

/* Packed V codebooks (qf_vq_pack_attention_books): the formats and heads the banked attention
 * kernel takes, and S = head_dim / vector_size. */
static qf_status check_attn_pack(qf_ctx *ctx, const char *op, const qf_vq_format *fmt, int64_t head_dim, int64_t *S) {
  if (!fmt) return qf_fail(ctx, QF_ERR_NULL, "%s: fmt is NULL", op);
  const int vs = fmt->vector_size;
  if (fmt->residuals != 1 || fmt->index_bits != 8 || (vs != 2 && vs != 4) || fmt->scope_rows != 0 || fmt->lattice ||
      head_dim % vs || (head_dim / vs != 32 && (head_dim / vs != 64 || vs != 2)))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: packed V codebooks are the banked attention kernel's: one residual of 8-bit indices, 32 vectors of "
                   "2 or 4 elements or 64 of 2 per head, codebooks shared by all tokens (scope_rows 0); fmt has %d "
                   "residuals of %d bits, vector_size %d, scope_rows %d, head_dim %" PRId64,
                   op, fmt->residuals, fmt->index_bits, vs, fmt->scope_rows, head_dim);
  *S = head_dim / vs;
  return QF_OK;
}

/* The columns one codebook of t covers (qf_vq_attn_packed_source's `cols`). */
static int64_t book_cols(const qf_vq_tensors *t) { return t->fmt.scope_cols ? t->fmt.scope_cols : t->K; }

qf_status qf_vq_pack_attention_books(qf_ctx *ctx, const DLTensor *v_codebooks, const qf_vq_format *fmt, int64_t head_dim,
                                     int64_t kv_heads, DLTensor *packed) {
  static const char op[] = "qf_vq_pack_attention_books";
  if (!ctx) return QF_ERR_NULL;
  if (head_dim < 1 || kv_heads < 1 || kv_heads > INT64_MAX / 256 / head_dim)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: head_dim=%" PRId64 " and kv_heads=%" PRId64 " must be positive (and their product "
                   "below 2^55)", op, head_dim, kv_heads);
  int64_t S;
  qf_status st;
  if ((st = check_attn_pack(ctx, op, fmt, head_dim, &S))) return st;
  qf_vq_tensors t;
  if ((st = check_books(ctx, op, fmt, 1, kv_heads * head_dim, v_codebooks, NULL, &t))) return st;
  const int64_t shape[5] = {1, kv_heads, 256, S, fmt->vector_size};
  void *dst;
  if ((st = qf_check_dense(ctx, op, "packed", packed, fmt->entry_dtype, 5, shape, 16, &dst))) return st;
  if (ctx->device == QF_DEVICE_CUDA)
#ifdef QF_WITH_CUDA
    return qf_cuda_vq_pack_attention_books(ctx, &t, head_dim, kv_heads, dst);
#else
    return no_cuda_kernel(ctx, op);
#endif
  const int vs = fmt->vector_size;
  const size_t entry = (size_t)vs * sizeof(uint16_t);
  for (int64_t i = 0; i < kv_heads * 256 * S; i++)
    memcpy((uint16_t *)dst + i * vs, (const uint16_t *)t.books + qf_vq_attn_packed_source(i, (int)S, vs, book_cols(&t)), entry);
  return QF_OK;
}

/* qf_vq_attention_decode, and with k_new and v_new (not NULL) qf_vq_attention_decode_append. */
static qf_status attention_decode(qf_ctx *ctx, const char *op, const DLTensor *q, const DLTensor *k_new, const DLTensor *v_new,
                                  const DLTensor *k_codes, const DLTensor *k_codebooks, const DLTensor *v_codes,
                                  const DLTensor *v_codebooks, const qf_vq_format *fmt, const qf_vq_attention_opts *opts,
                                  DLTensor *o, DLTensor *lse) {
  if (!ctx) return QF_ERR_NULL;
  if (!opts) return qf_fail(ctx, QF_ERR_NULL, "%s: opts is NULL (head_dim, kv_heads and seq_len are needed)", op);
  qf_vq_attention_args a;
  qf_status st;
  if ((st = check_float_2d(ctx, op, "q", q, &a.q)) || (st = check_float_2d(ctx, op, "o", o, &a.o))) return st;
  a.D = opts->head_dim, a.Hkv = opts->kv_heads, a.seq_len = opts->seq_len, a.B = a.q.rows;
  if (a.D <= 0 || a.Hkv <= 0 || a.seq_len <= 0 || a.q.cols % a.D || (a.q.cols / a.D) % a.Hkv)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: head_dim=%d, kv_heads=%d, seq_len=%" PRId64 " do not fit q.shape[1]=%" PRId64
                   " (Hq * D with Hq a multiple of kv_heads)", op, opts->head_dim, opts->kv_heads, opts->seq_len, a.q.cols);
  a.Hq = a.q.cols / a.D;
  if (!(opts->sm_scale >= 0.0f && opts->sm_scale <= 3.4e38f))
    return qf_fail(ctx, QF_ERR_VALUE, "%s: sm_scale=%g must be finite and >= 0", op, (double)opts->sm_scale);
  a.sm_scale = opts->sm_scale > 0.0f ? opts->sm_scale : 1.0 / sqrt((double)a.D);
  int64_t want_o[2] = {a.B, a.Hq * a.D}, want_lse[2] = {a.B, a.Hq};
  if ((st = qf_check_shape(ctx, op, "o", o, 2, want_o)) ||
      (st = qf_check_dense(ctx, op, "lse", lse, QF_F32, 2, want_lse, 4, (void **)&a.lse)))
    return st;
  a.kv_lens = NULL;
  if (opts->kv_lens && (st = qf_check_vec(ctx, op, "kv_lens", opts->kv_lens, QF_I32, a.B, (void **)&a.kv_lens))) return st;
  if (fmt && fmt->row_scale) return qf_fail(ctx, QF_ERR_VALUE, "%s: row scales are not part of the CQ cache format", op);
  int64_t rows = a.B * a.seq_len;
  const int64_t cols = a.Hkv * a.D;
  a.block_table = NULL, a.bt_ld = a.page_size = a.num_pages = 0;
  if (opts->block_table) { /* a paged cache: the codes' rows are num_pages pages of page_size */
    qf_mat bt;
    if ((st = qf_check_mat(ctx, op, "block_table", opts->block_table, QF_DT(QF_I32), 4, &bt))) return st;
    if (opts->block_table->ndim != 2 || bt.rows != a.B)
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: block_table must be [B=%" PRId64 ", max_pages]; got ndim=%d, %" PRId64 " rows", op,
                     a.B, (int)opts->block_table->ndim, bt.rows);
    if (opts->page_size < 1 || bt.cols > INT64_MAX / opts->page_size || a.seq_len > bt.cols * opts->page_size)
      return qf_fail(ctx, QF_ERR_VALUE, "%s: page_size=%" PRId64 " must be positive and max_pages=%" PRId64
                     " pages of it hold seq_len=%" PRId64 " tokens", op, opts->page_size, bt.cols, a.seq_len);
    if (!k_codes || k_codes->ndim != 3 || !k_codes->shape || k_codes->shape[1] % opts->page_size)
      return qf_fail(ctx, k_codes ? QF_ERR_SHAPE : QF_ERR_NULL, "%s: a paged cache's codes are [R, num_pages * page_size, "
                     "row_bytes] with page_size=%" PRId64, op, opts->page_size);
    rows = k_codes->shape[1];
    a.block_table = bt.data, a.bt_ld = bt.ld, a.page_size = opts->page_size, a.num_pages = rows / opts->page_size;
  }
  if ((st = check_quantized(ctx, op, fmt, rows, cols, k_codes, k_codebooks, NULL, &a.k))) return st;
  /* V codebooks: standard, or packed for the banked kernel (5-D, qf_vq_pack_attention_books) */
  a.v_books_packed = v_codebooks && v_codebooks->ndim == 5;
  int64_t S = 0;
  if (!a.v_books_packed) {
    if ((st = check_quantized(ctx, op, fmt, rows, cols, v_codes, v_codebooks, NULL, &a.v))) return st;
  } else {
    a.v = a.k;  /* (the same format and sizes) */
    if ((st = check_attn_pack(ctx, op, fmt, a.D, &S)) || (st = check_codes(ctx, op, v_codes, &a.v))) return st;
    const int64_t shape[5] = {1, a.Hkv, 256, S, fmt->vector_size};
    if ((st = qf_check_dense(ctx, op, "v_codebooks (packed)", v_codebooks, fmt->entry_dtype, 5, shape, 16, &a.v.books)))
      return st;
  }
  memset(&a.k_new, 0, sizeof a.k_new), memset(&a.v_new, 0, sizeof a.v_new);
  if (k_new || v_new) { /* the step's new rows: [B, Hkv * D] each, one float dtype */
    const int64_t want[2] = {a.B, cols};
    if ((st = check_float_2d(ctx, op, "k_new", k_new, &a.k_new)) || (st = check_float_2d(ctx, op, "v_new", v_new, &a.v_new)) ||
        (st = qf_check_shape(ctx, op, "k_new", k_new, 2, want)) || (st = qf_check_shape(ctx, op, "v_new", v_new, 2, want)))
      return st;
    if (a.v_new.dtype != a.k_new.dtype)
      return qf_fail(ctx, QF_ERR_DTYPE, "%s: v_new is %s, k_new %s", op, qf_dtype_name(a.v_new.dtype), qf_dtype_name(a.k_new.dtype));
  }
  if (a.B == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CUDA)
#ifdef QF_WITH_CUDA
    return qf_cuda_vq_attention_decode(ctx, &a);
#else
    return no_cuda_kernel(ctx, op);
#endif
  if (!a.v_books_packed) return qf_cpu_vq_attention_decode(ctx, &a);
  /* the reference reads the standard layout: unpacked into a copy */
  const size_t n = (size_t)a.v.sz.n_books * 256u * (size_t)fmt->vector_size;
  uint16_t *books = malloc(n * sizeof(uint16_t));
  if (!books) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "%s: no memory for %zu unpacked V codebook values", op, n);
  const int vs = fmt->vector_size;
  for (int64_t i = 0; i < a.Hkv * 256 * S; i++)
    memcpy(books + qf_vq_attn_packed_source(i, (int)S, vs, book_cols(&a.v)), (const uint16_t *)a.v.books + i * vs,
           (size_t)vs * sizeof(uint16_t));
  a.v.books = books, a.v_books_packed = 0;
  st = qf_cpu_vq_attention_decode(ctx, &a);
  free(books);
  return st;
}

qf_status qf_vq_attention_decode(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_codes, const DLTensor *k_codebooks,
                                 const DLTensor *v_codes, const DLTensor *v_codebooks, const qf_vq_format *fmt,
                                 const qf_vq_attention_opts *opts, DLTensor *o, DLTensor *lse) {
  return attention_decode(ctx, "qf_vq_attention_decode", q, NULL, NULL, k_codes, k_codebooks, v_codes, v_codebooks, fmt, opts,
                          o, lse);
}

qf_status qf_vq_attention_decode_append(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_new, const DLTensor *v_new,
                                        DLTensor *k_codes, const DLTensor *k_codebooks, DLTensor *v_codes,
                                        const DLTensor *v_codebooks, const qf_vq_format *fmt, const qf_vq_attention_opts *opts,
                                        DLTensor *o, DLTensor *lse) {
  static const char op[] = "qf_vq_attention_decode_append";
  if (ctx && (!k_new || !v_new)) return qf_fail(ctx, QF_ERR_NULL, "%s: k_new and v_new are needed (the step's new rows)", op);
  return attention_decode(ctx, op, q, k_new, v_new, k_codes, k_codebooks, v_codes, v_codebooks, fmt, opts, o, lse);
}
