// QF_VQ_BOOKS, the codebook-placement switch of the VQ kernels (host code), read at every public
// call of qf_vq_gemm and qf_vq_attention_decode: "auto", unset or empty lets the heuristics choose;
// "global" and "shared" force the paper's GC and SC placements, "banked" the bank-conflict-free
// layouts (the VQ-GeMV's bank-private copies, vq_gemv_banked.cu; VQ attention's tables and books
// interleaved by vector, vq_attention_banked.cuh; refused where they do not apply), "tiled" the
// VQ-GeMM that decodes W once per block tile (vq_gemm_tiled.cu; VQ-GeMM only), "lut" the VQ-GeMV
// through tables of entry . x products (vq_gemv_lut.cu; M = 1, one book per residual), "registers"
// the shared placement with the codebook cache's register tier (VQ-GeMV), for the ablation.
#pragma once

#include <cstdlib>
#include <cstring>

#include "core/internal.h"
#include "cuda/vq/vq_heuristic.h"

inline qf_status qf_vq_books_from_env(qf_ctx *ctx, const char *op, int *placement, const char **text) {
  const char *v = std::getenv("QF_VQ_BOOKS");
  *text = v;
  *placement = QF_VQ_BOOKS_AUTO;
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return QF_OK;
  if (std::strcmp(v, "global") == 0) {
    *placement = QF_VQ_BOOKS_IN_GLOBAL;
    return QF_OK;
  }
  if (std::strcmp(v, "shared") == 0) {
    *placement = QF_VQ_BOOKS_IN_SHARED;
    return QF_OK;
  }
  if (std::strcmp(v, "banked") == 0) {
    *placement = QF_VQ_BOOKS_BANKED;
    return QF_OK;
  }
  if (std::strcmp(v, "tiled") == 0) {
    *placement = QF_VQ_BOOKS_TILED;
    return QF_OK;
  }
  if (std::strcmp(v, "lut") == 0) {
    *placement = QF_VQ_BOOKS_LUT;
    return QF_OK;
  }
  if (std::strcmp(v, "registers") == 0) {
    *placement = QF_VQ_BOOKS_REGISTERS;
    return QF_OK;
  }
  return qf_fail(ctx, QF_ERR_VALUE,
                 "%s: QF_VQ_BOOKS=\"%.64s\": expected auto, global, shared, banked, tiled, lut or registers", op, v);
}

// A refusal (QF_ERR_UNSUPPORTED) of a placement that QF_VQ_BOOKS forced gets the variable named
// in its message; any other status passes through.
inline qf_status qf_vq_books_blame(qf_ctx *ctx, qf_status st, int placement, const char *forced) {
  if (st != QF_ERR_UNSUPPORTED || placement == QF_VQ_BOOKS_AUTO) return st;
  char why[sizeof ctx->error];
  std::strncpy(why, ctx->error, sizeof why - 1);
  why[sizeof why - 1] = '\0';
  return qf_fail(ctx, st, "%.400s (placement forced by QF_VQ_BOOKS=%s)", why, forced);
}
