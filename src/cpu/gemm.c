/* CPU reference of the GEMM family: float64 accumulation of the documented formulas. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "cpu/floats.h"
#include "formats/formats.h"

static void store_out(const qf_mat *d, int64_t m, int64_t n, double v) { qf_cpu_put(d->dtype, qf_cpu_row(d, m), n, (float)v); }

/* The expert of row m (-1: its 128-row block is skipped). */
static int32_t expert_of_row(const qf_gemm_blockscale_args *g, int64_t m) {
  if (g->expert_ids) return g->expert_ids[(m / 128) * g->ids_stride];
  if (!g->masked_m) return 0;
  const int64_t e = m / g->expert_rows, block_start = (m - e * g->expert_rows) / 128 * 128;
  return block_start < g->masked_m[e] ? (int32_t)e : -1;
}

/* qf_gemm_fp8_blockscale and its grouped forms: a row block (128 rows) multiplies its expert's
 * rows of b (expert ids or token counts out of range are refused before anything is written), and
 * SwiGLU pairs gate and up columns interleaved by 8. */
qf_status qf_cpu_gemm_fp8_blockscale(qf_ctx *ctx, const qf_gemm_blockscale_args *g) {
  const char *op = g->expert_ids ? "qf_gemm_fp8_blockscale_grouped"
                   : g->masked_m ? "qf_gemm_fp8_blockscale_masked"
                                 : "qf_gemm_fp8_blockscale";
  const int64_t KB = (g->K + 127) / 128, NB = (g->N + 127) / 128, MB = (g->M + 127) / 128;
  for (int64_t mb = 0; g->expert_ids && mb < MB; mb++) {
    const int32_t e = g->expert_ids[mb * g->ids_stride];
    if (e < -1 || e >= g->experts)
      return qf_fail(ctx, QF_ERR_VALUE, "%s: expert_ids[%lld]=%d is outside [-1, %lld)", op, (long long)mb, (int)e,
                     (long long)g->experts);
  }
  for (int64_t e = 0; g->masked_m && e < g->experts; e++)
    if (g->masked_m[e] < 0 || g->masked_m[e] > g->expert_rows)
      return qf_fail(ctx, QF_ERR_VALUE, "%s: masked_m[%lld]=%d is outside [0, %lld] (max_m)", op, (long long)e,
                     (int)g->masked_m[e], (long long)g->expert_rows);
  double lut[256];
  for (int c = 0; c < 256; c++) lut[c] = qf_e4m3fn_to_f32((uint8_t)c);
  double *y = malloc((size_t)g->N * sizeof *y); /* one row of A.B^T */
  if (!y) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "%s: no memory for a row of %lld values", op, (long long)g->N);
  for (int64_t m = 0; m < g->M; m++) {
    const int32_t e = expert_of_row(g, m);
    if (e < 0) continue; /* a skipped block: D untouched */
    const uint8_t *ar = (const uint8_t *)g->a.data + m * g->a.ld;
    for (int64_t n = 0; n < g->N; n++) {
      const uint8_t *br = (const uint8_t *)g->b.data + (e * g->N + n) * g->b.ld;
      const float *bs = g->b_scales + (e * NB + n / 128) * KB;
      double acc = g->c.data ? ((const float *)g->c.data)[m * g->c.ld + n] : 0.0;
      for (int64_t kb = 0; kb < KB; kb++) {
        double dot = 0.0; /* exact: 128 products of two e4m3 values fit a double's mantissa */
        for (int64_t k = kb * 128; k < g->K && k < kb * 128 + 128; k++) dot += lut[ar[k]] * lut[br[k]];
        acc += (double)g->a_scales[m * g->as_m + kb * g->as_k] * (double)bs[kb] * dot;
      }
      y[n] = acc;
    }
    if (!g->swiglu) {
      for (int64_t n = 0; n < g->N; n++) store_out(&g->d, m, n, y[n]);
      continue;
    }
    for (int64_t j = 0; j < g->N / 2; j++) {
      const double gate = y[j / 8 * 16 + j % 8], up = y[j / 8 * 16 + 8 + j % 8];
      store_out(&g->d, m, j, gate / (1.0 + exp(-gate)) * up);
    }
  }
  free(y);
  return QF_OK;
}

qf_status qf_cpu_gemm_scaled(qf_ctx *ctx, const qf_gemm_scaled_args *g) {
  (void)ctx;
  const int fp8 = g->a.dtype == QF_E4M3FN;
  double lut[256];
  for (int c = 0; c < 256; c++) lut[c] = fp8 ? qf_e4m3fn_to_f32((uint8_t)c) : (double)(int8_t)c;
  for (int64_t m = 0; m < g->M; m++) {
    const uint8_t *ar = (const uint8_t *)g->a.data + m * g->a.ld;
    const double sa = g->a_scale[g->a_per_token ? m : 0];
    for (int64_t n = 0; n < g->N; n++) {
      const uint8_t *br = (const uint8_t *)g->b.data + n * g->b.ld;
      double acc;
      if (fp8) {
        acc = 0.0;
        for (int64_t k = 0; k < g->K; k++) acc += lut[ar[k]] * lut[br[k]];
      } else { /* exact */
        int64_t iacc = 0;
        for (int64_t k = 0; k < g->K; k++) iacc += (int64_t)(int8_t)ar[k] * (int8_t)br[k];
        if (g->azp_adj) iacc -= (int64_t)g->azp_adj[n] * (g->azp ? g->azp[m] : 1);
        acc = (double)iacc;
      }
      double v = sa * g->b_scale[g->b_per_channel ? n : 0] * acc;
      if (g->bias) v += qf_cpu_get(g->d.dtype, g->bias, n);
      store_out(&g->d, m, n, v);
    }
  }
  return QF_OK;
}

qf_status qf_cpu_gemm_azp_adj(qf_ctx *ctx, const qf_mat *b, int32_t multiplier, int32_t *adj) {
  /* computed whole first, so that an overflow leaves adj untouched */
  int32_t *tmp = malloc((size_t)b->rows * sizeof *tmp);
  if (!tmp) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_gemm_azp_adj: no memory for %lld sums", (long long)b->rows);
  for (int64_t n = 0; n < b->rows; n++) {
    const int8_t *br = (const int8_t *)b->data + n * b->ld;
    int64_t sum = 0;
    for (int64_t k = 0; k < b->cols; k++) sum += br[k];
    sum *= multiplier;
    if (sum > INT32_MAX || sum < INT32_MIN) {
      free(tmp);
      return qf_fail(ctx, QF_ERR_VALUE, "qf_gemm_azp_adj: row %lld: %d * %lld overflows int32", (long long)n, (int)multiplier,
                     (long long)(sum / (multiplier ? multiplier : 1)));
    }
    tmp[n] = (int32_t)sum;
  }
  memcpy(adj, tmp, (size_t)b->rows * sizeof *tmp);
  free(tmp);
  return QF_OK;
}
