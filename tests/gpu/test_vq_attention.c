/* qf_vq_attention_decode on CUDA against the CPU reference (float64 over the decoded cache),
 * through the public API (the heuristic's choices) and with each codebook placement (global, the
 * paper's GC, and shared, SC) and each score technique (decoded K vectors, and the lookup table of
 * q . entry products) forced through qf_cuda_vq_attention_decode_with, and the banked kernel
 * (bank-interleaved score tables and V books; one residual of 8-bit indices, 32 or 64 vectors per
 * head) forced wherever it applies and checked to refuse everywhere else.
 *  - Caches: random codes and Gaussian codebook entries written directly. Any codes and entries
 *    make a valid cache, which the kernel must decode as the CPU does; k-means would only make the
 *    test slow. One cache is quantized from Gaussian K and V with qf_vq_quantize instead.
 *  - Shapes: CQ-2 and CQ-4 x head_dim 64 and 128 x Hq / Hkv in {1, 4, 8} (Hkv = 2) x B in {1, 3} x
 *    seq_len in {1, 7, 128, 1000, 4096}; two runs per cache rotate q / o dtypes over fp32, fp16 and
 *    bf16 (equal and mixed), sm_scale default and 0.3, compact and strided rows (q's gaps hold NaN,
 *    so a kernel reading them poisons o). Then generic formats: 6- and 5-bit indices that straddle
 *    words, 2 and 3 residuals, bf16 entries, one book per row, scopes that do not divide a head
 *    (96 columns), head_dim 80, 96 and 256 (books too large for shared memory), a 65536-entry book
 *    whose code tile fits only single-buffered, groups of 3 and 12 (two head tiles), CQ-4 with 64
 *    heads and 5 batch entries (the banked kernel's two halves on one table, runs that cross batch
 *    entries), CQ-2 groups of 6 and 4 (the banked kernel with 2 and 4 query heads per block), with
 *    bf16 entries CQ-2 group 4 and CQ-4 group 2.
 *  - Each run: o and lse poisoned with 0xFF (NaN) before; every element compared; the row gaps
 *    and a sentinel tail past o and lse unchanged; the public call run twice and compared byte for
 *    byte (the kernels have a fixed summation order).
 *  - V codebooks 8 bytes past a 16-byte boundary: refused by the public call (alignment) and by
 *    the forced banked placement, nothing written.
 *  - Programmatic dependent launch (qf_ctx_set_pdl): chains of two calls, the second's q the
 *    first's o, launched back to back on a PDL context, byte for byte as the same calls with PDL
 *    off and synchronized, for each of the banked kernel's setups (1, 2 and 4 query heads per
 *    block, S = 32 and 64); and a decode step's append between two calls (attention, qf_vq_encode
 *    of its o into the last token's K and V codes, attention over the updated cache), also
 *    captured once in a CUDA graph and replayed round by round; and an engine's decode step over
 *    sequences of different lengths (attention with kv_lens, qf_vq_encode_slots of its o at each
 *    entry's next slot, attention with the lengths one longer), synchronized (the cache checked
 *    against the CPU's appends after every round), on a PDL context and in a CUDA graph replayed
 *    as lengths and slots change: byte for byte the synchronized calls.
 *  - Lengths per batch entry (opts.kv_lens, read on the device): ragged lengths from 0 (o = 0,
 *    lse = -inf) through partial tiles, whole tiles and chunks past the entry's tokens to seq_len,
 *    on caches that run every kernel and setup (GC, SC, the banked kernel with one, paired and
 *    grouped heads, runs crossing batch entries, the Llama-7B decode shape), and a CUDA graph
 *    replayed as the lengths change, byte for byte the direct calls.
 *  - Paged caches (opts.block_table): pages of 16, 48, 64, 128, 256 and 512 rows in a shuffled
 *    pool with ragged lengths, on every kernel's caches: the public call and each placement
 *    forced give the contiguous cache's bytes (the CPU too); a page outside the pool makes its
 *    entry NaN on CUDA and is refused on the CPU with nothing written.
 *  - NaN and Inf: a NaN in q, a NaN codebook entry of V and an Inf entry of K selected by one token
 *    give NaN (or a dropped token) exactly where the CPU has them (CQ-2 at head_dim 64 and 128, the
 *    second for the banked kernel).
 *  - Refusals leave o and lse untouched: vector_size 3, head_dim 512, codebooks that change along
 *    the tokens (QF_ERR_UNSUPPORTED), a misaligned fp16 q (QF_ERR_ALIGNMENT).
 *  - QF_VQ_BOOKS (the public call's placement switch): global and shared give the bytes of the
 *    forced calls (same score technique), shared where the books do not fit, the VQ-GeMV's
 *    register tier and an unknown value are refused. The test clears the variable for everything
 *    else.
 *  - Forced choices that cannot be used (shared books or score tables that do not fit) are refused
 *    with a message about shared memory and write nothing; the LUT runs with 1, 4 and 8 query
 *    heads per block (CQ-4 at D = 128 holds one head's tables only), blocks whose units cross batch
 *    entries (the tables rebuilt) and both placements.
 * QF_TEST_QUICK=1 (the compute-sanitizer pass): the main matrix at seq_len 1, 7 and 300 with B = 3
 * and groups 1 and 8, the other shapes at 600 tokens at most.
 *
 * Tolerances, per (b, h), from the data (u = 2^-24, S = sm_scale * max_t sum_d |q_d K_td|, vmax =
 * max |V| of the kv head, D the head dim):
 *  - a score is an fp32 dot of D products with the scale folded into q: error <= (D + 2) u S = ds;
 *    through the lookup table it is a sum of D / vs table values per residual, each an fp32 dot of
 *    vs products: error <= (vs + R D / vs + 1) u S' with S' = sm_scale * max_t sum_d |q_d| sum_r
 *    |e_rtd| (the residuals' entries taken apart). ds is the larger of the two; with one residual
 *    (the presets) S' = S and the first is the larger, so the bound is unchanged there. Each exp2f
 *    adds 2 ulp. A weight p_t = exp(s_t - m) is then off by at most 2 ds (relative), so
 *    o = sum p v / sum p is off by at most 4 ds vmax;
 *  - the fp32 sums of p v and p have at most ~70 roundings in a row (32 tokens per lane and tile,
 *    16 tiles per chunk at 4096 tokens, 5 shuffles, 8 warps, the chunks): 70 u < 1e-5 relative to
 *    sum p |v| / l <= vmax;
 *  - 16-bit outputs may differ by one ulp (the CPU rounds float64 -> fp32 -> 16 bits, the GPU fp32
 *    -> 16 bits): 2^-10 (fp16) or 2^-7 (bf16) of |o|; fp32 outputs by one fp32 ulp;
 *  - lse = ln sum exp(s): off by ds plus the sum's rounding (1e-5) and its own (1 ulp).
 * So |o - ref| <= vmax (4 ds + 1e-5) + ulp |ref| and |lse - ref| <= 2 ds + 1e-5 + 2^-22 |ref|. At
 * the default scale a token dropped from 4096 moves lse by ~2.4e-4, above that bound. */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/backend.h"
#include "cuda/vq/vq_attention_heuristic.h"
#include "formats/formats.h"
#include "formats/vq.h"
#include "gpu.h"
#include "tensors.h"

#define OUT_POISON 0xFFu /* o and lse: NaN in fp32, fp16 and bf16 */
enum { TAIL = 64 };

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : 2; }

/* ---- a quantized KV cache: K and V [B * T, Hkv * D], host and device ------------------------ */

typedef struct {
  char name[96];
  qf_vq_format f;
  qf_vq_sizes sz;
  int64_t B, T, Hkv, D, N, C;
  int64_t cshape[3], bshape[4];
  size_t code_bytes, book_bytes;
  uint8_t *h_codes[2];
  uint16_t *h_books[2];
  void *d_codes[2], *d_books[2];
  float *dec[2]; /* K and V decoded by the CPU (fp32 [N, C]), for the tolerances */
} kv_cache;

static DLTensor cache_codes(kv_cache *c, int m, int gpu) {
  return dl_tensor(gpu ? c->d_codes[m] : c->h_codes[m], QF_U8, 3, c->cshape, gpu ? kDLCUDA : kDLCPU);
}
static DLTensor cache_books(kv_cache *c, int m, int gpu) {
  return dl_tensor(gpu ? c->d_books[m] : c->h_books[m], c->f.entry_dtype, 4, c->bshape, gpu ? kDLCUDA : kDLCPU);
}

/* Copies the host tensors to the device and decodes them on the CPU (after any host edit). */
static int cache_upload(qf_ctx *cpu, kv_cache *c) {
  for (int m = 0; m < 2; m++) {
    CUDA_OK(cudaMemcpy(c->d_codes[m], c->h_codes[m], c->code_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c->d_books[m], c->h_books[m], c->book_bytes, cudaMemcpyHostToDevice));
    tensor2d w;
    tensor2d_init(&w, c->dec[m], QF_F32, c->N, c->C, c->C, kDLCPU);
    DLTensor ct = cache_codes(c, m, 0), bt = cache_books(c, m, 0);
    if (!CHECK(qf_vq_dequantize(cpu, &ct, &bt, NULL, &c->f, &w.t) == QF_OK, "%s: decode: %s", c->name,
               qf_ctx_last_error(cpu)))
      return 0;
  }
  return 1;
}

static int make_cache(qf_ctx *cpu, kv_cache *c, const char *name, qf_vq_format f, int64_t B, int64_t T, int64_t Hkv,
                      int64_t D, int quantize, uint64_t *seed) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s D=%" PRId64 " Hkv=%" PRId64 " B=%" PRId64 " T=%" PRId64, name, D, Hkv, B, T);
  c->f = f, c->B = B, c->T = T, c->Hkv = Hkv, c->D = D, c->N = B * T, c->C = Hkv * D;
  if (!CHECK(qf_vq_sizes_of(cpu, &f, c->N, c->C, &c->sz) == QF_OK, "%s: sizes: %s", c->name, qf_ctx_last_error(cpu)))
    return 0;
  c->cshape[0] = f.residuals, c->cshape[1] = c->N, c->cshape[2] = c->sz.row_bytes;
  c->bshape[0] = f.residuals, c->bshape[1] = c->sz.n_books, c->bshape[2] = c->sz.entries, c->bshape[3] = f.vector_size;
  c->code_bytes = (size_t)(f.residuals * c->N * c->sz.row_bytes);
  c->book_bytes = (size_t)(f.residuals * c->sz.n_books * c->sz.entries * f.vector_size) * 2;
  for (int m = 0; m < 2; m++) {
    c->h_codes[m] = aligned_alloc(16, (c->code_bytes + 15) / 16 * 16);
    c->h_books[m] = aligned_alloc(16, (c->book_bytes + 15) / 16 * 16);
    c->dec[m] = malloc((size_t)(c->N * c->C) * sizeof(float));
    c->d_codes[m] = dev_alloc(c->code_bytes);
    c->d_books[m] = dev_alloc(c->book_bytes);
    if (quantize) {
      float *x = malloc((size_t)(c->N * c->C) * sizeof *x);
      for (int64_t i = 0; i < c->N * c->C; i++) x[i] = rng_normal(seed);
      tensor2d xt;
      tensor2d_init(&xt, x, QF_F32, c->N, c->C, c->C, kDLCPU);
      DLTensor ct = cache_codes(c, m, 0), bt = cache_books(c, m, 0);
      qf_vq_quantize_opts o = {.iterations = 2, .seed = 91 + (uint64_t)m};
      qf_status st = qf_vq_quantize(cpu, &xt.t, &f, &o, &ct, &bt, NULL, NULL);
      free(x);
      if (!CHECK(st == QF_OK, "%s: quantize: %s", c->name, qf_ctx_last_error(cpu))) return 0;
    } else {
      for (size_t i = 0; i < c->code_bytes; i++) c->h_codes[m][i] = (uint8_t)(rng_next(seed) >> 56);
      const size_t n = c->book_bytes / 2;
      for (size_t i = 0; i < n; i++) float_put(c->h_books[m], f.entry_dtype, i, rng_normal(seed));
    }
  }
  return cache_upload(cpu, c);
}

static void free_cache(kv_cache *c) {
  for (int m = 0; m < 2; m++) {
    free(c->h_codes[m]), free(c->h_books[m]), free(c->dec[m]);
    CUDA_OK(cudaFree(c->d_codes[m]));
    CUDA_OK(cudaFree(c->d_books[m]));
  }
}

/* ---- one call: q, the reference, the bounds, the GPU runs --------------------------------- */

typedef struct {
  qf_dtype qt, ot;
  float sm_scale; /* 0: the default 1 / sqrt(D) */
  int strided;
} variant;

/* Coverage of the launch plans the forced calls produced. */
static int ran_shared, ran_global, ran_chunks, ran_multi_unit, ran_multi_tile, ran_head_tiles, ran_single_stage;
static int ran_lut[9], ran_lut_shared, ran_lut_batches, ran_lut_refused; /* ran_lut[heads per block] */
static int ran_banked[3], ran_banked_halves[3], ran_banked_batches, ran_banked_chunks, ran_banked_refused; /* [vectors / 32] */
static int ran_banked_paired, ran_banked_paired_batches; /* S = 64, two halves on one table */
static int ran_banked_writes_o[2]; /* o and lse from the banked kernel: one chunk, paired halves' two chunks */
static int ran_banked_group[5], ran_banked_group_batches; /* [query heads per block]; runs crossing batch entries */
static int ran_paged_banked; /* the banked kernel on pages smaller than a tile */
static double worst_o, worst_lse; /* the largest error / tolerance seen */

typedef struct {
  kv_cache *c;
  int64_t Hq, q_ld, o_ld;
  variant va;
  double scale;
  size_t o_bytes, lse_bytes; /* with the tail */
  uint8_t *hq, *o_ref, *lse_ref, *o_got, *lse_got, *o_first, *lse_first;
  double *ds, *vmax; /* per (b, h) */
  void *dq, *d_o, *d_lse;
  int32_t *lens, *d_lens; /* [B] (opts.kv_lens) or NULL */
  struct paged_pool *pool; /* the cache's codes in pages (opts.block_table), or NULL */
} call;

/* The cache's K and V codes in a pool of pages of P rows (host and device) and the block table
 * [B, cols] that finds them. */
typedef struct paged_pool {
  int64_t P, num, cols;
  int64_t pshape[3], tshape[2];
  uint8_t *hp[2];
  void *dp[2];
  int32_t *table, *dtable;
} paged_pool;

/* The tokens of entry b. */
static int64_t call_len(const call *k, int64_t b) { return k->lens ? k->lens[b] : k->c->T; }

/* A call with lengths per batch entry (lens [B], or NULL: seq_len each). */
static void call_init_lens(call *k, kv_cache *c, int64_t Hq, variant va, int nan_q, const int32_t *lens, uint64_t *seed) {
  memset(k, 0, sizeof *k);
  k->c = c, k->Hq = Hq, k->va = va;
  if (lens) {
    k->lens = malloc((size_t)c->B * sizeof *k->lens);
    memcpy(k->lens, lens, (size_t)c->B * sizeof *k->lens);
    k->d_lens = dev_alloc((size_t)c->B * sizeof *k->lens);
    CUDA_OK(cudaMemcpy(k->d_lens, k->lens, (size_t)c->B * sizeof *k->lens, cudaMemcpyHostToDevice));
  }
  const int64_t B = c->B, D = c->D, W = Hq * D;
  k->q_ld = W + (va.strided ? 3 : 0);
  k->o_ld = W + (va.strided ? 5 : 0);
  k->scale = va.sm_scale > 0.0f ? (double)va.sm_scale : 1.0 / sqrt((double)D);
  const size_t q_bytes = (size_t)(B * k->q_ld) * esz(va.qt);
  k->o_bytes = (size_t)(B * k->o_ld) * esz(va.ot) + TAIL;
  k->lse_bytes = (size_t)(B * Hq) * 4 + TAIL;
  k->hq = malloc(q_bytes);
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < k->q_ld; i++) float_put(k->hq, va.qt, (size_t)(b * k->q_ld + i), i < W ? rng_normal(seed) : NAN);
  if (nan_q) float_put(k->hq, va.qt, (size_t)(1 * D + 5), NAN); /* b 0, head 1, dim 5 */
  k->dq = dev_alloc(q_bytes);
  CUDA_OK(cudaMemcpy(k->dq, k->hq, q_bytes, cudaMemcpyHostToDevice));
  k->o_ref = malloc(k->o_bytes), k->o_got = malloc(k->o_bytes), k->o_first = malloc(k->o_bytes);
  k->lse_ref = malloc(k->lse_bytes), k->lse_got = malloc(k->lse_bytes), k->lse_first = malloc(k->lse_bytes);
  memset(k->o_ref, OUT_POISON, k->o_bytes);
  memset(k->lse_ref, OUT_POISON, k->lse_bytes);
  k->d_o = dev_alloc(k->o_bytes);
  k->d_lse = dev_alloc(k->lse_bytes);

  /* the bounds of the header comment */
  k->ds = malloc((size_t)(B * Hq) * sizeof *k->ds);
  k->vmax = malloc((size_t)(B * Hq) * sizeof *k->vmax);
  const int64_t group = Hq / c->Hkv, vs = c->f.vector_size, R = c->f.residuals, E = c->sz.entries;
  const int64_t per_book = c->f.scope_cols ? c->f.scope_cols / vs : c->C / vs; /* vectors along a row per book */
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++) {
      const int64_t g = h / group;
      double S = 0.0, S_parts = 0.0, vm = 0.0;
      for (int64_t t = 0; t < call_len(k, b); t++) {
        const int64_t n = b * c->T + t;
        const float *kr = c->dec[0] + n * c->C + g * D, *vr = c->dec[1] + n * c->C + g * D;
        double s = 0.0, s_parts = 0.0;
        for (int64_t d = 0; d < D; d++) {
          const double qd = fabs((double)float_get(k->hq, va.qt, (size_t)(b * k->q_ld + h * D + d)));
          s += qd * fabs((double)kr[d]);
          vm = fmax(vm, fabs((double)vr[d]));
          const int64_t J = (g * D + d) / vs; /* the vector of the row */
          for (int64_t r = 0; r < R; r++) {
            const uint32_t idx = qf_vq_get_index(c->h_codes[0] + (r * c->N + n) * c->sz.row_bytes, J, c->f.index_bits);
            const int64_t book = r * c->sz.n_books + J / per_book;
            s_parts += qd * fabs((double)float_get(c->h_books[0], c->f.entry_dtype, (size_t)((book * E + idx) * vs + d % vs)));
          }
        }
        S = fmax(S, s), S_parts = fmax(S_parts, s_parts);
      }
      k->ds[b * Hq + h] = fmax((double)(D + 2) * S, (double)(vs + R * (D / vs) + 1) * S_parts) * 0x1p-24 * k->scale;
      k->vmax[b * Hq + h] = vm;
    }
}

static void call_init(call *k, kv_cache *c, int64_t Hq, variant va, int nan_q, uint64_t *seed) {
  call_init_lens(k, c, Hq, va, nan_q, NULL, seed);
}

static void call_free(call *k) {
  free(k->lens);
  if (k->d_lens) CUDA_OK(cudaFree(k->d_lens));
  free(k->hq), free(k->o_ref), free(k->o_got), free(k->o_first), free(k->lse_ref), free(k->lse_got), free(k->lse_first);
  free(k->ds), free(k->vmax);
  CUDA_OK(cudaFree(k->dq));
  CUDA_OK(cudaFree(k->d_o));
  CUDA_OK(cudaFree(k->d_lse));
}

typedef struct {
  tensor2d q, o;
  DLTensor kc, kb, vc, vb, lse, lens, bt;
  int64_t lshape[2], nshape[1];
  qf_vq_attention_opts opts;
} api_tensors;

/* The public call's tensors, on the device (gpu) or over the reference's host buffers. */
static void api_init(api_tensors *t, call *k, int gpu) {
  kv_cache *c = k->c;
  const DLDeviceType dev = gpu ? kDLCUDA : kDLCPU;
  tensor2d_init(&t->q, gpu ? k->dq : (void *)k->hq, k->va.qt, c->B, k->Hq * c->D, k->q_ld, dev);
  tensor2d_init(&t->o, gpu ? k->d_o : (void *)k->o_ref, k->va.ot, c->B, k->Hq * c->D, k->o_ld, dev);
  t->kc = cache_codes(c, 0, gpu), t->kb = cache_books(c, 0, gpu);
  t->vc = cache_codes(c, 1, gpu), t->vb = cache_books(c, 1, gpu);
  t->lshape[0] = c->B, t->lshape[1] = k->Hq;
  t->lse = dl_tensor(gpu ? k->d_lse : (void *)k->lse_ref, QF_F32, 2, t->lshape, dev);
  t->opts = (qf_vq_attention_opts){.head_dim = (int)c->D, .kv_heads = (int)c->Hkv, .seq_len = c->T, .sm_scale = k->va.sm_scale};
  t->nshape[0] = c->B;
  t->lens = dl_tensor(gpu ? (void *)k->d_lens : (void *)k->lens, QF_I32, 1, t->nshape, dev);
  if (k->lens) t->opts.kv_lens = &t->lens;
  if (k->pool) { /* the pool's codes, through its table */
    paged_pool *pl = k->pool;
    t->kc = dl_tensor(gpu ? pl->dp[0] : pl->hp[0], QF_U8, 3, pl->pshape, dev);
    t->vc = dl_tensor(gpu ? pl->dp[1] : pl->hp[1], QF_U8, 3, pl->pshape, dev);
    t->bt = dl_tensor(gpu ? (void *)pl->dtable : (void *)pl->table, QF_I32, 2, pl->tshape, dev);
    t->opts.block_table = &t->bt, t->opts.page_size = pl->P;
  }
}

static qf_status api_call(qf_ctx *ctx, call *k, int gpu) {
  api_tensors t;
  api_init(&t, k, gpu);
  return qf_vq_attention_decode(ctx, &t.q.t, &t.kc, &t.kb, &t.vc, &t.vb, &k->c->f, &t.opts, &t.o.t, &t.lse);
}

static void *forced_v_packed; /* forced_call's V books: packed on the device (qf_vq_pack_attention_books), or NULL */

static qf_status forced_call(qf_ctx *gpu, call *k, int placement, int scores, qf_vq_attention_config *used) {
  kv_cache *c = k->c;
  qf_vq_attention_args a;
  memset(&a, 0, sizeof a);
  a.q = (qf_mat){k->dq, k->va.qt, c->B, k->Hq * c->D, k->q_ld};
  a.o = (qf_mat){k->d_o, k->va.ot, c->B, k->Hq * c->D, k->o_ld};
  a.lse = k->d_lse;
  a.k = (qf_vq_tensors){c->f, c->sz, c->N, c->C, c->d_codes[0], c->d_books[0], NULL, 0};
  a.v = (qf_vq_tensors){c->f, c->sz, c->N, c->C, c->d_codes[1], c->d_books[1], NULL, 0};
  a.B = c->B, a.Hq = k->Hq, a.Hkv = c->Hkv, a.D = c->D, a.seq_len = c->T, a.sm_scale = k->scale;
  a.kv_lens = k->d_lens;
  if (forced_v_packed) a.v.books = forced_v_packed, a.v_books_packed = 1;
  if (k->pool) {
    const paged_pool *pl = k->pool;
    a.k.N = a.v.N = pl->num * pl->P, a.k.codes = pl->dp[0], a.v.codes = pl->dp[1];
    a.block_table = pl->dtable, a.bt_ld = pl->cols, a.page_size = pl->P, a.num_pages = pl->num;
  }
  return qf_cuda_vq_attention_decode_with(gpu, &a, placement, scores, used);
}

static void poison_device(call *k) {
  CUDA_OK(cudaMemset(k->d_o, OUT_POISON, k->o_bytes));
  CUDA_OK(cudaMemset(k->d_lse, OUT_POISON, k->lse_bytes));
}

static void fetch(call *k) {
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(k->o_got, k->d_o, k->o_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(k->lse_got, k->d_lse, k->lse_bytes, cudaMemcpyDeviceToHost));
}

/* o and lse just fetched against the reference, within the bounds; every byte outside the
 * elements (gaps, tails) still poisoned. */
static void compare(call *k, const char *desc) {
  kv_cache *c = k->c;
  const int64_t B = c->B, Hq = k->Hq, D = c->D;
  const size_t e = esz(k->va.ot);
  const double ulp = k->va.ot == QF_F32 ? 0x1p-23 : k->va.ot == QF_F16 ? 0x1p-10 : 0x1p-7;
  const double floor_abs = k->va.ot == QF_F16 ? 0x1p-24 : 0.0; /* fp16 subnormals */
  size_t outside = 0, bad_o = 0, bad_l = 0;
  char first_o[200] = "", first_l[200] = "";
  for (size_t i = 0; i < k->o_bytes; i++) {
    const size_t el = i / e;
    const int inside = i < k->o_bytes - TAIL && (int64_t)(el % (size_t)k->o_ld) < Hq * D;
    if (!inside) outside += k->o_got[i] != OUT_POISON;
  }
  for (size_t i = (size_t)(B * Hq) * 4; i < k->lse_bytes; i++) outside += k->lse_got[i] != OUT_POISON;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++) {
      const double ds = k->ds[b * Hq + h], vm = k->vmax[b * Hq + h];
      for (int64_t d = 0; d < D; d++) {
        const size_t i = (size_t)(b * k->o_ld + h * D + d);
        const double r = float_get(k->o_ref, k->va.ot, i), g = float_get(k->o_got, k->va.ot, i);
        const double tol = vm * (4.0 * ds + 1e-5) + ulp * fabs(r) + floor_abs;
        int ok;
        if (isnan(r)) ok = isnan(g);
        else if (call_len(k, b) == 0) ok = g == 0.0; /* no token: exactly 0 */
        else {
          ok = fabs(g - r) <= tol;  /* false for NaN g */
          if (ok && tol > 0.0) worst_o = fmax(worst_o, fabs(g - r) / tol);
        }
        if (!ok && bad_o++ == 0)
          snprintf(first_o, sizeof first_o, "o[%" PRId64 ", %" PRId64 ", %" PRId64 "] = %.8g, cpu %.8g (tolerance %.3g)", b, h,
                   d, g, r, tol);
      }
      const double r = ((const float *)k->lse_ref)[b * Hq + h], g = ((const float *)k->lse_got)[b * Hq + h];
      const double tol = 2.0 * ds + 1e-5 + 0x1p-22 * fabs(r);
      int ok;
      if (isnan(r) || isinf(r)) ok = isnan(r) ? isnan(g) : g == r; /* -inf for an entry with no token */
      else {
        ok = fabs(g - r) <= tol;
        if (ok) worst_lse = fmax(worst_lse, fabs(g - r) / tol);
      }
      if (!ok && bad_l++ == 0)
        snprintf(first_l, sizeof first_l, "lse[%" PRId64 ", %" PRId64 "] = %.8g, cpu %.8g (tolerance %.3g)", b, h, g, r, tol);
    }
  CHECK(bad_o == 0, "%s: %zu o elements off, first %s", desc, bad_o, first_o);
  CHECK(bad_l == 0, "%s: %zu lse elements off, first %s", desc, bad_l, first_l);
  CHECK(outside == 0, "%s: %zu bytes outside o's and lse's elements changed (gaps or sentinel)", desc, outside);
}

/* The reference, then the public call twice (byte-identical) and each placement forced. */
/* The cache's V codebooks packed for the banked kernel on the device, the CUDA packing checked
 * byte for byte against the CPU's; NULL where the format is not the kernel's (pack refused). */
static int ran_packed_public, ran_packed_banked;
static void *packed_v_books(qf_ctx *gpu, qf_ctx *cpu, kv_cache *c, int64_t pshape[5]) {
  const int64_t vs = c->f.vector_size, S = c->D / vs;
  if (!(c->f.index_bits == 8 && c->f.residuals == 1 && ((vs == 2 && (S == 32 || S == 64)) || (vs == 4 && S == 32))))
    return NULL;
  pshape[0] = 1, pshape[1] = c->Hkv, pshape[2] = 256, pshape[3] = S, pshape[4] = vs;
  const size_t bytes = (size_t)(c->Hkv * 256 * S * vs) * 2;
  void *d = dev_alloc(bytes);
  uint16_t *h = malloc(bytes), *back = malloc(bytes);
  DLTensor dt = dl_tensor(d, c->f.entry_dtype, 5, pshape, kDLCUDA), ht = dl_tensor(h, c->f.entry_dtype, 5, pshape, kDLCPU);
  DLTensor gb = cache_books(c, 1, 1), hb = cache_books(c, 1, 0);
  CHECK(qf_vq_pack_attention_books(gpu, &gb, &c->f, c->D, c->Hkv, &dt) == QF_OK &&
            qf_vq_pack_attention_books(cpu, &hb, &c->f, c->D, c->Hkv, &ht) == QF_OK,
        "%s: pack V books: %s / %s", c->name, qf_ctx_last_error(gpu), qf_ctx_last_error(cpu));
  CUDA_OK(cudaMemcpy(back, d, bytes, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(back, h, bytes), "%s: packed V books: CUDA's bytes are the CPU's", c->name);
  free(h), free(back);
  return d;
}

static void run_call(qf_ctx *gpu, qf_ctx *cpu, call *k, const char *what) {
  kv_cache *c = k->c;
  char desc[320];
  snprintf(desc, sizeof desc, "%s Hq=%" PRId64 " q %s o %s scale %s%s%s", c->name, k->Hq, qf_dtype_name(k->va.qt),
           qf_dtype_name(k->va.ot), k->va.sm_scale > 0.0f ? "0.3" : "default", k->va.strided ? " strided" : "", what);
  qf_status st = api_call(cpu, k, 0);
  if (!CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu))) return;

  poison_device(k);
  st = api_call(gpu, k, 1);
  if (!CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu))) return;
  fetch(k);
  compare(k, desc);
  memcpy(k->o_first, k->o_got, k->o_bytes);
  memcpy(k->lse_first, k->lse_got, k->lse_bytes);
  poison_device(k);
  st = api_call(gpu, k, 1);
  if (CHECK(st == QF_OK, "%s: gpu (second run): %s", desc, qf_ctx_last_error(gpu))) {
    fetch(k);
    CHECK(!memcmp(k->o_first, k->o_got, k->o_bytes) && !memcmp(k->lse_first, k->lse_got, k->lse_bytes),
          "%s: a second run differs (not deterministic)", desc);
  }
  /* the same with packed V books: the public call runs the banked kernel (within the reference's
   * bounds) or refuses with a message naming them, writing nothing */
  int64_t pshape[5];
  void *vpk = packed_v_books(gpu, cpu, c, pshape);
  if (vpk) {
    api_tensors t;
    api_init(&t, k, 1);
    DLTensor pt = dl_tensor(vpk, c->f.entry_dtype, 5, pshape, kDLCUDA);
    poison_device(k);
    st = qf_vq_attention_decode(gpu, &t.q.t, &t.kc, &t.kb, &t.vc, &pt, &c->f, &t.opts, &t.o.t, &t.lse);
    char dp[360];
    snprintf(dp, sizeof dp, "%s, packed V books", desc);
    if (st == QF_OK) {
      fetch(k);
      compare(k, dp);
      ran_packed_public++;
    } else {
      CUDA_OK(cudaDeviceSynchronize());
      CHECK(st == QF_ERR_UNSUPPORTED && strstr(qf_ctx_last_error(gpu), "packed") && dev_holds(k->d_o, k->o_bytes, OUT_POISON) &&
                dev_holds(k->d_lse, k->lse_bytes, OUT_POISON),
            "%s: %s (%s)", dp, qf_status_str(st), qf_ctx_last_error(gpu));
    }
  }

  /* the banked kernel's formats (shared memory: not S = 64 with 4-element vectors) */
  const int64_t vs = c->f.vector_size, S = c->D / vs;
  const int banked_ok = c->f.index_bits == 8 && c->f.residuals == 1 && (vs == 2 || vs == 4) && (S == 32 || S == 64) &&
                        !(S == 64 && vs == 4);
  const int placements[] = {QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED};
  const int techniques[] = {QF_VQ_ATTN_SCORES_DECODE, QF_VQ_ATTN_SCORES_LUT};
  for (int i = 0; i < 5; i++) {
    const int placement = i < 4 ? placements[i % 2] : QF_VQ_BOOKS_BANKED;
    const int scores = i < 4 ? techniques[i / 2] : QF_VQ_ATTN_SCORES_LUT;
    char d2[360];
    snprintf(d2, sizeof d2, "%s, books %s, scores by %s", desc,
             placement == QF_VQ_BOOKS_BANKED ? "banked" : placement == QF_VQ_BOOKS_IN_SHARED ? "in shared" : "in global",
             scores == QF_VQ_ATTN_SCORES_LUT ? "LUT" : "decode");
    poison_device(k);
    qf_vq_attention_config used;
    st = forced_call(gpu, k, placement, scores, &used);
    if (placement == QF_VQ_BOOKS_BANKED) { /* refused exactly outside its formats, writing nothing */
      if (!CHECK((st == QF_ERR_UNSUPPORTED) == !banked_ok, "%s: %s (%s)", d2, qf_status_str(st), qf_ctx_last_error(gpu)))
        continue;
      if (st == QF_ERR_UNSUPPORTED) {
        CHECK(strstr(qf_ctx_last_error(gpu), "banked") != NULL, "%s: message: %s", d2, qf_ctx_last_error(gpu));
        CUDA_OK(cudaDeviceSynchronize());
        CHECK(dev_holds(k->d_o, k->o_bytes, OUT_POISON) && dev_holds(k->d_lse, k->lse_bytes, OUT_POISON),
              "%s: refused, yet o or lse written", d2);
        ran_banked_refused++;
        continue;
      }
      ran_banked[S / 32]++;
      ran_banked_halves[used.halves == 2 ? 2 : 1]++;
      ran_banked_batches += used.units > used.blocks && c->B > 1;
      ran_banked_chunks += used.n_chunks > 1;
      ran_banked_paired += S == 64 && used.halves == 2;
      ran_banked_paired_batches += S == 64 && used.halves == 2 && used.units > used.blocks && c->B > 1;
      /* (qf_vq_attn_banked_writes_o's rule, by path) */
      ran_banked_writes_o[0] += used.n_chunks == 1 && (used.heads == 1 || S == 64);
      ran_banked_writes_o[1] += S == 64 && used.halves == 2 && used.n_chunks == 2;
      if (used.heads >= 1 && used.heads <= 4) ran_banked_group[used.heads]++;
      ran_banked_group_batches += used.heads > 1 && used.units > used.blocks && c->B > 1;
    }
    /* shared books or score tables too large: nothing written (global decode always fits here) */
    if (st == QF_ERR_UNSUPPORTED && (placement == QF_VQ_BOOKS_IN_SHARED || scores == QF_VQ_ATTN_SCORES_LUT)) {
      CHECK(strstr(qf_ctx_last_error(gpu), "shared memory") != NULL, "%s: message: %s", d2, qf_ctx_last_error(gpu));
      CUDA_OK(cudaDeviceSynchronize());
      CHECK(dev_holds(k->d_o, k->o_bytes, OUT_POISON) && dev_holds(k->d_lse, k->lse_bytes, OUT_POISON), "%s: refused, yet o or lse written", d2);
      ran_lut_refused += scores == QF_VQ_ATTN_SCORES_LUT;
      continue;
    }
    if (!CHECK(st == QF_OK, "%s: gpu: %s", d2, qf_ctx_last_error(gpu))) continue;
    fetch(k);
    CHECK(used.placement == placement && used.scores == scores, "%s: ran placement %d, scores %d", d2, used.placement,
          used.scores);
    if (used.scores == QF_VQ_ATTN_SCORES_LUT && placement != QF_VQ_BOOKS_BANKED) {
      ran_lut[used.heads]++;
      ran_lut_shared += used.placement == QF_VQ_BOOKS_IN_SHARED;
      ran_lut_batches += used.units > used.blocks && c->B > 1;
    }
    ran_shared += used.placement == QF_VQ_BOOKS_IN_SHARED;
    ran_global += used.placement == QF_VQ_BOOKS_IN_GLOBAL;
    ran_chunks += used.n_chunks > 1;
    ran_multi_unit += used.units > used.blocks;
    ran_multi_tile += used.chunk_len > QF_VQ_ATTN_TILE && c->T > QF_VQ_ATTN_TILE;
    ran_head_tiles += used.head_tiles > 1;
    ran_single_stage += used.stages == 1;
    char d3[480];
    snprintf(d3, sizeof d3, "%s (chunks %" PRId64 " of %" PRId64 ", blocks %" PRId64 " x %" PRId64 ", heads %d, stages %d)", d2,
             used.n_chunks, used.chunk_len, used.blocks, c->Hkv * used.head_tiles, used.heads, used.stages);
    compare(k, d3);
    if (placement == QF_VQ_BOOKS_BANKED && vpk) { /* packed V books: the same bytes */
      memcpy(k->o_first, k->o_got, k->o_bytes);
      memcpy(k->lse_first, k->lse_got, k->lse_bytes);
      poison_device(k);
      forced_v_packed = vpk;
      st = forced_call(gpu, k, placement, scores, &used);
      forced_v_packed = NULL;
      if (CHECK(st == QF_OK, "%s, packed V books: %s", d3, qf_ctx_last_error(gpu))) {
        fetch(k);
        CHECK(!memcmp(k->o_first, k->o_got, k->o_bytes) && !memcmp(k->lse_first, k->lse_got, k->lse_bytes),
              "%s, packed V books: o or lse differs from the standard books' run", d3);
        ran_packed_banked++;
      }
    }
  }
  if (vpk) CUDA_OK(cudaFree(vpk));
}

static void attention_case(qf_ctx *gpu, qf_ctx *cpu, kv_cache *c, int64_t Hq, variant va, uint64_t *seed) {
  call k;
  call_init(&k, c, Hq, va, 0, seed);
  run_call(gpu, cpu, &k, "");
  call_free(&k);
}

/* ---- lengths per batch entry ---------------------------------------------------------------- */

/* Ragged lengths for B entries of a seq_len-T cache, starting at pattern entry `first`: no token, a
 * partial tile, whole tiles and one token either side, half and all of the cache. */
static void ragged_lengths(int32_t *lens, int64_t B, int64_t T, int first) {
  const int64_t pattern[] = {T, 0, 1, 255, 256, 257, T / 2 + 3, T - 1, 513};
  const int n = (int)(sizeof pattern / sizeof pattern[0]);
  for (int64_t b = 0; b < B; b++) {
    const int64_t L = pattern[(first + b) % n];
    lens[b] = (int32_t)(L < 0 ? 0 : L > T ? T : L);
  }
}

/* The reference and every kernel with ragged lengths (run_call), then one call captured in a CUDA
 * graph and replayed with other lengths written into the same device array between replays: each
 * replay byte for byte the direct call with those lengths. */
static void lengths_case(qf_ctx *gpu, qf_ctx *cpu, kv_cache *c, int64_t Hq, variant va, uint64_t *seed) {
  int32_t *lens = malloc((size_t)c->B * sizeof *lens);
  ragged_lengths(lens, c->B, c->T, (int)(c->T % 5));
  call k;
  call_init_lens(&k, c, Hq, va, 0, lens, seed);
  run_call(gpu, cpu, &k, " ragged lengths");

  graph_ctx g;
  if (graph_open(&g, 0, qf_ctx_workspace_bytes(gpu), c->name)) {
    api_tensors t;
    api_init(&t, &k, 1);
    graph_begin(&g);
    const qf_status st = qf_vq_attention_decode(g.ctx, &t.q.t, &t.kc, &t.kb, &t.vc, &t.vb, &c->f, &t.opts, &t.o.t, &t.lse);
    if (graph_end(&g, st == QF_OK, c->name)) {
      for (int round = 1; round <= 3; round++) {
        ragged_lengths(k.lens, c->B, c->T, round * 2 + 1);
        CUDA_OK(cudaMemcpy(k.d_lens, k.lens, (size_t)c->B * sizeof *k.lens, cudaMemcpyHostToDevice));
        poison_device(&k);
        CHECK(api_call(gpu, &k, 1) == QF_OK, "%s: direct call, round %d: %s", c->name, round, qf_ctx_last_error(gpu));
        fetch(&k);
        memcpy(k.o_first, k.o_got, k.o_bytes);
        memcpy(k.lse_first, k.lse_got, k.lse_bytes);
        poison_device(&k);
        graph_replay(&g);
        fetch(&k);
        CHECK(!memcmp(k.o_first, k.o_got, k.o_bytes) && !memcmp(k.lse_first, k.lse_got, k.lse_bytes),
              "%s: the graph's replay with the lengths of round %d differs from the direct call", c->name, round);
      }
    }
    graph_close(&g);
  }
  call_free(&k);
  free(lens);
}

/* ---- a paged cache ------------------------------------------------------------------------- */

/* The cache c laid out in pages of P rows in a shuffled order (two pages more than the entries
 * use, their rows and the unused rows of the last pages random), the block table [B, pages + 1]
 * whose last column points past the pool (never read: seq_len <= pages P). Every kernel (the
 * public call and each placement forced) on the paged cache gives the bytes of the same call on
 * the contiguous one, with ragged lengths; the CPU too. Then entry 1's first page points past the
 * pool: CUDA gives entry 1 NaN and the others their bytes, the CPU refuses and writes nothing. */
/* o and lse of k's last call on a backend (gpu: as fetched), back to back into `to`. */
static void keep_outputs(const call *k, uint8_t *to, int gpu) {
  memcpy(to, gpu ? k->o_got : k->o_ref, k->o_bytes);
  memcpy(to + k->o_bytes, gpu ? k->lse_got : k->lse_ref, k->lse_bytes);
}

static void paged_case(qf_ctx *gpu, qf_ctx *cpu, kv_cache *c, int64_t Hq, variant va, int64_t P, uint64_t *seed) {
  char desc[200];
  snprintf(desc, sizeof desc, "%s Hq=%" PRId64 " paged by %" PRId64, c->name, Hq, P);
  const int64_t B = c->B, T = c->T, pages = (T + P - 1) / P, rb = c->sz.row_bytes, R = c->f.residuals;
  paged_pool pool = {.P = P, .num = B * pages + 2, .cols = pages + 1};
  const int64_t num = pool.num, cols = pool.cols;
  const size_t pbytes = (size_t)(R * num * P * rb), tbytes = (size_t)(B * cols) * 4;
  pool.pshape[0] = R, pool.pshape[1] = num * P, pool.pshape[2] = rb, pool.tshape[0] = B, pool.tshape[1] = cols;
  int32_t *lens = malloc((size_t)B * 4), *perm = malloc((size_t)num * 4);
  pool.table = malloc(tbytes);
  ragged_lengths(lens, B, T, 1); /* entry 0: no token, entry 1: one */
  for (int64_t i = 0; i < num; i++) perm[i] = (int32_t)i;
  for (int64_t i = num - 1; i > 0; i--) { /* Fisher-Yates */
    const int64_t j = (int64_t)(rng_next(seed) % (uint64_t)(i + 1));
    const int32_t x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int m = 0; m < 2; m++) {
    pool.hp[m] = malloc(pbytes);
    for (size_t i = 0; i < pbytes; i++) pool.hp[m][i] = (uint8_t)(rng_next(seed) >> 56);
    for (int64_t r = 0; r < R; r++)
      for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < pages; j++) {
          const int64_t n = T - j * P < P ? T - j * P : P; /* the rows of the entry on this page */
          memcpy(pool.hp[m] + (size_t)((r * num * P + perm[b * pages + j] * P) * rb),
                 c->h_codes[m] + (size_t)((r * c->N + b * T + j * P) * rb), (size_t)(n * rb));
        }
    pool.dp[m] = dev_alloc(pbytes);
    CUDA_OK(cudaMemcpy(pool.dp[m], pool.hp[m], pbytes, cudaMemcpyHostToDevice));
  }
  for (int64_t b = 0; b < B; b++) {
    for (int64_t j = 0; j < pages; j++) pool.table[b * cols + j] = perm[b * pages + j];
    pool.table[b * cols + pages] = (int32_t)(num + 1000);
  }
  pool.dtable = dev_alloc(tbytes);
  CUDA_OK(cudaMemcpy(pool.dtable, pool.table, tbytes, cudaMemcpyHostToDevice));

  call k;
  call_init_lens(&k, c, Hq, va, 0, lens, seed);
  const int banked_pages = P % 256 == 0 || (256 % P == 0 && P >= 16);
  const size_t out_bytes = k.o_bytes + k.lse_bytes;
  uint8_t *want = malloc(out_bytes), *got = malloc(out_bytes), *paged_gpu = malloc(out_bytes);
  /* the public call, contiguous then paged, on each backend */
  for (int gpu_side = 0; gpu_side < 2; gpu_side++) {
    qf_ctx *ctx = gpu_side ? gpu : cpu;
    for (int paged = 0; paged < 2; paged++) {
      k.pool = paged ? &pool : NULL;
      if (gpu_side) poison_device(&k);
      const qf_status st = api_call(ctx, &k, gpu_side);
      if (!CHECK(st == QF_OK, "%s: %s public call%s: %s", desc, gpu_side ? "gpu" : "cpu", paged ? " (paged)" : "", qf_ctx_last_error(ctx)))
        continue;
      if (gpu_side) fetch(&k);
      keep_outputs(&k, paged ? got : want, gpu_side);
    }
    /* the same plan (every page size but the banked kernel's refusals): the same bytes; else
     * within the bounds of the CPU's (o_ref holds its paged call's) */
    if (!gpu_side || banked_pages)
      CHECK(!memcmp(got, want, out_bytes), "%s: %s: the paged cache's o and lse differ from the contiguous one's", desc,
            gpu_side ? "gpu" : "cpu");
    else
      compare(&k, desc);
  }
  memcpy(paged_gpu, got, out_bytes); /* the public call's bytes on the pages */
  /* each placement forced, paged against contiguous */
  const int placements[] = {QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED, QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED, QF_VQ_BOOKS_BANKED};
  const int techniques[] = {QF_VQ_ATTN_SCORES_DECODE, QF_VQ_ATTN_SCORES_DECODE, QF_VQ_ATTN_SCORES_LUT, QF_VQ_ATTN_SCORES_LUT,
                            QF_VQ_ATTN_SCORES_LUT};
  for (int i = 0; i < 5; i++) {
    qf_status st[2];
    for (int paged = 0; paged < 2; paged++) {
      k.pool = paged ? &pool : NULL;
      poison_device(&k);
      st[paged] = forced_call(gpu, &k, placements[i], techniques[i], NULL);
      if (st[paged] == QF_OK) fetch(&k);
      keep_outputs(&k, paged ? got : want, 1);
    }
    if (placements[i] == QF_VQ_BOOKS_BANKED && st[1] == QF_ERR_UNSUPPORTED && st[0] == QF_OK) {
      CHECK(!banked_pages && strstr(qf_ctx_last_error(gpu), "page sizes"), "%s: banked refused the pages: %s", desc,
            qf_ctx_last_error(gpu));
      continue;
    }
    if (st[0] == QF_ERR_UNSUPPORTED && st[1] == QF_ERR_UNSUPPORTED) continue; /* (the placement does not fit this cache) */
    if (!CHECK(st[0] == QF_OK && st[1] == QF_OK, "%s: placement %d scores %d: %s", desc, placements[i], techniques[i],
               qf_ctx_last_error(gpu)))
      continue;
    CHECK(!memcmp(got, want, out_bytes), "%s: placement %d scores %d: paged o and lse differ from the contiguous ones", desc,
          placements[i], techniques[i]);
    ran_paged_banked += placements[i] == QF_VQ_BOOKS_BANKED && P < 256;
  }
  /* entry 1's first page outside the pool */
  pool.table[1 * cols] = (int32_t)(num + 5);
  CUDA_OK(cudaMemcpy(pool.dtable, pool.table, tbytes, cudaMemcpyHostToDevice));
  k.pool = &pool;
  memset(k.o_ref, 0x5A, k.o_bytes);
  qf_status st = api_call(cpu, &k, 0);
  int untouched = 1;
  for (size_t i = 0; i < k.o_bytes; i++) untouched &= k.o_ref[i] == 0x5A;
  CHECK(st == QF_ERR_VALUE && untouched && strstr(qf_ctx_last_error(cpu), "block_table[1, 0]"),
        "%s: cpu: a page outside the pool refused, nothing written (%s)", desc, qf_ctx_last_error(cpu));
  poison_device(&k);
  st = api_call(gpu, &k, 1);
  if (CHECK(st == QF_OK, "%s: gpu, a page outside the pool: %s", desc, qf_ctx_last_error(gpu))) {
    fetch(&k);
    int ok = 1;
    const size_t e = esz(va.ot);
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < Hq; h++) {
        const float l = ((const float *)k.lse_got)[b * Hq + h];
        ok &= b == 1 ? isnan(l) : !memcmp(&l, paged_gpu + k.o_bytes + (size_t)(b * Hq + h) * 4, 4);
        for (int64_t d = 0; d < c->D; d++) {
          const size_t i = (size_t)(b * k.o_ld + h * c->D + d);
          ok &= b == 1 ? isnan(float_get(k.o_got, va.ot, i)) : !memcmp(k.o_got + i * e, paged_gpu + i * e, e);
        }
      }
    CHECK(ok, "%s: gpu: entry 1's tokens on a page outside the pool give it NaN, the others their values", desc);
  }
  call_free(&k);
  free(lens), free(perm), free(want), free(got), free(paged_gpu), free(pool.table), free(pool.hp[0]), free(pool.hp[1]);
  CUDA_OK(cudaFree(pool.dp[0]));
  CUDA_OK(cudaFree(pool.dp[1]));
  CUDA_OK(cudaFree(pool.dtable));
}

/* ---- chains of calls in three passes: synchronized, under PDL, in a CUDA graph ------------- */

/* A chain's buffers: q of every round (random fp16), o2 and lse2 of every pass and round, and the
 * graph's own q, o2 and lse2 (a captured graph reads and writes fixed buffers: each round's q is
 * copied in before a replay and its outputs out after it). */
enum { CHAIN_ROUNDS = 4 };
typedef struct {
  int rounds;
  size_t bytes, lse_bytes;
  void *q[CHAIN_ROUNDS], *o2[3][CHAIN_ROUNDS], *l2[3][CHAIN_ROUNDS], *gq, *go2, *gl2;
} chain_bufs;

static void chain_alloc(chain_bufs *cb, int rounds, int64_t q_elems, size_t lse_bytes, uint64_t *seed) {
  cb->rounds = rounds, cb->bytes = (size_t)q_elems * 2, cb->lse_bytes = lse_bytes;
  uint16_t *hq = malloc(cb->bytes);
  for (int r = 0; r < rounds; r++) {
    for (int64_t i = 0; i < q_elems; i++) float_put(hq, QF_F16, (size_t)i, rng_normal(seed));
    cb->q[r] = dev_alloc(cb->bytes);
    CUDA_OK(cudaMemcpy(cb->q[r], hq, cb->bytes, cudaMemcpyHostToDevice));
    for (int pass = 0; pass < 3; pass++) cb->o2[pass][r] = dev_alloc(cb->bytes), cb->l2[pass][r] = dev_alloc(lse_bytes);
  }
  cb->gq = dev_alloc(cb->bytes), cb->go2 = dev_alloc(cb->bytes), cb->gl2 = dev_alloc(lse_bytes);
  free(hq);
}

/* Round r on the captured graph g: q_r in, replay, o2 and lse2 out as pass 2's. */
static void chain_replay(chain_bufs *cb, graph_ctx *g, int r) {
  CUDA_OK(cudaMemcpy(cb->gq, cb->q[r], cb->bytes, cudaMemcpyDeviceToDevice));
  graph_replay(g);
  CUDA_OK(cudaMemcpy(cb->o2[2][r], cb->go2, cb->bytes, cudaMemcpyDeviceToDevice));
  CUDA_OK(cudaMemcpy(cb->l2[2][r], cb->gl2, cb->lse_bytes, cudaMemcpyDeviceToDevice));
}

/* Passes 1 (PDL) and 2 (CUDA graph) against pass 0, byte for byte, round by round; `distinct`:
 * consecutive rounds must also differ. */
static void chain_compare(const chain_bufs *cb, const char *name, const char *what, int distinct) {
  const size_t n = cb->bytes + cb->lse_bytes;
  uint8_t *got = malloc(n), *want = malloc(n), *prev = malloc(cb->bytes);
  for (int pass = 1; pass < 3; pass++)
    for (int r = 0; r < cb->rounds; r++) {
      CUDA_OK(cudaMemcpy(want, cb->o2[0][r], cb->bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(want + cb->bytes, cb->l2[0][r], cb->lse_bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got, cb->o2[pass][r], cb->bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got + cb->bytes, cb->l2[pass][r], cb->lse_bytes, cudaMemcpyDeviceToHost));
      CHECK(memcmp(got, want, n) == 0, "%s: %s (%s), round %d: o2 or lse2 differs from the synchronized calls'", name, what,
            pass == 1 ? "PDL" : "CUDA graph", r);
      if (distinct && r) CHECK(memcmp(got, prev, cb->bytes) != 0, "%s: %s, rounds %d and %d gave the same o2", name, what, r - 1, r);
      memcpy(prev, got, cb->bytes);
    }
  free(got), free(want), free(prev);
}

static void chain_free(chain_bufs *cb) {
  for (int r = 0; r < cb->rounds; r++) {
    CUDA_OK(cudaFree(cb->q[r]));
    for (int pass = 0; pass < 3; pass++) {
      CUDA_OK(cudaFree(cb->o2[pass][r]));
      CUDA_OK(cudaFree(cb->l2[pass][r]));
    }
  }
  CUDA_OK(cudaFree(cb->gq));
  CUDA_OK(cudaFree(cb->go2));
  CUDA_OK(cudaFree(cb->gl2));
}

/* ---- an engine's decode step over sequences of different lengths -------------------------- */

/* The step's device arrays: the lengths before and after the append, and the append's slots. */
typedef struct {
  kv_cache *c;
  int64_t W;
  int64_t lshape[2], nshape[1];
  void *o1, *l1;
  int32_t *d_lens, *d_lens2, *d_slots;
} ragged_step;

/* o1 = attention(q) over lens, o1's rows encoded by slot into K and V (qf_vq_encode_slots), then
 * o2 = attention(q) over lens2 = lens + 1 (the appended tokens included); `sync`: the device
 * synchronized between the calls. Whether every call returned QF_OK. */
static int run_ragged_step(qf_ctx *ctx, ragged_step *a, void *q, void *o2, void *lse2, int sync) {
  kv_cache *c = a->c;
  tensor2d tq, t1, t2;
  tensor2d_init(&tq, q, QF_F16, c->B, a->W, a->W, kDLCUDA);
  tensor2d_init(&t1, a->o1, QF_F16, c->B, a->W, a->W, kDLCUDA);
  tensor2d_init(&t2, o2, QF_F16, c->B, a->W, a->W, kDLCUDA);
  DLTensor tl1 = dl_tensor(a->l1, QF_F32, 2, a->lshape, kDLCUDA), tl2 = dl_tensor(lse2, QF_F32, 2, a->lshape, kDLCUDA);
  DLTensor lens = dl_tensor(a->d_lens, QF_I32, 1, a->nshape, kDLCUDA), lens2 = dl_tensor(a->d_lens2, QF_I32, 1, a->nshape, kDLCUDA);
  DLTensor slots = dl_tensor(a->d_slots, QF_I32, 1, a->nshape, kDLCUDA);
  DLTensor kc = cache_codes(c, 0, 1), kb = cache_books(c, 0, 1), vc = cache_codes(c, 1, 1), vb = cache_books(c, 1, 1);
  qf_vq_attention_opts o = {.head_dim = (int)c->D, .kv_heads = (int)c->Hkv, .seq_len = c->T, .kv_lens = &lens};
  qf_vq_attention_opts o2opts = o;
  o2opts.kv_lens = &lens2;
  return qf_vq_attention_decode(ctx, &tq.t, &kc, &kb, &vc, &vb, &c->f, &o, &t1.t, &tl1) == QF_OK &&
         (!sync || cudaDeviceSynchronize() == cudaSuccess) &&
         qf_vq_encode_slots(ctx, &t1.t, &slots, &kb, &c->f, &kc, NULL) == QF_OK &&
         qf_vq_encode_slots(ctx, &t1.t, &slots, &vb, &c->f, &vc, NULL) == QF_OK &&
         (!sync || cudaDeviceSynchronize() == cudaSuccess) &&
         qf_vq_attention_decode(ctx, &tq.t, &kc, &kb, &vc, &vb, &c->f, &o2opts, &t2.t, &tl2) == QF_OK;
}

/* Rounds of decode steps over B entries of lengths 0, 5, 300, 1000, ... (one more each round),
 * each round's tokens appended at slot b T + L_b: passes with PDL off and synchronized (the
 * reference; after each round the cache's codes equal the CPU's qf_vq_encode_slots of the same
 * o1 rows into its copy of the cache), on a PDL context back to back, and captured once in a CUDA
 * graph on a PDL context and replayed with each round's lengths and slots written into its
 * device arrays: o2, lse2 and the cache byte for byte the reference's. */
static void ragged_step_case(qf_ctx *gpu, qf_ctx *cpu, kv_cache *c, uint64_t *seed) {
  enum { ROUNDS = 3 };
  const int64_t B = c->B, W = c->Hkv * c->D;
  qf_ctx *pdl = NULL;
  if (!CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "%s: PDL context", c->name))
    return;
  const size_t bytes = (size_t)(B * W) * 2, lse_bytes = (size_t)(B * c->Hkv) * 4, nb = (size_t)B * 4;
  int32_t *lens = malloc(nb), *lens2 = malloc(nb), *slots = malloc(nb);
  uint16_t *ho1 = malloc(bytes);
  uint8_t *cpu_codes[2] = {malloc(c->code_bytes), malloc(c->code_bytes)}, *dev_codes = malloc(c->code_bytes);
  chain_bufs cb;
  chain_alloc(&cb, ROUNDS, B * W, lse_bytes, seed);
  ragged_step st = {.c = c, .W = W, .lshape = {B, c->Hkv}, .nshape = {B}, .o1 = dev_alloc(bytes), .l1 = dev_alloc(lse_bytes),
                    .d_lens = dev_alloc(nb), .d_lens2 = dev_alloc(nb), .d_slots = dev_alloc(nb)};
  const int64_t base[] = {0, 5, 300, 1000};
  int ok = 1;
  graph_ctx g;
  for (int pass = 0; pass < 3 && ok; pass++) {
    for (int m = 0; m < 2; m++) { /* (cpu_codes: the CPU's appends of pass 0, which the later passes end with) */
      CUDA_OK(cudaMemcpy(c->d_codes[m], c->h_codes[m], c->code_bytes, cudaMemcpyHostToDevice));
      if (pass == 0) memcpy(cpu_codes[m], c->h_codes[m], c->code_bytes);
    }
    if (pass == 2) {
      ok = graph_open(&g, 1, qf_ctx_workspace_bytes(gpu), c->name);
      if (ok) {
        graph_begin(&g);
        ok = graph_end(&g, run_ragged_step(g.ctx, &st, cb.gq, cb.go2, cb.gl2, 0), c->name);
      }
    }
    for (int r = 0; r < ROUNDS && ok; r++) {
      for (int64_t b = 0; b < B; b++) {
        lens[b] = (int32_t)(base[b % 4] + r < c->T ? base[b % 4] + r : c->T - 1);
        lens2[b] = lens[b] + 1, slots[b] = (int32_t)(b * c->T + lens[b]);
      }
      CUDA_OK(cudaMemcpy(st.d_lens, lens, nb, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(st.d_lens2, lens2, nb, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(st.d_slots, slots, nb, cudaMemcpyHostToDevice));
      if (pass < 2) {
        qf_ctx *ctx = pass ? pdl : gpu;
        ok = CHECK(run_ragged_step(ctx, &st, cb.q[r], cb.o2[pass][r], cb.l2[pass][r], !pass), "%s: ragged step, pass %d: %s",
                   c->name, pass, qf_ctx_last_error(ctx));
      } else {
        chain_replay(&cb, &g, r);
      }
      CUDA_OK(cudaDeviceSynchronize());
      if (pass == 0 && ok) { /* the cache against the CPU's encode of the same rows */
        CUDA_OK(cudaMemcpy(ho1, st.o1, bytes, cudaMemcpyDeviceToHost));
        tensor2d x;
        tensor2d_init(&x, ho1, QF_F16, B, W, W, kDLCPU);
        DLTensor sl = dl_tensor(slots, QF_I32, 1, st.nshape, kDLCPU);
        for (int m = 0; m < 2; m++) {
          DLTensor cc = dl_tensor(cpu_codes[m], QF_U8, 3, c->cshape, kDLCPU), cb = cache_books(c, m, 0);
          CHECK(qf_vq_encode_slots(cpu, &x.t, &sl, &cb, &c->f, &cc, NULL) == QF_OK, "%s: cpu encode: %s", c->name,
                qf_ctx_last_error(cpu));
          CUDA_OK(cudaMemcpy(dev_codes, c->d_codes[m], c->code_bytes, cudaMemcpyDeviceToHost));
          CHECK(memcmp(dev_codes, cpu_codes[m], c->code_bytes) == 0, "%s: round %d: the %s cache differs from the CPU's appends",
                c->name, r, m ? "V" : "K");
        }
      }
    }
    if (pass == 2) graph_close(&g);
    for (int m = 0; m < 2 && ok; m++) { /* the cache after the rounds: the reference's */
      CUDA_OK(cudaMemcpy(dev_codes, c->d_codes[m], c->code_bytes, cudaMemcpyDeviceToHost));
      CHECK(memcmp(dev_codes, cpu_codes[m], c->code_bytes) == 0, "%s: pass %d: the %s cache after the rounds differs", c->name,
            pass, m ? "V" : "K");
    }
  }
  if (ok) chain_compare(&cb, c->name, "ragged step", 0);
  /* the cache as it was, for whatever runs after */
  for (int m = 0; m < 2; m++) CUDA_OK(cudaMemcpy(c->d_codes[m], c->h_codes[m], c->code_bytes, cudaMemcpyHostToDevice));
  chain_free(&cb);
  CUDA_OK(cudaFree(st.o1));
  CUDA_OK(cudaFree(st.l1));
  CUDA_OK(cudaFree(st.d_lens));
  CUDA_OK(cudaFree(st.d_lens2));
  CUDA_OK(cudaFree(st.d_slots));
  free(lens), free(lens2), free(slots), free(ho1), free(cpu_codes[0]), free(cpu_codes[1]), free(dev_codes);
  qf_ctx_destroy(pdl);
}

/* ---- a decode step in one call (qf_vq_attention_decode_append) ------------------------------ */

/* Entry b's new rows of K and V (k_new, v_new [B, Hkv D] of dtype xt, a NaN in entry 0's first K
 * and V vectors) appended as its token L_b - 1 (lens, or T each), then attended, on a contiguous
 * cache or (P > 0) on one of pages of P rows in a shuffled pool: the GPU's one call against
 * qf_vq_encode_kv_slots then qf_vq_attention_decode on the same inputs (both caches, o and lse
 * byte for byte), and the caches against the CPU's qf_vq_attention_decode_append. With packed V
 * books (`packed`) a plan that cannot take them refuses the call and leaves the caches as they
 * were; the one call again on a PDL context gives the same bytes. ran_append[1] counts the calls
 * the banked kernel fused, ran_append[0] the others, ran_append_grouped[S = 64] the fused calls of
 * grouped heads. */
static int ran_append[2], ran_append_refused, ran_append_grouped[2], most_new_tokens;

/* The most units that hold their entry's new token (the chunk of its token L_b - 1) in one half's
 * run of a banked plan, split over runs as the kernel does (paired halves: every other unit of
 * their block's run). The fused setup encodes the first two at once and the rest one at a time:
 * a case with 3 or more takes both paths. */
static int new_tokens_per_run(const qf_vq_attention_problem *pb, const qf_vq_attention_config *u, const int32_t *lens,
                              int64_t T) {
  const int paired = qf_vq_attn_banked_paired(pb, u);
  const int64_t runs = paired ? u->blocks / 2 : u->blocks, run_units = paired ? u->units / 2 : u->units;
  int most = 0;
  for (int64_t r = 0; r < runs; r++)
    for (int half = 0; half < (paired ? 2 : 1); half++) {
      const int64_t r0 = r * run_units / runs, r1 = (r + 1) * run_units / runs;
      int n = 0;
      for (int64_t x = paired ? 2 * r0 + half : r0; x < (paired ? 2 * r1 : r1); x += paired ? 2 : 1) {
        const int64_t b = x / u->n_chunks, begin = x % u->n_chunks * u->chunk_len, L = lens ? lens[b] : T;
        n += L > begin && L <= begin + u->chunk_len;
      }
      if (n > most) most = n;
    }
  return most;
}
static void append_step_case(qf_ctx *gpu, qf_ctx *cpu, kv_cache *c, int64_t group, qf_dtype xt, const int32_t *lens,
                             int packed, int64_t P, uint64_t *seed) {
  char desc[240];
  snprintf(desc, sizeof desc, "%s group %" PRId64 " append %s%s%s", c->name, group, qf_dtype_name(xt), lens ? " ragged" : "",
           packed ? " packed V" : "");
  if (P) snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " paged by %" PRId64, P);
  const int64_t B = c->B, T = c->T, W = c->Hkv * c->D, Hq = c->Hkv * group, QW = Hq * c->D, rb = c->sz.row_bytes;
  /* the pool (P > 0): entry b's page j is page perm[b pages + j], as paged_case lays it out */
  const int64_t pages = P ? (T + P - 1) / P : 0, num = P ? B * pages + 1 : 0, N = P ? num * P : c->N, R = c->f.residuals;
  const size_t cbytes = (size_t)(R * N * rb);
  int32_t *table = P ? malloc((size_t)(B * pages) * 4) : NULL;
  uint8_t *h_pool[2] = {malloc(cbytes), malloc(cbytes)};
  for (int64_t i = 0; i < B * pages; i++) table[i] = (int32_t)i;
  for (int64_t i = B * pages - 1; i > 0; i--) {
    const int64_t j = (int64_t)(rng_next(seed) % (uint64_t)(i + 1));
    const int32_t x = table[i];
    table[i] = table[j], table[j] = x;
  }
  for (int m = 0; m < 2; m++) {
    if (!P) {
      memcpy(h_pool[m], c->h_codes[m], cbytes);
      continue;
    }
    for (size_t i = 0; i < cbytes; i++) h_pool[m][i] = (uint8_t)(rng_next(seed) >> 56);
    for (int64_t r = 0; r < R; r++)
      for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < pages; j++) {
          const int64_t n = T - j * P < P ? T - j * P : P;
          memcpy(h_pool[m] + (size_t)((r * N + table[b * pages + j] * P) * rb), c->h_codes[m] + (size_t)((r * c->N + b * T + j * P) * rb),
                 (size_t)(n * rb));
        }
  }
  /* the inputs, the slots of the two-call reference, the device buffers */
  const size_t xb = (size_t)(B * W) * esz(xt), qb = (size_t)(B * QW) * 2, lb = (size_t)(B * Hq) * 4, nb = (size_t)B * 4;
  uint8_t *hx[2] = {malloc(xb), malloc(xb)}, *hq = malloc(qb);
  int32_t *slots = malloc(nb);
  for (int m = 0; m < 2; m++)
    for (int64_t i = 0; i < B * W; i++) float_put(hx[m], xt, (size_t)i, i == m ? NAN : rng_normal(seed));
  for (int64_t i = 0; i < B * QW; i++) float_put(hq, QF_F16, (size_t)i, rng_normal(seed));
  for (int64_t b = 0; b < B; b++) {
    const int64_t L = lens ? lens[b] : T;
    slots[b] = L == 0 ? -1 : P ? (int32_t)(table[b * pages + (L - 1) / P] * P + (L - 1) % P) : (int32_t)(b * T + L - 1);
  }
  void *dx[2] = {dev_alloc(xb), dev_alloc(xb)}, *dq = dev_alloc(qb), *dpool[2] = {dev_alloc(cbytes), dev_alloc(cbytes)};
  void *d_o[2] = {dev_alloc(qb), dev_alloc(qb)}, *d_l[2] = {dev_alloc(lb), dev_alloc(lb)};
  int32_t *d_lens = lens ? dev_alloc(nb) : NULL, *d_slots = dev_alloc(nb), *d_table = P ? dev_alloc((size_t)(B * pages) * 4) : NULL;
  for (int m = 0; m < 2; m++) CUDA_OK(cudaMemcpy(dx[m], hx[m], xb, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dq, hq, qb, cudaMemcpyHostToDevice));
  if (lens) CUDA_OK(cudaMemcpy(d_lens, lens, nb, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_slots, slots, nb, cudaMemcpyHostToDevice));
  if (P) CUDA_OK(cudaMemcpy(d_table, table, (size_t)(B * pages) * 4, cudaMemcpyHostToDevice));
  int64_t pshape[5] = {0}, lshape[2] = {B, Hq}, nshape[1] = {B}, cshape[3] = {R, N, rb}, tshape[2] = {B, pages};
  void *vpacked = packed ? packed_v_books(gpu, cpu, c, pshape) : NULL;

  /* the plan (an attention call without the append): fused where the launcher fuses */
  qf_vq_attention_args a;
  memset(&a, 0, sizeof a);
  a.q = (qf_mat){dq, QF_F16, B, QW, QW};
  a.o = (qf_mat){d_o[0], QF_F16, B, QW, QW};
  a.lse = d_l[0];
  a.k = (qf_vq_tensors){c->f, c->sz, N, c->C, dpool[0], c->d_books[0], NULL, 0};
  a.v = (qf_vq_tensors){c->f, c->sz, N, c->C, dpool[1], vpacked ? vpacked : c->d_books[1], NULL, 0};
  a.v_books_packed = vpacked != NULL;
  a.B = B, a.Hq = Hq, a.Hkv = c->Hkv, a.D = c->D, a.seq_len = T, a.sm_scale = 1.0 / sqrt((double)c->D), a.kv_lens = d_lens;
  if (P) a.block_table = d_table, a.bt_ld = pages, a.page_size = P, a.num_pages = num;
  for (int m = 0; m < 2; m++) CUDA_OK(cudaMemcpy(dpool[m], h_pool[m], cbytes, cudaMemcpyHostToDevice));
  qf_vq_attention_config used;
  const int planned = qf_cuda_vq_attention_decode_with(gpu, &a, QF_VQ_BOOKS_AUTO, QF_VQ_ATTN_SCORES_AUTO, &used) == QF_OK;
  const qf_vq_attention_problem pb = {.B = B, .D = c->D, .vector_size = c->f.vector_size};
  const int fused = planned && qf_vq_attn_banked_appends(&pb, &used, vpacked != NULL);
  if (fused) {
    const int n = new_tokens_per_run(&pb, &used, lens, T);
    if (n > most_new_tokens) most_new_tokens = n;
  }

  tensor2d tx[2], tq, to[2];
  for (int m = 0; m < 2; m++) tensor2d_init(&tx[m], dx[m], xt, B, W, W, kDLCUDA);
  tensor2d_init(&tq, dq, QF_F16, B, QW, QW, kDLCUDA);
  DLTensor tl[2], kc = dl_tensor(dpool[0], QF_U8, 3, cshape, kDLCUDA), vc = dl_tensor(dpool[1], QF_U8, 3, cshape, kDLCUDA);
  DLTensor kb = cache_books(c, 0, 1), vb = cache_books(c, 1, 1), vbp = dl_tensor(vpacked, c->f.entry_dtype, 5, pshape, kDLCUDA);
  DLTensor tlens = dl_tensor(d_lens, QF_I32, 1, nshape, kDLCUDA), tslots = dl_tensor(d_slots, QF_I32, 1, nshape, kDLCUDA);
  DLTensor ttable = dl_tensor(d_table, QF_I32, 2, tshape, kDLCUDA);
  for (int i = 0; i < 2; i++) tensor2d_init(&to[i], d_o[i], QF_F16, B, QW, QW, kDLCUDA), tl[i] = dl_tensor(d_l[i], QF_F32, 2, lshape, kDLCUDA);
  qf_vq_attention_opts opts = {.head_dim = (int)c->D, .kv_heads = (int)c->Hkv, .seq_len = T, .kv_lens = lens ? &tlens : NULL};
  if (P) opts.block_table = &ttable, opts.page_size = P;
  const DLTensor *vbooks = vpacked ? &vbp : &vb;
  uint8_t *ref[2] = {malloc(cbytes), malloc(cbytes)}, *got = malloc(cbytes);
  uint8_t *out[2][2] = {{malloc(qb), malloc(lb)}, {malloc(qb), malloc(lb)}};

  /* the two calls, then the one */
  int ok = CHECK(planned, "%s: plan: %s", desc, qf_ctx_last_error(gpu)) &&
           CHECK(qf_vq_encode_kv_slots(gpu, &tx[0].t, &tx[1].t, &tslots, &kb, &vb, &c->f, &kc, &vc, NULL, NULL) == QF_OK &&
                     qf_vq_attention_decode(gpu, &tq.t, &kc, &kb, &vc, vbooks, &c->f, &opts, &to[0].t, &tl[0]) == QF_OK,
                 "%s: two calls: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  for (int m = 0; m < 2 && ok; m++) CUDA_OK(cudaMemcpy(ref[m], dpool[m], cbytes, cudaMemcpyDeviceToHost));
  for (int m = 0; m < 2 && ok; m++) CUDA_OK(cudaMemcpy(dpool[m], h_pool[m], cbytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_o[1], 0xFF, qb));
  CUDA_OK(cudaMemset(d_l[1], 0xFF, lb));
  const qf_status st = ok ? qf_vq_attention_decode_append(gpu, &tq.t, &tx[0].t, &tx[1].t, &kc, &kb, &vc, vbooks, &c->f, &opts,
                                                          &to[1].t, &tl[1])
                          : QF_ERR_VALUE;
  CUDA_OK(cudaDeviceSynchronize());
  if (ok && vpacked && !fused) { /* refused, the caches untouched */
    ran_append_refused++;
    CHECK(st == QF_ERR_UNSUPPORTED, "%s: packed V books outside the fused kernel: status %d, want QF_ERR_UNSUPPORTED", desc, (int)st);
    for (int m = 0; m < 2; m++) {
      CUDA_OK(cudaMemcpy(got, dpool[m], cbytes, cudaMemcpyDeviceToHost));
      CHECK(!memcmp(got, h_pool[m], cbytes), "%s: the refused call changed the %s cache", desc, m ? "V" : "K");
    }
  } else if (ok && CHECK(st == QF_OK, "%s: one call: %s", desc, qf_ctx_last_error(gpu))) {
    ran_append[fused]++;
    if (fused && used.heads > 1) ran_append_grouped[c->D / c->f.vector_size == 64]++;
    for (int m = 0; m < 2; m++) {
      CUDA_OK(cudaMemcpy(got, dpool[m], cbytes, cudaMemcpyDeviceToHost));
      size_t first = cbytes, n_diff = 0;
      for (size_t i = 0; i < cbytes; i++)
        if (got[i] != ref[m][i] && n_diff++ == 0) first = i;
      CHECK(n_diff == 0, "%s (%s): the %s cache differs from qf_vq_encode_kv_slots' in %zu bytes, first row %" PRId64
            " byte %" PRId64 ": %d, want %d (was %d)", desc, fused ? "fused" : "two kernels", m ? "V" : "K", n_diff,
            (int64_t)(first / (size_t)rb), (int64_t)(first % (size_t)rb), n_diff ? got[first] : 0, n_diff ? ref[m][first] : 0,
            n_diff ? h_pool[m][first] : 0);
    }
    for (int i = 0; i < 2; i++) {
      CUDA_OK(cudaMemcpy(out[i][0], d_o[i], qb, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(out[i][1], d_l[i], lb, cudaMemcpyDeviceToHost));
    }
    CHECK(!memcmp(out[0][0], out[1][0], qb) && !memcmp(out[0][1], out[1][1], lb),
          "%s (%s): o and lse differ from the two calls'", desc, fused ? "fused" : "two kernels");
    /* the same call on a PDL context (its kernels programmatic dependents: the fallback's slots,
     * encode and attention each waiting for the one before): the same bytes */
    qf_ctx *pdl = NULL;
    if (CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "%s: PDL context", desc)) {
      for (int m = 0; m < 2; m++) CUDA_OK(cudaMemcpy(dpool[m], h_pool[m], cbytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(d_o[1], 0xFF, qb));
      CUDA_OK(cudaMemset(d_l[1], 0xFF, lb));
      if (CHECK(qf_vq_attention_decode_append(pdl, &tq.t, &tx[0].t, &tx[1].t, &kc, &kb, &vc, vbooks, &c->f, &opts, &to[1].t,
                                              &tl[1]) == QF_OK,
                "%s: one call under PDL: %s", desc, qf_ctx_last_error(pdl))) {
        CUDA_OK(cudaDeviceSynchronize());
        for (int m = 0; m < 2; m++) {
          CUDA_OK(cudaMemcpy(got, dpool[m], cbytes, cudaMemcpyDeviceToHost));
          CHECK(!memcmp(got, ref[m], cbytes), "%s: under PDL the %s cache differs from the two calls'", desc, m ? "V" : "K");
        }
        CUDA_OK(cudaMemcpy(out[1][0], d_o[1], qb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(out[1][1], d_l[1], lb, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(out[0][0], out[1][0], qb) && !memcmp(out[0][1], out[1][1], lb), "%s: under PDL o and lse differ", desc);
      }
      qf_ctx_destroy(pdl);
    }
    /* the CPU's one call (standard V books) on the host copies: the same caches */
    tensor2d hxt[2], hqt, hot;
    for (int m = 0; m < 2; m++) tensor2d_init(&hxt[m], hx[m], xt, B, W, W, kDLCPU);
    tensor2d_init(&hqt, hq, QF_F16, B, QW, QW, kDLCPU);
    tensor2d_init(&hot, out[1][0], QF_F16, B, QW, QW, kDLCPU);
    DLTensor hl = dl_tensor(out[1][1], QF_F32, 2, lshape, kDLCPU), hkc = dl_tensor(h_pool[0], QF_U8, 3, cshape, kDLCPU);
    DLTensor hvc = dl_tensor(h_pool[1], QF_U8, 3, cshape, kDLCPU), hkb = cache_books(c, 0, 0), hvb = cache_books(c, 1, 0);
    DLTensor hlens = dl_tensor((void *)lens, QF_I32, 1, nshape, kDLCPU), htable = dl_tensor(table, QF_I32, 2, tshape, kDLCPU);
    qf_vq_attention_opts hopts = opts;
    hopts.kv_lens = lens ? &hlens : NULL;
    if (P) hopts.block_table = &htable;
    if (CHECK(qf_vq_attention_decode_append(cpu, &hqt.t, &hxt[0].t, &hxt[1].t, &hkc, &hkb, &hvc, &hvb, &c->f, &hopts, &hot.t,
                                            &hl) == QF_OK,
              "%s: cpu: %s", desc, qf_ctx_last_error(cpu)))
      for (int m = 0; m < 2; m++)
        CHECK(!memcmp(h_pool[m], ref[m], cbytes), "%s: the CPU's %s cache differs from the GPU's", desc, m ? "V" : "K");
  }
  for (int m = 0; m < 2; m++) {
    CUDA_OK(cudaFree(dx[m]));
    CUDA_OK(cudaFree(dpool[m]));
    CUDA_OK(cudaFree(d_o[m]));
    CUDA_OK(cudaFree(d_l[m]));
    free(hx[m]), free(h_pool[m]), free(ref[m]), free(out[m][0]), free(out[m][1]);
  }
  CUDA_OK(cudaFree(dq));
  CUDA_OK(cudaFree(d_slots));
  if (d_lens) CUDA_OK(cudaFree(d_lens));
  if (d_table) CUDA_OK(cudaFree(d_table));
  if (vpacked) CUDA_OK(cudaFree(vpacked));
  free(hq), free(slots), free(table), free(got);
}

/* ---- NaN and Inf ---------------------------------------------------------------------------- */

static void nan_inf_case(qf_ctx *gpu, qf_ctx *cpu, int64_t D, uint64_t *seed) {
  qf_vq_format f;
  qf_vq_format_preset(QF_VQ_CQ_2, &f);
  kv_cache c;
  const int64_t B = 2, T = 300, Hkv = 2, V = D / 4, Hq = 8;
  if (!make_cache(cpu, &c, D == 64 ? "CQ-2 NaN/Inf" : "CQ-2 NaN/Inf D 128", f, B, T, Hkv, D, 0, seed)) return;
  const int64_t rb = c.sz.row_bytes, E = c.sz.entries;
  /* V: entry 0 of book 3 (kv head 0, channels 12..15) has a NaN in channel 13; token 5 of each
   * batch entry selects it. */
  c.h_books[1][(3 * E + 0) * 4 + 1] = 0x7E00;
  for (int64_t b = 0; b < B; b++) qf_vq_set_index(c.h_codes[1] + (b * T + 5) * rb, 3, 8, 0);
  /* K: entry 255 of book V + 2 (kv head 1, channels 8..11) is +Inf; only token 7 of batch entry 1
   * selects it, so its scores are +-Inf or NaN (mixed signs) and the other tokens stay finite. */
  for (int c4 = 0; c4 < 4; c4++) c.h_books[0][((V + 2) * E + 255) * 4 + c4] = 0x7C00;
  for (int64_t n = 0; n < B * T; n++) {
    uint8_t *row = c.h_codes[0] + n * rb;
    const uint32_t want = n == T + 7 ? 255u : qf_vq_get_index(row, V + 2, 8) == 255u ? 254u : qf_vq_get_index(row, V + 2, 8);
    qf_vq_set_index(row, V + 2, 8, want);
  }
  if (!cache_upload(cpu, &c)) return;
  const variant vas[] = {{QF_F32, QF_F32, 0.0f, 0}, {QF_BF16, QF_F16, 0.3f, 1}};
  for (int i = 0; i < 2; i++) {
    call k;
    call_init(&k, &c, Hq, vas[i], 1, seed);
    run_call(gpu, cpu, &k, " (NaN in q and V, Inf in K)");
    /* the reference has what the case is about: NaN rows and columns, finite values elsewhere */
    size_t nan_o = 0, nan_l = 0, fin_o = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < Hq; h++) {
        nan_l += isnan(((const float *)k.lse_ref)[b * Hq + h]);
        for (int64_t d = 0; d < D; d++) {
          const float r = float_get(k.o_ref, vas[i].ot, (size_t)(b * k.o_ld + h * D + d));
          nan_o += isnan(r), fin_o += isfinite(r);
        }
      }
    CHECK(isnan(float_get(k.o_ref, vas[i].ot, (size_t)(1 * D + 0))) && isnan(((const float *)k.lse_ref)[1]) &&
              isnan(float_get(k.o_ref, vas[i].ot, (size_t)(2 * D + 13))) && nan_l >= 1 && fin_o > nan_o,
          "NaN/Inf case: the reference has NaN in o[0, 1, :], lse[0, 1] and o[., 2, 13] (%zu NaN, %zu finite)", nan_o, fin_o);
    call_free(&k);
  }
  free_cache(&c);
}

/* ---- codebooks not 16-byte aligned ---------------------------------------------------------- */

/* The banked kernel reads codebooks 16 bytes at a time: V books 8 bytes past a 16-byte boundary
 * are refused by the public call (QF_ERR_ALIGNMENT) and by the backend's forced banked placement
 * (QF_ERR_UNSUPPORTED), writing nothing. */
static void misaligned_books_case(qf_ctx *gpu, qf_ctx *cpu, uint64_t *seed) {
  qf_vq_format f;
  qf_vq_format_preset(QF_VQ_CQ_2, &f);
  kv_cache c;
  if (!make_cache(cpu, &c, "CQ-2 V books at +8 bytes", f, 2, 300, 2, 128, 0, seed)) return;
  uint8_t *buf = dev_alloc(c.book_bytes + 16);
  CUDA_OK(cudaMemcpy(buf + 8, c.d_books[1], c.book_bytes, cudaMemcpyDeviceToDevice));
  void *aligned = c.d_books[1];
  c.d_books[1] = buf + 8;
  call k;
  const variant va = {QF_F16, QF_F32, 0.0f, 0};
  call_init(&k, &c, 2, va, 0, seed);
  poison_device(&k);
  qf_status st = api_call(gpu, &k, 1);
  CHECK(st == QF_ERR_ALIGNMENT && strstr(qf_ctx_last_error(gpu), "16-byte aligned") != NULL, "%s: returned %s (%s)", c.name,
        qf_status_str(st), qf_ctx_last_error(gpu));
  st = forced_call(gpu, &k, QF_VQ_BOOKS_BANKED, QF_VQ_ATTN_SCORES_LUT, NULL);
  CHECK(st == QF_ERR_UNSUPPORTED && strstr(qf_ctx_last_error(gpu), "aligned to 16") != NULL,
        "%s: forced banked returned %s (%s)", c.name, qf_status_str(st), qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(dev_holds(k.d_o, k.o_bytes, OUT_POISON) && dev_holds(k.d_lse, k.lse_bytes, OUT_POISON),
        "%s: refused, yet o or lse written", c.name);
  call_free(&k);
  c.d_books[1] = aligned;
  CUDA_OK(cudaFree(buf));
  free_cache(&c);
}

/* ---- refusals ------------------------------------------------------------------------------- */

static void refused(qf_ctx *gpu, qf_ctx *cpu, const char *name, qf_vq_format f, int64_t D, int misalign, qf_status want,
                    const char *text, uint64_t *seed) {
  kv_cache c;
  if (!make_cache(cpu, &c, name, f, 1, 8, 1, D, 0, seed)) return;
  call k;
  const variant va = {QF_F16, QF_F16, 0.0f, 0};
  call_init(&k, &c, 2, va, 0, seed);
  poison_device(&k);
  api_tensors t;
  api_init(&t, &k, 1);
  if (misalign) t.q.t.data = (char *)k.dq + 1;
  qf_status st = qf_vq_attention_decode(gpu, &t.q.t, &t.kc, &t.kb, &t.vc, &t.vb, &c.f, &t.opts, &t.o.t, &t.lse);
  CHECK(st == want && strstr(qf_ctx_last_error(gpu), text) != NULL, "%s: returned %s (%s), expected %s mentioning '%s'",
        c.name, qf_status_str(st), qf_ctx_last_error(gpu), qf_status_str(want), text);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(dev_holds(k.d_o, k.o_bytes, OUT_POISON) && dev_holds(k.d_lse, k.lse_bytes, OUT_POISON),
        "%s: o or lse written by a refused call", c.name);
  call_free(&k);
  free_cache(&c);
}

/* ---- QF_VQ_BOOKS ------------------------------------------------------------------------------ */

static void env_switch_case(qf_ctx *gpu, qf_ctx *cpu, uint64_t *seed) {
  qf_vq_format cq2;
  qf_vq_format_preset(QF_VQ_CQ_2, &cq2);
  const variant va = {QF_F16, QF_F16, 0.0f, 0};
  kv_cache c;
  if (!make_cache(cpu, &c, "CQ-2 QF_VQ_BOOKS", cq2, 2, 300, 2, 64, 0, seed)) return;
  call k;
  call_init(&k, &c, 8, va, 0, seed);
  qf_status st = api_call(cpu, &k, 0);
  CHECK(st == QF_OK, "QF_VQ_BOOKS: cpu: %s", qf_ctx_last_error(cpu));
  const struct {
    const char *value;
    int placement;
  } cases[] = {{"global", QF_VQ_BOOKS_IN_GLOBAL}, {"shared", QF_VQ_BOOKS_IN_SHARED}};
  /* the score technique the public call's heuristic picks with each placement */
  qf_vq_attention_config auto_cfg[2];
  for (int i = 0; i < 2; i++) {
    char desc[160];
    snprintf(desc, sizeof desc, "%s: QF_VQ_BOOKS=%s", c.name, cases[i].value);
    if (!CHECK(forced_call(gpu, &k, cases[i].placement, QF_VQ_ATTN_SCORES_AUTO, &auto_cfg[i]) == QF_OK, "%s: plan: %s", desc,
               qf_ctx_last_error(gpu)))
      continue;
    setenv("QF_VQ_BOOKS", cases[i].value, 1);
    poison_device(&k);
    st = api_call(gpu, &k, 1);
    unsetenv("QF_VQ_BOOKS");
    if (!CHECK(st == QF_OK, "%s: %s", desc, qf_ctx_last_error(gpu))) continue;
    fetch(&k);
    compare(&k, desc);
    memcpy(k.o_first, k.o_got, k.o_bytes);
    memcpy(k.lse_first, k.lse_got, k.lse_bytes);
    poison_device(&k);
    st = forced_call(gpu, &k, cases[i].placement, auto_cfg[i].scores, NULL);
    if (!CHECK(st == QF_OK, "%s: forced: %s", desc, qf_ctx_last_error(gpu))) continue;
    fetch(&k);
    CHECK(!memcmp(k.o_first, k.o_got, k.o_bytes) && !memcmp(k.lse_first, k.lse_got, k.lse_bytes),
          "%s: differs from the forced call", desc);
  }
  /* an unknown placement (QF_ERR_VALUE), and the VQ-GeMV's register tier (QF_ERR_UNSUPPORTED,
   * the variable named); o and lse untouched */
  const struct {
    const char *value;
    qf_status want;
  } refused[] = {{"nowhere", QF_ERR_VALUE}, {"registers", QF_ERR_UNSUPPORTED}};
  for (int i = 0; i < 2; i++) {
    setenv("QF_VQ_BOOKS", refused[i].value, 1);
    poison_device(&k);
    st = api_call(gpu, &k, 1);
    unsetenv("QF_VQ_BOOKS");
    CHECK(st == refused[i].want && strstr(qf_ctx_last_error(gpu), "QF_VQ_BOOKS") != NULL, "QF_VQ_BOOKS=%s: %s (%s)",
          refused[i].value, qf_status_str(st), qf_ctx_last_error(gpu));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(dev_holds(k.d_o, k.o_bytes, OUT_POISON) && dev_holds(k.d_lse, k.lse_bytes, OUT_POISON),
          "QF_VQ_BOOKS=%s: o or lse written", refused[i].value);
  }
  call_free(&k);
  free_cache(&c);

  /* shared where the books do not fit, with either score technique: one 65536-entry book of 256 KB */
  const qf_vq_format big = {2, 16, 1, 0, 0, QF_F16, 0, 0};
  if (!make_cache(cpu, &c, "VQ<2,16,1> QF_VQ_BOOKS", big, 1, 8, 1, 64, 0, seed)) return;
  call_init(&k, &c, 1, va, 0, seed);
  setenv("QF_VQ_BOOKS", "shared", 1);
  poison_device(&k);
  st = api_call(gpu, &k, 1);
  unsetenv("QF_VQ_BOOKS");
  CHECK(st == QF_ERR_UNSUPPORTED && strstr(qf_ctx_last_error(gpu), "QF_VQ_BOOKS=shared") != NULL,
        "QF_VQ_BOOKS=shared with a 65536-entry book: %s (%s)", qf_status_str(st), qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(dev_holds(k.d_o, k.o_bytes, OUT_POISON) && dev_holds(k.d_lse, k.lse_bytes, OUT_POISON),
        "QF_VQ_BOOKS=shared with a 65536-entry book: o or lse written");
  call_free(&k);
  free_cache(&c);
}

/* qf_vq_attention_decode under programmatic dependent launch (qf_ctx_set_pdl) on fp16 q and o:
 * ROUNDS rounds of o1 = attention(q_r) into one shared buffer and o2_r = attention(o1) into a
 * buffer of the round (o has q's shape), launched back to back without a synchronization. Each
 * o2_r and lse2_r must equal, byte for byte, the same two calls with PDL off and the device
 * synchronized between them: a call that read o1 (its q) before the one writing it had finished,
 * or wrote o1 or the workspace while the one before still read them, would compute from another
 * round's values. The rounds' outputs differ from one another (checked). The calls' plan must be
 * the banked kernel's (the one launched as a dependent); returns its query heads per block (0 if
 * it was not). */
static int pdl_chain_case(qf_ctx *gpu, kv_cache *c, int64_t Hq, uint64_t *seed) {
  enum { ROUNDS = 4 };
  qf_ctx *pdl = NULL;
  if (!CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "%s: PDL context", c->name))
    return 0;
  const int64_t B = c->B, W = Hq * c->D;
  const size_t bytes = (size_t)(B * W) * 2, lse_bytes = (size_t)(B * Hq) * 4;
  uint16_t *hq = malloc(bytes);
  void *q[ROUNDS], *o2[ROUNDS], *o2_ref[ROUNDS], *l2[ROUNDS], *l2_ref[ROUNDS], *o1 = dev_alloc(bytes), *l1 = dev_alloc(lse_bytes);
  for (int r = 0; r < ROUNDS; r++) {
    for (int64_t i = 0; i < B * W; i++) float_put(hq, QF_F16, (size_t)i, rng_normal(seed));
    q[r] = dev_alloc(bytes), o2[r] = dev_alloc(bytes), o2_ref[r] = dev_alloc(bytes);
    l2[r] = dev_alloc(lse_bytes), l2_ref[r] = dev_alloc(lse_bytes);
    CUDA_OK(cudaMemcpy(q[r], hq, bytes, cudaMemcpyHostToDevice));
  }
  int64_t lshape[2] = {B, Hq};
  const qf_vq_attention_opts opts = {.head_dim = (int)c->D, .kv_heads = (int)c->Hkv, .seq_len = c->T};
  DLTensor kc = cache_codes(c, 0, 1), kb = cache_books(c, 0, 1), vc = cache_codes(c, 1, 1), vb = cache_books(c, 1, 1);
  /* the plan: the banked kernel's, the one launched as a dependent */
  qf_vq_attention_args a;
  memset(&a, 0, sizeof a);
  a.q = (qf_mat){q[0], QF_F16, B, W, W}, a.o = (qf_mat){o1, QF_F16, B, W, W}, a.lse = l1;
  a.k = (qf_vq_tensors){c->f, c->sz, c->N, c->C, c->d_codes[0], c->d_books[0], NULL, 0};
  a.v = (qf_vq_tensors){c->f, c->sz, c->N, c->C, c->d_codes[1], c->d_books[1], NULL, 0};
  a.B = B, a.Hq = Hq, a.Hkv = c->Hkv, a.D = c->D, a.seq_len = c->T, a.sm_scale = 1.0 / sqrt((double)c->D);
  qf_vq_attention_config used;
  int ok = CHECK(qf_cuda_vq_attention_decode_with(gpu, &a, QF_VQ_BOOKS_AUTO, QF_VQ_ATTN_SCORES_AUTO, &used) == QF_OK &&
                     used.placement == QF_VQ_BOOKS_BANKED,
                 "%s: PDL chain: the heuristic's plan is the banked kernel's (%s)", c->name, qf_ctx_last_error(gpu));
  const int banked = ok;
  for (int pass = 0; pass < 2 && ok; pass++) /* pass 0: the reference, PDL off and synchronized */
    for (int r = 0; r < ROUNDS && ok; r++) {
      qf_ctx *ctx = pass ? pdl : gpu;
      tensor2d tq, t1, t2;
      tensor2d_init(&tq, q[r], QF_F16, B, W, W, kDLCUDA);
      tensor2d_init(&t1, o1, QF_F16, B, W, W, kDLCUDA);
      tensor2d_init(&t2, pass ? o2[r] : o2_ref[r], QF_F16, B, W, W, kDLCUDA);
      DLTensor tl1 = dl_tensor(l1, QF_F32, 2, lshape, kDLCUDA), tl2 = dl_tensor(pass ? l2[r] : l2_ref[r], QF_F32, 2, lshape, kDLCUDA);
      ok = CHECK(qf_vq_attention_decode(ctx, &tq.t, &kc, &kb, &vc, &vb, &c->f, &opts, &t1.t, &tl1) == QF_OK &&
                     (pass || cudaDeviceSynchronize() == cudaSuccess) &&
                     qf_vq_attention_decode(ctx, &t1.t, &kc, &kb, &vc, &vb, &c->f, &opts, &t2.t, &tl2) == QF_OK,
                 "%s: PDL chain, pass %d round %d: %s", c->name, pass, r, qf_ctx_last_error(ctx));
      if (!pass) CUDA_OK(cudaDeviceSynchronize());
    }
  CUDA_OK(cudaDeviceSynchronize());
  uint8_t *got = malloc(bytes + lse_bytes), *want = malloc(bytes + lse_bytes), *prev = malloc(bytes + lse_bytes);
  for (int r = 0; r < ROUNDS && ok; r++) {
    CUDA_OK(cudaMemcpy(got, o2[r], bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got + bytes, l2[r], lse_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(want, o2_ref[r], bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(want + bytes, l2_ref[r], lse_bytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, want, bytes + lse_bytes) == 0, "%s: PDL chain, round %d: o2 or lse2 differs from the synchronized calls'",
          c->name, r);
    if (r) CHECK(memcmp(got, prev, bytes) != 0, "%s: PDL chain, rounds %d and %d gave the same o2", c->name, r - 1, r);
    memcpy(prev, got, bytes + lse_bytes);
  }
  for (int r = 0; r < ROUNDS; r++) {
    CUDA_OK(cudaFree(q[r]));
    CUDA_OK(cudaFree(o2[r]));
    CUDA_OK(cudaFree(o2_ref[r]));
    CUDA_OK(cudaFree(l2[r]));
    CUDA_OK(cudaFree(l2_ref[r]));
  }
  CUDA_OK(cudaFree(o1));
  CUDA_OK(cudaFree(l1));
  free(hq), free(got), free(want), free(prev);
  qf_ctx_destroy(pdl);
  return banked ? used.heads : 0;
}

/* The tensors of a decode step's append (append_pdl_chain_case) that stay the same between calls. */
typedef struct {
  kv_cache *c;
  int64_t W, last;
  int64_t lshape[2];
  void *o1, *l1;
  DLTensor kc, kb, vc, vb, last_codes[2];
  qf_vq_attention_opts opts;
} append_step;

/* The step on ctx: o1 = attention(q), o1 encoded as the cache's last token into K and V, then
 * o2 = attention(q) over the updated cache; `sync`: the device synchronized between the calls.
 * Whether every call returned QF_OK (the failure's message in ctx). */
static int run_append_step(qf_ctx *ctx, append_step *a, void *q, void *o2, void *lse2, int sync) {
  kv_cache *c = a->c;
  tensor2d tq, t1, t2;
  tensor2d_init(&tq, q, QF_F16, 1, a->W, a->W, kDLCUDA);
  tensor2d_init(&t1, a->o1, QF_F16, 1, a->W, a->W, kDLCUDA);
  tensor2d_init(&t2, o2, QF_F16, 1, a->W, a->W, kDLCUDA);
  DLTensor tl1 = dl_tensor(a->l1, QF_F32, 2, a->lshape, kDLCUDA), tl2 = dl_tensor(lse2, QF_F32, 2, a->lshape, kDLCUDA);
  return qf_vq_attention_decode(ctx, &tq.t, &a->kc, &a->kb, &a->vc, &a->vb, &c->f, &a->opts, &t1.t, &tl1) == QF_OK &&
         (!sync || cudaDeviceSynchronize() == cudaSuccess) &&
         qf_vq_encode(ctx, &t1.t, a->last, &a->kb, &c->f, &a->last_codes[0], NULL) == QF_OK &&
         qf_vq_encode(ctx, &t1.t, a->last, &a->vb, &c->f, &a->last_codes[1], NULL) == QF_OK &&
         (!sync || cudaDeviceSynchronize() == cudaSuccess) &&
         qf_vq_attention_decode(ctx, &tq.t, &a->kc, &a->kb, &a->vc, &a->vb, &c->f, &a->opts, &t2.t, &tl2) == QF_OK;
}

/* A decode step's append under programmatic dependent launch: per round, o1 = attention(q_r), then
 * o1 (a [1, Hkv D] row: B = 1, Hq = Hkv) encoded as the cache's last token into K and V
 * (qf_vq_encode, a dependent that overwrites codes the attention before it reads), then
 * o2_r = attention(q_r) over the updated cache, all launched back to back on a PDL context. o2_r,
 * its lse and the last token's codes must equal, byte for byte, the same calls with PDL off and
 * synchronized (from the same cache: the last token's codes are restored before each pass). A
 * third pass captures the step once in a CUDA graph (a PDL context on its own stream, the
 * workspace reserved first: qf_ctx_reserve_workspace) with q and o2 in buffers of their own, and
 * replays it each round after copying q_r in: the same bytes again. */
static void append_pdl_chain_case(qf_ctx *gpu, kv_cache *c, uint64_t *seed) {
  enum { ROUNDS = CHAIN_ROUNDS };
  if (!CHECK(c->B == 1 && c->f.residuals == 1, "%s: the append chain takes B = 1 and one residual", c->name)) return;
  qf_ctx *pdl = NULL;
  if (!CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "%s: PDL context", c->name))
    return;
  const int64_t Hq = c->Hkv, W = Hq * c->D, rb = c->sz.row_bytes, last = c->T - 1;
  const size_t bytes = (size_t)W * 2, lse_bytes = (size_t)Hq * 4;
  void *o1 = dev_alloc(bytes), *l1 = dev_alloc(lse_bytes);
  chain_bufs cb;
  chain_alloc(&cb, ROUNDS, W, lse_bytes, seed);
  int64_t rshape[3] = {1, 1, rb};
  append_step step = {.c = c, .W = W, .last = last, .lshape = {1, Hq}, .o1 = o1, .l1 = l1,
                      .kc = cache_codes(c, 0, 1), .kb = cache_books(c, 0, 1), .vc = cache_codes(c, 1, 1), .vb = cache_books(c, 1, 1),
                      .last_codes = {dl_tensor((uint8_t *)c->d_codes[0] + last * rb, QF_U8, 3, rshape, kDLCUDA),
                                     dl_tensor((uint8_t *)c->d_codes[1] + last * rb, QF_U8, 3, rshape, kDLCUDA)},
                      .opts = {.head_dim = (int)c->D, .kv_heads = (int)c->Hkv, .seq_len = c->T}};
  DLTensor *last_codes = step.last_codes;
  uint8_t *final_codes[3] = {malloc((size_t)(2 * rb)), malloc((size_t)(2 * rb)), malloc((size_t)(2 * rb))}; /* [pass][K, V] */
  int ok = 1;
  for (int pass = 0; pass < 3 && ok; pass++) { /* pass 0: the reference, PDL off and synchronized; 2: a CUDA graph */
    for (int m = 0; m < 2; m++)
      CUDA_OK(cudaMemcpy(last_codes[m].data, c->h_codes[m] + last * rb, (size_t)rb, cudaMemcpyHostToDevice));
    if (pass < 2) {
      qf_ctx *ctx = pass ? pdl : gpu;
      for (int r = 0; r < ROUNDS && ok; r++) {
        ok = CHECK(run_append_step(ctx, &step, cb.q[r], cb.o2[pass][r], cb.l2[pass][r], !pass), "%s: append chain, pass %d: %s",
                   c->name, pass, qf_ctx_last_error(ctx));
        if (!pass) CUDA_OK(cudaDeviceSynchronize());
      }
    } else {
      graph_ctx g;
      ok = graph_open(&g, 1, qf_ctx_workspace_bytes(gpu), c->name);
      if (ok) {
        graph_begin(&g);
        ok = graph_end(&g, run_append_step(g.ctx, &step, cb.gq, cb.go2, cb.gl2, 0), c->name);
      }
      for (int r = 0; r < ROUNDS && ok; r++) chain_replay(&cb, &g, r);
      graph_close(&g);
    }
    CUDA_OK(cudaDeviceSynchronize());
    for (int m = 0; m < 2; m++) CUDA_OK(cudaMemcpy(final_codes[pass] + m * rb, last_codes[m].data, (size_t)rb, cudaMemcpyDeviceToHost));
  }
  if (ok) chain_compare(&cb, c->name, "append chain", 1);
  for (int pass = 1; pass < 3 && ok; pass++)
    CHECK(memcmp(final_codes[0], final_codes[pass], (size_t)(2 * rb)) == 0, "%s: append chain (%s): the last token's codes differ",
          c->name, pass == 1 ? "PDL" : "CUDA graph");
  /* the cache as it was, for whatever runs after */
  for (int m = 0; m < 2; m++)
    CUDA_OK(cudaMemcpy(last_codes[m].data, c->h_codes[m] + last * rb, (size_t)rb, cudaMemcpyHostToDevice));
  chain_free(&cb);
  CUDA_OK(cudaFree(o1));
  CUDA_OK(cudaFree(l1));
  free(final_codes[0]), free(final_codes[1]), free(final_codes[2]);
  qf_ctx_destroy(pdl);
}

int main(void) {
  if (getenv("QF_VQ_BOOKS")) {
    printf("QF_VQ_BOOKS=%s cleared: the public calls here run the heuristic's placement\n", getenv("QF_VQ_BOOKS"));
    unsetenv("QF_VQ_BOOKS");
  }
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0xA77E;

  qf_vq_format cq2, cq4;
  qf_vq_format_preset(QF_VQ_CQ_2, &cq2);
  qf_vq_format_preset(QF_VQ_CQ_4, &cq4);
  const qf_dtype dts[] = {QF_F32, QF_F16, QF_BF16};

  /* the main matrix: CQ-2 / CQ-4 x D x group x B x seq_len, two calls per cache */
  const struct {
    const char *name;
    qf_vq_format f;
  } presets[] = {{"CQ-2", cq2}, {"CQ-4", cq4}};
  const int64_t Ds[] = {64, 128}, groups[] = {1, 4, 8}, Bs[] = {1, 3};
  const int64_t Ts[] = {1, 7, 128, 1000, 4096}, quick_Ts[] = {1, 7, 300};
  int n = 0;
  for (size_t fi = 0; fi < 2; fi++)
    for (size_t di = 0; di < 2; di++)
      for (size_t gi = 0; gi < 3; gi++)
        for (size_t bi = 0; bi < 2; bi++)
          for (size_t ti = 0; ti < (quick ? 3u : 5u); ti++) {
            if (quick && (groups[gi] == 4 || Bs[bi] == 1)) continue;
            kv_cache c;
            const int64_t T = quick ? quick_Ts[ti] : Ts[ti];
            if (!make_cache(cpu, &c, presets[fi].name, presets[fi].f, Bs[bi], T, 2, Ds[di], 0, &seed)) continue;
            const variant plain = {dts[n % 3], dts[n % 3], 0.0f, 0};
            const variant mixed = {dts[(n + 1) % 3], dts[(n + 2) % 3], 0.3f, 1};
            attention_case(gpu, cpu, &c, 2 * groups[gi], plain, &seed);
            attention_case(gpu, cpu, &c, 2 * groups[gi], mixed, &seed);
            free_cache(&c);
            n++;
          }

  /* generic formats and shapes */
  const qf_vq_format bits6 = {8, 6, 2, 0, 32, QF_BF16, 0, 0};  /* 6-bit indices, 2 residuals, bf16, 4 vectors per book */
  const qf_vq_format per_row = {4, 8, 1, 0, 0, QF_F16, 0, 0};  /* one book for the whole row */
  const qf_vq_format bits5 = {4, 5, 3, 0, 96, QF_F16, 0, 0};   /* 96-column books: heads straddle books */
  const qf_vq_format big = {2, 16, 1, 0, 0, QF_F16, 0, 0};     /* one 65536-entry book: single-buffered codes */
  const qf_vq_format row_bf16 = {4, 8, 1, 0, 0, QF_BF16, 0, 0}; /* banked: bf16 entries, every vector on one book */
  qf_vq_format cq2_bf16 = cq2, cq4_bf16 = cq4; /* the grouped banked kernels with bf16 entries */
  cq2_bf16.entry_dtype = QF_BF16, cq4_bf16.entry_dtype = QF_BF16;
  const struct {
    const char *name;
    qf_vq_format f;
    int64_t B, T, quick_T, Hkv, D, group;
    int quantize;
  } generic[] = {
      {"CQ-4 quantized", cq4, 2, 300, 300, 2, 128, 4, 1},
      {"VQ<8,6,2> bf16 32-col books", bits6, 2, 300, 300, 2, 64, 4, 0},
      {"VQ<4,8,1> one book per row", per_row, 2, 300, 300, 4, 64, 1, 0},
      {"VQ<4,5,3> 96-col books", bits5, 2, 300, 300, 3, 64, 4, 0},
      {"CQ-2", cq2, 2, 300, 300, 2, 96, 1, 0},
      {"CQ-4", cq4, 2, 300, 300, 2, 80, 4, 0},
      {"CQ-2 (books too large for SC)", cq2, 2, 300, 300, 2, 256, 1, 0},
      {"VQ<4,8,1> bf16 one book per row", row_bf16, 2, 300, 300, 2, 128, 2, 0},
      {"VQ<2,16,1> one 65536-entry book", big, 1, 300, 300, 1, 256, 1, 0},
      {"CQ-2 group 3", cq2, 3, 300, 300, 2, 64, 3, 0},
      /* banked CQ-2 with a group's query heads in one block (two per block for a group of 6) */
      {"CQ-2 group 6", cq2, 3, 1000, 600, 2, 128, 6, 0},
      {"CQ-2 group 4, 5 batch entries", cq2, 5, 300, 300, 16, 128, 4, 0},
      {"CQ-2 bf16 group 4", cq2_bf16, 2, 300, 300, 2, 128, 4, 0},
      {"CQ-4 bf16 group 2", cq4_bf16, 3, 600, 300, 2, 128, 2, 0},
      {"CQ-4 group 12 (two head tiles)", cq4, 2, 600, 600, 1, 128, 12, 0},
      /* many heads: few blocks per head, so units of several tiles and blocks of several units */
      {"CQ-2 32 heads", cq2, 3, 1000, 600, 32, 128, 1, 0},
      {"CQ-4 64 heads", cq4, 1, 4096, 600, 64, 128, 1, 0},
      /* more batch entries than blocks per head: runs that cross batch entries (the LUT rebuilt) */
      {"CQ-2 64 heads 5 batch entries", cq2, 5, 300, 300, 64, 128, 1, 0},
      /* banked CQ-4 with two halves on one table (chunks 2c, 2c + 1), runs crossing batch entries */
      {"CQ-4 64 heads 5 batch entries", cq4, 5, 1100, 600, 64, 128, 1, 0},
  };
  for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) {
    kv_cache c;
    if (!make_cache(cpu, &c, generic[i].name, generic[i].f, generic[i].B, quick ? generic[i].quick_T : generic[i].T,
                    generic[i].Hkv, generic[i].D, generic[i].quantize, &seed))
      continue;
    const variant plain = {dts[i % 3], dts[i % 3], 0.0f, 0};
    const variant mixed = {dts[(i + 1) % 3], dts[(i + 2) % 3], 0.3f, 1};
    attention_case(gpu, cpu, &c, generic[i].Hkv * generic[i].group, plain, &seed);
    attention_case(gpu, cpu, &c, generic[i].Hkv * generic[i].group, mixed, &seed);
    free_cache(&c);
  }

  /* the banked kernel's setups as a programmatic dependent: one head of S = 64 on paired halves
   * with runs crossing batch entries, one head of S = 32 (staged V books), 4 grouped heads of
   * S = 32 and 2 of S = 64 (bulk setups), 2 grouped heads of S = 32 (the book chunks) */
  const struct {
    const char *name;
    qf_vq_format f;
    int64_t B, T, Hkv, group;
  } chains[] = {{"CQ-4 PDL chain", cq4, 8, 600, 32, 1},     {"CQ-2 PDL chain", cq2, 3, 1000, 32, 1},
                {"CQ-2 group 4 PDL chain", cq2, 5, 300, 8, 4}, {"CQ-4 group 2 PDL chain", cq4, 3, 600, 2, 2},
                {"CQ-2 group 2 PDL chain", cq2, 2, 300, 2, 2}};
  int chain_heads = 0;
  for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
    kv_cache c;
    if (!make_cache(cpu, &c, chains[i].name, chains[i].f, chains[i].B, chains[i].T, chains[i].Hkv, 128, 0, &seed)) continue;
    chain_heads |= pdl_chain_case(gpu, &c, chains[i].Hkv * chains[i].group, &seed);
    free_cache(&c);
  }
  CHECK(chain_heads == (1 | 2 | 4), "the PDL chains ran the banked kernel with 1, 2 and 4 query heads per block (mask %d)",
        chain_heads);
  /* a decode step's append (qf_vq_encode) between two attention calls, all as dependents (B = 1),
   * then a decode step over sequences of different lengths (kv_lens, qf_vq_encode_slots; B = 5) */
  for (int k = 0; k < 4; k++) {
    kv_cache c;
    static const char *names[4] = {"CQ-2 append chain", "CQ-4 append chain", "CQ-2 ragged steps", "CQ-4 ragged steps"};
    if (!make_cache(cpu, &c, names[k], k % 2 ? cq4 : cq2, k < 2 ? 1 : 5, k < 2 ? 700 : 1100, 32, 128, 0, &seed)) continue;
    if (k < 2) append_pdl_chain_case(gpu, &c, &seed);
    else ragged_step_case(gpu, cpu, &c, &seed);
    free_cache(&c);
  }

  /* lengths per batch entry (P = 0) and paged caches (pages of P rows) on every kernel's caches:
   * GC / SC with generic formats and the LUT with 8 heads per block, the banked kernel with one
   * head (S = 32), paired halves (S = 64, runs crossing batch entries), 2 and 4 grouped heads, the
   * Llama-7B decode shape; pages of 16 and 128 (a tile page by page), 256 and 512 (a box inside a
   * page) and 48 (no banked kernel) */
  const struct {
    const char *name;
    qf_vq_format f;
    int64_t B, T, Hkv, D, group, P;
  } ragged[] = {
      {"VQ<8,6,2> ragged", bits6, 4, 700, 2, 64, 4, 0},
      {"CQ-2 group 8 ragged", cq2, 5, 1000, 2, 64, 8, 0},
      {"CQ-2 32 heads ragged", cq2, 9, 1000, 32, 128, 1, 0},
      {"CQ-4 64 heads ragged", cq4, 9, 1100, 64, 128, 1, 0},
      {"CQ-2 group 4 ragged", cq2, 5, 700, 8, 128, 4, 0},
      {"CQ-4 group 2 ragged", cq4, 4, 600, 2, 128, 2, 0},
      {"CQ-2 Llama-7B ragged", cq2, 8, 4096, 32, 128, 1, 0},
      {"CQ-2 32 heads paged", cq2, 3, 1000, 32, 128, 1, 16},
      {"CQ-4 64 heads paged", cq4, 5, 1100, 64, 128, 1, 128},
      {"CQ-2 group 4 paged", cq2, 5, 700, 8, 128, 4, 256},
      {"CQ-4 group 2 paged", cq4, 4, 600, 2, 128, 2, 512},
      {"CQ-2 32 heads paged by 48", cq2, 3, 700, 32, 128, 1, 48},
      {"VQ<8,6,2> paged", bits6, 3, 500, 2, 64, 4, 64},
  };
  for (size_t i = 0; i < sizeof ragged / sizeof ragged[0]; i++) {
    kv_cache c;
    const int64_t T = quick && ragged[i].T > 600 ? 600 : ragged[i].T;
    if (!make_cache(cpu, &c, ragged[i].name, ragged[i].f, ragged[i].B, T, ragged[i].Hkv, ragged[i].D, 0, &seed)) continue;
    const variant va = {dts[i % 3], dts[(i + 1) % 3], 0.0f, (int)(i % 2)};
    if (ragged[i].P) paged_case(gpu, cpu, &c, ragged[i].Hkv * ragged[i].group, va, ragged[i].P, &seed);
    else lengths_case(gpu, cpu, &c, ragged[i].Hkv * ragged[i].group, va, &seed);
    free_cache(&c);
  }
  CHECK(ran_paged_banked > 0, "the banked kernel ran on pages smaller than a tile (%d)", ran_paged_banked);

  /* a decode step in one call: fused into the banked kernel's bulk setups (one head: CQ-2 at D =
   * 128 and 64 of 2-element vectors, CQ-4 on paired halves; grouped: CQ-2 at group 4, CQ-4 at
   * groups 2 and 4; with lengths, pages, packed V books, bf16 books, fp32 and bf16 rows), else the
   * encode first (CQ-2 at group 2, a lone CQ-4 half, GC / SC formats) */
  {
    const struct {
      const char *name;
      qf_vq_format f;
      int64_t B, T, Hkv, D, group, P;
      qf_dtype xt;
      int ragged, packed;
    } steps[] = {
        {"CQ-2 step", cq2, 1, 1000, 32, 128, 1, 0, QF_F16, 0, 0},
        {"CQ-2 step", cq2, 8, 700, 32, 128, 1, 0, QF_F16, 1, 1},
        {"CQ-4 step", cq4, 8, 1100, 32, 128, 1, 0, QF_F32, 1, 0},
        {"CQ-4 step", cq4, 8, 600, 32, 128, 1, 0, QF_F16, 0, 1},
        {"CQ-4 step", cq4, 1, 300, 8, 128, 1, 0, QF_F16, 0, 0},
        {"CQ-4 bf16 step", cq4_bf16, 5, 1100, 64, 128, 1, 0, QF_BF16, 1, 0},
        {"CQ-2 bf16 step", cq2_bf16, 3, 1000, 32, 128, 1, 0, QF_BF16, 1, 0},
        {"CQ-2 step", cq2, 3, 1000, 32, 128, 1, 16, QF_F16, 1, 0},
        {"CQ-4 step", cq4, 5, 1100, 64, 128, 1, 256, QF_F16, 1, 1},
        {"CQ-4 D=64 step", cq4, 3, 500, 16, 64, 1, 0, QF_F16, 1, 0},
        {"CQ-2 group 4 step", cq2, 5, 700, 8, 128, 4, 0, QF_F16, 1, 1},
        {"CQ-2 group 4 step", cq2, 8, 700, 8, 128, 4, 16, QF_F16, 1, 0},
        {"CQ-2 group 2 step", cq2, 8, 700, 8, 128, 2, 16, QF_F16, 1, 0}, /* the encoder's tensor-core form */
        {"CQ-2 group 2 step", cq2, 2, 600, 4, 128, 2, 0, QF_F32, 0, 0},  /* its book-resident form */
        {"CQ-2 group 2 step", cq2, 3, 300, 4, 128, 2, 0, QF_F16, 0, 1},  /* packed V books refused */
        {"CQ-4 group 2 step", cq4, 4, 600, 2, 128, 2, 128, QF_F16, 1, 0},
        {"CQ-4 group 2 step", cq4, 2, 600, 8, 128, 2, 0, QF_F16, 1, 1}, /* fused for its packed V books */
        {"CQ-4 group 4 step", cq4, 8, 1100, 8, 128, 4, 0, QF_F16, 1, 1}, /* two head tiles per kv head */
        {"CQ-2 group 8 step", cq2, 8, 700, 4, 128, 8, 16, QF_F16, 1, 0},  /* the same for S = 32 */
        {"CQ-4 group 4 bf16 step", cq4_bf16, 16, 600, 8, 128, 4, 256, QF_BF16, 1, 0},
        {"VQ<8,6,2> step", bits6, 3, 500, 2, 64, 4, 0, QF_F32, 1, 0},
        {"CQ-2 short step", cq2, 24, 100, 64, 128, 1, 0, QF_F16, 1, 0}, /* several new tokens per run */
        {"CQ-4 short step", cq4, 24, 100, 64, 128, 1, 16, QF_F16, 1, 1},
        {"CQ-2 group 4 short step", cq2, 24, 100, 16, 128, 4, 0, QF_F16, 1, 0},
        {"CQ-4 group 2 short step", cq4, 24, 100, 16, 128, 2, 16, QF_F16, 1, 1},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
      kv_cache c;
      const int64_t T = quick && steps[i].T > 600 ? 600 : steps[i].T;
      if (!make_cache(cpu, &c, steps[i].name, steps[i].f, steps[i].B, T, steps[i].Hkv, steps[i].D, 0, &seed)) continue;
      int32_t *lens = steps[i].ragged ? malloc((size_t)c.B * 4) : NULL;
      if (lens) ragged_lengths(lens, c.B, T, (int)i);
      append_step_case(gpu, cpu, &c, steps[i].group, steps[i].xt, lens, steps[i].packed, steps[i].P, &seed);
      free(lens);
      free_cache(&c);
    }
    CHECK(ran_append[1] > 0 && ran_append[0] > 0 && ran_append_refused > 0,
          "the step in one call ran fused (%d) and as two kernels (%d), and was refused with packed V books outside the fused "
          "kernel (%d)", ran_append[1], ran_append[0], ran_append_refused);
    CHECK(most_new_tokens >= 3, "a fused step encoded 3 or more new tokens in one run (at most %d)", most_new_tokens);
    CHECK(ran_append_grouped[0] > 0 && ran_append_grouped[1] > 0, "grouped heads fused the step with S = 32 (%d) and 64 (%d)",
          ran_append_grouped[0], ran_append_grouped[1]);
  }

  nan_inf_case(gpu, cpu, 64, &seed);
  nan_inf_case(gpu, cpu, 128, &seed); /* the banked kernel's format */
  env_switch_case(gpu, cpu, &seed);
  misaligned_books_case(gpu, cpu, &seed);

  const qf_vq_format vs3 = {3, 8, 1, 0, 3, QF_F16, 0, 0}, rows4 = {4, 8, 1, 4, 4, QF_F16, 0, 0};
  refused(gpu, cpu, "vector_size 3", vs3, 48, 0, QF_ERR_UNSUPPORTED, "vector_size=3", &seed);
  refused(gpu, cpu, "CQ-2 head_dim 512", cq2, 512, 0, QF_ERR_UNSUPPORTED, "head_dim=512", &seed);
  refused(gpu, cpu, "codebooks per 4 tokens", rows4, 64, 0, QF_ERR_UNSUPPORTED, "scope_rows=4", &seed);
  refused(gpu, cpu, "CQ-2 misaligned fp16 q", cq2, 64, 1, QF_ERR_ALIGNMENT, "aligned", &seed);

  CHECK(ran_shared > 0 && ran_global > 0, "both codebook placements ran (shared %d, global %d)", ran_shared, ran_global);
  CHECK(ran_chunks > 0 && ran_multi_unit > 0 && ran_multi_tile > 0,
        "split sequences, blocks with several units and units of several tiles ran (%d, %d, %d)", ran_chunks, ran_multi_unit,
        ran_multi_tile);
  CHECK(ran_head_tiles > 0 && ran_single_stage > 0, "two head tiles per kv head and single-buffered codes ran (%d, %d)",
        ran_head_tiles, ran_single_stage);
  CHECK(ran_lut[1] > 0 && ran_lut[4] > 0 && ran_lut[8] > 0 && ran_lut_shared > 0 && ran_lut_batches > 0 && ran_lut_refused > 0,
        "the LUT ran with 1, 4 and 8 heads per block (%d, %d, %d), with shared books (%d), with units of several batch "
        "entries per block (%d), and was refused where its tables do not fit (%d)",
        ran_lut[1], ran_lut[4], ran_lut[8], ran_lut_shared, ran_lut_batches, ran_lut_refused);
  CHECK(ran_banked[1] > 0 && ran_banked[2] > 0 && ran_banked_halves[1] > 0 && ran_banked_halves[2] > 0 &&
            ran_banked_batches > 0 && ran_banked_chunks > 0 && ran_banked_refused > 0,
        "the banked kernel ran with 32 and 64 vectors per head (%d, %d), one and two halves per block (%d, %d), units of "
        "several batch entries per half (%d), split sequences (%d), and was refused outside its formats (%d)",
        ran_banked[1], ran_banked[2], ran_banked_halves[1], ran_banked_halves[2], ran_banked_batches, ran_banked_chunks,
        ran_banked_refused);
  CHECK(ran_packed_public > 0 && ran_packed_banked > 0,
        "packed V books ran through the public call (%d) and gave the standard books' bytes on the forced banked kernel (%d)",
        ran_packed_public, ran_packed_banked);
  CHECK(ran_banked_paired > 0 && ran_banked_paired_batches > 0,
        "the banked kernel ran CQ-4 with two halves on one table (%d), with runs of several batch entries (%d)",
        ran_banked_paired, ran_banked_paired_batches);
  CHECK(ran_banked_writes_o[0] > 0 && ran_banked_writes_o[1] > 0,
        "the banked kernel wrote o and lse itself for one chunk (%d) and for a block's paired halves' two chunks (%d)",
        ran_banked_writes_o[0], ran_banked_writes_o[1]);
  CHECK(ran_banked_group[1] > 0 && ran_banked_group[2] > 0 && ran_banked_group[4] > 0 && ran_banked_group_batches > 0,
        "the banked kernel ran with 1, 2 and 4 query heads per block (%d, %d, %d), grouped with runs of several batch "
        "entries (%d)",
        ran_banked_group[1], ran_banked_group[2], ran_banked_group[4], ran_banked_group_batches);
  printf("worst error / tolerance: o %.3f, lse %.3f\n", worst_o, worst_lse);

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_vq_attention");
}
