/* Quantization benchmarks: effective bandwidth (input read once + outputs written once) against
 * the copy ceiling, and a 16-byte copy of the same number of bytes as the baseline peer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "bench_ops.h"
#include "formats/formats.h"

typedef enum { OP_PER_TENSOR, OP_GROUP, OP_SILU_MUL, OP_RMS_NORM, OP_TOKEN, OP_TENSOR_DYNAMIC } op_kind;

/* One row set. Activations are bf16 throughout; K is the quantized width (H for SiLU * Mul, whose
 * input is [M, 2H]); rms_norm_quant always adds a residual. */
typedef struct {
  op_kind kind;
  const char *op, *variant;
  qf_dtype qdt;           /* e4m3fn or int8 */
  int group;              /* 32, 64, 128; -1 per token; 0 not grouped */
  qf_scale_layout layout; /* grouped scales only; default ROW_MAJOR */
  qf_scale_format format; /* default F32 */
  int azp;                /* quant_token: asymmetric int8 */
  int fast_exp;           /* silu_mul_quant_group: qf_glu_opts::fast_exp */
  int largest_m_only;     /* GPU: only at the largest M */
} quant_case;

static const quant_case cases[] = {
    {OP_PER_TENSOR, "quant_per_tensor", "bf16->e4m3fn", .qdt = QF_E4M3FN},
    {OP_GROUP, "quant_group", "bf16->e4m3fn,g128,col_major_tma", .qdt = QF_E4M3FN, .group = 128,
     .layout = QF_SCALE_COL_MAJOR_TMA},
    {OP_GROUP, "quant_group", "bf16->e4m3fn,g128,row_major", .qdt = QF_E4M3FN, .group = 128, .largest_m_only = 1},
    {OP_GROUP, "quant_group", "bf16->e4m3fn,g128,ue8m0_packed", .qdt = QF_E4M3FN, .group = 128,
     .layout = QF_SCALE_COL_MAJOR_TMA, .format = QF_SCALE_UE8M0_PACKED, .largest_m_only = 1},
    {OP_SILU_MUL, "silu_mul_quant_group", "bf16->e4m3fn,g128,col_major_tma", .qdt = QF_E4M3FN, .group = 128,
     .layout = QF_SCALE_COL_MAJOR_TMA},
    {OP_SILU_MUL, "silu_mul_quant_group", "bf16->e4m3fn,g128,col_major_tma,fast_exp", .qdt = QF_E4M3FN, .group = 128,
     .layout = QF_SCALE_COL_MAJOR_TMA, .fast_exp = 1},
    {OP_SILU_MUL, "silu_mul_quant_group", "bf16->int8,g64,row_major", .qdt = QF_I8, .group = 64, .largest_m_only = 1},
    {OP_SILU_MUL, "silu_mul_quant_group", "bf16->int8,g64,row_major,fast_exp", .qdt = QF_I8, .group = 64,
     .fast_exp = 1, .largest_m_only = 1},
    {OP_RMS_NORM, "rms_norm_quant", "bf16+res->e4m3fn,g128,col_major_tma", .qdt = QF_E4M3FN, .group = 128,
     .layout = QF_SCALE_COL_MAJOR_TMA},
    {OP_RMS_NORM, "rms_norm_quant", "bf16+res->e4m3fn,g128,row_major", .qdt = QF_E4M3FN, .group = 128,
     .largest_m_only = 1},
    {OP_RMS_NORM, "rms_norm_quant", "bf16+res->e4m3fn,token", .qdt = QF_E4M3FN, .group = -1},
    {OP_TOKEN, "quant_token", "bf16->e4m3fn", .qdt = QF_E4M3FN, .group = -1},
    {OP_TOKEN, "quant_token", "bf16->int8,azp", .qdt = QF_I8, .group = -1, .azp = 1},
    {OP_TENSOR_DYNAMIC, "quant_tensor_dynamic", "bf16->e4m3fn", .qdt = QF_E4M3FN},
};

/* Rows of the padded column-major scale layouts: M rounded up to 16 bytes of fp32. */
static int64_t pad4(int64_t m) { return (m + 3) / 4 * 4; }

/* Bytes of the scale tensor as written, padding included. */
static double scale_bytes(const quant_case *c, int64_t m, int64_t k) {
  if (c->group < 0) return 4.0 * (double)m;
  if (c->group == 0) return c->kind == OP_TENSOR_DYNAMIC ? 4.0 : 0.0;
  const int64_t kg = k / c->group;
  if (c->format == QF_SCALE_UE8M0_PACKED) return 4.0 * (double)((kg + 3) / 4) * (double)pad4(m);
  return 4.0 * (double)kg * (double)(c->layout == QF_SCALE_COL_MAJOR_TMA ? pad4(m) : m);
}

/* Effective bytes: each input read once and each output written once. */
static double effective_bytes(const quant_case *c, int64_t m, int64_t k) {
  const double mk = (double)m * (double)k;
  double in = 2.0 * mk;                                        /* bf16 x */
  if (c->kind == OP_SILU_MUL) in = 4.0 * mk;                   /* [M, 2H] */
  if (c->kind == OP_RMS_NORM) in = 4.0 * mk + 2.0 * (double)k; /* x, residual, weight */
  double out = mk + scale_bytes(c, m, k);                      /* 8-bit q, scales */
  if (c->kind == OP_RMS_NORM) out += 2.0 * mk;                 /* residual <- x + residual */
  if (c->azp) out += 4.0 * (double)m;
  return in + out;
}

typedef struct {
  const quant_case *c;
  qf_ctx *ctx;
  DLTensor x, q, scales, azp, residual, weight, scale;
  int64_t xshape[2], qshape[2], sshape[2], sstrides[2], mshape, kshape, one;
  qf_group_quant_opts go;
} quant_call;

static void tensor(DLTensor *t, void *data, qf_dtype dt, int64_t *shape, int64_t *strides, int ndim,
                   DLDeviceType dev) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device.device_type = dev;
  t->ndim = ndim;
  t->dtype = qf_dtype_to_dl(dt);
  t->shape = shape;
  t->strides = strides;
}

typedef struct {
  void *x, *res, *w, *q, *scales, *azp, *scale, *dst;
} buffers;

/* Describes the tensors of case c at [m, k] over the shared buffers. The call must stay where it
 * is: its tensors point at its own shape arrays. */
static void setup_call(quant_call *call, const quant_case *c, qf_ctx *ctx, const buffers *bf, int64_t m, int64_t k,
                       DLDeviceType dev) {
  memset(call, 0, sizeof *call);
  call->c = c;
  call->ctx = ctx;
  call->one = 1;
  call->mshape = m;
  call->kshape = k;
  call->xshape[0] = call->qshape[0] = m;
  call->xshape[1] = c->kind == OP_SILU_MUL ? 2 * k : k;
  call->qshape[1] = k;
  tensor(&call->x, bf->x, QF_BF16, call->xshape, NULL, 2, dev);
  tensor(&call->q, bf->q, c->qdt, call->qshape, NULL, 2, dev);
  /* scale[0]: the static per-tensor scale (input); scale + 16 bytes: the dynamic one (output) */
  tensor(&call->scale, (char *)bf->scale + (c->kind == OP_TENSOR_DYNAMIC ? 16 : 0), QF_F32, &call->one, NULL, 1,
         dev);
  tensor(&call->residual, bf->res, QF_BF16, call->qshape, NULL, 2, dev);
  tensor(&call->weight, bf->w, QF_BF16, &call->kshape, NULL, 1, dev);
  tensor(&call->azp, bf->azp, QF_I32, &call->mshape, NULL, 1, dev);
  if (c->group < 0) {
    tensor(&call->scales, bf->scales, QF_F32, &call->mshape, NULL, 1, dev);
  } else if (c->group > 0) {
    const int64_t kg = k / c->group;
    call->go.group_size = c->group;
    call->go.scale_layout = c->layout;
    call->go.scale_format = c->format;
    if (c->layout == QF_SCALE_ROW_MAJOR) {
      call->sshape[0] = m, call->sshape[1] = kg;
      tensor(&call->scales, bf->scales, QF_F32, call->sshape, NULL, 2, dev);
    } else {
      const int packed = c->format == QF_SCALE_UE8M0_PACKED;
      call->sshape[0] = packed ? (kg + 3) / 4 : kg, call->sshape[1] = m;
      call->sstrides[0] = pad4(m), call->sstrides[1] = 1;
      tensor(&call->scales, bf->scales, packed ? QF_I32 : QF_F32, call->sshape, call->sstrides, 2, dev);
    }
  }
}

static int run_case(void *arg) {
  quant_call *a = arg;
  const quant_case *c = a->c;
  qf_status st = QF_OK;
  switch (c->kind) {
  case OP_PER_TENSOR: st = qf_quant_per_tensor(a->ctx, &a->x, &a->scale, &a->q); break;
  case OP_GROUP: st = qf_quant_group(a->ctx, &a->x, &a->q, &a->scales, &a->go); break;
  case OP_SILU_MUL: {
    qf_glu_opts g = {.fast_exp = c->fast_exp};
    st = qf_silu_mul_quant_group(a->ctx, &a->x, &a->q, &a->scales, &g, &a->go);
    break;
  }
  case OP_RMS_NORM: {
    qf_rms_norm_quant_opts o = {.group_size = c->group, .group = a->go};
    st = qf_rms_norm_quant(a->ctx, &a->x, &a->residual, &a->weight, &a->q, &a->scales, &o);
    break;
  }
  case OP_TOKEN: st = qf_quant_token(a->ctx, &a->x, &a->q, &a->scales, c->azp ? &a->azp : NULL, NULL); break;
  case OP_TENSOR_DYNAMIC: {
    qf_tensor_quant_opts o = {.dynamic = 1};
    st = qf_quant_tensor(a->ctx, &a->x, &a->q, &a->scale, &o);
    break;
  }
  }
  if (st != QF_OK) fprintf(stderr, "%s %s: %s\n", c->op, c->variant, qf_ctx_last_error(a->ctx));
  return st != QF_OK;
}

#ifdef QF_WITH_CUDA
typedef struct {
  const void *src;
  void *dst;
  size_t bytes;
} copy_call;

static int run_copy(void *arg) {
  copy_call *c = arg;
  return qfb_copy16(c->src, c->dst, c->bytes, 0);
}
#endif

static int upload(void *dst, const void *src, size_t bytes, int gpu) {
#ifdef QF_WITH_CUDA
  if (gpu) return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess;
#endif
  (void)gpu;
  memcpy(dst, src, bytes);
  return 0;
}

/* A host chunk of random bf16 values in [-4, 4), tiled over dst. */
#define CHUNK_ELEMS ((size_t)1 << 22)

static int fill(uint16_t *dst, const uint16_t *chunk, size_t elems, int gpu) {
  for (size_t i = 0; i < elems; i += CHUNK_ELEMS)
    if (upload(dst + i, chunk, (elems - i < CHUNK_ELEMS ? elems - i : CHUNK_ELEMS) * 2, gpu)) return 1;
  return 0;
}

static void *alloc(size_t bytes, int gpu) {
#ifdef QF_WITH_CUDA
  void *p = NULL;
  if (gpu) return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
#endif
  (void)gpu;
  return malloc(bytes);
}

static void release(void *p, int gpu) {
#ifdef QF_WITH_CUDA
  if (gpu) {
    cudaFree(p);
    return;
  }
#endif
  (void)gpu;
  free(p);
}

int bench_quant(qfb *b, qf_ctx *ctx, const qfb_select *sel, int *rows) {
  const int gpu = qfb_uses_gpu(b);
  /* Decode sizes (M = 1..128) and prefill sizes that fill the chip; the CPU runs a small default
   * with the first variant of each op. */
  static const int64_t gpu_m[] = {1, 16, 128, 4096, 16384}, gpu_k[] = {2048, 7168, 18432};
  static const int64_t cpu_m[] = {1, 64}, cpu_k[] = {4096};
  const int64_t *ms = gpu ? gpu_m : cpu_m, *ks = gpu ? gpu_k : cpu_k;
  const int nm = gpu ? 5 : 2, nk = gpu ? 3 : 1;
  const size_t m_max = (size_t)ms[nm - 1], k_max = (size_t)ks[nk - 1], mk = m_max * k_max;
  const DLDeviceType dev = gpu ? kDLCUDA : kDLCPU;

  int any = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) any |= qfb_op_selected(sel->ops, cases[i].op);
  if (!any) return 0;

  uint16_t *chunk = malloc(CHUNK_ELEMS * 2);
  if (!chunk) return 1;
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < CHUNK_ELEMS; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    chunk[i] = qf_bf16_from_f32(((float)(s >> 40) / 16777216.0f - 0.5f) * 8.0f);
  }
  /* x holds [M, 2H] for SiLU * Mul. The copy peer moves half of a row's effective bytes, which is
   * below 4 M K for every op, so x is its source and a buffer as large as x its destination.
   * Scales: fp32 for groups of 32 over padded rows bounds every layout. */
  const float hscale[4] = {8.0f / 448.0f, 0, 0, 0};
  buffers bf = {0};
  bf.x = alloc(4 * mk, gpu);
  bf.res = alloc(2 * mk, gpu);
  bf.w = alloc(2 * k_max, gpu);
  bf.q = alloc(mk, gpu);
  bf.scales = alloc(4 * (size_t)pad4((int64_t)m_max) * (k_max / 32), gpu);
  bf.azp = alloc(4 * (size_t)pad4((int64_t)m_max), gpu);
  bf.scale = alloc(32, gpu);
  bf.dst = gpu ? alloc(4 * mk, gpu) : NULL;
  const int ready = bf.x && bf.res && bf.w && bf.q && bf.scales && bf.azp && bf.scale && (bf.dst || !gpu) &&
                    !fill(bf.x, chunk, 2 * mk, gpu) && !fill(bf.res, chunk, mk, gpu) &&
                    !fill(bf.w, chunk, k_max, gpu) && !upload(bf.scale, hscale, sizeof hscale, gpu);
  int rc = !ready;
  if (!ready) fprintf(stderr, "bench_quant: allocating or filling the buffers failed\n");

  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && ready; ci++) {
    const quant_case *c = &cases[ci];
    if (!qfb_op_selected(sel->ops, c->op) || (!gpu && ci > 0 && !strcmp(cases[ci - 1].op, c->op))) continue;
    int failed = 0; /* a failing variant skips its remaining shapes; the others still run */
    for (int i = c->largest_m_only ? nm - 1 : 0; i < nm && !failed; i++) {
      if (sel->m && ms[i] != sel->m) continue;
      for (int j = 0; j < nk && !failed; j++) {
        if (sel->k && ks[j] != sel->k) continue;
        quant_call call;
        setup_call(&call, c, ctx, &bf, ms[i], ks[j], dev);
        const double bytes = effective_bytes(c, ms[i], ks[j]);
        char shape[64];
        snprintf(shape, sizeof shape, "M=%lld,%s=%lld", (long long)ms[i], c->kind == OP_SILU_MUL ? "H" : "K",
                 (long long)ks[j]);
        qfb_row row = {.op = c->op, .variant = c->variant, .shape = shape, .bytes = bytes};
        row.us = qfb_time_us(b, run_case, &call);
        row.floor_us = qfb_floor_us(b, bytes, 0, 0);
#ifdef QF_WITH_CUDA
        if (gpu && row.us > 0) { /* peer: copying the same number of bytes (read + write) */
          copy_call cc = {bf.x, bf.dst, (size_t)(bytes / 2) & ~(size_t)15};
          row.peer = "copy16";
          row.peer_us = qfb_time_us(b, run_copy, &cc);
        }
#endif
        failed = row.us <= 0;
        qfb_emit(b, &row);
        ++*rows;
      }
    }
    rc |= failed;
  }

  void *all[] = {bf.x, bf.res, bf.w, bf.q, bf.scales, bf.azp, bf.scale, bf.dst};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) release(all[i], gpu);
  free(chunk);
  return rc;
}
