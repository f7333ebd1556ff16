/* qf_quant_token (symmetric e4m3fn / e4m3fnuz / int8 with and without scale_ub, asymmetric int8
 * with zero points) and qf_quant_tensor with dynamic = 1, on CUDA against the CPU reference
 * through the public API, byte for byte: q, scales, zero points and the dynamic scale. Every
 * output is poisoned before the call and followed by a sentinel; the gaps of strided rows are
 * compared too (both backends must leave them alone) and hold huge values and NaN on the input
 * side, so a kernel reading past a row's end changes a scale. Rows: random activations with
 * outliers, NaN/Inf in some, one all zero, one of tiny values (the scale floor), one of huge
 * values; odd K (scalar path), misaligned pitches, rows longer than one tile. */
#include <inttypes.h>
#include <string.h>

#include "check.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

static size_t esz(qf_dtype t) { return t == QF_F32 || t == QF_I32 ? 4 : t == QF_BF16 || t == QF_F16 ? 2 : 1; }

/* ---- inputs ------------------------------------------------------------------------------- */

/* Row r of an M-row input: row 1 zeros, every 7th from 3 NaN/Inf, every 11th from 5 tiny values,
 * every 13th from 6 huge values (bf16/fp32: ~1e30), the rest activations with outliers. */
static float sample(uint64_t *seed, int64_t r, qf_dtype dt) {
  if (r == 1) return 0.0f;
  float v = rng_activation(seed, 1.5f, r % 7 == 3);
  if (r % 11 == 5) return v * 1e-9f;
  if (r % 13 == 6 && dt != QF_F16) return v * 1e30f;
  return v;
}

/* rows x ld elements of dt; columns in [cols, ld) hold values no kernel may read: huge, NaN. */
static void *make_input(qf_dtype dt, int64_t rows, int64_t cols, int64_t ld, uint64_t *seed) {
  void *buf = malloc((size_t)(rows * ld) * esz(dt) + 16);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++)
      float_put(buf, dt, (size_t)(r * ld + c), c < cols ? sample(seed, r, dt) : (c % 2 ? NAN : 3e4f));
  return buf;
}

/* ---- qf_quant_token ------------------------------------------------------------------------ */

typedef struct {
  qf_dtype xt, qt;
  int asym, ub;
  float scale_min;
} token_variant;

static void token_case(qf_ctx *gpu, qf_ctx *cpu, token_variant v, int64_t M, int64_t K, int64_t xld, int64_t qld,
                       uint64_t *seed) {
  char desc[160];
  snprintf(desc, sizeof desc, "quant_token %s->%s%s%s M=%" PRId64 " K=%" PRId64 " xld=%" PRId64 " qld=%" PRId64,
           qf_dtype_name(v.xt), qf_dtype_name(v.qt), v.asym ? " asym" : "", v.ub ? " ub" : "", M, K, xld, qld);
  void *hx = make_input(v.xt, M, K, xld, seed);
  pair X, Q, S, Z, U;
  const size_t xbytes = (size_t)(M * xld) * esz(v.xt);
  pair_init(&X, xbytes, hx);
  pair_init(&Q, (size_t)(M * qld), NULL);
  pair_init(&S, (size_t)M * 4, NULL);
  pair_init(&Z, (size_t)M * 4, NULL);
  const float ub = 0.05f;
  pair_init(&U, 4, &ub);

  tensor2d cx, gx, cq, gq;
  tensor2d_init(&cx, X.ref, v.xt, M, K, xld, kDLCPU);
  tensor2d_init(&gx, X.dev, v.xt, M, K, xld, kDLCUDA);
  tensor2d_init(&cq, Q.ref, v.qt, M, K, qld, kDLCPU);
  tensor2d_init(&gq, Q.dev, v.qt, M, K, qld, kDLCUDA);
  int64_t m_shape = M, one = 1;
  DLTensor cs, gs, cz, gz, cu, gu;
  cs = dl_tensor(S.ref, QF_F32, 1, &m_shape, kDLCPU);
  gs = dl_tensor(S.dev, QF_F32, 1, &m_shape, kDLCUDA);
  cz = dl_tensor(Z.ref, QF_I32, 1, &m_shape, kDLCPU);
  gz = dl_tensor(Z.dev, QF_I32, 1, &m_shape, kDLCUDA);
  cu = dl_tensor(U.ref, QF_F32, 1, &one, kDLCPU);
  gu = dl_tensor(U.dev, QF_F32, 1, &one, kDLCUDA);
  qf_token_quant_opts co = {v.scale_min, v.ub ? &cu : NULL}, go = {v.scale_min, v.ub ? &gu : NULL};

  qf_status st = qf_quant_token(cpu, &cx.t, &cq.t, &cs, v.asym ? &cz : NULL, &co);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  st = qf_quant_token(gpu, &gx.t, &gq.t, &gs, v.asym ? &gz : NULL, &go);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&Q, "q", desc);
  pair_check(&S, "scales", desc);
  pair_check(&Z, "azp", desc);
  pair_check(&X, "x (input)", desc);

  pair_free(&X), pair_free(&Q), pair_free(&S), pair_free(&Z), pair_free(&U);
  free(hx);
}

/* ---- qf_quant_tensor, dynamic ------------------------------------------------------------- */

/* kind 0: activations with outliers, all finite; 1: the same with one NaN; 2: with one -Inf;
 * 3: all zeros (the floor). ndim 1: a [K] tensor (M must be 1). */
static void tensor_case(qf_ctx *gpu, qf_ctx *cpu, qf_dtype xt, qf_dtype qt, int64_t M, int64_t K, int64_t xld,
                        int64_t qld, int kind, int ndim, float scale_min, uint64_t *seed) {
  char desc[160];
  snprintf(desc, sizeof desc, "quant_tensor dynamic %s->%s M=%" PRId64 " K=%" PRId64 " xld=%" PRId64 " qld=%" PRId64
           " kind=%d ndim=%d", qf_dtype_name(xt), qf_dtype_name(qt), M, K, xld, qld, kind, ndim);
  void *hx = make_input(xt, M, K, xld, seed); /* for the gaps */
  for (int64_t r = 0; r < M; r++)
    for (int64_t c = 0; c < K; c++) float_put(hx, xt, (size_t)(r * xld + c), kind == 3 ? 0.0f : rng_activation(seed, 1.5f, 0));
  if (kind == 1 || kind == 2) float_put(hx, xt, (size_t)((M - 1) * xld + K / 2), kind == 1 ? NAN : -INFINITY);

  pair X, Q, S;
  pair_init(&X, (size_t)(M * xld) * esz(xt), hx);
  pair_init(&Q, (size_t)(M * qld), NULL);
  pair_init(&S, 4, NULL);
  tensor2d cx, gx, cq, gq;
  tensor2d_init(&cx, X.ref, xt, M, K, xld, kDLCPU);
  tensor2d_init(&gx, X.dev, xt, M, K, xld, kDLCUDA);
  tensor2d_init(&cq, Q.ref, qt, M, K, qld, kDLCPU);
  tensor2d_init(&gq, Q.dev, qt, M, K, qld, kDLCUDA);
  if (ndim == 1) { /* the same tensors as [K] */
    cx.t.ndim = gx.t.ndim = cq.t.ndim = gq.t.ndim = 1;
    cx.t.shape = gx.t.shape = cq.t.shape = gq.t.shape = &cx.shape[1];
    cx.t.strides = gx.t.strides = cq.t.strides = gq.t.strides = NULL;
  }
  int64_t one = 1;
  DLTensor cs, gs;
  cs = dl_tensor(S.ref, QF_F32, 1, &one, kDLCPU);
  gs = dl_tensor(S.dev, QF_F32, 1, &one, kDLCUDA);
  qf_tensor_quant_opts o = {1, scale_min};

  qf_status st = qf_quant_tensor(cpu, &cx.t, &cq.t, &cs, &o);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  st = qf_quant_tensor(gpu, &gx.t, &gq.t, &gs, &o);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&S, "scale", desc);
  pair_check(&Q, "q", desc);
  pair_check(&X, "x (input)", desc);
  /* The scale the contract asks for, independently of the reference: NaN/Inf give NaN. */
  float s;
  memcpy(&s, S.got, 4);
  if (kind == 1 || kind == 2) CHECK(s != s, "%s: scale %g, expected NaN", desc, (double)s);
  if (kind == 3) CHECK(s == (scale_min > 0 ? scale_min : 1e-10f), "%s: scale %g, expected the floor", desc, (double)s);

  pair_free(&X), pair_free(&Q), pair_free(&S);
  free(hx);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x70CE11;
  const qf_dtype xts[] = {QF_BF16, QF_F16, QF_F32}, qts[] = {QF_E4M3FN, QF_E4M3FNUZ, QF_I8};

  /* M, K, extra x pitch (elements), extra q pitch (bytes). Pitches that are not multiples of
   * 16 bytes (x) or 8 bytes (q), and K % 8 != 0, take the scalar path. 70000 and 40000 columns
   * are more than one tile (8 x 512 chunks of 8 for 16-bit inputs, 4 x 512 for fp32). */
  static const int64_t shapes[][4] = {
      {1, 64, 0, 0},      {2, 96, 0, 0},      {3, 1344, 8, 8},   {17, 5000, 0, 24}, {17, 7168, 0, 0},
      {3, 18432, 0, 0},   {2, 77, 3, 5},      {5, 200, 3, 0},    {4, 256, 0, 3},    {3, 70000, 0, 0},
      {2, 40000, 8, 0},   {64, 2048, 0, 0},   {4097, 2048, 0, 0}, {4097, 7168, 0, 0}, {4097, 18432, 8, 16},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t M = shapes[s][0], K = shapes[s][1], xld = K + shapes[s][2], qld = K + shapes[s][3];
    const int big = M * K > (1 << 21);
    if (quick && (big || K > 20000)) continue;
    const float scale_min = s % 3 == 2 ? 1e-4f : 0.0f;
    int n = 0;
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        for (int ub = 0; ub < 2; ub++, n++) /* big shapes: a rotating sixth of the variants */
          if (!big || n % 6 == (int)(s % 6))
            token_case(gpu, cpu, (token_variant){xts[a], qts[b], 0, ub, scale_min}, M, K, xld, qld, &seed);
    for (int a = 0; a < 3; a++)
      if (!big || a == (int)(s % 3))
        token_case(gpu, cpu, (token_variant){xts[a], QF_I8, 1, 0, scale_min}, M, K, xld, qld, &seed);
  }

  /* Up to about a million chunks of 8 the fused one-kernel path runs (128 x 18432 near its limit,
   * 2 x 77 on its scalar path, 70000 x 16 with many short rows); 4097 x 7168 takes the two passes. */
  static const int64_t tshapes[][4] = {
      {1, 64, 0, 0},        {3, 1344, 8, 8},     {17, 5000, 0, 0},   {2, 77, 3, 5},
      {128, 18432, 0, 0},   {70000, 16, 0, 0},   {4097, 7168, 0, 0},
  };
  for (size_t s = 0; s < sizeof tshapes / sizeof tshapes[0]; s++) {
    const int64_t M = tshapes[s][0], K = tshapes[s][1], xld = K + tshapes[s][2], qld = K + tshapes[s][3];
    const int big = M * K > (1 << 21);
    if (quick && big) continue;
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        tensor_case(gpu, cpu, xts[a], qts[b], M, K, xld, qld, 0, 2, 0.0f, &seed);
    for (int kind = 1; kind < 4; kind++)
      tensor_case(gpu, cpu, xts[kind - 1], qts[(s + kind) % 3], M, K, xld, qld, kind, 2, kind == 3 ? 1e-3f : 0.0f, &seed);
  }
  tensor_case(gpu, cpu, QF_BF16, QF_E4M3FN, 1, 4096, 4096, 4096, 0, 1, 0.0f, &seed);
  tensor_case(gpu, cpu, QF_F32, QF_I8, 1, 1000, 1000, 1000, 1, 1, 0.0f, &seed);

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_quant_token");
}
