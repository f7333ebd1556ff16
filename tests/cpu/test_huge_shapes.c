/* Every op on the CPU context against tensors whose shapes no 64-bit offset can address: random
 * dims from a set that mixes small values with 2^31, 2^32 + 16, 2^40, 2^62 and INT64_MAX (now and
 * then a negative one), random strides (or none; negative ones too), mostly the right dtype and
 * rank, and in every call at least one tensor of more than 2^63 bytes. Such a call must be
 * refused (any error status) and must not reach undefined behaviour on the way (the shape
 * arithmetic of the checks: scripts/test runs this file in its AddressSanitizer /
 * UndefinedBehaviorSanitizer build, where a signed overflow or a division by zero aborts). The
 * buffers behind the tensors are small, so a call that went through would also read or write
 * past them. (Malformed tensors, one argument at a time on a valid call: test_robust.c.) */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qfuse.h"

#define MAX_ARGS 10

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}

static const int64_t kDims[] = {0, 1, 2, 16, 128, INT64_C(1) << 31, (INT64_C(1) << 32) + 16, INT64_C(1) << 40,
                                INT64_C(1) << 62, INT64_MAX};
enum { kNDims = sizeof kDims / sizeof kDims[0] };
/* (strides, and one dim in 32, may also be negative) */
static const int64_t kNegative[] = {-1, -128, INT64_MIN};

static int64_t draw_value(int negative_one_in) {
  return rng() % (uint64_t)negative_one_in ? kDims[rng() % kNDims] : kNegative[rng() % 3];
}

/* One tensor argument: its usual dtype and rank, then the call's random draw. */
typedef struct {
  qf_dtype dt;
  int ndim;
  DLTensor t;
  int64_t shape[4], strides[4];
} arg;

static _Alignas(256) unsigned char buffer[MAX_ARGS][4096];

/* Whether the tensor's bytes pass 2^63 (no 64-bit byte offset reaches its end). */
static int unaddressable(const arg *a) {
  long double n = (long double)a->t.dtype.bits * a->t.dtype.lanes / 8.0L;  /* bytes per element */
  for (int d = 0; d < a->t.ndim; d++) n *= (long double)a->shape[d];
  return n > 9.3e18L;
}

/* Draws every argument: the usual dtype 7 times in 8, the usual rank 7 times in 8 (else 0 to 4),
 * dims from kDims, strides half the time; then makes argument `huge` unaddressable. */
static void draw(arg *args, int n) {
  for (int i = 0; i < n; i++) {
    arg *a = &args[i];
    memset(&a->t, 0, sizeof a->t);
    const qf_dtype dt = rng() % 8 ? a->dt : (qf_dtype)(rng() % QF_DTYPE_COUNT);
    a->t.data = buffer[i];
    a->t.device.device_type = kDLCPU;
    a->t.dtype = qf_dtype_to_dl(dt);
    a->t.ndim = rng() % 8 ? a->ndim : (int)(rng() % 5);
    for (int d = 0; d < 4; d++) a->shape[d] = draw_value(32), a->strides[d] = draw_value(8);
    a->strides[a->t.ndim > 0 ? a->t.ndim - 1 : 0] = 1;
    a->t.shape = a->shape;
    a->t.strides = rng() % 2 ? a->strides : NULL;
  }
  /* (a rank-1 tensor of bytes cannot pass 2^63: it takes a second dim, which its op refuses too) */
  arg *h = &args[rng() % (uint64_t)n];
  if (h->t.ndim < 2) h->t.ndim = 2;
  for (int d = 0; d < h->t.ndim; d++)
    if (h->shape[d] < 0) h->shape[d] = 1;
  while (!unaddressable(h)) h->shape[rng() % (uint64_t)h->t.ndim] = kDims[kNDims - 1 - rng() % 3];
}

#ifndef ROUNDS
#define ROUNDS 20000
#endif
#define T(i) (&args[i].t)

/* ROUNDS draws of one op's arguments (dtypes and ranks in `spec`), each call refused. */
#define FUZZ(name, spec, call)                                                                             \
  do {                                                                                                    \
    arg args[MAX_ARGS];                                                                                   \
    const struct {                                                                                        \
      qf_dtype dt;                                                                                        \
      int ndim;                                                                                           \
    } sp[] = spec;                                                                                        \
    const int n = (int)(sizeof sp / sizeof sp[0]);                                                        \
    for (int i = 0; i < n; i++) args[i].dt = sp[i].dt, args[i].ndim = sp[i].ndim;                         \
    int accepted = 0, first = -1;                                                                         \
    for (int r = 0; r < ROUNDS; r++) {                                                                    \
      draw(args, n);                                                                                      \
      if ((call) == QF_OK && accepted++ == 0) first = r;                                                  \
    }                                                                                                     \
    CHECK(accepted == 0, "%s: %d of %d calls with an unaddressable tensor accepted (first: round %d)", name, \
          accepted, ROUNDS, first);                                                                       \
  } while (0)

#define ARGS(...) {__VA_ARGS__}

int main(void) {
  qf_ctx *ctx = NULL;
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  const qf_dtype B = QF_BF16, F = QF_F32, E = QF_E4M3FN, I8 = QF_I8, I32 = QF_I32, H = QF_F16;

  qf_group_quant_opts g = {.group_size = 128};
  qf_glu_opts glu = {0};
  qf_token_quant_opts tok = {0};
  qf_tensor_quant_opts ten = {.dynamic = 1};
  qf_rms_norm_quant_opts rms = {.eps = 1e-6f, .group_size = 128, .group = {.group_size = 128}};
  qf_gemm_blockscale_opts bs = {0};
  qf_gemm_grouped_opts gr = {0};
  qf_gemm_scaled_opts sc = {0};
  qf_attention_opts at = {0};
  qf_vq_attention_opts va = {.head_dim = 128, .kv_heads = 2};
  qf_vq_quantize_opts vqo = {.iterations = 1};
  qf_vq_format cq2, gptvq;
  qf_vq_format_preset(QF_VQ_CQ_2, &cq2);
  qf_vq_format_preset(QF_VQ_GPTVQ_2, &gptvq);

  FUZZ("qf_quant_per_tensor", ARGS({B, 2}, {F, 1}, {E, 2}), qf_quant_per_tensor(ctx, T(0), T(1), T(2)));
  FUZZ("qf_quant_group", ARGS({B, 2}, {E, 2}, {F, 2}), qf_quant_group(ctx, T(0), T(1), T(2), &g));
  FUZZ("qf_silu_mul_quant_group", ARGS({B, 2}, {E, 2}, {F, 2}), qf_silu_mul_quant_group(ctx, T(0), T(1), T(2), &glu, &g));
  FUZZ("qf_quant_token", ARGS({B, 2}, {I8, 2}, {F, 2}, {I32, 1}), qf_quant_token(ctx, T(0), T(1), T(2), T(3), &tok));
  FUZZ("qf_quant_tensor", ARGS({B, 2}, {E, 2}, {F, 1}), qf_quant_tensor(ctx, T(0), T(1), T(2), &ten));
  FUZZ("qf_rms_norm_quant", ARGS({B, 2}, {B, 2}, {B, 1}, {E, 2}, {F, 2}),
       qf_rms_norm_quant(ctx, T(0), T(1), T(2), T(3), T(4), &rms));
  FUZZ("qf_gemm_fp8_blockscale", ARGS({E, 2}, {F, 2}, {E, 2}, {F, 2}, {B, 2}),
       qf_gemm_fp8_blockscale(ctx, T(0), T(1), T(2), T(3), T(4), &bs));
  FUZZ("qf_gemm_fp8_blockscale_grouped", ARGS({E, 2}, {F, 2}, {E, 3}, {F, 3}, {I32, 1}, {B, 2}),
       qf_gemm_fp8_blockscale_grouped(ctx, T(0), T(1), T(2), T(3), T(4), T(5), &gr));
  FUZZ("qf_gemm_fp8_blockscale_masked", ARGS({E, 3}, {F, 3}, {E, 3}, {F, 3}, {I32, 1}, {B, 3}),
       qf_gemm_fp8_blockscale_masked(ctx, T(0), T(1), T(2), T(3), T(4), T(5), &gr));
  FUZZ("qf_gemm_scaled", ARGS({E, 2}, {F, 1}, {E, 2}, {F, 1}, {B, 2}), qf_gemm_scaled(ctx, T(0), T(1), T(2), T(3), T(4), &sc));
  FUZZ("qf_gemm_azp_adj", ARGS({I8, 2}, {I32, 1}), qf_gemm_azp_adj(ctx, T(0), 3, T(1)));
  FUZZ("qf_attention", ARGS({B, 4}, {B, 4}, {B, 4}, {F, 1}, {B, 4}, {F, 3}),
       qf_attention(ctx, T(0), T(1), T(2), T(3), &at, T(4), T(5)));
  FUZZ("qf_attention_paged", ARGS({B, 4}, {B, 4}, {B, 4}, {I32, 2}, {I32, 1}, {F, 1}, {B, 4}, {F, 3}),
       qf_attention_paged(ctx, T(0), T(1), T(2), T(3), T(4), T(5), &at, T(6), T(7)));
  FUZZ("qf_attention_varlen", ARGS({B, 3}, {B, 3}, {B, 3}, {I32, 1}, {I32, 1}, {F, 1}, {B, 3}, {F, 2}),
       qf_attention_varlen(ctx, T(0), T(1), T(2), T(3), T(4), 3, 5, T(5), &at, T(6), T(7)));
  FUZZ("qf_attention_paged_varlen", ARGS({B, 3}, {B, 4}, {B, 4}, {I32, 2}, {I32, 1}, {I32, 1}, {F, 1}, {B, 3}, {F, 2}),
       qf_attention_paged_varlen(ctx, T(0), T(1), T(2), T(3), T(4), T(5), 3, T(6), &at, T(7), T(8)));
  FUZZ("qf_vq_quantize", ARGS({F, 2}, {QF_U8, 2}, {H, 3}, {H, 1}),
       qf_vq_quantize(ctx, T(0), &gptvq, &vqo, T(1), T(2), T(3), NULL));
  FUZZ("qf_vq_encode", ARGS({H, 2}, {H, 3}, {QF_U8, 2}, {H, 1}), qf_vq_encode(ctx, T(0), 1, T(1), &cq2, T(2), T(3)));
  FUZZ("qf_vq_gemm", ARGS({H, 2}, {QF_U8, 2}, {H, 3}, {H, 1}, {H, 2}), qf_vq_gemm(ctx, T(0), T(1), T(2), T(3), &gptvq, T(4)));
  FUZZ("qf_vq_pack_gemv", ARGS({QF_U8, 2}, {QF_U8, 2}), qf_vq_pack_gemv(ctx, T(0), &gptvq, INT64_C(1) << 40, T(1)));
  FUZZ("qf_vq_attention_decode", ARGS({H, 2}, {QF_U8, 2}, {H, 3}, {QF_U8, 2}, {H, 3}, {H, 2}, {F, 2}),
       qf_vq_attention_decode(ctx, T(0), T(1), T(2), T(3), T(4), &cq2, &va, T(5), T(6)));
  FUZZ("qf_vq_dequantize", ARGS({QF_U8, 2}, {H, 3}, {H, 1}, {H, 2}), qf_vq_dequantize(ctx, T(0), T(1), T(2), &gptvq, T(3)));
  FUZZ("qf_quant_nvfp4", ARGS({B, 2}, {F, 1}, {QF_E2M1X2, 2}, {E, 2}), qf_quant_nvfp4(ctx, T(0), T(1), T(2), T(3)));
  FUZZ("qf_nvfp4_pack", ARGS({QF_E2M1X2, 2}, {QF_E2M1X2, 2}), qf_nvfp4_pack(ctx, T(0), T(1)));
  FUZZ("qf_gemm_nvfp4", ARGS({B, 2}, {QF_E2M1X2, 2}, {E, 2}, {F, 1}, {B, 2}), qf_gemm_nvfp4(ctx, T(0), T(1), T(2), T(3), T(4)));

  /* the entries taking plain int64 shapes: a format's sizes and packed shape for a weight */
  for (int r = 0; r < ROUNDS; r++) {
    const qf_vq_format *f = rng() % 2 ? &cq2 : &gptvq;
    qf_vq_sizes sz;
    int64_t packed[4];
    const int64_t n = kDims[rng() % kNDims], k = kDims[rng() % kNDims] / 256 * 256;
    if (qf_vq_sizes_of(ctx, f, n, k, &sz) == QF_OK)
      CHECK(sz.row_bytes > 0 && sz.n_books >= 0, "qf_vq_sizes_of(%" PRId64 ", %" PRId64 ")", n, k);
    if (qf_vq_pack_gemv_shape(ctx, f, n, k, packed) == QF_OK)
      CHECK(packed[1] >= 0 && packed[2] >= 0, "qf_vq_pack_gemv_shape(%" PRId64 ", %" PRId64 ")", n, k);
  }

  qf_ctx_destroy(ctx);
  return check_finish("test_huge_shapes");
}
