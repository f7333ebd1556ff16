/* CPU reference of the NVFP4 ops: the block quantizer, the packed layout and the GEMM in
 * float64 from the decoded weights. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "cpu/floats.h"
#include "formats/nvfp4.h"

qf_status qf_cpu_quant_nvfp4(qf_ctx *ctx, const qf_quant_nvfp4_args *a) {
  (void)ctx;
  const float ts = *a->tensor_scale;
  for (int64_t n = 0; n < a->w.rows; n++) {
    const void *w = qf_cpu_row(&a->w, n);
    uint8_t *codes = qf_cpu_row(&a->codes, n), *scales = qf_cpu_row(&a->scales, n);
    for (int64_t k0 = 0; k0 < a->w.cols; k0 += 16) {
      float v[16], amax = 0.0f;
      for (int i = 0; i < 16; i++) {
        v[i] = qf_cpu_get(a->w.dtype, w, k0 + i);
        const float m = fabsf(v[i]);
        amax = m > amax ? m : amax; /* NaN ignored */
      }
      const uint8_t s = qf_nvfp4_block_scale(amax, ts);
      scales[k0 / 16] = s;
      const float sv = qf_e4m3fn_to_f32(s);
      for (int i = 0; i < 16; i += 2)
        codes[(k0 + i) / 2] = qf_e2m1x2_pack(qf_nvfp4_code(v[i], sv, ts), qf_nvfp4_code(v[i + 1], sv, ts));
    }
  }
  return QF_OK;
}

/* The 32-bit word of codes at byte p (little-endian, whatever the host's order). */
static uint32_t load_word(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void store_word(uint8_t *p, uint32_t w) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(w >> (8 * i));
}

qf_status qf_cpu_nvfp4_pack(qf_ctx *ctx, const qf_mat *codes, const qf_mat *packed) {
  (void)ctx;
  for (int64_t n = 0; n < codes->rows; n++) {
    const uint8_t *src = qf_cpu_row(codes, n);
    uint8_t *dst = qf_cpu_row(packed, n);
    for (int64_t k = 0; k < codes->cols; k += 8) store_word(dst + k / 2, qf_nvfp4_pack_word(load_word(src + k / 2)));
  }
  return QF_OK;
}

qf_status qf_cpu_gemm_nvfp4(qf_ctx *ctx, const qf_gemm_nvfp4_args *g) {
  double *w = malloc((size_t)g->K * sizeof *w); /* one decoded row of the weight */
  if (!w) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_gemm_nvfp4: no memory for a row of %lld values", (long long)g->K);
  const double ts = *g->tensor_scale;
  for (int64_t n = 0; n < g->N; n++) {
    const uint8_t *b = qf_cpu_row(&g->b, n), *s = qf_cpu_row(&g->scales, n);
    for (int64_t k = 0; k < g->K; k += 8) {
      const uint32_t word = qf_nvfp4_unpack_word(load_word(b + k / 2));
      for (int i = 0; i < 8; i++)
        w[k + i] = (double)qf_e2m1_to_f32((uint8_t)(word >> (4 * i))) * qf_e4m3fn_to_f32(s[(k + i) / 16]) * ts;
    }
    for (int64_t m = 0; m < g->M; m++) {
      const void *a = qf_cpu_row(&g->a, m);
      double acc = 0.0;
      for (int64_t k = 0; k < g->K; k++) acc += (double)qf_cpu_get(g->a.dtype, a, k) * w[k];
      qf_cpu_put(g->d.dtype, qf_cpu_row(&g->d, m), n, (float)acc);
    }
  }
  free(w);
  return QF_OK;
}
