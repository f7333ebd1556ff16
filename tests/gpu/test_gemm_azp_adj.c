/* qf_gemm_azp_adj on CUDA against the CPU reference, exactly: aligned (vector path) and
 * misaligned or odd-K rows (byte path), multipliers, a sentinel after adj, and the refusal of a
 * multiplier that could overflow. */
#include <inttypes.h>
#include <string.h>

#include "gpu.h"

static void one_case(qf_ctx *gpu, qf_ctx *cpu, int64_t N, int64_t K, int64_t ld, int64_t offset, int32_t mult, uint64_t *seed) {
  const size_t bytes = (size_t)(N * ld + offset);
  int8_t *hb = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) hb[i] = (int8_t)(rng_next(seed) & 0xff);
  pair b, adj;
  pair_init(&b, bytes, hb);
  pair_init(&adj, (size_t)N * 4, NULL);
  tensor2d cb, gb;
  tensor2d_init(&cb, b.ref, QF_I8, N, K, ld, kDLCPU);
  tensor2d_init(&gb, b.dev, QF_I8, N, K, ld, kDLCUDA);
  cb.t.byte_offset = gb.t.byte_offset = (uint64_t)offset;
  int64_t n = N;
  DLTensor ca = {.data = adj.ref, .device = {kDLCPU, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = &n};
  DLTensor ga = ca;
  ga.data = adj.dev, ga.device.device_type = kDLCUDA;
  char desc[96];
  snprintf(desc, sizeof desc, "N=%" PRId64 " K=%" PRId64 " ld=%" PRId64 " offset=%" PRId64 " mult=%d", N, K, ld, offset, (int)mult);
  CHECK(qf_gemm_azp_adj(cpu, &cb.t, mult, &ca) == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  CHECK(qf_gemm_azp_adj(gpu, &gb.t, mult, &ga) == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&adj, "adj", desc);
  free(hb);
  pair_free(&b), pair_free(&adj);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0xADA;
  /* N, K, row pitch, byte offset of the data */
  const int64_t shapes[][4] = {{1, 16, 16, 0},   {3, 48, 48, 0},     {17, 528, 528, 0},  {33, 4096, 4096, 0},
                               {5, 100, 112, 0}, {7, 64, 80, 1},     {2112, 7168, 7168, 0}, {4096, 14336, 14336, 0},
                               {9, 31, 31, 3},   {70000, 16, 16, 0}};
  const int32_t mults[] = {1, -7, 1000};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    if (!quick || shapes[s][0] * shapes[s][1] < 200000)
      one_case(gpu, cpu, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], mults[s % 3], &seed);
  /* |multiplier| * 128 * K above int32: refused on CUDA, adj untouched */
  pair b, adj;
  int8_t ones[4 * 64];
  memset(ones, 1, sizeof ones);
  pair_init(&b, sizeof ones, ones);
  pair_init(&adj, 16, NULL);
  tensor2d gb;
  tensor2d_init(&gb, b.dev, QF_I8, 4, 64, 64, kDLCUDA);
  int64_t n = 4;
  DLTensor ga = {.data = adj.dev, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = qf_dtype_to_dl(QF_I32), .shape = &n};
  CHECK(qf_gemm_azp_adj(gpu, &gb.t, 1 << 20, &ga) == QF_ERR_VALUE && strstr(qf_ctx_last_error(gpu), "may overflow int32"),
        "overflow refused: %s", qf_ctx_last_error(gpu));
  pair_check(&adj, "adj after a refused call", "overflow");
  pair_free(&b), pair_free(&adj);
  qf_ctx_destroy(gpu), qf_ctx_destroy(cpu);
  return check_finish("gpu_gemm_azp_adj");
}
