/* The op benchmarks qfuse-bench runs, one function per family. Each times qfuse on the
 * session's device against its peers, and emits one row per shape. */
#ifndef QFUSE_TOOLS_BENCH_OPS_H
#define QFUSE_TOOLS_BENCH_OPS_H

#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "qfuse.h"

/* Which rows to run: ops NULL for every op, else a comma-separated list of op names
 * ("quant_group,quant_token"); m 0 for every M, else only the shapes with this M; k likewise for
 * the row length K (H for SiLU * Mul) of the quantization ops. */
typedef struct {
  const char *ops;
  int64_t m, k;
} qfb_select;

/* *rows grows by the number of rows emitted. Returns 0, or nonzero after printing why a
 * measurement failed. */
int bench_quant(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_gemm(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_gemm_grouped(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_nvfp4(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_vq(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_vq_gemm(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_vq_attention(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);
int bench_vq_encode(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows);

/* Whether op is named in the comma-separated list only (NULL or "" selects every op). */
static inline int qfb_op_selected(const char *only, const char *op) {
  if (!only || !*only) return 1;
  const size_t n = strlen(op);
  for (const char *p = only; p; p = strchr(p, ',')) {
    if (*p == ',') p++;
    if (!strncmp(p, op, n) && (p[n] == ',' || p[n] == '\0')) return 1;
  }
  return 0;
}

/* A CUDA context with programmatic dependent launch on (qf_ctx_set_pdl), for qfb_emit_pdl_pair's
 * rows; NULL with a message naming `who` when there is none. */
static inline qf_ctx *qfb_pdl_context(const char *who) {
  qf_ctx *pdl = NULL;
  if (qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK) return pdl;
  fprintf(stderr, "%s: no context with programmatic dependent launch\n", who);
  qf_ctx_destroy(pdl);
  return NULL;
}

#endif
