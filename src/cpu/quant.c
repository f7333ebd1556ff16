/* CPU reference of the quantization family: the oracle the CUDA kernels are checked against.
 * Plain C11, clear over clever. The numerics contract is docs/NUMERICS.md. */
#include "core/backend.h"
#include "formats/formats.h"

/* Element i of a row of x, widened to fp32 (exact for every input type). */
static float load_f32(const void *row, qf_dtype dt, int64_t i) {
  switch (dt) {
    case QF_BF16: return qf_bf16_to_f32(((const uint16_t *)row)[i]);
    case QF_F16: return qf_f16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
  }
}

/* Rounds v (already divided by the scale) to the output type, storing element i of a row. */
static void store_q(void *row, qf_dtype dt, int64_t i, float v) {
  if (dt == QF_E4M3FN)
    ((uint8_t *)row)[i] = qf_e4m3fn_from_f32(v);
  else
    ((int8_t *)row)[i] = qf_int8_from_f32(v);
}

qf_status qf_cpu_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a) {
  (void)ctx;
  float scale = a->scale[0];
  /* 1/scale correctly rounded; a scale that is not finite and positive poisons every output. */
  float inv = (scale > 0.0f && scale <= 3.4028234663852886e38f) ? 1.0f / scale : qf_f32_from_bits(0x7fc00000u);
  size_t xsz = qf_dtype_size(a->x.dtype), qsz = qf_dtype_size(a->q.dtype);
  for (int64_t r = 0; r < a->x.rows; r++) {
    const char *xr = (const char *)a->x.data + r * a->x.ld * (int64_t)xsz;
    char *qr = (char *)a->q.data + r * a->q.ld * (int64_t)qsz;
    for (int64_t c = 0; c < a->x.cols; c++) store_q(qr, a->q.dtype, c, load_f32(xr, a->x.dtype, c) * inv);
  }
  return QF_OK;
}
