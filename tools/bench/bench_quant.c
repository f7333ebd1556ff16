/* Quantization benchmarks: effective bandwidth (input read once + output written once) against
 * the copy ceiling, and a 16-byte copy of the same number of bytes as the baseline peer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "bench_ops.h"
#include "formats/formats.h"

typedef struct {
  qf_ctx *ctx;
  DLTensor x, q, scale;
  int64_t xshape[2], qshape[2], one;
} quant_call;

static int run_quant(void *arg) {
  quant_call *c = arg;
  qf_status st = qf_quant_per_tensor(c->ctx, &c->x, &c->scale, &c->q);
  if (st != QF_OK) fprintf(stderr, "qf_quant_per_tensor: %s\n", qf_ctx_last_error(c->ctx));
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

static void tensor(DLTensor *t, void *data, qf_dtype dt, int64_t *shape, int ndim, DLDeviceType dev) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device.device_type = dev;
  t->ndim = ndim;
  t->dtype = qf_dtype_to_dl(dt);
  t->shape = shape;
}

int bench_quant(qfb *b, qf_ctx *ctx) {
  const int gpu = qfb_uses_gpu(b);
  /* Decode sizes (M = 1..128) and prefill sizes that fill the chip; the CPU runs a small default. */
  static const int64_t gpu_m[] = {1, 16, 128, 4096, 16384}, gpu_k[] = {2048, 7168, 18432};
  static const int64_t cpu_m[] = {1, 64}, cpu_k[] = {4096};
  const int64_t *ms = gpu ? gpu_m : cpu_m, *ks = gpu ? gpu_k : cpu_k;
  const int nm = gpu ? 5 : 2, nk = gpu ? 3 : 1;
  const size_t max_elems = (size_t)ms[nm - 1] * (size_t)ks[nk - 1];
  const DLDeviceType dev = gpu ? kDLCUDA : kDLCPU;

  /* Random bf16 activations, generated once on the host. */
  uint16_t *hx = malloc(max_elems * 2);
  if (!hx) return 1;
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < max_elems; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    hx[i] = qf_bf16_from_f32(((float)(s >> 40) / 16777216.0f - 0.5f) * 8.0f);
  }
  float hscale = 8.0f / 448.0f;
  void *x = hx, *q = NULL, *scale = &hscale;
  int rc = 0;
#ifdef QF_WITH_CUDA
  if (gpu) {
    if (cudaMalloc(&x, max_elems * 2) != cudaSuccess || cudaMalloc(&q, max_elems) != cudaSuccess ||
        cudaMalloc(&scale, sizeof(float)) != cudaSuccess ||
        cudaMemcpy(x, hx, max_elems * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(scale, &hscale, sizeof hscale, cudaMemcpyHostToDevice) != cudaSuccess) {
      fprintf(stderr, "bench_quant: device allocation failed\n");
      return 1;
    }
  }
#endif
  if (!gpu && !(q = malloc(max_elems))) return 1;

  for (int i = 0; i < nm && !rc; i++) {
    for (int j = 0; j < nk && !rc; j++) {
      quant_call c = {.ctx = ctx, .one = 1};
      c.xshape[0] = c.qshape[0] = ms[i];
      c.xshape[1] = c.qshape[1] = ks[j];
      tensor(&c.x, x, QF_BF16, c.xshape, 2, dev);
      tensor(&c.q, q, QF_E4M3FN, c.qshape, 2, dev);
      tensor(&c.scale, scale, QF_F32, &c.one, 1, dev);
      double bytes = (double)ms[i] * (double)ks[j] * 3.0;
      qfb_row row = {.op = "quant_per_tensor", .variant = "bf16->e4m3fn", .bytes = bytes};
      char shape[64];
      snprintf(shape, sizeof shape, "M=%lld,K=%lld", (long long)ms[i], (long long)ks[j]);
      row.shape = shape;
      row.us = qfb_time_us(b, run_quant, &c);
      row.floor_us = qfb_floor_us(b, bytes, 0, 0);
#ifdef QF_WITH_CUDA
      if (gpu) { /* peer: copying the same number of bytes (read + write) */
        copy_call cc = {x, q, (size_t)(bytes / 2) & ~(size_t)15};
        row.peer = "copy16";
        row.peer_us = qfb_time_us(b, run_copy, &cc);
      }
#endif
      if (row.us <= 0) rc = 1;
      qfb_emit(b, &row);
    }
  }
#ifdef QF_WITH_CUDA
  if (gpu) cudaFree(x), cudaFree(q), cudaFree(scale);
#endif
  if (!gpu) free(q);
  free(hx);
  return rc;
}
