/* The op benchmarks qfuse-bench runs, one function per family. Each times qfuse on the
 * session's device against the peers the issue names, and emits one row per shape. */
#ifndef QFUSE_TOOLS_BENCH_OPS_H
#define QFUSE_TOOLS_BENCH_OPS_H

#include "bench.h"
#include "qfuse.h"

/* Returns 0, or nonzero after printing why a measurement failed. */
int bench_quant(qfb *b, qf_ctx *ctx);

#endif
