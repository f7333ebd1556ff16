/* Programmatic dependent launch (qf_ctx_set_pdl) on CUDA: a quantization kernel and the GEMM that
 * reads its output, launched back to back without a synchronization, for R rounds of different
 * activations through the same A and scale buffers. Every round's D must equal, byte for byte,
 * the D of the same two calls with PDL off and the device synchronized between them (the GEMMs
 * give the same bytes for the same inputs); a GEMM that read A or its scales before the
 * quantization had finished would compute from the round before's. The rounds' D differ from one
 * another (checked), so a stale A cannot pass.
 * Chains: qf_quant_group (1 x 128 groups, COL_MAJOR_TMA scales) -> qf_gemm_fp8_blockscale, and
 * qf_quant_token -> qf_gemm_scaled (per-token scales, which the epilogue's factor warp reads), on
 * shapes that split K (partials and counters written after the wait), one unsplit decode shape
 * and one of 256 x 128 tiles. The chains go on with a quantization of the GEMM's D, launched as
 * the GEMM's dependent (it must wait for D), each round into its own buffers, compared the same
 * way: qf_quant_group of the block-scaled D (where N is a multiple of 128), qf_quant_token and
 * qf_quant_per_tensor of the scaled one. Last, qf_rms_norm_quant of D with a residual (the add,
 * the norm and a quantization for the next GEMM, as between two layers), launched as the
 * dependent of the kernel before it: per 128 groups where N is a multiple of 128, else per token;
 * its residual (overwritten with y), q and scales compared the same way. It launches as a
 * dependent at decode (one CTA a row up to M = 128 here; rows of 16384 at M = 8 over clusters of
 * CTAs), as a plain kernel otherwise (M = 512; rows of 18432 at M = 512: the clusters that copy
 * rows ahead). */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "tensors.h"

enum { ROUNDS = 6 };

typedef struct {
  int64_t M, N, K;
  int scaled; /* 0: quant_group -> gemm_fp8_blockscale; 1: quant_token -> gemm_scaled */
} chain_case;

static void run_case(qf_ctx *plain, qf_ctx *pdl, const chain_case *c, uint64_t *seed) {
  const int64_t M = c->M, N = c->N, K = c->K, KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4;
  const size_t xbytes = (size_t)(M * K) * 2, dbytes = (size_t)(M * N) * 2;
  const size_t as_count = c->scaled ? (size_t)M : (size_t)(KB * Mp), bs_count = c->scaled ? (size_t)N : (size_t)(NB * KB);
  char name[96];
  snprintf(name, sizeof name, "%s (%lld, %lld, %lld)", c->scaled ? "quant_token -> gemm_scaled" : "quant_group -> gemm_fp8_blockscale",
           (long long)M, (long long)N, (long long)K);

  /* inputs: ROUNDS activations, one weight and its scales */
  uint16_t *x = malloc(xbytes * ROUNDS);
  uint8_t *b = malloc((size_t)(N * K));
  float *bs = malloc(bs_count * sizeof(float));
  for (size_t i = 0; i < (size_t)(M * K) * ROUNDS; i++) x[i] = qf_bf16_from_f32(rng_normal(seed));
  for (size_t i = 0; i < (size_t)(N * K); i++) b[i] = draw_e4m3(seed);
  for (size_t i = 0; i < bs_count; i++) bs[i] = 0.01f + rng_uniform(seed);
  uint8_t *dx = dev_alloc(xbytes * ROUNDS), *da = dev_alloc((size_t)(M * K)), *db = dev_alloc((size_t)(N * K));
  float *das = dev_alloc(as_count * sizeof(float)), *dbs = dev_alloc(bs_count * sizeof(float));
  uint8_t *dd = dev_alloc(dbytes * ROUNDS);
  /* D quantized again, per round: [M, N] e4m3 and its scales (block-scaled, N a multiple of 128:
   * [N / 128, Mp]; scaled: per token [M], then per tensor another [M, N] e4m3) */
  const int requant = c->scaled || N % 128 == 0;
  const size_t q2bytes = (size_t)(M * N), s2bytes = (c->scaled ? (size_t)M : (size_t)((N / 128) * Mp)) * sizeof(float);
  const size_t r2bytes = q2bytes + s2bytes + (c->scaled ? q2bytes : 0);
  uint8_t *dq2 = requant ? dev_alloc(r2bytes * ROUNDS) : NULL;
  /* RMSNorm + quant of D, per round: residual [M, N] bf16, q [M, N] e4m3, scales (per 128 groups
   * where N is a multiple of 128: [N / 128, Mp] column-major; else per token [M]); weight [N] */
  const int rms_groups = N % 128 == 0;
  const size_t s3bytes = (rms_groups ? (size_t)((N / 128) * Mp) : (size_t)M) * sizeof(float);
  const size_t r3bytes = dbytes + q2bytes + s3bytes;
  uint16_t *res = malloc(dbytes), *w = malloc((size_t)N * 2);
  for (size_t i = 0; i < (size_t)(M * N); i++) res[i] = qf_bf16_from_f32(rng_normal(seed));
  for (int64_t i = 0; i < N; i++) w[i] = qf_bf16_from_f32(0.5f + rng_uniform(seed));
  uint8_t *dq3 = dev_alloc(r3bytes * ROUNDS), *dw = dev_alloc((size_t)N * 2);
  CUDA_OK(cudaMemcpy(dw, w, (size_t)N * 2, cudaMemcpyHostToDevice));
  int64_t w_shape[1] = {N};
  DLTensor gw = dl_tensor(dw, QF_BF16, 1, w_shape, kDLCUDA);
  const qf_rms_norm_quant_opts ropts = {.group_size = rms_groups ? 128 : -1, .group = {.scale_layout = QF_SCALE_COL_MAJOR_TMA}};
  float one = 1.0f, *done = dev_alloc(sizeof(float)); /* the per-tensor scale */
  CUDA_OK(cudaMemcpy(done, &one, sizeof one, cudaMemcpyHostToDevice));
  int64_t one_shape[1] = {1};
  DLTensor gone = dl_tensor(done, QF_F32, 1, one_shape, kDLCUDA);
  CUDA_OK(cudaMemcpy(dx, x, xbytes * ROUNDS, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, b, (size_t)(N * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbs, bs, bs_count * sizeof(float), cudaMemcpyHostToDevice));

  tensor2d ga, gas, gb, gbs;
  tensor2d_init(&ga, da, QF_E4M3FN, M, K, K, kDLCUDA);
  tensor2d_init(&gb, db, QF_E4M3FN, N, K, K, kDLCUDA);
  int64_t as_shape[1] = {M}, bs_shape[1] = {N};
  DLTensor as1 = dl_tensor(das, QF_F32, 1, as_shape, kDLCUDA), bs1 = dl_tensor(dbs, QF_F32, 1, bs_shape, kDLCUDA);
  tensor2d_init(&gas, das, QF_F32, KB, M, Mp, kDLCUDA);
  tensor2d_init(&gbs, dbs, QF_F32, NB, KB, KB, kDLCUDA);
  const qf_group_quant_opts gopts = {.group_size = 128, .scale_layout = QF_SCALE_COL_MAJOR_TMA};

  /* round r: x_r -> A, scales -> D_r */
  int ok = 1;
  uint8_t *want = malloc(dbytes * ROUNDS), *got = malloc(dbytes * ROUNDS);
  uint8_t *want2 = requant ? malloc(r2bytes * ROUNDS) : NULL, *got2 = requant ? malloc(r2bytes * ROUNDS) : NULL;
  uint8_t *want3 = malloc(r3bytes * ROUNDS), *got3 = malloc(r3bytes * ROUNDS);
  for (int pass = 0; pass < 3 && ok; pass++) {
    qf_ctx *ctx = pass == 0 ? plain : pdl; /* pass 0: the reference, synchronized between calls */
    CUDA_OK(cudaMemset(dd, 0xFF, dbytes * ROUNDS));
    if (requant) CUDA_OK(cudaMemset(dq2, 0xFF, r2bytes * ROUNDS));
    CUDA_OK(cudaMemset(dq3, 0xFF, r3bytes * ROUNDS));
    for (int r = 0; r < ROUNDS; r++) CUDA_OK(cudaMemcpy(dq3 + r3bytes * r, res, dbytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < ROUNDS && ok; r++) {
      tensor2d gx, gd;
      tensor2d_init(&gx, dx + xbytes * r, QF_BF16, M, K, K, kDLCUDA);
      tensor2d_init(&gd, dd + dbytes * r, QF_BF16, M, N, N, kDLCUDA);
      qf_status st = c->scaled ? qf_quant_token(ctx, &gx.t, &ga.t, &as1, NULL, NULL)
                               : qf_quant_group(ctx, &gx.t, &ga.t, &gas.t, &gopts);
      ok &= CHECK(st == QF_OK, "%s: quantization: %s", name, qf_ctx_last_error(ctx));
      if (pass == 0) CUDA_OK(cudaDeviceSynchronize());
      st = c->scaled ? qf_gemm_scaled(ctx, &ga.t, &as1, &gb.t, &bs1, &gd.t, NULL)
                     : qf_gemm_fp8_blockscale(ctx, &ga.t, &gas.t, &gb.t, &gbs.t, &gd.t, NULL);
      ok &= CHECK(st == QF_OK, "%s: GEMM: %s", name, qf_ctx_last_error(ctx));
      if (pass == 0) CUDA_OK(cudaDeviceSynchronize());
      if (requant) {
        uint8_t *base = dq2 + r2bytes * r;
        tensor2d gq2, gs2, gq3;
        tensor2d_init(&gq2, base, QF_E4M3FN, M, N, N, kDLCUDA);
        tensor2d_init(&gs2, base + q2bytes, QF_F32, N / 128, M, Mp, kDLCUDA);
        tensor2d_init(&gq3, base + q2bytes + s2bytes, QF_E4M3FN, M, N, N, kDLCUDA);
        DLTensor s2 = dl_tensor(base + q2bytes, QF_F32, 1, as_shape, kDLCUDA);
        st = c->scaled ? qf_quant_token(ctx, &gd.t, &gq2.t, &s2, NULL, NULL) : qf_quant_group(ctx, &gd.t, &gq2.t, &gs2.t, &gopts);
        ok &= CHECK(st == QF_OK, "%s: D's quantization: %s", name, qf_ctx_last_error(ctx));
        if (pass == 0) CUDA_OK(cudaDeviceSynchronize());
        if (c->scaled) {
          ok &= CHECK(qf_quant_per_tensor(ctx, &gd.t, &gone, &gq3.t) == QF_OK, "%s: D's quantization: %s", name,
                      qf_ctx_last_error(ctx));
          if (pass == 0) CUDA_OK(cudaDeviceSynchronize());
        }
      }
      uint8_t *base3 = dq3 + r3bytes * r;
      tensor2d gres, gq3, gs3;
      tensor2d_init(&gres, base3, QF_BF16, M, N, N, kDLCUDA);
      tensor2d_init(&gq3, base3 + dbytes, QF_E4M3FN, M, N, N, kDLCUDA);
      tensor2d_init(&gs3, base3 + dbytes + q2bytes, QF_F32, N / 128, M, Mp, kDLCUDA);
      DLTensor s3 = dl_tensor(base3 + dbytes + q2bytes, QF_F32, 1, as_shape, kDLCUDA);
      st = qf_rms_norm_quant(ctx, &gd.t, &gres.t, &gw, &gq3.t, rms_groups ? &gs3.t : &s3, &ropts);
      ok &= CHECK(st == QF_OK, "%s: RMSNorm + quant of D: %s", name, qf_ctx_last_error(ctx));
      if (pass == 0) CUDA_OK(cudaDeviceSynchronize());
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(pass == 0 ? want : got, dd, dbytes * ROUNDS, cudaMemcpyDeviceToHost));
    if (requant) CUDA_OK(cudaMemcpy(pass == 0 ? want2 : got2, dq2, r2bytes * ROUNDS, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(pass == 0 ? want3 : got3, dq3, r3bytes * ROUNDS, cudaMemcpyDeviceToHost));
    if (pass == 0) {
      for (int r = 1; r < ROUNDS; r++)
        ok &= CHECK(memcmp(want + dbytes * r, want + dbytes * (r - 1), dbytes) != 0, "%s: rounds %d and %d gave the same D",
                    name, r - 1, r);
      continue;
    }
    for (int r = 0; r < ROUNDS; r++) {
      size_t bad = 0;
      for (size_t i = 0; i < dbytes; i++) bad += got[dbytes * r + i] != want[dbytes * r + i];
      ok &= CHECK(bad == 0, "%s: PDL pass %d, round %d: %zu of %zu bytes differ from the synchronized chain", name, pass, r,
                  bad, dbytes);
      bad = 0;
      for (size_t i = 0; i < r3bytes; i++) bad += got3[r3bytes * r + i] != want3[r3bytes * r + i];
      ok &= CHECK(bad == 0, "%s: PDL pass %d, round %d: RMSNorm + quant: %zu of %zu bytes differ from the synchronized chain",
                  name, pass, r, bad, r3bytes);
      if (!requant) continue;
      bad = 0;
      for (size_t i = 0; i < r2bytes; i++) bad += got2[r2bytes * r + i] != want2[r2bytes * r + i];
      ok &= CHECK(bad == 0, "%s: PDL pass %d, round %d: D's quantization: %zu of %zu bytes differ from the synchronized chain",
                  name, pass, r, bad, r2bytes);
    }
  }
  free(want), free(got), free(want2), free(got2), free(want3), free(got3), free(x), free(b), free(bs), free(res), free(w);
  cudaFree(dx), cudaFree(da), cudaFree(db), cudaFree(das), cudaFree(dbs), cudaFree(dd), cudaFree(dq2), cudaFree(done);
  cudaFree(dq3), cudaFree(dw);
}

int main(void) {
  qf_ctx *plain, *cpu, *pdl = NULL;
  open_contexts(&plain, &cpu);
  if (!CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "a PDL context"))
    return check_finish("gpu_pdl");
  uint64_t seed = 0x9D1C4A1Bu;
  const chain_case cases[] = {
      {16, 2112, 7168, 0},  /* 64 x 64 tiles split along K */
      {128, 4096, 7168, 0}, /* 128-row tiles split along K */
      {1, 7168, 2048, 0},   /* M = 1: scales copied per lane (M not a multiple of 4) */
      {512, 8448, 640, 0},  /* one wave of 256 x 128 tiles */
      {16, 4096, 7168, 1},  /* scaled FP8, split along K */
      {128, 6144, 4096, 1},
      {8, 16384, 1024, 0},   /* RMSNorm rows over clusters of CTAs */
      {512, 18432, 512, 0},  /* RMSNorm rows over clusters that copy rows ahead */
  };
  const int quick = quick_mode();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!quick || cases[i].K <= 2048) run_case(plain, pdl, &cases[i], &seed);
  qf_ctx_destroy(pdl);
  qf_ctx_destroy(plain);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_pdl");
}
