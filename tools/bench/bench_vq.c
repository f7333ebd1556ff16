/* VQ benchmarks: VQ-GeMV / VQ-GeMM (bench_vq_gemm.c), VQ attention decode
 * (bench_vq_attention.c) and quantize-on-append (bench_vq_encode.c), each against its peers in
 * the same run. */
#include "bench_ops.h"

int bench_vq(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  int rc = bench_vq_gemm(b, ctx, sel, rows);
  rc |= bench_vq_attention(b, ctx, sel, rows);
  rc |= bench_vq_encode(b, ctx, sel, rows);
  return rc;
}
