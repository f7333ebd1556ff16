/* CUDA graphs: a decode step's calls captured once on a context's own stream and replayed.
 * Chains: qf_quant_group (1 x 128 groups, COL_MAJOR_TMA scales) -> qf_gemm_fp8_blockscale, and
 * qf_quant_token -> qf_gemm_scaled, each followed by qf_quant_token of D (the next layer's
 * activation). The chain is captured with PDL off and on, then replayed for ROUNDS rounds, each
 * after a copy of that round's x into the captured input buffer: every round's D and D's
 * quantization must equal, byte for byte, the same calls made directly on a context of the legacy
 * stream, synchronized between calls (the rounds' D differ from one another, checked, so a replay
 * that computed from stale inputs or left D as it was cannot pass). Shapes that split K (partials
 * and counters in the workspace), M = 1, one of 256 x 128 tiles whose last round is split (a
 * cooperative launch) and (4096, 7168, 16384), whose last round runs owners and helpers.
 * The workspace contract (qf_ctx_reserve_workspace): on a fresh context, and on one holding less
 * than the GEMM needs, a capture whose GEMM would have to grow the workspace gets
 * QF_ERR_UNSUPPORTED naming qf_ctx_reserve_workspace, nothing is allocated, and the
 * capture stays valid (it ends without error); once the bytes the direct calls took are reserved,
 * the same capture succeeds. The direct calls' workspace stays within the documented bound for the
 * GEMMs, 4 KB + 128 KB per SM (rounded up to the MiB the context allocates by). */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "tensors.h"

enum { ROUNDS = 3 };

typedef struct {
  int64_t M, N, K;
  int scaled; /* 0: quant_group -> gemm_fp8_blockscale; 1: quant_token -> gemm_scaled */
} graph_case;

/* The device side of one case: the captured input x, A and its scales, B and its scales, D, and
 * D's per-token quantization (q, then its M scales). */
typedef struct {
  const graph_case *c;
  uint8_t *dx, *da, *db, *dd, *dq;
  float *das, *dbs;
  tensor2d gx, ga, gas, gb, gbs, gd, gq;
  DLTensor as1, bs1, qs1;
  int64_t as_shape[1], bs_shape[1];
  size_t xbytes, dbytes, qbytes; /* qbytes: q and its scales */
} chain;

/* The chain's three calls on ctx; the first failure's status (its message in ctx). */
static qf_status step(qf_ctx *ctx, chain *h) {
  static const qf_group_quant_opts gopts = {.group_size = 128, .scale_layout = QF_SCALE_COL_MAJOR_TMA};
  const int scaled = h->c->scaled;
  qf_status st = scaled ? qf_quant_token(ctx, &h->gx.t, &h->ga.t, &h->as1, NULL, NULL)
                        : qf_quant_group(ctx, &h->gx.t, &h->ga.t, &h->gas.t, &gopts);
  if (st != QF_OK) return st;
  st = scaled ? qf_gemm_scaled(ctx, &h->ga.t, &h->as1, &h->gb.t, &h->bs1, &h->gd.t, NULL)
              : qf_gemm_fp8_blockscale(ctx, &h->ga.t, &h->gas.t, &h->gb.t, &h->gbs.t, &h->gd.t, NULL);
  if (st != QF_OK) return st;
  return qf_quant_token(ctx, &h->gd.t, &h->gq.t, &h->qs1, NULL, NULL);
}

/* D and D's quantization of the last step, into out (dbytes + qbytes). */
static void read_outputs(const chain *h, uint8_t *out) {
  CUDA_OK(cudaMemcpy(out, h->dd, h->dbytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out + h->dbytes, h->dq, h->qbytes, cudaMemcpyDeviceToHost));
}

static void run_case(qf_ctx *direct, const graph_case *c, int sms, uint64_t *seed, int check_refusal) {
  const int64_t M = c->M, N = c->N, K = c->K, KB = (K + 127) / 128, NB = (N + 127) / 128, Mp = (M + 3) / 4 * 4;
  char name[96];
  snprintf(name, sizeof name, "%s (%lld, %lld, %lld)", c->scaled ? "quant_token -> gemm_scaled" : "quant_group -> gemm_fp8_blockscale",
           (long long)M, (long long)N, (long long)K);
  chain h = {.c = c};
  h.xbytes = (size_t)(M * K) * 2, h.dbytes = (size_t)(M * N) * 2, h.qbytes = (size_t)(M * N) + (size_t)M * sizeof(float);
  const size_t as_count = c->scaled ? (size_t)M : (size_t)(KB * Mp), bs_count = c->scaled ? (size_t)N : (size_t)(NB * KB);
  const size_t out_bytes = h.dbytes + h.qbytes;

  /* inputs: ROUNDS activations (uniform in [-2, 2), cheap to draw at 67 M values a round), one
   * weight and its scales */
  uint16_t *x = malloc(h.xbytes * ROUNDS);
  uint8_t *b = malloc((size_t)(N * K));
  float *bs = malloc(bs_count * sizeof(float));
  for (size_t i = 0; i < (size_t)(M * K) * ROUNDS; i++) x[i] = qf_bf16_from_f32(4.0f * rng_uniform(seed) - 2.0f);
  for (size_t i = 0; i < (size_t)(N * K); i++) b[i] = draw_e4m3(seed);
  for (size_t i = 0; i < bs_count; i++) bs[i] = 0.01f + rng_uniform(seed);
  h.dx = dev_alloc(h.xbytes), h.da = dev_alloc((size_t)(M * K)), h.db = dev_alloc((size_t)(N * K));
  h.das = dev_alloc(as_count * sizeof(float)), h.dbs = dev_alloc(bs_count * sizeof(float));
  h.dd = dev_alloc(h.dbytes), h.dq = dev_alloc(h.qbytes);
  CUDA_OK(cudaMemcpy(h.db, b, (size_t)(N * K), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(h.dbs, bs, bs_count * sizeof(float), cudaMemcpyHostToDevice));
  tensor2d_init(&h.gx, h.dx, QF_BF16, M, K, K, kDLCUDA);
  tensor2d_init(&h.ga, h.da, QF_E4M3FN, M, K, K, kDLCUDA);
  tensor2d_init(&h.gb, h.db, QF_E4M3FN, N, K, K, kDLCUDA);
  tensor2d_init(&h.gas, h.das, QF_F32, KB, M, Mp, kDLCUDA);
  tensor2d_init(&h.gbs, h.dbs, QF_F32, NB, KB, KB, kDLCUDA);
  tensor2d_init(&h.gd, h.dd, QF_BF16, M, N, N, kDLCUDA);
  tensor2d_init(&h.gq, h.dq, QF_E4M3FN, M, N, N, kDLCUDA);
  h.as_shape[0] = M, h.bs_shape[0] = N;
  h.as1 = dl_tensor(h.das, QF_F32, 1, h.as_shape, kDLCUDA);
  h.bs1 = dl_tensor(h.dbs, QF_F32, 1, h.bs_shape, kDLCUDA);
  h.qs1 = dl_tensor(h.dq + (size_t)(M * N), QF_F32, 1, h.as_shape, kDLCUDA);

  /* the reference: direct calls, synchronized, round by round */
  int ok = 1;
  uint8_t *want = malloc(out_bytes * ROUNDS), *got = malloc(out_bytes);
  for (int r = 0; r < ROUNDS && ok; r++) {
    CUDA_OK(cudaMemcpy(h.dx, x + (size_t)(M * K) * r, h.xbytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(h.dd, 0xFF, h.dbytes));
    ok &= CHECK(step(direct, &h) == QF_OK, "%s: direct calls: %s", name, qf_ctx_last_error(direct));
    CUDA_OK(cudaDeviceSynchronize());
    read_outputs(&h, want + out_bytes * r);
  }
  for (int r = 1; r < ROUNDS && ok; r++)
    ok &= CHECK(memcmp(want + out_bytes * r, want + out_bytes * (r - 1), h.dbytes) != 0, "%s: rounds %d and %d gave the same D",
                name, r - 1, r);
  const size_t need = qf_ctx_workspace_bytes(direct), mib = (size_t)1 << 20;
  const size_t bound = (4096 + (size_t)sms * 131072 + mib - 1) / mib * mib;
  ok &= CHECK(need <= bound, "%s: the direct calls' workspace, %zu bytes, is past the documented %zu", name, need, bound);

  for (int pdl = 0; pdl < 2 && ok; pdl++) {
    graph_ctx g;
    ok &= graph_open(&g, pdl, 0, name);
    if (ok && check_refusal) {
      /* a fresh context (PDL off), or one holding 1 MiB, less than the GEMM needs (PDL on): the
       * workspace would have to grow inside the capture */
      const size_t held = pdl && need > ((size_t)1 << 20) ? (size_t)1 << 20 : 0;
      if (held) ok &= CHECK(qf_ctx_reserve_workspace(g.ctx, held) == QF_OK && qf_ctx_workspace_bytes(g.ctx) == held,
                            "%s: reserving %zu bytes: %s", name, held, qf_ctx_last_error(g.ctx));
      CUDA_OK(cudaMemset(h.dd, 0xFF, h.dbytes));
      graph_begin(&g);
      const qf_status st = step(g.ctx, &h);
      const cudaError_t end = cudaStreamEndCapture(g.stream, &g.graph);
      ok &= CHECK(st == QF_ERR_UNSUPPORTED && strstr(qf_ctx_last_error(g.ctx), "qf_ctx_reserve_workspace") != NULL,
                  "%s: a capture that needs the workspace to grow: %s (%s)", name, qf_status_str(st), qf_ctx_last_error(g.ctx));
      ok &= CHECK(end == cudaSuccess && g.graph != NULL, "%s: the capture stays valid after the refusal: %s", name,
                  cudaGetErrorString(end));
      ok &= CHECK(qf_ctx_workspace_bytes(g.ctx) == held, "%s: nothing allocated inside the capture", name);
      ok &= CHECK(dev_holds(h.dd, h.dbytes, 0xFF), "%s: D untouched by the refused capture", name);
      if (g.graph) CUDA_OK(cudaGraphDestroy(g.graph));
      g.graph = NULL;
    }
    ok &= CHECK(qf_ctx_reserve_workspace(g.ctx, need) == QF_OK && qf_ctx_workspace_bytes(g.ctx) >= need,
                "%s: reserving %zu bytes: %s", name, need, qf_ctx_last_error(g.ctx));
    if (ok) {
      graph_begin(&g);
      const qf_status st = step(g.ctx, &h);
      ok &= graph_end(&g, st == QF_OK, name);
    }
    for (int r = 0; r < ROUNDS && ok; r++) {
      CUDA_OK(cudaMemcpy(h.dx, x + (size_t)(M * K) * r, h.xbytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(h.dd, 0xFF, h.dbytes));
      CUDA_OK(cudaMemset(h.dq, 0xFF, h.qbytes));
      graph_replay(&g);
      read_outputs(&h, got);
      size_t bad = 0;
      for (size_t i = 0; i < out_bytes; i++) bad += got[i] != want[out_bytes * r + i];
      ok &= CHECK(bad == 0, "%s: replay, PDL %d, round %d: %zu of %zu bytes differ from the direct calls", name, pdl, r, bad,
                  out_bytes);
    }
    graph_close(&g);
  }
  free(want), free(got), free(x), free(b), free(bs);
  cudaFree(h.dx), cudaFree(h.da), cudaFree(h.db), cudaFree(h.das), cudaFree(h.dbs), cudaFree(h.dd), cudaFree(h.dq);
}

int main(void) {
  qf_ctx *direct, *cpu;
  open_contexts(&direct, &cpu);
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint64_t seed = 0x6A7F3C11u;
  const graph_case cases[] = {
      {16, 2112, 7168, 0},    /* 64 x 64 tiles split along K: the refusal is checked here */
      {1, 7168, 2048, 0},     /* M = 1 */
      {128, 4096, 7168, 0},   /* 128-row tiles split along K */
      {16, 4096, 7168, 1},    /* scaled FP8, split along K */
      {4096, 2112, 7168, 0},  /* 256 x 128 tiles, the last round split: a cooperative launch */
      {4096, 7168, 16384, 0}, /* 256 x 128 tiles, the last round's owners and helpers */
  };
  const int quick = quick_mode();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!quick || cases[i].M <= 128) run_case(direct, &cases[i], sms, &seed, i == 0);
  qf_ctx_destroy(direct);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_graph");
}
