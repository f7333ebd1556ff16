/* NVFP4 on the CPU backend: the packed layout (every code at every place of a word, both ways,
 * and the bit operations the GPU decodes it with), the block quantizer on hand-computed blocks,
 * qf_gemm_nvfp4 against a direct evaluation of its formula from the unpacked codes, and every
 * error path (outputs untouched). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/backend.h"
#include "formats/nvfp4.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

/* Every code at every place of a word, with random neighbours: unpack(pack(w)) == w, the GPU's
 * pair decoders give code * 2^-14 (fp16) and code * 2^-126 (bf16), and the run-time one the same
 * bits as the fixed ones. */
static void test_layout(void) {
  uint64_t seed = 11;
  long bad_round = 0, bad_f16 = 0, bad_bf16 = 0, bad_rot = 0;
  for (int place = 0; place < 8; place++)
    for (uint32_t code = 0; code < 16; code++)
      for (int rep = 0; rep < 64; rep++) {
        uint32_t w = (uint32_t)rng_next(&seed);
        w = (w & ~(0xFu << (4 * place))) | code << (4 * place);
        const uint32_t packed = qf_nvfp4_pack_word(w);
        bad_round += qf_nvfp4_unpack_word(packed) != w;
        const int p = place / 2, half = 16 * (place % 2);
        const double want = qf_e2m1_to_f32((uint8_t)code);
        const uint16_t h = (uint16_t)(qf_nvfp4_f16x2(packed, p) >> half);
        const uint16_t b = (uint16_t)(qf_nvfp4_bf16x2(packed, p) >> half);
        bad_f16 += ldexp(qf_f16_to_f32(h), 14) != want || (code == 8 && h != 0x8000);
        bad_bf16 += ldexp(qf_bf16_to_f32(b), 126) != want || (code == 8 && b != 0x8000);
        for (int q = 0; q < 4; q++) /* the run-time pair decoder of the prefill kernel, every pair */
          bad_rot += qf_nvfp4_pair(packed, qf_nvfp4_pair_rot(q, 0), 0) != qf_nvfp4_f16x2(packed, q) ||
                     qf_nvfp4_pair(packed, qf_nvfp4_pair_rot(q, 1), 1) != qf_nvfp4_bf16x2(packed, q);
      }
  CHECK(bad_round == 0, "pack/unpack: %ld words do not come back", bad_round);
  CHECK(bad_rot == 0, "run-time pair decoder: %ld pairs differ from the fixed ones", bad_rot);
  CHECK(bad_f16 == 0, "fp16 pair decoder: %ld codes wrong", bad_f16);
  CHECK(bad_bf16 == 0, "bf16 pair decoder: %ld codes wrong", bad_bf16);
  /* The layout is a permutation: distinct words stay distinct (all 2^32 is too many; the bits). */
  uint32_t seen = 0;
  for (int bit = 0; bit < 32; bit++) seen |= qf_nvfp4_pack_word(1u << bit);
  CHECK(seen == 0xFFFFFFFFu, "the packed layout covers bits %08x, not all 32", seen);
}

/* A [rows, cols] 2-D tensor over buf; dl() points its DLTensor at its own shape and strides
 * (wherever the struct was copied to) and hands it to a call. */
static tensor2d mat(void *buf, qf_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  tensor2d m;
  tensor2d_init(&m, buf, dt, rows, cols, ld, kDLCPU);
  return m;
}
static DLTensor *dl(tensor2d *m) {
  m->t.shape = m->shape;
  m->t.strides = m->strides;
  return &m->t;
}

/* Hand-computed blocks: scale rounding, code rounding and saturation, NaN ignored, a zero block. */
static void test_quant_blocks(void) {
  enum { K = 48 };
  float w[2 * K];
  uint8_t codes[2 * K / 2 + 8], scales[2 * K / 16 + 8];
  float ts = 0.5f;
  for (int i = 0; i < 2 * K; i++) w[i] = 0.0f;
  /* Row 0, block 0: amax 6 -> s = e4m3(6 / 3) = 2, codes w / 1. */
  const float b0[16] = {6, -6, 0.25f, 0.75f, 1.25f, 2.5f, -5, 3.2f, 0.1f, -0.3f, 1.75f, 4.9f, -2.2f, 0.5f, 1, -1.5f};
  memcpy(w, b0, sizeof b0);
  /* Block 1: amax 100 -> 100 / 3 = 33.33 -> e4m3 32; a NaN ignored by amax. */
  w[16] = 100.0f, w[17] = -17.0f, w[18] = NAN, w[19] = 40.0f;
  /* Block 2: all zero. Row 1, block 0: amax 3000 -> 1000 saturates to 448. */
  w[K] = 3000.0f, w[K + 1] = 1.0f;
  memset(codes, POISON, sizeof codes);
  memset(scales, POISON, sizeof scales);
  tensor2d wt = mat(w, QF_F32, 2, K, K), ct = mat(codes, QF_E2M1X2, 2, K, K), st = mat(scales, QF_E4M3FN, 2, K / 16, K / 16);
  int64_t one = 1;
  DLTensor tst = dl_tensor(&ts, QF_F32, 1, &one, kDLCPU);
  CHECK(qf_quant_nvfp4(ctx, dl(&wt), &tst, dl(&ct), dl(&st)) == QF_OK, "quant: %s", qf_ctx_last_error(ctx));
  CHECK(qf_e4m3fn_to_f32(scales[0]) == 2.0f, "block 0 scale %g, want 2", qf_e4m3fn_to_f32(scales[0]));
  const float want0[16] = {6, -6, 0, 1, 1, 2, -4, 3, 0, -0.5f, 2, 4, -2, 0.5f, 1, -1.5f}; /* w / (2 * 0.5), RNE */
  for (int i = 0; i < 16; i++) {
    const float got = qf_e2m1_to_f32(i % 2 ? qf_e2m1x2_hi(codes[i / 2]) : qf_e2m1x2_lo(codes[i / 2]));
    CHECK(got == want0[i], "block 0 element %d: code %g, want %g", i, got, want0[i]);
  }
  CHECK(qf_e4m3fn_to_f32(scales[1]) == 32.0f, "block 1 scale %g, want 32", qf_e4m3fn_to_f32(scales[1]));
  CHECK(qf_e2m1_to_f32(qf_e2m1x2_lo(codes[8])) == 6.0f && qf_e2m1_to_f32(qf_e2m1x2_hi(codes[8])) == -1.0f,
        "block 1 codes %02x", codes[8]); /* 100 / 16 = 6.25 -> 6; -17 / 16 -> -1 */
  CHECK(scales[2] == 0 && codes[16] == 0 && codes[23] == 0, "zero block: scale %02x codes %02x", scales[2], codes[16]);
  CHECK(qf_e4m3fn_to_f32(scales[3]) == 448.0f, "row 1 scale %g, want 448", qf_e4m3fn_to_f32(scales[3]));
  CHECK(codes[K / 2] == qf_e2m1x2_pack(0x7, 0x0), "row 1 codes %02x (3000 / 224 saturates to 6; 1 / 224 -> 0)", codes[K / 2]);
  CHECK(codes[2 * K / 2] == POISON && scales[2 * K / 16] == POISON, "quant wrote past its outputs");
}

/* Quantize, pack, multiply: against sum_k a[m, k] * code * scale * ts from the codes as stored. */
static void test_gemm(qf_dtype at, qf_dtype dt, int64_t M, int64_t N, int64_t K, int64_t pad) {
  const int64_t lda = K + 8 * pad, ldb = K + 32 * pad, lds = K / 16 + 2 * pad, ldd = N + pad;
  float *w = malloc(sizeof(float) * N * K), ts = 0.02f;
  uint16_t *a = malloc(2 * M * lda);
  uint8_t *codes = malloc(N * ldb / 2), *packed = malloc(N * ldb / 2), *scales = malloc(N * lds);
  uint8_t *d = malloc(4 * M * ldd + 64);
  uint64_t seed = (uint64_t)(M * 131 + N * 7 + K);
  for (int64_t i = 0; i < N * K; i++) w[i] = rng_normal(&seed) * (i % 97 == 0 ? 8.0f : 1.0f);
  for (int64_t i = 0; i < M * lda; i++) float_put(a, at, (size_t)i, rng_normal(&seed));
  memset(codes, POISON, N * ldb / 2);
  memset(scales, POISON, N * lds);
  memset(d, POISON, 4 * M * ldd + 64);
  int64_t one = 1;
  DLTensor tst = dl_tensor(&ts, QF_F32, 1, &one, kDLCPU);
  tensor2d wt = mat(w, QF_F32, N, K, K), ct = mat(codes, QF_E2M1X2, N, K, ldb), pt = mat(packed, QF_E2M1X2, N, K, ldb);
  tensor2d st = mat(scales, QF_E4M3FN, N, K / 16, lds), atn = mat(a, at, M, K, lda), dtn = mat(d, dt, M, N, ldd);
  CHECK(qf_quant_nvfp4(ctx, dl(&wt), &tst, dl(&ct), dl(&st)) == QF_OK, "quant: %s", qf_ctx_last_error(ctx));
  CHECK(qf_nvfp4_pack(ctx, dl(&ct), dl(&pt)) == QF_OK, "pack: %s", qf_ctx_last_error(ctx));
  CHECK(qf_gemm_nvfp4(ctx, dl(&atn), dl(&pt), dl(&st), &tst, dl(&dtn)) == QF_OK, "gemm: %s", qf_ctx_last_error(ctx));
  long bad = 0;
  double err2 = 0, ref2 = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) {
        const uint8_t byte = codes[n * ldb / 2 + k / 2];
        const double wq = qf_e2m1_to_f32(k % 2 ? qf_e2m1x2_hi(byte) : qf_e2m1x2_lo(byte)) *
                          (double)qf_e4m3fn_to_f32(scales[n * lds + k / 16]) * ts;
        acc += float_get(a, at, (size_t)(m * lda + k)) * wq;
      }
      const float want = (float)acc;
      const double want_out = dt == QF_F32 ? want : float_get(&(uint16_t){dt == QF_BF16 ? qf_bf16_from_f32(want) : qf_f16_from_f32(want)}, dt, 0);
      const double got = float_get(d, dt, (size_t)(m * ldd + n));
      bad += got != want_out; /* the reference rounds the float64 sum once: exact agreement */
      err2 += (got - acc) * (got - acc), ref2 += acc * acc;
    }
  CHECK(bad == 0, "gemm %s->%s M=%lld N=%lld K=%lld: %ld outputs differ from the formula", qf_dtype_name(at),
        qf_dtype_name(dt), (long long)M, (long long)N, (long long)K, bad);
  /* The codes approximate w (a sanity bound on the quantizer, relative Frobenius error). */
  double q2 = 0, w2 = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      const uint8_t byte = codes[n * ldb / 2 + k / 2];
      const double wq = qf_e2m1_to_f32(k % 2 ? qf_e2m1x2_hi(byte) : qf_e2m1x2_lo(byte)) *
                        (double)qf_e4m3fn_to_f32(scales[n * lds + k / 16]) * ts;
      q2 += (wq - w[n * K + k]) * (wq - w[n * K + k]), w2 += (double)w[n * K + k] * w[n * K + k];
    }
  CHECK(sqrt(q2 / w2) < 0.12, "quantization error %.3f of |w| (NVFP4 of a normal weight is about 0.09)", sqrt(q2 / w2));
  /* Padding between rows of d untouched. */
  long touched = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = N; n < ldd; n++) touched += d[(m * ldd + n) * (dt == QF_F32 ? 4 : 2)] != POISON;
  CHECK(touched == 0, "gemm wrote %ld bytes of row padding", touched);
  free(w), free(a), free(codes), free(packed), free(scales), free(d);
}

/* Every refusal names its cause and leaves d as it was. */
static void test_errors(void) {
  enum { M = 2, N = 16, K = 64 };
  static uint16_t a[M * K];
  static uint8_t b[N * K / 2], s[N * K / 16];
  static float d[M * N];
  float ts = 1.0f;
  int64_t one = 1;
  memset(d, POISON, sizeof d);
  tensor2d at = mat(a, QF_BF16, M, K, K), bt = mat(b, QF_E2M1X2, N, K, K), st = mat(s, QF_E4M3FN, N, K / 16, K / 16);
  tensor2d dt = mat(d, QF_F32, M, N, N);
  DLTensor tst = dl_tensor(&ts, QF_F32, 1, &one, kDLCPU);
  CHECK(qf_gemm_nvfp4(ctx, dl(&at), dl(&bt), dl(&st), &tst, dl(&dt)) == QF_OK, "valid call: %s", qf_ctx_last_error(ctx));
  memset(d, POISON, sizeof d);
  struct {
    const char *what;
    qf_status want;
  } cases[] = {
      {"K not a multiple of 32", QF_ERR_SHAPE}, {"N not a multiple of 16", QF_ERR_SHAPE},
      {"a fp32", QF_ERR_DTYPE},                 {"b e4m3fn", QF_ERR_DTYPE},
      {"scales fp32", QF_ERR_DTYPE},            {"scales short", QF_ERR_SHAPE},
      {"a misaligned", QF_ERR_ALIGNMENT},       {"a pitch K + 4", QF_ERR_LAYOUT},
      {"b pitch 80", QF_ERR_LAYOUT},            {"d int8", QF_ERR_DTYPE},
      {"tensor_scale [2]", QF_ERR_SHAPE},       {"b NULL", QF_ERR_NULL},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    tensor2d a2 = mat(a, QF_BF16, M, K, K), b2 = mat(b, QF_E2M1X2, N, K, K), s2 = mat(s, QF_E4M3FN, N, K / 16, K / 16);
    tensor2d d2 = mat(d, QF_F32, M, N, N);
    int64_t two = 2;
    DLTensor t2 = dl_tensor(&ts, QF_F32, 1, &one, kDLCPU);
    int b_null = 0;
    switch (c) {
      case 0: a2 = mat(a, QF_BF16, M, 48, 48), b2 = mat(b, QF_E2M1X2, N, 48, 48), s2 = mat(s, QF_E4M3FN, N, 3, 3); break;
      case 1: b2 = mat(b, QF_E2M1X2, 8, K, K), s2 = mat(s, QF_E4M3FN, 8, K / 16, K / 16), d2 = mat(d, QF_F32, M, 8, 8); break;
      case 2: a2.t.dtype = qf_dtype_to_dl(QF_F32); break;
      case 3: b2.t.dtype = qf_dtype_to_dl(QF_E4M3FN); break;
      case 4: s2.t.dtype = qf_dtype_to_dl(QF_F32); break;
      case 5: s2 = mat(s, QF_E4M3FN, N, 2, 2); break;
      case 6: a2.t.byte_offset = 2; break;
      case 7: a2 = mat(a, QF_BF16, M, K, K + 4); break;
      case 8: b2.strides[0] = 80; break;
      case 9: d2.t.dtype = qf_dtype_to_dl(QF_I8); break;
      case 10: t2.shape = &two; break;
      case 11: b_null = 1; break;
    }
    /* (dl() after the cases: a tensor2d assigned from mat() points its DLTensor at its own shape
     * only once dl() has run) */
    const qf_status got = qf_gemm_nvfp4(ctx, dl(&a2), b_null ? NULL : dl(&b2), dl(&s2), &t2, dl(&d2));
    CHECK(got == cases[c].want, "%s: status %s, want %s (%s)", cases[c].what, qf_status_str(got), qf_status_str(cases[c].want),
          qf_ctx_last_error(ctx));
    CHECK(strstr(qf_ctx_last_error(ctx), "qf_gemm_nvfp4") != NULL, "%s: message \"%s\" does not name the op", cases[c].what,
          qf_ctx_last_error(ctx));
  }
  /* The entry with the CUDA kernel's plan forced (GPU tests, qfuse-bench) checks the tensors as
   * qf_gemm_nvfp4 does, then refuses a CPU context. */
  tensor2d a32 = mat(a, QF_BF16, M, K, K);
  a32.t.dtype = qf_dtype_to_dl(QF_F32);
  CHECK(qf_gemm_nvfp4_with(ctx, dl(&a32), dl(&bt), dl(&st), &tst, dl(&dt), 1, 64, 1) == QF_ERR_DTYPE,
        "forced plan, a fp32: %s", qf_ctx_last_error(ctx));
  CHECK(qf_gemm_nvfp4_with(ctx, dl(&at), dl(&bt), dl(&st), &tst, dl(&dt), 1, 64, 1) == QF_ERR_UNSUPPORTED,
        "forced plan on the CPU: %s", qf_ctx_last_error(ctx));
  CHECK(strstr(qf_ctx_last_error(ctx), "qf_gemm_nvfp4_with") != NULL, "forced plan: message \"%s\" does not name the op",
        qf_ctx_last_error(ctx));
  int clean = 1;
  for (size_t i = 0; i < sizeof d; i++) clean &= ((uint8_t *)d)[i] == POISON;
  CHECK(clean, "a refused call wrote to d");

  /* quant and pack: K not a multiple of 16 / 8, codes of the wrong shape. */
  float w[N * K];
  uint8_t c8[N * K / 2], s8[N * K / 16];
  memset(w, 0, sizeof w);
  memset(c8, POISON, sizeof c8);
  tensor2d wt = mat(w, QF_F32, N, 24, 24), ct = mat(c8, QF_E2M1X2, N, 24, 24), sct = mat(s8, QF_E4M3FN, N, 1, 1);
  CHECK(qf_quant_nvfp4(ctx, dl(&wt), &tst, dl(&ct), dl(&sct)) == QF_ERR_SHAPE, "quant K=24: %s", qf_ctx_last_error(ctx));
  wt = mat(w, QF_F32, N, K, K), ct = mat(c8, QF_E2M1X2, N, K - 16, K), sct = mat(s8, QF_E4M3FN, N, K / 16, K / 16);
  CHECK(qf_quant_nvfp4(ctx, dl(&wt), &tst, dl(&ct), dl(&sct)) == QF_ERR_SHAPE, "quant codes short: %s", qf_ctx_last_error(ctx));
  tensor2d c12 = mat(c8, QF_E2M1X2, N, 12, 12), p12 = mat(b, QF_E2M1X2, N, 12, 12);
  CHECK(qf_nvfp4_pack(ctx, dl(&c12), dl(&p12)) == QF_ERR_SHAPE, "pack K=12: %s", qf_ctx_last_error(ctx));
  clean = 1;
  for (size_t i = 0; i < sizeof c8; i++) clean &= c8[i] == POISON;
  CHECK(clean, "a refused quant wrote to codes");
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  test_layout();
  test_quant_blocks();
  test_gemm(QF_BF16, QF_F32, 3, 48, 96, 0);
  test_gemm(QF_F16, QF_BF16, 5, 32, 160, 1);
  test_gemm(QF_BF16, QF_F16, 1, 16, 32, 2);
  test_errors();
  qf_ctx_destroy(ctx);
  return check_finish("test_nvfp4");
}
