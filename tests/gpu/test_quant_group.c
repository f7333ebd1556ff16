/* qf_quant_group and qf_silu_mul_quant_group on CUDA against the CPU reference, byte for byte:
 * every input and output dtype, group size, scale layout and format; M = 1 to 4097, K from 32
 * to 18432 (powers of two and not); strided rows, pitches that force the scalar path; NaN, Inf,
 * outliers, all-zero groups; scale bounds (some below the group scales) and floors; the gated
 * activation as SiLU, gpt-oss and a clamp without the +1. q and the whole scale buffer (padding
 * and gaps included) are poisoned before each run, and a sentinel past each is checked. A tensor
 * of more than 2^31 elements checks the 64-bit offsets. The gated op with fast_exp is held to its
 * documented tolerance instead (accept_fast_exp). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

enum { TAIL = 256 };

typedef struct {
  int glu;           /* 0: qf_quant_group, 1: qf_silu_mul_quant_group */
  qf_glu_opts gopts; /* glu only */
  qf_dtype xt, qt;
  int G;             /* passed as 0 (the default) when 128 and `default_g` is set */
  int default_g;
  qf_scale_layout layout;
  qf_scale_format format;
  int64_t M, K;             /* K: the quantized width (H for the gated op) */
  int64_t xpad, qpad, spad; /* extra elements per row of x, q and row-major scales */
  int has_ub;
  float ub, scale_min;
  int specials; /* NaN / Inf / zeros among the random inputs */
} gq_case;

static const char *layout_name[] = {"row_major", "col_major", "col_major_tma"};
static const char *format_name[] = {"f32", "f32_pow2", "ue8m0_packed"};

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : t == QF_BF16 || t == QF_F16 ? 2 : 1; }

static void describe(char *buf, size_t n, const gq_case *c) {
  char ub[32] = "none";
  if (c->has_ub) snprintf(ub, sizeof ub, "%g", (double)c->ub);
  int w = snprintf(buf, n, "%s %s->%s G=%d %s/%s M=%" PRId64 " K=%" PRId64 " pads(x=%" PRId64 " q=%" PRId64 " s=%" PRId64
                   ") ub=%s scale_min=%g specials=%d", c->glu ? "silu_mul_quant_group" : "quant_group", qf_dtype_name(c->xt),
                   qf_dtype_name(c->qt), c->G, layout_name[c->layout], format_name[c->format], c->M, c->K, c->xpad, c->qpad,
                   c->spad, ub, (double)c->scale_min, c->specials);
  if (c->glu && w > 0 && (size_t)w < n)
    snprintf(buf + w, n - (size_t)w, " glu(alpha=%g limit=%g plus_one=%d fast_exp=%d)", (double)c->gopts.alpha,
             (double)c->gopts.limit, c->gopts.up_plus_one, c->gopts.fast_exp);
}

/* The scales tensor of a case: shape, row pitch (elements) and elements of the buffer. */
static void scale_geometry(const gq_case *c, int64_t *rows, int64_t *cols, int64_t *ld, int64_t *elems) {
  const int64_t KG = c->K / c->G, Mp = (c->M + 3) / 4 * 4;
  if (c->layout == QF_SCALE_ROW_MAJOR) *rows = c->M, *cols = KG, *ld = KG + c->spad;
  else if (c->layout == QF_SCALE_COL_MAJOR) *rows = KG, *cols = c->M, *ld = c->M;
  else *rows = c->format == QF_SCALE_UE8M0_PACKED ? (KG + 3) / 4 : KG, *cols = c->M, *ld = Mp;
  *elems = *rows * *ld;
}

static qf_status call(qf_ctx *ctx, const gq_case *c, tensor2d *x, tensor2d *q, tensor2d *s, const DLTensor *ub) {
  qf_group_quant_opts o = {.group_size = c->default_g && c->G == 128 ? 0 : c->G,
                           .scale_layout = c->layout,
                           .scale_format = c->format,
                           .scale_min = c->scale_min,
                           .scale_ub = c->has_ub ? ub : NULL};
  if (c->glu) return qf_silu_mul_quant_group(ctx, &x->t, &q->t, &s->t, &c->gopts, &o);
  return qf_quant_group(ctx, &x->t, &q->t, &s->t, &o);
}

/* Word w of a byte buffer of n bytes (0 past its end). */
static uint32_t word_at(const uint8_t *buf, size_t n, int64_t w) {
  uint32_t v = 0;
  if ((size_t)(w + 1) * 4 <= n) memcpy(&v, buf + w * 4, 4);
  return v;
}

/* Index of the first differing byte and the number of differing bytes. */
static int64_t first_diff(const uint8_t *a, const uint8_t *b, size_t n, int64_t *count) {
  int64_t first = -1;
  *count = 0;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && (*count)++ == 0) first = (int64_t)i;
  return first;
}

/* A code's position on its format's number line (sign-magnitude to signed); NaN codes give
 * INT32_MIN, and adjacent representable values differ by one. */
static int32_t code_order(qf_dtype t, uint8_t b) {
  if (t == QF_I8) return (int8_t)b;
  if (t == QF_E4M3FNUZ) return b == 0x80 ? INT32_MIN : b & 0x80 ? -(b & 0x7f) : b;
  if ((b & 0x7f) == 0x7f) return INT32_MIN;
  return b & 0x80 ? -(b & 0x7f) : b & 0x7f;
}

/* The fast_exp contract (qfuse.h): where the GPU's scale or code differs from the reference only as
 * the documented ulp-level difference allows, the reference byte is copied into `got`, so that the
 * byte-for-byte comparison that follows checks everything else (padding, NaN, zeros, sentinels).
 * Allowed: an fp32 scale within 1e-6 relative; a power-of-two scale one binade off (the group's
 * absmax sat on a binade boundary), whose group's codes are then not compared; a code one step
 * off. Returns the number of scales and codes so accepted, which the caller bounds. */
static int64_t accept_fast_exp(const gq_case *c, int64_t sld, int64_t qld, uint8_t *got_q, const uint8_t *ref_q,
                               uint8_t *got_s, const uint8_t *ref_s) {
  const int64_t KG = c->K / c->G;
  int64_t accepted = 0;
  for (int64_t r = 0; r < c->M; r++)
    for (int64_t g = 0; g < KG; g++) {
      int64_t at; /* byte offset of the scale */
      if (c->format == QF_SCALE_UE8M0_PACKED) at = ((g / 4) * sld + r) * 4 + g % 4;
      else at = (c->layout == QF_SCALE_ROW_MAJOR ? r * sld + g : g * sld + r) * 4;
      int one_binade_off = 0;
      if (c->format == QF_SCALE_UE8M0_PACKED) {
        one_binade_off = abs(got_s[at] - ref_s[at]) == 1;
      } else {
        float a, b;
        memcpy(&a, got_s + at, 4), memcpy(&b, ref_s + at, 4);
        if (c->format == QF_SCALE_F32 && a != b && fabsf(a - b) <= 1e-6f * b) memcpy(got_s + at, ref_s + at, 4), accepted++;
        one_binade_off = c->format == QF_SCALE_F32_POW2 && (a == 2.0f * b || b == 2.0f * a);
      }
      if (one_binade_off) memcpy(got_s + at, ref_s + at, c->format == QF_SCALE_UE8M0_PACKED ? 1 : 4), accepted++;
      for (int64_t k = g * c->G; k < (g + 1) * c->G; k++) {
        const int64_t i = r * qld + k;
        const int32_t a = code_order(c->qt, got_q[i]), b = code_order(c->qt, ref_q[i]);
        if (got_q[i] != ref_q[i] && (one_binade_off || (a != INT32_MIN && b != INT32_MIN && abs(a - b) == 1)))
          got_q[i] = ref_q[i], accepted++;
      }
    }
  return accepted;
}

static void run_case(qf_ctx *gpu, qf_ctx *cpu, const gq_case *c, uint64_t *seed) {
  char what[400];
  describe(what, sizeof what, c);
  const int64_t M = c->M, K = c->K, G = c->G, KG = K / G;
  const int64_t xcols = c->glu ? 2 * K : K, xld = xcols + c->xpad, qld = K + c->qpad;
  int64_t srows, scols, sld, selems;
  scale_geometry(c, &srows, &scols, &sld, &selems);
  const qf_dtype sdt = c->format == QF_SCALE_UE8M0_PACKED ? QF_I32 : QF_F32;
  const size_t xbytes = (size_t)(M * xld) * esz(c->xt), qbytes = (size_t)(M * qld) + TAIL,
               sbytes = (size_t)selems * 4 + TAIL;

  void *hx = malloc(xbytes);
  uint8_t *ref_q = malloc(qbytes), *got_q = malloc(qbytes), *ref_s = malloc(sbytes), *got_s = malloc(sbytes);
  for (size_t i = 0; i < (size_t)(M * xld); i++) float_put(hx, c->xt, i, rng_activation(seed, 1.5f, c->specials));
  /* One all-zero group (gate and up) in row 0 and one NaN in the last group of the last row. */
  const int64_t zg = KG > 1 ? 1 : 0;
  for (int64_t k = 0; k < G; k++) {
    float_put(hx, c->xt, (size_t)(zg * G + k), 0.0f);
    if (c->glu) float_put(hx, c->xt, (size_t)(K + zg * G + k), 0.0f);
  }
  if (M > 1 || KG > 1) float_put(hx, c->xt, (size_t)((M - 1) * xld + (KG - 1) * G + G / 2 + 3), NAN);
  memset(ref_q, POISON, qbytes);
  memset(ref_s, POISON, sbytes);

  void *dx = dev_alloc(xbytes), *dq = dev_alloc(qbytes), *ds = dev_alloc(sbytes);
  float *dub = dev_alloc(sizeof(float));
  CUDA_OK(cudaMemcpy(dx, hx, xbytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dq, POISON, qbytes));
  CUDA_OK(cudaMemset(ds, POISON, sbytes));
  CUDA_OK(cudaMemcpy(dub, &c->ub, sizeof(float), cudaMemcpyHostToDevice));

  _Alignas(16) float hub[4] = {c->ub};
  int64_t one = 1;
  DLTensor cub = {.data = hub, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
  DLTensor gub = cub;
  gub.data = dub;
  gub.device.device_type = kDLCUDA;
  tensor2d cx, cq, cs, gx, gq, gs;
  tensor2d_init(&cx, hx, c->xt, M, xcols, xld, kDLCPU);
  tensor2d_init(&cq, ref_q, c->qt, M, K, qld, kDLCPU);
  tensor2d_init(&cs, ref_s, sdt, srows, scols, sld, kDLCPU);
  tensor2d_init(&gx, dx, c->xt, M, xcols, xld, kDLCUDA);
  tensor2d_init(&gq, dq, c->qt, M, K, qld, kDLCUDA);
  tensor2d_init(&gs, ds, sdt, srows, scols, sld, kDLCUDA);

  qf_status st = call(cpu, c, &cx, &cq, &cs, &cub);
  CHECK(st == QF_OK, "cpu %s: %s", what, qf_ctx_last_error(cpu));
  st = call(gpu, c, &gx, &gq, &gs, &gub);
  CHECK(st == QF_OK, "gpu %s: %s", what, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got_q, dq, qbytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_s, ds, sbytes, cudaMemcpyDeviceToHost));
  if (c->glu && c->gopts.fast_exp) {
    const int64_t accepted = accept_fast_exp(c, sld, qld, got_q, ref_q, got_s, ref_s);
    CHECK(accepted <= 16 + M * K / 256, "%s: %" PRId64 " codes and scales differ within the fast_exp tolerance, "
          "more than 1 in 256", what, accepted);
  }

  int64_t n, i = first_diff(got_q, ref_q, qbytes, &n);
  CHECK(n == 0, "%s: %" PRId64 " q bytes differ, first at row %" PRId64 " col %" PRId64 " (gpu 0x%02x, cpu 0x%02x)", what,
        n, i / qld, i % qld, i >= 0 ? got_q[i] : 0, i >= 0 ? ref_q[i] : 0);
  i = first_diff(got_s, ref_s, sbytes, &n);
  CHECK(n == 0, "%s: %" PRId64 " scale bytes differ, first in element %" PRId64 " = [%" PRId64 ", %" PRId64 "] of [%" PRId64
        ", %" PRId64 "] pitch %" PRId64 " (gpu 0x%08x, cpu 0x%08x)", what, n, i / 4, i / 4 / sld, i / 4 % sld, srows, scols, sld,
        i >= 0 ? word_at(got_s, sbytes, i / 4) : 0, i >= 0 ? word_at(ref_s, sbytes, i / 4) : 0);
  CHECK(got_q[qbytes - 1] == POISON && got_s[sbytes - 1] == POISON, "%s: sentinel past the end overwritten", what);

  cudaFree(dx), cudaFree(dq), cudaFree(ds), cudaFree(dub);
  free(hx), free(ref_q), free(got_q), free(ref_s), free(got_s);
}

static const struct {
  qf_scale_layout layout;
  qf_scale_format format;
} layouts[] = {
    {QF_SCALE_ROW_MAJOR, QF_SCALE_F32},     {QF_SCALE_COL_MAJOR, QF_SCALE_F32},
    {QF_SCALE_COL_MAJOR_TMA, QF_SCALE_F32}, {QF_SCALE_COL_MAJOR_TMA, QF_SCALE_UE8M0_PACKED},
    {QF_SCALE_ROW_MAJOR, QF_SCALE_F32_POW2}, {QF_SCALE_COL_MAJOR, QF_SCALE_F32_POW2},
    {QF_SCALE_COL_MAJOR_TMA, QF_SCALE_F32_POW2},
};
enum { N_LAYOUTS = sizeof layouts / sizeof layouts[0] };

/* M, K, extra x pitch, extra q pitch, extra row-major scale pitch. Rows of x are vector-aligned
 * when (K + xpad) * size % 16 == 0 and rows of q when (K + qpad) % 8 == 0; the others take the
 * scalar path. */
static const int64_t small_shapes[][5] = {
    {1, 64, 0, 0, 0},   {2, 96, 0, 0, 1},   {3, 128, 8, 8, 0},   {17, 1344, 0, 0, 0}, {2, 7168, 0, 0, 3},
    {1, 18432, 0, 0, 0}, {17, 384, 1, 3, 0}, {3, 192, 16, 4, 0},  {5, 640, 8, 8, 2},   {17, 256, 2, 1, 5},
    {1, 32, 0, 0, 0},   {3, 2048, 0, 0, 0}, {17, 7168, 4, 0, 0},  {2, 1344, 3, 5, 0},
};
enum { N_SMALL = sizeof small_shapes / sizeof small_shapes[0] };

/* (ub, scale_min) settings: none, defaults; a bound below many group scales; a bound above most;
 * a large floor; a floor above the bound; a subnormal floor (1 / s overflows for zero groups). */
static const struct {
  int has_ub;
  float ub, scale_min;
} bounds[] = {{0, 0.0f, 0.0f}, {1, 0.004f, 0.0f}, {1, 2.0f, 1e-6f}, {0, 0.0f, 0.05f}, {1, 0.001f, 0.01f}, {0, 0.0f, 1e-40f}};
enum { N_BOUNDS = sizeof bounds / sizeof bounds[0] };

static const qf_glu_opts glus[] = {
    {0.0f, 0.0f, 0, 0}, {1.702f, 7.0f, 1, 0}, {1.0f, 3.0f, 0, 0}, {0.0f, 0.0f, 0, 1}, {1.702f, 7.0f, 1, 1}};
enum { N_GLUS = sizeof glus / sizeof glus[0] };

/* The next shape of the rotation whose K is a multiple of G (every K above is one of 32). */
static size_t next_shape(size_t *rot, int G, int quick) {
  for (;;) {
    size_t s = (*rot)++ % N_SMALL;
    if (small_shapes[s][1] % G == 0 && (!quick || small_shapes[s][0] * small_shapes[s][1] <= 40000)) return s;
  }
}

static void fill_shape(gq_case *c, size_t s) {
  c->M = small_shapes[s][0];
  c->K = small_shapes[s][1];
  c->xpad = small_shapes[s][2];
  c->qpad = small_shapes[s][3];
  c->spad = small_shapes[s][4];
}

static void fill_bounds(gq_case *c, size_t b) {
  c->has_ub = bounds[b % N_BOUNDS].has_ub;
  c->ub = bounds[b % N_BOUNDS].ub;
  c->scale_min = bounds[b % N_BOUNDS].scale_min;
}

/* Every input dtype x output dtype x group size x layout/format, on rotating small shapes. */
static void sweep_plain(qf_ctx *gpu, qf_ctx *cpu, int quick, uint64_t *seed) {
  const qf_dtype xts[] = {QF_BF16, QF_F16, QF_F32}, qts[] = {QF_E4M3FN, QF_E4M3FNUZ, QF_I8};
  const int gs[] = {32, 64, 128};
  size_t rot = 0, n = 0;
  for (size_t a = 0; a < 3; a++)
    for (size_t b = 0; b < 3; b++)
      for (size_t g = 0; g < 3; g++)
        for (size_t l = 0; l < N_LAYOUTS; l++, n++) {
          gq_case c = {0};
          c.xt = xts[a], c.qt = qts[b], c.G = gs[g], c.default_g = (int)(n % 2);
          c.layout = layouts[l].layout, c.format = layouts[l].format;
          fill_shape(&c, next_shape(&rot, c.G, quick));
          fill_bounds(&c, n);
          c.specials = (int)(n % 3 != 0);
          run_case(gpu, cpu, &c, seed);
        }
}

/* The gated op: bf16 / fp16 x output dtype x group size x the three activations. */
static void sweep_glu(qf_ctx *gpu, qf_ctx *cpu, int quick, uint64_t *seed) {
  const qf_dtype xts[] = {QF_BF16, QF_F16}, qts[] = {QF_E4M3FN, QF_E4M3FNUZ, QF_I8};
  const int gs[] = {32, 64, 128};
  size_t rot = 3, n = 0;
  for (size_t a = 0; a < 2; a++)
    for (size_t b = 0; b < 3; b++)
      for (size_t g = 0; g < 3; g++)
        for (size_t v = 0; v < N_GLUS; v++, n++) {
          gq_case c = {0};
          c.glu = 1, c.gopts = glus[v];
          c.xt = xts[a], c.qt = qts[b], c.G = gs[g];
          c.layout = layouts[n % N_LAYOUTS].layout, c.format = layouts[n % N_LAYOUTS].format;
          fill_shape(&c, next_shape(&rot, c.G, quick));
          fill_bounds(&c, n + 1);
          c.specials = (int)(n % 2);
          run_case(gpu, cpu, &c, seed);
        }
}

/* Shapes that fill the chip and many-row tiles: the tile walk, its tails and the padding rows. */
static void large_cases(qf_ctx *gpu, qf_ctx *cpu, uint64_t *seed) {
  static const struct {
    int glu, v;
    qf_dtype xt, qt;
    int G, l;
    int64_t M, K, xpad, qpad, spad;
  } big[] = {
      {0, 0, QF_BF16, QF_E4M3FN, 128, 2, 4097, 7168, 0, 0, 0},   {0, 0, QF_BF16, QF_E4M3FN, 128, 3, 4097, 7168, 0, 0, 0},
      {0, 0, QF_F16, QF_I8, 64, 0, 4097, 2048, 8, 8, 4},         {0, 0, QF_F32, QF_E4M3FNUZ, 32, 5, 4097, 1344, 0, 0, 0},
      {0, 0, QF_BF16, QF_E4M3FN, 32, 3, 4097, 1344, 0, 0, 0},    {0, 0, QF_BF16, QF_I8, 128, 1, 17, 18432, 0, 0, 0},
      {0, 0, QF_F16, QF_E4M3FN, 64, 0, 3, 18432, 1, 0, 0},       {0, 0, QF_BF16, QF_E4M3FN, 32, 2, 70001, 64, 0, 0, 0},
      {0, 0, QF_BF16, QF_E4M3FN, 128, 4, 4097, 128, 0, 0, 0},    {1, 1, QF_BF16, QF_E4M3FN, 128, 2, 4097, 2048, 0, 0, 0},
      {1, 0, QF_F16, QF_I8, 64, 0, 4097, 1344, 0, 0, 0},         {1, 2, QF_BF16, QF_E4M3FNUZ, 32, 3, 4097, 96, 0, 0, 0},
      {1, 1, QF_BF16, QF_E4M3FN, 128, 3, 64, 18432, 0, 0, 0},    {1, 1, QF_F16, QF_E4M3FN, 128, 6, 17, 18432, 8, 3, 0},
      {1, 3, QF_BF16, QF_E4M3FN, 128, 2, 4097, 7168, 0, 0, 0},   {1, 4, QF_BF16, QF_I8, 64, 0, 4097, 2048, 0, 0, 0},
      {1, 3, QF_F16, QF_E4M3FNUZ, 128, 3, 4097, 18432, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    gq_case c = {0};
    c.glu = big[i].glu, c.gopts = glus[big[i].v];
    c.xt = big[i].xt, c.qt = big[i].qt, c.G = big[i].G;
    c.layout = layouts[big[i].l].layout, c.format = layouts[big[i].l].format;
    c.M = big[i].M, c.K = big[i].K, c.xpad = big[i].xpad, c.qpad = big[i].qpad, c.spad = big[i].spad;
    fill_bounds(&c, i);
    c.specials = (int)(i % 2);
    run_case(gpu, cpu, &c, seed);
  }
}

/* More than 2^31 elements: rows around the 2^31 boundary and the last rows must match the CPU
 * reference run on the same rows (q and the row-major scales of each row). */
static void test_huge(qf_ctx *gpu, qf_ctx *cpu) {
  const int64_t rows = 524289, cols = 4096, KG = cols / 128; /* rows * cols = 2^31 + 4096 */
  const size_t n = (size_t)(rows * cols);
  uint16_t *dx = dev_alloc(n * 2);
  uint8_t *dq = dev_alloc(n + TAIL);
  float *ds = dev_alloc((size_t)(rows * KG) * 4 + TAIL);
  CUDA_OK(cudaMemset(dq, POISON, n + TAIL));
  CUDA_OK(cudaMemset(ds, POISON, (size_t)(rows * KG) * 4 + TAIL));
  CUDA_OK(cudaMemset(dx, 0x3c, n * 2)); /* every other row keeps bf16 0x3c3c */
  const int64_t probe[] = {0, 1, 524286, 524287, 524288};
  enum { NPROBE = sizeof probe / sizeof probe[0] };
  uint64_t seed = 99;
  uint16_t *hrow = malloc((size_t)cols * 2);
  for (size_t p = 0; p < NPROBE; p++) {
    for (int64_t k = 0; k < cols; k++) float_put(hrow, QF_BF16, (size_t)k, rng_activation(&seed, 1.5f, 1));
    CUDA_OK(cudaMemcpy(dx + probe[p] * cols, hrow, (size_t)cols * 2, cudaMemcpyHostToDevice));
  }
  tensor2d gx, gq, gs;
  tensor2d_init(&gx, dx, QF_BF16, rows, cols, cols, kDLCUDA);
  tensor2d_init(&gq, dq, QF_E4M3FN, rows, cols, cols, kDLCUDA);
  tensor2d_init(&gs, ds, QF_F32, rows, KG, KG, kDLCUDA);
  qf_group_quant_opts o = {.group_size = 128};
  CHECK(qf_quant_group(gpu, &gx.t, &gq.t, &gs.t, &o) == QF_OK, "huge: %s", qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());

  uint8_t *got = malloc((size_t)cols), *ref = malloc((size_t)cols);
  float got_s[32], ref_s[32];
  for (size_t p = 0; p < NPROBE; p++) {
    CUDA_OK(cudaMemcpy(hrow, dx + probe[p] * cols, (size_t)cols * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got, dq + probe[p] * cols, (size_t)cols, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got_s, ds + probe[p] * KG, (size_t)KG * 4, cudaMemcpyDeviceToHost));
    tensor2d cx, cq, cs;
    tensor2d_init(&cx, hrow, QF_BF16, 1, cols, cols, kDLCPU);
    tensor2d_init(&cq, ref, QF_E4M3FN, 1, cols, cols, kDLCPU);
    tensor2d_init(&cs, ref_s, QF_F32, 1, KG, KG, kDLCPU);
    CHECK(qf_quant_group(cpu, &cx.t, &cq.t, &cs.t, &o) == QF_OK, "huge cpu row: %s", qf_ctx_last_error(cpu));
    CHECK(memcmp(got, ref, (size_t)cols) == 0 && memcmp(got_s, ref_s, (size_t)KG * 4) == 0,
          "huge tensor: row %" PRId64 " differs from the reference", probe[p]);
  }
  CHECK(dev_poisoned(dq + n, TAIL) && dev_poisoned((uint8_t *)ds + (size_t)(rows * KG) * 4, TAIL),
        "huge tensor: sentinel past the end overwritten");
  cudaFree(dx), cudaFree(dq), cudaFree(ds);
  free(hrow), free(got), free(ref);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x6A09E667F3BCC908ull;
  sweep_plain(gpu, cpu, quick, &seed);
  sweep_glu(gpu, cpu, quick, &seed);
  if (!quick) {
    large_cases(gpu, cpu, &seed);
    test_huge(gpu, cpu);
  }
  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_quant_group");
}
