// Entry points of qf_vq_gemm on CUDA: the router (VQ-GeMV for M of 1 to 16, VQ-GeMM on the tensor
// cores above), the QF_VQ_BOOKS switch of the public call, and VQ-GeMM's limits, launch shape and
// kernel parameters.
#include <cstdlib>

#include "cuda/common.cuh"
#include "cuda/vq/vq_books_env.h"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_gemm_heuristic.h"
#include "cuda/vq/vq_heuristic.h"

namespace {

const char kOp[] = "qf_vq_gemm";

bool element_aligned(const qf_mat *m) { return reinterpret_cast<uintptr_t>(m->data) % qf_dtype_size(m->dtype) == 0; }

}  // namespace

extern "C" qf_status qf_cuda_vq_gemm_mma_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                              int placement, int bn, qf_vq_gemm_config *used) {
  const qf_vq_format &f = w->fmt;
  const int64_t M = x->rows, N = w->N, K = w->K;
  // Rows, columns, vector indices and bit offsets inside a code row are 32-bit in the kernel.
  if (M > INT32_MAX / 2 || N > INT32_MAX / 2 || K > INT32_MAX / 2 || w->sz.row_bytes > (INT64_C(1) << 28))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: M=%lld, N=%lld, K=%lld exceed the kernel's 32-bit row, column and bit offsets",
                   kOp, static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K));
  if (!element_aligned(x) || !element_aligned(y))
    return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: x (%p) and y (%p) must be aligned to their elements", kOp, x->data, y->data);
  if (M == 0 || N == 0) return QF_OK;
  if (K == 0) {  // empty sums
    const size_t esz = qf_dtype_size(y->dtype);
    cudaError_t err = cudaMemset2DAsync(y->data, static_cast<size_t>(y->ld) * esz, 0, static_cast<size_t>(N) * esz,
                                        static_cast<size_t>(M), qf_stream(ctx));
    return err == cudaSuccess ? QF_OK : qf_cuda_fail(ctx, kOp, "cudaMemset2DAsync", err);
  }

  const qf_vq_gemm_problem pb = {M, N, K, f.vector_size, f.index_bits, f.residuals, f.scope_rows, f.scope_cols,
                                 w->sz.books_per_row, w->sz.entries, static_cast<int>(x->dtype),
                                 static_cast<int>(f.entry_dtype)};
  qf_vq_gemm_config cfg;
  if (!qf_vq_gemm_pick(&pb, ctx->sm_count, ctx->smem_optin, placement, bn, &cfg)) {
    if (bn != 0 && bn != 32 && bn != 64)
      return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: VQ-GeMM has no tile of %d rows of W (32 or 64)", kOp, bn);
    if (placement == QF_VQ_BOOKS_IN_SHARED)
      return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                     "%s: VQ-GeMM: codebooks in shared memory are not possible here (%d residuals of %lld-entry books "
                     "of vector_size %d, scope %d x %d, %zu bytes of shared memory per block)",
                     kOp, f.residuals, static_cast<long long>(w->sz.entries), f.vector_size, f.scope_rows, f.scope_cols,
                     ctx->smem_optin);
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: VQ-GeMM: the stages of format {vector_size %d, index_bits %d, residuals %d} with %s x do not "
                   "fit in %zu bytes of shared memory per block",
                   kOp, f.vector_size, f.index_bits, f.residuals, qf_dtype_name(x->dtype), ctx->smem_optin);
  }
  if (used) *used = cfg;

  vq_gemm_params p = {};
  p.codes = reinterpret_cast<const uint32_t *>(w->codes);
  p.books = static_cast<const uint16_t *>(w->books);
  p.scales = w->scales;
  p.x = x->data;
  p.y = y->data;
  p.x_ld = x->ld;
  p.y_ld = y->ld;
  p.n_books = w->sz.n_books;
  p.tiles_m = cfg.tiles_m;
  p.x_dtype = x->dtype;
  p.y_dtype = y->dtype;
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.vectors = static_cast<int>(K / f.vector_size);
  p.vs = f.vector_size;
  p.bits = f.index_bits;
  p.residuals = f.residuals;
  p.entries = static_cast<int>(w->sz.entries);
  p.row_words = static_cast<uint32_t>(w->sz.row_bytes / 4);
  p.vectors_per_book = f.scope_cols ? f.scope_cols / f.vector_size : p.vectors;
  p.scope_rows = f.scope_rows;
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.x_parts = cfg.x_parts;
  p.planes = cfg.planes;
  p.code_words = cfg.code_words;
  p.stage_books = cfg.stage_books;
  p.books_smem_bytes = static_cast<uint32_t>(cfg.books_bytes);
  p.codes_smem_bytes = static_cast<uint32_t>(cfg.codes_bytes);
  p.stage_smem_bytes = static_cast<uint32_t>(cfg.stage_bytes);

  const bool bf16 = f.entry_dtype == QF_BF16;
  return cfg.placement == QF_VQ_BOOKS_IN_SHARED ? qf_cuda_vq_gemm_mma_run_shared(ctx, p, cfg, bf16)
                                                : qf_cuda_vq_gemm_mma_run_global(ctx, p, cfg, bf16);
}

extern "C" qf_status qf_cuda_vq_gemm(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  int placement;
  const char *forced;
  qf_status st = qf_vq_books_from_env(ctx, kOp, &placement, &forced);
  if (st != QF_OK) return st;
  st = x->rows <= QF_VQ_GEMV_MAX_M ? qf_cuda_vq_gemm_with(ctx, x, w, y, placement, nullptr)
                                   : qf_cuda_vq_gemm_mma_with(ctx, x, w, y, placement, 0, nullptr);
  return qf_vq_books_blame(ctx, st, placement, forced);
}
