/* qf_vq_dequantize and qf_vq_gemm (VQ-GeMV for M of 1 to 16, VQ-GeMM on the tensor cores above) on
 * CUDA against the CPU reference through the public API. Gaussian weights are quantized on the CPU
 * (qf_vq_quantize, 3 Lloyd iterations; QuIP#-4 on its E8P lattice books, which no shared placement
 * holds: those forced calls are refused) in every paper configuration plus custom formats (5-bit
 * indices with two bf16 residuals and both scopes set; vector_size 3 with 7-bit indices and three
 * residuals, the element-wise path; vector size 2 with 6-bit and with 8-bit indices; vector size 4
 * with 10-bit indices and K = 4 past a whole chunk; GPTVQ-2 with bf16 entries) and two shapes with
 * odd N (and K, where the format allows: AQLM-3 needs K a multiple of 8 only), then the same
 * codes, codebooks and scales are copied to the GPU.
 *  - dequantize: fp32, fp16 and bf16 outputs byte for byte (the sum of entries in residual order
 *    is the same fp32 computation on both sides), with dense rows (a vector's outputs stored in one
 *    access) and odd-pitched rows (element by element); outputs poisoned before the call, gaps and
 *    a sentinel after w compared too.
 *  - gemm: M in {1, 2, 3, 8, 9, 16} (GeMV: x tiles of 8 and 16 rows) and {17, 33, 129, 1000}
 *    (GeMM: 32 rows), fp32 / fp16 / bf16 x and y (every pairing for the small M, the same dtype on
 *    both sides for the large ones), x rows strided for even M (the gaps hold NaN, so a kernel
 *    reading them poisons y) and contiguous for odd M (so x of the MMA's type takes the direct B
 *    loads), y strided and poisoned with a sentinel tail; relative Frobenius error against the
 *    CPU's float64 accumulation below 1e-5 for fp32 y and 5e-3 for 16-bit y, y's gaps and
 *    sentinel untouched. Each through the public call (the router and the heuristic's placement)
 *    and with each codebook placement forced (qf_cuda_vq_gemm_with for the GeMV,
 *    qf_cuda_vq_gemm_mma_with for the GeMM, which also runs a few small M), so both kernel
 *    policies run everywhere they can; the banked GeMV (vq_gemv_banked.cu) where its limits allow
 *    it (refused with y untouched elsewhere), also with its split-K forced to 1, 3 and one split
 *    per chunk, and refused for more splits than chunks; the tiled GeMM (vq_gemm_tiled.cu, with its
 *    E8P decoder for QuIP#-4 and its whole books for AQLM-3's 12-bit indices) likewise for M > 16,
 *    with its split-K forced to 1, 3 and one split per 64 columns; the table GeMV (vq_gemv_lut.cu:
 *    M = 1, one book per residual: AQLM-3, VQ<4,10,1>, VQ<8,8,2>) likewise, with its split-K forced
 *    to 1, 3 and one range per item, each with the rows per block that fit and with 64 (several row
 *    ranges); the E8P GeMV (vq_gemv_e8p.cu, the banked placement of a lattice format: QuIP#-4 with
 *    fp16 x and K a multiple of 256) likewise, with its split-K forced to 1, 3 and one range per
 *    chunk; the register tier over the shared books (GPTVQ-2 and VQ<2,8,1>
 *    with 256 x 512 scopes; refused elsewhere) likewise; the tile-table GeMV (vq_gemv_lut_tiles.cu:
 *    GPTVQ-2, fp16 or bf16 y; M = 1, 2 (x rows 4-byte aligned: the test's even pitch at M = 2) and
 *    3, a pair of rows then one) likewise over 256-column chunks (at K = 8192, 32 splits: the
 *    last unit's sum loads 16 partials at a time, so that takes two batches), and refused, y
 *    untouched, for x 2 bytes off 4-byte alignment. The shapes cover: K a multiple of the
 *    kernel's 256-column chunks and not (the careful last chunk), K of 1 to 32 chunks (the 8
 *    warps of a block split K: some idle, some with several chunks), N not a multiple of 16,
 *    books narrower than a lane's 16 columns (CQ), 8-bit codes with vector sizes 2, 4, 8 and other
 *    widths with each, vector size 3 (element-wise), bf16 entries; the coverage counts at the end
 *    check that each kernel path ran.
 *    Tolerances: the tensor cores get x and the entries as 16-bit parts that sum to them exactly
 *    (vq_gemm.cuh), so every product is exact and only the fp32 accumulation differs from the
 *    reference: the tensor core's sum inside a 64-column sub-chunk (4 x parts x entry parts MMAs
 *    into a zeroed fragment), then one round-to-nearest add per sub-chunk and the 8 warps' sums;
 *    for the K <= 4096 here that is ~1e-6 relative at most, well inside 1e-5. 16-bit y adds its
 *    own rounding (bf16: 2^-9 relative at worst, ~1e-3 rms), inside 5e-3.
 *  - QF_VQ_BOOKS (the public call's placement switch): global and shared give the same results,
 *    an unknown value is QF_ERR_VALUE with y untouched. */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "core/backend.h"
#include "cuda/vq/vq_gemm_heuristic.h"
#include "cuda/vq/vq_heuristic.h"
#include "formats/formats.h"
#include "gpu.h"
#include "tensors.h"

static size_t esz(qf_dtype t) { return t == QF_F32 ? 4 : 2; }

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

static int make_weight(qf_ctx *cpu, vq_weight *w, const char *name, qf_vq_format f, int64_t N, int64_t K,
                       uint64_t *seed) {
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

/* Coverage of the launch shapes the forced calls produced: placements, x tiles of 8, 16 and 32
 * rows (index m_tiles8), direct and element-wise B, parts of x (index 1-3) and of the entries. */
static int ran_lattice; /* lattice_case comparisons */
static int ran_registers_vs[2]; /* runs of the register tier, [vector size 2] */
static int ran_shared, ran_global, ran_tiles8[5], ran_warps_k[9], ran_direct, ran_elementwise, ran_x_parts[4],
    ran_entry_parts2, ran_mma_f16, refused_shared, ran_banked, ran_banked_vs[9], ran_banked_one_split,
    ran_banked_splits, ran_tiled, ran_tiled_vs[9], ran_tiled_rows[3], ran_tiled_residuals2, ran_tiled_bf16,
    ran_tiled_whole[2], ran_tiled_one_split, ran_tiled_splits, ran_lut, ran_lut_vs[9], ran_lut_m2, ran_lut_pairs, ran_lut_one_split,
    ran_lut_splits, ran_lut_row_ranges, ran_packed, ran_packed_splits, ran_packed_row_ranges, ran_e8p,
    ran_e8p_one_split, ran_e8p_splits, ran_banked16, ran_e8p16, /* the last two: x tiles of 16 rows */
    ran_lut_tiles, ran_lut_tiles_one_split, ran_lut_tiles_splits, /* the tile-table GeMV (lut placement, GPTVQ) */
    ran_lut_tiles_m2, ran_lut_tiles_pairs,     /* ... at M = 2, and per pair of rows (M = 3, 4) */
    ran_packed_tiles, ran_packed_tiles_splits, /* ... on packed codes */
    ran_lut_tiles_f32_refused;                 /* its refusals of fp32 y */
static int bn_turn; /* rotates the forced tile heights */

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
      const double g = float_get(Y->got, dt, i), r = float_get(Y->ref, dt, i);
      num += (g - r) * (g - r), den += r * r;
    }
  }
  CHECK(outside_bad == 0, "%s: %zu bytes outside y's elements changed (gaps or sentinel)", desc, outside_bad);
  CHECK(den > 0.0 && isfinite(den), "%s: the reference is zero or not finite", desc);
  return den > 0.0 ? sqrt(num / den) : INFINITY;
}

/* A kernel with its split-K forced (the banked GeMV over 256-column chunks, the tiled GeMM over
 * 64-column k-steps: `units` of K): one K range per tile (y written by the unit), three, and one
 * per unit (the partials added in split order by the last unit), each against the reference in
 * Y->ref; then one range more than units: refused, y untouched. */
typedef qf_status (*split_kernel)(qf_ctx *, const qf_mat *, const qf_vq_tensors *, const qf_mat *, int,
                                  qf_vq_mma_config *);
static void forced_splits(qf_ctx *gpu, split_kernel run, const char *name, int placement, int64_t units,
                          const qf_mat *xm, const qf_vq_tensors *t, const qf_mat *ym, pair *Y, int64_t yld, double tol,
                          const char *desc, int *ran_one, int *ran_several) {
  for (int sp = 0; sp < 3; sp++) {
    const int splits = sp == 0 ? 1 : sp == 1 ? 3 : (int)units;
    if (splits > units || (sp == 2 && units <= 3)) continue;
    char d3[240];
    snprintf(d3, sizeof d3, "%s, %s, %d K splits", desc, name, splits);
    CUDA_OK(cudaMemset(Y->dev, POISON, Y->bytes));
    qf_vq_mma_config used;
    qf_status st = run(gpu, xm, t, ym, splits, &used);
    if (!CHECK(st == QF_OK, "%s: gpu: %s", d3, qf_ctx_last_error(gpu))) continue;
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(used.splits == splits && used.placement == placement, "%s: ran %d splits", d3, used.splits);
    *ran_one += splits == 1;
    *ran_several += splits > 1;
    const double err = y_error(Y, ym->dtype, ym->rows, ym->cols, yld, d3);
    CHECK(err < tol, "%s: relative Frobenius error %.3g (tolerance %.0e)", d3, err, tol);
  }
  CUDA_OK(cudaMemset(Y->dev, POISON, Y->bytes));
  qf_status st = run(gpu, xm, t, ym, (int)units + 1, NULL);
  CHECK(st == QF_ERR_UNSUPPORTED, "%s: %s, %lld splits of %lld K units gave %s", desc, name, (long long)units + 1,
        (long long)units, qf_status_str(st));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(dev_poisoned(Y->dev, Y->bytes), "%s: %s, y written after a refused split", desc, name);
}

/* The table GeMV with its K ranges forced, and its rows per block: as many as fit, or 64. */
static qf_status lut_rows_fit(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                              qf_vq_mma_config *used) {
  return qf_cuda_vq_gemv_lut_with(ctx, x, w, y, splits, 0, used);
}
static qf_status lut_rows_64(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y, int splits,
                             qf_vq_mma_config *used) {
  qf_status st = qf_cuda_vq_gemv_lut_with(ctx, x, w, y, splits, 64, used);
  CHECK(st != QF_OK || !used || used->tile_n == 64, "lut: ran %d rows per block, 64 forced", used ? used->tile_n : 0);
  return st;
}

/* packed_case's kernel runs on the packed codes tp (`desc` names the case), against Y->ref. */
typedef void (*packed_forced)(qf_ctx *gpu, const vq_weight *w, const qf_mat *xm, const qf_vq_tensors *tp,
                              const qf_mat *ym, pair *Y, int64_t yld, double tol, const char *desc);

/* The table GeMV of one book per residual (AQLM): its K ranges forced (1, 3, one per item) with as
 * many rows per block as fit and with 512 (several row ranges when N > 512); rows per block not in
 * whole packed tiles refused, y untouched. */
static void packed_lut_forced(qf_ctx *gpu, const vq_weight *w, const qf_mat *xm, const qf_vq_tensors *tp,
                              const qf_mat *ym, pair *Y, int64_t yld, double tol, const char *desc) {
  const int64_t items = (w->K / w->f.vector_size + 7) / 8 * w->f.residuals;
  for (int rows = 0; rows <= 512; rows += 512)
    for (int sp = 0; sp < 3; sp++) {
      const int splits = sp == 0 ? 1 : sp == 1 ? 3 : (int)items;
      if (splits > items) continue;
      char d3[300];
      snprintf(d3, sizeof d3, "%s, %d K splits, rows per block %d", desc, splits, rows);
      CUDA_OK(cudaMemset(Y->dev, POISON, Y->bytes));
      qf_vq_mma_config used;
      qf_status st = qf_cuda_vq_gemv_lut_with(gpu, xm, tp, ym, splits, rows, &used);
      if (!CHECK(st == QF_OK, "%s: gpu: %s", d3, qf_ctx_last_error(gpu))) continue;
      CUDA_OK(cudaDeviceSynchronize());
      const double err = y_error(Y, ym->dtype, ym->rows, ym->cols, yld, d3);
      CHECK(err < tol && used.splits == splits, "%s: relative Frobenius error %.3g (tolerance %.0e)", d3, err, tol);
      ran_packed_splits += splits > 1;
      ran_packed_row_ranges += used.tiles_n > 1;
    }
  CUDA_OK(cudaMemset(Y->dev, POISON, Y->bytes));
  qf_status st = qf_cuda_vq_gemv_lut_with(gpu, xm, tp, ym, 0, 64, NULL);
  CHECK(st == QF_ERR_UNSUPPORTED, "%s: 64 rows per block on packed codes gave %s", desc, qf_status_str(st));
  CHECK(dev_poisoned(Y->dev, Y->bytes), "%s: y written after a refused call", desc);
}

/* The tile-table GeMV (books per tile of W, GPTVQ): its K ranges forced (1, 3, one per 256-column chunk). */
static void packed_lut_tiles_forced(qf_ctx *gpu, const vq_weight *w, const qf_mat *xm, const qf_vq_tensors *tp,
                                    const qf_mat *ym, pair *Y, int64_t yld, double tol, const char *desc) {
  forced_splits(gpu, qf_cuda_vq_gemv_lut_tiles_with, "lut (tile tables)", QF_VQ_BOOKS_LUT, w->K / 256, xm, tp, ym, Y,
                yld, tol, desc, &ran_packed_tiles, &ran_packed_tiles_splits);
}

/* A table GeMV on packed codes (qf_vq_pack_gemv): packed on the GPU, byte for byte the CPU's
 * packing; the public call at M = 1 against the reference in Y->ref; the kernel's own runs
 * (`forced`); M = 5 on packed codes (past the table GeMVs' M) refused with y untouched. */
static void packed_case(qf_ctx *gpu, qf_ctx *cpu, vq_weight *w, const qf_mat *xm, const qf_vq_tensors *t,
                        const qf_mat *ym, const DLTensor *gx, const DLTensor *gy, pair *Y, int64_t yld, double tol,
                        const char *desc, packed_forced forced) {
  int64_t shape[4];
  if (!CHECK(qf_vq_pack_gemv_shape(cpu, &w->f, w->N, w->K, shape) == QF_OK, "%s: pack shape: %s", desc,
             qf_ctx_last_error(cpu)))
    return;
  const size_t bytes = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]);
  pair P;
  pair_init(&P, bytes, NULL);
  DLTensor cc = w_codes(w, 0), gc = w_codes(w, 1), gb = w_books(w, 1), gs = w_scales(w, 1);
  DLTensor cp = dl_tensor(P.ref, QF_U8, 4, shape, kDLCPU), gp = dl_tensor(P.dev, QF_U8, 4, shape, kDLCUDA);
  CHECK(qf_vq_pack_gemv(cpu, &cc, &w->f, w->K, &cp) == QF_OK && qf_vq_pack_gemv(gpu, &gc, &w->f, w->K, &gp) == QF_OK,
        "%s: pack: %s / %s", desc, qf_ctx_last_error(cpu), qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&P, "packed codes", desc);

  char d2[260];
  snprintf(d2, sizeof d2, "%s, packed codes", desc);
  CUDA_OK(cudaMemset(Y->dev, POISON, Y->bytes));
  qf_status st = qf_vq_gemm(gpu, gx, &gp, &gb, w->f.row_scale ? &gs : NULL, &w->f, (DLTensor *)gy);
  if (CHECK(st == QF_OK, "%s: gpu: %s", d2, qf_ctx_last_error(gpu))) {
    CUDA_OK(cudaDeviceSynchronize());
    const double err = y_error(Y, ym->dtype, ym->rows, ym->cols, yld, d2);
    CHECK(err < tol, "%s: relative Frobenius error %.3g (tolerance %.0e)", d2, err, tol);
    ran_packed++;
  }
  qf_vq_tensors tp = *t;
  tp.codes = P.dev, tp.packed = 1;
  forced(gpu, w, xm, &tp, ym, Y, yld, tol, d2);
  /* M = 5: refused, y untouched */
  CUDA_OK(cudaMemset(Y->dev, POISON, Y->bytes));
  int64_t xs2[2] = {5, w->K}, ys2[2] = {5, w->N};
  DLTensor gx2 = *gx, gy2 = *gy;
  gx2.shape = xs2, gy2.shape = ys2, gx2.strides = gy2.strides = NULL;
  void *x2buf = dev_alloc((size_t)(5 * w->K) * esz(xm->dtype));
  CUDA_OK(cudaMemset(x2buf, 0, (size_t)(5 * w->K) * esz(xm->dtype)));
  gx2.data = x2buf;
  void *y2buf = dev_alloc((size_t)(5 * w->N) * esz(ym->dtype));
  CUDA_OK(cudaMemset(y2buf, POISON, (size_t)(5 * w->N) * esz(ym->dtype)));
  gy2.data = y2buf;
  st = qf_vq_gemm(gpu, &gx2, &gp, &gb, w->f.row_scale ? &gs : NULL, &w->f, &gy2);
  CHECK(st == QF_ERR_UNSUPPORTED, "%s: M = 5 on packed codes gave %s", d2, qf_status_str(st));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(dev_poisoned(y2buf, (size_t)(5 * w->N) * esz(ym->dtype)) && dev_poisoned(Y->dev, Y->bytes),
        "%s: y written after a refused call", d2);
  CUDA_OK(cudaFree(x2buf));
  CUDA_OK(cudaFree(y2buf));
  pair_free(&P);
}

static void gemm_case(qf_ctx *gpu, qf_ctx *cpu, vq_weight *w, int64_t M, qf_dtype xt, qf_dtype yt, int forced,
                      uint64_t *seed) {
  /* x rows strided for even M: an odd pitch, but an even one at M = 2 (4-byte aligned rows, which the
   * tile-table GeMV's copies of x take) */
  const int64_t N = w->N, K = w->K, xld = M % 2 ? K : M == 2 ? K + 2 : K + 3, yld = N + 5;
  char desc[200];
  snprintf(desc, sizeof desc, "%s: gemm M=%" PRId64 " x %s y %s", w->name, M, qf_dtype_name(xt), qf_dtype_name(yt));

  /* x: Gaussian activations; the gaps of its strided rows hold NaN */
  void *hx = malloc((size_t)(M * xld) * esz(xt));
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < xld; k++) float_put(hx, xt, (size_t)(m * xld + k), k < K ? rng_normal(seed) : NAN);
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
  const qf_vq_tensors t = {w->f, w->sz, N, K, w->d_codes, w->d_books, w->f.row_scale ? w->d_scales : NULL, 0};
  const qf_mat xm = {X.dev, xt, M, K, xld}, ym = {Y.dev, yt, M, N, yld};
  const int placements[] = {QF_VQ_BOOKS_IN_GLOBAL, QF_VQ_BOOKS_IN_SHARED, QF_VQ_BOOKS_BANKED, QF_VQ_BOOKS_TILED,
                            QF_VQ_BOOKS_LUT, QF_VQ_BOOKS_REGISTERS};
  static const char *const place_names[] = {"?", "global", "shared", "banked", "tiled", "lut", "registers"};
  const qf_vq_mma_problem hot_pb = {.index_bits = w->f.index_bits, .vector_size = w->f.vector_size,
                                    .scope_rows = w->f.scope_rows, .scope_cols = w->f.scope_cols,
                                    .entries = w->sz.entries, .lattice = w->f.lattice};
  for (int i = 0; forced && i < 6; i++) {
    char d2[240];
    snprintf(d2, sizeof d2, "%s, books in %s", desc, place_names[placements[i]]);
    /* v 0: the GeMV, for its M; v 1: the GeMM, for M above the GeMV's and for small M too when
     * `forced` asks for it (2). Each with the heuristic's tile height (f 0) and a forced one of
     * 16, 32, 64 and 128 rows of W in turn (f 1: 8, 4, 2 or 1 row groups splitting K). */
    for (int v = M > QF_VQ_GEMV_MAX_M; v <= (M > QF_VQ_GEMV_MAX_M || forced == 2 ? 1 : 0); v++)
      for (int f = 0; f < 2; f++) {
        const int mm = v > 0, bn = f ? 16 << (bn_turn++ % 4) : 0;
        char d3[280];
        snprintf(d3, sizeof d3, "%s (%s, tile height %d)", d2, mm ? "VQ-GeMM" : "VQ-GeMV", bn);
        CUDA_OK(cudaMemset(Y.dev, POISON, Y.bytes));
        qf_vq_mma_config used;
        if (f)
          st = qf_cuda_vq_mma_with(gpu, &xm, &t, &ym, placements[i], mm ? QF_VQ_GEMM_M_TILES8 : 0, bn, &used);
        else
          st = mm ? qf_cuda_vq_gemm_mma_with(gpu, &xm, &t, &ym, placements[i], 0, &used)
                  : qf_cuda_vq_gemm_with(gpu, &xm, &t, &ym, placements[i], &used);
        if (placements[i] == QF_VQ_BOOKS_BANKED && (mm || bn || qf_cuda_vq_banked_refusal(&xm, &t) != NULL)) {
          /* the banked GeMV runs its own launch shape, for its formats only: refused, y untouched */
          CHECK(st == QF_ERR_UNSUPPORTED, "%s: banked placement outside its limits gave %s", d3, qf_status_str(st));
          CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", d3);
          continue;
        }
        if (placements[i] == QF_VQ_BOOKS_TILED && (!mm || bn || qf_cuda_vq_tiled_refusal(&xm, &t) != NULL)) {
          /* the tiled GeMM runs its own launch shape, for its formats only: refused, y untouched */
          CHECK(st == QF_ERR_UNSUPPORTED, "%s: tiled placement outside its limits gave %s", d3, qf_status_str(st));
          CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", d3);
          continue;
        }
        if (placements[i] == QF_VQ_BOOKS_LUT &&
            (mm || bn ||
             (qf_cuda_vq_lut_refusal(&xm, &t, &ym) != NULL && qf_cuda_vq_lut_tiles_refusal(&xm, &t, &ym) != NULL))) {
          /* the table GeMVs run their own launch shape at M = 1 (AQLM's also at 2 to 4), for their formats
           * only: refused, y untouched */
          CHECK(st == QF_ERR_UNSUPPORTED, "%s: lut placement outside its limits gave %s", d3, qf_status_str(st));
          CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", d3);
          continue;
        }
        if (placements[i] == QF_VQ_BOOKS_REGISTERS && (mm || !qf_vq_hot_ok(&hot_pb))) {
          /* the register tier: VQ-GeMV's x tiles, 8-bit indices with vs 2 or 4, one book per warp
           * and chunk only: refused, y untouched */
          CHECK(st == QF_ERR_UNSUPPORTED, "%s: register tier outside its limits gave %s", d3, qf_status_str(st));
          CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", d3);
          continue;
        }
        if (st == QF_ERR_UNSUPPORTED && (placements[i] == QF_VQ_BOOKS_IN_SHARED || placements[i] == QF_VQ_BOOKS_REGISTERS)) {
          /* books too large (counted) or a forced tile that straddles row scopes; y untouched */
          const int straddles = bn && w->f.scope_rows && w->f.scope_rows % bn;
          if (!straddles && placements[i] == QF_VQ_BOOKS_IN_SHARED) refused_shared++;
          CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", d3);
          continue;
        }
        if (!CHECK(st == QF_OK, "%s: gpu: %s", d3, qf_ctx_last_error(gpu))) continue;
        CUDA_OK(cudaDeviceSynchronize());
        err = y_error(&Y, yt, M, N, yld, d3);
        const int want_tiles8 = placements[i] == QF_VQ_BOOKS_TILED ? (M <= 64 ? 8 : 16) /* x rows per tile / 8 */
                                : mm                               ? QF_VQ_GEMM_M_TILES8
                                : M <= 8                           ? 1
                                                                   : 2;
        CHECK(used.placement == placements[i] && used.m_tiles8 == want_tiles8 && (!bn || used.tile_n == bn),
              "%s: ran placement %d, tiles of %d x %d rows", d3, used.placement, used.tile_n, used.tile_m);
        ran_shared += used.placement == QF_VQ_BOOKS_IN_SHARED;
        ran_global += used.placement == QF_VQ_BOOKS_IN_GLOBAL;
        if (used.placement == QF_VQ_BOOKS_REGISTERS) ran_registers_vs[w->f.vector_size == 2]++;
        if (used.placement == QF_VQ_BOOKS_BANKED && w->f.lattice) ran_e8p++, ran_e8p16 += used.m_tiles8 == 2;
        else if (used.placement == QF_VQ_BOOKS_BANKED)
          ran_banked++, ran_banked16 += used.m_tiles8 == 2, ran_banked_vs[w->f.vector_size <= 8 ? w->f.vector_size : 0]++;
        if (used.placement == QF_VQ_BOOKS_LUT) {
          if (qf_cuda_vq_lut_refusal(&xm, &t, &ym) != NULL)
            ran_lut_tiles++, ran_lut_tiles_m2 += used.tile_m == 2, ran_lut_tiles_pairs += used.tiles_m > 1;
          else ran_lut++, ran_lut_vs[w->f.vector_size <= 8 ? w->f.vector_size : 0]++, ran_lut_m2 += used.tile_m == 2,
               ran_lut_pairs += used.tiles_m > 1;
        } else if (used.placement == QF_VQ_BOOKS_TILED) {
          ran_tiled++, ran_tiled_vs[w->f.vector_size <= 8 ? w->f.vector_size : 0]++;
          ran_tiled_rows[used.tile_m == 64 ? 1 : used.tile_m == 128 ? 2 : 0]++;
          ran_tiled_residuals2 += w->f.residuals == 2;
          ran_tiled_bf16 += used.mma_bf16;
          if (qf_cuda_vq_whole_books(&w->f)) ran_tiled_whole[used.tile_m == 128]++; /* AQLM's whole books */
        } else {  /* the other kernels' launch shapes */
          ran_tiles8[used.m_tiles8 >= 1 && used.m_tiles8 <= 4 ? used.m_tiles8 : 0]++;
          ran_warps_k[used.warps_k >= 1 && used.warps_k <= 8 ? used.warps_k : 0]++;
          ran_direct += used.x_direct != 0;
          ran_elementwise += used.x_direct == 0;
          ran_x_parts[used.x_parts & 3]++;
          ran_entry_parts2 += used.entry_parts == 2;
          ran_mma_f16 += !used.mma_bf16;
        }
        CHECK(err < tol, "%s: relative Frobenius error %.3g (tolerance %.0e; tiles of %d x %d rows, warps_k %d, %s "
              "operands, x parts %d, entry parts %d, %s B, smem %zu)", d3, err, tol, used.tile_n, used.tile_m,
              used.warps_k, used.mma_bf16 ? "bf16" : "fp16", used.x_parts, used.entry_parts,
              used.x_direct ? "direct" : "element-wise", used.smem_bytes);
      }
  }
  if (forced && M <= QF_VQ_GEMV_MAX_M && qf_cuda_vq_banked_refusal(&xm, &t) == NULL)
    forced_splits(gpu, qf_cuda_vq_gemv_banked_with, w->f.lattice ? "banked (E8P)" : "banked", QF_VQ_BOOKS_BANKED,
                  K / QF_VQ_MMA_CHUNK, &xm, &t, &ym, &Y, yld, tol, desc,
                  w->f.lattice ? &ran_e8p_one_split : &ran_banked_one_split,
                  w->f.lattice ? &ran_e8p_splits : &ran_banked_splits);
  if (forced && qf_cuda_vq_lut_refusal(&xm, &t, &ym) == NULL) {
    /* the table GeMV's K ranges over items (8-vector chunks x residuals), with as many rows per
     * block as fit and with 64 (several row ranges) */
    const int64_t items = (K / w->f.vector_size + 7) / 8 * w->f.residuals;
    forced_splits(gpu, lut_rows_fit, "lut", QF_VQ_BOOKS_LUT, items, &xm, &t, &ym, &Y, yld, tol, desc,
                  &ran_lut_one_split, &ran_lut_splits);
    forced_splits(gpu, lut_rows_64, "lut, 64 rows per block", QF_VQ_BOOKS_LUT, items, &xm, &t, &ym, &Y, yld, tol, desc,
                  &ran_lut_row_ranges, &ran_lut_row_ranges);
    packed_case(gpu, cpu, w, &xm, &t, &ym, &gx.t, &gy.t, &Y, yld, tol, desc, packed_lut_forced);
  }
  if (forced && qf_cuda_vq_lut_tiles_refusal(&xm, &t, &ym) == NULL)
    packed_case(gpu, cpu, w, &xm, &t, &ym, &gx.t, &gy.t, &Y, yld, tol, desc, packed_lut_tiles_forced);
  if (forced && qf_cuda_vq_lut_tiles_refusal(&xm, &t, &ym) == NULL) { /* K ranges over 256-column chunks */
    forced_splits(gpu, qf_cuda_vq_gemv_lut_tiles_with, "lut (tile tables)", QF_VQ_BOOKS_LUT, K / 256, &xm, &t, &ym, &Y,
                  yld, tol, desc, &ran_lut_tiles_one_split, &ran_lut_tiles_splits);
    /* x 2 bytes past 4-byte alignment (its chunks come in 4-byte copies): refused */
    qf_mat x2 = xm;
    x2.data = (char *)xm.data + 2;
    CUDA_OK(cudaMemset(Y.dev, POISON, Y.bytes));
    const qf_status st = qf_cuda_vq_gemv_lut_tiles_with(gpu, &x2, &t, &ym, 0, NULL);
    CHECK(st == QF_ERR_UNSUPPORTED, "%s: lut (tile tables), x 2 bytes off 4-byte alignment gave %s", desc,
          qf_status_str(st));
    /* the same y as fp32 (its table values are 16-bit): refused, y untouched */
    qf_mat y32 = ym;
    y32.dtype = QF_F32;
    const qf_status st32 = qf_cuda_vq_gemv_lut_tiles_with(gpu, &xm, &t, &y32, 0, NULL);
    CHECK(st32 == QF_ERR_UNSUPPORTED, "%s: lut (tile tables), fp32 y gave %s", desc, qf_status_str(st32));
    ran_lut_tiles_f32_refused += st32 == QF_ERR_UNSUPPORTED;
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: lut (tile tables), y written after a refused call", desc);
  }
  if (forced && M > QF_VQ_GEMV_MAX_M && qf_cuda_vq_tiled_refusal(&xm, &t) == NULL)
    forced_splits(gpu, qf_cuda_vq_gemm_tiled_with, "tiled", QF_VQ_BOOKS_TILED, K / 64, &xm, &t, &ym, &Y, yld, tol, desc,
                  &ran_tiled_one_split, &ran_tiled_splits);
  pair_check(&X, "x (input)", desc);
  pair_free(&X), pair_free(&Y);
  free(hx);
}

/* The tile-table GeMV under programmatic dependent launch (qf_ctx_set_pdl), on a square weight:
 * ROUNDS rounds of y1 = W x_r into one shared buffer and y2_r = W y1 into a buffer of the round,
 * launched back to back without a synchronization. Each y2_r must equal, byte for byte, the same
 * two calls with PDL off and the device synchronized between them: a GeMV that read y1 before the
 * one writing it had finished, or wrote y1 while the one before still read it, would compute from
 * another round's y1. The rounds' y2 differ from one another (checked). A third pass captures the
 * two calls once in a CUDA graph (a PDL context on its own stream, the workspace reserved first)
 * with x and y2 in buffers of their own and replays it each round after copying x_r in: the same
 * bytes again. */
static void gemv_pdl_chain(qf_ctx *gpu, const vq_weight *w, uint64_t *seed) {
  enum { ROUNDS = 6 };
  const int64_t K = w->K;
  if (w->N != K || w->f.entry_dtype != QF_F16) return; /* (x and y below are fp16) */
  qf_ctx *pdl = NULL;
  if (!CHECK(qf_ctx_create(&pdl, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_pdl(pdl, 1) == QF_OK, "%s: PDL context",
             w->name))
    return;
  const size_t bytes = (size_t)K * 2;
  uint16_t *hx = malloc(bytes);
  void *x[ROUNDS], *y2[ROUNDS], *y2_ref[ROUNDS], *y2_graph[ROUNDS], *y1 = dev_alloc(bytes);
  void *gx = dev_alloc(bytes), *gy = dev_alloc(bytes); /* the graph's x and y2 */
  for (int r = 0; r < ROUNDS; r++) {
    for (int64_t k = 0; k < K; k++) float_put(hx, QF_F16, (size_t)k, rng_normal(seed));
    x[r] = dev_alloc(bytes), y2[r] = dev_alloc(bytes), y2_ref[r] = dev_alloc(bytes), y2_graph[r] = dev_alloc(bytes);
    CUDA_OK(cudaMemcpy(x[r], hx, bytes, cudaMemcpyHostToDevice));
  }
  const qf_vq_tensors t = {w->f, w->sz, K, K, w->d_codes, w->d_books, w->f.row_scale ? w->d_scales : NULL, 0};
  const qf_mat m1 = {y1, QF_F16, 1, K, K};
  int ok = 1;
  for (int pass = 0; pass < 2 && ok; pass++) /* pass 0: the reference, PDL off and synchronized */
    for (int r = 0; r < ROUNDS && ok; r++) {
      qf_ctx *ctx = pass ? pdl : gpu;
      const qf_mat mx = {x[r], QF_F16, 1, K, K}, my = {pass ? y2[r] : y2_ref[r], QF_F16, 1, K, K};
      ok = CHECK(qf_cuda_vq_gemv_lut_tiles_with(ctx, &mx, &t, &m1, 0, NULL) == QF_OK &&
                     (pass || cudaDeviceSynchronize() == cudaSuccess) &&
                     qf_cuda_vq_gemv_lut_tiles_with(ctx, &m1, &t, &my, 0, NULL) == QF_OK,
                 "%s: PDL chain, pass %d round %d: %s", w->name, pass, r, qf_ctx_last_error(ctx));
      if (!pass) CUDA_OK(cudaDeviceSynchronize());
    }
  CUDA_OK(cudaDeviceSynchronize());
  /* the CUDA graph */
  graph_ctx gr;
  ok = graph_open(&gr, 1, qf_ctx_workspace_bytes(gpu), w->name) && ok;
  if (ok) {
    const qf_mat mx = {gx, QF_F16, 1, K, K}, my = {gy, QF_F16, 1, K, K};
    graph_begin(&gr);
    const int calls_ok = qf_cuda_vq_gemv_lut_tiles_with(gr.ctx, &mx, &t, &m1, 0, NULL) == QF_OK &&
                         qf_cuda_vq_gemv_lut_tiles_with(gr.ctx, &m1, &t, &my, 0, NULL) == QF_OK;
    ok = graph_end(&gr, calls_ok, w->name);
  }
  for (int r = 0; r < ROUNDS && ok; r++) {
    CUDA_OK(cudaMemcpy(gx, x[r], bytes, cudaMemcpyDeviceToDevice));
    graph_replay(&gr);
    CUDA_OK(cudaMemcpy(y2_graph[r], gy, bytes, cudaMemcpyDeviceToDevice));
  }
  graph_close(&gr);
  uint16_t *got = malloc(bytes), *want = malloc(bytes), *prev = malloc(bytes);
  for (int g = 0; g < 2 && ok; g++)
    for (int r = 0; r < ROUNDS; r++) {
      CUDA_OK(cudaMemcpy(got, g ? y2_graph[r] : y2[r], bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(want, y2_ref[r], bytes, cudaMemcpyDeviceToHost));
      CHECK(memcmp(got, want, bytes) == 0, "%s: %s chain, round %d: y2 differs from the synchronized calls'", w->name,
            g ? "CUDA graph" : "PDL", r);
      if (r) CHECK(memcmp(got, prev, bytes) != 0, "%s: %s chain, rounds %d and %d gave the same y2", w->name,
                   g ? "CUDA graph" : "PDL", r - 1, r);
      memcpy(prev, got, bytes);
    }
  for (int r = 0; r < ROUNDS; r++) {
    CUDA_OK(cudaFree(x[r]));
    CUDA_OK(cudaFree(y2[r]));
    CUDA_OK(cudaFree(y2_ref[r]));
    CUDA_OK(cudaFree(y2_graph[r]));
  }
  CUDA_OK(cudaFree(y1));
  CUDA_OK(cudaFree(gx));
  CUDA_OK(cudaFree(gy));
  free(hx), free(got), free(want), free(prev);
  qf_ctx_destroy(pdl);
}

/* QF_VQ_BOOKS through the public call at M (GeMV or GeMM): global and shared (where the format
 * allows it) match the reference, an unknown value is QF_ERR_VALUE naming the variable, y
 * untouched. Unset again afterwards. */
static void gemm_env(qf_ctx *gpu, qf_ctx *cpu, vq_weight *w, int64_t M, uint64_t *seed) {
  const int64_t N = w->N, K = w->K;
  char desc[160];
  snprintf(desc, sizeof desc, "%s: QF_VQ_BOOKS, M=%" PRId64, w->name, M);
  float *hx = malloc((size_t)(M * K) * sizeof *hx);
  for (int64_t i = 0; i < M * K; i++) hx[i] = rng_normal(seed);
  pair X, Y;
  pair_init(&X, (size_t)(M * K) * 4, hx);
  pair_init(&Y, (size_t)(M * N) * 4, NULL);
  tensor2d cx, gx, cy, gy;
  tensor2d_init(&cx, X.ref, QF_F32, M, K, K, kDLCPU);
  tensor2d_init(&gx, X.dev, QF_F32, M, K, K, kDLCUDA);
  tensor2d_init(&cy, Y.ref, QF_F32, M, N, N, kDLCPU);
  tensor2d_init(&gy, Y.dev, QF_F32, M, N, N, kDLCUDA);
  DLTensor cc = w_codes(w, 0), cb = w_books(w, 0), cs = w_scales(w, 0);
  DLTensor gc = w_codes(w, 1), gb = w_books(w, 1), gs = w_scales(w, 1);
  qf_status st = qf_vq_gemm(cpu, &cx.t, &cc, &cb, w->f.row_scale ? &cs : NULL, &w->f, &cy.t);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));

  setenv("QF_VQ_BOOKS", "no-such-place", 1);
  st = qf_vq_gemm(gpu, &gx.t, &gc, &gb, w->f.row_scale ? &gs : NULL, &w->f, &gy.t);
  CHECK(st == QF_ERR_VALUE && strstr(qf_ctx_last_error(gpu), "QF_VQ_BOOKS") != NULL,
        "%s: an unknown value gave %s: %s", desc, qf_status_str(st), qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", desc);

  const char *values[] = {"global", "shared", "auto", "banked", "tiled", "lut"};
  for (int i = 0; i < 6; i++) {
    char d2[200];
    snprintf(d2, sizeof d2, "%s=%s", desc, values[i]);
    setenv("QF_VQ_BOOKS", values[i], 1);
    CUDA_OK(cudaMemset(Y.dev, POISON, Y.bytes));
    st = qf_vq_gemm(gpu, &gx.t, &gc, &gb, w->f.row_scale ? &gs : NULL, &w->f, &gy.t);
    if (st == QF_ERR_UNSUPPORTED && (i == 1 || i >= 3)) { /* shared, banked, tiled or lut impossible here: the message says why */
      CHECK(strstr(qf_ctx_last_error(gpu), values[i]) != NULL && strstr(qf_ctx_last_error(gpu), "QF_VQ_BOOKS") != NULL,
            "%s: message: %s", d2, qf_ctx_last_error(gpu));
      CUDA_OK(cudaDeviceSynchronize());
      CHECK(dev_poisoned(Y.dev, Y.bytes), "%s: y written after a refused call", d2);
      continue;
    }
    if (!CHECK(st == QF_OK, "%s: gpu: %s", d2, qf_ctx_last_error(gpu))) continue;
    CUDA_OK(cudaDeviceSynchronize());
    const double err = y_error(&Y, QF_F32, M, N, N, d2);
    CHECK(err < 1e-5, "%s: relative Frobenius error %.3g", d2, err);
  }
  unsetenv("QF_VQ_BOOKS");
  pair_free(&X), pair_free(&Y);
  free(hx);
}

/* A lattice format (QuIP#-4): the GeMV and GeMM decode the E8P lattice from each index (vq_e8p.cuh)
 * instead of reading the books. The decoded entries are the books' bits, so y must equal, bit for
 * bit, the same kernels' y on the same books read as books (the format without its lattice), with
 * the heuristic's tile height and forced ones of 16 and 64 rows; y poisoned before each call. */
static void lattice_case(qf_ctx *gpu, vq_weight *w, int64_t M, qf_dtype xt, qf_dtype yt, uint64_t *seed) {
  const int64_t N = w->N, K = w->K;
  void *hx = malloc((size_t)(M * K) * esz(xt));
  for (int64_t i = 0; i < M * K; i++) float_put(hx, xt, (size_t)i, rng_normal(seed));
  pair X, Y, Z;
  pair_init(&X, (size_t)(M * K) * esz(xt), hx);
  pair_init(&Y, (size_t)(M * N) * esz(yt), NULL);
  pair_init(&Z, (size_t)(M * N) * esz(yt), NULL);
  qf_vq_tensors lat = {w->f, w->sz, N, K, w->d_codes, w->d_books, w->f.row_scale ? w->d_scales : NULL, 0};
  qf_vq_tensors books = lat;
  books.fmt.lattice = 0;
  const qf_mat xm = {X.dev, xt, M, K, K}, ym = {Y.dev, yt, M, N, N}, zm = {Z.dev, yt, M, N, N};
  for (int mm = M > QF_VQ_GEMV_MAX_M; mm < 2; mm++)
    for (int f = 0; f < 3; f++) {
      char desc[200];
      const int bn = f == 0 ? 0 : f == 1 ? 16 : 64;
      snprintf(desc, sizeof desc, "%s: %s M=%" PRId64 " x %s y %s, tile height %d: lattice against books", w->name,
               mm ? "VQ-GeMM" : "VQ-GeMV", M, qf_dtype_name(xt), qf_dtype_name(yt), bn);
      CUDA_OK(cudaMemset(Y.dev, POISON, Y.bytes));
      CUDA_OK(cudaMemset(Z.dev, POISON, Z.bytes));
      const int tiles8 = mm ? QF_VQ_GEMM_M_TILES8 : 0;
      qf_status a = qf_cuda_vq_mma_with(gpu, &xm, &lat, &ym, QF_VQ_BOOKS_IN_GLOBAL, tiles8, bn, NULL);
      qf_status b = qf_cuda_vq_mma_with(gpu, &xm, &books, &zm, QF_VQ_BOOKS_IN_GLOBAL, tiles8, bn, NULL);
      CHECK(a == QF_OK && b == QF_OK, "%s: %s / %s", desc, qf_status_str(a), qf_status_str(b));
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy(Y.ref, Y.dev, Y.bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(Z.ref, Z.dev, Z.bytes, cudaMemcpyDeviceToHost));
      CHECK(!memcmp(Y.ref, Z.ref, Y.bytes) && !dev_poisoned(Y.dev, Y.bytes), "%s: y differs or is unwritten", desc);
      ran_lattice++;
    }
  pair_free(&X), pair_free(&Y), pair_free(&Z);
  free(hx);
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0x5EC7;

  qf_vq_format gptvq, cq2, cq4, aqlm, quip4;
  qf_vq_format_preset(QF_VQ_GPTVQ_2, &gptvq);
  qf_vq_format_preset(QF_VQ_CQ_2, &cq2);
  qf_vq_format_preset(QF_VQ_CQ_4, &cq4);
  qf_vq_format_preset(QF_VQ_AQLM_3, &aqlm);
  qf_vq_format_preset(QF_VQ_QUIP_4, &quip4);
  aqlm.row_scale = 1;
  const qf_vq_format odd_bits = {8, 5, 2, 64, 128, QF_BF16, 1, 0};  /* 5-bit indices straddle words */
  const qf_vq_format generic = {3, 7, 3, 0, 96, QF_F16, 0, 0};      /* no vector-size kernel of its own */
  const qf_vq_format pairs = {2, 6, 2, 32, 64, QF_F16, 1, 0};         /* vector size 2, 6-bit indices */
  const qf_vq_format quads10 = {4, 10, 1, 0, 0, QF_BF16, 0, 0};       /* vector size 4, 10-bit indices */
  const qf_vq_format gptvq_bf16 = {4, 8, 1, 256, 256, QF_BF16, 1, 0}; /* 8-bit codes, bf16 entries */
  const qf_vq_format gptvq_r2 = {4, 8, 2, 256, 256, QF_F16, 0, 0};    /* GPTVQ-2's layout with two residuals */
  const qf_vq_format pairs8 = {2, 8, 1, 0, 128, QF_F16, 0, 0};        /* vector size 2, 8-bit indices */
  const qf_vq_format octs8 = {8, 8, 2, 0, 0, QF_F16, 0, 0};           /* vector size 8, 8-bit indices (banked) */
  const qf_vq_format aqlm_bf16 = {8, 12, 2, 0, 0, QF_BF16, 0, 0};     /* AQLM-3's layout, bf16 entries */
  const qf_vq_format pairs8_wide = {2, 8, 1, 256, 512, QF_BF16, 1, 0}; /* vector size 2, 256 x 512 scopes (banked) */
  /* E8P lattices with codebook scopes: a book per 64 x 512 block and one residual (the E8P GeMV's
   * book per row scope and chunk range); per 128 x 256 block and two residuals, without row scales
   * (the tiled GeMM too; its rows' spread exceeds what one book scale fits, so its rel_mse is high:
   * what is tested is that every kernel computes the reference's product of those books) */
  const qf_vq_format e8p_1 = {8, 16, 1, 64, 512, QF_F16, 1, QF_VQ_LATTICE_E8P};
  const qf_vq_format e8p_2 = {8, 16, 2, 128, 256, QF_F16, 0, QF_VQ_LATTICE_E8P};
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
      {"GPTVQ-2 longer K (over 16 tile-table splits)", gptvq, 32, 8192, 32, 4608},
      {"GPTVQ-2 odd N", gptvq, 300, 512, 97, 256},
      {"AQLM-3 (row scales) odd N and K", aqlm, 203, 520, 45, 136},
      {"AQLM-3 (row scales), three 512-row tiles", aqlm, 1100, 256, 600, 128},
      {"AQLM-3 bf16 entries, long K", aqlm_bf16, 136, 2048, 136, 1024},
      {"VQ<2,6,2> fp16, 32 x 64 scopes", pairs, 96, 320, 48, 192},
      {"VQ<4,10,1> bf16", quads10, 80, 1028, 40, 516},
      {"GPTVQ-2 bf16 entries, row scales", gptvq_bf16, 272, 768, 48, 512},
      {"VQ<4,8,2>, 256 x 256 scopes", gptvq_r2, 300, 512, 100, 256},
      {"VQ<2,8,1> fp16, 128-column books", pairs8, 112, 640, 48, 384},
      {"VQ<8,8,2> fp16, one book per row", octs8, 200, 768, 48, 512},
      {"VQ<2,8,1> bf16, 256 x 512 scopes, row scales", pairs8_wide, 520, 1024, 260, 512},
      {"QuIP#-4 (E8P lattice, row scales)", quip4, 72, 512, 40, 256},
      {"QuIP#-4 odd N and K", quip4, 37, 1032, 21, 264},
      {"QuIP#-4, two 128-row tiles, 8 chunks", quip4, 200, 2048, 136, 1024},
      {"E8P <8,16,1>, 64 x 512 scopes, row scales", e8p_1, 200, 2048, 136, 1024},
      {"E8P <8,16,2>, 128 x 256 scopes", e8p_2, 272, 1024, 136, 512},
  };
  const int64_t Ms[] = {1, 2, 3, 8, 9, 16}; /* 9: x tiles of 16 rows with contiguous x rows (the banked and E8P GeMVs) */
  const int64_t Ms_mm[] = {17, 33, 129, 1000}; /* VQ-GeMM */
  const qf_dtype dts[] = {QF_F32, QF_F16, QF_BF16};

  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    vq_weight w;
    const int64_t N = quick ? cases[c].quick_N : cases[c].N, K = quick ? cases[c].quick_K : cases[c].K;
    if (!make_weight(cpu, &w, cases[c].name, cases[c].f, N, K, &seed)) continue;

    for (int d = 0; d < 3; d++) {
      dequantize_case(gpu, cpu, &w, dts[d], K);     /* a vector's outputs stored in one access */
      dequantize_case(gpu, cpu, &w, dts[d], K + 5); /* element by element */
    }

    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
      for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
          if (quick && a != b) continue;
          /* the forced placements on a rotating third of the dtype pairs (all of them when quick);
           * on a third of those the GeMM kernel runs this small M too */
          const int forced = quick || (a + b + (int)mi) % 3 == 0 ? 1 + ((a + 2 * b + (int)mi) % 3 == 0) : 0;
          gemm_case(gpu, cpu, &w, Ms[mi], dts[a], dts[b], forced, &seed);
        }
    for (size_t mi = 0; mi < sizeof Ms_mm / sizeof Ms_mm[0]; mi++)
      for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
          /* every pairing at M = 17 and 33, the same dtype on both sides at 129, and at 1000 (the
           * CPU reference's cost) fp16 -> fp16 and fp32 -> fp32 (quick: fp16 only) */
          const int64_t M = Ms_mm[mi];
          if ((M >= 128 || quick) && a != b) continue;
          if (M == 1000 && (quick ? a != 1 : a == 2)) continue;
          gemm_case(gpu, cpu, &w, M, dts[a], dts[b], 1, &seed);
        }
    if (c == 0) gemm_env(gpu, cpu, &w, 1, &seed), gemm_env(gpu, cpu, &w, 40, &seed), gemv_pdl_chain(gpu, &w, &seed);
    if (w.f.lattice)
      for (size_t mi = 0; mi < 3; mi++) lattice_case(gpu, &w, (int64_t[]){1, 16, 40}[mi], dts[mi], dts[(mi + 1) % 3], &seed);
    free_weight(&w);
  }
  CHECK(ran_shared > 0 && ran_global > 0, "both codebook placements ran (shared %d, global %d)", ran_shared, ran_global);
  CHECK(ran_registers_vs[0] > 0 && ran_registers_vs[1] > 0, "the register tier ran with vector sizes 4 (%d) and 2 (%d)",
        ran_registers_vs[0], ran_registers_vs[1]);
  CHECK(ran_tiles8[1] > 0 && ran_tiles8[2] > 0 && ran_tiles8[4] > 0, "x tiles of 8, 16 and 32 rows ran (%d, %d, %d)",
        ran_tiles8[1], ran_tiles8[2], ran_tiles8[4]);
  CHECK(ran_warps_k[1] > 0 && ran_warps_k[2] > 0 && ran_warps_k[4] > 0 && ran_warps_k[8] > 0,
        "row groups splitting K by 1, 2, 4 and 8 warps ran (%d, %d, %d, %d)", ran_warps_k[1], ran_warps_k[2],
        ran_warps_k[4], ran_warps_k[8]);
  printf("forced shared placements refused for books too large: %d\n", refused_shared);
  CHECK(ran_banked > 0 && ran_banked_vs[2] > 0 && ran_banked_vs[4] > 0 && ran_banked_vs[8] > 0 &&
            ran_banked_one_split > 0 && ran_banked_splits > 0,
        "the banked GeMV ran (%d; vector sizes 2, 4, 8: %d, %d, %d; one split %d, several %d)", ran_banked,
        ran_banked_vs[2], ran_banked_vs[4], ran_banked_vs[8], ran_banked_one_split, ran_banked_splits);
  CHECK(ran_tiled > 0 && ran_tiled_vs[2] > 0 && ran_tiled_vs[4] > 0 && ran_tiled_vs[8] > 0 && ran_tiled_rows[1] > 0 &&
            ran_tiled_rows[2] > 0 && ran_tiled_residuals2 > 0 && ran_tiled_bf16 > 0 && ran_tiled_bf16 < ran_tiled &&
            ran_tiled_one_split > 0 && ran_tiled_splits > 0 && ran_tiled_whole[0] > 0 && ran_tiled_whole[1] > 0,
        "the tiled GeMM ran (%d; vector sizes 2, 4, 8: %d, %d, %d; 64- and 128-row x tiles %d, %d; two residuals %d; "
        "bf16 %d; one split %d, several %d; whole books at 64- and 128-row x tiles %d, %d)",
        ran_tiled, ran_tiled_vs[2], ran_tiled_vs[4], ran_tiled_vs[8], ran_tiled_rows[1], ran_tiled_rows[2],
        ran_tiled_residuals2, ran_tiled_bf16, ran_tiled_one_split, ran_tiled_splits, ran_tiled_whole[0],
        ran_tiled_whole[1]);
  CHECK(ran_lut_tiles > 0 && ran_lut_tiles_m2 > 0 && ran_lut_tiles_pairs > 0 && ran_lut_tiles_one_split > 0 &&
            ran_lut_tiles_splits > 0 && ran_lut_tiles_f32_refused > 0,
        "the tile-table GeMV ran (%d; M = 2 %d, pairs of rows %d; one split %d, several %d; fp32 y refused %d)",
        ran_lut_tiles, ran_lut_tiles_m2, ran_lut_tiles_pairs, ran_lut_tiles_one_split, ran_lut_tiles_splits,
        ran_lut_tiles_f32_refused);
  CHECK(ran_packed_tiles > 0 && ran_packed_tiles_splits > 0,
        "the tile-table GeMV ran on packed codes (one split %d, several %d)", ran_packed_tiles, ran_packed_tiles_splits);
  CHECK(ran_lut > 0 && ran_lut_vs[4] > 0 && ran_lut_vs[8] > 0 && ran_lut_m2 > 0 && ran_lut_pairs > 0 &&
            ran_lut_one_split > 0 && ran_lut_splits > 0 && ran_lut_row_ranges > 0,
        "the table GeMV ran (%d; vector sizes 4, 8: %d, %d; two rows of x %d, a launch per pair %d; one split %d, "
        "several %d; 64-row ranges %d)", ran_lut, ran_lut_vs[4], ran_lut_vs[8], ran_lut_m2, ran_lut_pairs,
        ran_lut_one_split, ran_lut_splits, ran_lut_row_ranges);
  CHECK(ran_packed > 0 && ran_packed_splits > 0 && ran_packed_row_ranges > 0,
        "the table GeMV ran on packed codes (%d; several K ranges %d, several row ranges %d)", ran_packed,
        ran_packed_splits, ran_packed_row_ranges);
  CHECK(ran_lattice > 0, "the E8P decoder ran against the books (%d)", ran_lattice);
  CHECK(ran_e8p > 0 && ran_e8p_one_split > 0 && ran_e8p_splits > 0 && ran_e8p16 > 0,
        "the E8P GeMV ran (%d; one split %d, several %d; x tiles of 16 rows %d)", ran_e8p, ran_e8p_one_split,
        ran_e8p_splits, ran_e8p16);
  CHECK(ran_banked16 > 0, "the banked GeMV ran x tiles of 16 rows (%d)", ran_banked16);
  CHECK(ran_direct > 0 && ran_elementwise > 0, "direct and element-wise B loads ran (%d, %d)", ran_direct,
        ran_elementwise);
  CHECK(ran_x_parts[1] > 0 && ran_x_parts[2] > 0 && ran_x_parts[3] > 0 && ran_entry_parts2 > 0 && ran_mma_f16 > 0,
        "fp16 operands (%d), x in 1, 2 and 3 parts (%d, %d, %d) and entries in 2 parts (%d) ran", ran_mma_f16,
        ran_x_parts[1], ran_x_parts[2], ran_x_parts[3], ran_entry_parts2);

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_vq");
}
