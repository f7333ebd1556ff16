/* qfuse-bench rows of the VQ attention kernels: not written yet. */
#include "bench_ops.h"

int bench_vq_attention(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  (void)b, (void)ctx, (void)sel, (void)rows;
  return 0;
}
