/* Front end of the attention family: validate, then dispatch. */
#include <inttypes.h>
#include <math.h>

#include "core/backend.h"

#define QF_HALVES (QF_DT(QF_F16) | QF_DT(QF_BF16))

/* A 4-D tensor [B, S, H, D] of a dtype in `accept`: non-negative strides with the last one 1,
 * elements aligned to their size. Fills dims, strides (batch, token, head) and the data pointer. */
static qf_status check_4d(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype_set accept,
                          int64_t dims[4], int64_t strides[3], qf_dtype *dt, void **data) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  if (t->ndim != 4) return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 4", op, name, (int)t->ndim);
  if (!t->shape) return qf_fail(ctx, QF_ERR_NULL, "%s: %s.shape is NULL", op, name);
  int64_t st[4];
  double extent = 1.0; /* the last element's offset + 1 */
  for (int d = 3; d >= 0; d--) {
    dims[d] = t->shape[d];
    if (dims[d] < 0) return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s.shape[%d]=%" PRId64 " is negative", op, name, d, dims[d]);
    if (t->strides) st[d] = t->strides[d];
    else if (d == 3) st[d] = 1;
    else if (__builtin_mul_overflow(st[d + 1], dims[d + 1], &st[d]))  /* (compact: the dims below) */
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has more elements than 64-bit offsets allow", op, name);
    if (st[d] < 0) return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[%d]=%" PRId64 " is negative", op, name, d, st[d]);
    if (dims[d] > 0) extent += (double)st[d] * (double)(dims[d] - 1);
  }
  if (dims[3] > 1 && st[3] != 1)
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[3]=%" PRId64 "; the head dimension must be contiguous", op, name, st[3]);
  /* The flat view checks device, dtype, alignment and the 64-bit byte extent. */
  if (extent > 4.0e18) return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s spans %.3g elements, more than 64-bit offsets allow", op, name, extent);
  int64_t n = (int64_t)extent;
  DLTensor view = *t;
  view.ndim = 1, view.shape = &n, view.strides = NULL;
  qf_mat m;
  if (!dims[0] || !dims[1] || !dims[2] || !dims[3]) n = 0;
  qf_status s = qf_check_mat(ctx, op, name, &view, accept, 1, &m);
  if (s) return s;
  for (int d = 0; d < 3; d++) strides[d] = st[d];
  *dt = m.dtype, *data = m.data;
  return QF_OK;
}

/* True when o's elements are distinct: ordered by stride, each stride is at least the span of
 * the dimensions below it. */
static int distinct_elements(const int64_t dims[4], const int64_t strides[3]) {
  int64_t s[4] = {strides[0], strides[1], strides[2], 1}, e[4] = {dims[0], dims[1], dims[2], dims[3]};
  for (int i = 0; i < 4; i++) /* insertion sort by stride, extents of 1 last (their stride is free) */
    for (int j = i; j > 0 && (e[j - 1] <= 1 || (e[j] > 1 && s[j] < s[j - 1])); j--) {
      int64_t t = s[j]; s[j] = s[j - 1], s[j - 1] = t;
      t = e[j], e[j] = e[j - 1], e[j - 1] = t;
    }
  int64_t span = 1;
  for (int i = 0; i < 4 && e[i] > 1; i++) {
    if (s[i] < span) return 0;
    span = s[i] * (e[i] - 1) + span;
  }
  return 1;
}

#ifdef QF_WITH_CUDA
/* The CUDA kernels' layout needs: 16-byte pointers and strides of whole 16-byte chunks. */
static qf_status check_cuda_layout(qf_ctx *ctx, const char *op, const char *name, const void *data,
                                   const int64_t strides[3], qf_dtype dt) {
  if ((uintptr_t)data % 16)
    return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: %s data pointer %p is not 16-byte aligned (CUDA)", op, name, data);
  for (int d = 0; d < 3; d++)
    if (strides[d] * (int64_t)qf_dtype_size(dt) % 16)
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: %s.strides[%d]=%" PRId64 " is not a multiple of 16 bytes (CUDA)", op, name, d,
                     strides[d]);
  return QF_OK;
}
#endif

/* An FP8 scale of e4m3fn keys or values (kv_dtype) over Hkv heads: fp32 [Hkv] (step 1) or [1]
 * (step 0); NULL gives NULL (a scale of 1). */
static qf_status check_kv_scale(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype kv_dtype,
                                int64_t Hkv, const float **data, int64_t *step) {
  *data = NULL, *step = 0;
  if (!t) return QF_OK;
  if (kv_dtype != QF_E4M3FN)
    return qf_fail(ctx, QF_ERR_VALUE, "%s: %s is given but k and v are %s (the scales are for e4m3fn k and v)", op, name,
                   qf_dtype_name(kv_dtype));
  const int one = t->shape && ((t->ndim == 1 && t->shape[0] == 1) || (t->ndim == 2 && t->shape[0] == 1 && t->shape[1] == 1));
  const int64_t n = one ? 1 : Hkv;
  void *p;
  qf_status st = qf_check_vec(ctx, op, name, t, QF_F32, n, &p);
  if (st) return st;
  *data = p, *step = n > 1;
  return QF_OK;
}

/* Packed sequences: the offsets and the longest sequence's lengths (NULL cu_k: a paged cache). */
typedef struct {
  const DLTensor *cu_q, *cu_k;
  int64_t max_q, max_k;
} packed_seqs;

/* A packed tensor [T, H, D] seen as the 4-D tensor [1, T, H, D] (batch stride 0) that check_4d takes. */
typedef struct {
  DLTensor t;
  int64_t shape[4], strides[4];
} packed_view;

static qf_status view_packed(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, packed_view *v) {
  int64_t *shape = v->shape, *strides = v->strides;
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  if (t->ndim != 3) return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 3 ([tokens, heads, head dim])", op, name, (int)t->ndim);
  if (!t->shape) return qf_fail(ctx, QF_ERR_NULL, "%s: %s.shape is NULL", op, name);
  shape[0] = 1, strides[0] = 0;
  for (int d = 0; d < 3; d++) shape[d + 1] = t->shape[d];
  for (int d = 3; d >= 1; d--) /* compact strides where t has none (check_4d checks the rest) */
    if (t->strides) strides[d] = t->strides[d - 1];
    else if (d == 3) strides[d] = 1;
    else if (shape[d + 1] < 0 || __builtin_mul_overflow(strides[d + 1], shape[d + 1], &strides[d]))
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has a negative extent or more elements than 64-bit offsets allow", op, name);
  v->t = *t;
  v->t.ndim = 4, v->t.shape = shape, v->t.strides = strides;
  return QF_OK;
}

/* Validates the arguments of every form into *a (paged: k and v are caches [num_pages, page_size,
 * Hkv, D], with block_table [B, max_pages] and kv_lens [B]; packed: q, o and, unpaged, k and v are
 * [tokens, H, D] with offsets per sequence) and dispatches. */
static qf_status attention(qf_ctx *ctx, const char *op, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                           const DLTensor *block_table, const DLTensor *kv_lens, const packed_seqs *packed,
                           const DLTensor *sinks, const qf_attention_opts *opts, DLTensor *o, DLTensor *lse) {
  if (!ctx) return QF_ERR_NULL;
  const int paged = block_table || kv_lens;
  qf_attention_args a = {0};
  int64_t qd[4], kd[4], vd[4], od[4];
  qf_dtype vdt, kdt;
  qf_status st;
  void *qp, *kp, *vp;
  packed_view pq, pk, pv, po;
  if (packed) { /* q, o (and dense k, v) as [1, tokens, H, D] */
    if ((st = view_packed(ctx, op, "q", q, &pq)) || (st = view_packed(ctx, op, "o", o, &po))) return st;
    q = &pq.t, o = &po.t;
    if (!paged) {
      if ((st = view_packed(ctx, op, "k", k, &pk)) || (st = view_packed(ctx, op, "v", v, &pv))) return st;
      k = &pk.t, v = &pv.t;
    }
  }
  if ((st = check_4d(ctx, op, "q", q, QF_HALVES, qd, a.qs, &a.dtype, &qp)) ||
      (st = check_4d(ctx, op, paged ? "k_cache" : "k", k, QF_DT(a.dtype) | QF_DT(QF_E4M3FN), kd, a.ks, &kdt, &kp)) ||
      (st = check_4d(ctx, op, paged ? "v_cache" : "v", v, QF_DT(kdt), vd, a.vs, &vdt, &vp)) ||
      (st = check_4d(ctx, op, "o", o, QF_DT(a.dtype) | QF_DT(QF_F32), od, a.os, &a.o_dtype, &a.o)))
    return st;
  a.q = qp, a.k = kp, a.v = vp, a.kv_dtype = kdt;
  a.B = qd[0], a.Sq = qd[1], a.Hq = qd[2], a.D = qd[3], a.Hkv = kd[2], a.Dv = vd[3];
  if (packed) {
    /* B sequences of at most max_q queries (and max_k dense keys) */
    const DLTensor *cu = packed->cu_q;
    if (!cu) return qf_fail(ctx, QF_ERR_NULL, "%s: cu_seqlens_q is NULL", op);
    if (cu->ndim != 1 || !cu->shape || cu->shape[0] < 1)
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: cu_seqlens_q must be [B + 1] with B >= 0", op);
    a.total_q = qd[1], a.B = cu->shape[0] - 1, a.Sq = packed->max_q;
    if ((st = qf_check_vec(ctx, op, "cu_seqlens_q", cu, QF_I32, a.B + 1, (void **)&a.cu_seqlens_q))) return st;
    if (!paged) {
      if (!packed->cu_k) return qf_fail(ctx, QF_ERR_NULL, "%s: cu_seqlens_k is NULL", op);
      if ((st = qf_check_vec(ctx, op, "cu_seqlens_k", packed->cu_k, QF_I32, a.B + 1, (void **)&a.cu_seqlens_k))) return st;
      a.total_k = kd[1];
    }
    if (packed->max_q < 0 || (!paged && packed->max_k < 0) || packed->max_q >= (1 << 30) || packed->max_k >= (1 << 30))
      return qf_fail(ctx, QF_ERR_VALUE, "%s: max_seqlen_q=%" PRId64 " and max_seqlen_k=%" PRId64 " must be in [0, 2^30)", op,
                     packed->max_q, packed->max_k);
  }
  if (paged) {
    if (vd[0] != kd[0] || vd[1] != kd[1] || vd[2] != kd[2] || kd[3] != a.D || kd[1] < 1)
      return qf_fail(ctx, QF_ERR_SHAPE,
                     "%s: k_cache [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] and v_cache [%" PRId64 ", %" PRId64
                     ", %" PRId64 ", %" PRId64 "] do not match (both [num_pages, page_size >= 1, Hkv, D / Dv], D=%" PRId64 " as q)",
                     op, kd[0], kd[1], kd[2], kd[3], vd[0], vd[1], vd[2], vd[3], a.D);
    qf_mat bt;
    if (!block_table) return qf_fail(ctx, QF_ERR_NULL, "%s: block_table is NULL", op);
    if ((st = qf_check_mat(ctx, op, "block_table", block_table, QF_DT(QF_I32), 4, &bt))) return st;
    if (block_table->ndim != 2 || bt.rows != a.B)
      return qf_fail(ctx, QF_ERR_SHAPE, "%s: block_table must be [B=%" PRId64 ", max_pages]; got ndim=%d, %" PRId64 " rows", op,
                     a.B, (int)block_table->ndim, bt.rows);
    if ((st = qf_check_vec(ctx, op, "kv_lens", kv_lens, QF_I32, a.B, (void **)&a.kv_lens))) return st;
    a.block_table = bt.data, a.bt_stride = bt.ld, a.page_size = kd[1], a.num_pages = kd[0];
    a.Skv = bt.cols * kd[1];
  } else if (packed) {
    a.Skv = packed->max_k;
    if (vd[1] != kd[1] || vd[2] != a.Hkv || kd[3] != a.D)
      return qf_fail(ctx, QF_ERR_SHAPE,
                     "%s: k [%" PRId64 ", %" PRId64 ", %" PRId64 "] and v [%" PRId64 ", %" PRId64 ", %" PRId64
                     "] do not match (k [total_k, Hkv, D], v [total_k, Hkv, Dv], D=%" PRId64 " as q)",
                     op, kd[1], kd[2], kd[3], vd[1], vd[2], vd[3], a.D);
  } else {
    a.Skv = kd[1];
    if (kd[0] != a.B || vd[0] != a.B || vd[1] != a.Skv || vd[2] != a.Hkv || kd[3] != a.D)
      return qf_fail(ctx, QF_ERR_SHAPE,
                     "%s: k [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] and v [%" PRId64 ", %" PRId64 ", %" PRId64
                     ", %" PRId64 "] do not match q [B=%" PRId64 ", Sq, Hq, D=%" PRId64 "] (k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv])",
                     op, kd[0], kd[1], kd[2], kd[3], vd[0], vd[1], vd[2], vd[3], a.B, a.D);
  }
  if (a.D < 1 || a.Dv < 1 || a.Hkv < 1 || a.Hq % a.Hkv)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: D=%" PRId64 ", Dv=%" PRId64 " must be positive and Hq=%" PRId64
                   " a multiple of Hkv=%" PRId64, op, a.D, a.Dv, a.Hq, a.Hkv);
  int64_t want_o[4] = {a.B, a.Sq, a.Hq, a.Dv};
  if (packed) want_o[0] = 1, want_o[1] = a.total_q;
  if ((st = qf_check_shape(ctx, op, "o", o, 4, want_o))) return st;
  if (!distinct_elements(od, a.os))
    return qf_fail(ctx, QF_ERR_LAYOUT, "%s: o's strides [%" PRId64 ", %" PRId64 ", %" PRId64 ", 1] make elements overlap", op,
                   a.os[0], a.os[1], a.os[2]);
  if (lse) {
    int64_t want_lse[3] = {a.B, a.Hq, a.Sq};
    if (packed) want_lse[0] = a.Hq, want_lse[1] = a.total_q;
    if ((st = qf_check_dense(ctx, op, "lse", lse, QF_F32, packed ? 2 : 3, want_lse, 4, (void **)&a.lse))) return st;
  }
  if (sinks && (st = qf_check_vec(ctx, op, "sinks", sinks, QF_F32, a.Hq, (void **)&a.sinks))) return st;
  const qf_attention_opts none = {0};
  if (!opts) opts = &none;
  if (!(opts->sm_scale >= 0.0f && opts->sm_scale <= 3.4e38f))
    return qf_fail(ctx, QF_ERR_VALUE, "%s: sm_scale=%g must be finite and >= 0", op, (double)opts->sm_scale);
  if (opts->window < 0) return qf_fail(ctx, QF_ERR_VALUE, "%s: window=%" PRId64 " is negative (0: no window)", op, opts->window);
  if ((st = check_kv_scale(ctx, op, "k_scale", opts->k_scale, a.kv_dtype, a.Hkv, &a.k_scale, &a.k_scale_step)) ||
      (st = check_kv_scale(ctx, op, "v_scale", opts->v_scale, a.kv_dtype, a.Hkv, &a.v_scale, &a.v_scale_step)))
    return st;
  a.sm_scale = opts->sm_scale > 0.0f ? opts->sm_scale : 1.0 / sqrt((double)a.D);
  a.causal = opts->causal != 0, a.window = opts->window;
  if (a.B * a.Sq * a.Hq == 0 || (packed && a.total_q == 0)) return QF_OK;
  if (ctx->device == QF_DEVICE_CPU) return qf_cpu_attention(ctx, &a);
#ifdef QF_WITH_CUDA
  if (!(a.D == a.Dv && (a.D == 64 || a.D == 128 || a.D == 256 || a.D == 512)) && !(a.D == 192 && a.Dv == 128))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: CUDA takes D = Dv in {64, 128, 256, 512} or D = 192, Dv = 128 (MLA); got D=%"
                   PRId64 ", Dv=%" PRId64, op, a.D, a.Dv);
  if (a.B * a.Hkv > 65535 || a.Sq * (a.Hq / a.Hkv) >= (1 << 30) || a.Skv >= (1 << 30) || a.num_pages >= (1 << 30) ||
      a.total_q >= (1 << 30) || a.total_k >= (1 << 30))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: CUDA takes B * Hkv <= 65535 and Sq * Hq / Hkv, Skv, num_pages, total_q, total_k "
                   "below 2^30; got B * Hkv = %" PRId64 ", Sq = %" PRId64 ", Skv = %" PRId64 ", num_pages = %" PRId64
                   ", total_q = %" PRId64 ", total_k = %" PRId64, op, a.B * a.Hkv, a.Sq, a.Skv, a.num_pages, a.total_q, a.total_k);
  if ((st = check_cuda_layout(ctx, op, "q", a.q, a.qs, a.dtype)) || (st = check_cuda_layout(ctx, op, "k", a.k, a.ks, a.kv_dtype)) ||
      (st = check_cuda_layout(ctx, op, "v", a.v, a.vs, a.kv_dtype)) || (st = check_cuda_layout(ctx, op, "o", a.o, a.os, a.o_dtype)))
    return st;
  return qf_cuda_attention(ctx, &a);
#else
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: this build has no CUDA backend", op);
#endif
}

qf_status qf_attention(qf_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *sinks,
                       const qf_attention_opts *opts, DLTensor *o, DLTensor *lse) {
  return attention(ctx, "qf_attention", q, k, v, NULL, NULL, NULL, sinks, opts, o, lse);
}

qf_status qf_attention_paged(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_cache, const DLTensor *v_cache,
                             const DLTensor *block_table, const DLTensor *kv_lens, const DLTensor *sinks,
                             const qf_attention_opts *opts, DLTensor *o, DLTensor *lse) {
  if (ctx && (!block_table || !kv_lens))
    return qf_fail(ctx, QF_ERR_NULL, "qf_attention_paged: block_table and kv_lens are required");
  return attention(ctx, "qf_attention_paged", q, k_cache, v_cache, block_table, kv_lens, NULL, sinks, opts, o, lse);
}

qf_status qf_attention_varlen(qf_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *cu_seqlens_q,
                              const DLTensor *cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, const DLTensor *sinks,
                              const qf_attention_opts *opts, DLTensor *o, DLTensor *lse) {
  const packed_seqs packed = {cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k};
  return attention(ctx, "qf_attention_varlen", q, k, v, NULL, NULL, &packed, sinks, opts, o, lse);
}

qf_status qf_attention_paged_varlen(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_cache, const DLTensor *v_cache,
                                    const DLTensor *block_table, const DLTensor *kv_lens, const DLTensor *cu_seqlens_q,
                                    int64_t max_seqlen_q, const DLTensor *sinks, const qf_attention_opts *opts, DLTensor *o,
                                    DLTensor *lse) {
  if (ctx && (!block_table || !kv_lens))
    return qf_fail(ctx, QF_ERR_NULL, "qf_attention_paged_varlen: block_table and kv_lens are required");
  const packed_seqs packed = {cu_seqlens_q, NULL, max_seqlen_q, 0};
  return attention(ctx, "qf_attention_paged_varlen", q, k_cache, v_cache, block_table, kv_lens, &packed, sinks, opts, o, lse);
}

qf_status qf_attention_cache_append(qf_ctx *ctx, const DLTensor *k_new, const DLTensor *v_new, const DLTensor *slots,
                                    const DLTensor *k_scale, const DLTensor *v_scale, DLTensor *k_cache, DLTensor *v_cache) {
  static const char op[] = "qf_attention_cache_append";
  if (!ctx) return QF_ERR_NULL;
  qf_cache_append_args a = {0};
  packed_view pk, pv;
  int64_t kd[4], vd[4], kcd[4], vcd[4], ks[3], vs[3];
  qf_dtype vdt, vcdt;
  void *kp, *vp;
  qf_status st;
  if ((st = view_packed(ctx, op, "k_new", k_new, &pk)) || (st = view_packed(ctx, op, "v_new", v_new, &pv)) ||
      (st = check_4d(ctx, op, "k_new", &pk.t, QF_HALVES, kd, ks, &a.dtype, &kp)) ||
      (st = check_4d(ctx, op, "v_new", &pv.t, QF_DT(a.dtype), vd, vs, &vdt, &vp)) ||
      (st = check_4d(ctx, op, "k_cache", k_cache, QF_DT(a.dtype) | QF_DT(QF_E4M3FN), kcd, a.kcs, &a.cache_dtype, &a.k_cache)) ||
      (st = check_4d(ctx, op, "v_cache", v_cache, QF_DT(a.cache_dtype), vcd, a.vcs, &vcdt, &a.v_cache)))
    return st;
  a.k = kp, a.v = vp;
  a.T = kd[1], a.Hkv = kd[2], a.D = kd[3], a.Dv = vd[3], a.num_pages = kcd[0], a.page_size = kcd[1];
  a.ks[0] = ks[1], a.ks[1] = ks[2], a.vs[0] = vs[1], a.vs[1] = vs[2];
  if (vd[1] != a.T || vd[2] != a.Hkv || kcd[2] != a.Hkv || kcd[3] != a.D || vcd[0] != kcd[0] || vcd[1] != kcd[1] ||
      vcd[2] != a.Hkv || vcd[3] != a.Dv)
    return qf_fail(ctx, QF_ERR_SHAPE,
                   "%s: k_new [%" PRId64 ", %" PRId64 ", %" PRId64 "], v_new [%" PRId64 ", %" PRId64 ", %" PRId64
                   "], k_cache [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] and v_cache [%" PRId64 ", %" PRId64
                   ", %" PRId64 ", %" PRId64 "] do not match (new [T, Hkv, D / Dv], caches [num_pages, page_size, Hkv, D / Dv])",
                   op, kd[1], kd[2], kd[3], vd[1], vd[2], vd[3], kcd[0], kcd[1], kcd[2], kcd[3], vcd[0], vcd[1], vcd[2], vcd[3]);
  if ((st = qf_check_vec(ctx, op, "slots", slots, QF_I32, a.T, (void **)&a.slots)) ||
      (st = check_kv_scale(ctx, op, "k_scale", k_scale, a.cache_dtype, a.Hkv, &a.k_scale, &a.k_scale_step)) ||
      (st = check_kv_scale(ctx, op, "v_scale", v_scale, a.cache_dtype, a.Hkv, &a.v_scale, &a.v_scale_step)))
    return st;
  if (a.T == 0 || a.Hkv == 0 || a.num_pages == 0 || a.page_size == 0) return QF_OK;
  if (ctx->device == QF_DEVICE_CPU) return qf_cpu_attention_cache_append(ctx, &a);
#ifdef QF_WITH_CUDA
  if (a.D % 8 || a.Dv % 8)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: CUDA takes D and Dv multiples of 8; got %" PRId64 ", %" PRId64, op, a.D, a.Dv);
  if ((st = check_cuda_layout(ctx, op, "k_new", kp, ks, a.dtype)) || (st = check_cuda_layout(ctx, op, "v_new", vp, vs, a.dtype)) ||
      (st = check_cuda_layout(ctx, op, "k_cache", a.k_cache, a.kcs, a.cache_dtype)) ||
      (st = check_cuda_layout(ctx, op, "v_cache", a.v_cache, a.vcs, a.cache_dtype)))
    return st;
  return qf_cuda_attention_cache_append(ctx, &a);
#else
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: this build has no CUDA backend", op);
#endif
}
