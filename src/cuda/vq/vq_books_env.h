// QF_VQ_BOOKS, the codebook-placement switch of the VQ kernels (host code), read at every public
// call of qf_vq_gemm and qf_vq_attention_decode: "auto", unset or empty lets the heuristics choose;
// "global" and "shared" force the paper's GC and SC placements, for the ablation.
#pragma once

#include <cstdlib>
#include <cstring>

#include "core/internal.h"
#include "cuda/vq/vq_heuristic.h"

// Kernels written without a GPU run only where QF_UNVERIFIED_KERNELS=1 (scripts/device-check sets
// it): until their GPU test has passed once, a caller gets a clear refusal, never an unchecked
// result. Remove the call once the kernel is verified.
inline qf_status qf_vq_unverified(qf_ctx *ctx, const char *op, const char *what) {
  const char *v = std::getenv("QF_UNVERIFIED_KERNELS");
  if (v != nullptr && std::strcmp(v, "1") == 0) return QF_OK;
  return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the CUDA %s has not been verified on a GPU yet (QF_UNVERIFIED_KERNELS=1 runs it)",
                 op, what);
}

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
  return qf_fail(ctx, QF_ERR_VALUE, "%s: QF_VQ_BOOKS=\"%.64s\": expected auto, global or shared", op, v);
}
