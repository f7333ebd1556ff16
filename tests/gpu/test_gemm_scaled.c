/* qf_gemm_scaled on CUDA against the CPU reference (the same function on the CPU context, which
 * evaluates the formula in float64 and rounds once to fp32). Operands int8 (uniform in [-128, 127])
 * and e4m3fn (every finite code), D bf16, fp16 or fp32; a_scale per tensor [1] or per token [M],
 * b_scale per tensor [1] or per channel [N]; the epilogues: none, bias, and for int8 a per-tensor
 * zero point folded into azp_adj (z_a times the column sums, from qf_gemm_azp_adj on the CPU) and
 * per-token zero points [M] with azp_adj the column sums, each with and without bias. Shapes
 * M in {1, 33, 4097} x N in {16, 2112} x K in {16, 528}, with the variant (D type, scale
 * granularity) turning with the case number; strided rows (lda = K + 16, ldb = K + 32, ldd = N + 8)
 * and odd D pitches (N + 3, the scalar stores); 64 x 4096 x 4096, 4096 x 6144 x 4096 and
 * 4097 x 2112 x 2048 (its thin last wave split along K on an H100 or H200).
 * Outputs are poisoned with 0xFF bytes (NaN in all three types): every element must be written;
 * row gaps and a tail past the end must stay untouched. Every GPU call runs twice and must give
 * the same bytes. QF_ERR_UNSUPPORTED from the GPU is a failure, never a skip.
 *
 * Errors. int8: acc is exact on both sides, so D may differ from the fp32 reference only by the
 * GPU's fp32 roundings of ((float)(acc - zp) * (sa * sb)) + bias, a few ulp of the product (which
 * can exceed |D| by up to |bias| when the bias cancels it), plus one ulp of a 16-bit D; see
 * int8_tolerance(). e4m3: the tensor cores accumulate with reduced precision, so the relative
 * Frobenius error ||D_gpu - D_ref|| / ||D_ref|| and a per-element bound relative to the RMS of the
 * reference over the element's row and 128-column block (which catches a wrong element or scale
 * that the norm over the whole matrix would dilute); see fp8_tolerances().
 *
 * Large shapes: the CPU computes 16 rows (first, last, random), from copies of those rows and of
 * their per-token scales and zero points; the GPU result is still checked everywhere for being
 * written. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

enum { TAIL = 256 };
#define FULL_REF_MACS 64000000.0 /* above this, the reference covers sampled rows only */

/* Zero-point epilogues (int8 only). */
typedef enum { ZP_NONE, ZP_PER_TENSOR, ZP_PER_TOKEN } zp_kind;

typedef struct {
  int64_t M, N, K;
  qf_dtype ab;  /* operands: QF_I8 or QF_E4M3FN */
  qf_dtype dt;  /* D: bf16, fp16 or fp32 */
  int a_per_token, b_per_channel;
  int bias;
  zp_kind zp;
  int32_t za;   /* the per-tensor zero point of ZP_PER_TENSOR */
  int64_t lda, ldb, ldd;
} gemm_case;

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : 2; }

/* The e4m3fn code a random byte stands for: the NaN codes 0x7F / 0xFF become +-448. */
static uint8_t finite_e4m3(uint8_t c) { return (c & 0x7f) == 0x7f ? (uint8_t)(c ^ 1) : c; }

/* Random operand bytes: int8 uniform over [-128, 127], e4m3fn any finite code. */
static void fill_operand(uint8_t *p, size_t n, qf_dtype ab, uint64_t *seed) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng_next(seed);
    for (size_t j = 0; j < 8 && i + j < n; j++, r >>= 8) p[i + j] = ab == QF_I8 ? (uint8_t)r : finite_e4m3((uint8_t)r);
  }
}

/* E[x^2] of the values fill_operand draws (every byte equally likely). */
static double operand_mean_square(qf_dtype ab) {
  double s = 0.0;
  for (int c = 0; c < 256; c++) {
    const double v = ab == QF_I8 ? (double)(int8_t)c : (double)qf_e4m3fn_to_f32(finite_e4m3((uint8_t)c));
    s += v * v;
  }
  return s / 256.0;
}

static float draw_scale(uint64_t *seed, double lo, double hi) {
  return (float)exp(log(lo) + rng_uniform(seed) * (log(hi) - log(lo)));
}

static double out_at(const uint8_t *d, qf_dtype dt, size_t i) {
  if (dt == QF_F32) {
    float f;
    memcpy(&f, d + i * 4, sizeof f);
    return f;
  }
  uint16_t h;
  memcpy(&h, d + i * 2, sizeof h);
  return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

/* Allowed |D_gpu - D_ref| of an int8 element: four fp32 ulp of the product before the bias (at
 * most |want| + |bias|), one ulp of a 16-bit D (2^-7 bf16, 2^-10 fp16 relative), and fp16's
 * subnormal step for values near zero. */
static double int8_tolerance(qf_dtype dt, double want, double bias) {
  const double out_ulp = dt == QF_BF16 ? 0x1p-7 : dt == QF_F16 ? 0x1p-10 : 0.0;
  const double abs_min = dt == QF_F16 ? 0x1p-24 : 1e-30;
  return 4.0 * 0x1p-23 * (fabs(want) + fabs(bias)) + out_ulp * fabs(want) + abs_min;
}

/* e4m3: relative Frobenius and per-element (of the block RMS) tolerances. fp32 leaves the tensor
 * cores' accumulation; bf16 and fp16 add their output rounding (up to 2^-9 and 2^-12 relative).
 * fp32: 1e-4 is the goal, but on random full-range e4m3 data the tensor cores' limited-precision
 * sum inside each 128-K block (the same in qf_gemm_fp8_blockscale) measured 1.9e-4 to 2.6e-4 on an
 * H200, at K = 528 as at 4096, so the error is per block, not grown over K: the bound is 5e-4,
 * and docs/GEMM.md records the gap. */
static void fp8_tolerances(qf_dtype dt, double *frob, double *elem) {
  if (dt == QF_F32) *frob = 5e-4, *elem = 5e-3;
  else if (dt == QF_BF16) *frob = 5e-3, *elem = 1e-2;
  else *frob = 1e-3, *elem = 5e-3;
}

/* Every element written (not NaN); row gaps and the tail still hold the poison. */
static void check_written(const gemm_case *g, const uint8_t *got, size_t dbytes, const char *what) {
  const size_t osz = esz(g->dt);
  int64_t nan_count = 0, gap_bad = 0;
  for (int64_t m = 0; m < g->M; m++) {
    for (int64_t n = 0; n < g->N; n++) nan_count += isnan(out_at(got, g->dt, (size_t)(m * g->ldd + n)));
    if (m + 1 < g->M)
      for (size_t i = (size_t)(m * g->ldd + g->N) * osz; i < (size_t)((m + 1) * g->ldd) * osz; i++)
        gap_bad += got[i] != 0xff;
  }
  for (size_t i = dbytes - TAIL; i < dbytes; i++) gap_bad += got[i] != 0xff;
  CHECK(nan_count == 0, "%s: %" PRId64 " elements NaN (unwritten or wrong)", what, nan_count);
  CHECK(gap_bad == 0, "%s: %" PRId64 " bytes written outside D (row gaps or past the end)", what, gap_bad);
}

/* int8: each element within int8_tolerance() of the reference. */
static void check_int8(const gemm_case *g, const uint8_t *got, const float *ref, const int64_t *rows, int64_t R,
                       const float *bias, const char *what) {
  int64_t bad = 0, worst_m = 0, worst_n = 0;
  double worst = 0.0; /* |error| / tolerance */
  for (int64_t i = 0; i < R; i++)
    for (int64_t n = 0; n < g->N; n++) {
      const double want = ref[i * g->N + n], b = bias ? bias[n] : 0.0;
      const double have = out_at(got, g->dt, (size_t)(rows[i] * g->ldd + n));
      const double e = fabs(have - want) / int8_tolerance(g->dt, want, b);
      if (!(e <= 1.0)) bad++;
      if (!(e <= worst)) worst = e, worst_m = rows[i], worst_n = n; /* NaN becomes the worst */
    }
  CHECK(bad == 0, "%s: %" PRId64 " elements beyond the rounding tolerance, worst (%" PRId64 ", %" PRId64 ") at %.3g x it",
        what, bad, worst_m, worst_n, worst);
  if (getenv("QF_TEST_VERBOSE")) printf("%s: worst element %.3g of its tolerance\n", what, worst);
}

/* e4m3: relative Frobenius error and each element against its row's 128-column block RMS. */
static void check_fp8(const gemm_case *g, const uint8_t *got, const float *ref, const int64_t *rows, int64_t R,
                      const char *what) {
  const int64_t N = g->N, NB = (N + 127) / 128;
  double frob_tol, elem_tol, err_ss = 0.0, want_ss = 0.0, worst = 0.0;
  int64_t worst_m = 0, worst_n = 0;
  fp8_tolerances(g->dt, &frob_tol, &elem_tol);
  for (int64_t i = 0; i < R; i++)
    for (int64_t nb = 0; nb < NB; nb++) {
      const int64_t n0 = nb * 128, n1 = n0 + 128 < N ? n0 + 128 : N;
      double blk_ss = 0.0;
      for (int64_t n = n0; n < n1; n++) blk_ss += (double)ref[i * N + n] * ref[i * N + n];
      const double blk_rms = sqrt(blk_ss / (double)(n1 - n0));
      for (int64_t n = n0; n < n1; n++) {
        const double want = ref[i * N + n], have = out_at(got, g->dt, (size_t)(rows[i] * g->ldd + n));
        const double e = fabs(have - want) / (fabs(want) + blk_rms);
        if (!(e <= worst)) worst = e, worst_m = rows[i], worst_n = n; /* NaN becomes the worst */
        err_ss += (have - want) * (have - want);
        want_ss += want * want;
      }
    }
  const double frob = sqrt(err_ss / want_ss);
  CHECK(frob < frob_tol, "%s: relative Frobenius error %.3g (tolerance %.1g)", what, frob, frob_tol);
  CHECK(worst < elem_tol, "%s: element (%" PRId64 ", %" PRId64 ") off by %.3g of its block's RMS (tolerance %.1g)", what,
        worst_m, worst_n, worst, elem_tol);
  if (getenv("QF_TEST_VERBOSE")) printf("%s: frob %.3g, worst element %.3g\n", what, frob, worst);
}

static void one_case(qf_ctx *gpu, qf_ctx *cpu, const gemm_case *g, uint64_t *seed) {
  const int64_t M = g->M, N = g->N, K = g->K;
  const int64_t na = g->a_per_token ? M : 1, nb = g->b_per_channel ? N : 1;
  const size_t osz = esz(g->dt);
  char what[256];
  snprintf(what, sizeof what, "M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " %s->%s, a_scale %s, b_scale %s,%s%s, lda=%" PRId64
           " ldb=%" PRId64 " ldd=%" PRId64, M, N, K, qf_dtype_name(g->ab), qf_dtype_name(g->dt),
           g->a_per_token ? "[M]" : "[1]", g->b_per_channel ? "[N]" : "[1]",
           g->zp == ZP_PER_TENSOR ? " per-tensor azp" : g->zp == ZP_PER_TOKEN ? " per-token azp" : "",
           g->bias ? " bias" : " no bias", g->lda, g->ldb, g->ldd);

  /* ---- host data ---- */
  uint8_t *a = malloc((size_t)(M * g->lda)), *b = malloc((size_t)(N * g->ldb));
  fill_operand(a, (size_t)(M * g->lda), g->ab, seed);
  fill_operand(b, (size_t)(N * g->ldb), g->ab, seed);
  /* fp16 holds at most 65504: smaller scales keep D finite there. */
  const double s_lo = g->dt == QF_F16 ? 1e-4 : 1e-3, s_hi = g->dt == QF_F16 ? 1e-2 : 1e-1;
  float *sa = malloc((size_t)na * sizeof(float)), *sb = malloc((size_t)nb * sizeof(float));
  for (int64_t i = 0; i < na; i++) sa[i] = draw_scale(seed, s_lo, s_hi);
  for (int64_t i = 0; i < nb; i++) sb[i] = draw_scale(seed, s_lo, s_hi);

  /* Bias about as large as a typical product, so that dropping it cannot pass: bias_d in D's
   * type for the GPU, bias_f the same values in fp32 for the reference (fp32 D). */
  float *bias_f = NULL;
  void *bias_d = NULL;
  if (g->bias) {
    const double typical = s_lo * s_hi * sqrt((double)K) * operand_mean_square(g->ab);
    bias_f = malloc((size_t)N * sizeof(float)), bias_d = malloc((size_t)N * osz);
    for (int64_t n = 0; n < N; n++) {
      const float v = (float)(rng_normal(seed) * typical);
      if (g->dt == QF_F32) ((float *)bias_d)[n] = bias_f[n] = v;
      else if (g->dt == QF_BF16) bias_f[n] = qf_bf16_to_f32(((uint16_t *)bias_d)[n] = qf_bf16_from_f32(v));
      else bias_f[n] = qf_f16_to_f32(((uint16_t *)bias_d)[n] = qf_f16_from_f32(v));
    }
  }

  /* Zero points: azp_adj from the CPU's qf_gemm_azp_adj (z_a times the column sums for a
   * per-tensor zero point, the column sums for per-token ones). */
  int32_t *adj = NULL, *azp = NULL;
  int64_t n_shape = N;
  tensor2d cb;
  tensor2d_init(&cb, b, g->ab, N, K, g->ldb, kDLCPU);
  if (g->zp != ZP_NONE) {
    adj = malloc((size_t)N * sizeof(int32_t));
    DLTensor cadj = dl_tensor(adj, QF_I32, 1, &n_shape, kDLCPU);
    CHECK(qf_gemm_azp_adj(cpu, &cb.t, g->zp == ZP_PER_TENSOR ? g->za : 1, &cadj) == QF_OK, "%s: azp_adj: %s", what,
          qf_ctx_last_error(cpu));
  }
  if (g->zp == ZP_PER_TOKEN) {
    azp = malloc((size_t)M * sizeof(int32_t));
    for (int64_t m = 0; m < M; m++) azp[m] = (int32_t)(rng_next(seed) % 256) - 128;
  }

  /* ---- reference rows: all, or a sample (first, last, random) ---- */
  const int full = (double)M * (double)N * (double)K <= FULL_REF_MACS;
  const int64_t R = full ? M : 16;
  int64_t *rows = malloc((size_t)R * sizeof(int64_t));
  for (int64_t i = 0; i < R; i++) rows[i] = full ? i : i == 0 ? 0 : i == 1 ? M - 1 : (int64_t)(rng_next(seed) % (uint64_t)M);

  /* The reference reads the very tensors the GPU reads when all rows are compared, else copies
   * of the sampled rows with their per-token scales and zero points. Its D is fp32 (bias fp32). */
  uint8_t *ra = a;
  float *rsa = sa;
  int32_t *razp = azp;
  int64_t ra_ld = g->lda;
  if (!full) {
    ra = malloc((size_t)(R * K)), ra_ld = K;
    rsa = g->a_per_token ? malloc((size_t)R * sizeof(float)) : sa;
    razp = azp ? malloc((size_t)R * sizeof(int32_t)) : NULL;
    for (int64_t i = 0; i < R; i++) {
      memcpy(ra + i * K, a + rows[i] * g->lda, (size_t)K);
      if (g->a_per_token) rsa[i] = sa[rows[i]];
      if (azp) razp[i] = azp[rows[i]];
    }
  }
  float *ref = malloc((size_t)(R * N) * sizeof(float));
  int64_t rna = g->a_per_token ? R : 1, rnb = nb, r_shape = R;
  tensor2d ca, cd;
  tensor2d_init(&ca, ra, g->ab, R, K, ra_ld, kDLCPU);
  tensor2d_init(&cd, ref, QF_F32, R, N, N, kDLCPU);
  DLTensor csa = dl_tensor(rsa, QF_F32, 1, &rna, kDLCPU), csb = dl_tensor(sb, QF_F32, 1, &rnb, kDLCPU);
  DLTensor cbias = dl_tensor(bias_f, QF_F32, 1, &n_shape, kDLCPU), cadj = dl_tensor(adj, QF_I32, 1, &n_shape, kDLCPU);
  DLTensor cazp = dl_tensor(razp, QF_I32, 1, &r_shape, kDLCPU);
  qf_gemm_scaled_opts ropts = {.bias = bias_f ? &cbias : NULL, .azp_adj = adj ? &cadj : NULL, .azp = azp ? &cazp : NULL};
  CHECK(qf_gemm_scaled(cpu, &ca.t, &csa, &cb.t, &csb, &cd.t, &ropts) == QF_OK, "%s: cpu: %s", what,
        qf_ctx_last_error(cpu));

  /* ---- GPU ---- */
  const size_t dbytes = (size_t)((M - 1) * g->ldd + N) * osz + TAIL;
  uint8_t *da = dev_alloc((size_t)(M * g->lda)), *db = dev_alloc((size_t)(N * g->ldb)), *dd = dev_alloc(dbytes);
  float *dsa = dev_alloc((size_t)na * sizeof(float)), *dsb = dev_alloc((size_t)nb * sizeof(float));
  void *dbias = g->bias ? dev_alloc((size_t)N * osz) : NULL;
  int32_t *dadj = adj ? dev_alloc((size_t)N * sizeof(int32_t)) : NULL;
  int32_t *dazp = azp ? dev_alloc((size_t)M * sizeof(int32_t)) : NULL;
  CUDA_OK(cudaMemcpy(da, a, (size_t)(M * g->lda), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, b, (size_t)(N * g->ldb), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dsa, sa, (size_t)na * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dsb, sb, (size_t)nb * sizeof(float), cudaMemcpyHostToDevice));
  if (dbias) CUDA_OK(cudaMemcpy(dbias, bias_d, (size_t)N * osz, cudaMemcpyHostToDevice));
  if (dadj) CUDA_OK(cudaMemcpy(dadj, adj, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice));
  if (dazp) CUDA_OK(cudaMemcpy(dazp, azp, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd, 0xff, dbytes));
  int64_t gna = na, gnb = nb, m_shape = M;
  tensor2d ga, gb, gd;
  tensor2d_init(&ga, da, g->ab, M, K, g->lda, kDLCUDA);
  tensor2d_init(&gb, db, g->ab, N, K, g->ldb, kDLCUDA);
  tensor2d_init(&gd, dd, g->dt, M, N, g->ldd, kDLCUDA);
  DLTensor gsa = dl_tensor(dsa, QF_F32, 1, &gna, kDLCUDA), gsb = dl_tensor(dsb, QF_F32, 1, &gnb, kDLCUDA);
  DLTensor gbias = dl_tensor(dbias, g->dt, 1, &n_shape, kDLCUDA), gadj = dl_tensor(dadj, QF_I32, 1, &n_shape, kDLCUDA);
  DLTensor gazp = dl_tensor(dazp, QF_I32, 1, &m_shape, kDLCUDA);
  qf_gemm_scaled_opts gopts = {.bias = dbias ? &gbias : NULL, .azp_adj = dadj ? &gadj : NULL, .azp = dazp ? &gazp : NULL};
  /* QF_ERR_UNSUPPORTED (no kernel yet) fails here like any other error; the comparisons would only
   * repeat it. */
  if (CHECK(qf_gemm_scaled(gpu, &ga.t, &gsa, &gb.t, &gsb, &gd.t, &gopts) == QF_OK, "%s: gpu: %s", what,
            qf_ctx_last_error(gpu))) {
    CUDA_OK(cudaDeviceSynchronize());
    uint8_t *got = malloc(dbytes), *again = malloc(dbytes);
    CUDA_OK(cudaMemcpy(got, dd, dbytes, cudaMemcpyDeviceToHost));
    /* Nothing aliases D, so a second run into a poisoned D again must give the same bytes (a
     * split-K or stream-K sum in a fixed order; atomics in fp32 would not). */
    CUDA_OK(cudaMemset(dd, 0xff, dbytes));
    CHECK(qf_gemm_scaled(gpu, &ga.t, &gsa, &gb.t, &gsb, &gd.t, &gopts) == QF_OK, "%s: gpu, again: %s", what,
          qf_ctx_last_error(gpu));
    CUDA_OK(cudaMemcpy(again, dd, dbytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, again, dbytes) == 0, "%s: a second run gave different bytes", what);
    check_written(g, got, dbytes, what);
    if (g->ab == QF_I8) check_int8(g, got, ref, rows, R, bias_f, what);
    else check_fp8(g, got, ref, rows, R, what);
    free(got), free(again);
  }

  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(dsa), cudaFree(dsb);
  cudaFree(dbias), cudaFree(dadj), cudaFree(dazp);
  if (!full) {
    free(ra), free(razp);
    if (g->a_per_token) free(rsa);
  }
  free(a), free(b), free(sa), free(sb), free(bias_f), free(bias_d), free(adj), free(azp), free(rows), free(ref);
}

/* Variant number v (0..11) -> D type and scale granularity: every combination once per 12. */
static void set_variant(gemm_case *g, int v) {
  static const qf_dtype dts[] = {QF_BF16, QF_F32, QF_F16};
  g->dt = dts[v % 3];
  g->a_per_token = (v / 3) % 2;
  g->b_per_channel = (v / 6) % 2;
}

/* Epilogue number e: int8 0..5 (bias = e % 2, zero point kind e / 2), e4m3 0..1 (bias = e). */
static void set_epilogue(gemm_case *g, int e) {
  g->bias = e % 2;
  g->zp = g->ab == QF_I8 ? (zp_kind)(e / 2) : ZP_NONE;
  g->za = e % 4 == 2 ? 3 : -5; /* ZP_PER_TENSOR is e = 2 and 3: both signs */
}

static void set_pitches(gemm_case *g, int strided, int64_t ldd_pad) {
  g->lda = g->K + (strided ? 16 : 0);
  g->ldb = g->K + (strided ? 32 : 0);
  g->ldd = g->N + ldd_pad;
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x5CA1ED;
  const int64_t Ms[] = {1, 33, 4097}, Ns[] = {16, 2112}, Ks[] = {16, 528};
  const qf_dtype operands[] = {QF_I8, QF_E4M3FN};
  const int n_epi[] = {6, 2};

  /* Operand type x epilogue x shape, contiguous rows. The variant turns with the shape and the
   * epilogue, so that each epilogue meets every variant once and each shape several. */
  for (int t = 0; t < 2; t++)
    for (int e = 0; e < n_epi[t]; e++) {
      int s = 0;
      for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
          for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++, s++) {
            if (quick && (Ms[mi] > 528 || Ns[ni] > 528 || Ks[ki] > 528)) continue;
            gemm_case g = {.M = Ms[mi], .N = Ns[ni], .K = Ks[ki], .ab = operands[t]};
            set_variant(&g, (s + 5 * e) % 12);
            set_epilogue(&g, e);
            set_pitches(&g, 0, 0);
            one_case(gpu, cpu, &g, &seed);
          }
    }

  /* Strided rows: every operand type and epilogue on a shape with a partial N tile; odd D
   * pitches (rows not 16-byte aligned: the scalar stores) in each D type; a tall case of each
   * operand type. */
  int v = 0;
  for (int t = 0; t < 2; t++)
    for (int e = 0; e < n_epi[t]; e++, v++) {
      gemm_case g = {.M = 33, .N = 528, .K = 528, .ab = operands[t]};
      set_variant(&g, (5 * v) % 12);
      set_epilogue(&g, e);
      set_pitches(&g, 1, 8);
      one_case(gpu, cpu, &g, &seed);
    }
  for (int i = 0; i < 3; i++) {
    gemm_case g = {.M = 33, .N = 528, .K = 528, .ab = operands[i % 2]};
    set_variant(&g, 4 * i + 3); /* bf16, fp32, fp16 D */
    set_epilogue(&g, i % 2 ? 1 : 5);
    set_pitches(&g, 1, 3);
    one_case(gpu, cpu, &g, &seed);
  }
  if (!quick)
    for (int t = 0; t < 2; t++) {
      gemm_case g = {.M = 4097, .N = 2112, .K = 528, .ab = operands[t]};
      set_variant(&g, 5 + t);
      set_epilogue(&g, t ? 1 : 5);
      set_pitches(&g, 1, t ? 3 : 8);
      one_case(gpu, cpu, &g, &seed);
    }

  /* 65-128 rows with 64 K-blocks per unit: FP8 runs one row of 128 x 128 tiles split in two (the
   * two-set loop at decode); INT8 keeps 64-row tiles. */
  for (int t = 0; t < 2 && !quick; t++) {
    gemm_case g = {.M = 100, .N = 7168, .K = 16384, .ab = operands[t]};
    set_variant(&g, 9);
    set_epilogue(&g, 1);
    set_pitches(&g, 0, 0);
    one_case(gpu, cpu, &g, &seed);
  }

  /* The same with fp16 D and rows past M in the tile: FP8's 128 x 128 tiles up to 128 rows run the
   * deeper ring, whose staging tile holds one 64-column box at a time (sm90_gemm_heuristic.h). */
  if (!quick) {
    gemm_case g = {.M = 77, .N = 7168, .K = 16384, .ab = QF_E4M3FN};
    set_variant(&g, 2);
    set_epilogue(&g, 0);
    set_pitches(&g, 0, 0);
    one_case(gpu, cpu, &g, &seed);
  }

  /* Model-sized shapes: decode (M = 64) and prefill, both operand types. */
  /* 4097 x 2112 x 2048: 561 tiles of 128 x 128, a last wave of 33 tiles on 132 SMs whose tiles
   * run split-K (sm90_gemm_heuristic.h). */
  const int64_t large[][3] = {{64, 4096, 4096}, {4096, 6144, 4096}, {4097, 2112, 2048}};
  for (size_t l = 0; l < sizeof large / sizeof large[0] && !quick; l++)
    for (int t = 0; t < 2; t++) {
      gemm_case g = {.M = large[l][0], .N = large[l][1], .K = large[l][2], .ab = operands[t]};
      set_variant(&g, 9 + (int)l % 2); /* token x channel scales, bf16 then fp32 D */
      set_epilogue(&g, t ? (int)l % 2 : 5 - 2 * (int)(l % 2) - (l == 2));
      set_pitches(&g, 0, 0);
      one_case(gpu, cpu, &g, &seed);
    }

  /* FP8 with N a multiple of 192 that 128-column tiles cover in more than a wave: 64 x 64 tiles
   * (M = 16) or one wave of 128 x 192 tiles (M = 100) on 132 SMs (sm90_gemm_heuristic.h), with
   * bias, bf16 D. */
  const int64_t wide_ms[] = {16, 100};
  for (size_t mi = 0; mi < sizeof wide_ms / sizeof wide_ms[0] && !quick; mi++) {
    gemm_case g = {.M = wide_ms[mi], .N = 24576, .K = 1024, .ab = QF_E4M3FN};
    set_variant(&g, 9); /* token x channel scales, bf16 D */
    set_epilogue(&g, 1);
    set_pitches(&g, 0, 0);
    one_case(gpu, cpu, &g, &seed);
  }

  /* FP8 at 65-128 rows where 128 x 112 tiles leave the busiest SM fewer columns than 128 x 128
   * ones and units run 64 K-blocks (sm90_gemm_heuristic.h; 132 SMs): N = 28672, 256 of them, bf16 D
   * (direct stores: a 112-column tile has no staging tile) and bias; N = 28688, a last tile of 16
   * columns, fp32 D, a partial last K-block. (Large shapes: the CPU checks sampled rows.) */
  const int64_t narrow[][3] = {{100, 28672, 8192}, {128, 28688, 8144}};
  for (size_t si = 0; si < sizeof narrow / sizeof narrow[0] && !quick; si++) {
    gemm_case g = {.M = narrow[si][0], .N = narrow[si][1], .K = narrow[si][2], .ab = QF_E4M3FN};
    set_variant(&g, 9 + (int)si); /* token x channel scales, bf16 then fp32 D */
    set_epilogue(&g, 1 + (int)si);
    set_pitches(&g, 0, 0);
    one_case(gpu, cpu, &g, &seed);
  }

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_gemm_scaled");
}
