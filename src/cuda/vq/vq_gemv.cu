// Entry point of VQ-GeMV (qf_vq_gemm on CUDA for M of 1 to 16): limits, the heuristic's launch
// shape, the kernel parameters, and the launcher of the chosen codebook placement.
#include "cuda/common.cuh"
#include "cuda/vq/vq_gemv.cuh"
#include "cuda/vq/vq_heuristic.h"

namespace {

const char kOp[] = "qf_vq_gemm";

bool element_aligned(const qf_mat *m) { return reinterpret_cast<uintptr_t>(m->data) % qf_dtype_size(m->dtype) == 0; }

}  // namespace

extern "C" qf_status qf_cuda_vq_gemm_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                          int placement, qf_vq_gemv_config *used) {
  const qf_vq_format &f = w->fmt;
  const int64_t M = x->rows, N = w->N, K = w->K;
  if (M > QF_VQ_GEMV_MAX_M)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: M=%lld: VQ-GeMV covers M of 1 to %d (larger M runs VQ-GeMM)", kOp,
                   static_cast<long long>(M), QF_VQ_GEMV_MAX_M);
  // Rows, columns, vector indices and bit offsets inside a code row are 32-bit in the kernel.
  if (N > INT32_MAX / 2 || K > INT32_MAX / 2 || w->sz.row_bytes > (INT64_C(1) << 28))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: N=%lld, K=%lld exceed the kernel's 32-bit row, column and bit offsets", kOp,
                   static_cast<long long>(N), static_cast<long long>(K));
  if (!element_aligned(x) || !element_aligned(y))
    return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: x (%p) and y (%p) must be aligned to their elements", kOp, x->data, y->data);
  if (M == 0 || N == 0) return QF_OK;
  if (K == 0) {  // empty sums
    const size_t esz = qf_dtype_size(y->dtype);
    cudaError_t err = cudaMemset2DAsync(y->data, static_cast<size_t>(y->ld) * esz, 0, static_cast<size_t>(N) * esz,
                                        static_cast<size_t>(M), qf_stream(ctx));
    return err == cudaSuccess ? QF_OK : qf_cuda_fail(ctx, kOp, "cudaMemset2DAsync", err);
  }

  const qf_vq_gemv_problem pb = {M, N, K, f.vector_size, f.index_bits, f.residuals, f.scope_rows, w->sz.books_per_row,
                                 w->sz.entries};
  qf_vq_gemv_config cfg;
  if (!qf_vq_gemv_pick(&pb, ctx->sm_count, ctx->smem_optin, placement, &cfg))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: codebooks in shared memory are not possible here (%lld books of %lld entries per row scope, "
                   "scope_rows=%d, %zu bytes of shared memory per block)",
                   kOp, static_cast<long long>(w->sz.books_per_row * f.residuals), static_cast<long long>(w->sz.entries),
                   f.scope_rows, ctx->smem_optin);
  if (used) *used = cfg;

  vq_gemv_params p = {};
  p.codes = reinterpret_cast<const uint32_t *>(w->codes);
  p.books = static_cast<const uint16_t *>(w->books);
  p.scales = w->scales;
  p.x = x->data;
  p.y = y->data;
  p.x_ld = x->ld;
  p.y_ld = y->ld;
  p.n_books = w->sz.n_books;
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
  p.book_shift = -1;
  if (f.scope_cols == 0) {
    p.book_shift = 31;  // one book along K: every vector index is below 2^31
  } else if ((p.vectors_per_book & (p.vectors_per_book - 1)) == 0) {
    for (p.book_shift = 0; (1 << p.book_shift) < p.vectors_per_book; p.book_shift++) {
    }
  }
  p.scope_rows = f.scope_rows;
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.warps_k = cfg.warps_k;
  p.tile_rows = cfg.tile_rows;
  p.tiles = static_cast<int>(cfg.tiles);
  p.k_chunk = static_cast<int>(cfg.k_chunk);
  p.x_pitch = static_cast<int>(cfg.x_pitch);
  p.books_smem_bytes = static_cast<uint32_t>(cfg.books_bytes);

  const bool bf16 = f.entry_dtype == QF_BF16;
  return cfg.placement == QF_VQ_BOOKS_IN_SHARED ? qf_cuda_vq_gemv_run_shared(ctx, p, cfg, bf16)
                                                : qf_cuda_vq_gemv_run_global(ctx, p, cfg, bf16);
}

// qf_cuda_vq_gemm (the router between this GeMV and the GeMM) is in vq_gemm.cu.
