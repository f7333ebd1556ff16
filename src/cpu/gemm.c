/* CPU reference of the GEMM family: float64 accumulation of the documented formulas. */
#include <stdlib.h>

#include "core/backend.h"
#include "formats/formats.h"

static void store_out(const qf_mat *d, int64_t m, int64_t n, double v) {
  char *row = (char *)d->data + m * d->ld * (int64_t)qf_dtype_size(d->dtype);
  float f = (float)v;
  if (d->dtype == QF_F32) ((float *)row)[n] = f;
  else if (d->dtype == QF_BF16) ((uint16_t *)row)[n] = qf_bf16_from_f32(f);
  else ((uint16_t *)row)[n] = qf_f16_from_f32(f);
}

qf_status qf_cpu_gemm_fp8_blockscale(qf_ctx *ctx, const qf_gemm_blockscale_args *g) {
  (void)ctx;
  double lut[256];
  for (int c = 0; c < 256; c++) lut[c] = qf_e4m3fn_to_f32((uint8_t)c);
  const int64_t KB = (g->K + 127) / 128;
  for (int64_t m = 0; m < g->M; m++) {
    const uint8_t *ar = (const uint8_t *)g->a.data + m * g->a.ld;
    for (int64_t n = 0; n < g->N; n++) {
      const uint8_t *br = (const uint8_t *)g->b.data + n * g->b.ld;
      double acc = g->c.data ? ((const float *)g->c.data)[m * g->c.ld + n] : 0.0;
      for (int64_t kb = 0; kb < KB; kb++) {
        double dot = 0.0; /* exact: 128 products of two e4m3 values fit a double's mantissa */
        for (int64_t k = kb * 128; k < g->K && k < kb * 128 + 128; k++) dot += lut[ar[k]] * lut[br[k]];
        acc += (double)g->a_scales[m * g->as_m + kb * g->as_k] * (double)g->b_scales[(n / 128) * KB + kb] * dot;
      }
      store_out(&g->d, m, n, acc);
    }
  }
  return QF_OK;
}
