/* qfuse-bench rows of VQ-GeMV (M <= 16) and VQ-GeMM (M > 16): qf_vq_gemm against cuBLASLt's fp16
 * GEMM on the uncompressed fp16 weight, timed in the same run.
 *
 * Shapes: the linear layers of Llama-7B (N, K) in {(4096, 4096), (11008, 4096), (4096, 11008)} and
 * Llama-65B {(8192, 8192), (22016, 8192), (8192, 22016)}, M in {1, 16, 64, 256} (--m: any one M up
 * to 256); formats GPTVQ-2
 * and AQLM-3 (with fp32 row scales, as AQLM stores them), QuIP#-4 (the E8P lattice decoded from the
 * index bits) and "quip4-books" (the same books, 1 MiB each, read as books); fp16 x and y. CQ-2 / CQ-4 are KV-cache
 * formats (a codebook per 2 or 4 channels shared by every token: as weights their books would
 * outweigh the codes) and get no rows here.
 * The quantized weights are random codes and random fp16 codebooks made on the host (QuIP#-4: the
 * lattice books qf_vq_quantize makes for a 16 x 64 weight, as the decoder needs them): the kernels'
 * time does not depend on the values, and k-means on a 22016 x 8192 matrix (qf_vq_quantize, CPU)
 * would take hours. The peer's fp16 weight is a constant pattern (0x2C2C, about 0.065 per element).
 *
 * Rows, op "vq_gemm", per (format, shape):
 *  - "<fmt>,fp16,auto=GC|SC|banked|tiled|lut": the public qf_vq_gemm (the heuristic's codebook placement, named);
 *  - "<fmt>,fp16,GC" and "<fmt>,fp16,SC": the placement forced (the paper's baselines: codebooks
 *    read through L1/L2, codebooks staged in shared memory), through qf_cuda_vq_gemm_with (M <= 16)
 *    or qf_cuda_vq_gemm_mma_with (M > 16); "<fmt>,fp16,SC+reg": SC with the codebook cache's
 *    register tier (the 32 hottest entries of a warp's book in registers, read by shuffle; M <= 16,
 *    8-bit indices with vs 2 or 4: GPTVQ-2; the codes are uniform here, so 32 of 256 entries take
 *    an eighth of the lookups); "<fmt>,fp16,banked": the banked VQ-GeMV (bank-private
 *    book copies, codebook-centric split-K; M <= 16, 8-bit formats; QuIP#-4: the E8P GeMV);
 *    "<fmt>,fp16,banked-1split": the same with its split-K forced to one range (the codebook cache
 *    without the dataflow's split, for the ablation); "<fmt>,fp16,tiled": the tiled
 *    VQ-GeMM (W decoded once per block tile; any M, through qf_cuda_vq_gemm_mma_with);
 *    "<fmt>,fp16,tiled-1split": the same with its split-K forced to one range, where the heuristic
 *    splits (the fusion without the dataflow's split along K, for the ablation at M > 16); "<fmt>,fp16,lut": a table
 *    VQ-GeMV (tables of entry . x products, one lookup per vector; M = 1: AQLM-3's one book per
 *    residual, GPTVQ-2's tile-table kernel); "<fmt>,fp16,lut-packed": the
 *    public call on the codes packed for it (qf_vq_pack_gemv, done once, untimed). A placement the kernel cannot
 *    use for the shape is skipped with a line saying why (no row).
 *  - "<fmt>,fp16,unfused": the ablation's no-fusion baseline, qf_vq_dequantize into an fp16 weight
 *    then the peer's cuBLASLt GEMM on it, timed together.
 * Bytes (the floor's and GB/s): codes + codebooks + scales + x + y, the bytes the kernel must move
 * (a lattice format's books are decoded, not read: codes + scales + x + y);
 * flops 2 M N K with the fp16 tensor peak taken as half the measured FP8 ceiling. The goal:
 * VQ-GeMV at M = 1 at >= 75% of the copy bandwidth on those bytes (pct_floor >= 75). The peer
 * "cublaslt_f16" reads the fp16 weight (2 N K bytes) + x + y. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ops.h"
#include "formats/formats.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "core/backend.h"
#include "cublaslt.h"
#include "cuda/vq/vq_gemm_heuristic.h"
#include "cuda/vq/vq_heuristic.h"

#define VQB_MAX_M 256

static uint64_t vqb_rand(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

static int vqb_cuda(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return 1;
  fprintf(stderr, "bench_vq_gemm: %s: %s\n", what, cudaGetErrorString(err));
  return 0;
}

/* A random quantized weight on the device. */
typedef struct {
  const char *name;
  qf_vq_format f;
  qf_vq_sizes sz;
  int64_t N, K;
  int64_t cshape[3], bshape[4], sshape[1];
  void *codes, *books;
  float *scales;
  size_t code_bytes, book_bytes, scale_bytes;
} vqb_weight;

/* The books of a lattice format with one book per residual (sz: the bench weight's sizes), made by
 * qf_vq_quantize on a CPU context from a 16 x 64 weight. */
static int vqb_lattice_books(qf_vq_format f, qf_vq_sizes sz, uint16_t *books) {
  enum { N = 16, K = 64 };
  qf_vq_sizes small;
  qf_ctx *cpu = NULL;
  if (sz.n_books != 1 || qf_ctx_create(&cpu, QF_DEVICE_CPU, 0) != QF_OK) return 0;
  float w[N * K], scales[N];
  uint64_t seed = 0xE8Full;
  for (int i = 0; i < N * K; i++) w[i] = (float)((double)(vqb_rand(&seed) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
  uint8_t *codes = NULL;
  int ok = qf_vq_sizes_of(cpu, &f, N, K, &small) == QF_OK &&
           (codes = malloc((size_t)(f.residuals * N * small.row_bytes))) != NULL;
  if (ok) {
    int64_t ws[2] = {N, K}, cs[3] = {f.residuals, N, small.row_bytes}, bs[4] = {f.residuals, 1, sz.entries, f.vector_size},
            ss[1] = {N};
    const DLDevice host = {kDLCPU, 0};
    DLTensor wt = {.data = w, .device = host, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F32), .shape = ws};
    DLTensor ct = {.data = codes, .device = host, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = cs};
    DLTensor bt = {.data = books, .device = host, .ndim = 4, .dtype = qf_dtype_to_dl(QF_F16), .shape = bs};
    DLTensor st = {.data = scales, .device = host, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = ss};
    ok = qf_vq_quantize(cpu, &wt, &f, NULL, &ct, &bt, f.row_scale ? &st : NULL, NULL) == QF_OK;
    if (!ok) fprintf(stderr, "bench_vq_gemm: lattice books: %s\n", qf_ctx_last_error(cpu));
  }
  free(codes);
  qf_ctx_destroy(cpu);
  return ok;
}

static int vqb_weight_make(qf_ctx *ctx, vqb_weight *w, const char *name, qf_vq_format f, int64_t N, int64_t K) {
  memset(w, 0, sizeof *w);
  w->name = name, w->f = f, w->N = N, w->K = K;
  if (qf_vq_sizes_of(ctx, &f, N, K, &w->sz) != QF_OK) {
    fprintf(stderr, "bench_vq_gemm: %s: %s\n", name, qf_ctx_last_error(ctx));
    return 0;
  }
  w->cshape[0] = f.residuals, w->cshape[1] = N, w->cshape[2] = w->sz.row_bytes;
  w->bshape[0] = f.residuals, w->bshape[1] = w->sz.n_books, w->bshape[2] = w->sz.entries, w->bshape[3] = f.vector_size;
  w->sshape[0] = N;
  w->code_bytes = (size_t)(f.residuals * N * w->sz.row_bytes);
  w->book_bytes = (size_t)(f.residuals * w->sz.n_books * w->sz.entries * f.vector_size) * 2;
  w->scale_bytes = f.row_scale ? (size_t)N * 4 : 0;
  const size_t host_bytes = w->code_bytes > w->book_bytes ? w->code_bytes : w->book_bytes;
  uint8_t *h = malloc((host_bytes + 7) / 8 * 8 + (size_t)N * 4);
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(N * 31 + K) ^ (uint64_t)f.index_bits << 40;
  int ok = h != NULL && vqb_cuda(cudaMalloc(&w->codes, w->code_bytes), "cudaMalloc codes") &&
           vqb_cuda(cudaMalloc(&w->books, w->book_bytes), "cudaMalloc codebooks") &&
           (!f.row_scale || vqb_cuda(cudaMalloc((void **)&w->scales, w->scale_bytes), "cudaMalloc scales"));
  if (ok) {
    /* codes: random bytes (every index of every entry equally likely) */
    for (size_t i = 0; i < w->code_bytes; i += 8) {
      const uint64_t r = vqb_rand(&seed);
      memcpy(h + i, &r, w->code_bytes - i < 8 ? w->code_bytes - i : 8);
    }
    ok = vqb_cuda(cudaMemcpy(w->codes, h, w->code_bytes, cudaMemcpyHostToDevice), "codes to the device");
  }
  if (ok && f.lattice) {
    /* a lattice format's books (one per residual, whatever N and K): those the quantizer makes
     * for a small weight of the same format */
    ok = vqb_lattice_books(f, w->sz, (uint16_t *)h) &&
         vqb_cuda(cudaMemcpy(w->books, h, w->book_bytes, cudaMemcpyHostToDevice), "codebooks to the device");
  } else if (ok) {
    /* entries: uniform in [-0.05, 0.05) as fp16 */
    uint16_t *e = (uint16_t *)h;
    for (size_t i = 0; i < w->book_bytes / 2; i++)
      e[i] = qf_f16_from_f32((float)((double)(vqb_rand(&seed) >> 11) * (1.0 / 9007199254740992.0) * 0.1 - 0.05));
    ok = vqb_cuda(cudaMemcpy(w->books, h, w->book_bytes, cudaMemcpyHostToDevice), "codebooks to the device");
  }
  if (ok && f.row_scale) {
    float *sc = (float *)h;
    for (int64_t i = 0; i < N; i++) sc[i] = 0.5f + (float)(i % 7) * 0.125f;
    ok = vqb_cuda(cudaMemcpy(w->scales, h, w->scale_bytes, cudaMemcpyHostToDevice), "scales to the device");
  }
  free(h);
  if (!ok) fprintf(stderr, "bench_vq_gemm: %s N=%lld K=%lld: could not set up the weight\n", name, (long long)N, (long long)K);
  return ok;
}

static void vqb_weight_free(vqb_weight *w) {
  cudaFree(w->codes), cudaFree(w->books), cudaFree(w->scales);
  memset(w, 0, sizeof *w);
}

/* The bench's formats: GPTVQ-2, AQLM-3 (with fp32 row scales, as AQLM stores them), QuIP#-4, and
 * QuIP#-4's books read as books (lattice 0: what the E8P decoder saves). Returns their count. */
typedef struct {
  const char *name;
  qf_vq_format f;
} vqb_format;

static int vqb_formats(vqb_format out[4]) {
  qf_vq_format_preset(QF_VQ_GPTVQ_2, &out[0].f);
  qf_vq_format_preset(QF_VQ_AQLM_3, &out[1].f);
  qf_vq_format_preset(QF_VQ_QUIP_4, &out[2].f);
  out[1].f.row_scale = 1;
  out[3].f = out[2].f;
  out[3].f.lattice = 0;
  out[0].name = "gptvq2", out[1].name = "aqlm3", out[2].name = "quip4", out[3].name = "quip4-books";
  return 4;
}

/* The bytes a call on M rows must move, the floor's and GB/s (header). */
static double vqb_bytes(const vqb_weight *w, int64_t M) {
  const double books = w->f.lattice ? 0.0 : (double)w->book_bytes; /* (a lattice is decoded, not read) */
  return (double)(w->code_bytes + w->scale_bytes) + books + 2.0 * (double)(M * w->K + M * w->N);
}

/* x on the device: n random fp16 values in [-1, 1). */
static int vqb_random_x(void *x, int64_t n, uint64_t seed) {
  uint16_t *hx = malloc(sizeof(uint16_t) * (size_t)n);
  if (!hx) return 0;
  for (int64_t i = 0; i < n; i++)
    hx[i] = qf_f16_from_f32((float)((double)(vqb_rand(&seed) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0));
  const int ok = vqb_cuda(cudaMemcpy(x, hx, sizeof(uint16_t) * (size_t)n, cudaMemcpyHostToDevice), "x to the device");
  free(hx);
  return ok;
}

/* One qf_vq_gemm call: the public one (placement < 0) or a forced placement; the banked one with
 * its split-K forced to `splits` (> 0) too. */
typedef struct {
  qf_ctx *ctx;
  vqb_weight *w;
  DLTensor x, y, codes, books, scales;
  int64_t xshape[2], yshape[2];
  qf_mat xm, ym;
  qf_vq_tensors t;
  int placement, splits;
} vqb_call;

static int vqb_run(void *arg) {
  vqb_call *c = arg;
  qf_status st;
  if (c->splits > 0 && c->placement == QF_VQ_BOOKS_TILED)
    st = qf_cuda_vq_gemm_tiled_with(c->ctx, &c->xm, &c->t, &c->ym, c->splits, NULL);
  else if (c->splits > 0)
    st = qf_cuda_vq_gemv_banked_with(c->ctx, &c->xm, &c->t, &c->ym, c->splits, NULL);
  else if (c->placement < 0)
    st = qf_vq_gemm(c->ctx, &c->x, &c->codes, &c->books, c->w->f.row_scale ? &c->scales : NULL, &c->w->f, &c->y);
  else if (c->xm.rows <= QF_VQ_GEMV_MAX_M && c->placement != QF_VQ_BOOKS_TILED)
    st = qf_cuda_vq_gemm_with(c->ctx, &c->xm, &c->t, &c->ym, c->placement, NULL);
  else
    st = qf_cuda_vq_gemm_mma_with(c->ctx, &c->xm, &c->t, &c->ym, c->placement, 0, NULL);
  if (st != QF_OK) fprintf(stderr, "qf_vq_gemm: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

static const char *placement_name(int p) {
  return p == QF_VQ_BOOKS_IN_SHARED   ? "SC"
         : p == QF_VQ_BOOKS_REGISTERS ? "SC+reg"
         : p == QF_VQ_BOOKS_BANKED    ? "banked"
         : p == QF_VQ_BOOKS_TILED     ? "tiled"
         : p == QF_VQ_BOOKS_LUT       ? "lut"
                                      : "GC";
}

/* The placement a call of this shape runs (QF_VQ_BOOKS_AUTO: the heuristic's choice), by one
 * untimed call, its launch shape in *used; 0 (and the message in *why) when the kernel refuses it.
 * The launch shape goes to stdout as a note, for reading the rows. */
static int vqb_placement_used(vqb_call *c, int placement, qf_vq_mma_config *used, char *why, size_t why_size) {
  qf_status st;
  qf_vq_mma_config cfg;
  if (c->xm.rows <= QF_VQ_GEMV_MAX_M && placement != QF_VQ_BOOKS_TILED)
    st = qf_cuda_vq_gemm_with(c->ctx, &c->xm, &c->t, &c->ym, placement, &cfg);
  else
    st = qf_cuda_vq_gemm_mma_with(c->ctx, &c->xm, &c->t, &c->ym, placement, 0, &cfg);
  if (st != QF_OK) {
    snprintf(why, why_size, "%s", qf_ctx_last_error(c->ctx));
    return 0;
  }
  printf("note: vq_gemm %s M=%lld,N=%lld,K=%lld placement %s: tiles of %d x %d rows (W x x), %d warps per row "
         "group on K, %d K splits, %lld blocks' tiles, %s B, %zu bytes of shared memory\n",
         c->w->name, (long long)c->xm.rows, (long long)c->w->N, (long long)c->w->K, placement_name(cfg.placement),
         cfg.tile_n, cfg.tile_m, cfg.warps_k, cfg.splits, (long long)cfg.tiles, cfg.x_direct ? "direct" : "element-wise",
         cfg.smem_bytes);
  *used = cfg;
  return cfg.placement;
}



/* Two GeMVs in a row, y1 = W x and y2 = W y1 (a square W), as an engine runs layers. */
typedef struct {
  vqb_call first, second;
} vqb_pair;

static int vqb_run_pair(void *arg) {
  vqb_pair *p = arg;
  return vqb_run(&p->first) || vqb_run(&p->second);
}

/* The pair on a context with programmatic dependent launch (qf_ctx_set_pdl) against the same calls
 * on c's context (qfb_emit_pdl_pair), as op vq_gemm_chain. y2: a device buffer of c's y. */
static int vqb_chain_row(qfb *b, const vqb_call *c, const char *shape, double bytes, void *y2, int *rows) {
  qf_ctx *pdl = qfb_pdl_context("bench_vq_gemm");
  if (!pdl) return 1;
  vqb_pair plain = {*c, *c};
  plain.second.x = c->y, plain.second.xm = c->ym;
  plain.second.y.data = y2, plain.second.ym.data = y2;  /* (the tensors' shapes stay c's) */
  vqb_pair dep = plain;
  dep.first.ctx = dep.second.ctx = pdl;
  char variant[64];
  snprintf(variant, sizeof variant, "%s,fp16,auto,pdl", c->w->name);
  qfb_row row = {.op = "vq_gemm_chain", .variant = variant, .shape = shape, .bytes = 2.0 * bytes,
                 .flops = 4.0 * (double)c->w->N * (double)c->w->K};
  row.floor_us = qfb_floor_us(b, row.bytes, row.flops, 0);
  const int rc = qfb_emit_pdl_pair(b, &row, vqb_run_pair, &dep, &plain);
  qf_ctx_destroy(pdl);
  ++*rows;
  return rc;
}

/* The unfused baseline: decode W into an fp16 matrix, then cuBLASLt on it. */
typedef struct {
  vqb_call *c;
  DLTensor wdl;
  qfb_lt_gemm *g;
} vqb_unfused_call;

static int vqb_run_unfused(void *arg) {
  vqb_unfused_call *u = arg;
  vqb_call *c = u->c;
  const qf_status st = qf_vq_dequantize(c->ctx, &c->codes, &c->books, c->w->f.row_scale ? &c->scales : NULL,
                                        &c->w->f, &u->wdl);
  if (st != QF_OK) {
    fprintf(stderr, "qf_vq_dequantize: %s\n", qf_ctx_last_error(c->ctx));
    return 1;
  }
  return qfb_lt_gemm_run_f16(u->g, c->x.data, u->wdl.data, c->y.data, 0);
}

/* Times run(arg) and emits its row against the cuBLASLt peer (peer_us <= 0: no peer). Returns
 * nonzero when the timing failed. */
static int vqb_row(qfb *b, const char *variant, const char *shape, double bytes, double flops, double peer_us,
                   int (*run)(void *), void *arg, int *rows) {
  const double fp8 = qfb_fp8_tflops(b);
  qfb_row row = {.op = "vq_gemm", .variant = variant, .shape = shape, .bytes = bytes, .flops = flops};
  row.us = qfb_time_us(b, run, arg);
  row.floor_us = qfb_floor_us(b, bytes, flops, fp8 > 0.0 ? fp8 / 2.0 : 0.0);
  if (peer_us > 0.0) {
    row.peer = "cublaslt_f16";
    row.peer_us = peer_us;
  }
  qfb_emit(b, &row);
  ++*rows;
  return row.us > 0 ? 0 : 1;
}

/* The rows of one weight at every selected M. x, y: device fp16 buffers of VQB_MAX_M rows; wf16:
 * an fp16 [N, K] buffer and plans[i] the cuBLASLt plan of M = ms[i] (NULL: no unfused row). */
static int vqb_rows(qfb *b, qf_ctx *ctx, vqb_weight *w, const int64_t *ms, const double *peer_us, size_t n_ms,
                    const qfb_select *sel, void *x, void *y, void *wf16, qfb_lt_gemm *const *plans, int *rows) {
  int rc = 0;
  for (size_t i = 0; i < n_ms; i++) {
    const int64_t M = ms[i], N = w->N, K = w->K;
    if (sel->m && M != sel->m) continue;
    vqb_call c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx, c.w = w;
    c.xshape[0] = M, c.xshape[1] = K, c.yshape[0] = M, c.yshape[1] = N;
    c.x = (DLTensor){.data = x, .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = c.xshape};
    c.y = (DLTensor){.data = y, .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = c.yshape};
    c.codes = (DLTensor){.data = w->codes, .device = {kDLCUDA, 0}, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = w->cshape};
    c.books = (DLTensor){.data = w->books, .device = {kDLCUDA, 0}, .ndim = 4, .dtype = qf_dtype_to_dl(w->f.entry_dtype),
                         .shape = w->bshape};
    c.scales = (DLTensor){.data = w->scales, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = w->sshape};
    c.xm = (qf_mat){x, QF_F16, M, K, K};
    c.ym = (qf_mat){y, QF_F16, M, N, N};
    c.t = (qf_vq_tensors){w->f, w->sz, N, K, (uint8_t *)w->codes, w->books, w->scales, 0};

    char shape[64], variant[64], why[512] = "";
    snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
    const double flops = 2.0 * (double)M * (double)N * (double)K;
    const double bytes = vqb_bytes(w, M);
    qf_vq_mma_config used;
    const int auto_used = vqb_placement_used(&c, QF_VQ_BOOKS_AUTO, &used, why, sizeof why);
    const int variants[7] = {-1, QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED, QF_VQ_BOOKS_REGISTERS,
                             QF_VQ_BOOKS_BANKED, QF_VQ_BOOKS_TILED, QF_VQ_BOOKS_LUT};
    for (int v = 0; v < 7; v++) {
      if (v == 0)
        snprintf(variant, sizeof variant, "%s,fp16,auto=%s", w->name, auto_used ? placement_name(auto_used) : "?");
      else
        snprintf(variant, sizeof variant, "%s,fp16,%s", w->name, placement_name(variants[v]));
      if (v > 0 && !vqb_placement_used(&c, variants[v], &used, why, sizeof why)) {
        printf("skipped: vq_gemm %s %s: %s\n", variant, shape, why);
        continue;
      }
      c.placement = variants[v];
      rc |= vqb_row(b, variant, shape, bytes, flops, peer_us[i], vqb_run, &c, rows);
      if (variants[v] == QF_VQ_BOOKS_BANKED) {  /* the codebook cache without the dataflow's split-K */
        snprintf(variant, sizeof variant, "%s,fp16,banked-1split", w->name);
        c.splits = 1;
        rc |= vqb_row(b, variant, shape, bytes, flops, peer_us[i], vqb_run, &c, rows);
        c.splits = 0;
      }
      if (variants[v] == QF_VQ_BOOKS_TILED && used.splits > 1) {
        /* the fusion without the dataflow's split-K (where the heuristic splits) */
        snprintf(variant, sizeof variant, "%s,fp16,tiled-1split", w->name);
        c.splits = 1;
        rc |= vqb_row(b, variant, shape, bytes, flops, peer_us[i], vqb_run, &c, rows);
        c.splits = 0;
      }
    }
    if (qf_cuda_vq_lut_refusal(&c.xm, &c.t, &c.ym) == NULL || qf_cuda_vq_lut_tiles_refusal(&c.xm, &c.t, &c.ym) == NULL) {
      /* a table GeMV on packed codes */
      int64_t pshape[4];
      void *packed = NULL;
      DLTensor plain = c.codes;
      if (qf_vq_pack_gemv_shape(ctx, &w->f, N, K, pshape) == QF_OK &&
          vqb_cuda(cudaMalloc(&packed, (size_t)(pshape[0] * pshape[1] * pshape[2] * pshape[3])), "cudaMalloc packed")) {
        DLTensor pt = {.data = packed, .device = {kDLCUDA, 0}, .ndim = 4, .dtype = qf_dtype_to_dl(QF_U8), .shape = pshape};
        if (qf_vq_pack_gemv(ctx, &plain, &w->f, K, &pt) == QF_OK) {
          c.codes = pt;
          c.placement = -1;
          snprintf(variant, sizeof variant, "%s,fp16,lut-packed", w->name);
          rc |= vqb_row(b, variant, shape, bytes, flops, peer_us[i], vqb_run, &c, rows);
          c.codes = plain;
        } else {
          fprintf(stderr, "qf_vq_pack_gemv: %s\n", qf_ctx_last_error(ctx));
          rc = 1;
        }
        cudaFree(packed);
      }
    }
    void *y2 = NULL;
    if (M == 1 && N == K && vqb_cuda(cudaMalloc(&y2, (size_t)N * 2), "cudaMalloc y2")) {
      c.placement = -1;
      rc |= vqb_chain_row(b, &c, shape, bytes, y2, rows);
      cudaFree(y2);
    }
    if (plans[i]) {
      int64_t wshape[2] = {N, K};
      vqb_unfused_call u = {&c, {.data = wf16, .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = wshape},
                            plans[i]};
      snprintf(variant, sizeof variant, "%s,fp16,unfused", w->name);
      rc |= vqb_row(b, variant, shape, bytes, flops, peer_us[i], vqb_run_unfused, &u, rows);
    }
  }
  return rc;
}

/* Every row of one shape: the peer once per M, then each format's rows against it. */
static int vqb_shape(qfb *b, qf_ctx *ctx, qfb_lt *lt, int64_t N, int64_t K, const int64_t *ms, size_t n_ms,
                     const qfb_select *sel, int *rows) {
  size_t selected = 0;
  for (size_t i = 0; i < n_ms; i++) selected += !sel->m || ms[i] == sel->m;
  if (!selected) return 0;
  void *wf16 = NULL, *x = NULL, *y = NULL, *d = NULL;
  int rc = 1;
  if (!vqb_cuda(cudaMalloc(&wf16, (size_t)(N * K) * 2), "cudaMalloc fp16 weight") ||
      !vqb_cuda(cudaMalloc(&x, (size_t)(VQB_MAX_M * K) * 2), "cudaMalloc x") ||
      !vqb_cuda(cudaMalloc(&y, (size_t)(VQB_MAX_M * N) * 2), "cudaMalloc y") ||
      !vqb_cuda(cudaMalloc(&d, (size_t)(VQB_MAX_M * N) * 2), "cudaMalloc peer D") ||
      !vqb_cuda(cudaMemset(wf16, 0x2C, (size_t)(N * K) * 2), "cudaMemset fp16 weight") ||
      !vqb_random_x(x, VQB_MAX_M * K, 0xA11CEull ^ (uint64_t)(N * 7 + K)))
    goto done;

  double peer_us[8] = {0};
  qfb_lt_gemm *plans[8] = {NULL};
  for (size_t i = 0; i < n_ms && i < 8; i++) {
    if (sel->m && ms[i] != sel->m) continue;
    plans[i] = qfb_lt_gemm_plan_f16(lt, ms[i], N, K);
    if (!plans[i]) continue; /* the rows go without a peer */
    qfb_lt_call16 c = {plans[i], x, wf16, d};
    peer_us[i] = qfb_time_us(b, qfb_lt_run_call16, &c);
  }

  vqb_format formats[4];
  const int n_formats = vqb_formats(formats);
  rc = 0;
  for (int fi = 0; fi < n_formats; fi++) {
    vqb_weight w;
    if (!vqb_weight_make(ctx, &w, formats[fi].name, formats[fi].f, N, K)) {
      vqb_weight_free(&w);
      rc = 1;
      continue;
    }
    rc |= vqb_rows(b, ctx, &w, ms, peer_us, n_ms < 8 ? n_ms : 8, sel, x, y, wf16, plans, rows);
    vqb_weight_free(&w);
  }
  for (size_t i = 0; i < 8; i++)
    if (plans[i]) qfb_lt_gemm_free(plans[i]);
done:
  if (rc) fprintf(stderr, "bench_vq_gemm: N=%lld K=%lld failed\n", (long long)N, (long long)K);
  cudaFree(wf16), cudaFree(x), cudaFree(y), cudaFree(d);
  return rc;
}

/* Op "vq_gemm_splits", only when --only names it: the tiled VQ-GeMM with its split-K forced to
 * every count from 1 to 8 that the kernel takes ("<fmt>,tiled-s<n>") and the heuristic's own
 * ("<fmt>,tiled-auto-s<n>"), on a grid of M x N x K wider than the bench's layers, for checking the
 * split rule against the best split (docs/VQ.md). No peer. */
#define VQB_SPLITS_MAX_M 512
static int vqb_splits(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  static const int64_t ms[] = {32, 64, 128, 256, 512};
  static const int64_t ns[] = {1024, 2048, 4096, 8192, 14336, 28672};
  static const int64_t ks[] = {1024, 4096, 8192, 22016};
  vqb_format formats[4];
  vqb_formats(formats); /* (the first three: QuIP#-4's books as books have no tiled kernel) */
  const int64_t kmax = ks[sizeof ks / sizeof ks[0] - 1], nmax = ns[sizeof ns / sizeof ns[0] - 1];
  void *x = NULL, *y = NULL;
  int rc = 1;
  if (!vqb_cuda(cudaMalloc(&x, (size_t)(VQB_SPLITS_MAX_M * kmax) * 2), "cudaMalloc x") ||
      !vqb_cuda(cudaMalloc(&y, (size_t)(VQB_SPLITS_MAX_M * nmax) * 2), "cudaMalloc y") ||
      !vqb_random_x(x, VQB_SPLITS_MAX_M * kmax, 0x5917ull))
    goto done;
  rc = 0;
  for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
      for (int fi = 0; fi < 3; fi++) {
        const int64_t N = ns[ni], K = ks[ki];
        if (sel->k && K != sel->k) continue;
        vqb_weight w;
        if (!vqb_weight_make(ctx, &w, formats[fi].name, formats[fi].f, N, K)) {
          vqb_weight_free(&w);
          rc = 1;
          continue;
        }
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
          const int64_t M = ms[mi];
          if (sel->m && M != sel->m) continue;
          vqb_call c;
          memset(&c, 0, sizeof c);
          c.ctx = ctx, c.w = &w, c.placement = QF_VQ_BOOKS_TILED;
          c.xm = (qf_mat){x, QF_F16, M, K, K};
          c.ym = (qf_mat){y, QF_F16, M, N, N};
          c.t = (qf_vq_tensors){w.f, w.sz, N, K, (uint8_t *)w.codes, w.books, w.scales, 0};
          char shape[64], variant[64];
          snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld", (long long)M, (long long)N, (long long)K);
          const double flops = 2.0 * (double)M * (double)N * (double)K;
          const double bytes = vqb_bytes(&w, M);
          qf_vq_mma_config used;
          if (qf_cuda_vq_gemm_tiled_with(ctx, &c.xm, &c.t, &c.ym, 0, &used) != QF_OK) {
            printf("skipped: vq_gemm_splits %s %s: %s\n", w.name, shape, qf_ctx_last_error(ctx));
            continue;
          }
          for (int s = 0; s <= 8; s++) {
            qf_vq_mma_config forced;
            if (s > 0 && qf_cuda_vq_gemm_tiled_with(ctx, &c.xm, &c.t, &c.ym, s, &forced) != QF_OK) continue;
            if (s == 0) snprintf(variant, sizeof variant, "%s,tiled-auto-s%d", w.name, used.splits);
            else snprintf(variant, sizeof variant, "%s,tiled-s%d", w.name, s);
            c.splits = s;
            qfb_row row = {.op = "vq_gemm_splits", .variant = variant, .shape = shape, .bytes = bytes, .flops = flops};
            row.us = qfb_time_us(b, vqb_run, &c);
            row.floor_us = qfb_floor_us(b, bytes, flops, qfb_fp8_tflops(b) / 2.0);
            qfb_emit(b, &row);
            ++*rows;
            rc |= row.us > 0 ? 0 : 1;
          }
        }
        vqb_weight_free(&w);
      }
done:
  if (rc) fprintf(stderr, "bench_vq_gemm: the split sweep failed\n");
  cudaFree(x), cudaFree(y);
  return rc;
}
#endif

int bench_vq_gemm(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
#ifdef QF_WITH_CUDA
  if (sel->ops && qfb_op_selected(sel->ops, "vq_gemm_splits") && qfb_uses_gpu(b) && vqb_splits(b, ctx, sel, rows)) return 1;
#endif
  if (!qfb_op_selected(sel->ops, "vq_gemm") || !qfb_uses_gpu(b)) return 0; /* the CPU reference is float64: not timed */
#ifdef QF_WITH_CUDA
  static const int64_t default_ms[] = {1, 16, 64, 256};
  /* --m (1 to 256) runs that M alone: batch 2 to 8 decode, and the routing between the GeMV's and
   * the GeMM's kernels */
  int64_t one_m[1] = {sel->m};
  const int own_m = sel->m > 0 && sel->m <= VQB_MAX_M;
  const int64_t *ms = own_m ? one_m : default_ms;
  const size_t n_ms = own_m ? 1 : sizeof default_ms / sizeof default_ms[0];
  /* Llama-7B's q/k/v/o, gate/up and down projections, then Llama-65B's */
  static const int64_t nk[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008},
                                  {8192, 8192}, {22016, 8192}, {8192, 22016}};
  if (getenv("QF_VQ_BOOKS"))
    printf("note: QF_VQ_BOOKS=%s is set: the vq_gemm auto rows run that placement\n", getenv("QF_VQ_BOOKS"));
  qfb_lt *lt = qfb_lt_open();
  if (!lt) return 1;
  int rc = 0;
  for (size_t j = 0; j < sizeof nk / sizeof nk[0]; j++)
    if (!sel->k || nk[j][1] == sel->k) rc |= vqb_shape(b, ctx, lt, nk[j][0], nk[j][1], ms, n_ms, sel, rows);
  qfb_lt_close(lt);
  return rc;
#else
  (void)ctx, (void)rows;
  return 0;
#endif
}
