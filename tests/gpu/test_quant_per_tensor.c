/* qf_quant_per_tensor on CUDA against the CPU reference, bit for bit: every input dtype and
 * output dtype, odd shapes, strided and misaligned-pitch rows, NaN/Inf/outliers, bad scales,
 * poisoned outputs with the row gaps and a sentinel tail checked, and a tensor of more than
 * 2^31 elements. */
#include <inttypes.h>
#include <string.h>

#include "check.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

enum { TAIL = 256 };

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : t == QF_I8 || t == QF_E4M3FN ? 1 : 2; }

static void fill_input(void *buf, qf_dtype dt, size_t n, uint64_t *seed) {
  for (size_t i = 0; i < n; i++) {
    float v = rng_activation(seed, 1.5f, 1);
    if (dt == QF_F32) ((float *)buf)[i] = v;
    else ((uint16_t *)buf)[i] = dt == QF_BF16 ? qf_bf16_from_f32(v) : qf_f16_from_f32(v);
  }
}

static void one_case(qf_ctx *gpu, qf_ctx *cpu, qf_dtype xt, qf_dtype qt, int64_t rows, int64_t cols, int64_t xld,
                     int64_t qld, float scale, uint64_t *seed) {
  size_t xbytes = (size_t)(rows * xld) * esz(xt), qbytes = (size_t)(rows * qld) + TAIL;
  void *hx = malloc(xbytes);
  uint8_t *ref = malloc(qbytes), *got = malloc(qbytes);
  fill_input(hx, xt, (size_t)(rows * xld), seed);
  memset(ref, POISON, qbytes);

  void *dx = dev_alloc(xbytes), *dq = dev_alloc(qbytes);
  float *ds = dev_alloc(sizeof(float));
  CUDA_OK(cudaMemcpy(dx, hx, xbytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dq, POISON, qbytes));
  CUDA_OK(cudaMemcpy(ds, &scale, sizeof scale, cudaMemcpyHostToDevice));

  _Alignas(16) float hs[4] = {scale};
  int64_t one = 1;
  tensor2d cx, cq, gx, gq;
  tensor2d_init(&cx, hx, xt, rows, cols, xld, kDLCPU);
  tensor2d_init(&cq, ref, qt, rows, cols, qld, kDLCPU);
  tensor2d_init(&gx, dx, xt, rows, cols, xld, kDLCUDA);
  tensor2d_init(&gq, dq, qt, rows, cols, qld, kDLCUDA);
  DLTensor cs = {.data = hs, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
  DLTensor gs = cs;
  gs.data = ds;
  gs.device.device_type = kDLCUDA;

  CHECK(qf_quant_per_tensor(cpu, &cx.t, &cs, &cq.t) == QF_OK, "cpu: %s", qf_ctx_last_error(cpu));
  qf_status st = qf_quant_per_tensor(gpu, &gx.t, &gs, &gq.t);
  CHECK(st == QF_OK, "gpu: %s", qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got, dq, qbytes, cudaMemcpyDeviceToHost));

  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < qbytes; i++)
    if (got[i] != ref[i] && bad++ == 0) first = (int64_t)i;
  CHECK(bad == 0, "%s->%s rows=%" PRId64 " cols=%" PRId64 " xld=%" PRId64 " qld=%" PRId64 " scale=%g: %" PRId64
        " bytes differ, first at %" PRId64 " (gpu 0x%02x, cpu 0x%02x)", qf_dtype_name(xt), qf_dtype_name(qt), rows, cols,
        xld, qld, scale, bad, first, first >= 0 ? got[first] : 0, first >= 0 ? ref[first] : 0);
  /* The CPU reference leaves gaps and the tail poisoned, so equality covers them; say so if not. */
  CHECK(got[qbytes - 1] == POISON, "sentinel past the end overwritten");

  cudaFree(dx), cudaFree(dq), cudaFree(ds);
  free(hx), free(ref), free(got);
}

/* More than 2^31 elements: the rows around the 2^31 boundary and the last rows must match the
 * CPU reference run on the same rows (64-bit offsets, never wrapped). */
static void test_huge(qf_ctx *gpu, qf_ctx *cpu) {
  const int64_t rows = 524289, cols = 4096; /* rows * cols = 2^31 + 4096 */
  size_t n = (size_t)(rows * cols);
  uint16_t *dx = dev_alloc(n * 2);
  uint8_t *dq = dev_alloc(n + TAIL);
  float scale = 0.01f, *ds = dev_alloc(sizeof(float));
  CUDA_OK(cudaMemcpy(ds, &scale, sizeof scale, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dq, POISON, n + TAIL));
  /* Fill 8 probe rows with random data (the rest stays whatever cudaMemset left: bf16 0x3c3c). */
  CUDA_OK(cudaMemset(dx, 0x3c, n * 2));
  const int64_t probe[] = {0, 1, 524286, 524287, 524288};
  uint64_t seed = 77;
  uint16_t *hrow = malloc((size_t)cols * 2);
  for (size_t p = 0; p < sizeof probe / sizeof probe[0]; p++) {
    fill_input(hrow, QF_BF16, (size_t)cols, &seed);
    CUDA_OK(cudaMemcpy(dx + probe[p] * cols, hrow, (size_t)cols * 2, cudaMemcpyHostToDevice));
  }
  tensor2d gx, gq;
  tensor2d_init(&gx, dx, QF_BF16, rows, cols, cols, kDLCUDA);
  tensor2d_init(&gq, dq, QF_E4M3FN, rows, cols, cols, kDLCUDA);
  int64_t one = 1;
  DLTensor gs = {.data = ds, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
  CHECK(qf_quant_per_tensor(gpu, &gx.t, &gs, &gq.t) == QF_OK, "huge: %s", qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());

  uint8_t *got = malloc((size_t)cols), *ref = malloc((size_t)cols);
  _Alignas(16) float hs[4] = {scale};
  DLTensor cs = {.data = hs, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_F32), .shape = &one};
  for (size_t p = 0; p < sizeof probe / sizeof probe[0]; p++) {
    CUDA_OK(cudaMemcpy(hrow, dx + probe[p] * cols, (size_t)cols * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got, dq + probe[p] * cols, (size_t)cols, cudaMemcpyDeviceToHost));
    tensor2d cx, cq;
    tensor2d_init(&cx, hrow, QF_BF16, 1, cols, cols, kDLCPU);
    tensor2d_init(&cq, ref, QF_E4M3FN, 1, cols, cols, kDLCPU);
    CHECK(qf_quant_per_tensor(cpu, &cx.t, &cs, &cq.t) == QF_OK, "huge cpu row");
    CHECK(memcmp(got, ref, (size_t)cols) == 0, "huge tensor: row %" PRId64 " differs from the reference", probe[p]);
  }
  CHECK(dev_poisoned(dq + n, TAIL), "huge tensor: sentinel past the end overwritten");
  cudaFree(dx), cudaFree(dq), cudaFree(ds);
  free(hrow), free(got), free(ref);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0xC0FFEE;
  const qf_dtype xts[] = {QF_BF16, QF_F16, QF_F32}, qts[] = {QF_E4M3FN, QF_I8};
  /* rows, cols, extra x pitch, extra q pitch */
  const int64_t shapes[][4] = {{1, 1, 0, 0},     {1, 8, 0, 0},     {2, 16, 0, 0},    {3, 17, 0, 0},
                               {17, 64, 0, 0},   {5, 7168, 8, 16}, {7, 200, 3, 5},   {4097, 2048, 0, 0},
                               {64, 18432, 0, 8}, {1, 4097, 0, 0},  {70000, 16, 0, 0}};
  const float scales[] = {0.0123f, 1.0f, 300.0f};
  for (size_t a = 0; a < 3; a++)
    for (size_t b = 0; b < 2; b++)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        if (!quick || shapes[s][0] * shapes[s][1] < 100000)
          one_case(gpu, cpu, xts[a], qts[b], shapes[s][0], shapes[s][1], shapes[s][1] + shapes[s][2],
                 shapes[s][1] + shapes[s][3], scales[s % 3], &seed);
  const float bad_scales[] = {0.0f, -2.0f, NAN, INFINITY};
  for (size_t b = 0; b < 4; b++) {
    one_case(gpu, cpu, QF_BF16, QF_E4M3FN, 3, 40, 40, 48, bad_scales[b], &seed);
    one_case(gpu, cpu, QF_F32, QF_I8, 3, 40, 40, 48, bad_scales[b], &seed);
  }
  if (!quick) test_huge(gpu, cpu);
  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_quant_per_tensor");
}
