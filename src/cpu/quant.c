/* CPU reference of the quantization family: the oracle the CUDA kernels are checked against.
 * Plain C11, clear over clever. The numerics contract is docs/NUMERICS.md. */
#include <stdlib.h>

#include "core/backend.h"
#include "cpu/floats.h"
#include "formats/quant_math.h"

/* Rounds v (already divided by the scale) to the output type, storing element i of a row. */
static void store_q(void *row, qf_dtype dt, int64_t i, float v) {
  if (dt == QF_E4M3FN)
    ((uint8_t *)row)[i] = qf_e4m3fn_from_f32(v);
  else if (dt == QF_E4M3FNUZ)
    ((uint8_t *)row)[i] = qf_e4m3fnuz_from_f32(v);
  else
    ((int8_t *)row)[i] = qf_int8_from_f32(v);
}

static float qmax_of(qf_dtype q) { return qf_qmax(q == QF_I8, q == QF_E4M3FNUZ); }

/* Quantizes v[0, n) with scale s into q's row at column c0. */
static void quantize_span(void *qrow, qf_dtype qt, int64_t c0, const float *v, int64_t n, float s) {
  float inv = qf_inv_scale(s);
  for (int64_t i = 0; i < n; i++) store_q(qrow, qt, c0 + i, v[i] * inv);
}

static float span_amax(const float *v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; i++) amax = qf_nan_max(amax, qf_absf(v[i]));
  return amax;
}

/* Group-quantizes one row of values v[0, K) as row m: scales through the shared rule. */
static void quantize_row_groups(const float *v, int64_t K, int G, int64_t m, void *qrow, qf_dtype qt,
                                const qf_scale_out *so) {
  for (int64_t g = 0; g < K / G; g++) {
    float s = qf_group_scale(span_amax(v + g * G, G), qmax_of(qt), so->ub != NULL, so->ub ? *so->ub : 0.0f,
                             so->scale_min, so->format != QF_SCALE_F32);
    qf_store_group_scale(so->data, so->ld, so->layout, so->format, m, g, s);
    quantize_span(qrow, qt, g * G, v + g * G, G, s);
  }
}

/* Quantizes a whole row v[0, K) with one scale (per token) and returns the scale. */
static float quantize_row_token(const float *v, int64_t K, void *qrow, qf_dtype qt, const float *ub, float floor) {
  float s = qf_group_scale(span_amax(v, K), qmax_of(qt), ub != NULL, ub ? *ub : 0.0f, floor, 0);
  quantize_span(qrow, qt, 0, v, K, s);
  return s;
}

/* Zero scales for the padding rows [M, M + pad_rows) of the TMA-aligned layouts. */
static void zero_pad_rows(const qf_scale_out *so, int64_t M, int64_t groups) {
  for (int64_t m = M; m < M + so->pad_rows; m++)
    for (int64_t g = 0; g < groups; g++) qf_store_group_scale(so->data, so->ld, so->layout, so->format, m, g, 0.0f);
  if (so->format == QF_SCALE_UE8M0_PACKED) /* bytes of the last word past the last group */
    for (int64_t m = 0; m < M + so->pad_rows; m++)
      for (int64_t g = groups; g % 4; g++) ((uint8_t *)so->data)[4 * ((g / 4) * so->ld + m) + g % 4] = 0;
}

qf_status qf_cpu_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a) {
  (void)ctx;
  const float inv = qf_inv_scale(a->scale[0]); /* NaN for a bad scale: every output poisoned */
  for (int64_t r = 0; r < a->x.rows; r++) {
    const void *xr = qf_cpu_row(&a->x, r);
    void *qr = qf_cpu_row(&a->q, r);
    for (int64_t c = 0; c < a->x.cols; c++) store_q(qr, a->q.dtype, c, qf_cpu_get(a->x.dtype, xr, c) * inv);
  }
  return QF_OK;
}

qf_status qf_cpu_quant_group(qf_ctx *ctx, const qf_group_quant_args *a) {
  const int64_t M = a->q.rows, K = a->q.cols;
  float *v = malloc((size_t)K * sizeof *v);
  if (!v) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_quant_group: no memory for a row of %lld floats", (long long)K);
  for (int64_t m = 0; m < M; m++) {
    const void *xr = qf_cpu_row(&a->x, m);
    for (int64_t k = 0; k < K; k++)
      v[k] = a->glu ? qf_glu(qf_cpu_get(a->x.dtype, xr, k), qf_cpu_get(a->x.dtype, xr, K + k), a->alpha, a->limit, a->up_plus_one)
                    : qf_cpu_get(a->x.dtype, xr, k);
    quantize_row_groups(v, K, a->group_size, m, qf_cpu_row(&a->q, m), a->q.dtype, &a->scales);
  }
  zero_pad_rows(&a->scales, M, K / a->group_size);
  free(v);
  return QF_OK;
}

qf_status qf_cpu_quant_token(qf_ctx *ctx, const qf_token_quant_args *a) {
  const int64_t M = a->x.rows, K = a->x.cols;
  float *v = malloc((size_t)K * sizeof *v);
  if (!v) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_quant_token: no memory for a row of %lld floats", (long long)K);
  for (int64_t m = 0; m < M; m++) {
    const void *xr = qf_cpu_row(&a->x, m);
    void *qr = qf_cpu_row(&a->q, m);
    for (int64_t k = 0; k < K; k++) v[k] = qf_cpu_get(a->x.dtype, xr, k);
    if (!a->azp) {
      a->scales[m] = quantize_row_token(v, K, qr, a->q.dtype, a->ub, a->scale_min);
      continue;
    }
    float lo = v[0], hi = v[0];
    for (int64_t k = 1; k < K; k++) lo = qf_nan_min(lo, v[k]), hi = qf_nan_max(hi, v[k]);
    int8_t *q8 = qr;
    if (!(qf_absf(lo) <= QF_F32_MAX && qf_absf(hi) <= QF_F32_MAX)) {
      a->scales[m] = qf_qnan();
      a->azp[m] = 0;
      for (int64_t k = 0; k < K; k++) q8[k] = 0;
      continue;
    }
    float s = qf_nan_max((hi - lo) / 255.0f, a->scale_min), inv = qf_inv_scale(s);
    int32_t azp = qf_rne_i32(-128.0f - QF_MUL_RN(lo, inv));
    azp = azp < -128 ? -128 : azp > 127 ? 127 : azp;
    a->scales[m] = s;
    a->azp[m] = azp;
    for (int64_t k = 0; k < K; k++) {
      int32_t t = qf_rne_i32(QF_MUL_RN(v[k], inv)) + azp;
      q8[k] = (int8_t)(t < -128 ? -128 : t > 127 ? 127 : t);
    }
  }
  free(v);
  return QF_OK;
}

qf_status qf_cpu_quant_tensor_dynamic(qf_ctx *ctx, const qf_tensor_dynamic_args *a) {
  float amax = 0.0f;
  for (int64_t m = 0; m < a->x.rows; m++) {
    const void *xr = qf_cpu_row(&a->x, m);
    for (int64_t k = 0; k < a->x.cols; k++) amax = qf_nan_max(amax, qf_absf(qf_cpu_get(a->x.dtype, xr, k)));
  }
  float s = qf_group_scale(amax, qmax_of(a->q.dtype), 0, 0.0f, a->scale_min, 0);
  *a->scale = s;
  qf_quant_tensor_args st = {a->x, a->q, a->scale};
  return qf_cpu_quant_per_tensor(ctx, &st);
}

/* Rounds an fp32 value to x's 16-bit dtype (the residual stream's precision). */
static uint16_t to_half_bits(qf_dtype dt, float v) {
  if (v != v) return dt == QF_BF16 ? 0x7fc0 : 0x7e00; /* one NaN: the sign of Inf - Inf differs by CPU */
  return dt == QF_BF16 ? qf_bf16_from_f32(v) : qf_f16_from_f32(v);
}

qf_status qf_cpu_rms_norm_quant(qf_ctx *ctx, const qf_rms_norm_quant_args *a) {
  const int64_t M = a->x.rows, K = a->x.cols;
  const qf_dtype dt = a->x.dtype;
  float *v = malloc((size_t)K * sizeof *v);
  if (!v) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_rms_norm_quant: no memory for a row of %lld floats", (long long)K);
  for (int64_t m = 0; m < M; m++) {
    const void *xr = qf_cpu_row(&a->x, m);
    double ss = 0.0;
    for (int64_t k = 0; k < K; k++) {
      float y = qf_cpu_get(dt, xr, k);
      if (a->residual.data) {
        uint16_t *rr = qf_cpu_row(&a->residual, m);
        uint16_t yb = to_half_bits(dt, y + qf_cpu_get(dt, rr, k));
        rr[k] = yb;
        y = dt == QF_BF16 ? qf_bf16_to_f32(yb) : qf_f16_to_f32(yb);
      }
      v[k] = y;
      ss += (double)y * (double)y;
    }
    float r = 1.0f / sqrtf((float)(ss / (double)K) + a->eps);
    for (int64_t k = 0; k < K; k++) v[k] = QF_MUL_RN(QF_MUL_RN(v[k], r), qf_cpu_get(dt, a->weight, k));
    void *qr = qf_cpu_row(&a->q, m);
    if (a->group_size == -1) {
      ((float *)a->scales.data)[m] = quantize_row_token(v, K, qr, a->q.dtype, a->scales.ub, a->scales.scale_min);
    } else {
      quantize_row_groups(v, K, a->group_size, m, qr, a->q.dtype, &a->scales);
    }
  }
  if (a->group_size != -1) zero_pad_rows(&a->scales, M, K / a->group_size);
  free(v);
  return QF_OK;
}
