/* qfuse-bench rows of qf_vq_encode on CUDA (quantize-on-append): the new K (or V) rows of one
 * attention layer encoded into a CQ cache, as a decode step (B = 1, 2, 4 and 8 new tokens), short
 * prefill chunks (16, 32, 64, 128: around where the row-parallel forms take over), a 512-token chunk
 * and a 4096-token prefill append them. Rows are [T, Hkv * D] = [T, 32 x 128] fp16 (Llama-7B), the
 * codebooks random fp16 (the scan's cost does not depend on the values). Op "vq_encode",
 * variant "<format>,fp16", shape "T=...,K=4096"; bytes: x read + codes written; peer: copy16 of
 * x's bytes (what the same data costs to move at all), so ratio = copy / encode. The scan is
 * arithmetic (entries x vector size x 3 fp32 operations per vector and residual), so the floor
 * column reports bytes only. Variant "<format>,fp16,slots" is qf_vq_encode_slots with the same
 * rows written to slots 64 rows apart in a cache of 64 T rows (a decode step's tokens of
 * sequences in their own regions), the same bytes and peer. Variant "<format>,fp16,kv-slots" is
 * qf_vq_encode_kv_slots of those rows as K and V (the same rows and books, two caches), against
 * the two qf_vq_encode_slots calls it replaces (peer "2 x slots", one after the other). Variant
 * "<format>,bf16-x" is qf_vq_encode of the same values as bf16 rows into the fp16 books (a bf16
 * model's K or V with the presets' books), the same bytes and peer. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_ops.h"
#include "formats/formats.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

typedef struct {
  qf_ctx *ctx;
  DLTensor x, books, codes, cache, cache2, slots;
  const qf_vq_format *f;
} encode_call;

static int run_encode(void *arg) {
  encode_call *c = arg;
  qf_status st = qf_vq_encode(c->ctx, &c->x, 0, &c->books, c->f, &c->codes, NULL);
  if (st != QF_OK) fprintf(stderr, "qf_vq_encode: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

static int encode_slots_into(encode_call *c, DLTensor *cache) {
  qf_status st = qf_vq_encode_slots(c->ctx, &c->x, &c->slots, &c->books, c->f, cache, NULL);
  if (st != QF_OK) fprintf(stderr, "qf_vq_encode_slots: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

static int run_encode_slots(void *arg) {
  encode_call *c = arg;
  return encode_slots_into(c, &c->cache);
}

static int run_encode_kv(void *arg) {
  encode_call *c = arg;
  qf_status st = qf_vq_encode_kv_slots(c->ctx, &c->x, &c->x, &c->slots, &c->books, &c->books, c->f, &c->cache, &c->cache2,
                                       NULL, NULL);
  if (st != QF_OK) fprintf(stderr, "qf_vq_encode_kv_slots: %s\n", qf_ctx_last_error(c->ctx));
  return st != QF_OK;
}

static int run_encode_two_slots(void *arg) {
  encode_call *c = arg;
  return encode_slots_into(c, &c->cache) || encode_slots_into(c, &c->cache2);
}

typedef struct {
  const void *src;
  void *dst;
  size_t bytes;
} encode_copy_call;

static int run_encode_copy(void *arg) {
  encode_copy_call *c = arg;
  return qfb_copy16(c->src, c->dst, c->bytes, 0);
}

static int encode_shape(qfb *b, qf_ctx *ctx, const char *name, qf_vq_preset preset, int64_t T, int *rows) {
  const int64_t K = 32 * 128;
  qf_vq_format f;
  qf_vq_sizes sz;
  if (qf_vq_format_preset(preset, &f) != QF_OK || qf_vq_sizes_of(ctx, &f, T, K, &sz) != QF_OK) return 1;
  const size_t xb = (size_t)(T * K) * 2, bb = (size_t)(f.residuals * sz.n_books * sz.entries * f.vector_size) * 2,
               cb = (size_t)(f.residuals * T * sz.row_bytes);
  uint16_t *h = malloc(bb > xb ? bb : xb);
  int32_t *hslots = malloc((size_t)T * 4);
  void *x = NULL, *xb16 = NULL, *books = NULL, *codes = NULL, *dst = NULL, *cache = NULL, *cache2 = NULL, *slots = NULL;
  int rc = 1;
  if (!h || !hslots || cudaMalloc(&x, xb) || cudaMalloc(&xb16, xb) || cudaMalloc(&books, bb) || cudaMalloc(&codes, cb) || cudaMalloc(&dst, xb) ||
      cudaMalloc(&cache, 64 * cb) || cudaMalloc(&cache2, 64 * cb) || cudaMalloc(&slots, (size_t)T * 4))
    goto done;
  for (int64_t i = 0; i < T; i++) hslots[i] = (int32_t)(64 * i + 17);
  if (cudaMemcpy(slots, hslots, (size_t)T * 4, cudaMemcpyHostToDevice)) goto done;
  uint64_t s = 0x0E4C0DEull;
  for (size_t i = 0; i < (bb > xb ? bb : xb) / 2; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    h[i] = (uint16_t)(0x3000u + (s % 0x1000u)) | (uint16_t)((s >> 20) & 0x8000u); /* |v| in [0.125, 0.25) */
  }
  if (cudaMemcpy(x, h, xb, cudaMemcpyHostToDevice) || cudaMemcpy(books, h, bb, cudaMemcpyHostToDevice)) goto done;
  for (size_t i = 0; i < xb / 2; i++) h[i] = qf_bf16_from_f32(qf_f16_to_f32(h[i])); /* x's values as bf16 */
  if (cudaMemcpy(xb16, h, xb, cudaMemcpyHostToDevice)) goto done;
  int64_t xshape[2] = {T, K}, bshape[4] = {f.residuals, sz.n_books, sz.entries, f.vector_size},
          cshape[3] = {f.residuals, T, sz.row_bytes}, kshape[3] = {f.residuals, 64 * T, sz.row_bytes}, tshape[1] = {T};
  encode_call c = {.ctx = ctx, .f = &f};
  c.x = (DLTensor){.data = x, .device = {kDLCUDA, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(QF_F16), .shape = xshape};
  c.books = (DLTensor){.data = books, .device = {kDLCUDA, 0}, .ndim = 4, .dtype = qf_dtype_to_dl(QF_F16), .shape = bshape};
  c.codes = (DLTensor){.data = codes, .device = {kDLCUDA, 0}, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = cshape};
  c.cache = (DLTensor){.data = cache, .device = {kDLCUDA, 0}, .ndim = 3, .dtype = qf_dtype_to_dl(QF_U8), .shape = kshape};
  c.cache2 = c.cache;
  c.cache2.data = cache2;
  c.slots = (DLTensor){.data = slots, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = tshape};
  char variant[48], shape[48];
  snprintf(variant, sizeof variant, "%s,fp16", name);
  snprintf(shape, sizeof shape, "T=%lld,K=%lld", (long long)T, (long long)K);
  qfb_row row = {.op = "vq_encode", .variant = variant, .shape = shape, .bytes = (double)(xb + cb), .peer = "copy16"};
  row.us = qfb_time_us(b, run_encode, &c);
  row.floor_us = qfb_floor_us(b, row.bytes, 0, 0);
  encode_copy_call cc = {x, dst, xb & ~(size_t)15};
  row.peer_us = qfb_time_us(b, run_encode_copy, &cc);
  qfb_emit(b, &row);
  (*rows)++;
  snprintf(variant, sizeof variant, "%s,fp16,slots", name);
  qfb_row srow = row;
  srow.us = qfb_time_us(b, run_encode_slots, &c);
  qfb_emit(b, &srow);
  (*rows)++;
  snprintf(variant, sizeof variant, "%s,fp16,kv-slots", name);
  qfb_row kvrow = {.op = "vq_encode", .variant = variant, .shape = shape, .bytes = 2.0 * (double)(xb + cb), .peer = "2 x slots"};
  kvrow.us = qfb_time_us(b, run_encode_kv, &c);
  kvrow.floor_us = qfb_floor_us(b, kvrow.bytes, 0, 0);
  kvrow.peer_us = qfb_time_us(b, run_encode_two_slots, &c);
  qfb_emit(b, &kvrow);
  (*rows)++;
  snprintf(variant, sizeof variant, "%s,bf16-x", name); /* the same values as bf16 rows into the fp16 books */
  encode_call cb16 = c;
  cb16.x.data = xb16, cb16.x.dtype = qf_dtype_to_dl(QF_BF16);
  qfb_row brow = row;
  brow.us = qfb_time_us(b, run_encode, &cb16);
  qfb_emit(b, &brow);
  (*rows)++;
  rc = row.us > 0 && srow.us > 0 && kvrow.us > 0 && kvrow.peer_us > 0 && brow.us > 0 ? 0 : 1;
done:
  if (rc) fprintf(stderr, "bench_vq_encode: %s T=%lld failed\n", name, (long long)T);
  free(h), free(hslots);
  cudaFree(x), cudaFree(xb16), cudaFree(books), cudaFree(codes), cudaFree(dst), cudaFree(cache), cudaFree(cache2), cudaFree(slots);
  return rc;
}
#endif

int bench_vq_encode(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  if (!qfb_op_selected(sel->ops, "vq_encode") || !qfb_uses_gpu(b)) return 0; /* the CPU reference: not timed */
  int rc = 0;
#ifdef QF_WITH_CUDA
  const int64_t Ts[] = {1, 2, 4, 8, 16, 32, 64, 128, 512, 4096};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
    if (sel->m && sel->m != Ts[i]) continue;
    rc |= encode_shape(b, ctx, "cq2", QF_VQ_CQ_2, Ts[i], rows);
    rc |= encode_shape(b, ctx, "cq4", QF_VQ_CQ_4, Ts[i], rows);
  }
#else
  (void)ctx, (void)rows;
#endif
  return rc;
}
