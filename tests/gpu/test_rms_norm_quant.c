/* qf_rms_norm_quant on CUDA against the CPU reference through the public API, byte for byte: q,
 * scales and the residual written back, per token and per group (G 32/64/128, every scale layout
 * and format), bf16 and fp16, e4m3fn / e4m3fnuz / int8, with and without residual and scale_ub.
 * Every output is poisoned before the call and followed by a sentinel; row gaps are compared (the
 * residual's gaps hold data that must survive, x's gaps hold values no kernel may read). Rows:
 * activations with outliers, NaN/Inf in some (including +Inf + -Inf through the residual), one
 * all zero (r = 1 / sqrt(eps)), tiny rows (eps dominates), huge bf16 rows (the fp32 mean square
 * overflows); odd K, misaligned pitches (scalar path), rows longer than one tile. */
#include <inttypes.h>
#include <string.h>

#include "check.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

/* ---- inputs ------------------------------------------------------------------------------- */

static uint16_t half_bits(qf_dtype dt, float v) { return dt == QF_BF16 ? qf_bf16_from_f32(v) : qf_f16_from_f32(v); }

/* Element of row r: row 1 zeros, every 7th from 3 NaN/Inf, every 11th from 5 tiny, every 13th
 * from 6 huge (bf16 only), the rest activations with outliers. */
static float sample(uint64_t *seed, int64_t r, qf_dtype dt) {
  if (r == 1) return 0.0f;
  float v = rng_activation(seed, 1.5f, r % 7 == 3);
  if (r % 11 == 5) return v * 1e-6f;
  if (r % 13 == 6 && dt == QF_BF16) return v * 1e25f;
  return v;
}

/* rows x ld 16-bit elements; columns in [cols, ld) get `gap` (NaN for x: never to be read). */
static uint16_t *make_rows(qf_dtype dt, int64_t rows, int64_t cols, int64_t ld, float gap, uint64_t *seed) {
  uint16_t *buf = malloc((size_t)(rows * ld) * 2 + 16);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++) buf[r * ld + c] = half_bits(dt, c < cols ? sample(seed, r, dt) : gap);
  return buf;
}

/* ---- one case ------------------------------------------------------------------------------- */

typedef struct {
  qf_dtype xt, qt;
  int residual, ub;
  int group;       /* -1: per token; else 32, 64, 128 */
  int layout, format;
  float eps;
} rms_variant;

static const char *layout_name(int l) { return l == 0 ? "ROW_MAJOR" : l == 1 ? "COL_MAJOR" : "COL_MAJOR_TMA"; }
static const char *format_name(int f) { return f == 0 ? "F32" : f == 1 ? "F32_POW2" : "UE8M0_PACKED"; }

static void rms_case(qf_ctx *gpu, qf_ctx *cpu, rms_variant v, int64_t M, int64_t K, int64_t xld, int64_t rld,
                     int64_t qld, uint64_t *seed) {
  char desc[256];
  snprintf(desc, sizeof desc, "rms_norm_quant %s->%s%s%s G=%d %s %s M=%" PRId64 " K=%" PRId64 " xld=%" PRId64
           " rld=%" PRId64 " qld=%" PRId64, qf_dtype_name(v.xt), qf_dtype_name(v.qt), v.residual ? " residual" : "",
           v.ub ? " ub" : "", v.group, v.group > 0 ? layout_name(v.layout) : "-", v.group > 0 ? format_name(v.format) : "-",
           M, K, xld, rld, qld);
  uint16_t *hx = make_rows(v.xt, M, K, xld, NAN, seed);
  uint16_t *hr = make_rows(v.xt, M, K, rld, 7.0f, seed);
  uint16_t *hw = malloc((size_t)K * 2);
  for (int64_t k = 0; k < K; k++) hw[k] = half_bits(v.xt, 1.0f + 0.5f * rng_normal(seed));
  /* +Inf + -Inf through the residual: y is NaN, stored as the canonical NaN. */
  if (v.residual && M > 3 && K > 2) hx[3 * xld + 2] = half_bits(v.xt, INFINITY), hr[3 * rld + 2] = half_bits(v.xt, -INFINITY);

  /* The scales tensor: [M] per token; else as the layout and format say (qfuse.h). */
  const int64_t KG = v.group > 0 ? K / v.group : 0, Mp = (M + 3) / 4 * 4;
  int64_t s_rows, s_cols, s_ld;
  qf_dtype s_dt = QF_F32;
  if (v.group < 0) s_rows = 1, s_cols = M, s_ld = M;
  else if (v.layout == QF_SCALE_ROW_MAJOR) s_rows = M, s_cols = KG, s_ld = KG + (M > 2 ? 3 : 0);
  else if (v.format == QF_SCALE_UE8M0_PACKED) s_rows = (KG + 3) / 4, s_cols = M, s_ld = Mp, s_dt = QF_I32;
  else s_rows = KG, s_cols = M, s_ld = v.layout == QF_SCALE_COL_MAJOR_TMA ? Mp : M;

  pair X, R, W, Q, S, U;
  pair_init(&X, (size_t)(M * xld) * 2, hx);
  pair_init(&R, (size_t)(M * rld) * 2, hr);
  pair_init(&W, (size_t)K * 2, hw);
  pair_init(&Q, (size_t)(M * qld), NULL);
  pair_init(&S, (size_t)(s_rows * s_ld) * 4, NULL);
  const float ub = 0.02f;
  pair_init(&U, 4, &ub);

  tensor2d cx, gx, cr, gr, cq, gq, cs, gs;
  tensor2d_init(&cx, X.ref, v.xt, M, K, xld, kDLCPU);
  tensor2d_init(&gx, X.dev, v.xt, M, K, xld, kDLCUDA);
  tensor2d_init(&cr, R.ref, v.xt, M, K, rld, kDLCPU);
  tensor2d_init(&gr, R.dev, v.xt, M, K, rld, kDLCUDA);
  tensor2d_init(&cq, Q.ref, v.qt, M, K, qld, kDLCPU);
  tensor2d_init(&gq, Q.dev, v.qt, M, K, qld, kDLCUDA);
  tensor2d_init(&cs, S.ref, s_dt, s_rows, s_cols, s_ld, kDLCPU);
  tensor2d_init(&gs, S.dev, s_dt, s_rows, s_cols, s_ld, kDLCUDA);
  if (v.group < 0) { /* [M] */
    cs.t.ndim = gs.t.ndim = 1;
    cs.t.shape = gs.t.shape = &cs.shape[1];
    cs.t.strides = gs.t.strides = NULL;
  }
  int64_t k_shape = K, one = 1;
  DLTensor cw = {.data = W.ref, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(v.xt), .shape = &k_shape};
  DLTensor gw = cw, cu = {.data = U.ref, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
  DLTensor gu = cu;
  gw.data = W.dev, gw.device.device_type = kDLCUDA;
  gu.data = U.dev, gu.device.device_type = kDLCUDA;

  qf_rms_norm_quant_opts co = {.eps = v.eps, .group_size = v.group};
  co.group.scale_layout = (qf_scale_layout)v.layout;
  co.group.scale_format = (qf_scale_format)v.format;
  qf_rms_norm_quant_opts go = co;
  co.group.scale_ub = v.ub ? &cu : NULL;
  go.group.scale_ub = v.ub ? &gu : NULL;

  qf_status st = qf_rms_norm_quant(cpu, &cx.t, v.residual ? &cr.t : NULL, &cw, &cq.t, &cs.t, &co);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  st = qf_rms_norm_quant(gpu, &gx.t, v.residual ? &gr.t : NULL, &gw, &gq.t, &gs.t, &go);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&Q, "q", desc);
  pair_check(&S, "scales", desc);
  pair_check(&R, "residual", desc);
  pair_check(&X, "x (input)", desc);
  pair_check(&W, "weight (input)", desc);

  pair_free(&X), pair_free(&R), pair_free(&W), pair_free(&Q), pair_free(&S), pair_free(&U);
  free(hx), free(hr), free(hw);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x125A0;
  const qf_dtype xts[] = {QF_BF16, QF_F16}, qts[] = {QF_E4M3FN, QF_E4M3FNUZ, QF_I8};
  /* (layout, format) pairs the API accepts. */
  static const int scale_kinds[][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2}};
  const int n_kinds = (int)(sizeof scale_kinds / sizeof scale_kinds[0]);

  /* M, K, extra pitch of x, residual (elements) and q (bytes). Odd pitches or K % 8 != 0 take
   * the scalar path. Rows split over a cluster of 2 to 8 CTAs: fewer rows than SMs with K >= 8192
   * (uneven slices for 70000 and 18000, the last on the scalar path), more with K > 16384 (4097 x
   * 18432, 200 x 40960). 2 x 300000 is more than one tile (512 x 8 chunks of 8) per CTA. */
  static const int64_t shapes[][5] = {
      {1, 64, 0, 0, 0},       {2, 96, 0, 0, 0},        {3, 1344, 8, 16, 8},    {17, 128, 0, 0, 0},
      {17, 7168, 0, 0, 0},    {3, 18432, 0, 8, 0},     {5, 5000, 0, 0, 0},     {2, 77, 3, 1, 5},
      {6, 384, 3, 0, 0},      {4, 256, 0, 0, 3},       {2, 40960, 0, 0, 0},    {2, 70000, 0, 0, 0},
      {128, 2048, 0, 0, 0},   {4097, 2048, 0, 0, 0},   {4097, 7168, 0, 0, 0},  {4097, 18432, 8, 8, 16},
      {3, 18000, 3, 0, 0},    {100, 9216, 0, 0, 0},   {200, 40960, 0, 0, 0},  {2, 300000, 0, 0, 0},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t M = shapes[s][0], K = shapes[s][1];
    const int64_t xld = K + shapes[s][2], rld = K + shapes[s][3], qld = K + shapes[s][4];
    const int big = M * K > (1 << 21), long_row = K > 20000;
    if (quick && (big || long_row)) continue;
    const float eps = s % 2 ? 1e-5f : 0.0f;
    if (big) { /* three variants, different for each shape */
      const int g = K % 128 == 0 ? 128 : 32;
      rms_case(gpu, cpu, (rms_variant){xts[s % 2], qts[s % 3], 1, 0, -1, 0, 0, eps}, M, K, xld, rld, qld, &seed);
      rms_case(gpu, cpu, (rms_variant){xts[(s + 1) % 2], qts[(s + 1) % 3], 1, 1, g, 2, (int)(s % 3), eps}, M, K, xld, rld,
               qld, &seed);
      rms_case(gpu, cpu, (rms_variant){xts[s % 2], qts[(s + 2) % 3], 0, 0, g / 2, 0, 0, eps}, M, K, xld, rld, qld, &seed);
      continue;
    }
    int n = 0;
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 3; b++)
        for (int res = 0; res < 2; res++) {
          /* per token, with and without scale_ub */
          for (int ub = 0; ub < 2; ub++, n++)
            if (!long_row || n % 4 == (int)(s % 4))
              rms_case(gpu, cpu, (rms_variant){xts[a], qts[b], res, ub, -1, 0, 0, eps}, M, K, xld, rld, qld, &seed);
          /* per group: every G that divides K, every scale kind; long rows a few */
          for (int g = 32; g <= 128; g *= 2)
            for (int k = 0; k < n_kinds; k++, n++)
              if (K % g == 0 && (!long_row || n % 23 == (int)(s % 23)))
                rms_case(gpu, cpu, (rms_variant){xts[a], qts[b], res, (n / 5) % 2, g, scale_kinds[k][0], scale_kinds[k][1], eps},
                         M, K, xld, rld, qld, &seed);
        }
  }
  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_rms_norm_quant");
}
