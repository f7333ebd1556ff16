/* qf_gemm_fp8_blockscale on CUDA against the CPU reference (float64 accumulation of the blockwise
 * formula). Two kinds of data: random e4m3fn operands (every finite code) with scales spanning
 * 1e-4..1e2, and exact data (operands in {0, +-0.5, +-1, +-2}, power-of-two scales) whose block
 * sums the tensor cores compute without rounding, so that fp32 results must match to the fp32
 * promotion's rounding. Shapes at and around the tile edges (M = 1 .. 4097, N = 16 .. 2112, K = 16
 * .. 7296 with partial K-blocks), both a_scales layouts, with and without C (C may be D), bf16 /
 * fp16 / fp32 outputs, strided rows everywhere (odd D pitches too). Outputs are poisoned with 0xFF
 * bytes (NaN in all three types): every element must be written and no NaN may remain; row gaps
 * and a tail past the end must stay untouched.
 *
 * Errors: the relative Frobenius error ||D_gpu - D_ref|| / ||D_ref|| (the CPU gives D_ref in fp32
 * from a float64 sum), and a per-element bound relative to the RMS of the reference over the
 * element's row and 128-column block, which catches a wrong element or a wrong scale row that a
 * norm over the whole matrix would dilute. Tolerances: see tolerances().
 *
 * Every shape but C = D runs twice and must give the same bytes (the split-K sums).
 * Large shapes: the CPU computes 16 rows (first, last, random), from copies of those rows; the
 * GPU result is still checked everywhere for being written. */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include <cudaTypedefs.h>

#include "check.h"
#include "core/backend.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

enum { TAIL = 256 };
#define FULL_REF_MACS 64000000.0 /* above this, the reference covers sampled rows only */

typedef struct {
  int64_t M, N, K;
  qf_dtype dt;
  int row_major_scales;
  int c_mode;             /* 0: no C; 1: separate C; 2: C is D (fp32 only) */
  int exact;              /* operands in {0, +-0.5, +-1, +-2}, power-of-two scales */
  int gauss;              /* N(0, 1) data times a factor per block, quantized as DeepSeek-V3 does */
  int fine;               /* opts.fine_promotion (fp32 D) */
  int64_t lda, ldb, ldd, ldc;
  cudaStream_t stream;    /* the stream the GPU context runs on (NULL: the default one) */
  int plan_m, plan_n, plan_splits; /* plan_m > 0: the engine's plan forced (qf_gemm_fp8_blockscale_with) */
} gemm_case;

/* The call under test: the public one, or the forced plan. */
static qf_status gemm_gpu(qf_ctx *gpu, const gemm_case *g, DLTensor *a, DLTensor *as, DLTensor *b, DLTensor *bs, DLTensor *d,
                          const qf_gemm_blockscale_opts *o) {
  if (g->plan_m > 0) return qf_gemm_fp8_blockscale_with(gpu, a, as, b, bs, d, o, g->plan_m, g->plan_n, g->plan_splits);
  return qf_gemm_fp8_blockscale(gpu, a, as, b, bs, d, o);
}

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : 2; }

/* Any finite e4m3fn code, eight per draw (0x7F / 0xFF, the NaNs, become +-448); or, `exact`,
 * one of 0, +-0.5, +-1, +-2 (codes 0x00, 0x30, 0x38, 0x40 and their negatives). */
static void fill_e4m3(uint8_t *p, size_t n, int exact, uint64_t *seed) {
  static const uint8_t small[8] = {0x00, 0x30, 0x38, 0x40, 0x80, 0xb0, 0xb8, 0xc0};
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng_next(seed);
    for (size_t j = 0; j < 8 && i + j < n; j++, r >>= 8) {
      uint8_t c = (uint8_t)r;
      p[i + j] = exact ? small[c & 7] : (c & 0x7f) == 0x7f ? (uint8_t)(c ^ 1) : c;
    }
  }
}

/* Log-uniform in [lo, hi]; `exact`: a power of two in [2^-4, 2^exact_max_exp]. */
static float draw_scale(uint64_t *seed, double lo, double hi, int exact, int exact_max_exp) {
  if (exact) return ldexpf(1.0f, (int)(rng_next(seed) % (uint64_t)(exact_max_exp + 5)) - 4);
  return (float)exp(log(lo) + rng_uniform(seed) * (log(hi) - log(lo)));
}

static double out_to_f64(const void *d, qf_dtype dt, size_t i) {
  if (dt == QF_F32) return ((const float *)d)[i];
  uint16_t h = ((const uint16_t *)d)[i];
  if (dt == QF_BF16) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
  }
  int e = (h >> 10) & 31, m = h & 1023;
  double mag = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
  return (h & 0x8000) ? -mag : mag;
}

/* `gauss` data: for each 1 x 128 group of A and 128 x 128 block of B a factor f, log-uniform in
 * [1e-2, 1e4], times N(0, 1) values, quantized with scale = amax / 448 (scales of about 1e-4 to
 * 1e2), as the DeepSeek-V3 recipe quantizes its activations and weights. Columns past K keep
 * their random codes (never read). */
static void fill_gauss(const gemm_case *g, uint8_t *a, uint8_t *b, float *as, int64_t as_m, int64_t as_k, float *bs,
                       uint64_t *seed) {
  const int64_t KB = (g->K + 127) / 128, NB = (g->N + 127) / 128;
  float x[128 * 128];
  for (int pass = 0; pass < 2; pass++) {
    const int64_t groups_r = pass == 0 ? g->M : NB, rows = pass == 0 ? 1 : 128, rows_all = pass == 0 ? g->M : g->N;
    uint8_t *q = pass == 0 ? a : b;
    const int64_t ld = pass == 0 ? g->lda : g->ldb;
    for (int64_t gr = 0; gr < groups_r; gr++)
      for (int64_t kb = 0; kb < KB; kb++) {
        const int64_t r0 = gr * rows, r1 = r0 + rows < rows_all ? r0 + rows : rows_all;
        const int64_t k0 = kb * 128, k1 = k0 + 128 < g->K ? k0 + 128 : g->K;
        const double f = draw_scale(seed, 1e-2, 1e4, 0, 0);
        float amax = 0.0f;
        for (int64_t r = r0; r < r1; r++)
          for (int64_t k = k0; k < k1; k++) {
            float v = (float)(rng_normal(seed) * f);
            x[(r - r0) * 128 + (k - k0)] = v;
            amax = fmaxf(amax, fabsf(v));
          }
        const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int64_t r = r0; r < r1; r++)
          for (int64_t k = k0; k < k1; k++) q[r * ld + k] = qf_e4m3fn_from_f32(x[(r - r0) * 128 + (k - k0)] / scale);
        if (pass == 0) as[gr * as_m + kb * as_k] = scale;
        else bs[gr * KB + kb] = scale;
      }
  }
}

/* Relative Frobenius and per-element tolerances. fp32, random codes: the tensor cores keep about
 * 14 bits while they accumulate a block (H200: up to 3e-4 seen, 1.1e-3 per element); exact data:
 * every block's sum is exact there, leaving the fp32 promotion's rounding. With fine promotion
 * each of those sums spans one wgmma's 32 products: the 1e-4 on the DeepSeek-style data
 * (H200: 4.5e-5 at K = 7168), twice as close as before on random codes (about 1.0e-4); every 64
 * of K (fine == 64), the same 1e-4 on the DeepSeek-style data and 3e-4 on random codes. bf16 and
 * fp16: their output rounding (up to 2^-9 and 2^-12 relative) on top. */
static void tolerances(const gemm_case *g, double *frob, double *elem) {
  if (g->dt == QF_F32 && g->fine) *frob = g->gauss ? 1e-4 : g->fine == 64 ? 3e-4 : 2e-4, *elem = g->gauss ? 2e-3 : 5e-3;
  else if (g->dt == QF_F32) *frob = g->exact ? 1e-6 : 1e-3, *elem = g->exact ? 1e-5 : 5e-3;
  else if (g->dt == QF_BF16) *frob = 5e-3, *elem = 1e-2;
  else *frob = 1e-3, *elem = 5e-3;
}

static void one_case(qf_ctx *gpu, qf_ctx *cpu, const gemm_case *g, uint64_t *seed) {
  const int64_t M = g->M, N = g->N, K = g->K, KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4;
  const int64_t as_ld = KB + 3; /* row-major a_scales: a strided pitch */
  const size_t osz = esz(g->dt);
  char what[256];
  snprintf(what, sizeof what, "M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " d=%s%s %s data, %s-major As, %s, lda=%" PRId64
           " ldb=%" PRId64 " ldd=%" PRId64 " plan %dx%d/%d", M, N, K, qf_dtype_name(g->dt), g->fine == 64 ? " fine64" : g->fine ? " fine" : "",
           g->exact ? "exact" : g->gauss ? "gauss" : "random",
           g->row_major_scales ? "row" : "column",
           g->c_mode == 0 ? "no C" : g->c_mode == 1 ? "C" : "C = D", g->lda, g->ldb, g->ldd, g->plan_m, g->plan_n,
           g->plan_splits);

  /* ---- host data ---- */
  uint8_t *a = malloc((size_t)(M * g->lda)), *b = malloc((size_t)(N * g->ldb));
  fill_e4m3(a, (size_t)(M * g->lda), g->exact, seed);
  fill_e4m3(b, (size_t)(N * g->ldb), g->exact, seed);
  /* fp16 holds at most 65504: smaller scales keep D finite there. */
  const double s_lo = 1e-4, s_hi = g->dt == QF_F16 ? 1e-2 : 1e2;
  const int exact_max_exp = g->dt == QF_F16 ? 0 : 4;
  const size_t as_n = g->row_major_scales ? (size_t)(M * as_ld) : (size_t)(KB * Mp);
  float *as = malloc(as_n * sizeof(float)), *bs = malloc((size_t)(NB * KB) * sizeof(float));
  for (size_t i = 0; i < as_n; i++) as[i] = draw_scale(seed, s_lo, s_hi, g->exact, exact_max_exp);
  for (int64_t i = 0; i < NB * KB; i++) bs[i] = draw_scale(seed, s_lo, s_hi, g->exact, exact_max_exp);
  if (g->gauss) fill_gauss(g, a, b, as, g->row_major_scales ? as_ld : 1, g->row_major_scales ? 1 : Mp, bs, seed);
#define AS(m, kb) as[g->row_major_scales ? (m) * as_ld + (kb) : (kb) * Mp + (m)]

  /* ---- reference rows: all, or a sample (first, last, random) ---- */
  const int full = (double)M * (double)N * (double)K <= FULL_REF_MACS;
  int64_t R = full ? M : 16;
  int64_t *rows = malloc((size_t)R * sizeof(int64_t));
  for (int64_t i = 0; i < R; i++) rows[i] = full ? i : i == 0 ? 0 : i == 1 ? M - 1 : (int64_t)(rng_next(seed) % (uint64_t)M);

  /* Reference without C, fp32 out, from copies of the sampled rows (row-major scales), or from
   * the very tensors the GPU reads when all rows are compared. */
  uint8_t *ra = a;
  float *ras = as;
  int64_t ra_ld = g->lda;
  qf_gemm_blockscale_opts ropts = {.a_scales_row_major = g->row_major_scales};
  if (!full) {
    ra = malloc((size_t)(R * K)), ras = malloc((size_t)(R * KB) * sizeof(float)), ra_ld = K;
    for (int64_t i = 0; i < R; i++) {
      memcpy(ra + i * K, a + rows[i] * g->lda, (size_t)K);
      for (int64_t kb = 0; kb < KB; kb++) ras[i * KB + kb] = AS(rows[i], kb);
    }
    ropts.a_scales_row_major = 1;
  }
  float *ref = malloc((size_t)(R * N) * sizeof(float));
  tensor2d ca, cas, cb, cbs, cd;
  tensor2d_init(&ca, ra, QF_E4M3FN, R, K, ra_ld, kDLCPU);
  if (ropts.a_scales_row_major) tensor2d_init(&cas, ras, QF_F32, R, KB, full ? as_ld : KB, kDLCPU);
  else tensor2d_init(&cas, ras, QF_F32, KB, R, Mp, kDLCPU);
  tensor2d_init(&cb, b, QF_E4M3FN, N, K, g->ldb, kDLCPU);
  tensor2d_init(&cbs, bs, QF_F32, NB, KB, KB, kDLCPU);
  tensor2d_init(&cd, ref, QF_F32, R, N, N, kDLCPU);
  CHECK(qf_gemm_fp8_blockscale(cpu, &ca.t, &cas.t, &cb.t, &cbs.t, &cd.t, &ropts) == QF_OK, "%s: cpu: %s", what,
        qf_ctx_last_error(cpu));

  /* C: as large as the product (RMS of the reference), so that dropping it cannot pass. */
  double ref_ss = 0.0;
  for (int64_t i = 0; i < R * N; i++) ref_ss += (double)ref[i] * ref[i];
  const double ref_rms = sqrt(ref_ss / (double)(R * N));
  const int64_t ldc = g->c_mode == 2 ? g->ldd : g->ldc;
  float *c = NULL;
  if (g->c_mode) {
    c = malloc((size_t)(M * ldc) * sizeof(float));
    for (int64_t i = 0; i < M * ldc; i++) c[i] = (float)(rng_normal(seed) * ref_rms);
  }

  /* ---- GPU ---- */
  const size_t dbytes = (size_t)((M - 1) * g->ldd + N) * osz + TAIL;
  uint8_t *da = dev_alloc((size_t)(M * g->lda)), *db = dev_alloc((size_t)(N * g->ldb)), *dd = dev_alloc(dbytes);
  float *das = dev_alloc(as_n * sizeof(float)), *dbs = dev_alloc((size_t)(NB * KB) * sizeof(float)), *dc = NULL;
  CUDA_OK(cudaMemcpy(da, a, (size_t)(M * g->lda), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, b, (size_t)(N * g->ldb), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(das, as, as_n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbs, bs, (size_t)(NB * KB) * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd, 0xff, dbytes));
  if (g->c_mode == 1) {
    dc = dev_alloc((size_t)(M * ldc) * sizeof(float));
    CUDA_OK(cudaMemcpy(dc, c, (size_t)(M * ldc) * sizeof(float), cudaMemcpyHostToDevice));
  } else if (g->c_mode == 2) {
    dc = (float *)dd; /* rows of C inside D; gaps and tail stay poisoned */
    for (int64_t m = 0; m < M; m++)
      CUDA_OK(cudaMemcpy(dc + m * ldc, c + m * ldc, (size_t)N * sizeof(float), cudaMemcpyHostToDevice));
  }
  tensor2d ga, gas, gb, gbs, gd, gc;
  tensor2d_init(&ga, da, QF_E4M3FN, M, K, g->lda, kDLCUDA);
  if (g->row_major_scales) tensor2d_init(&gas, das, QF_F32, M, KB, as_ld, kDLCUDA);
  else tensor2d_init(&gas, das, QF_F32, KB, M, Mp, kDLCUDA);
  tensor2d_init(&gb, db, QF_E4M3FN, N, K, g->ldb, kDLCUDA);
  tensor2d_init(&gbs, dbs, QF_F32, NB, KB, KB, kDLCUDA);
  tensor2d_init(&gd, dd, g->dt, M, N, g->ldd, kDLCUDA);
  tensor2d_init(&gc, dc, QF_F32, M, N, ldc, kDLCUDA);
  qf_gemm_blockscale_opts gopts = {.c = g->c_mode ? &gc.t : NULL, .a_scales_row_major = g->row_major_scales,
                                   .fine_promotion = g->fine};
  CHECK(gemm_gpu(gpu, g, &ga.t, &gas.t, &gb.t, &gbs.t, &gd.t, &gopts) == QF_OK, "%s: gpu: %s", what,
        qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  if (g->stream) CUDA_OK(cudaStreamSynchronize(g->stream));
  uint8_t *got = malloc(dbytes);
  CUDA_OK(cudaMemcpy(got, dd, dbytes, cudaMemcpyDeviceToHost));
  /* Split tiles (decode shapes, and the thin last wave of larger ones) sum their partial tiles in a
   * fixed order: a second run must give the same bytes (and finds the split counters back at
   * zero). Every shape runs twice; C = D would add C twice. */
  if (g->c_mode != 2) {
    uint8_t *again = malloc(dbytes);
    CHECK(gemm_gpu(gpu, g, &ga.t, &gas.t, &gb.t, &gbs.t, &gd.t, &gopts) == QF_OK, "%s: gpu, again: %s", what,
          qf_ctx_last_error(gpu));
    if (g->stream) CUDA_OK(cudaStreamSynchronize(g->stream));
    CUDA_OK(cudaMemcpy(again, dd, dbytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, again, dbytes) == 0, "%s: a second run gave different bytes", what);
    free(again);
  }

  /* ---- every element written, no NaN; gaps and tail untouched ---- */
  int64_t nan_count = 0, gap_bad = 0;
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) nan_count += isnan(out_to_f64(got, g->dt, (size_t)(m * g->ldd + n)));
    if (m + 1 < M)
      for (size_t i = (size_t)(m * g->ldd + N) * osz; i < (size_t)((m + 1) * g->ldd) * osz; i++) gap_bad += got[i] != 0xff;
  }
  for (size_t i = dbytes - TAIL; i < dbytes; i++) gap_bad += got[i] != 0xff;
  CHECK(nan_count == 0, "%s: %" PRId64 " elements NaN (unwritten or wrong)", what, nan_count);
  CHECK(gap_bad == 0, "%s: %" PRId64 " bytes written outside D (row gaps or past the end)", what, gap_bad);

  /* ---- error against the reference rows ---- */
  double frob_tol, elem_tol, err_ss = 0.0, want_ss = 0.0, worst = 0.0;
  int64_t worst_m = 0, worst_n = 0;
  tolerances(g, &frob_tol, &elem_tol);
  for (int64_t i = 0; i < R; i++) {
    const int64_t m = rows[i];
    for (int64_t nb = 0; nb < NB; nb++) {
      const int64_t n_end = (nb + 1) * 128 < N ? (nb + 1) * 128 : N;
      double blk_ss = 0.0;
      for (int64_t n = nb * 128; n < n_end; n++) {
        double want = (double)ref[i * N + n] + (c ? (double)c[m * ldc + n] : 0.0);
        blk_ss += want * want;
      }
      const double blk_rms = sqrt(blk_ss / (double)(n_end - nb * 128));
      for (int64_t n = nb * 128; n < n_end; n++) {
        double want = (double)ref[i * N + n] + (c ? (double)c[m * ldc + n] : 0.0);
        double have = out_to_f64(got, g->dt, (size_t)(m * g->ldd + n));
        double e = fabs(have - want) / (fabs(want) + blk_rms);
        if (!(e <= worst)) worst = e, worst_m = m, worst_n = n; /* NaN becomes the worst */
        err_ss += (have - want) * (have - want);
        want_ss += want * want;
      }
    }
  }
  const double frob = sqrt(err_ss / want_ss);
  CHECK(frob < frob_tol, "%s: relative Frobenius error %.3g (tolerance %.1g)", what, frob, frob_tol);
  CHECK(worst < elem_tol, "%s: element (%" PRId64 ", %" PRId64 ") off by %.3g of its block's RMS (tolerance %.1g)", what,
        worst_m, worst_n, worst, elem_tol);
  if (getenv("QF_TEST_VERBOSE")) printf("%s: frob %.3g, worst element %.3g\n", what, frob, worst);
#undef AS

  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(das), cudaFree(dbs);
  if (g->c_mode == 1) cudaFree(dc);
  if (!full) free(ra), free(ras);
  free(a), free(b), free(as), free(bs), free(rows), free(ref), free(c), free(got);
}

/* Driver entry point `name` (ABI `version`) through the runtime into *fn (a function pointer of
 * `size` bytes; copied, since ISO C has no cast from void * to a function pointer); 0 if absent. */
static int driver_fn(const char *name, int version, void *fn, size_t size) {
  void *f = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || f == NULL) {
    cudaGetLastError();
    return 0;
  }
  memcpy(fn, &f, size);
  return 1;
}

/* The GEMM on a stream of a green context that holds 8 SMs: its persistent grid, split units
 * included, must fit the partition. Sized for the whole device, (4096, 2112, 7168) split its
 * 256 x 128 tiles' last wave 16 ways, and the 16 units of a tile, which wait for each other, could
 * not all be resident on 8 SMs: the call never finished (H200: the library before the guard ran
 * this case into its 60 s limit). */
static void green_context_case(qf_ctx *gpu, qf_ctx *cpu, uint64_t *seed) {
  PFN_cuDeviceGetDevResource_v12040 get_device;
  PFN_cuDevSmResourceSplitByCount_v12040 split;
  PFN_cuDevResourceGenerateDesc_v12040 describe;
  PFN_cuGreenCtxCreate_v12040 create;
  PFN_cuGreenCtxStreamCreate_v12050 stream_create;
  PFN_cuGreenCtxDestroy_v12040 destroy;
  PFN_cuStreamDestroy_v4000 stream_destroy;
  const int found = driver_fn("cuDeviceGetDevResource", 12040, &get_device, sizeof get_device) &&
                    driver_fn("cuDevSmResourceSplitByCount", 12040, &split, sizeof split) &&
                    driver_fn("cuDevResourceGenerateDesc", 12040, &describe, sizeof describe) &&
                    driver_fn("cuGreenCtxCreate", 12040, &create, sizeof create) &&
                    driver_fn("cuGreenCtxStreamCreate", 12050, &stream_create, sizeof stream_create) &&
                    driver_fn("cuGreenCtxDestroy", 12040, &destroy, sizeof destroy) &&
                    driver_fn("cuStreamDestroy", 4000, &stream_destroy, sizeof stream_destroy);
  CHECK(found, "green contexts: driver entry points missing");
  if (!found) return;
  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUdevResource all, part, rest;
  unsigned groups = 1;
  CUdevResourceDesc desc;
  CUgreenCtx green = NULL;
  CUstream stream = NULL;
  CHECK(get_device((CUdevice)device, &all, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
            split(&part, &groups, &all, &rest, 0, 8) == CUDA_SUCCESS && groups == 1 &&
            describe(&desc, &part, 1) == CUDA_SUCCESS &&
            create(&green, desc, (CUdevice)device, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_SUCCESS &&
            stream_create(&stream, green, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS,
        "green contexts: a partition of 8 SMs could not be made");
  if (stream == NULL) return;
  CHECK(part.sm.smCount < 16, "green contexts: the partition has %u SMs", part.sm.smCount);
  CHECK(qf_ctx_set_stream(gpu, stream) == QF_OK, "qf_ctx_set_stream: %s", qf_ctx_last_error(gpu));
  gemm_case g = {.M = 4096, .N = 2112, .K = 7168, .dt = QF_BF16, .stream = (cudaStream_t)stream};
  g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
  one_case(gpu, cpu, &g, seed);
  /* On 8 SMs, (2304, 2112, 7168) runs 152 whole 256 x 128 tiles and one split 8 ways: a
   * cooperative launch of the partition's 8 CTAs. */
  g.M = 2304;
  one_case(gpu, cpu, &g, seed);
  CHECK(qf_ctx_set_stream(gpu, NULL) == QF_OK, "qf_ctx_set_stream: %s", qf_ctx_last_error(gpu));
  CHECK(stream_destroy(stream) == CUDA_SUCCESS && destroy(green) == CUDA_SUCCESS, "green contexts: teardown");
}

/* Split 256 x 128 tiles, whose units wait for each other, from two contexts on two streams at
 * once, four calls each: every call must finish (the cooperative launch starts a grid only when
 * all its CTAs fit) and give the bytes of the same call run alone. */
static void concurrent_streams_case(qf_ctx *gpu, uint64_t *seed) {
  const int64_t M = 4096, N = 2112, K = 7168, KB = K / 128, NB = (N + 127) / 128;
  const size_t dbytes = (size_t)(M * N) * 2;
  uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(N * K));
  float *as = malloc((size_t)(KB * M) * sizeof(float)), *bs = malloc((size_t)(NB * KB) * sizeof(float));
  fill_e4m3(a, (size_t)(M * K), 0, seed);
  fill_e4m3(b, (size_t)(N * K), 0, seed);
  for (int64_t i = 0; i < KB * M; i++) as[i] = draw_scale(seed, 1e-2, 1e2, 0, 4);
  for (int64_t i = 0; i < NB * KB; i++) bs[i] = draw_scale(seed, 1e-2, 1e2, 0, 4);
  uint8_t *da = dev_alloc((size_t)(M * K)), *db = dev_alloc((size_t)(N * K));
  float *das = dev_alloc((size_t)(KB * M) * sizeof(float)), *dbs = dev_alloc((size_t)(NB * KB) * sizeof(float));
  uint8_t *dd[3] = {dev_alloc(dbytes), dev_alloc(dbytes), dev_alloc(dbytes)};
  CUDA_OK(cudaMemcpy(da, a, (size_t)(M * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, b, (size_t)(N * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(das, as, (size_t)(KB * M) * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbs, bs, (size_t)(NB * KB) * sizeof(float), cudaMemcpyHostToDevice));
  tensor2d ga, gas, gb, gbs, gd[3];
  tensor2d_init(&ga, da, QF_E4M3FN, M, K, K, kDLCUDA);
  tensor2d_init(&gas, das, QF_F32, KB, M, M, kDLCUDA);
  tensor2d_init(&gb, db, QF_E4M3FN, N, K, K, kDLCUDA);
  tensor2d_init(&gbs, dbs, QF_F32, NB, KB, KB, kDLCUDA);
  for (int i = 0; i < 3; i++) tensor2d_init(&gd[i], dd[i], QF_BF16, M, N, N, kDLCUDA);

  /* the call alone */
  CHECK(qf_gemm_fp8_blockscale(gpu, &ga.t, &gas.t, &gb.t, &gbs.t, &gd[0].t, NULL) == QF_OK, "concurrent: alone: %s",
        qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  uint8_t *want = malloc(dbytes), *got = malloc(dbytes);
  CUDA_OK(cudaMemcpy(want, dd[0], dbytes, cudaMemcpyDeviceToHost));

  /* two contexts (each its own split counters), two streams, four calls each, no sync between */
  qf_ctx *other = NULL;
  if (!CHECK(qf_ctx_create(&other, QF_DEVICE_CUDA, 0) == QF_OK, "concurrent: a second context")) return;
  cudaStream_t st[2];
  for (int i = 0; i < 2; i++) CUDA_OK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
  qf_ctx *ctxs[2] = {gpu, other};
  for (int i = 0; i < 2; i++) CHECK(qf_ctx_set_stream(ctxs[i], st[i]) == QF_OK, "qf_ctx_set_stream");
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 2; i++)
      CHECK(qf_gemm_fp8_blockscale(ctxs[i], &ga.t, &gas.t, &gb.t, &gbs.t, &gd[1 + i].t, NULL) == QF_OK,
            "concurrent: stream %d, call %d: %s", i, r, qf_ctx_last_error(ctxs[i]));
  /* Both streams must drain within a minute (the eight calls take about a millisecond). */
  const time_t t0 = time(NULL);
  int done = 0;
  while (!done && time(NULL) - t0 < 60)
    done = cudaStreamQuery(st[0]) == cudaSuccess && cudaStreamQuery(st[1]) == cudaSuccess;
  if (!done) { /* a hung GPU would hang the teardown too: report and leave at once */
    fprintf(stderr, "FAIL concurrent: the two streams' split GEMMs did not finish within 60 s\n");
    fflush(stderr);
    _Exit(1);
  }
  for (int i = 0; i < 2; i++) {
    CUDA_OK(cudaMemcpy(got, dd[1 + i], dbytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, want, dbytes) == 0, "concurrent: stream %d gave other bytes than the call alone", i);
  }
  for (int i = 0; i < 2; i++) CHECK(qf_ctx_set_stream(ctxs[i], NULL) == QF_OK, "qf_ctx_set_stream");
  for (int i = 0; i < 2; i++) CUDA_OK(cudaStreamDestroy(st[i]));
  qf_ctx_destroy(other);
  for (int i = 0; i < 3; i++) cudaFree(dd[i]);
  cudaFree(da), cudaFree(db), cudaFree(das), cudaFree(dbs);
  free(a), free(b), free(as), free(bs), free(want), free(got);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x5EED6E33;
  const int64_t Ms[] = {1, 3, 64, 77, 128, 4097}, Ns[] = {16, 48, 128, 2112}, Ks[] = {16, 128, 576, 7168 + 128};
  const qf_dtype dts[] = {QF_BF16, QF_F32, QF_F16};

  /* The cross product of the shapes; the variant (output type, scale layout, C, strides) turns
   * with the case number, so that each one meets small and large shapes alike. */
  int i = 0;
  for (int exact = 0; exact < 2; exact++)
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
      for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++, i++) {
          if (quick && (Ms[mi] > 128 || Ns[ni] > 128 || Ks[ki] > 576)) continue;
          gemm_case g = {.M = Ms[mi], .N = Ns[ni], .K = Ks[ki], .dt = dts[i % 3], .exact = exact};
          g.row_major_scales = (i / 3) % 2;
          g.c_mode = (i / 2) % 3 == 2 && g.dt == QF_F32 ? 2 : (i / 2) % 3 == 1;
          const int strided = (i / 5) % 2;
          g.lda = g.K + (strided ? 32 : 0);
          g.ldb = g.K + (strided ? 16 : 0);
          g.ldd = g.N + (strided ? (i % 4 == 1 ? 3 : 8) : 0); /* odd pitches take the scalar stores */
          g.ldc = g.N + (strided ? 4 : 0);
          one_case(gpu, cpu, &g, &seed);
        }

  /* Every variant on one edge-heavy shape: rows and columns past the tiles, a partial K-block. */
  for (int v = 0; v < 3 * 2 * 3 * 2; v++) {
    gemm_case g = {.M = 77, .N = 208, .K = 400, .dt = dts[v % 3], .row_major_scales = (v / 3) % 2, .c_mode = v / 6 % 3,
                   .exact = v / 18};
    if (g.c_mode == 2 && g.dt != QF_F32) continue;
    g.lda = 432, g.ldb = 416, g.ldd = 211, g.ldc = 210;
    one_case(gpu, cpu, &g, &seed);
  }

  /* Fine promotion (fp32 D), every 32 and every 64 of K: 128 x 128 tiles split where they leave
   * SMs idle, the decode plans' 64 x 64 (M = 1 split 3 ways, M = 3) and 64 x 128 tiles (M = 5),
   * rows and columns past the tiles, partial K-blocks, both scale layouts, C and C = D,
   * on the DeepSeek-style data (the 1e-4) and on random codes; the same shapes without it
   * on the DeepSeek-style data. */
  {
    const int64_t fine_shapes[][3] = {{1, 2112, 7168}, {77, 208, 400}, {128, 4096, 7168 + 128}, {4097, 2112, 576},
                                      {3, 48, 16}, {1000, 7168, 2048}, {5, 12288, 576}};
    for (size_t si = 0; si < sizeof fine_shapes / sizeof fine_shapes[0]; si++)
      for (int v = 0; v < 5; v++) {
        if (quick && fine_shapes[si][0] * fine_shapes[si][1] * fine_shapes[si][2] > 64000000) continue;
        gemm_case g = {.M = fine_shapes[si][0], .N = fine_shapes[si][1], .K = fine_shapes[si][2], .dt = QF_F32,
                       .gauss = v != 1 && v != 4, .fine = v < 2 ? 32 : v > 2 ? 64 : 0, .row_major_scales = (int)(si % 2), .c_mode = (int)(si % 3)};
        g.lda = g.K + (si % 2 ? 16 : 0), g.ldb = g.K, g.ldd = g.N + (si % 2 ? 3 : 0), g.ldc = g.c_mode == 2 ? g.ldd : g.N;
        one_case(gpu, cpu, &g, &seed);
      }
  }

  /* Clustered 128 x 128 tiles fed by the bulk copy of column-major scales (M a multiple of 4):
   * 5 tile rows leave the last cluster a spare tile past M (no scale copy); 644 rows end on a
   * 4-row tile (a 16-byte copy). */
  if (!quick) {
    const int64_t cluster_ms[] = {640, 644};
    for (size_t mi = 0; mi < sizeof cluster_ms / sizeof cluster_ms[0]; mi++) {
      gemm_case g = {.M = cluster_ms[mi], .N = 7168, .K = 576, .dt = QF_BF16};
      g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
      one_case(gpu, cpu, &g, &seed);
    }
  }

  /* 65-128 rows with 64 K-blocks per unit: one row of 128 x 128 tiles, split in two (the
   * two-set loop at decode; rows past M in the tile, column-major scales with M not a multiple of
   * 4: the per-lane scale copies). */
  if (!quick) {
    gemm_case g = {.M = 99, .N = 7168, .K = 16384, .dt = QF_BF16};
    g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
    one_case(gpu, cpu, &g, &seed);
  }

  /* Short units (at most 8 K-blocks), whose weight-block scales come through the stages: one
   * wave of whole 128 x 128 tiles at 65-128 rows (132 tile columns, 5 K-blocks, the last one
   * partial), and 64 x 64 tiles at 40 rows (fp32 D, a partial last K-block, 141 tiles on 132 SMs). */
  if (!quick) {
    gemm_case g = {.M = 100, .N = 132 * 128, .K = 576, .dt = QF_BF16};
    g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
    one_case(gpu, cpu, &g, &seed);
    gemm_case h = {.M = 40, .N = 9008, .K = 1008, .dt = QF_F32};
    h.lda = h.K, h.ldb = h.K, h.ldd = h.N, h.ldc = h.N;
    one_case(gpu, cpu, &h, &seed);
  }

  /* Where 128-column tiles need more than a wave and N is a multiple of 192: 64 x 64 tiles
   * (M <= 64) or, on units of more than 16 K-blocks, one wave of 128 x 192 tiles on 132 SMs, each
   * tile row over two weight-scale blocks (tiles starting on a block and halfway into one), with
   * rows past M and a partial last K-block, bf16 and fp32 outputs (the staged and the direct
   * epilogue). Then N = 22016, no multiple of 192: on an H200's or an H100's 132 SMs (the DRAM
   * bounds the stream) one wave of 115 tiles of 128 x 192 at M = 100, the last a third empty. */
  if (!quick) {
    static const int64_t wide[][2] = {{1, 24576}, {33, 24576}, {100, 24576}, {128, 24576}, {100, 22016}}; /* M, N */
    for (size_t mi = 0; mi < sizeof wide / sizeof wide[0]; mi++) {
      gemm_case g = {.M = wide[mi][0], .N = wide[mi][1], .K = 2048 + 64, .dt = mi % 2 == 0 ? QF_BF16 : QF_F32};
      g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
      one_case(gpu, cpu, &g, &seed);
    }
  }

  /* One wave of 128 x 96 tiles at 65-128 rows where whole 128 x 128 tiles would fill at most two
   * thirds of the SMs on units of 64 K-blocks or more (the public call on an H200's DRAM; 128 x 128
   * elsewhere): tile rows straddling two weight-scale blocks from column group 4 or 8 on, rows
   * past M, a partial last K-block and a last tile of 64 columns (N = 11008), bf16 and fp32 D.
   * (The quick run takes the second, so that compute-sanitizer meets the tile.) */
  {
    static const int64_t mid[][2] = {{96, 10240}, {100, 11008}}; /* M, N */
    for (size_t mi = quick ? 1 : 0; mi < sizeof mid / sizeof mid[0]; mi++) {
      gemm_case g = {.M = mid[mi][0], .N = mid[mi][1], .K = 8192 + 64, .dt = mi % 2 == 0 ? QF_BF16 : QF_F32};
      g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
      one_case(gpu, cpu, &g, &seed);
    }
  }

  /* 256 x 128 tiles (two 64-row sub-tiles per warpgroup): on 132 SMs, M = 500 and 512 on
   * N = 8448 take one wave of them against two of 128 x 128; rows past M in the last tile, a
   * partial last K-block, bf16 (staged epilogue) and fp32 (direct) outputs, row-major As (its
   * cp.async copy) and fp32 C. */
  if (!quick) {
    const int64_t tall_ms[] = {500, 512};
    for (size_t mi = 0; mi < sizeof tall_ms / sizeof tall_ms[0]; mi++) {
      for (int dt = 0; dt < 2; dt++) {
        gemm_case g = {.M = tall_ms[mi], .N = 8448, .K = 576, .dt = dt ? QF_F32 : QF_BF16,
                       .row_major_scales = mi == 0 && dt, .c_mode = mi == 1 && dt};
        g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
        one_case(gpu, cpu, &g, &seed);
      }
    }
    /* four 256-row tiles, the last one three quarters past M, on 17 tile columns */
    gemm_case g = {.M = 1000, .N = 2176, .K = 576, .dt = QF_BF16};
    g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
    one_case(gpu, cpu, &g, &seed);
  }

  /* 256 x 128 tiles with a split last wave, each split unit adding a share of the tile's partials
   * (on 132 SMs): (4096, 2112, 7168) runs 264 whole tiles and 8 split 16 ways (bf16 D, staged
   * epilogue for the whole ones); (2000, 2112, 4160) 132 whole and 4 split 16 ways, the last
   * tile row 208 rows deep and a partial last K-block, with fp32 D and C at odd pitches (scalar
   * stores), then bf16 D at an odd pitch. */
  if (!quick) {
    gemm_case g = {.M = 4096, .N = 2112, .K = 7168, .dt = QF_BF16};
    g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
    one_case(gpu, cpu, &g, &seed);
    for (int v = 0; v < 2; v++) {
      gemm_case h = {.M = 2000, .N = 2112, .K = 4160, .dt = v ? QF_BF16 : QF_F32, .c_mode = !v};
      h.lda = h.K, h.ldb = h.K, h.ldd = h.N + 3, h.ldc = h.N + 1;
      one_case(gpu, cpu, &h, &seed);
    }
  }

  /* 256 x 128 tiles whose last round leaves more than half the SMs busy (on 132 SMs): 236 tiles,
   * 104 in the last round, each split into its owner's first 45 K-blocks and a helper's other 4,
   * 28 CTAs running up to 4 helpers each (Sm90Variant::kTallTail); the last tile row 232 rows
   * deep, a partial last tile column and K-block; bf16 D (staged epilogue), then fp32 D with C at
   * odd pitches (direct stores). (The quick run, under compute-sanitizer too, takes the first.) */
  for (int v = 0; v < (quick ? 1 : 2); v++) {
    gemm_case g = {.M = 1000, .N = 7504, .K = 6208, .dt = v ? QF_F32 : QF_BF16, .c_mode = v};
    g.lda = g.K, g.ldb = g.K, g.ldd = v ? g.N + 3 : g.N, g.ldc = g.N + 1;
    one_case(gpu, cpu, &g, &seed);
  }

  /* Every tile of the engine forced (qf_gemm_fp8_blockscale_with, the bench's plan sweep), whole
   * and split 4 ways, on shapes past the tiles' edges with a partial last K-block: (300, 1040,
   * 1088) has fewer tiles than the SMs in every shape (all split), (1000, 2176, 1088) 544 tiles
   * of 64 x 64 on 132 SMs (a last wave of 16 split) and 68 of 256 x 128 (those whole only: split
   * units of 256-row tiles must all be resident at once). bf16 D (staged epilogue) and fp32 D with
   * C (direct stores). Then plans the engine has no kernel for are refused and leave D as it was. */
  {
    static const int plans[][2] = {{64, 64}, {64, 128}, {128, 64}, {128, 96}, {128, 128}, {128, 192}, {192, 128}, {256, 128}};
    static const int64_t shapes[][3] = {{300, 1040, 1088}, {1000, 2176, 1088}};
    int v = 0;
    for (size_t si = 0; si < (quick ? 1 : 2); si++)
      for (size_t pi = 0; pi < sizeof plans / sizeof plans[0]; pi++)
        for (int splits = 1; splits <= 4; splits += 3, v++) {
          if (si == 1 && plans[pi][0] == 256 && splits > 1) continue; /* (refused below) */
          gemm_case g = {.M = shapes[si][0], .N = shapes[si][1], .K = shapes[si][2], .dt = v % 2 ? QF_F32 : QF_BF16,
                         .c_mode = v % 2, .plan_m = plans[pi][0], .plan_n = plans[pi][1], .plan_splits = splits};
          g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
          one_case(gpu, cpu, &g, &seed);
        }
    /* 192 x 128 tiles (three consumer warpgroups) at M < 192, A's box trimmed to 152 rows, with a
     * partial last K-block, whole and split 2 and 3 ways; then 204 tiles at M = 1000, a wave of
     * whole tiles and the rest split 4 ways (on 132 SMs) */
    static const int64_t triple[][4] = {  /* M, N, K, splits */
        {150, 1040, 3136, 1}, {150, 1040, 3136, 2}, {150, 1040, 3136, 3}, {1000, 4352, 1088, 4}};
    for (size_t ti = 0; ti < sizeof triple / sizeof triple[0]; ti++, v++) {
      gemm_case g = {.M = triple[ti][0], .N = triple[ti][1], .K = triple[ti][2], .dt = v % 2 ? QF_F32 : QF_BF16,
                     .c_mode = v % 2, .plan_m = 192, .plan_n = 128, .plan_splits = (int)triple[ti][3]};
      g.lda = g.K, g.ldb = g.K, g.ldd = g.N, g.ldc = g.N;
      one_case(gpu, cpu, &g, &seed);
    }
    const int64_t M = 1000, N = 2176, K = 1088, KB = 9, NB = 17;
    uint8_t *da = dev_alloc((size_t)(M * K)), *db = dev_alloc((size_t)(N * K));
    float *das = dev_alloc((size_t)(KB * M) * sizeof(float)), *dbs = dev_alloc((size_t)(NB * KB) * sizeof(float));
    uint16_t *dd = dev_alloc((size_t)(M * N) * 2);
    CUDA_OK(cudaMemset(da, 0x38, (size_t)(M * K)));
    CUDA_OK(cudaMemset(db, 0x38, (size_t)(N * K)));
    CUDA_OK(cudaMemset(das, 0, (size_t)(KB * M) * sizeof(float)));
    CUDA_OK(cudaMemset(dbs, 0, (size_t)(NB * KB) * sizeof(float)));
    CUDA_OK(cudaMemset(dd, 0xff, (size_t)(M * N) * 2));
    tensor2d ga, gas, gb, gbs, gd;
    tensor2d_init(&ga, da, QF_E4M3FN, M, K, K, kDLCUDA);
    tensor2d_init(&gas, das, QF_F32, KB, M, M, kDLCUDA);
    tensor2d_init(&gb, db, QF_E4M3FN, N, K, K, kDLCUDA);
    tensor2d_init(&gbs, dbs, QF_F32, NB, KB, KB, kDLCUDA);
    tensor2d_init(&gd, dd, QF_BF16, M, N, N, kDLCUDA);
    /* no such tile; no range; splits past 16; ranges under two K-blocks (9 K-blocks); 68 tiles of
     * 256 x 128 split 4 ways (272 units, which must all be resident: on fewer SMs) */
    static const int bad[][3] = {{96, 64, 1},  {256, 64, 1}, {192, 64, 1},  {128, 128, 0},
                                 {64, 64, 17}, {64, 64, 5},  {256, 128, 4}};
    int sms = 0;
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      if (bad[i][0] == 256 && bad[i][2] == 4 && sms >= 68 * 4) continue; /* (they fit on so large a GPU) */
      const qf_status st = qf_gemm_fp8_blockscale_with(gpu, &ga.t, &gas.t, &gb.t, &gbs.t, &gd.t, NULL, bad[i][0], bad[i][1],
                                                       bad[i][2]);
      CHECK(st == QF_ERR_UNSUPPORTED, "plan %dx%d/%d: status %d, expected QF_ERR_UNSUPPORTED", bad[i][0], bad[i][1],
            bad[i][2], (int)st);
    }
    uint16_t *got = malloc((size_t)(M * N) * 2);
    CUDA_OK(cudaMemcpy(got, dd, (size_t)(M * N) * 2, cudaMemcpyDeviceToHost));
    int64_t touched = 0;
    for (int64_t i = 0; i < M * N; i++) touched += got[i] != 0xffff;
    CHECK(touched == 0, "refused plans wrote %" PRId64 " elements of D", touched);
    free(got);
    cudaFree(da), cudaFree(db), cudaFree(das), cudaFree(dbs), cudaFree(dd);
  }

  if (!quick) concurrent_streams_case(gpu, &seed);
  if (!quick) green_context_case(gpu, cpu, &seed);

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_gemm_fp8_blockscale");
}
