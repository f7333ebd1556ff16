/* Front end of the GEMM family: validate, then dispatch. */
#include <inttypes.h>

#include "core/backend.h"

static qf_status check_fp8_operand(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_mat *m) {
  qf_status st = qf_check_mat(ctx, op, name, t, QF_DT(QF_E4M3FN), 16, m);
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

qf_status qf_gemm_fp8_blockscale(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                 const DLTensor *b_scales, DLTensor *d, const qf_gemm_blockscale_opts *opts) {
  static const char op[] = "qf_gemm_fp8_blockscale";
  if (!ctx) return QF_ERR_NULL;
  static const qf_gemm_blockscale_opts defaults;
  const qf_gemm_blockscale_opts *o = opts ? opts : &defaults;
  qf_gemm_blockscale_args g = {0};
  qf_status st;
  if ((st = check_fp8_operand(ctx, op, "a", a, &g.a)) || (st = check_fp8_operand(ctx, op, "b", b, &g.b))) return st;
  g.M = g.a.rows, g.K = g.a.cols, g.N = g.b.rows;
  if (g.b.cols != g.K)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b.shape[1]=%" PRId64 " differs from a.shape[1]=%" PRId64 " (K)", op, g.b.cols, g.K);
  if (g.K % 16 || g.N % 16 || g.K == 0)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 " and K=%" PRId64 " must be positive multiples of 16", op, g.N, g.K);
  const int64_t KB = (g.K + 127) / 128, NB = (g.N + 127) / 128, Mp = (g.M + 3) / 4 * 4;

  qf_mat s;
  if ((st = qf_check_mat(ctx, op, "a_scales", a_scales, QF_DT(QF_F32), 16, &s))) return st;
  int64_t want_a[2] = {o->a_scales_row_major ? g.M : KB, o->a_scales_row_major ? KB : g.M};
  if ((st = qf_check_shape(ctx, op, "a_scales", a_scales, 2, want_a))) return st;
  if (o->a_scales_row_major) {
    g.as_m = s.ld, g.as_k = 1;
  } else {
    if (s.rows > 1 && s.ld != Mp)
      return qf_fail(ctx, QF_ERR_LAYOUT, "%s: a_scales.strides[0]=%" PRId64 " but the column-major layout needs %" PRId64
                     " (M rounded up to a multiple of 4)", op, s.ld, Mp);
    g.as_m = 1, g.as_k = Mp;
  }
  g.a_scales = s.data;

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
