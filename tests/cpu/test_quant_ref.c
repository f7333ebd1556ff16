/* The CPU reference of qf_quant_per_tensor against an independent oracle: every output must
 * decode to the representable value nearest to fp32(x * fp32(1/scale)), found by brute force over
 * all codes (ties to the even code), plus hand-checked cases. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "oracle.h"
#include "formats/formats.h"
#include "qfuse.h"
#include "tensors.h"

static int8_t oracle_int8(float v) {
  if (isnan(v)) return 0;
  double r = nearbyint((double)v); /* default rounding mode: ties to even */
  return (int8_t)(r > 127 ? 127 : r < -128 ? -128 : r);
}

static void run(qf_ctx *ctx, const float *x, int64_t rows, int64_t cols, int64_t xld, qf_dtype qt, int64_t qld,
                float scale, uint8_t *q) {
  tensor2d xt, qtt;
  tensor2d_init(&xt, (void *)x, QF_F32, rows, cols, xld, kDLCPU);
  tensor2d_init(&qtt, q, qt, rows, cols, qld, kDLCPU);
  _Alignas(16) float s[4] = {scale};
  int64_t one = 1;
  DLTensor st = {.data = s, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
  qf_status status = qf_quant_per_tensor(ctx, &xt.t, &st, &qtt.t);
  CHECK(status == QF_OK, "quant_per_tensor: %s", qf_ctx_last_error(ctx));
}

static void test_random_against_oracle(qf_ctx *ctx) {
  enum { R = 7, C = 45, XLD = 52, QLD = 64 };
  _Alignas(16) static float x[R * XLD];
  _Alignas(16) static uint8_t q[R * QLD];
  uint64_t seed = 0x1234567;
  const float scales[] = {0.0173f, 1.0f, 3.7e-3f, 250.0f};
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < R * XLD; i++) x[i] = rng_activation(&seed, 2.0f, 1);
    for (int t = 0; t < 2; t++) {
      qf_dtype qt = t ? QF_I8 : QF_E4M3FN;
      memset(q, POISON, sizeof q);
      run(ctx, x, R, C, XLD, qt, QLD, scales[k], q);
      float inv = 1.0f / scales[k];
      for (int r = 0; r < R; r++) {
        for (int c = 0; c < QLD; c++) {
          uint8_t got = q[r * QLD + c];
          if (c >= C) {
            CHECK(got == POISON, "row gap written at (%d, %d)", r, c);
            continue;
          }
          float v = x[r * XLD + c] * inv;
          uint8_t want = qt == QF_E4M3FN ? oracle_e4m3fn(v) : (uint8_t)oracle_int8(v);
          CHECK(got == want, "%s scale %g x=%g -> %g: got 0x%02x want 0x%02x", qf_dtype_name(qt), scales[k],
                x[r * XLD + c], v, got, want);
        }
      }
    }
  }
}

static void test_hand_cases(qf_ctx *ctx) {
  /* scale 2: 1 -> 0.5 = 0x30; 3000 -> 1500 saturates to 448 = 0x7E; -Inf -> -448 = 0xFE;
   * NaN -> 0x7F; 0.01 -> 0.005 = 2.56 * 2^-9 -> subnormal code 3; -0 -> 0x80; 0.5 -> 0.25 = 0x28 */
  _Alignas(16) float x[8] = {1.0f, 3000.0f, -INFINITY, NAN, 0.01f, -0.0f, 0.5f, 5.0f};
  const uint8_t want_f8[8] = {0x30, 0x7e, 0xfe, 0x7f, 0x03, 0x80, 0x28, 0x42};
  /* int8 with scale 2: 0.5 -> 0 (tie to even), 1500 -> 127, -Inf -> -128, NaN -> 0, 0.005 -> 0,
   * -0 -> 0, 0.25 -> 0, 2.5 -> 2 (tie to even) */
  const int8_t want_i8[8] = {0, 127, -128, 0, 0, 0, 0, 2};
  _Alignas(16) uint8_t q[16];
  memset(q, POISON, sizeof q);
  run(ctx, x, 1, 8, 8, QF_E4M3FN, 8, 2.0f, q);
  for (int i = 0; i < 8; i++) CHECK(q[i] == want_f8[i], "e4m3fn case %d: got 0x%02x want 0x%02x", i, q[i], want_f8[i]);
  CHECK(q[8] == POISON, "sentinel after 8 outputs");
  run(ctx, x, 1, 8, 8, QF_I8, 8, 2.0f, q);
  for (int i = 0; i < 8; i++) CHECK((int8_t)q[i] == want_i8[i], "int8 case %d: got %d want %d", i, (int8_t)q[i], want_i8[i]);

  /* A scale that is not finite and positive poisons every output (contract in qfuse.h). */
  const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
  for (int b = 0; b < 4; b++) {
    run(ctx, x, 1, 8, 8, QF_E4M3FN, 8, bad[b], q);
    for (int i = 0; i < 8; i++) CHECK(q[i] == 0x7f, "bad scale %g: e4m3fn output %d is 0x%02x, want NaN", bad[b], i, q[i]);
    run(ctx, x, 1, 8, 8, QF_I8, 8, bad[b], q);
    for (int i = 0; i < 8; i++) CHECK(q[i] == 0, "bad scale %g: int8 output %d is %d, want 0", bad[b], i, (int8_t)q[i]);
  }
}

/* bf16 and fp16 inputs widen exactly: the result equals the fp32 path on the widened values. */
static void test_half_inputs(qf_ctx *ctx) {
  enum { N = 64 };
  _Alignas(16) uint16_t h[N];
  _Alignas(16) float f[N];
  _Alignas(16) uint8_t qa[N], qb[N];
  uint64_t seed = 99;
  for (int t = 0; t < 2; t++) {
    qf_dtype dt = t ? QF_F16 : QF_BF16;
    for (int i = 0; i < N; i++) {
      float v = rng_activation(&seed, 3.0f, 1);
      h[i] = t ? qf_f16_from_f32(v) : qf_bf16_from_f32(v);
      f[i] = t ? qf_f16_to_f32(h[i]) : qf_bf16_to_f32(h[i]);
    }
    tensor2d xt, qt;
    tensor2d_init(&xt, h, dt, 1, N, N, kDLCPU);
    tensor2d_init(&qt, qa, QF_E4M3FN, 1, N, N, kDLCPU);
    _Alignas(16) float s[4] = {0.05f};
    int64_t one = 1;
    DLTensor st = {.data = s, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
    CHECK(qf_quant_per_tensor(ctx, &xt.t, &st, &qt.t) == QF_OK, "%s input: %s", qf_dtype_name(dt), qf_ctx_last_error(ctx));
    run(ctx, f, 1, N, N, QF_E4M3FN, N, 0.05f, qb);
    CHECK(memcmp(qa, qb, N) == 0, "%s input differs from the fp32 path on the same values", qf_dtype_name(dt));
  }
}

int main(void) {
  qf_ctx *ctx;
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  test_random_against_oracle(ctx);
  test_hand_cases(ctx);
  test_half_inputs(ctx);
  qf_ctx_destroy(ctx);
  return check_finish("test_quant_ref");
}
