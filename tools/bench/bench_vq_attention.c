/* VQ attention decode rows (op vq_attention_decode): qf_vq_attention_decode over a CQ-2 and a CQ-4
 * KV cache against an fp16 split-KV decode attention over the same cache uncompressed
 * (fp16_decode.cu), on the same device in the same run.
 *  - Shapes: Llama-7B attention (Hq = Hkv = 32, D = 128, fp16 q and o) at seq_len 1024 and 4096,
 *    batch 1 and 8 (--m selects a batch size, or runs another up to 8); GQA with 8 kv heads
 *    (Llama-3-8B: Hq = 32, Hkv = 8) at seq_len 4096, batch 1 and 8.
 *  - Rows: "cq2,fp16,auto=SC+LUT" (or =GC, =SC, =GC+LUT) is the public call, the heuristic's
 *    codebook placement and score technique named (QF_VQ_BOOKS set in the environment changes the
 *    placement it runs; a note says so); "cq2,fp16,GC" and "cq2,fp16,SC" force each placement with
 *    decoded K vectors through qf_cuda_vq_attention_decode_with (the paper's baselines),
 *    "cq2,fp16,GC+LUT" and "cq2,fp16,SC+LUT" with the scores through the q . entry lookup table (a
 *    choice the kernel cannot use prints "skipped: ..." and gives no row), "cq2,fp16,banked" the
 *    kernel with bank-interleaved score tables and V books (auto=banked when the public call
 *    picks it); the same for cq4; "fp16_splitkv_decode (peer)" is the peer's own row with its bytes;
 *    where the public call runs the banked kernel, op vq_attention_chain "cq2,fp16,auto,pdl": two
 *    public calls in a row (the second's q the first's o) on a context with qf_ctx_set_pdl against
 *    the same calls without it (peer "no_pdl (same calls)"), as an engine chains kernels; at
 *    batch 1 with Hq = Hkv, op vq_append_chain the same for a decode step's append (qf_vq_encode
 *    of o as the last token's K and V codes; ",kv": one qf_vq_encode_kv_slots of both) then the
 *    call; op vq_append_step "cq2,fp16,auto,pdl,one_call" (every shape): a decode step
 *    in one call (qf_vq_attention_decode_append) against its two calls (qf_vq_encode_kv_slots,
 *    then qf_vq_attention_decode), both on the PDL context; "cq2,fp16,auto,kv_lens" the public
 *    call with lengths per entry (opts.kv_lens on the device), every one seq_len, and
 *    "cq2,fp16,auto,paged16" / "paged256" the same over a paged copy of the cache (pages of 16
 *    or 256 rows in a shuffled pool of the same size, opts.block_table; ",in-order": the pages in
 *    the contiguous cache's order); "cq2,fp16,auto,vpacked" the public call with the V codebooks
 *    packed for the banked kernel (qf_vq_pack_attention_books), where it runs that kernel. The qfuse
 *    rows carry the peer's time, so ratio = peer us / qfuse us. The goal, at seq_len 4096
 *    and batch 8, is a ratio of at least 0.7 x the compression: 2.8 for CQ-4 (4x), 5.6 for CQ-2
 *    (8x).
 *  - The cache is built on the host from random codes and random fp16 codebook entries (N(0, 1)):
 *    k-means over 8 x 4096 tokens x 4096 channels would take far too long, and the kernel's time
 *    does not depend on the values. One cache per format, of 8 x 4096 tokens; smaller shapes use
 *    its first B * seq_len rows. The peer's K and V are that cache decoded on the GPU
 *    (qf_vq_dequantize, exact in fp16), so both compute the same attention: their o and lse are
 *    compared after timing (relative Frobenius error of o below 1e-2, lse within 1e-2), and a
 *    mismatch fails the bench.
 *  - Bytes for the floor: qfuse reads the K and V codes and codebooks and q, writes o and lse; the
 *    peer reads fp16 K and V and q, writes o and lse. Flops (4 B Hq seq_len D) are reported, not
 *    used for the floor (CUDA-core fp32 work, not the tensor-core peak). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ops.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "core/backend.h"
#include "cuda/vq/vq_attention_heuristic.h"
#include "fp16_decode.h"
#include "formats/formats.h"

enum { HQ = 32, GQA_HKV = 8, HEAD_DIM = 128, MAX_B = 8, MAX_SEQ = 4096 };

/* One format's cache of hkv kv heads on the device, sized for MAX_B x MAX_SEQ tokens. */
typedef struct {
  qf_vq_format f;
  qf_vq_sizes sz;
  int64_t hkv;
  void *codes[2], *books[2]; /* K, V */
  void *dense[2];            /* the same K and V decoded to fp16 [rows, hkv * HEAD_DIM] */
  size_t code_bytes, book_bytes;
} cache;

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

static float normal(uint64_t *s) {
  const double u = ((double)(next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0), v = (double)(next(s) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void free_cache(cache *c) {
  for (int m = 0; m < 2; m++) cudaFree(c->codes[m]), cudaFree(c->books[m]), cudaFree(c->dense[m]);
}

static int make_cache(qf_ctx *ctx, cache *c, qf_vq_preset preset, int64_t hkv, uint64_t *seed) {
  memset(c, 0, sizeof *c);
  qf_vq_format_preset(preset, &c->f);
  c->hkv = hkv;
  const int64_t rows = (int64_t)MAX_B * MAX_SEQ, cols = hkv * HEAD_DIM;
  if (qf_vq_sizes_of(ctx, &c->f, rows, cols, &c->sz) != QF_OK) {
    fprintf(stderr, "bench_vq_attention: sizes: %s\n", qf_ctx_last_error(ctx));
    return 1;
  }
  c->code_bytes = (size_t)(c->f.residuals * rows * c->sz.row_bytes);
  c->book_bytes = (size_t)(c->f.residuals * c->sz.n_books * c->sz.entries * c->f.vector_size) * 2;
  uint8_t *h = malloc(c->code_bytes > c->book_bytes ? c->code_bytes : c->book_bytes);
  int rc = 1;
  if (!h) goto done;
  int64_t cshape[3] = {c->f.residuals, rows, c->sz.row_bytes};
  int64_t bshape[4] = {c->f.residuals, c->sz.n_books, c->sz.entries, c->f.vector_size};
  int64_t wshape[2] = {rows, cols};
  for (int m = 0; m < 2; m++) {
    if (cudaMalloc(&c->codes[m], c->code_bytes) || cudaMalloc(&c->books[m], c->book_bytes) ||
        cudaMalloc(&c->dense[m], (size_t)(rows * cols) * 2))
      goto done;
    for (size_t i = 0; i < c->code_bytes; i += 8) {
      const uint64_t r = next(seed);
      memcpy(h + i, &r, c->code_bytes - i < 8 ? c->code_bytes - i : 8);
    }
    if (cudaMemcpy(c->codes[m], h, c->code_bytes, cudaMemcpyHostToDevice)) goto done;
    uint16_t *e = (uint16_t *)h;
    for (size_t i = 0; i < c->book_bytes / 2; i++) e[i] = qf_f16_from_f32(normal(seed));
    if (cudaMemcpy(c->books[m], h, c->book_bytes, cudaMemcpyHostToDevice)) goto done;
    DLTensor ct = {.data = c->codes[m], .device = {kDLCUDA, 0}, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = cshape};
    DLTensor bt = {.data = c->books[m], .device = {kDLCUDA, 0}, .ndim = 4, .dtype = qf_dtype_to_dl(QF_F16), .shape = bshape};
    DLTensor wt = {.data = c->dense[m], .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = wshape};
    if (qf_vq_dequantize(ctx, &ct, &bt, NULL, &c->f, &wt) != QF_OK) {
      fprintf(stderr, "bench_vq_attention: dequantize: %s\n", qf_ctx_last_error(ctx));
      goto done;
    }
  }
  rc = cudaDeviceSynchronize() != cudaSuccess;
done:
  free(h);
  if (rc) {
    fprintf(stderr, "bench_vq_attention: building the %s cache failed\n", preset == QF_VQ_CQ_2 ? "cq2" : "cq4");
    free_cache(c);
  }
  return rc;
}

/* One shape's call, over the first B * seq_len rows of the cache. */
typedef struct {
  qf_ctx *ctx;
  cache *c;
  int64_t B, seq_len;
  void *q, *o, *o_peer, *ws;
  float *lse, *lse_peer;
  size_t ws_bytes;
  int placement, scores; /* for run_forced */
  int64_t qshape[2], lshape[2], cshape[3], bshape[4];
  DLTensor tq, to, tl, kc, kb, vc, vb;
  qf_vq_attention_opts opts;
  qf_vq_attention_args args;
} att_call;

static int run_api(void *arg) {
  att_call *a = arg;
  qf_status st = qf_vq_attention_decode(a->ctx, &a->tq, &a->kc, &a->kb, &a->vc, &a->vb, &a->c->f, &a->opts, &a->to, &a->tl);
  if (st != QF_OK) fprintf(stderr, "qf_vq_attention_decode: %s\n", qf_ctx_last_error(a->ctx));
  return st != QF_OK;
}

static int run_forced(void *arg) {
  att_call *a = arg;
  qf_status st = qf_cuda_vq_attention_decode_with(a->ctx, &a->args, a->placement, a->scores, NULL);
  if (st != QF_OK)
    fprintf(stderr, "qf_vq_attention_decode (placement %d, scores %d): %s\n", a->placement, a->scores, qf_ctx_last_error(a->ctx));
  return st != QF_OK;
}

static int run_peer(void *arg) {
  att_call *a = arg;
  return qfb_fp16_decode(a->q, a->c->dense[0], a->c->dense[1], a->o_peer, a->lse_peer, a->B, HQ, a->c->hkv, HEAD_DIM,
                         a->seq_len, 1.0f / sqrtf((float)HEAD_DIM), a->ws, a->ws_bytes, 0);
}

static void setup_call(att_call *a, qf_ctx *ctx, cache *c, int64_t B, int64_t seq_len) {
  const int64_t rows = B * seq_len, W = (int64_t)HQ * HEAD_DIM, Wkv = c->hkv * HEAD_DIM;
  a->ctx = ctx, a->c = c, a->B = B, a->seq_len = seq_len;
  a->qshape[0] = B, a->qshape[1] = W;
  a->lshape[0] = B, a->lshape[1] = HQ;
  a->cshape[0] = c->f.residuals, a->cshape[1] = rows, a->cshape[2] = c->sz.row_bytes;
  a->bshape[0] = c->f.residuals, a->bshape[1] = c->sz.n_books, a->bshape[2] = c->sz.entries, a->bshape[3] = c->f.vector_size;
  const DLDevice dev = {kDLCUDA, 0};
  a->tq = (DLTensor){.data = a->q, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = a->qshape};
  a->to = (DLTensor){.data = a->o, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = a->qshape};
  a->tl = (DLTensor){.data = a->lse, .device = dev, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F32), .shape = a->lshape};
  a->kc = (DLTensor){.data = c->codes[0], .device = dev, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = a->cshape};
  a->vc = (DLTensor){.data = c->codes[1], .device = dev, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = a->cshape};
  a->kb = (DLTensor){.data = c->books[0], .device = dev, .ndim = 4, .dtype = qf_dtype_to_dl(QF_F16), .shape = a->bshape};
  a->vb = (DLTensor){.data = c->books[1], .device = dev, .ndim = 4, .dtype = qf_dtype_to_dl(QF_F16), .shape = a->bshape};
  a->opts = (qf_vq_attention_opts){.head_dim = HEAD_DIM, .kv_heads = (int)c->hkv, .seq_len = seq_len};
  /* the same call for qf_cuda_vq_attention_decode_with: the sizes of B * seq_len rows (the books
   * do not depend on the rows: one row block) */
  qf_vq_sizes sz = c->sz;
  memset(&a->args, 0, sizeof a->args);
  a->args.q = (qf_mat){a->q, QF_F16, B, W, W};
  a->args.o = (qf_mat){a->o, QF_F16, B, W, W};
  a->args.lse = a->lse;
  a->args.k = (qf_vq_tensors){c->f, sz, rows, Wkv, c->codes[0], c->books[0], NULL, 0};
  a->args.v = (qf_vq_tensors){c->f, sz, rows, Wkv, c->codes[1], c->books[1], NULL, 0};
  a->args.B = B, a->args.Hq = HQ, a->args.Hkv = c->hkv, a->args.D = HEAD_DIM, a->args.seq_len = seq_len;
  a->args.sm_scale = 1.0 / sqrt((double)HEAD_DIM);
}

/* Two calls in a row, o = attention(q) and o2 = attention(o), as an engine's layers run them. */
typedef struct {
  att_call first, second;
} att_pair;

static int run_pair(void *arg) {
  att_pair *p = arg;
  return run_api(&p->first) || run_api(&p->second);
}

/* The pair on pdl (a context with qf_ctx_set_pdl) against the same calls on a's context
 * (qfb_emit_pdl_pair), as op vq_attention_chain. o2, lse2: the second call's outputs. */
static int chain_row(qfb *b, qf_ctx *pdl, const att_call *a, const char *name, const char *shape, double bytes, double flops,
                     void *o2, float *lse2) {
  att_pair plain = {*a, *a};
  plain.second.tq.data = a->o; /* (the shapes stay a's: o has q's) */
  plain.second.to.data = o2, plain.second.tl.data = lse2;
  att_pair dep = plain;
  dep.first.ctx = dep.second.ctx = pdl;
  char variant[64];
  snprintf(variant, sizeof variant, "%s,fp16,auto,pdl", name);
  qfb_row row = {.op = "vq_attention_chain", .variant = variant, .shape = shape, .bytes = 2.0 * bytes, .flops = 2.0 * flops};
  row.floor_us = qfb_floor_us(b, row.bytes, 0.0, 0.0);
  return qfb_emit_pdl_pair(b, &row, run_pair, &dep, &plain);
}

/* A decode step's append then attention (B = 1, Hq = Hkv, so that o is a new [1, Hkv D] row):
 * qf_vq_encode of o as the last token's K and V, then the public attention call over the cache. */
typedef struct {
  att_call att;
  int64_t rshape[3], sshape[1];
  DLTensor last[2]; /* the last token's K and V code rows */
  DLTensor slot;    /* kv: int32 [1] = seq_len - 1 on the device */
  int kv;           /* the append by qf_vq_encode_kv_slots (both caches in one call) */
} append_step;

static int run_append_step(void *arg) {
  append_step *s = arg;
  if (s->kv) {
    qf_status st = qf_vq_encode_kv_slots(s->att.ctx, &s->att.to, &s->att.to, &s->slot, &s->att.kb, &s->att.vb, &s->att.c->f,
                                         &s->att.kc, &s->att.vc, NULL, NULL);
    if (st != QF_OK) fprintf(stderr, "qf_vq_encode_kv_slots: %s\n", qf_ctx_last_error(s->att.ctx));
    return st != QF_OK || run_api(&s->att);
  }
  for (int m = 0; m < 2; m++) {
    qf_status st = qf_vq_encode(s->att.ctx, &s->att.to, s->att.seq_len - 1, m ? &s->att.vb : &s->att.kb, &s->att.c->f,
                                &s->last[m], NULL);
    if (st != QF_OK) {
      fprintf(stderr, "qf_vq_encode: %s\n", qf_ctx_last_error(s->att.ctx));
      return 1;
    }
  }
  return run_api(&s->att);
}

/* The step on pdl against the same calls on a's context (qfb_emit_pdl_pair), as op
 * vq_append_chain, then the same with the append by qf_vq_encode_kv_slots (variant ",kv"); the
 * last token's codes are restored afterwards (the other rows compare against the fp16 peer's
 * copy of the cache). */
static int append_row(qfb *b, qf_ctx *pdl, const att_call *a, const char *name, const char *shape, double bytes,
                      double flops) {
  cache *c = a->c;
  const size_t rb = (size_t)c->sz.row_bytes;
  uint8_t *saved = malloc(2 * rb);
  int32_t *slot = NULL;
  const int32_t last_row = (int32_t)(a->seq_len - 1);
  int rc = 1;
  append_step plain = {.att = *a, .rshape = {1, 1, c->sz.row_bytes}, .sshape = {1}};
  for (int m = 0; m < 2; m++)
    plain.last[m] = (DLTensor){.data = (uint8_t *)c->codes[m] + (size_t)(a->seq_len - 1) * rb, .device = {kDLCUDA, 0}, .ndim = 3,
                               .dtype = qf_dtype_to_dl(QF_U8), .shape = plain.rshape};
  if (!saved || cudaMemcpy(saved, plain.last[0].data, rb, cudaMemcpyDeviceToHost) ||
      cudaMemcpy(saved + rb, plain.last[1].data, rb, cudaMemcpyDeviceToHost) || cudaMalloc((void **)&slot, 4) ||
      cudaMemcpy(slot, &last_row, 4, cudaMemcpyHostToDevice)) {
    fprintf(stderr, "bench_vq_attention: the append chain's setup failed\n");
    goto done;
  }
  append_step dep = plain;
  for (int m = 0; m < 2; m++) dep.last[m].shape = dep.rshape; /* (its own copy of the shape) */
  dep.att.ctx = pdl;
  char variant[64];
  snprintf(variant, sizeof variant, "%s,fp16,auto,pdl", name);
  qfb_row row = {.op = "vq_append_chain", .variant = variant, .shape = shape, .bytes = bytes, .flops = flops};
  row.floor_us = qfb_floor_us(b, row.bytes, 0.0, 0.0);
  rc = qfb_emit_pdl_pair(b, &row, run_append_step, &dep, &plain);
  plain.slot = (DLTensor){.data = slot, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = plain.sshape};
  plain.kv = 1;
  dep = plain;
  dep.slot.shape = dep.sshape, dep.att.ctx = pdl;
  snprintf(variant, sizeof variant, "%s,fp16,auto,pdl,kv", name);
  rc |= qfb_emit_pdl_pair(b, &row, run_append_step, &dep, &plain);
  if (cudaMemcpy(plain.last[0].data, saved, rb, cudaMemcpyHostToDevice) ||
      cudaMemcpy(plain.last[1].data, saved + rb, rb, cudaMemcpyHostToDevice))
    rc = 1;
done:
  free(saved);
  cudaFree(slot);
  return rc;
}

/* A decode step in one call (op vq_append_step): qf_vq_attention_decode_append with the first Hkv
 * heads of q's rows as every entry's new K and V (token seq_len - 1; with grouped heads a strided
 * view) against qf_vq_encode_kv_slots of the same rows then qf_vq_attention_decode (peer "two
 * calls"), both on the PDL context and timed by events (the launches count: the step's point is
 * one launch fewer). The last tokens' codes are restored afterwards (the other rows compare against
 * the fp16 peer's copy of the cache). */
typedef struct {
  att_call att;
  DLTensor slots; /* int32 [B]: b seq_len + seq_len - 1 */
  DLTensor x;     /* the new rows: [B, Hkv D] of q's rows */
  int one;
} step_call;

static int run_step(void *arg) {
  step_call *s = arg;
  att_call *a = &s->att;
  qf_status st;
  if (s->one)
    st = qf_vq_attention_decode_append(a->ctx, &a->tq, &s->x, &s->x, &a->kc, &a->kb, &a->vc, &a->vb, &a->c->f, &a->opts,
                                       &a->to, &a->tl);
  else if ((st = qf_vq_encode_kv_slots(a->ctx, &s->x, &s->x, &s->slots, &a->kb, &a->vb, &a->c->f, &a->kc, &a->vc, NULL,
                                       NULL)) == QF_OK)
    st = qf_vq_attention_decode(a->ctx, &a->tq, &a->kc, &a->kb, &a->vc, &a->vb, &a->c->f, &a->opts, &a->to, &a->tl);
  if (st != QF_OK) fprintf(stderr, "bench_vq_attention: the step: %s\n", qf_ctx_last_error(a->ctx));
  return st != QF_OK;
}

static int step_row(qfb *b, qf_ctx *pdl, const att_call *a, const char *name, const char *shape, double bytes, double flops) {
  cache *c = a->c;
  const int64_t B = a->B;
  const size_t rb = (size_t)c->sz.row_bytes;
  uint8_t *saved = malloc(2 * (size_t)B * rb);
  int32_t *hslots = malloc((size_t)B * 4), *slots = NULL;
  int64_t nshape[1] = {B}, xshape[2] = {B, c->hkv * HEAD_DIM}, xstrides[2] = {HQ * HEAD_DIM, 1};
  int rc = 1;
  if (!saved || !hslots || cudaMalloc((void **)&slots, (size_t)B * 4)) goto done;
  for (int64_t i = 0; i < B; i++) {
    hslots[i] = (int32_t)(i * a->seq_len + a->seq_len - 1);
    for (int m = 0; m < 2; m++)
      if (cudaMemcpy(saved + (size_t)(m * B + i) * rb, (uint8_t *)c->codes[m] + (size_t)hslots[i] * rb, rb, cudaMemcpyDeviceToHost))
        goto done;
  }
  if (cudaMemcpy(slots, hslots, (size_t)B * 4, cudaMemcpyHostToDevice)) goto done;
  step_call one = {.att = *a, .one = 1};
  one.att.ctx = pdl;
  one.slots = (DLTensor){.data = slots, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = nshape};
  one.x = a->tq;
  one.x.shape = xshape, one.x.strides = xstrides;
  step_call two = one;
  two.one = 0;
  char variant[64];
  snprintf(variant, sizeof variant, "%s,fp16,auto,pdl,one_call", name);
  qfb_row row = {.op = "vq_append_step", .variant = variant, .shape = shape, .bytes = bytes, .flops = flops,
                 .peer = "two calls (encode_kv_slots, attention)"};
  row.floor_us = qfb_floor_us(b, row.bytes, 0.0, 0.0);
  const qfb_timing was = qfb_set_timing(b, QFB_TIMING_EVENT);
  const double before = qfb_time_us(b, run_step, &two);
  row.us = qfb_time_us(b, run_step, &one);
  const double after = qfb_time_us(b, run_step, &two);
  qfb_set_timing(b, was);
  row.peer_us = 0.5 * (before + after);
  qfb_emit(b, &row);
  rc = row.us > 0 && before > 0 && after > 0 ? 0 : 1;
  for (int64_t i = 0; i < B; i++)
    for (int m = 0; m < 2; m++)
      if (cudaMemcpy((uint8_t *)c->codes[m] + (size_t)hslots[i] * rb, saved + (size_t)(m * B + i) * rb, rb, cudaMemcpyHostToDevice))
        rc = 1;
done:
  if (rc) fprintf(stderr, "bench_vq_attention: the step in one call failed\n");
  free(saved), free(hslots);
  cudaFree(slots);
  return rc;
}

/* qfuse's o and lse against the peer's (both fp16 o over the same decoded cache). */
static int outputs_agree(att_call *a, const char *shape, const char *name) {
  const size_t n = (size_t)(a->B * HQ * HEAD_DIM), nl = (size_t)(a->B * HQ);
  uint16_t *o = malloc(n * 2), *op = malloc(n * 2);
  float *l = malloc(nl * 4), *lp = malloc(nl * 4);
  int ok = 0;
  if (o && op && l && lp && !cudaMemcpy(o, a->o, n * 2, cudaMemcpyDeviceToHost) &&
      !cudaMemcpy(op, a->o_peer, n * 2, cudaMemcpyDeviceToHost) && !cudaMemcpy(l, a->lse, nl * 4, cudaMemcpyDeviceToHost) &&
      !cudaMemcpy(lp, a->lse_peer, nl * 4, cudaMemcpyDeviceToHost)) {
    double num = 0.0, den = 0.0, dl = 0.0;
    for (size_t i = 0; i < n; i++) {
      const double x = qf_f16_to_f32(o[i]), y = qf_f16_to_f32(op[i]);
      num += (x - y) * (x - y), den += y * y;
    }
    for (size_t i = 0; i < nl; i++) dl = fmax(dl, fabs((double)l[i] - (double)lp[i]));
    const double rel = den > 0.0 ? sqrt(num / den) : INFINITY;
    ok = rel < 1e-2 && dl < 1e-2; /* false for NaN */
    if (!ok)
      fprintf(stderr, "bench_vq_attention: %s %s: qfuse and the fp16 peer disagree (o relative error %.3g, lse max difference %.3g)\n",
              name, shape, rel, dl);
  }
  free(o), free(op), free(l), free(lp);
  return ok;
}

/* pdl: a context with qf_ctx_set_pdl for the chain rows (none without it). */
/* One qfuse row: a's call timed by `run`, against the peer's time, then its outputs (its last
 * run) against the peer's. Nonzero when it could not be timed or its outputs disagree. */
static int vq_row(qfb *b, att_call *a, int (*run)(void *), const char *variant, const char *shape, double bytes, double flops,
                  const qfb_row *peer, int *rows) {
  qfb_row row = {.op = "vq_attention_decode", .variant = variant, .shape = shape, .bytes = bytes, .flops = flops,
                 .peer = peer->us > 0 ? "fp16_splitkv_decode" : NULL, .peer_us = peer->us > 0 ? peer->us : 0.0};
  row.us = qfb_time_us(b, run, a);
  row.floor_us = qfb_floor_us(b, bytes, 0.0, 0.0);
  qfb_emit(b, &row);
  (*rows)++;
  return row.us > 0 ? (peer->us > 0 && !outputs_agree(a, shape, variant)) : 1;
}

/* The call a (lengths set) over a paged copy of its cache: pages of 16 and 256 rows in a shuffled
 * pool of the same size, as variant "<format>,fp16,auto,paged<P>" (same bytes and peer), and the
 * pages in order ("...,paged<P>,in-order": the contiguous cache's layout read through the table). */
static int paged_rows(qfb *b, att_call *a, const char *name, const char *shape, double bytes, double flops, const qfb_row *peer,
                      int *rows) {
  const int64_t n_rows = a->B * a->seq_len, rb = a->c->sz.row_bytes;
  static const int64_t sizes[] = {16, 256};
  int rc = 0;
  for (size_t si = 0; si < 2 * sizeof sizes / sizeof sizes[0]; si++) {
    const int64_t P = sizes[si / 2], pages = a->seq_len / P, num = a->B * pages;
    const int in_order = si % 2;
    if (a->seq_len % P) continue;
    int32_t *table = malloc((size_t)num * 4), *dtable = NULL;
    void *codes[2] = {NULL, NULL};
    int ok = table && !cudaMalloc((void **)&dtable, (size_t)num * 4) && !cudaMalloc(&codes[0], (size_t)(n_rows * rb)) &&
             !cudaMalloc(&codes[1], (size_t)(n_rows * rb));
    for (int64_t i = 0; ok && i < num; i++) table[i] = (int32_t)(in_order ? i : (i * 7919) % num); /* 7919 is prime to num */
    for (int64_t i = 0; ok && i < num; i++)
      for (int m = 0; m < 2 && ok; m++)
        ok = !cudaMemcpy((uint8_t *)codes[m] + table[i] * P * rb, (uint8_t *)a->c->codes[m] + i * P * rb, (size_t)(P * rb),
                         cudaMemcpyDeviceToDevice);
    ok = ok && !cudaMemcpy(dtable, table, (size_t)num * 4, cudaMemcpyHostToDevice);
    if (ok) {
      int64_t tshape[2] = {a->B, pages}, cshape[3] = {a->c->f.residuals, n_rows, rb};
      const DLTensor bt = {.data = dtable, .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(QF_I32), .shape = tshape};
      const DLTensor kc = a->kc, vc = a->vc;
      a->kc.data = codes[0], a->vc.data = codes[1], a->kc.shape = a->vc.shape = cshape;
      a->opts.block_table = &bt, a->opts.page_size = P;
      char variant[96];
      snprintf(variant, sizeof variant, "%s,fp16,auto,paged%lld%s", name, (long long)P, in_order ? ",in-order" : "");
      rc |= vq_row(b, a, run_api, variant, shape, bytes, flops, peer, rows);
      a->kc = kc, a->vc = vc, a->opts.block_table = NULL, a->opts.page_size = 0;
    } else {
      rc = 1;
    }
    free(table);
    cudaFree(dtable), cudaFree(codes[0]), cudaFree(codes[1]);
  }
  return rc;
}

static int one_shape(qfb *b, qf_ctx *ctx, qf_ctx *pdl, cache *c, const char *name, int64_t B, int64_t seq_len, int *rows) {
  const int64_t W = (int64_t)HQ * HEAD_DIM, Wkv = c->hkv * HEAD_DIM;
  att_call a;
  memset(&a, 0, sizeof a);
  a.ws_bytes = qfb_fp16_decode_workspace(B, HQ, HEAD_DIM, seq_len);
  int rc = 1;
  void *hq = malloc((size_t)(B * W) * 2), *o2 = NULL;
  float *lse2 = NULL;
  if (!hq || cudaMalloc(&a.q, (size_t)(B * W) * 2) || cudaMalloc(&a.o, (size_t)(B * W) * 2) ||
      cudaMalloc(&o2, (size_t)(B * W) * 2) || cudaMalloc((void **)&lse2, (size_t)(B * HQ) * 4) ||
      cudaMalloc(&a.o_peer, (size_t)(B * W) * 2) || cudaMalloc((void **)&a.lse, (size_t)(B * HQ) * 4) ||
      cudaMalloc((void **)&a.lse_peer, (size_t)(B * HQ) * 4) || cudaMalloc(&a.ws, a.ws_bytes))
    goto done;
  uint64_t seed = 0xDEC0DEull ^ (uint64_t)(B * 131 + seq_len);
  for (int64_t i = 0; i < B * W; i++) ((uint16_t *)hq)[i] = qf_f16_from_f32(normal(&seed));
  if (cudaMemcpy(a.q, hq, (size_t)(B * W) * 2, cudaMemcpyHostToDevice)) goto done;
  setup_call(&a, ctx, c, B, seq_len);

  char shape[96], variant[96];
  snprintf(shape, sizeof shape, "B=%lld,Hq=%d,Hkv=%lld,D=%d,seq=%lld", (long long)B, HQ, (long long)c->hkv, HEAD_DIM,
           (long long)seq_len);
  const double io = (double)(B * W) * 2.0 * 2.0 + (double)(B * HQ) * 4.0; /* q, o, lse */
  const double vq_bytes = 2.0 * ((double)(c->f.residuals * B * seq_len * c->sz.row_bytes) + (double)c->book_bytes) + io;
  const double fp16_bytes = 2.0 * (double)(B * seq_len * Wkv) * 2.0 + io;
  const double flops = 4.0 * (double)B * HQ * (double)seq_len * HEAD_DIM;

  qfb_row peer = {.op = "vq_attention_decode", .variant = "fp16_splitkv_decode (peer)", .shape = shape, .bytes = fp16_bytes,
                  .flops = flops};
  peer.us = qfb_time_us(b, run_peer, &a);
  peer.floor_us = qfb_floor_us(b, fp16_bytes, 0.0, 0.0);

  /* the heuristic's choices, named in the public call's row */
  qf_vq_attention_config cfg;
  if (qf_cuda_vq_attention_decode_with(ctx, &a.args, QF_VQ_BOOKS_AUTO, QF_VQ_ATTN_SCORES_AUTO, &cfg) != QF_OK) {
    fprintf(stderr, "bench_vq_attention: %s %s: %s\n", name, shape, qf_ctx_last_error(ctx));
    rc = 1;
    goto done;
  }
  char auto_suffix[32];
  snprintf(auto_suffix, sizeof auto_suffix, ",auto=%s%s",
           cfg.placement == QF_VQ_BOOKS_BANKED      ? "banked"
           : cfg.placement == QF_VQ_BOOKS_IN_SHARED ? "SC"
                                                    : "GC",
           cfg.scores == QF_VQ_ATTN_SCORES_LUT && cfg.placement != QF_VQ_BOOKS_BANKED ? "+LUT" : "");
  const struct {
    const char *suffix;
    int forced, placement, scores;
  } runs[] = {{auto_suffix, 0, QF_VQ_BOOKS_AUTO, QF_VQ_ATTN_SCORES_AUTO},
              {",GC", 1, QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_ATTN_SCORES_DECODE},
              {",SC", 1, QF_VQ_BOOKS_IN_SHARED, QF_VQ_ATTN_SCORES_DECODE},
              {",GC+LUT", 1, QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_ATTN_SCORES_LUT},
              {",SC+LUT", 1, QF_VQ_BOOKS_IN_SHARED, QF_VQ_ATTN_SCORES_LUT},
              {",banked", 1, QF_VQ_BOOKS_BANKED, QF_VQ_ATTN_SCORES_LUT}};
  rc = peer.us > 0 ? 0 : 1;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    snprintf(variant, sizeof variant, "%s,fp16%s", name, runs[i].suffix);
    if (runs[i].forced &&
        qf_cuda_vq_attention_decode_with(ctx, &a.args, runs[i].placement, runs[i].scores, NULL) == QF_ERR_UNSUPPORTED) {
      printf("skipped: vq_attention_decode %s %s: %s\n", variant, shape, qf_ctx_last_error(ctx));
      continue;
    }
    a.placement = runs[i].placement, a.scores = runs[i].scores;
    rc |= vq_row(b, &a, runs[i].forced ? run_forced : run_api, variant, shape, vq_bytes, flops, &peer, rows);
  }
  /* the public call with lengths per entry (opts.kv_lens, read on the device), every entry at
   * seq_len: what the lengths cost an engine's call against the same work without them */
  int32_t *lens = NULL;
  int64_t nshape[1] = {B};
  DLTensor tlens = {.device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = nshape};
  int32_t *hlens = malloc((size_t)B * sizeof *hlens);
  for (int64_t i = 0; hlens && i < B; i++) hlens[i] = (int32_t)seq_len;
  if (hlens && !cudaMalloc((void **)&lens, (size_t)B * sizeof *lens) &&
      !cudaMemcpy(lens, hlens, (size_t)B * sizeof *lens, cudaMemcpyHostToDevice)) {
    tlens.data = lens;
    a.opts.kv_lens = &tlens;
    snprintf(variant, sizeof variant, "%s,fp16,auto,kv_lens", name);
    rc |= vq_row(b, &a, run_api, variant, shape, vq_bytes, flops, &peer, rows);
    rc |= paged_rows(b, &a, name, shape, vq_bytes, flops, &peer, rows);
    a.opts.kv_lens = NULL;
  } else {
    rc = 1;
  }
  cudaFree(lens);
  free(hlens);
  /* the public call with the V codebooks packed for the banked kernel (qf_vq_pack_attention_books,
   * made once per layer by an engine): what laying them out in each block costs */
  void *vpk = NULL;
  const int64_t pshape[5] = {1, c->hkv, 256, HEAD_DIM / c->f.vector_size, c->f.vector_size};
  const size_t pbytes = (size_t)(c->hkv * 256 * HEAD_DIM) * 2;
  if (cfg.placement == QF_VQ_BOOKS_BANKED && !cudaMalloc(&vpk, pbytes)) {
    DLTensor pt = {.data = vpk, .device = {kDLCUDA, 0}, .ndim = 5, .dtype = qf_dtype_to_dl(c->f.entry_dtype), .shape = (int64_t *)pshape};
    if (qf_vq_pack_attention_books(ctx, &a.vb, &c->f, HEAD_DIM, c->hkv, &pt) == QF_OK) {
      const DLTensor vb = a.vb;
      a.vb = pt, a.placement = QF_VQ_BOOKS_AUTO, a.scores = QF_VQ_ATTN_SCORES_AUTO;
      snprintf(variant, sizeof variant, "%s,fp16,auto,vpacked", name);
      rc |= vq_row(b, &a, run_api, variant, shape, vq_bytes, flops, &peer, rows);
      a.vb = vb;
    } else {
      fprintf(stderr, "bench_vq_attention: pack: %s\n", qf_ctx_last_error(ctx));
      rc = 1;
    }
  }
  cudaFree(vpk);
  qfb_emit(b, &peer);
  (*rows)++;
  if (cfg.placement == QF_VQ_BOOKS_BANKED && pdl) { /* the one kernel launched as a programmatic dependent */
    a.placement = QF_VQ_BOOKS_AUTO, a.scores = QF_VQ_ATTN_SCORES_AUTO;
    rc |= chain_row(b, pdl, &a, name, shape, vq_bytes, flops, o2, lse2);
    (*rows)++;
    if (B == 1 && c->hkv == HQ) {
      rc |= append_row(b, pdl, &a, name, shape, vq_bytes, flops);
      (*rows) += 2;
    }
    rc |= step_row(b, pdl, &a, name, shape, vq_bytes, flops);
    (*rows)++;
  }
done:
  if (rc) fprintf(stderr, "bench_vq_attention: %s at B=%lld seq_len=%lld failed\n", name, (long long)B, (long long)seq_len);
  cudaFree(a.q), cudaFree(a.o), cudaFree(a.o_peer), cudaFree(a.lse), cudaFree(a.lse_peer), cudaFree(a.ws);
  cudaFree(o2), cudaFree(lse2);
  free(hq);
  return rc;
}
#endif

int bench_vq_attention(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  if (!qfb_op_selected(sel->ops, "vq_attention_decode") || !qfb_uses_gpu(b)) return 0; /* the CPU reference: not timed */
#ifdef QF_WITH_CUDA
  /* batch 1 and MAX_B; --m with another batch up to MAX_B runs that batch alone */
  const int64_t batches[] = {1, sel->m > 1 && sel->m < MAX_B ? sel->m : MAX_B}, seqs[] = {1024, MAX_SEQ};
  static const struct {
    qf_vq_preset preset;
    const char *name;
  } formats[] = {{QF_VQ_CQ_2, "cq2"}, {QF_VQ_CQ_4, "cq4"}};
  const char *forced = getenv("QF_VQ_BOOKS");
  if (forced && *forced && strcmp(forced, "auto") != 0)
    printf("note: QF_VQ_BOOKS=%s: the vq_attention_decode auto rows run that placement, not the one they name\n", forced);
  uint64_t seed = 0xCAC4Eull;
  qf_ctx *pdl = qfb_pdl_context("bench_vq_attention"); /* for the chain rows */
  int rc = pdl ? 0 : 1;
  for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
    for (int gqa = 0; gqa < 2; gqa++) { /* Llama-7B (32 kv heads), then GQA (8 kv heads, 4096 tokens) */
      int wanted = 0;
      for (size_t i = 0; i < 2; i++) wanted |= !sel->m || sel->m == batches[i];
      if (!wanted) continue;
      cache c;
      if (make_cache(ctx, &c, formats[f].preset, gqa ? GQA_HKV : HQ, &seed)) {
        rc = 1;
        continue;
      }
      for (size_t i = 0; i < 2; i++)
        for (size_t j = gqa ? 1 : 0; j < 2; j++) {
          if (sel->m && sel->m != batches[i]) continue;
          rc |= one_shape(b, ctx, pdl, &c, formats[f].name, batches[i], seqs[j], rows);
        }
      free_cache(&c);
    }
  qf_ctx_destroy(pdl);
  return rc;
#else
  (void)ctx, (void)rows;
  return 0;
#endif
}
