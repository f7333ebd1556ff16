// Entry points of qf_vq_gemm on CUDA: the router (VQ-GeMV for M of 1 to 16: the table kernels at
// M = 1 and 2, vq_gemv_lut.cu and vq_gemv_lut_tiles.cu, the banked kernel or
// vq_gemm.cuh with x tiles of 8 or 16 rows; VQ-GeMM above: the tiled kernel, vq_gemm_tiled.cu, or
// vq_gemm.cuh with x tiles of 32 rows), the QF_VQ_BOOKS switch of the public call, and the
// limits, launch shape and kernel parameters they share.
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/vq/vq_books_env.h"
#include "cuda/vq/vq_gemm.cuh"
#include "cuda/vq/vq_gemm_heuristic.h"
#include "cuda/vq/vq_heuristic.h"

namespace {

const char kOp[] = "qf_vq_gemm";

bool element_aligned(const qf_mat *m) { return reinterpret_cast<uintptr_t>(m->data) % qf_dtype_size(m->dtype) == 0; }

}  // namespace

extern "C" qf_status qf_cuda_vq_mma_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                         int placement, int m_tiles8, int bn, qf_vq_mma_config *used) {
  const qf_vq_format &f = w->fmt;
  const int64_t M = x->rows, N = w->N, K = w->K;
  if (m_tiles8 == 0) m_tiles8 = M <= 8 ? 1 : M <= QF_VQ_GEMV_MAX_M ? 2 : QF_VQ_GEMM_M_TILES8;
  if (m_tiles8 != 1 && m_tiles8 != 2 && m_tiles8 != QF_VQ_GEMM_M_TILES8)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for x tiles of %d rows (8, 16 or 32)", kOp, 8 * m_tiles8);
  if (bn != 0 && !qf_vq_mma_tile_ok(bn))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no tile of %d rows of W (16, 32, 64 or 128)", kOp, bn);
  // Rows, columns, vector indices, bit offsets inside a code row and tiles are 32-bit in the kernel.
  if (M > INT32_MAX / 2 || N > INT32_MAX / 2 || K > INT32_MAX / 2 || w->sz.row_bytes > (INT64_C(1) << 28))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: M=%lld, N=%lld, K=%lld exceed the kernel's 32-bit row, column and bit offsets",
                   kOp, static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K));
  if (!element_aligned(x) || !element_aligned(y))
    return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: x (%p) and y (%p) must be aligned to their elements", kOp, x->data, y->data);
  const bool gemv_shape = m_tiles8 == (M <= 8 ? 1 : 2) && bn == 0;  // the banked GeMV's own launch shape
  const bool gemm_shape = m_tiles8 == QF_VQ_GEMM_M_TILES8 && bn == 0;  // the tiled GeMM's
  if (placement == QF_VQ_BOOKS_BANKED && !gemv_shape)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the banked placement runs VQ-GeMV's own launch shape (M <= 16, "
                   "256-row tiles)", kOp);
  if (placement == QF_VQ_BOOKS_TILED && !gemm_shape)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the tiled placement runs VQ-GeMM's own launch shape (128-row tiles "
                   "of W)", kOp);
  if (placement == QF_VQ_BOOKS_LUT && !(gemv_shape && M <= 4))
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the lut placement runs VQ-GeMV's own launch shape at M = 1 to 4", kOp);
  if (M == 0 || N == 0) return QF_OK;
  if (K == 0) {  // empty sums
    const size_t esz = qf_dtype_size(y->dtype);
    cudaError_t err = cudaMemset2DAsync(y->data, static_cast<size_t>(y->ld) * esz, 0, static_cast<size_t>(N) * esz,
                                        static_cast<size_t>(M), qf_stream(ctx));
    return err == cudaSuccess ? QF_OK : qf_cuda_fail(ctx, kOp, "cudaMemset2DAsync", err);
  }
  // Packed codes (qf_vq_pack_gemv) are the table GeMVs' layout: those kernels only (M = 1 to 4).
  if (w->packed && placement != QF_VQ_BOOKS_AUTO && placement != QF_VQ_BOOKS_LUT)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: packed codes run the table GeMV only (placement lut)", kOp);
  const char *const lut_why = qf_cuda_vq_lut_refusal(x, w, y), *const tiles_why = qf_cuda_vq_lut_tiles_refusal(x, w, y);
  if (w->packed && lut_why != nullptr && tiles_why != nullptr)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: packed codes run a table GeMV, and neither takes this call (%s; %s)", kOp,
                   lut_why, tiles_why);

  // VQ-GeMV: at M = 1 and 2 a table kernel where one can run and pays (books scoped to tiles of
  // W, GPTVQ, 16-bit y: vq_gemv_lut_tiles.cu, 1.30-1.60x the banked kernel on the Llama layers at
  // M = 1 on an H100, 1.08-1.23x at M = 2 on an H200; one book per residual: vq_gemv_lut.cu, at
  // M = 2 1.3-1.6x faster than GC on an H200; at M = 3 and 4 only on packed codes, which nothing
  // else reads: a launch per pair of rows loses to GC and the banked kernel on the standard
  // layout), else the banked kernel where it can run (vq_gemv_banked.cu);
  // VQ-GeMM (M > 16): the tiled kernel (vq_gemm_tiled.cu); unless a placement or a tile height is
  // forced.
  if ((placement == QF_VQ_BOOKS_LUT || w->packed || (placement == QF_VQ_BOOKS_AUTO && gemv_shape && M <= 2)) &&
      lut_why != nullptr && tiles_why == nullptr)
    return qf_cuda_vq_gemv_lut_tiles_with(ctx, x, w, y, 0, used);
  if (placement == QF_VQ_BOOKS_LUT || w->packed || (placement == QF_VQ_BOOKS_AUTO && gemv_shape && M <= 2 &&
                                       qf_vq_lut_pays(N, f.index_bits) && lut_why == nullptr))
    return qf_cuda_vq_gemv_lut_with(ctx, x, w, y, 0, 0, used);
  if (placement == QF_VQ_BOOKS_BANKED || (placement == QF_VQ_BOOKS_AUTO && gemv_shape &&
                                          qf_cuda_vq_banked_refusal(x, w) == nullptr))
    return qf_cuda_vq_gemv_banked_with(ctx, x, w, y, 0, used);
  // AQLM's whole-book GeMM also takes 9 to 16 rows: its 64-row x tile decodes W once, as the fused
  // GeMV's 16-row tile does, and ran M = 16 faster than that GeMV on every Llama layer (docs/VQ.md).
  // Its time hardly moves with M, the GeMV's grows; from M = 7 it wins where K is 8192 or more
  // (each block's K range pays for staging both books): 4-13% faster at M = 7, 8-16% at M = 8 on
  // the Llama layers with K >= 8192 (H200, same call), while at K = 4096 the GeMV stays 10-20%
  // faster up to M = 8.
  const bool whole_gemv = gemv_shape && (M > 8 || (M >= 7 && K >= 8192)) && qf_cuda_vq_whole_books(&f);
  if (placement == QF_VQ_BOOKS_TILED ||
      (placement == QF_VQ_BOOKS_AUTO && ((gemm_shape && M > QF_VQ_GEMV_MAX_M) || whole_gemv) &&
       qf_cuda_vq_tiled_refusal(x, w) == nullptr))
    return qf_cuda_vq_gemm_tiled_with(ctx, x, w, y, 0, used);
  const qf_vq_mma_problem pb = {M, N, K, f.vector_size, f.index_bits, f.residuals, f.scope_rows, f.scope_cols,
                                w->sz.books_per_row, w->sz.entries, static_cast<int>(x->dtype),
                                static_cast<int>(f.entry_dtype), f.lattice};
  qf_vq_mma_config cfg;
  if (!qf_vq_mma_pick(&pb, ctx->sm_count, ctx->smem_optin, placement, m_tiles8, bn, &cfg)) {
    if (placement == QF_VQ_BOOKS_REGISTERS && !qf_vq_hot_fits(&pb, m_tiles8))
      return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                     "%s: the register tier takes VQ-GeMV's x tiles (M <= 16) of 8-bit indices with vector size 2 or "
                     "4, 32 entries or more, row scopes of 0 or multiples of 16 rows and column scopes of 0 or "
                     "multiples of 256 (here M=%lld, %d-bit, vector_size %d, %lld entries, scope %d x %d)",
                     kOp, static_cast<long long>(M), f.index_bits, f.vector_size,
                     static_cast<long long>(w->sz.entries), f.scope_rows, f.scope_cols);
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: codebooks in shared memory are not possible here (%d residuals of %lld books of %lld entries "
                   "of vector_size %d per row scope, scope %d x %d, tile height %d, %zu bytes of shared memory per "
                   "block)",
                   kOp, f.residuals, static_cast<long long>(w->sz.books_per_row), static_cast<long long>(w->sz.entries),
                   f.vector_size, f.scope_rows, f.scope_cols, bn, ctx->smem_optin);
  }
  if (cfg.tiles > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld output tiles exceed the grid", kOp, static_cast<long long>(cfg.tiles));

  vq_mma_params p = {};
  vq_weight_call_params(p, x, w, y);
  p.x_dtype = x->dtype;
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.vectors = static_cast<int>(K / f.vector_size);
  p.quads = static_cast<int>((K + 3) / 4);
  p.vs = f.vector_size;
  p.bits = f.index_bits;
  p.lattice = f.lattice;
  p.residuals = f.residuals;
  p.entries = static_cast<int>(w->sz.entries);
  p.row_words = static_cast<uint32_t>(w->sz.row_bytes / 4);
  p.vectors_per_book = f.scope_cols ? f.scope_cols / f.vector_size : p.vectors;
  p.book_shift = vq_book_shift(p.vectors_per_book, f.scope_cols == 0);
  // A lane's vectors of a sub-chunk (16 columns) start at a multiple of 16 / vs: one book when
  // that count divides the vectors of a book.
  const int lane_vectors = QF_VQ_MMA_VS_BUCKET(f.vector_size) ? 16 / f.vector_size : 1;
  p.books_per_vector = f.scope_cols != 0 && p.vectors_per_book % lane_vectors != 0;
  p.scope_rows = f.scope_rows;
  p.books_per_row = static_cast<int>(w->sz.books_per_row);
  p.x_parts = cfg.x_parts;
  const qf_dtype mma_type = cfg.mma_bf16 ? QF_BF16 : QF_F16;
  p.x_direct = x->dtype == mma_type && reinterpret_cast<uintptr_t>(x->data) % 8 == 0 && (M == 1 || x->ld % 4 == 0) &&
               K % 4 == 0;
  cfg.x_direct = p.x_direct;
  if (used) *used = cfg;
  p.chunks = (p.quads + QF_VQ_MMA_CHUNK / 4 - 1) / (QF_VQ_MMA_CHUNK / 4);
  p.warps_k = cfg.warps_k;
  p.tile_rows = cfg.tile_n;
  p.tiles_n = static_cast<int>(cfg.tiles_n);
  p.tiles = static_cast<int>(cfg.tiles);
  p.books_smem_bytes = static_cast<uint32_t>(cfg.books_bytes);

  const bool bf16 = f.entry_dtype == QF_BF16, shared = cfg.placement == QF_VQ_BOOKS_IN_SHARED;
  if (cfg.placement == QF_VQ_BOOKS_REGISTERS) return qf_cuda_vq_gemv_run_registers(ctx, p, cfg, bf16);
  if (m_tiles8 == QF_VQ_GEMM_M_TILES8)
    return shared ? qf_cuda_vq_gemm_mma_run_shared(ctx, p, cfg, bf16) : qf_cuda_vq_gemm_mma_run_global(ctx, p, cfg, bf16);
  return shared ? qf_cuda_vq_gemv_run_shared(ctx, p, cfg, bf16) : qf_cuda_vq_gemv_run_global(ctx, p, cfg, bf16);
}

extern "C" qf_status qf_cuda_vq_gemm_mma_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y,
                                              int placement, int bn, qf_vq_gemm_config *used) {
  return qf_cuda_vq_mma_with(ctx, x, w, y, placement, QF_VQ_GEMM_M_TILES8, bn, used);
}

extern "C" qf_status qf_cuda_vq_gemm(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  int placement;
  const char *forced;
  qf_status st = qf_vq_books_from_env(ctx, kOp, &placement, &forced);
  if (st != QF_OK) return st;
  st = x->rows <= QF_VQ_GEMV_MAX_M ? qf_cuda_vq_gemm_with(ctx, x, w, y, placement, nullptr)
                                   : qf_cuda_vq_gemm_mma_with(ctx, x, w, y, placement, 0, nullptr);
  if (st == QF_ERR_UNSUPPORTED && placement != QF_VQ_BOOKS_AUTO) {  // say where the placement came from
    char why[sizeof ctx->error];
    std::strncpy(why, ctx->error, sizeof why - 1);
    why[sizeof why - 1] = '\0';
    return qf_fail(ctx, st, "%.400s (placement forced by QF_VQ_BOOKS=%s)", why, forced);
  }
  return st;
}
