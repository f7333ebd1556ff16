/* Front end of the NVFP4 ops: validate, then dispatch. */
#include <inttypes.h>

#include "core/backend.h"

#define FLOAT16S (QF_DT(QF_BF16) | QF_DT(QF_F16))

/* A 2-D tensor's shape, for arguments whose shape the others follow. */
static qf_status shape_2d(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, int64_t *rows,
                          int64_t *cols) {
  if (!t) return qf_fail(ctx, QF_ERR_NULL, "%s: %s is NULL", op, name);
  if (t->ndim != 2 || !t->shape) return qf_fail(ctx, QF_ERR_SHAPE, "%s: %s has ndim=%d; expected 2", op, name, (int)t->ndim);
  *rows = t->shape[0], *cols = t->shape[1];
  return QF_OK;
}

qf_status qf_quant_nvfp4(qf_ctx *ctx, const DLTensor *w, const DLTensor *tensor_scale, DLTensor *codes,
                         DLTensor *scales) {
  static const char op[] = "qf_quant_nvfp4";
  if (!ctx) return QF_ERR_NULL;
  qf_quant_nvfp4_args a = {0};
  int64_t N = 0, K = 0;
  qf_status st;
  if ((st = shape_2d(ctx, op, "w", w, &N, &K))) return st;
  if (K % 16) return qf_fail(ctx, QF_ERR_SHAPE, "%s: K=%" PRId64 " (w.shape[1]) is not a multiple of 16", op, K);
  if ((st = qf_check_mat_2d(ctx, op, "w", w, FLOAT16S | QF_DT(QF_F32), 1, N, K, 1, &a.w)) ||
      (st = qf_check_mat_2d(ctx, op, "codes", codes, QF_DT(QF_E2M1X2), 1, N, K, 2, &a.codes)) ||
      (st = qf_check_mat_2d(ctx, op, "scales", scales, QF_DT(QF_E4M3FN), 1, N, K / 16, 1, &a.scales)) ||
      (st = qf_check_vec(ctx, op, "tensor_scale", tensor_scale, QF_F32, 1, (void **)&a.tensor_scale)))
    return st;
  if (N == 0 || K == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_quant_nvfp4(ctx, &a);
#endif
  return qf_cpu_quant_nvfp4(ctx, &a);
}

qf_status qf_nvfp4_pack(qf_ctx *ctx, const DLTensor *codes, DLTensor *packed) {
  static const char op[] = "qf_nvfp4_pack";
  if (!ctx) return QF_ERR_NULL;
  int64_t N = 0, K = 0;
  qf_mat c, p;
  qf_status st;
  if ((st = shape_2d(ctx, op, "codes", codes, &N, &K))) return st;
  if (K % 8) return qf_fail(ctx, QF_ERR_SHAPE, "%s: K=%" PRId64 " (codes.shape[1]) is not a multiple of 8", op, K);
  if ((st = qf_check_mat_2d(ctx, op, "codes", codes, QF_DT(QF_E2M1X2), 4, N, K, 8, &c)) ||
      (st = qf_check_mat_2d(ctx, op, "packed", packed, QF_DT(QF_E2M1X2), 4, N, K, 8, &p)))
    return st;
  if (N == 0 || K == 0) return QF_OK;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_nvfp4_pack(ctx, &c, &p);
#endif
  return qf_cpu_nvfp4_pack(ctx, &c, &p);
}

/* The checked arguments of qf_gemm_nvfp4 and qf_gemm_nvfp4_with in *g. */
static qf_status gemm_args(qf_ctx *ctx, const char *op, const DLTensor *a, const DLTensor *b, const DLTensor *b_scales,
                           const DLTensor *b_tensor_scale, DLTensor *d, qf_gemm_nvfp4_args *g) {
  int64_t K2 = 0;
  qf_status st;
  if ((st = shape_2d(ctx, op, "a", a, &g->M, &g->K)) || (st = shape_2d(ctx, op, "b", b, &g->N, &K2))) return st;
  if (K2 != g->K)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: b.shape[1]=%" PRId64 " differs from a.shape[1]=%" PRId64 " (K)", op, K2, g->K);
  if (g->N % 16 || g->K % 32 || g->K == 0)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%" PRId64 " must be a multiple of 16 and K=%" PRId64 " a positive multiple of 32",
                   op, g->N, g->K);
  if ((st = qf_check_mat_2d(ctx, op, "a", a, FLOAT16S, 16, g->M, g->K, 8, &g->a)) ||
      (st = qf_check_mat_2d(ctx, op, "b", b, QF_DT(QF_E2M1X2), 16, g->N, g->K, 32, &g->b)) ||
      (st = qf_check_mat_2d(ctx, op, "b_scales", b_scales, QF_DT(QF_E4M3FN), 2, g->N, g->K / 16, 2, &g->scales)) ||
      (st = qf_check_vec(ctx, op, "b_tensor_scale", b_tensor_scale, QF_F32, 1, (void **)&g->tensor_scale)) ||
      (st = qf_check_mat_2d(ctx, op, "d", d, FLOAT16S | QF_DT(QF_F32), 1, g->M, g->N, 1, &g->d)))
    return st;
  return QF_OK;
}

qf_status qf_gemm_nvfp4(qf_ctx *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *b_scales,
                        const DLTensor *b_tensor_scale, DLTensor *d) {
  if (!ctx) return QF_ERR_NULL;
  qf_gemm_nvfp4_args g = {0};
  const qf_status st = gemm_args(ctx, "qf_gemm_nvfp4", a, b, b_scales, b_tensor_scale, d, &g);
  if (st || g.M == 0 || g.N == 0) return st;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_nvfp4(ctx, &g);
#endif
  return qf_cpu_gemm_nvfp4(ctx, &g);
}

qf_status qf_gemm_nvfp4_with(qf_ctx *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *b_scales,
                             const DLTensor *b_tensor_scale, DLTensor *d, int warpgroups, int tok, int split) {
  static const char op[] = "qf_gemm_nvfp4_with";
  if (!ctx) return QF_ERR_NULL;
  qf_gemm_nvfp4_args g = {0};
  const qf_status st = gemm_args(ctx, op, a, b, b_scales, b_tensor_scale, d, &g);
  if (st) return st;
#ifdef QF_WITH_CUDA
  if (ctx->device == QF_DEVICE_CUDA) return qf_cuda_gemm_nvfp4_with(ctx, &g, warpgroups, tok, split);
#else
  (void)warpgroups, (void)tok, (void)split;
#endif
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the wgmma kernel's plans are CUDA's; this context is not", op);
}
