/* NVFP4 on the GPU against the CPU reference: qf_quant_nvfp4 and qf_nvfp4_pack byte for byte,
 * and qf_gemm_nvfp4 over decode and prefill shapes (every token tile, K split or not, partial
 * last steps of K, each of the prefill launcher's three kernels), both activation types and every
 * output type, strided rows, poisoned outputs with sentinels, zero and NaN block scales; then
 * every plan of the wgmma kernel forced (qf_gemm_nvfp4_with: each token tile, split or not,
 * whatever the heuristic picks), and the plans it refuses.
 *
 * GEMM bound, per element: CUDA's products code * scale are exact and it accumulates them times
 * a in fp32, so |got - ref| <= 2^-14 * sum_k |a w^| (rounding errors of fp32 sums of up to 7296
 * terms grow like sqrt(K) 2^-24, about 2^-17.6 of the magnitudes: 8x room) plus half a unit in
 * the last place of a 16-bit output. The sum of
 * magnitudes comes from the CPU reference run on |a| and |codes| (the packed layout's sign bits
 * are bits 12..15 of each half, so masking them gives |codes|). */
#include <math.h>
#include <string.h>

#include "core/backend.h"
#include "gpu.h"

static int64_t one = 1;

typedef struct {
  int64_t M, N, K;
  qf_dtype at, dt;
  int pad;        /* row pitches padded (a by 8, b by 32 values, scales by 2, d by 3) */
  int nan_scale;  /* one block scale NaN: its row is NaN for every token */
  int wg, tok, split; /* wg > 0: the wgmma kernel's plan forced (qf_gemm_nvfp4_with) */
} gemm_case;

/* The weight of a case: codes as stored and scales from qf_quant_nvfp4 on the GPU, checked
 * against the CPU's, then packed on both and compared. Returns the packed codes and scales on
 * the host (hp, hs) and the device (dp, ds). */
static void make_weight(qf_ctx *gpu, qf_ctx *cpu, const gemm_case *g, int64_t ldb, int64_t lds, float ts,
                        uint64_t *seed, uint8_t **hp, uint8_t **hs, void **dp, void **ds, void **dts) {
  const int64_t N = g->N, K = g->K;
  const qf_dtype wt = g->pad ? QF_BF16 : QF_F32;
  const size_t wbytes = (size_t)(N * K) * float_size(wt);
  void *w = malloc(wbytes);
  for (int64_t i = 0; i < N * K; i++) {
    float v = rng_normal(seed) * (i % 61 == 0 ? 10.0f : 1.0f);
    if ((i / 16) % 53 == 7) v = 0.0f; /* some all-zero blocks: scale 0 */
    float_put(w, wt, (size_t)i, v);
  }
  pair wp, tp, cp, sp, pp;
  pair_init(&wp, wbytes, w);
  pair_init(&tp, 4, &ts);
  pair_init(&cp, (size_t)(N * ldb / 2), NULL);
  pair_init(&sp, (size_t)(N * lds), NULL);
  pair_init(&pp, (size_t)(N * ldb / 2), NULL);
  tensor2d W[2], C[2], S[2], P[2];
  DLTensor T[2];
  for (int b = 0; b < 2; b++) {
    const DLDeviceType dev = b ? kDLCUDA : kDLCPU;
    tensor2d_init(&W[b], b ? wp.dev : wp.ref, wt, N, K, K, dev);
    tensor2d_init(&C[b], b ? cp.dev : cp.ref, QF_E2M1X2, N, K, ldb, dev);
    tensor2d_init(&S[b], b ? sp.dev : sp.ref, QF_E4M3FN, N, K / 16, lds, dev);
    tensor2d_init(&P[b], b ? pp.dev : pp.ref, QF_E2M1X2, N, K, ldb, dev);
    T[b] = dl_tensor(b ? tp.dev : tp.ref, QF_F32, 1, &one, dev);
  }
  CHECK(qf_quant_nvfp4(cpu, &W[0].t, &T[0], &C[0].t, &S[0].t) == QF_OK, "cpu quant: %s", qf_ctx_last_error(cpu));
  CHECK(qf_quant_nvfp4(gpu, &W[1].t, &T[1], &C[1].t, &S[1].t) == QF_OK, "gpu quant: %s", qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  char desc[96];
  snprintf(desc, sizeof desc, "quant %s N=%lld K=%lld", qf_dtype_name(wt), (long long)N, (long long)K);
  pair_check(&cp, "codes", desc);
  pair_check(&sp, "scales", desc);
  CHECK(qf_nvfp4_pack(cpu, &C[0].t, &P[0].t) == QF_OK, "cpu pack: %s", qf_ctx_last_error(cpu));
  CHECK(qf_nvfp4_pack(gpu, &C[1].t, &P[1].t) == QF_OK, "gpu pack: %s", qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&pp, "packed", desc);
  if (g->nan_scale) { /* row 5, block 1 */
    sp.ref[5 * lds + 1] = 0x7F;
    CUDA_OK(cudaMemcpy(sp.dev, sp.ref, sp.bytes, cudaMemcpyHostToDevice));
  }
  *hp = pp.ref, *hs = sp.ref, *dp = pp.dev, *ds = sp.dev, *dts = tp.dev;
  free(pp.got), free(sp.got), free(tp.ref), free(tp.got);
  pair_free(&wp), pair_free(&cp);
  free(w);
}

static void one_case(qf_ctx *gpu, qf_ctx *cpu, const gemm_case *g, uint64_t *seed) {
  const int64_t M = g->M, N = g->N, K = g->K;
  const int64_t lda = K + 8 * g->pad, ldb = K + 32 * g->pad, lds = K / 16 + 2 * g->pad, ldd = N + 3 * g->pad;
  const float ts = 0.013f;
  uint8_t *hp, *hs;
  void *dp, *ds, *dts;
  make_weight(gpu, cpu, g, ldb, lds, ts, seed, &hp, &hs, &dp, &ds, &dts);

  const size_t abytes = (size_t)(M * lda) * 2, dbytes = (size_t)(M * ldd) * float_size(g->dt);
  uint16_t *a = malloc(abytes), *a_abs = malloc(abytes);
  for (int64_t i = 0; i < M * lda; i++) {
    float_put(a, g->at, (size_t)i, rng_activation(seed, 1.0f, 0));
    float_put(a_abs, g->at, (size_t)i, fabsf(float_get(a, g->at, (size_t)i)));
  }
  uint8_t *p_abs = malloc((size_t)(N * ldb / 2));
  for (int64_t i = 0; i < N * ldb / 8; i++) ((uint32_t *)p_abs)[i] = ((uint32_t *)hp)[i] & 0x0FFF0FFFu;
  float *ref = malloc((size_t)(M * N) * 4), *mag = malloc((size_t)(M * N) * 4);
  void *got = malloc(dbytes + PAIR_TAIL);
  void *da = dev_alloc(abytes), *dd = dev_alloc(dbytes + PAIR_TAIL);
  CUDA_OK(cudaMemcpy(da, a, abytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd, POISON, dbytes + PAIR_TAIL));

  /* The reference in fp32 (the float64 sum rounded once), and the sum of magnitudes. */
  tensor2d A, B, S, D;
  DLTensor T = dl_tensor((void *)&ts, QF_F32, 1, &one, kDLCPU);
  tensor2d_init(&A, a, g->at, M, K, lda, kDLCPU);
  tensor2d_init(&B, hp, QF_E2M1X2, N, K, ldb, kDLCPU);
  tensor2d_init(&S, hs, QF_E4M3FN, N, K / 16, lds, kDLCPU);
  tensor2d_init(&D, ref, QF_F32, M, N, N, kDLCPU);
  CHECK(qf_gemm_nvfp4(cpu, &A.t, &B.t, &S.t, &T, &D.t) == QF_OK, "cpu gemm: %s", qf_ctx_last_error(cpu));
  tensor2d_init(&A, a_abs, g->at, M, K, lda, kDLCPU);
  tensor2d_init(&B, p_abs, QF_E2M1X2, N, K, ldb, kDLCPU);
  tensor2d_init(&D, mag, QF_F32, M, N, N, kDLCPU);
  CHECK(qf_gemm_nvfp4(cpu, &A.t, &B.t, &S.t, &T, &D.t) == QF_OK, "cpu gemm |a| |w|: %s", qf_ctx_last_error(cpu));

  tensor2d_init(&A, da, g->at, M, K, lda, kDLCUDA);
  tensor2d_init(&B, dp, QF_E2M1X2, N, K, ldb, kDLCUDA);
  tensor2d_init(&S, ds, QF_E4M3FN, N, K / 16, lds, kDLCUDA);
  tensor2d_init(&D, dd, g->dt, M, N, ldd, kDLCUDA);
  T = dl_tensor(dts, QF_F32, 1, &one, kDLCUDA);
  const qf_status st = g->wg ? qf_gemm_nvfp4_with(gpu, &A.t, &B.t, &S.t, &T, &D.t, g->wg, g->tok, g->split)
                             : qf_gemm_nvfp4(gpu, &A.t, &B.t, &S.t, &T, &D.t);
  CHECK(st == QF_OK, "gpu gemm: %s", qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got, dd, dbytes + PAIR_TAIL, cudaMemcpyDeviceToHost));

  const double half_ulp = g->dt == QF_F32 ? 0.0 : g->dt == QF_BF16 ? 0x1p-8 : 0x1p-11;
  long bad = 0, nan_bad = 0, pad_touched = 0;
  double worst = 0, err2 = 0, ref2 = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < ldd; n++) {
      if (n >= N) {
        const uint8_t *e = (const uint8_t *)got + (size_t)(m * ldd + n) * float_size(g->dt);
        for (size_t i = 0; i < float_size(g->dt); i++) pad_touched += e[i] != POISON;
        continue;
      }
      const double r = ref[m * N + n], v = float_get(got, g->dt, (size_t)(m * ldd + n));
      if (isnan(r) || isnan(v)) {
        nan_bad += isnan(r) != isnan(v);
        continue;
      }
      const double bound = 0x1p-14 * mag[m * N + n] + half_ulp * fabs(r) + (g->dt == QF_F16 ? 0x1p-25 : 1e-30);
      const double e = fabs(v - r);
      bad += !(e <= bound);
      if (e / bound > worst) worst = e / bound;
      err2 += (v - r) * (v - r), ref2 += r * r;
    }
  long tail = 0;
  for (size_t i = 0; i < PAIR_TAIL; i++) tail += ((uint8_t *)got)[dbytes + i] != POISON;
  char desc[160], plan[48] = "";
  if (g->wg) snprintf(plan, sizeof plan, " plan %dx%d split %d", g->wg, g->tok, g->split);
  snprintf(desc, sizeof desc, "gemm %s->%s M=%lld N=%lld K=%lld pad=%d%s%s", qf_dtype_name(g->at), qf_dtype_name(g->dt),
           (long long)M, (long long)N, (long long)K, g->pad, g->nan_scale ? " nan-scale" : "", plan);
  CHECK(bad == 0, "%s: %ld elements past the bound (worst %.2f of it)", desc, bad, worst);
  CHECK(nan_bad == 0, "%s: %ld elements NaN on one side only", desc, nan_bad);
  CHECK(sqrt(err2 / (ref2 + 1e-300)) < (g->dt == QF_F32 ? 1e-5 : 5e-3), "%s: relative Frobenius error %.3g", desc,
        sqrt(err2 / (ref2 + 1e-300)));
  CHECK(pad_touched == 0 && tail == 0, "%s: wrote %ld padding and %ld sentinel bytes", desc, pad_touched, tail);
  if (g->nan_scale && M > 0) CHECK(isnan(float_get(got, g->dt, 5)), "%s: row 5 of token 0 is not NaN", desc);

  free(a), free(a_abs), free(p_abs), free(ref), free(mag), free(got), free(hp), free(hs);
  void *bufs[] = {da, dd, dp, ds, dts};
  for (int i = 0; i < 5; i++) CUDA_OK(cudaFree(bufs[i]));
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0xF4F4;
  /* The mma.sync kernel (M = 1, 3, 8), then the wgmma kernel's tiles of 64 rows by M / token tiles
   * rounded up to 16 tokens: 16, 32, 48, 80, 96 and 128 (M = 16, 17, 33, 77, 90 and 120; 130: two
   * tiles of 80; 64 and 112 below); K split in clusters (N = 64: one row tile) or not (N = 2112 at
   * K = 576), partial last steps (K = 7264, 96, 608). */
  const int64_t Ms[] = {1, 3, 8, 16, 17, 33, 77, 90, 120, 130};
  const int64_t NKs[][2] = {{64, 7168 + 96}, {2112, 576}, {48, 96}, {256, 608}, {16, 32}};
  const qf_dtype outs[] = {QF_BF16, QF_F32, QF_F16};
  int v = 0;
  for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
    for (size_t s = 0; s < sizeof NKs / sizeof *NKs; s++, v++) {
      if (quick && ((Ms[mi] > 17 && Ms[mi] != 77) || NKs[s][0] * NKs[s][1] > 200000)) continue; /* 77: the wgmma kernel */
      gemm_case g = {.M = Ms[mi], .N = NKs[s][0], .K = NKs[s][1], .at = v % 2 ? QF_F16 : QF_BF16, .dt = outs[v % 3],
                     .pad = v % 4 == 1, .nan_scale = v % 7 == 3};
      one_case(gpu, cpu, &g, &seed);
    }
  /* Many row tiles (on a 132-SM GPU): 64 tokens x 17936 rows on 64 x 64 tiles (281, the last one
   * 16 rows; K = 1056 a partial last step) and 300 x 16400 on the two-warpgroup 128 x 160 tiles,
   * four ring stages (2 x 129, the last row tile 16 rows, the last token tile 140 tokens; padded
   * pitches, a NaN scale); both activation types. */
  const int64_t wide[][3] = {{64, 17936, 1056}, {300, 16400, 160}};
  for (size_t l = 0; l < sizeof wide / sizeof *wide && !quick; l++)
    for (int t = 0; t < 2; t++) {
      gemm_case g = {.M = wide[l][0], .N = wide[l][1], .K = wide[l][2], .at = t ? QF_F16 : QF_BF16,
                     .dt = l ? QF_BF16 : QF_F32, .pad = (int)l, .nan_scale = (int)l};
      one_case(gpu, cpu, &g, &seed);
    }
  /* K splits (132 SMs): 100 x 2544 x 3136 on tiles of 64 rows x 112 tokens in 2 (40 tiles, the
   * last one 48 rows; 25 steps, the last partial; padded pitches, a NaN scale) and 40 x 640 x 12320
   * on 64 x 48 tiles in 8 (10 tiles, 97 steps). */
  const int64_t split_cases[][3] = {{100, 2544, 3136}, {40, 640, 12320}};
  for (size_t l = 0; l < sizeof split_cases / sizeof *split_cases && !quick; l++) {
    gemm_case g = {.M = split_cases[l][0], .N = split_cases[l][1], .K = split_cases[l][2], .at = l ? QF_F16 : QF_BF16,
                   .dt = l ? QF_F32 : QF_BF16, .pad = l == 0, .nan_scale = l == 0};
    one_case(gpu, cpu, &g, &seed);
  }
  /* Model-sized decode shapes, both activation types; then the mma.sync kernel's three-stage ring
   * (CTAs of 8 chunks or more, 132 SMs): 529 row tiles unsplit (the last one 16 rows; 32 whole
   * steps and a partial one), 101 split 2 (8 chunks a CTA, the split's partial sums in the ring,
   * the last row tile 16 rows) and one split 16 (a non-portable cluster); and one row tile split
   * 16 on the two-stage ring (5 chunks a CTA). */
  const int64_t large[][3] = {{1, 7168, 2048}, {16, 4096, 7168}, {64, 2112, 7168}, {1, 33808, 4192},
                              {3, 6416, 8288},  {1, 64, 65632},   {1, 64, 40960}};
  for (size_t l = 0; l < sizeof large / sizeof *large && !quick; l++)
    for (int t = 0; t < 2; t++) {
      gemm_case g = {.M = large[l][0], .N = large[l][1], .K = large[l][2], .at = t ? QF_F16 : QF_BF16,
                     .dt = t ? QF_F32 : QF_BF16};
      one_case(gpu, cpu, &g, &seed);
    }

  /* Every plan of the wgmma kernel forced: the one-warpgroup tiles of each instantiated token
   * count, unsplit and split 4, 8 or 2 in turn (128 tokens split 8), and the two-warpgroup ones
   * (unsplit); M = 3 (one
   * partial token tile) and tok + 5 (a second one of 5 tokens); N = 208 (the last 64- or 128-row
   * tile partial), K = 1120 (9 steps, the last partial: the 8-way split's last CTA takes two). */
  {
    const int tiles[][2] = {{1, 16}, {1, 32}, {1, 48}, {1, 64},  {1, 80},  {1, 96},
                            {1, 112}, {1, 128}, {2, 160}, {2, 192}, {2, 224}, {2, 256}};
    for (size_t i = 0; i < sizeof tiles / sizeof *tiles; i++)
      for (int sp = 0; sp < 2; sp++) {
        const int wg = tiles[i][0], tok = tiles[i][1];
        if (quick && tok % 64) continue;
        gemm_case g = {.M = sp ? tok + 5 : 3, .N = 208, .K = 1120, .at = i % 2 ? QF_F16 : QF_BF16,
                       .dt = outs[(i + (size_t)sp) % 3], .pad = (int)(i % 3 == 1), .nan_scale = sp && i % 4 == 2,
                       .wg = wg, .tok = tok, .split = sp && wg == 1 ? 2 << ((i + 1) % 3) : 1};
        one_case(gpu, cpu, &g, &seed);
      }
  }
  /* A 1 x 16 x 32 problem on zeroed buffers: a misaligned weight pointer is refused on the GPU
   * (16-byte loads); so are forced plans with no such tile, a split of two warpgroups, of 16, or
   * of more CTAs than steps (K = 32: one step), and one of more CTAs than a grid holds; all leave
   * d untouched, and a valid forced plan then writes d = 0. */
  {
    void *b = dev_alloc(64 * 32), *s = dev_alloc(64 * 4), *a = dev_alloc(64 * 2), *d = dev_alloc(64 * 4);
    float ts = 1.0f;
    void *t = dev_alloc(4);
    CUDA_OK(cudaMemcpy(t, &ts, 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(a, 0, 64 * 2));
    CUDA_OK(cudaMemset(b, 0, 64 * 32));
    CUDA_OK(cudaMemset(s, 0, 64 * 4));
    CUDA_OK(cudaMemset(d, POISON, 64 * 4));
    tensor2d A, B, S, D;
    tensor2d_init(&A, a, QF_BF16, 1, 32, 32, kDLCUDA);
    tensor2d_init(&B, b, QF_E2M1X2, 16, 32, 32, kDLCUDA);
    tensor2d_init(&S, s, QF_E4M3FN, 16, 2, 2, kDLCUDA);
    tensor2d_init(&D, d, QF_F32, 1, 16, 16, kDLCUDA);
    DLTensor T = dl_tensor(t, QF_F32, 1, &one, kDLCUDA);
    B.t.byte_offset = 8;
    CHECK(qf_gemm_nvfp4(gpu, &A.t, &B.t, &S.t, &T, &D.t) == QF_ERR_ALIGNMENT, "misaligned b: %s", qf_ctx_last_error(gpu));
    B.t.byte_offset = 0;
    const int bad[][3] = {{1, 40, 1}, {1, 256, 1}, {2, 128, 1}, {2, 176, 1}, {2, 256, 2},
                          {1, 64, 16}, {1, 64, 3}, {1, 64, 2}, {0, 64, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      const qf_status st = qf_gemm_nvfp4_with(gpu, &A.t, &B.t, &S.t, &T, &D.t, bad[i][0], bad[i][1], bad[i][2]);
      CHECK(st == QF_ERR_UNSUPPORTED, "plan %dx%d split %d: status %s (%s)", bad[i][0], bad[i][1], bad[i][2],
            qf_status_str(st), qf_ctx_last_error(gpu));
    }
    /* 2^30 tokens on 16-token tiles by 2048 rows: 2^31 CTAs (refused before anything is read) */
    tensor2d Ab, Bb, Sb, Db;
    tensor2d_init(&Ab, a, QF_BF16, (int64_t)1 << 30, 32, 32, kDLCUDA);
    tensor2d_init(&Bb, b, QF_E2M1X2, 2048, 32, 32, kDLCUDA);
    tensor2d_init(&Sb, s, QF_E4M3FN, 2048, 2, 2, kDLCUDA);
    tensor2d_init(&Db, d, QF_F32, (int64_t)1 << 30, 2048, 2048, kDLCUDA);
    const qf_status big = qf_gemm_nvfp4_with(gpu, &Ab.t, &Bb.t, &Sb.t, &T, &Db.t, 1, 16, 1);
    CHECK(big == QF_ERR_UNSUPPORTED && strstr(qf_ctx_last_error(gpu), "CTAs") != NULL,
          "2^31 CTAs: status %s (%s)", qf_status_str(big), qf_ctx_last_error(gpu));
    CHECK(dev_poisoned(d, 64 * 4), "a refused call wrote to d");
    CHECK(qf_gemm_nvfp4_with(gpu, &A.t, &B.t, &S.t, &T, &D.t, 1, 64, 1) == QF_OK, "plan 1x64: %s", qf_ctx_last_error(gpu));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(dev_holds(d, 64, 0), "the valid forced plan did not write d = 0 (zero weights)");
    CHECK(dev_poisoned((uint8_t *)d + 64, 64 * 3), "the valid forced plan wrote past d");
    void *bufs[] = {b, s, a, d, t};
    for (int i = 0; i < 5; i++) CUDA_OK(cudaFree(bufs[i]));
  }
  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_test_nvfp4");
}
