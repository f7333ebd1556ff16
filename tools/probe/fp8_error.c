/* qfuse-probe-fp8-error: how far the block-scaled FP8 GEMM's D lies from the float64 reference,
 * for qfuse and for cuBLASLt's block-scaled GEMM (A scales VEC128_32F, B scales BLK128x128_32F) on
 * the same inputs, with fp32 and with bf16 D. Issue 4 asks fp32 D within 1e-4 relative Frobenius
 * error; docs/GEMM.md puts the floor in the tensor cores' own sum of a wgmma's 32 products, which
 * this measures against the other library that runs the same recipe on the same hardware.
 *
 * Data kinds:
 *   codes  any finite e4m3 code, scales log-uniform in [1e-4, 1e2] (the GPU test's random data);
 *   gauss  A and B drawn from N(0, 1) and quantized as the DeepSeek-V3 recipe does: per 1 x 128
 *          group of A and per 128 x 128 block of B, scale = amax / 448, code = e4m3(x / scale).
 * Each GEMM runs at M = 32, 128 and 4096 (the decode, 65-128-row and tall plans); its first 32 rows
 * are compared with the CPU backend (float64 sums of the blockwise formula, fp32 out). One line a
 * case: the relative Frobenius error of each of the four outputs over those rows, and the share of
 * those rows' values that the two libraries give bit for bit, and qfuse's fp32 error with
 * opts.fine_promotion (the tensor cores' sums promoted every 32 or 64 of K instead of 128).
 * Usage: qfuse-probe-fp8-error [--quick] (--quick: M = 32 and the two smallest weights only). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cublaslt.h"
#include "formats/formats.h"
#include "qfuse.h"

enum { ROWS = 32 }; /* rows compared with the reference */

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

static double uniform(uint64_t *s) { return (double)(next(s) >> 11) * 0x1.0p-53; }

static double normal(uint64_t *s) {
  const double u = uniform(s) + 0x1.0p-54, v = uniform(s);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* The inputs of one case on the host, in qfuse's layouts: A [M, K], As [KB, Mp] (column-major,
 * Mp = M rounded up to 4), B [N, K], Bs [NB, KB]; cuBLASLt's B scales [NB, KB4] (KB rounded up to 4). */
typedef struct {
  int64_t M, N, K, KB, NB, Mp, KB4;
  uint8_t *a, *b;
  float *as, *bs, *bs_lt;
} inputs;

static void quantize_block(const float *x, int64_t rows, int64_t cols, int64_t ld, uint8_t *q, float *scale) {
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(x[r * ld + c]));
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  *scale = s;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) q[r * ld + c] = qf_e4m3fn_from_f32(x[r * ld + c] / s);
}

/* Fills in with the data kind's values. Returns 0 on success. */
static int make_inputs(inputs *in, int gauss, uint64_t *seed) {
  const int64_t M = in->M, N = in->N, K = in->K, KB = in->KB, NB = in->NB;
  in->a = malloc((size_t)(M * K)), in->b = malloc((size_t)(N * K));
  in->as = calloc((size_t)(KB * in->Mp), sizeof(float)), in->bs = malloc((size_t)(NB * KB) * sizeof(float));
  in->bs_lt = calloc((size_t)(NB * in->KB4), sizeof(float));
  float *x = gauss ? malloc((size_t)(128 * K) * sizeof(float)) : NULL; /* 128 rows at a time */
  if (!in->a || !in->b || !in->as || !in->bs || !in->bs_lt || (gauss && !x)) return free(x), 1;
  if (!gauss) {
    for (int64_t i = 0; i < M * K; i++) in->a[i] = (uint8_t)next(seed);
    for (int64_t i = 0; i < N * K; i++) in->b[i] = (uint8_t)next(seed);
    for (int64_t i = 0; i < M * K; i++) in->a[i] ^= (in->a[i] & 0x7f) == 0x7f; /* NaN -> 448 */
    for (int64_t i = 0; i < N * K; i++) in->b[i] ^= (in->b[i] & 0x7f) == 0x7f;
    for (int64_t kb = 0; kb < KB; kb++)
      for (int64_t m = 0; m < M; m++) in->as[kb * in->Mp + m] = (float)exp(log(1e-4) + uniform(seed) * log(1e6));
    for (int64_t i = 0; i < NB * KB; i++) in->bs[i] = (float)exp(log(1e-4) + uniform(seed) * log(1e6));
  } else {
    for (int64_t r0 = 0; r0 < M; r0 += 128) { /* A: per row and 128 columns */
      const int64_t rows = M - r0 < 128 ? M - r0 : 128;
      for (int64_t i = 0; i < rows * K; i++) x[i] = (float)normal(seed);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t kb = 0; kb < KB; kb++) {
          const int64_t cols = K - kb * 128 < 128 ? K - kb * 128 : 128;
          quantize_block(x + r * K + kb * 128, 1, cols, K, in->a + (r0 + r) * K + kb * 128, &in->as[kb * in->Mp + r0 + r]);
        }
    }
    for (int64_t nb = 0; nb < NB; nb++) { /* B: per 128 x 128 block */
      const int64_t rows = N - nb * 128 < 128 ? N - nb * 128 : 128;
      for (int64_t i = 0; i < rows * K; i++) x[i] = (float)normal(seed);
      for (int64_t kb = 0; kb < KB; kb++) {
        const int64_t cols = K - kb * 128 < 128 ? K - kb * 128 : 128;
        quantize_block(x + kb * 128, rows, cols, K, in->b + nb * 128 * K + kb * 128, &in->bs[nb * KB + kb]);
      }
    }
  }
  for (int64_t nb = 0; nb < NB; nb++)
    for (int64_t kb = 0; kb < KB; kb++) in->bs_lt[nb * in->KB4 + kb] = in->bs[nb * KB + kb];
  free(x);
  return 0;
}

static void free_inputs(inputs *in) { free(in->a), free(in->b), free(in->as), free(in->bs), free(in->bs_lt); }

static DLTensor tensor(void *data, int cuda, qf_dtype dt, int64_t *shape, int64_t *strides) {
  DLTensor t = {.data = data, .device = {cuda ? kDLCUDA : kDLCPU, 0}, .ndim = 2, .dtype = qf_dtype_to_dl(dt),
                .shape = shape, .strides = strides};
  return t;
}

/* qf_gemm_fp8_blockscale on ctx over the given A, As (column-major with pitch Mp), B, Bs: D [M, N]. */
static qf_status run_qfuse(qf_ctx *ctx, int cuda, int64_t M, int64_t N, int64_t K, int64_t Mp, void *a, void *as,
                           void *b, void *bs, void *d, qf_dtype dt, const qf_gemm_blockscale_opts *opts) {
  const int64_t KB = (K + 127) / 128, NB = (N + 127) / 128;
  int64_t ash[2] = {M, K}, assh[2] = {KB, M}, asst[2] = {Mp, 1}, bsh[2] = {N, K}, bssh[2] = {NB, KB}, dsh[2] = {M, N};
  DLTensor ta = tensor(a, cuda, QF_E4M3FN, ash, NULL), tas = tensor(as, cuda, QF_F32, assh, asst);
  DLTensor tb = tensor(b, cuda, QF_E4M3FN, bsh, NULL), tbs = tensor(bs, cuda, QF_F32, bssh, NULL);
  DLTensor td = tensor(d, cuda, dt, dsh, NULL);
  qf_status st = qf_gemm_fp8_blockscale(ctx, &ta, &tas, &tb, &tbs, &td, opts);
  if (st != QF_OK) fprintf(stderr, "qf_gemm_fp8_blockscale: %s\n", qf_ctx_last_error(ctx));
  return st;
}

static double value(const void *d, int bf16, size_t i) {
  return bf16 ? qf_bf16_to_f32(((const uint16_t *)d)[i]) : ((const float *)d)[i];
}

/* Relative Frobenius error of the first ROWS rows of d (fp32 or bf16) against ref (fp32). */
static double frob(const void *d, int bf16, const float *ref, int64_t N) {
  double err = 0.0, want = 0.0;
  for (size_t i = 0; i < (size_t)(ROWS * N); i++) {
    const double e = value(d, bf16, i) - ref[i];
    err += e * e, want += (double)ref[i] * ref[i];
  }
  return sqrt(err / want);
}

static int one_case(qf_ctx *gpu, qf_ctx *cpu, qfb_lt *lt, int gauss, int64_t M, int64_t N, int64_t K) {
  inputs in = {.M = M, .N = N, .K = K, .KB = (K + 127) / 128, .NB = (N + 127) / 128, .Mp = (M + 3) / 4 * 4};
  in.KB4 = (in.KB + 3) / 4 * 4;
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(M * 1000003 + N * 131 + K + gauss);
  float *ref = malloc((size_t)(ROWS * N) * sizeof(float)), *ras = malloc((size_t)(in.KB * ROWS) * sizeof(float));
  void *h_out = malloc((size_t)(ROWS * N) * 4), *h_qf = malloc((size_t)(ROWS * N) * 4);
  void *a = NULL, *b = NULL, *as = NULL, *bs = NULL, *bs_lt = NULL, *d = NULL;
  int rc = 1;
  if (!ref || !ras || !h_out || !h_qf || make_inputs(&in, gauss, &seed)) goto done;

  /* The reference over the first ROWS rows: their scales as a [KB, ROWS] tensor. */
  for (int64_t kb = 0; kb < in.KB; kb++) memcpy(ras + kb * ROWS, in.as + kb * in.Mp, ROWS * sizeof(float));
  if (run_qfuse(cpu, 0, ROWS, N, K, ROWS, in.a, ras, in.b, in.bs, ref, QF_F32, NULL) != QF_OK) goto done;

  const size_t d_bytes = (size_t)(in.Mp * N) * 4;
  if (cudaMalloc(&a, (size_t)(M * K)) || cudaMalloc(&b, (size_t)(N * K)) ||
      cudaMalloc(&as, (size_t)(in.KB * in.Mp) * 4) || cudaMalloc(&bs, (size_t)(in.NB * in.KB) * 4) ||
      cudaMalloc(&bs_lt, (size_t)(in.NB * in.KB4) * 4) || cudaMalloc(&d, d_bytes) ||
      cudaMemcpy(a, in.a, (size_t)(M * K), cudaMemcpyHostToDevice) ||
      cudaMemcpy(b, in.b, (size_t)(N * K), cudaMemcpyHostToDevice) ||
      cudaMemcpy(as, in.as, (size_t)(in.KB * in.Mp) * 4, cudaMemcpyHostToDevice) ||
      cudaMemcpy(bs, in.bs, (size_t)(in.NB * in.KB) * 4, cudaMemcpyHostToDevice) ||
      cudaMemcpy(bs_lt, in.bs_lt, (size_t)(in.NB * in.KB4) * 4, cudaMemcpyHostToDevice)) {
    fprintf(stderr, "qfuse-probe-fp8-error: CUDA allocation or copy failed\n");
    goto done;
  }
  /* Four outputs: qfuse fp32, qfuse bf16, cuBLASLt fp32, cuBLASLt bf16 (-1: no run); and how
   * many of the compared values the two libraries give bit for bit, per D type. */
  double err[4] = {-1, -1, -1, -1}, same[2] = {-1, -1};
  for (int bf16 = 0; bf16 < 2; bf16++) {
    const size_t esz = bf16 ? 2 : 4, n = (size_t)(ROWS * N);
    if (cudaMemset(d, 0xff, d_bytes) ||
        run_qfuse(gpu, 1, M, N, K, in.Mp, a, as, b, bs, d, bf16 ? QF_BF16 : QF_F32, NULL) != QF_OK ||
        cudaMemcpy(h_qf, d, n * esz, cudaMemcpyDeviceToHost))
      goto done;
    err[bf16] = frob(h_qf, bf16, ref, N);
    qfb_lt_gemm *g = qfb_lt_gemm_plan_d(lt, in.Mp, N, K, QFB_LT_SCALE_BLK, bf16 ? CUDA_R_16BF : CUDA_R_32F);
    if (!g) continue; /* cuBLASLt has no algorithm for this D type: the message says so */
    const int lt_rc = cudaMemset(d, 0xff, d_bytes) || qfb_lt_gemm_run(g, a, b, as, bs_lt, d, 0) ||
                      cudaMemcpy(h_out, d, n * esz, cudaMemcpyDeviceToHost);
    qfb_lt_gemm_free(g);
    if (lt_rc) goto done;
    err[2 + bf16] = frob(h_out, bf16, ref, N);
    size_t equal = 0;
    for (size_t i = 0; i < n; i++) equal += !memcmp((char *)h_qf + i * esz, (char *)h_out + i * esz, esz);
    same[bf16] = (double)equal / (double)n;
  }
  /* qfuse's fp32 D with opts.fine_promotion (the tensor cores' sums promoted every 32, then 64 of K) */
  double fine[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    const qf_gemm_blockscale_opts fine_opts = {.fine_promotion = i ? 64 : 32};
    if (cudaMemset(d, 0xff, d_bytes) || run_qfuse(gpu, 1, M, N, K, in.Mp, a, as, b, bs, d, QF_F32, &fine_opts) != QF_OK ||
        cudaMemcpy(h_qf, d, (size_t)(ROWS * N) * 4, cudaMemcpyDeviceToHost))
      goto done;
    fine[i] = frob(h_qf, 0, ref, N);
  }
  printf("%-5s M=%-5lld N=%-6lld K=%-6lld  fp32: qfuse %.3e cublaslt %.3e (%.1f%% identical) qfuse fine %.3e fine64 %.3e  "
         "bf16: qfuse %.3e cublaslt %.3e (%.1f%% identical)\n",
         gauss ? "gauss" : "codes", (long long)M, (long long)N, (long long)K, err[0], err[2], 100.0 * same[0], fine[0],
         fine[1], err[1], err[3], 100.0 * same[1]);
  fflush(stdout);
  rc = 0;
done:
  if (rc) fprintf(stderr, "qfuse-probe-fp8-error: M=%lld N=%lld K=%lld failed\n", (long long)M, (long long)N, (long long)K);
  cudaFree(a), cudaFree(b), cudaFree(as), cudaFree(bs), cudaFree(bs_lt), cudaFree(d);
  free_inputs(&in), free(ref), free(ras), free(h_out), free(h_qf);
  return rc;
}

int main(int argc, char **argv) {
  const int quick = argc > 1 && !strcmp(argv[1], "--quick");
  static const int64_t nk[][2] = {{2112, 7168}, {7168, 2048}, {24576, 1536}, {32768, 512}, {4096, 7168}, {7168, 16384}};
  static const int64_t ms[] = {32, 128, 4096};
  qf_ctx *gpu = NULL, *cpu = NULL;
  qfb_lt *lt = NULL;
  if (qf_ctx_create(&gpu, QF_DEVICE_CUDA, 0) != QF_OK || qf_ctx_create(&cpu, QF_DEVICE_CPU, 0) != QF_OK ||
      !(lt = qfb_lt_open())) {
    fprintf(stderr, "qfuse-probe-fp8-error: needs a CUDA device, the CPU backend and cuBLASLt\n");
    return 1;
  }
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("# %s, qfuse %s, cuBLASLt %zu: relative Frobenius error of D's first %d rows against the float64 reference\n",
         prop.name, qf_version(), qfb_lt_version(), ROWS);
  int rc = 0;
  for (int gauss = 0; gauss < 2; gauss++)
    for (size_t j = 0; j < (quick ? 2 : sizeof nk / sizeof nk[0]); j++)
      for (size_t i = 0; i < (quick ? 1 : sizeof ms / sizeof ms[0]); i++)
        rc |= one_case(gpu, cpu, lt, gauss, ms[i], nk[j][0], nk[j][1]);
  qfb_lt_close(lt);
  qf_ctx_destroy(cpu), qf_ctx_destroy(gpu);
  return rc;
}
