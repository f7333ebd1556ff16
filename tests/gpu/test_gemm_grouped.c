/* qf_gemm_fp8_blockscale_grouped on CUDA against the CPU reference (float64 sums of the blockwise
 * formula, SwiGLU in float64). Each case lays its row blocks out over the experts as an engine's
 * contiguous MoE layout does (runs of several blocks, experts without tokens, a block of padding,
 * a short last block), passes expert_ids as every 128th element of a per-row index array on the
 * device (or, masked, gives each expert max_m rows and a token count: none, a partial block, whole
 * blocks, counts past max_m and below 0, which the device reads as max_m and 0), and poisons D with 0xFF bytes (NaN in all three output types): the rows of a padding block
 * and of a block whose expert id is out of range, D's row gaps and a tail past its end must stay
 * untouched; every other element must be written, within the tolerances of
 * test_gemm_fp8_blockscale (relative Frobenius error, and per element relative to its value plus
 * the RMS of its row). Shapes: few tiles (the 64-column tiles) and more tiles than SMs (128-column
 * ones; on 132 SMs, 140 tiles at K = 4096 with a last wave of 8 split 16 ways, mostly padding),
 * N with a partial weight-scale block, K with a partial K-block; bf16, fp16 and fp32 D. Every case
 * runs twice and must give the same bytes (the split sums' fixed order), and so must a run on a
 * context with programmatic dependent launch (the kernels' dependent instantiations). The masked
 * cases are also captured once in a CUDA graph and replayed as the token counts change on the
 * device, each replay against a direct call with the same counts. */
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
  const int *blocks; /* contiguous: expert of each 128-row block: -1 padding, >= experts out of range */
  int num_blocks;
  int64_t last_rows; /* rows of the last block (1 .. 128) */
  qf_dtype dt;
  int swiglu;
  const int *tokens; /* masked (blocks NULL): each expert's token count (may exceed max_m) */
  int64_t max_m;
} grouped_case;


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

/* The op on ctx: contiguous (expert_ids a view of every 128th per-row id) or masked (a and d as
 * [E, max_m, ...] views of the same rows, the token counts). */
static qf_status call(qf_ctx *ctx, const grouped_case *g, DLDeviceType dev, void *a, void *as, void *b, void *bs,
                      int32_t *ids, int32_t *tokens, void *d, qf_dtype dt, int64_t M, int64_t ldd) {
  const int64_t N = g->N, K = g->K, E = g->experts, KB = (K + 127) / 128, Mp = (M + 3) / 4 * 4;
  const int64_t cols = g->swiglu ? N / 2 : N;
  int64_t b_shape[3] = {E, N, K}, bs_shape[3] = {E, (N + 127) / 128, KB};
  tensor2d at, ast, dt2;
  tensor2d_init(&at, a, QF_E4M3FN, M, K, K, dev);
  tensor2d_init(&ast, as, QF_F32, KB, M, Mp, dev);
  tensor2d_init(&dt2, d, dt, M, cols, ldd, dev);
  DLTensor bt = dl_tensor(b, QF_E4M3FN, 3, b_shape, dev), bst = dl_tensor(bs, QF_F32, 3, bs_shape, dev);
  const qf_gemm_grouped_opts opts = {.epilogue = g->swiglu ? QF_GROUPED_SWIGLU : QF_GROUPED_NONE};
  if (!g->tokens) {
    int64_t ids_shape[1] = {(M + 127) / 128}, ids_stride[1] = {128};
    DLTensor idt = dl_tensor(ids, QF_I32, 1, ids_shape, dev);
    idt.strides = ids_stride;
    return qf_gemm_fp8_blockscale_grouped(ctx, &at.t, &ast.t, &bt, &bst, &idt, &dt2.t, &opts);
  }
  int64_t a_shape[3] = {E, g->max_m, K}, d_shape[3] = {E, g->max_m, cols}, d_strides[3] = {g->max_m * ldd, ldd, 1};
  int64_t t_shape[1] = {E};
  DLTensor a3 = dl_tensor(a, QF_E4M3FN, 3, a_shape, dev), d3 = dl_tensor(d, dt, 3, d_shape, dev);
  DLTensor tt = dl_tensor(tokens, QF_I32, 1, t_shape, dev);
  d3.strides = d_strides;
  return qf_gemm_fp8_blockscale_masked(ctx, &a3, &ast.t, &bt, &bst, &tt, &d3, &opts);
}

static void one_case(qf_ctx *gpu, qf_ctx *pdl, qf_ctx *cpu, const grouped_case *g, uint64_t *seed) {
  const int masked = g->tokens != NULL;
  const int64_t M = masked ? g->experts * g->max_m : (g->num_blocks - 1) * 128 + g->last_rows;
  const int64_t N = g->N, K = g->K, E = g->experts;
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4, MB = (M + 127) / 128;
  const int64_t cols = g->swiglu ? N / 2 : N, ldd = cols + 8;
  const size_t osz = float_size(g->dt);
  char what[200];
  snprintf(what, sizeof what, "%s M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " E=%" PRId64 " d=%s%s", masked ? "masked" : "contiguous",
           M, N, K, E, qf_dtype_name(g->dt), g->swiglu ? " SwiGLU" : "");

  /* ---- host data: per-row expert ids (the reference's: out of range read as padding) ---- */
  uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(E * N * K));
  fill_e4m3(a, (size_t)(M * K), seed);
  fill_e4m3(b, (size_t)(E * N * K), seed);
  float *as = malloc((size_t)(KB * Mp) * sizeof(float)), *bs = malloc((size_t)(E * NB * KB) * sizeof(float));
  for (int64_t i = 0; i < KB * Mp; i++) as[i] = (float)exp(log(1e-4) + rng_uniform(seed) * log(1e2));
  for (int64_t i = 0; i < E * NB * KB; i++) bs[i] = (float)exp(log(1e-4) + rng_uniform(seed) * log(1e2));
  /* per row (contiguous) or per expert (masked) as the GPU gets them; the reference's, in range */
  int32_t *row_ids = malloc((size_t)M * sizeof(int32_t)), *ref_ids = malloc((size_t)MB * sizeof(int32_t));
  int32_t *tokens = malloc((size_t)E * sizeof(int32_t)), *ref_tokens = malloc((size_t)E * sizeof(int32_t));
  for (int64_t e = 0; masked && e < E; e++)
    tokens[e] = g->tokens[e], ref_tokens[e] = g->tokens[e] < 0 ? 0 : g->tokens[e] > g->max_m ? (int32_t)g->max_m : g->tokens[e];
  for (int64_t m = 0; !masked && m < M; m++) row_ids[m] = g->blocks[m / 128];
  for (int64_t mb = 0; mb < MB; mb++) {  /* the expert of each block, -1 where it is skipped */
    const int64_t e = masked ? mb * 128 / g->max_m : 0;
    ref_ids[mb] = masked ? (mb * 128 - e * g->max_m < ref_tokens[e] ? (int32_t)e : -1) : g->blocks[mb] < E ? g->blocks[mb] : -1;
  }

  /* ---- reference (fp32 D, rows of skipped blocks left at 0xFF) ---- */
  float *ref = malloc((size_t)(M * cols) * sizeof(float));
  memset(ref, 0xff, (size_t)(M * cols) * sizeof(float));
  int32_t *ref_row_ids = malloc((size_t)M * sizeof(int32_t));
  for (int64_t m = 0; m < M; m++) ref_row_ids[m] = ref_ids[m / 128];
  CHECK(call(cpu, g, kDLCPU, a, as, b, bs, ref_row_ids, ref_tokens, ref, QF_F32, M, cols) == QF_OK, "%s: cpu: %s", what,
        qf_ctx_last_error(cpu));

  /* ---- GPU: expert_ids a view of every 128th per-row index ---- */
  const size_t dbytes = (size_t)((M - 1) * ldd + cols) * osz + TAIL;
  uint8_t *da = dev_alloc((size_t)(M * K)), *db = dev_alloc((size_t)(E * N * K)), *dd = dev_alloc(dbytes);
  float *das = dev_alloc((size_t)(KB * Mp) * sizeof(float)), *dbs = dev_alloc((size_t)(E * NB * KB) * sizeof(float));
  int32_t *dids = dev_alloc((size_t)M * sizeof(int32_t)), *dtokens = dev_alloc((size_t)E * sizeof(int32_t));
  CUDA_OK(cudaMemcpy(da, a, (size_t)(M * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, b, (size_t)(E * N * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(das, as, (size_t)(KB * Mp) * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbs, bs, (size_t)(E * NB * KB) * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dids, row_ids, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dtokens, tokens, (size_t)E * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd, 0xff, dbytes));
  CHECK(call(gpu, g, kDLCUDA, da, das, db, dbs, dids, dtokens, dd, g->dt, M, ldd) == QF_OK, "%s: gpu: %s", what,
        qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  uint8_t *got = malloc(dbytes), *again = malloc(dbytes);
  CUDA_OK(cudaMemcpy(got, dd, dbytes, cudaMemcpyDeviceToHost));
  CHECK(call(gpu, g, kDLCUDA, da, das, db, dbs, dids, dtokens, dd, g->dt, M, ldd) == QF_OK, "%s: gpu, again: %s", what,
        qf_ctx_last_error(gpu));
  CUDA_OK(cudaMemcpy(again, dd, dbytes, cudaMemcpyDeviceToHost));
  CHECK(memcmp(got, again, dbytes) == 0, "%s: a second run gave different bytes", what);
  /* the kernels a context with programmatic dependent launch runs: the same bytes */
  CUDA_OK(cudaMemset(dd, 0xff, dbytes));
  CHECK(call(pdl, g, kDLCUDA, da, das, db, dbs, dids, dtokens, dd, g->dt, M, ldd) == QF_OK, "%s: gpu, pdl: %s", what,
        qf_ctx_last_error(pdl));
  CUDA_OK(cudaMemcpy(again, dd, dbytes, cudaMemcpyDeviceToHost));
  CHECK(memcmp(got, again, dbytes) == 0, "%s: the PDL context's run gave different bytes", what);
  if (masked) {
    /* A CUDA graph of the masked call (its own stream, the workspace reserved first), captured once
     * and replayed as the token counts change on the device, as in an engine's decode steps: the
     * counts as given, rotated by one expert, every expert full. Each replay's D equals, byte for
     * byte, a direct call's with the same counts (D filled with 0xFF before each: skipped rows stay). */
    graph_ctx gr;
    int gok = graph_open(&gr, 0, qf_ctx_workspace_bytes(gpu), what);
    if (gok) {
      graph_begin(&gr);
      const qf_status gs = call(gr.ctx, g, kDLCUDA, da, das, db, dbs, dids, dtokens, dd, g->dt, M, ldd);
      gok = graph_end(&gr, gs == QF_OK, what);
    }
    int32_t *counts = malloc((size_t)E * sizeof(int32_t));
    uint8_t *replay = malloc(dbytes);
    for (int round = 0; round < 3 && gok; round++) {
      for (int64_t e = 0; e < E; e++)
        counts[e] = round == 0 ? tokens[e] : round == 1 ? tokens[(e + 1) % E] : (int32_t)g->max_m;
      CUDA_OK(cudaMemcpy(dtokens, counts, (size_t)E * sizeof(int32_t), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(dd, 0xff, dbytes));
      CHECK(call(gpu, g, kDLCUDA, da, das, db, dbs, dids, dtokens, dd, g->dt, M, ldd) == QF_OK, "%s: direct call, round %d",
            what, round);
      CUDA_OK(cudaMemcpy(again, dd, dbytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemset(dd, 0xff, dbytes));
      graph_replay(&gr);
      CUDA_OK(cudaMemcpy(replay, dd, dbytes, cudaMemcpyDeviceToHost));
      CHECK(memcmp(again, replay, dbytes) == 0, "%s: graph replay, round %d: D differs from the direct call's", what, round);
      if (round == 0) CHECK(memcmp(again, got, dbytes) == 0, "%s: round 0 differs from the first run", what);
      else CHECK(memcmp(again, got, dbytes) != 0 || memcmp(counts, tokens, (size_t)E * sizeof(int32_t)) == 0,
                 "%s: round %d's counts gave the first run's D", what, round);
    }
    CUDA_OK(cudaMemcpy(dtokens, tokens, (size_t)E * sizeof(int32_t), cudaMemcpyHostToDevice));
    free(counts), free(replay);
    graph_close(&gr);
  }
  free(again);

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
      const double want = ref[m * cols + n], have = float_get(got, g->dt, (size_t)(m * ldd + n));
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

  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(das), cudaFree(dbs), cudaFree(dids), cudaFree(dtokens);
  free(a), free(b), free(as), free(bs), free(row_ids), free(ref_ids), free(ref_row_ids), free(tokens), free(ref_tokens);
  free(ref), free(got);
}

int main(void) {
  qf_ctx *gpu, *cpu, *pdl;
  open_contexts(&gpu, &cpu);
  CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "no PDL context");
  uint64_t seed = 2024;
  /* 3 tiles of 128 rows: the 64-column tiles; a block of padding and an id out of range (4). */
  static const int few[] = {2, -1, 0, 4, 0};
  /* 10 blocks x 17 column tiles > the SMs: the 128-column tiles; expert 1 has no tokens. */
  static const int many[] = {0, 0, 0, 2, 2, -1, 3, 3, 3, 3};
  /* 70 blocks, three of them live, of 2 tile columns at K = 4096 on 132 SMs: 140 tiles, the last 8
   * in the walk split 16 ways, block 69 among them, the rest padding */
  static int sparse[70];
  for (int i = 0; i < 70; i++) sparse[i] = i == 0 ? 0 : i == 35 || i == 69 ? 1 : -1;
  /* masked: an expert without tokens, a partial block, whole blocks, a count past max_m and a
   * negative one (read as max_m and as 0 on the device) */
  static const int tokens[] = {0, 37, 256, 130, 300, -5};
  const grouped_case cases[] = {
      {.N = 256, .K = 512, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 37, .dt = QF_BF16},
      {.N = 256, .K = 512, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 37, .dt = QF_BF16, .swiglu = 1},
      {.N = 144, .K = 400, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 1, .dt = QF_F32},
      {.N = 144, .K = 400, .experts = 4, .blocks = few, .num_blocks = 5, .last_rows = 128, .dt = QF_F16, .swiglu = 1},
      {.N = 2112, .K = 1024, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 100, .dt = QF_BF16},
      {.N = 2112, .K = 1024, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 100, .dt = QF_BF16, .swiglu = 1},
      {.N = 2112, .K = 784, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 128, .dt = QF_F32, .swiglu = 1},
      {.N = 4096, .K = 896, .experts = 4, .blocks = many, .num_blocks = 10, .last_rows = 64, .dt = QF_F16},
      {.N = 256, .K = 4096, .experts = 2, .blocks = sparse, .num_blocks = 70, .last_rows = 128, .dt = QF_BF16},
      {.N = 256, .K = 4096, .experts = 2, .blocks = sparse, .num_blocks = 70, .last_rows = 128, .dt = QF_F32, .swiglu = 1},
      {.N = 256, .K = 512, .experts = 6, .tokens = tokens, .max_m = 256, .dt = QF_BF16},
      {.N = 2112, .K = 784, .experts = 6, .tokens = tokens, .max_m = 256, .dt = QF_F32, .swiglu = 1},
      {.N = 4096, .K = 1024, .experts = 6, .tokens = tokens, .max_m = 384, .dt = QF_BF16, .swiglu = 1},
  };
  const int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++)
    if (!quick_mode() || i < 2 || i == n - 3) one_case(gpu, pdl, cpu, &cases[i], &seed);
  qf_ctx_destroy(gpu);
  qf_ctx_destroy(pdl);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_test_gemm_grouped");
}
