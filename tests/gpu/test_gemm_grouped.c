/* qf_gemm_fp8_blockscale_grouped on CUDA against the CPU reference (float64 sums of the blockwise
 * formula, SwiGLU in float64). Each case lays its row blocks out over the experts as an engine's
 * contiguous MoE layout does (runs of several blocks, experts without tokens, a block of padding,
 * a short last block), passes expert_ids as every 128th element of a per-row index array on the
 * device, and poisons D with 0xFF bytes (NaN in all three output types): the rows of a padding block
 * and of a block whose expert id is out of range, D's row gaps and a tail past its end must stay
 * untouched; every other element must be written, within the tolerances of
 * test_gemm_fp8_blockscale (relative Frobenius error, and per element relative to its value plus
 * the RMS of its row). Shapes: few tiles (the 64-column tiles) and more tiles than SMs (128-column
 * ones), N with a partial weight-scale block, K with a partial K-block; bf16, fp16 and fp32 D. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "tensors.h"

enum { TAIL = 256 };

typedef struct {
  int64_t N, K;
  int experts;
  const int *blocks; /* expert of each 128-row block: -1 padding, >= experts out of range */
  int num_blocks;
  int64_t last_rows; /* rows of the last block (1 .. 128) */
  qf_dtype dt;
  int swiglu;
} grouped_case;

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : 2; }

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

/* Any finite e4m3fn code (the NaNs 0x7F / 0xFF become +-448). */
static void fill_e4m3(uint8_t *p, size_t n, uint64_t *seed) {
  for (size_t i = 0; i < n; i++) {
    uint8_t c = (uint8_t)rng_next(seed);
    p[i] = (c & 0x7f) == 0x7f ? (uint8_t)(c ^ 1) : c;
  }
}

/* As test_gemm_fp8_blockscale: fp32 carries the tensor cores' reduced-precision block sums.
 * SwiGLU multiplies two such sums, so an element's error can reach both factors' (H100: 7.6e-3 of
 * its row's RMS seen with fp32 D): twice the per-element bound there. */
static void tolerances(qf_dtype dt, int swiglu, double *frob, double *elem) {
  if (dt == QF_F32) *frob = 1e-3, *elem = 5e-3;
  else if (dt == QF_BF16) *frob = 5e-3, *elem = 1e-2;
  else *frob = 1e-3, *elem = 5e-3;
  if (swiglu) *elem *= 2;
}

static void one_case(qf_ctx *gpu, qf_ctx *cpu, const grouped_case *g, uint64_t *seed) {
  const int64_t M = (g->num_blocks - 1) * 128 + g->last_rows, N = g->N, K = g->K, E = g->experts;
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4, MB = g->num_blocks;
  const int64_t cols = g->swiglu ? N / 2 : N, ldd = cols + 8;
  const size_t osz = esz(g->dt);
  char what[200];
  snprintf(what, sizeof what, "M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " E=%" PRId64 " d=%s%s", M, N, K, E,
           qf_dtype_name(g->dt), g->swiglu ? " SwiGLU" : "");

  /* ---- host data: per-row expert ids (the reference's: out of range read as padding) ---- */
  uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(E * N * K));
  fill_e4m3(a, (size_t)(M * K), seed);
  fill_e4m3(b, (size_t)(E * N * K), seed);
  float *as = malloc((size_t)(KB * Mp) * sizeof(float)), *bs = malloc((size_t)(E * NB * KB) * sizeof(float));
  for (int64_t i = 0; i < KB * Mp; i++) as[i] = (float)exp(log(1e-4) + rng_uniform(seed) * log(1e2));
  for (int64_t i = 0; i < E * NB * KB; i++) bs[i] = (float)exp(log(1e-4) + rng_uniform(seed) * log(1e2));
  int32_t *row_ids = malloc((size_t)M * sizeof(int32_t)), *ref_ids = malloc((size_t)MB * sizeof(int32_t));
  for (int64_t m = 0; m < M; m++) row_ids[m] = g->blocks[m / 128];
  for (int64_t mb = 0; mb < MB; mb++) ref_ids[mb] = g->blocks[mb] < E ? g->blocks[mb] : -1;

  /* ---- reference (fp32 D, rows of skipped blocks left at 0xFF) ---- */
  float *ref = malloc((size_t)(M * cols) * sizeof(float));
  memset(ref, 0xff, (size_t)(M * cols) * sizeof(float));
  int64_t b_shape[3] = {E, N, K}, bs_shape[3] = {E, NB, KB}, ids_shape[1] = {MB}, row_stride[1] = {128};
  tensor2d ca, cas, cd;
  tensor2d_init(&ca, a, QF_E4M3FN, M, K, K, kDLCPU);
  tensor2d_init(&cas, as, QF_F32, KB, M, Mp, kDLCPU);
  tensor2d_init(&cd, ref, QF_F32, M, cols, cols, kDLCPU);
  DLTensor cb = dl_tensor(b, QF_E4M3FN, 3, b_shape, kDLCPU), cbs = dl_tensor(bs, QF_F32, 3, bs_shape, kDLCPU);
  DLTensor cids = dl_tensor(ref_ids, QF_I32, 1, ids_shape, kDLCPU);
  const qf_gemm_grouped_opts opts = {.epilogue = g->swiglu ? QF_GROUPED_SWIGLU : QF_GROUPED_NONE};
  CHECK(qf_gemm_fp8_blockscale_grouped(cpu, &ca.t, &cas.t, &cb, &cbs, &cids, &cd.t, &opts) == QF_OK, "%s: cpu: %s", what,
        qf_ctx_last_error(cpu));

  /* ---- GPU: expert_ids a view of every 128th per-row index ---- */
  const size_t dbytes = (size_t)((M - 1) * ldd + cols) * osz + TAIL;
  uint8_t *da = dev_alloc((size_t)(M * K)), *db = dev_alloc((size_t)(E * N * K)), *dd = dev_alloc(dbytes);
  float *das = dev_alloc((size_t)(KB * Mp) * sizeof(float)), *dbs = dev_alloc((size_t)(E * NB * KB) * sizeof(float));
  int32_t *dids = dev_alloc((size_t)M * sizeof(int32_t));
  CUDA_OK(cudaMemcpy(da, a, (size_t)(M * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, b, (size_t)(E * N * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(das, as, (size_t)(KB * Mp) * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbs, bs, (size_t)(E * NB * KB) * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dids, row_ids, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd, 0xff, dbytes));
  tensor2d ga, gas, gd;
  tensor2d_init(&ga, da, QF_E4M3FN, M, K, K, kDLCUDA);
  tensor2d_init(&gas, das, QF_F32, KB, M, Mp, kDLCUDA);
  tensor2d_init(&gd, dd, g->dt, M, cols, ldd, kDLCUDA);
  DLTensor gb = dl_tensor(db, QF_E4M3FN, 3, b_shape, kDLCUDA), gbs = dl_tensor(dbs, QF_F32, 3, bs_shape, kDLCUDA);
  DLTensor gids = dl_tensor(dids, QF_I32, 1, ids_shape, kDLCUDA);
  gids.strides = row_stride;
  CHECK(qf_gemm_fp8_blockscale_grouped(gpu, &ga.t, &gas.t, &gb, &gbs, &gids, &gd.t, &opts) == QF_OK, "%s: gpu: %s", what,
        qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  uint8_t *got = malloc(dbytes);
  CUDA_OK(cudaMemcpy(got, dd, dbytes, cudaMemcpyDeviceToHost));

  /* ---- skipped rows, gaps and tail untouched; the rest written and within tolerance ---- */
  double frob_tol, elem_tol, err_ss = 0.0, want_ss = 0.0, worst = 0.0;
  tolerances(g->dt, g->swiglu, &frob_tol, &elem_tol);
  int64_t untouched_bad = 0, worst_m = 0, worst_n = 0, checked = 0;
  for (int64_t m = 0; m < M; m++) {
    const uint8_t *row = got + (size_t)(m * ldd) * osz;
    const size_t row_end = m + 1 < M ? (size_t)ldd * osz : (size_t)cols * osz;
    if (ref_ids[m / 128] < 0) {
      for (size_t i = 0; i < row_end; i++) untouched_bad += row[i] != 0xff;
      continue;
    }
    for (size_t i = (size_t)cols * osz; i < row_end; i++) untouched_bad += row[i] != 0xff;
    double row_ss = 0.0;
    for (int64_t n = 0; n < cols; n++) row_ss += (double)ref[m * cols + n] * ref[m * cols + n];
    const double row_rms = sqrt(row_ss / (double)cols);
    for (int64_t n = 0; n < cols; n++) {
      const double want = ref[m * cols + n], have = out_to_f64(got, g->dt, (size_t)(m * ldd + n));
      const double e = fabs(have - want) / (fabs(want) + row_rms);
      if (!(e <= worst)) worst = e, worst_m = m, worst_n = n; /* NaN (unwritten) becomes the worst */
      err_ss += (have - want) * (have - want);
      want_ss += want * want;
      checked++;
    }
  }
  for (size_t i = dbytes - TAIL; i < dbytes; i++) untouched_bad += got[i] != 0xff;
  const double frob = sqrt(err_ss / want_ss);
  CHECK(checked > 0, "%s: no rows to compare", what);
  CHECK(untouched_bad == 0, "%s: %" PRId64 " bytes written in skipped rows, row gaps or past the end", what, untouched_bad);
  CHECK(frob < frob_tol, "%s: relative Frobenius error %.3g (tolerance %.1g)", what, frob, frob_tol);
  CHECK(worst < elem_tol, "%s: element (%" PRId64 ", %" PRId64 ") off by %.3g of its row's RMS (tolerance %.1g)", what, worst_m,
        worst_n, worst, elem_tol);
  if (getenv("QF_TEST_VERBOSE")) printf("%s: frob %.3g, worst element %.3g\n", what, frob, worst);

  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(das), cudaFree(dbs), cudaFree(dids);
  free(a), free(b), free(as), free(bs), free(row_ids), free(ref_ids), free(ref), free(got);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  uint64_t seed = 2024;
  /* 3 tiles of 128 rows: the 64-column tiles; a block of padding and an id out of range (4). */
  static const int few[] = {2, -1, 0, 4, 0};
  /* 10 blocks x 17 column tiles > the SMs: the 128-column tiles; expert 1 has no tokens. */
  static const int many[] = {0, 0, 0, 2, 2, -1, 3, 3, 3, 3};
  const grouped_case cases[] = {
      {.N = 256, .K = 512, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 37, .dt = QF_BF16},
      {.N = 256, .K = 512, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 37, .dt = QF_BF16, .swiglu = 1},
      {.N = 144, .K = 400, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 1, .dt = QF_F32},
      {.N = 144, .K = 400, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 128, .dt = QF_F16, .swiglu = 1},
      {.N = 2112, .K = 1024, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 100, .dt = QF_BF16},
      {.N = 2112, .K = 1024, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 100, .dt = QF_BF16, .swiglu = 1},
      {.N = 2112, .K = 784, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 128, .dt = QF_F32, .swiglu = 1},
      {.N = 4096, .K = 896, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 64, .dt = QF_F16},
  };
  const int n = quick_mode() ? 2 : (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) one_case(gpu, cpu, &cases[i], &seed);
  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_test_gemm_grouped");
}
