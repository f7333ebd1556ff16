/* qf_vq_dequantize and qf_vq_gemm (VQ-GeMV, M of 1 to 16) on CUDA against the CPU reference
 * through the public API. Gaussian weights are quantized on the CPU (qf_vq_quantize, 3 Lloyd
 * iterations) in every paper configuration plus two custom formats (5-bit indices with two bf16
 * residuals and both scopes set; vector_size 3 with 7-bit indices and three residuals, the
 * generic path), then the same codes, codebooks and scales are copied to the GPU.
 *  - dequantize: fp32, fp16 and bf16 outputs byte for byte (the sum of entries in residual order
 *    is the same fp32 computation on both sides), with strided rows; outputs poisoned before the
 *    call, gaps and a sentinel after w compared too.
 *  - gemm: M in {1, 2, 3, 8, 16}, every pairing of fp32 / fp16 / bf16 x and y, strided rows (x's
 *    gaps hold NaN, so a kernel reading them poisons y), relative Frobenius error against the
 *    CPU's float64 accumulation below 1e-5 for fp32 y and 5e-3 for 16-bit y, y's gaps and
 *    sentinel untouched. Each through the public call (the heuristic's placement) and with each
 *    codebook placement forced (qf_cuda_vq_gemm_with), so both kernel policies run everywhere
 *    they can; a long-K shape makes x go through shared memory in chunks.
 *  - M = 17 is refused with QF_ERR_UNSUPPORTED and leaves y untouched. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "core/backend.h"
#include "cuda/vq/vq_heuristic.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : 2; }

static float get(const void *buf, qf_dtype dt, size_t i) {
  if (dt == QF_F32) return ((const float *)buf)[i];
  uint16_t h = ((const uint16_t *)buf)[i];
  return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

static void put(void *buf, qf_dtype dt, size_t i, float v) {
  if (dt == QF_F32) ((float *)buf)[i] = v;
  else ((uint16_t *)buf)[i] = dt == QF_BF16 ? qf_bf16_from_f32(v) : qf_f16_from_f32(v);
}

/* A quantized weight, on the host (the CPU reference's) and on the device. */
typedef struct {
  const char *name;
  qf_vq_format f;
  qf_vq_sizes sz;
  int64_t N, K;
  int64_t cshape[3], bshape[4], sshape[1];
  void *h_codes, *h_books, *h_scales, *d_codes, *d_books, *d_scales;
  size_t code_bytes, book_bytes;
} vq_weight;

static DLTensor w_codes(vq_weight *w, int gpu) {
  return dl_tensor(gpu ? w->d_codes : w->h_codes, QF_U8, 3, w->cshape, gpu ? kDLCUDA : kDLCPU);
}
static DLTensor w_books(vq_weight *w, int gpu) {
  return dl_tensor(gpu ? w->d_books : w->h_books, w->f.entry_dtype, 4, w->bshape, gpu ? kDLCUDA : kDLCPU);
}
static DLTensor w_scales(vq_weight *w, int gpu) {
  return dl_tensor(gpu ? w->d_scales : w->h_scales, QF_F32, 1, w->sshape, gpu ? kDLCUDA : kDLCPU);
}

static int make_weight(qf_ctx *cpu, vq_weight *w, const char *name, qf_vq_format f, int64_t N, int64_t K, uint64_t *seed) {
  memset(w, 0, sizeof *w);
  w->name = name, w->f = f, w->N = N, w->K = K;
  if (!CHECK(qf_vq_sizes_of(cpu, &f, N, K, &w->sz) == QF_OK, "%s: sizes: %s", name, qf_ctx_last_error(cpu))) return 0;
  w->cshape[0] = f.residuals, w->cshape[1] = N, w->cshape[2] = w->sz.row_bytes;
  w->bshape[0] = f.residuals, w->bshape[1] = w->sz.n_books, w->bshape[2] = w->sz.entries, w->bshape[3] = f.vector_size;
  w->sshape[0] = N;
  w->code_bytes = (size_t)(f.residuals * N * w->sz.row_bytes);
  w->book_bytes = (size_t)(f.residuals * w->sz.n_books * w->sz.entries * f.vector_size) * 2;
  w->h_codes = aligned_alloc(16, (w->code_bytes + 15) / 16 * 16);
  w->h_books = aligned_alloc(16, (w->book_bytes + 15) / 16 * 16);
  w->h_scales = aligned_alloc(16, (size_t)(N * 4 + 15) / 16 * 16);

  float *weights = malloc((size_t)(N * K) * sizeof *weights);
  for (int64_t i = 0; i < N * K; i++) weights[i] = rng_normal(seed) * 0.02f;
  tensor2d wt;
  tensor2d_init(&wt, weights, QF_F32, N, K, K, kDLCPU);
  DLTensor ct = w_codes(w, 0), bt = w_books(w, 0), st = w_scales(w, 0);
  qf_vq_quantize_opts o = {.iterations = 3, .seed = 77};
  qf_vq_stats stats;
  qf_status s = qf_vq_quantize(cpu, &wt.t, &f, &o, &ct, &bt, f.row_scale ? &st : NULL, &stats);
  free(weights);
  if (!CHECK(s == QF_OK, "%s: quantize: %s", name, qf_ctx_last_error(cpu))) return 0;
  printf("%s [%" PRId64 " x %" PRId64 "]: rel_mse %.4f\n", name, N, K, stats.rel_mse);

  w->d_codes = dev_alloc(w->code_bytes);
  w->d_books = dev_alloc(w->book_bytes);
  w->d_scales = dev_alloc((size_t)N * 4);
  CUDA_OK(cudaMemcpy(w->d_codes, w->h_codes, w->code_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(w->d_books, w->h_books, w->book_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(w->d_scales, w->h_scales, (size_t)N * 4, cudaMemcpyHostToDevice));
  return 1;
}

static void free_weight(vq_weight *w) {
  free(w->h_codes), free(w->h_books), free(w->h_scales);
  CUDA_OK(cudaFree(w->d_codes));
  CUDA_OK(cudaFree(w->d_books));
  CUDA_OK(cudaFree(w->d_scales));
}

/* ---- qf_vq_dequantize ------------------------------------------------------------------------ */

static void dequantize_case(qf_ctx *gpu, qf_ctx *cpu, vq_weight *w, qf_dtype dt, int64_t ld) {
  char desc[160];
  snprintf(desc, sizeof desc, "%s: dequantize -> %s ld=%" PRId64, w->name, qf_dtype_name(dt), ld);
  pair W;
  pair_init(&W, (size_t)(w->N * ld) * esz(dt), NULL);
  tensor2d cw, gw;
  tensor2d_init(&cw, W.ref, dt, w->N, w->K, ld, kDLCPU);
  tensor2d_init(&gw, W.dev, dt, w->N, w->K, ld, kDLCUDA);
  DLTensor cc = w_codes(w, 0), cb = w_books(w, 0), cs = w_scales(w, 0);
  DLTensor gc = w_codes(w, 1), gb = w_books(w, 1), gs = w_scales(w, 1);
  qf_status st = qf_vq_dequantize(cpu, &cc, &cb, w->f.row_scale ? &cs : NULL, &w->f, &cw.t);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  st = qf_vq_dequantize(gpu, &gc, &gb, w->f.row_scale ? &gs : NULL, &w->f, &gw.t);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&W, "w", desc);
  pair_free(&W);
}

/* ---- qf_vq_gemm -------------------------------------------------------------------------------- */

/* Coverage of the launch shapes the forced calls produced. */
static int ran_shared, ran_global, ran_chunked, ran_split_k;

/* Relative Frobenius error of y (M x N of an ld-pitched buffer) against the reference; every byte
 * outside the M x N elements (row gaps, the sentinel) must still equal the reference's poison. */
static double y_error(pair *Y, qf_dtype dt, int64_t M, int64_t N, int64_t ld, const char *desc) {
  CUDA_OK(cudaMemcpy(Y->got, Y->dev, Y->bytes, cudaMemcpyDeviceToHost));
  const size_t e = esz(dt);
  double num = 0.0, den = 0.0;
  size_t outside_bad = 0;
  for (size_t b = 0; b < Y->bytes; b++) {
    const size_t i = b / e;
    const int inside = (int64_t)i < M * ld && (int64_t)(i % (size_t)ld) < N;
    if (!inside) {
      outside_bad += Y->got[b] != Y->ref[b];
    } else if (b % e == 0) {
      const double g = get(Y->got, dt, i), r = get(Y->ref, dt, i);
      num += (g - r) * (g - r), den += r * r;
    }
  }
  CHECK(outside_bad == 0, "%s: %zu bytes outside y's elements changed (gaps or sentinel)", desc, outside_bad);
  CHECK(den > 0.0 && isfinite(den), "%s: the reference is zero or not finite", desc);
  return den > 0.0 ? sqrt(num / den) : INFINITY;
}

static void gemm_case(qf_ctx *gpu, qf_ctx *cpu, vq_weight *w, int64_t M, qf_dtype xt, qf_dtype yt, int forced,
                      uint64_t *seed) {
  const int64_t N = w->N, K = w->K, xld = K + 3, yld = N + 5;
  char desc[200];
  snprintf(desc, sizeof desc, "%s: gemm M=%" PRId64 " x %s y %s", w->name, M, qf_dtype_name(xt), qf_dtype_name(yt));

  /* x: Gaussian activations; the gaps of its strided rows hold NaN */
  void *hx = malloc((size_t)(M * xld) * esz(xt));
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < xld; k++) put(hx, xt, (size_t)(m * xld + k), k < K ? rng_normal(seed) : NAN);
  pair X, Y;
  pair_init(&X, (size_t)(M * xld) * esz(xt), hx);
  pair_init(&Y, (size_t)(M * yld) * esz(yt), NULL);
  tensor2d cx, gx, cy, gy;
  tensor2d_init(&cx, X.ref, xt, M, K, xld, kDLCPU);
  tensor2d_init(&gx, X.dev, xt, M, K, xld, kDLCUDA);
  tensor2d_init(&cy, Y.ref, yt, M, N, yld, kDLCPU);
  tensor2d_init(&gy, Y.dev, yt, M, N, yld, kDLCUDA);
  DLTensor cc = w_codes(w, 0), cb = w_books(w, 0), cs = w_scales(w, 0);
  DLTensor gc = w_codes(w, 1), gb = w_books(w, 1), gs = w_scales(w, 1);
  const double tol = yt == QF_F32 ? 1e-5 : 5e-3;

  qf_status st = qf_vq_gemm(cpu, &cx.t, &cc, &cb, w->f.row_scale ? &cs : NULL, &w->f, &cy.t);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));

  /* the public call: the heuristic's launch shape */
  st = qf_vq_gemm(gpu, &gx.t, &gc, &gb, w->f.row_scale ? &gs : NULL, &w->f, &gy.t);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  double err = y_error(&Y, yt, M, N, yld, desc);
  CHECK(err < tol, "%s: relative Frobenius error %.3g (tolerance %.0e)", desc, err, tol);

  /* each codebook placement forced, on the same tensors (y poisoned again before each) */
  const qf_vq_tensors t = {w->f, w->sz, N, K, w->d_codes, w->d_books, w->f.row_scale ? w->d_scales : NULL};
  const qf_mat xm = {X.dev, xt, M, K, xld}, ym = {Y.dev, yt, M, N, yld};
  const int placements[] = {QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED};
  for (int i = 0; forced && i < 2; i++) {
    char d2[240];
    snprintf(d2, sizeof d2, "%s, books in %s", desc, placements[i] == QF_VQ_BOOKS_IN_SHARED ? "shared" : "global");
    CUDA_OK(cudaMemset(Y.dev, POISON, Y.bytes));
    qf_vq_gemv_config used;
    st = qf_cuda_vq_gemm_with(gpu, &xm, &t, &ym, placements[i], &used);
    if (st == QF_ERR_UNSUPPORTED && placements[i] == QF_VQ_BOOKS_IN_SHARED) continue; /* books too large */
    if (!CHECK(st == QF_OK, "%s: gpu: %s", d2, qf_ctx_last_error(gpu))) continue;
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(used.placement == placements[i], "%s: ran placement %d", d2, used.placement);
    ran_shared += used.placement == QF_VQ_BOOKS_IN_SHARED;
    ran_global += used.placement == QF_VQ_BOOKS_IN_GLOBAL;
    ran_chunked += used.k_chunk < K;
    ran_split_k += used.warps_k > 1;
    err = y_error(&Y, yt, M, N, yld, d2);
    CHECK(err < tol, "%s: relative Frobenius error %.3g (tolerance %.0e; warps %d, warps_k %d, tile_rows %d, k_chunk %"
          PRId64 ")", d2, err, tol, used.warps, used.warps_k, used.tile_rows, used.k_chunk);
  }
  pair_check(&X, "x (input)", desc);
  pair_free(&X), pair_free(&Y);
  free(hx);
}

/* M = 17: QF_ERR_UNSUPPORTED, a message, y untouched. */
static void gemm_m17(qf_ctx *gpu, vq_weight *w) {
  const int64_t M = 17, N = w->N, K = w->K;
  pair X, Y;
  float *hx = malloc((size_t)(M * K) * sizeof *hx);
  for (int64_t i = 0; i < M * K; i++) hx[i] = 1.0f;
  pair_init(&X, (size_t)(M * K) * 4, hx);
  pair_init(&Y, (size_t)(M * N) * 4, NULL);
  tensor2d gx, gy;
  tensor2d_init(&gx, X.dev, QF_F32, M, K, K, kDLCUDA);
  tensor2d_init(&gy, Y.dev, QF_F32, M, N, N, kDLCUDA);
  DLTensor gc = w_codes(w, 1), gb = w_books(w, 1), gs = w_scales(w, 1);
  qf_status st = qf_vq_gemm(gpu, &gx.t, &gc, &gb, w->f.row_scale ? &gs : NULL, &w->f, &gy.t);
  CHECK(st == QF_ERR_UNSUPPORTED, "%s: gemm M=17 returned %s, expected QF_ERR_UNSUPPORTED", w->name, qf_status_str(st));
  CHECK(strstr(qf_ctx_last_error(gpu), "not built yet") != NULL, "%s: gemm M=17 message: %s", w->name,
        qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&Y, "y (untouched)", "gemm M=17");
  pair_free(&X), pair_free(&Y);
  free(hx);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x5EC7;

  qf_vq_format gptvq, cq2, cq4, aqlm;
  qf_vq_format_preset(QF_VQ_GPTVQ_2, &gptvq);
  qf_vq_format_preset(QF_VQ_CQ_2, &cq2);
  qf_vq_format_preset(QF_VQ_CQ_4, &cq4);
  qf_vq_format_preset(QF_VQ_AQLM_3, &aqlm);
  aqlm.row_scale = 1;
  const qf_vq_format odd_bits = {8, 5, 2, 64, 128, QF_BF16, 1};  /* 5-bit indices straddle words */
  const qf_vq_format generic = {3, 7, 3, 0, 96, QF_F16, 0};      /* no vector-size kernel of its own */
  const struct {
    const char *name;
    qf_vq_format f;
    int64_t N, K, quick_N, quick_K;
  } cases[] = {
      {"GPTVQ-2", gptvq, 512, 512, 256, 256},
      {"CQ-2", cq2, 1024, 256, 256, 128},
      {"CQ-4", cq4, 1024, 256, 256, 128},
      {"AQLM-3 (row scales)", aqlm, 256, 512, 64, 256},
      {"VQ<8,5,2> bf16, 64 x 128 scopes", odd_bits, 192, 384, 64, 256},
      {"VQ<3,7,3>, 96-column scopes", generic, 160, 288, 32, 192},
      {"GPTVQ-2 long K", gptvq, 64, 4096, 32, 2048},
  };
  const int64_t Ms[] = {1, 2, 3, 8, 16};
  const qf_dtype dts[] = {QF_F32, QF_F16, QF_BF16};

  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    vq_weight w;
    const int64_t N = quick ? cases[c].quick_N : cases[c].N, K = quick ? cases[c].quick_K : cases[c].K;
    if (!make_weight(cpu, &w, cases[c].name, cases[c].f, N, K, &seed)) continue;

    for (int d = 0; d < 3; d++) dequantize_case(gpu, cpu, &w, dts[d], dts[d] == QF_F32 ? K : K + 5);

    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
      for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
          if (quick && a != b) continue;
          /* the forced placements on a rotating third of the dtype pairs (all of them when quick) */
          const int forced = quick || (a + b + (int)mi) % 3 == 0;
          gemm_case(gpu, cpu, &w, Ms[mi], dts[a], dts[b], forced, &seed);
        }
    if (c == 0) gemm_m17(gpu, &w);
    free_weight(&w);
  }
  CHECK(ran_shared > 0 && ran_global > 0, "both codebook placements ran (shared %d, global %d)", ran_shared, ran_global);
  CHECK(ran_chunked > 0, "x was staged in chunks of K at least once");
  CHECK(ran_split_k > 0, "K was split across warps at least once");

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_vq");
}
