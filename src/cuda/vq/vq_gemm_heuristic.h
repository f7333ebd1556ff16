/* Launch shape of the VQ-GeMM kernel (vq_gemm.cuh, qf_vq_gemm on CUDA for M > 16): the output
 * tile, the 16-bit operand type of the tensor cores and how many 16-bit parts x and the entries
 * are split into, where the codebooks live, and the shared-memory layout. Host code only, C and
 * C++: the kernel sees the result through its parameters.
 *
 * NOTES:
 * - Tile: 64 rows of x by bn = 64 or 32 rows of W (32 when 64 would leave SMs without two tiles
 *   each), 64 columns of K per stage, 4 warps of 32 x bn/2 outputs each. Every stage holds x and
 *   W as 16-bit planes with rows of 64 + 8 elements (the pad keeps ldmatrix free of bank
 *   conflicts), double-buffered, plus the stage's code words (one buffer: cp.async fills it for
 *   the next stage while the tensor cores work on this one).
 * - Exact operands (docs/VQ.md, "VQ-GeMM"): the MMA runs on fp16 when x and the entries are both
 *   fp16, else on bf16. x is split into x_parts 16-bit parts that sum to it exactly (fp32: 3 bf16
 *   parts; fp16 into bf16: 2; same type: 1), each entry into entry_parts (an fp16 entry under bf16
 *   MMA: 2; else 1), and each residual has its own planes: W planes = residuals x entry_parts,
 *   and the tensor cores form x_parts x planes products per 16 columns.
 * - Shared placement (the paper's SC) stages the books of the stage's columns (all residuals)
 *   when the stage leaves the staged range: once per block for one book per row (AQLM), once per
 *   scope_cols columns for GPTVQ. A tile must then lie in one row scope (scope_rows a multiple
 *   of bn). Global placement (GC) reads each row's own books through L1/L2.
 * - AUTO chooses shared when a staged entry is looked up at least once on average (bn rows times
 *   the vectors of a book, over its entries) and the books leave room for two blocks per SM; the
 *   128 KB of AQLM-3's two 4096-entry books do not, so AQLM-3 reads them from global memory (L2)
 *   unless shared is forced (it then runs one block per SM). */
#ifndef QF_CUDA_VQ_GEMM_HEURISTIC_H
#define QF_CUDA_VQ_GEMM_HEURISTIC_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "cuda/vq/vq_heuristic.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QF_VQ_GEMM_BM 64
#define QF_VQ_GEMM_BK 64
#define QF_VQ_GEMM_PITCH (QF_VQ_GEMM_BK + 8) /* 16-bit elements per staged row */
#define QF_VQ_GEMM_THREADS 128
/* The kernels' compile-time vector sizes (others run the element-wise path, kVS = 0). */
#define QF_VQ_GEMM_VS_BUCKET(vs) ((vs) == 2 || (vs) == 4 || (vs) == 8 ? (vs) : 0)

typedef struct {
  int64_t M, N, K;
  int vector_size, index_bits, residuals, scope_rows, scope_cols;
  int64_t books_per_row, entries;
  int x_dtype, entry_dtype; /* qf_dtype */
} qf_vq_gemm_problem;

typedef struct {
  int bm, bn, bk;        /* output tile bm x bn, bk columns of K per stage */
  int placement;         /* QF_VQ_BOOKS_IN_GLOBAL or QF_VQ_BOOKS_IN_SHARED */
  int mma_bf16;          /* 0: fp16 tensor-core operands, 1: bf16 */
  int x_parts;           /* 16-bit parts of x: 1, 2 or 3 */
  int entry_parts;       /* 16-bit parts of an entry: 1 or 2 */
  int planes;            /* W planes per stage: residuals x entry_parts */
  int code_words;        /* 32-bit code words staged per row and residual */
  int stage_books;       /* books per residual the shared buffer holds (0 in global placement) */
  int64_t tiles_m, tiles_n;
  size_t books_bytes;    /* shared-memory books (0 in global placement) */
  size_t codes_bytes;    /* the staged code words */
  size_t stage_bytes;    /* x and W planes of one stage */
  size_t smem_bytes;     /* books + codes + two stages */
} qf_vq_gemm_config;

/* Fills the tile-dependent sizes of *cfg for tile height bn and placement `shared`; returns the
 * dynamic shared memory that needs. */
static inline size_t qf_vq_gemm_layout(const qf_vq_gemm_problem *pb, int bn, int shared, qf_vq_gemm_config *cfg) {
  const int bk = QF_VQ_GEMM_BK;
  const int f16_mma = pb->x_dtype == QF_F16 && pb->entry_dtype == QF_F16;
  cfg->bm = QF_VQ_GEMM_BM;
  cfg->bn = bn;
  cfg->bk = bk;
  cfg->placement = shared ? QF_VQ_BOOKS_IN_SHARED : QF_VQ_BOOKS_IN_GLOBAL;
  cfg->mma_bf16 = !f16_mma;
  cfg->x_parts = f16_mma || pb->x_dtype == QF_BF16 ? 1 : pb->x_dtype == QF_F16 ? 2 : 3;
  cfg->entry_parts = !f16_mma && pb->entry_dtype == QF_F16 ? 2 : 1;
  cfg->planes = pb->residuals * cfg->entry_parts;
  /* A stage touches at most bk / vs + 2 vectors of a row (vectors may straddle its edges), whose
   * bits start anywhere in a word: one word more than they fill. */
  const int64_t vectors = bk / pb->vector_size + 2;
  cfg->code_words = (int)((vectors * pb->index_bits + 31) / 32 + 1);
  /* Books touched by bk consecutive columns. */
  int64_t books = pb->scope_cols ? (bk - 1) / pb->scope_cols + 2 : 1;
  if (books > pb->books_per_row) books = pb->books_per_row;
  cfg->stage_books = shared ? (int)books : 0;
  cfg->books_bytes = shared ? ((size_t)pb->residuals * (size_t)books * (size_t)pb->entries * (size_t)pb->vector_size * 2u +
                               15u) / 16u * 16u
                            : 0;
  cfg->codes_bytes = ((size_t)pb->residuals * (size_t)bn * (size_t)cfg->code_words * 4u + 15u) / 16u * 16u;
  cfg->stage_bytes = (size_t)(cfg->x_parts * cfg->bm + cfg->planes * bn) * QF_VQ_GEMM_PITCH * 2u;
  cfg->tiles_m = (pb->M + cfg->bm - 1) / cfg->bm;
  cfg->tiles_n = (pb->N + bn - 1) / bn;
  cfg->smem_bytes = cfg->books_bytes + cfg->codes_bytes + 2u * cfg->stage_bytes;
  return cfg->smem_bytes;
}

/* Fills *cfg for the problem on a device of sm_count SMs and smem_optin bytes of shared memory per
 * block. placement QF_VQ_BOOKS_AUTO lets the heuristic choose; bn 32 or 64 forces the tile height
 * (the tests), 0 lets the heuristic choose. Returns 0 when what was asked for cannot be used
 * (shared: books that do not fit, or a scope_rows that the tile height does not divide; any: a
 * format whose stages alone exceed the shared memory), 1 otherwise. */
static inline int qf_vq_gemm_pick(const qf_vq_gemm_problem *pb, int sm_count, size_t smem_optin, int placement, int bn,
                                  qf_vq_gemm_config *cfg) {
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  const int64_t tiles64 = ((pb->M + QF_VQ_GEMM_BM - 1) / QF_VQ_GEMM_BM) * ((pb->N + 63) / 64);
  int bns[2] = {tiles64 < 2 * sms ? 32 : 64, tiles64 < 2 * sms ? 64 : 32}; /* preferred first */
  if (bn == 32 || bn == 64) bns[0] = bns[1] = bn;
  else if (bn != 0) return 0;

  if (placement == QF_VQ_BOOKS_AUTO) {
    /* Lookups per staged entry: a book serves bn rows times its vectors. */
    const int64_t cols = pb->scope_cols ? pb->scope_cols : (pb->K > 0 ? pb->K : 1);
    const double uses = (double)bns[0] * (double)(cols / pb->vector_size) / (double)pb->entries;
    placement = QF_VQ_BOOKS_IN_GLOBAL;
    if (uses >= 1.0 && (!pb->scope_rows || pb->scope_rows % bns[0] == 0) &&
        qf_vq_gemm_layout(pb, bns[0], 1, cfg) <= smem_optin / 2)
      return 1;
  }
  const int shared = placement == QF_VQ_BOOKS_IN_SHARED;
  for (int i = 0; i < 2; i++) {
    if (shared && pb->scope_rows && pb->scope_rows % bns[i]) continue;
    if (qf_vq_gemm_layout(pb, bns[i], shared, cfg) <= smem_optin) return 1;
  }
  return 0;
}

/* qf_cuda_vq_gemm's VQ-GeMM (tensor cores, any M >= 1; the public call uses it for M > 16) with
 * the codebook placement forced (QF_VQ_BOOKS_AUTO: the heuristic's) and the tile height forced (bn
 * 32 or 64; 0: the heuristic's), for the ablation and the tests. QF_ERR_UNSUPPORTED when what is
 * forced cannot be used. When `used` is not NULL it receives the launch shape. */
qf_status qf_cuda_vq_gemm_mma_with(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int placement,
                                   int bn, qf_vq_gemm_config *used);

#ifdef __cplusplus
}
#endif

#endif
