/* qf_vq_encode (quantize-on-append) on CUDA against the CPU reference through the public API.
 * Gaussian matrices are quantized on the CPU (qf_vq_quantize, 3 Lloyd iterations) in every paper
 * configuration plus formats with indices that straddle words (5 and 12 bits), three residuals,
 * bf16 entries, a vector size without a kernel bucket (3) and 8-element vectors with 256 entries
 * (256 rows: the row-parallel form's 16-byte entries); then new rows are encoded as the
 * rows row0 .. row0 + T - 1 of that matrix on both backends:
 *  - fresh Gaussian rows (1, 3, 4, 8 and 37 of them: the warp-per-vector kernel, in blocks of 8
 *    vectors for the CQ formats at 1 row (also on rows of 37 vectors, whose last block is
 *    partial); the CQ formats' book-resident form at 3 and 4 rows (two at a time; at 3 a group
 *    past the end), 8 and (CQ-2, fp32 x) 37 rows (four at a time); CQ-2's tensor-core form at 37
 *    rows of fp16 and bf16 x (into its fp16 books); the row-parallel form for CQ-4 and 3-element
 *    vectors at 37; 16 lanes per vector for 2-element vectors with row scopes at 8),
 *    with outliers, zeros, a NaN and an Inf, in fp32, fp16 and bf16 with strided rows: codes (every byte, the
 *    padding included, plus a poisoned sentinel tail) and row scales equal to the CPU's;
 *  - the quantized matrix itself: encoding it again reproduces the quantizer's codes (and row
 *    scales) on both backends;
 *  - T above the grid's 65535 rows (a long append, quick mode skips it) and row0 inside a later
 *    row scope (GPTVQ's 256-row tiles pick their codebooks from row0);
 *  - by slot (qf_vq_encode_slots) into the whole poisoned cache: 2, 8 and 70 fresh rows (every
 *    kernel form; K and V of 2 rows the book-resident form two at a time) at scattered slots,
 *    one negative (skipped by both backends) and, for CUDA, one past the codes (skipped there;
 *    the CPU, which refuses it, gets -1 in its place): every byte of the cache and its scales as
 *    the CPU's, the rows no slot names still poisoned; then the same rows with other rows and
 *    books as V by qf_vq_encode_kv_slots (one launch for both caches);
 *  - CQ-2's tensor-core form on ties, near ties and the ranges its error bound leaves to exact
 *    scans (below), in fp16 and bf16 and with bf16 x into fp16 books;
 *  - bad input (x misaligned to its elements) gets an error and leaves the codes untouched. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "tensors.h"

typedef struct {
  qf_vq_format f;
  qf_vq_sizes sz;
  int64_t N, K;
  int64_t bshape[4];
  void *h_books, *d_books, *h_codes;
  float *h_w; /* the quantized matrix [N, K] */
  size_t book_bytes, code_bytes;
} book_set;

/* b's shapes and sizes for f on [N, K] and its host buffers (books, codes; W as the quantizer's
 * input), contents unset. */
static int book_layout(qf_ctx *cpu, book_set *b, qf_vq_format f, int64_t N, int64_t K) {
  memset(b, 0, sizeof *b);
  b->f = f, b->N = N, b->K = K;
  if (!CHECK(qf_vq_sizes_of(cpu, &f, N, K, &b->sz) == QF_OK, "sizes: %s", qf_ctx_last_error(cpu))) return 0;
  b->bshape[0] = f.residuals, b->bshape[1] = b->sz.n_books, b->bshape[2] = b->sz.entries, b->bshape[3] = f.vector_size;
  b->book_bytes = (size_t)(f.residuals * b->sz.n_books * b->sz.entries * f.vector_size) * 2;
  b->code_bytes = (size_t)(f.residuals * N * b->sz.row_bytes);
  b->h_books = aligned_alloc(16, (b->book_bytes + 15) / 16 * 16);
  b->h_codes = aligned_alloc(16, (b->code_bytes + 15) / 16 * 16);
  b->h_w = malloc((size_t)(N * K) * sizeof *b->h_w);
  return 1;
}

/* The host books copied to the device. */
static void upload_books(book_set *b) {
  b->d_books = dev_alloc(b->book_bytes);
  CUDA_OK(cudaMemcpy(b->d_books, b->h_books, b->book_bytes, cudaMemcpyHostToDevice));
}

static int make_books(qf_ctx *cpu, book_set *b, qf_vq_format f, int64_t N, int64_t K, uint64_t *seed) {
  if (!book_layout(cpu, b, f, N, K)) return 0;
  float *w = b->h_w, *sc = aligned_alloc(16, (size_t)(N * 4 + 15) / 16 * 16);
  for (int64_t i = 0; i < N * K; i++) w[i] = rng_normal(seed);
  tensor2d wt;
  tensor2d_init(&wt, w, QF_F32, N, K, K, kDLCPU);
  int64_t cshape[3] = {f.residuals, N, b->sz.row_bytes}, sshape[1] = {N};
  DLTensor ct = dl_tensor(b->h_codes, QF_U8, 3, cshape, kDLCPU), bt = dl_tensor(b->h_books, f.entry_dtype, 4, b->bshape, kDLCPU);
  DLTensor st = dl_tensor(sc, QF_F32, 1, sshape, kDLCPU);
  qf_vq_quantize_opts o = {.iterations = 3, .seed = 5};
  qf_status s = qf_vq_quantize(cpu, &wt.t, &f, &o, &ct, &bt, f.row_scale ? &st : NULL, NULL);
  free(sc);
  if (!CHECK(s == QF_OK, "quantize: %s", qf_ctx_last_error(cpu))) return 0;
  upload_books(b);
  return 1;
}

static void free_books(book_set *b) {
  free(b->h_books), free(b->h_codes), free(b->h_w);
  CUDA_OK(cudaFree(b->d_books));
}

/* Books of f for [N, K] filled by kind instead of the quantizer (the tensor-core form's near ties
 * and ranges): 0, small dyadic entries (multiples of 1/4 in [-1, 1], every fourth entry a copy of
 * the one before: exact distances, equal ones); 1, Gaussian entries times `scale`. */
static int fill_books(qf_ctx *cpu, book_set *b, qf_vq_format f, int64_t N, int64_t K, int kind, float scale, uint64_t *seed) {
  if (!book_layout(cpu, b, f, N, K)) return 0;
  const int64_t n = (int64_t)b->book_bytes / 2;
  for (int64_t i = 0; i < n; i++) {
    const int64_t e = i / f.vector_size % b->sz.entries;
    const float v = kind == 1 ? rng_normal(seed) * scale
                    : e % 4 == 3 ? float_get(b->h_books, f.entry_dtype, (size_t)(i - f.vector_size))
                                 : (float)((int)(rng_uniform(seed) * 9.0f) - 4) * 0.25f;
    float_put(b->h_books, f.entry_dtype, (size_t)i, v);
  }
  upload_books(b);
  return 1;
}

/* T rows of x for the dyadic books above (dt, pitch ld): each vector an entry of its book, the
 * midpoint of two (a tie of exact distances), or either moved by 2^-10 (a near tie). */
static void *tie_rows(const book_set *b, qf_dtype dt, int64_t T, int64_t ld, uint64_t *seed) {
  const int vs = b->f.vector_size;
  void *x = malloc((size_t)(T * ld) * 2);
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < ld / vs + 1; j++) {
      const int64_t e1 = (int64_t)(rng_uniform(seed) * 256.0f) % 256, e2 = (int64_t)(rng_uniform(seed) * 256.0f) % 256;
      const int kind = (int)(rng_uniform(seed) * 4.0f), c0 = (int)(rng_uniform(seed) * (float)vs) % vs;
      for (int c = 0; c < vs && j * vs + c < ld; c++) {
        const int64_t k = j * vs + c;
        float v = NAN;
        if (k < b->K) {
          const int64_t book = k / vs % b->sz.n_books;
          const float w1 = float_get(b->h_books, b->f.entry_dtype, (size_t)((book * 256 + e1) * vs + c));
          const float w2 = float_get(b->h_books, b->f.entry_dtype, (size_t)((book * 256 + e2) * vs + c));
          v = kind == 0 ? w1 : 0.5f * (w1 + w2);
          if (kind == 3 && c == c0) v += rng_uniform(seed) < 0.5f ? 0x1p-10f : -0x1p-10f;
        }
        float_put(x, dt, (size_t)(i * ld + k), v);
      }
    }
  return x;
}

/* Encodes x (T rows, on the host in dt with pitch ld) as rows row0.. on both backends and
 * compares codes and scales byte for byte, and the codes with expect_codes when not NULL. */
static void encode_case(qf_ctx *gpu, qf_ctx *cpu, book_set *b, const char *name, const void *hx, qf_dtype dt,
                        int64_t T, int64_t ld, int64_t row0, const void *expect_codes) {
  char desc[200];
  snprintf(desc, sizeof desc, "%s: encode T=%" PRId64 " %s ld=%" PRId64 " row0=%" PRId64, name, T, qf_dtype_name(dt), ld,
           row0);
  const size_t esz = dt == QF_F32 ? 4 : 2, xbytes = (size_t)(T * ld) * esz;
  void *dx = dev_alloc(xbytes);
  CUDA_OK(cudaMemcpy(dx, hx, xbytes, cudaMemcpyHostToDevice));
  const size_t code_bytes = (size_t)(b->f.residuals * T * b->sz.row_bytes);
  pair C, S;
  pair_init(&C, code_bytes, NULL);
  pair_init(&S, (size_t)T * 4, NULL);
  tensor2d cx, gx;
  tensor2d_init(&cx, (void *)hx, dt, T, b->K, ld, kDLCPU);
  tensor2d_init(&gx, dx, dt, T, b->K, ld, kDLCUDA);
  int64_t cshape[3] = {b->f.residuals, T, b->sz.row_bytes}, sshape[1] = {T};
  DLTensor cb = dl_tensor(b->h_books, b->f.entry_dtype, 4, b->bshape, kDLCPU);
  DLTensor gb = dl_tensor(b->d_books, b->f.entry_dtype, 4, b->bshape, kDLCUDA);
  DLTensor cc = dl_tensor(C.ref, QF_U8, 3, cshape, kDLCPU), gc = dl_tensor(C.dev, QF_U8, 3, cshape, kDLCUDA);
  DLTensor cs = dl_tensor(S.ref, QF_F32, 1, sshape, kDLCPU), gs = dl_tensor(S.dev, QF_F32, 1, sshape, kDLCUDA);
  qf_status st = qf_vq_encode(cpu, &cx.t, row0, &cb, &b->f, &cc, b->f.row_scale ? &cs : NULL);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  st = qf_vq_encode(gpu, &gx.t, row0, &gb, &b->f, &gc, b->f.row_scale ? &gs : NULL);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&C, "codes", desc);
  pair_check(&S, "scales", desc);
  if (expect_codes)
    CHECK(memcmp(C.ref, expect_codes, code_bytes) == 0, "%s: encoding the quantized matrix changed its codes", desc);
  pair_free(&C), pair_free(&S);
  CUDA_OK(cudaFree(dx));
}

/* T rows of x (host, dt, pitch ld) encoded by slot into the whole poisoned cache of b's N rows on
 * both backends (slots (i 37 + 11) mod N, slot 1 negative; CUDA's last slot N + 5, the CPU's -1):
 * codes and scales byte for byte. */
static void slots_case(qf_ctx *gpu, qf_ctx *cpu, book_set *b, const char *name, const void *hx, qf_dtype dt, int64_t T,
                       int64_t ld) {
  char desc[200];
  snprintf(desc, sizeof desc, "%s: encode by slot T=%" PRId64 " %s ld=%" PRId64, name, T, qf_dtype_name(dt), ld);
  const size_t esz = dt == QF_F32 ? 4 : 2, xbytes = (size_t)(T * ld) * esz;
  void *dx = dev_alloc(xbytes), *dslots = dev_alloc((size_t)T * 4);
  CUDA_OK(cudaMemcpy(dx, hx, xbytes, cudaMemcpyHostToDevice));
  int32_t *cslots = malloc((size_t)T * 4), *gslots = malloc((size_t)T * 4);
  for (int64_t i = 0; i < T; i++) cslots[i] = gslots[i] = (int32_t)((i * 37 + 11) % b->N);
  cslots[1] = gslots[1] = -1;
  cslots[T - 1] = -1, gslots[T - 1] = (int32_t)(b->N + 5);
  CUDA_OK(cudaMemcpy(dslots, gslots, (size_t)T * 4, cudaMemcpyHostToDevice));
  pair C, S;
  pair_init(&C, (size_t)(b->f.residuals * b->N * b->sz.row_bytes), NULL);
  pair_init(&S, (size_t)b->N * 4, NULL);
  tensor2d cx, gx;
  tensor2d_init(&cx, (void *)hx, dt, T, b->K, ld, kDLCPU);
  tensor2d_init(&gx, dx, dt, T, b->K, ld, kDLCUDA);
  int64_t cshape[3] = {b->f.residuals, b->N, b->sz.row_bytes}, sshape[1] = {b->N}, tshape[1] = {T};
  DLTensor cb = dl_tensor(b->h_books, b->f.entry_dtype, 4, b->bshape, kDLCPU);
  DLTensor gb = dl_tensor(b->d_books, b->f.entry_dtype, 4, b->bshape, kDLCUDA);
  DLTensor cc = dl_tensor(C.ref, QF_U8, 3, cshape, kDLCPU), gc = dl_tensor(C.dev, QF_U8, 3, cshape, kDLCUDA);
  DLTensor cs = dl_tensor(S.ref, QF_F32, 1, sshape, kDLCPU), gs = dl_tensor(S.dev, QF_F32, 1, sshape, kDLCUDA);
  DLTensor csl = dl_tensor(cslots, QF_I32, 1, tshape, kDLCPU), gsl = dl_tensor(dslots, QF_I32, 1, tshape, kDLCUDA);
  qf_status st = qf_vq_encode_slots(cpu, &cx.t, &csl, &cb, &b->f, &cc, b->f.row_scale ? &cs : NULL);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  st = qf_vq_encode_slots(gpu, &gx.t, &gsl, &gb, &b->f, &gc, b->f.row_scale ? &gs : NULL);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&C, "codes", desc);
  pair_check(&S, "scales", desc);

  /* The same rows as K and, as V, the rows in reverse order with the entries of each book in
   * reverse order, by qf_vq_encode_kv_slots into two more poisoned caches: on the CPU the same K
   * cache as the call above, and on CUDA every byte of both caches and scales as the CPU's. */
  snprintf(desc, sizeof desc, "%s: K and V by slot T=%" PRId64 " %s ld=%" PRId64, name, T, qf_dtype_name(dt), ld);
  uint8_t *hv = malloc(xbytes), *hvb = aligned_alloc(16, (b->book_bytes + 15) / 16 * 16);
  for (int64_t i = 0; i < T; i++) memcpy(hv + (size_t)(i * ld) * esz, (const uint8_t *)hx + (size_t)((T - 1 - i) * ld) * esz, (size_t)ld * esz);
  const int64_t n_vec_books = b->f.residuals * b->sz.n_books, ebytes = (int64_t)b->f.vector_size * 2;
  for (int64_t bk = 0; bk < n_vec_books; bk++)
    for (int64_t e = 0; e < b->sz.entries; e++)
      memcpy(hvb + (bk * b->sz.entries + e) * ebytes, (const uint8_t *)b->h_books + (bk * b->sz.entries + b->sz.entries - 1 - e) * ebytes,
             (size_t)ebytes);
  void *dv = dev_alloc(xbytes), *dvb = dev_alloc(b->book_bytes);
  CUDA_OK(cudaMemcpy(dv, hv, xbytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dvb, hvb, b->book_bytes, cudaMemcpyHostToDevice));
  pair KC, VC, KS, VS;
  pair_init(&KC, C.bytes - PAIR_TAIL, NULL), pair_init(&VC, C.bytes - PAIR_TAIL, NULL);
  pair_init(&KS, S.bytes - PAIR_TAIL, NULL), pair_init(&VS, S.bytes - PAIR_TAIL, NULL);
  tensor2d cv, gv;
  tensor2d_init(&cv, hv, dt, T, b->K, ld, kDLCPU);
  tensor2d_init(&gv, dv, dt, T, b->K, ld, kDLCUDA);
  DLTensor cvb = dl_tensor(hvb, b->f.entry_dtype, 4, b->bshape, kDLCPU), gvb = dl_tensor(dvb, b->f.entry_dtype, 4, b->bshape, kDLCUDA);
  DLTensor ckc = dl_tensor(KC.ref, QF_U8, 3, cshape, kDLCPU), gkc = dl_tensor(KC.dev, QF_U8, 3, cshape, kDLCUDA);
  DLTensor cvc = dl_tensor(VC.ref, QF_U8, 3, cshape, kDLCPU), gvc = dl_tensor(VC.dev, QF_U8, 3, cshape, kDLCUDA);
  DLTensor cks = dl_tensor(KS.ref, QF_F32, 1, sshape, kDLCPU), gks = dl_tensor(KS.dev, QF_F32, 1, sshape, kDLCUDA);
  DLTensor cvs = dl_tensor(VS.ref, QF_F32, 1, sshape, kDLCPU), gvs = dl_tensor(VS.dev, QF_F32, 1, sshape, kDLCUDA);
  const int rs = b->f.row_scale;
  st = qf_vq_encode_kv_slots(cpu, &cx.t, &cv.t, &csl, &cb, &cvb, &b->f, &ckc, &cvc, rs ? &cks : NULL, rs ? &cvs : NULL);
  CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu));
  CHECK(memcmp(KC.ref, C.ref, C.bytes) == 0 && memcmp(KS.ref, S.ref, S.bytes) == 0, "%s: cpu: K differs from qf_vq_encode_slots", desc);
  st = qf_vq_encode_kv_slots(gpu, &gx.t, &gv.t, &gsl, &gb, &gvb, &b->f, &gkc, &gvc, rs ? &gks : NULL, rs ? &gvs : NULL);
  CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu));
  CUDA_OK(cudaDeviceSynchronize());
  pair_check(&KC, "K codes", desc);
  pair_check(&VC, "V codes", desc);
  pair_check(&KS, "K scales", desc);
  pair_check(&VS, "V scales", desc);
  pair_free(&KC), pair_free(&VC), pair_free(&KS), pair_free(&VS);
  free(hv), free(hvb);
  CUDA_OK(cudaFree(dv));
  CUDA_OK(cudaFree(dvb));

  pair_free(&C), pair_free(&S);
  free(cslots), free(gslots);
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dslots));
}

/* T fresh rows in dt with pitch ld: Gaussian, a few outliers, a zero row, NaN and Inf (when
 * specials), and NaN in the gaps between rows (a kernel reading them would show). */
static void *fresh_rows(qf_dtype dt, int64_t T, int64_t K, int64_t ld, int specials, uint64_t *seed) {
  void *x = malloc((size_t)(T * ld) * (dt == QF_F32 ? 4 : 2));
  for (int64_t i = 0; i < T; i++)
    for (int64_t k = 0; k < ld; k++) {
      float v = k >= K ? NAN : rng_normal(seed) * (rng_uniform(seed) < 0.01f ? 30.0f : 1.0f);
      if (k < K && i == 1 % T) v = 0.0f;
      if (k < K && specials && i == 2 % T && k == 5) v = NAN;
      if (k < K && specials && i == 3 % T && k == 7) v = INFINITY;
      float_put(x, dt, (size_t)(i * ld + k), v);
    }
  return x;
}

int main(void) {
  qf_ctx *gpu, *cpu;
  open_contexts(&gpu, &cpu);
  const int quick = quick_mode();
  uint64_t seed = 0xE4C0DE;

  qf_vq_format gptvq, cq2, cq4, aqlm;
  qf_vq_format_preset(QF_VQ_GPTVQ_2, &gptvq);
  qf_vq_format_preset(QF_VQ_CQ_2, &cq2);
  qf_vq_format_preset(QF_VQ_CQ_4, &cq4);
  qf_vq_format_preset(QF_VQ_AQLM_3, &aqlm);
  qf_vq_format aqlm_scaled = aqlm;
  aqlm_scaled.row_scale = 1;
  const struct {
    const char *name;
    qf_vq_format f;
    int64_t N, K;
  } cases[] = {
      {"GPTVQ-2", gptvq, 512, 512},
      {"CQ-2", cq2, 512, 256},
      {"CQ-4", cq4, 512, 256},
      {"CQ-2, 37 vectors a row", cq2, 128, 148},
      {"CQ-4, 37 vectors a row", cq4, 128, 74},
      {"AQLM-3", aqlm, 128, 256},
      {"AQLM-3 (row scales)", aqlm_scaled, 128, 264},
      {"VQ<8,5,2> bf16, row scales, 64 x 128 scopes", {8, 5, 2, 64, 128, QF_BF16, 1, 0}, 192, 384},
      {"VQ<3,7,3>, 96-column scopes", {3, 7, 3, 0, 96, QF_F16, 0, 0}, 96, 2112},
      {"VQ<8,8,2>", {8, 8, 2, 0, 0, QF_F16, 0, 0}, 256, 256}, /* 256 rows: the row-parallel form of vector size 8 */
      {"VQ<2,8,1>, 64-row scopes", {2, 8, 1, 64, 0, QF_F16, 0, 0}, 128, 256}, /* 16 lanes per vector at 8 rows */
  };
  const qf_dtype dts[] = {QF_F32, QF_F16, QF_BF16};

  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    book_set b;
    if (!make_books(cpu, &b, cases[c].f, cases[c].N, cases[c].K, &seed)) continue;
    const int64_t K = b.K;

    /* Fresh rows: every input dtype, strided, appended as the last rows of the matrix (a later
     * row scope where the format has one): 1 and 8 rows (decode steps: a warp or half a warp per
     * vector), 37 (the row-parallel form where it takes over by then, with a partial block of
     * rows) and 20 (2-element vectors: the book-resident form eight rows at a time, the last
     * group partial). */
    const int64_t Ts[] = {1, 3, 4, 8, 37, 20};
    for (int ti = 0; ti < (quick ? 4 : 6); ti++)
      for (int d = 0; d < 3; d++) {
        const int64_t T = Ts[ti], ld = K + (d == 0 ? 0 : 3);
        void *x = fresh_rows(dts[d], T, K, ld, 1, &seed);
        encode_case(gpu, cpu, &b, cases[c].name, x, dts[d], T, ld, b.N - T, NULL);
        free(x);
      }

    /* By slot: a decode step's rows and a longer append (the row-parallel form where it applies). */
    const int64_t slot_Ts[] = {2, 8, 70};
    for (int ti = 0; ti < 3; ti++) {
      const int64_t T = slot_Ts[ti], ld = K + 3;
      const qf_dtype dt = dts[(c + ti) % 3];
      void *x = fresh_rows(dt, T, K, ld, 1, &seed);
      slots_case(gpu, cpu, &b, cases[c].name, x, dt, T, ld);
      free(x);
    }

    /* The quantized matrix encodes back to the quantizer's codes. */
    encode_case(gpu, cpu, &b, cases[c].name, b.h_w, QF_F32, b.N, K, 0, b.h_codes);
    free_books(&b);
  }

  /* The tensor-core row-parallel form (CQ-2's books, x in their 16-bit type or bf16 x into fp16
   * books, from 16 rows in the launch: the 37-row cases above too), whose
   * approximate distances must still give the CPU's codes, and CQ-4's staged form on the same
   * inputs: quantized books in fp16 and bf16 (fresh rows with NaN and Inf, by position and by
   * slot, K and V of 8, 16 and 70 rows in one launch); dyadic books with repeated entries and rows at
   * entries, midpoints and near midpoints (exact ties and near ties, every one rescanned or
   * decided past the bound); Gaussian books of large entries (fp16 half-norms past 65504, bf16
   * |w|^2 past 2^100: exact scans) and of small ones (the bound's absolute term; for bf16 x into
   * fp16 books also elements below 2^-17, which fp16 rounds). */
  {
    qf_vq_format cq2b = cq2, cq4b = cq4;
    cq2b.entry_dtype = QF_BF16, cq4b.entry_dtype = QF_BF16;
    const struct {
      qf_vq_format f;
      qf_dtype dt; /* x's type */
      const char *name;
    } tcs[] = {{cq2, QF_F16, "CQ-2 (tensor cores)"},
               {cq2, QF_BF16, "CQ-2, bf16 x (tensor cores)"},
               {cq4, QF_F16, "CQ-4 (staged)"},
               {cq2b, QF_BF16, "CQ-2 bf16 (tensor cores)"},
               {cq4b, QF_BF16, "CQ-4 bf16 (staged)"}};
    for (int c = 0; c < 5; c++) {
      const qf_dtype dt = tcs[c].dt;
      const int64_t K = 256 + 4 * tcs[c].f.vector_size * 9; /* (a partial last block of positions) */
      book_set b;
      if (make_books(cpu, &b, tcs[c].f, 160, K, &seed)) {
        const int64_t Ts[] = {64, 100};
        for (int ti = 0; ti < 2; ti++) {
          void *x = fresh_rows(dt, Ts[ti], K, K + 3, 1, &seed);
          encode_case(gpu, cpu, &b, tcs[c].name, x, dt, Ts[ti], K + 3, b.N - Ts[ti], NULL);
          free(x);
        }
        const int64_t slot_Ts[] = {8, 16, 70};
        for (int ti = 0; ti < 3; ti++) {
          void *x = fresh_rows(dt, slot_Ts[ti], K, K + 1, 1, &seed);
          slots_case(gpu, cpu, &b, tcs[c].name, x, dt, slot_Ts[ti], K + 1);
          free(x);
        }
        free_books(&b);
      }
      const int f16_books = tcs[c].f.entry_dtype == QF_F16;
      const struct {
        int kind;
        float scale;
        const char *what;
      } fills[] = {{0, 0.0f, "ties"},
                   {1, f16_books ? 400.0f : 1e20f, "large entries"},
                   {1, 1e-3f, "small entries"},
                   {1, 1e-5f, "tiny entries"}};
      for (int fi = 0; fi < 4; fi++) {
        if (!fill_books(cpu, &b, tcs[c].f, 300, K, fills[fi].kind, fills[fi].scale, &seed)) continue;
        char name[120];
        snprintf(name, sizeof name, "%s, %s", tcs[c].name, fills[fi].what);
        const int64_t T = 300, ld = K + 1;
        void *x = fills[fi].kind == 0 ? tie_rows(&b, dt, T, ld, &seed) : fresh_rows(dt, T, K, ld, 0, &seed);
        if (fills[fi].kind == 1) /* rows of the books' magnitude */
          for (int64_t i = 0; i < T * ld; i++) float_put(x, dt, (size_t)i, float_get(x, dt, (size_t)i) * fills[fi].scale);
        encode_case(gpu, cpu, &b, name, x, dt, T, ld, 0, NULL);
        free(x);
        free_books(&b);
      }
    }
  }

  /* More rows than the grid's 65535 (CQ-2, one row scope) and a misaligned x. */
  {
    book_set b;
    if (make_books(cpu, &b, cq2, 256, 64, &seed)) {
      const int64_t T = quick ? 300 : 70000;
      void *x = fresh_rows(QF_F16, T, 64, 64, 0, &seed);
      encode_case(gpu, cpu, &b, "CQ-2 long append", x, QF_F16, T, 64, 0, NULL);
      free(x);

      const int64_t t = 4, row_bytes = b.sz.row_bytes;
      uint8_t *dx = dev_alloc((size_t)(t * 64 * 2 + 2));
      int64_t cshape[3] = {1, t, row_bytes};
      pair C;
      pair_init(&C, (size_t)(t * row_bytes), NULL);
      tensor2d gx;
      tensor2d_init(&gx, dx + 1, QF_F16, t, 64, 64, kDLCUDA);
      DLTensor gb = dl_tensor(b.d_books, QF_F16, 4, b.bshape, kDLCUDA), gc = dl_tensor(C.dev, QF_U8, 3, cshape, kDLCUDA);
      const qf_status st = qf_vq_encode(gpu, &gx.t, 0, &gb, &cq2, &gc, NULL);
      CHECK(st == QF_ERR_ALIGNMENT, "misaligned x: got %s (%s)", qf_status_str(st), qf_ctx_last_error(gpu));
      pair_check(&C, "codes after a refused call", "misaligned x");
      pair_free(&C);
      CUDA_OK(cudaFree(dx));
      free_books(&b);
    }
  }

  qf_ctx_destroy(gpu);
  qf_ctx_destroy(cpu);
  return check_finish("gpu_vq_encode");
}
