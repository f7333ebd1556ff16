/* CPU reference of the vector-quantization family: the offline quantizer (k-means++ and Lloyd per
 * codebook scope and residual, then entries reordered by use; or the E8P lattice book, vq_e8p.c)
 * and the dequantizer. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "cpu/floats.h"
#include "cpu/slots.h"
#include "formats/vq.h"

static uint64_t rng(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}
static double rng_unit(uint64_t *s) { return (double)(rng(s) >> 11) * (1.0 / 9007199254740992.0); }

static float load_w(const qf_mat *w, int64_t n, int64_t k) { return qf_cpu_get(w->dtype, qf_cpu_row(w, n), k); }

static uint16_t entry_bits(qf_dtype dt, float v) { return dt == QF_BF16 ? qf_bf16_from_f32(v) : qf_f16_from_f32(v); }
static float entry_value(qf_dtype dt, uint16_t h) { return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h); }


static int nearest(const float *v, const float *centers, int64_t E, int d) {
  int best = 0;
  float bd = qf_cpu_vq_dist2(v, centers, d);
  for (int64_t e = 1; e < E; e++) {
    float dd = qf_cpu_vq_dist2(v, centers + e * d, d);
    if (dd < bd) bd = dd, best = (int)e;
  }
  return best;
}

/* ---- threads: fn(arg, part, lo, hi) for the parts [n p / parts, n (p + 1) / parts) of [0, n),
 * each on a thread of its own, the caller running part 0 (a part whose thread cannot be started
 * runs on the caller too). Every part writes only its own elements, so no result depends on the
 * thread count. ---- */
typedef void (*range_fn)(void *arg, int part, int64_t lo, int64_t hi);
typedef struct {
  range_fn fn;
  void *arg;
  int part;
  int64_t lo, hi;
} range_job;

static void *run_range(void *p) {
  range_job *j = p;
  j->fn(j->arg, j->part, j->lo, j->hi);
  return NULL;
}

/* kBlock: the vectors of a part's unit of work (a part has at least one block's worth) and of the
 * k-means++ partial sums */
enum { kMaxThreads = 256, kBlock = 4096 };
/* A k-means++ step is one pass over the vectors per center: its parts take 16 blocks at least, so
 * that a thread's start does not cost more than its work (AQLM-3's 65,536 vectors of 256 x 2048 ran
 * its seeding 1.5x slower on two threads with parts of one block). */
enum { kSeedBlocks = 16 };

static int parts_for(int threads, int64_t n, int64_t min_per_part) {
  const int64_t parts = n / min_per_part < threads ? n / min_per_part : threads;
  return parts > 1 ? (int)parts : 1;
}

static void run_parts(int parts, int64_t n, range_fn fn, void *arg) {
  range_job jobs[kMaxThreads];
  pthread_t tid[kMaxThreads];
  int started[kMaxThreads] = {0};
  for (int p = 0; p < parts; p++) jobs[p] = (range_job){fn, arg, p, n * p / parts, n * (p + 1) / parts};
  for (int p = 1; p < parts; p++) started[p] = pthread_create(&tid[p], NULL, run_range, &jobs[p]) == 0;
  run_range(&jobs[0]);
  for (int p = 1; p < parts; p++) {
    if (started[p]) pthread_join(tid[p], NULL);
    else run_range(&jobs[p]);
  }
}

static void parallel_for(int threads, int64_t n, int64_t min_per_part, range_fn fn, void *arg) {
  run_parts(parts_for(threads, n, min_per_part), n, fn, arg);
}

/* k-means++: the vectors' distances to one center folded into their running minimum, and each
 * block's sum of them (in vector order), for blocks lo .. hi - 1. */
typedef struct {
  float *const *vec;
  const float *center;
  float *dmin;
  double *bsum;
  int64_t nv;
  int d, first;
} seed_step;

static void seed_range(void *p, int part, int64_t lo, int64_t hi) {
  (void)part;
  const seed_step *s = p;
  for (int64_t b = lo; b < hi; b++) {
    double sum = 0.0;
    for (int64_t i = b * kBlock; i < (b + 1) * kBlock && i < s->nv; i++) {
      const float dd = qf_cpu_vq_dist2(s->vec[i], s->center, s->d);
      if (s->first || dd < s->dmin[i]) s->dmin[i] = dd;
      sum += s->dmin[i];
    }
    s->bsum[b] = sum;
  }
}

/* Each vector's nearest center, and how many changed (one count per part, summed in order). */
typedef struct {
  float *const *vec;
  const float *centers;
  int64_t E;
  int d;
  int *assign;
  int64_t changed[kMaxThreads]; /* per part */
} assign_step;

static void assign_range(void *p, int part, int64_t lo, int64_t hi) {
  assign_step *s = p;
  int64_t changed = 0;
  for (int64_t i = lo; i < hi; i++) {
    const int a = nearest(s->vec[i], s->centers, s->E, s->d);
    changed += a != s->assign[i];
    s->assign[i] = a;
  }
  s->changed[part] = changed;
}

static int64_t assign_all(int threads, float *const *vec, int64_t nv, const float *centers, int64_t E, int d, int *assign) {
  assign_step s = {.vec = vec, .centers = centers, .E = E, .d = d, .assign = assign};
  const int parts = parts_for(threads, nv, kBlock);  /* (s.changed has one count per part) */
  run_parts(parts, nv, assign_range, &s);
  int64_t changed = 0;
  for (int p = 0; p < parts; p++) changed += s.changed[p];
  return changed;
}

/* k-means over nv vectors (pointers vec[i] to d floats) into E centers: k-means++ seeding, then
 * Lloyd iterations until no assignment changes or `iterations` ran. The distances run on
 * `threads` threads, and every sum is taken in an order fixed by the vectors alone (k-means++'s
 * per block of kBlock, then over the blocks), so the centers do not depend on the thread count.
 * Each call draws 2 E - 1 numbers from the seed. */
static int kmeans(float *const *vec, int64_t nv, int d, int64_t E, int iterations, uint64_t *seed, float *centers,
                  int *assign, int threads) {
  const int64_t nb = (nv + kBlock - 1) / kBlock;
  float *dmin = malloc((size_t)nv * sizeof *dmin);
  double *bsum = malloc((size_t)nb * sizeof *bsum);
  double *sums = malloc((size_t)(E * d) * sizeof *sums);
  int64_t *count = malloc((size_t)E * sizeof *count);
  if (!dmin || !bsum || !sums || !count) {
    free(dmin), free(bsum), free(sums), free(count);
    return 0;
  }
  /* k-means++: each new center drawn with probability proportional to its squared distance */
  int64_t first = (int64_t)(rng(seed) % (uint64_t)nv);
  memcpy(centers, vec[first], (size_t)d * sizeof *centers);
  seed_step st = {.vec = vec, .center = centers, .dmin = dmin, .bsum = bsum, .nv = nv, .d = d, .first = 1};
  for (int64_t e = 1;; e++) {
    parallel_for(threads, nb, kSeedBlocks, seed_range, &st);
    st.first = 0;
    if (e == E) break;
    double total = 0.0;
    for (int64_t b = 0; b < nb; b++) total += bsum[b];
    int64_t pick = (int64_t)(rng(seed) % (uint64_t)nv);
    const double u = rng_unit(seed); /* (drawn either way: a fixed count of draws per call) */
    if (total > 0.0) { /* the first vector whose running sum passes u total: its block, then it */
      const double target = u * total;
      double acc = 0.0;
      int64_t b = 0;
      for (; b < nb - 1 && acc + bsum[b] <= target; b++) acc += bsum[b];
      for (pick = b * kBlock; pick < nv - 1; pick++)
        if ((acc += dmin[pick]) > target) break;
    }
    memcpy(centers + e * d, vec[pick], (size_t)d * sizeof *centers);
    st.center = centers + e * d;
  }
  for (int64_t i = 0; i < nv; i++) assign[i] = -1;
  for (int it = 0; it < iterations; it++) {
    if (!assign_all(threads, vec, nv, centers, E, d, assign)) break;
    memset(sums, 0, (size_t)(E * d) * sizeof *sums);
    memset(count, 0, (size_t)E * sizeof *count);
    for (int64_t i = 0; i < nv; i++) {
      count[assign[i]]++;
      for (int c = 0; c < d; c++) sums[assign[i] * d + c] += vec[i][c];
    }
    for (int64_t e = 0; e < E; e++) /* an empty cluster keeps its center */
      if (count[e])
        for (int c = 0; c < d; c++) centers[e * d + c] = (float)(sums[e * d + c] / (double)count[e]);
  }
  free(dmin), free(bsum), free(sums), free(count);
  return 1;
}

/* An entry and its use count; sorted most used first, ties in index order. */
typedef struct {
  int64_t uses, entry;
} entry_use;

static int by_use(const void *a, const void *b) {
  const entry_use *x = a, *y = b;
  if (x->uses != y->uses) return x->uses > y->uses ? -1 : 1;
  return x->entry < y->entry ? -1 : x->entry > y->entry;
}

/* The codebook of row `row` (of the whole matrix) and vector j. */
static int64_t book_of(const qf_vq_tensors *t, int64_t row, int64_t j) {
  const int64_t rows = t->fmt.scope_rows ? t->fmt.scope_rows : INT64_MAX, cols = t->fmt.scope_cols ? t->fmt.scope_cols : t->K;
  return (row / rows) * t->sz.books_per_row + (j * t->fmt.vector_size) / cols;
}

static const uint16_t *entry_of(const qf_vq_tensors *t, int r, int64_t book, uint32_t idx) {
  return (const uint16_t *)t->books + ((r * t->sz.n_books + book) * t->sz.entries + idx) * t->fmt.vector_size;
}

/* Row n decoded in fp32: the sum of its entries in residual order, times its scale. */
static void decode_row(const qf_vq_tensors *t, int64_t n, float *out) {
  const int vs = t->fmt.vector_size, bits = t->fmt.index_bits;
  const float scale = t->scales ? t->scales[n] : 1.0f;
  for (int64_t k = 0; k < t->K; k++) out[k] = 0.0f;
  for (int r = 0; r < t->fmt.residuals; r++) {
    const uint8_t *row = t->codes + (r * t->N + n) * t->sz.row_bytes;
    for (int64_t j = 0; j < t->K / vs; j++) {
      const uint16_t *e = entry_of(t, r, book_of(t, n, j), qf_vq_get_index(row, j, bits));
      for (int c = 0; c < vs; c++) out[j * vs + c] += entry_value(t->fmt.entry_dtype, e[c]);
    }
  }
  for (int64_t k = 0; k < t->K; k++) out[k] *= scale;
}

/* Row n of w as the quantizer sees it: divided by its RMS when the format has row scales. */
static float row_target(const qf_mat *w, int64_t n, int row_scale, float *out) {
  double ss = 0.0;
  for (int64_t k = 0; k < w->cols; k++) ss += (double)load_w(w, n, k) * load_w(w, n, k);
  float s = ss > 0.0 ? (float)sqrt(ss / (double)w->cols) : 1.0f;
  for (int64_t k = 0; k < w->cols; k++) out[k] = load_w(w, n, k) / (row_scale ? s : 1.0f);
  return s;
}

/* The lattice's nearest entry of each vector (its index order is the book's). */
typedef struct {
  const qf_e8p_table *e8p;
  float *const *vec;
  float beta;
  int *assign;
} lattice_step;

static void lattice_range(void *p, int part, int64_t lo, int64_t hi) {
  (void)part;
  const lattice_step *s = p;
  for (int64_t i = lo; i < hi; i++) s->assign[i] = (int)qf_cpu_e8p_nearest(s->e8p, s->vec[i], s->beta);
}

/* What a part of the quantizer holds: one codebook scope's vectors at a time, and its share of the
 * statistics. */
typedef struct {
  float **vec;
  int64_t *where; /* (n, j) of each vector */
  int *assign;
  float *centers;
  int64_t *count, *rank;
  entry_use *order;
  int64_t hot, unused, uses, hot_uses;
  int failed; /* no memory for k-means */
} book_work;

typedef struct {
  const qf_vq_tensors *t;
  float *target;
  const qf_e8p_table *e8p;
  int iterations, threads; /* threads: inside one book (where the books run one at a time) */
  uint64_t seed;
  int64_t draws; /* random numbers per book and residual */
  book_work *work; /* per part */
} book_job;

/* Codebook scope `book`, every residual: its books, its vectors' indices, the next residuals. */
static void quantize_book(const book_job *job, book_work *wk, int64_t book, uint64_t *seed) {
  const qf_vq_tensors *t = job->t;
  const int64_t N = t->N, K = t->K, E = t->sz.entries;
  const int vs = t->fmt.vector_size, R = t->fmt.residuals;
  const int64_t rows = t->fmt.scope_rows ? t->fmt.scope_rows : N, cols = t->fmt.scope_cols ? t->fmt.scope_cols : K;
  const int64_t r0 = (book / t->sz.books_per_row) * rows, c0 = (book % t->sz.books_per_row) * cols;
  int64_t nv = 0;
  for (int64_t n = r0; n < r0 + rows && n < N; n++)
    for (int64_t j = c0 / vs; j < (c0 + cols) / vs; j++) {
      wk->vec[nv] = job->target + n * K + j * vs;
      wk->where[2 * nv] = n, wk->where[2 * nv + 1] = j;
      nv++;
    }
  for (int r = 0; r < R; r++) {
    memset(wk->count, 0, (size_t)E * sizeof *wk->count);
    if (job->e8p) {
      /* the lattice book at the scale that fits these vectors best, in the lattice's index order
       * (a decoder may form entries from the index bits), each vector on its nearest entry */
      const float beta = qf_cpu_e8p_scale(job->e8p, wk->vec, nv, r, R);
      for (int64_t e = 0; e < E; e++) qf_cpu_e8p_point(job->e8p, (uint32_t)e, beta, wk->centers + e * vs);
      lattice_step ls = {job->e8p, wk->vec, beta, wk->assign};
      parallel_for(job->threads, nv, kBlock, lattice_range, &ls);
      for (int64_t i = 0; i < nv; i++) wk->count[wk->assign[i]]++;
      for (int64_t e = 0; e < E; e++) wk->order[e].entry = wk->rank[e] = e;
    } else {
      if (!kmeans(wk->vec, nv, vs, E, job->iterations, seed, wk->centers, wk->assign, job->threads)) {
        wk->failed = 1;
        return;
      }
      /* entries as stored, then every vector assigned to its nearest stored entry */
      for (int64_t i = 0; i < E * vs; i++)
        wk->centers[i] = entry_value(t->fmt.entry_dtype, entry_bits(t->fmt.entry_dtype, wk->centers[i]));
      assign_all(job->threads, wk->vec, nv, wk->centers, E, vs, wk->assign);
      for (int64_t i = 0; i < nv; i++) wk->count[wk->assign[i]]++;
      /* entries reordered by use: the codebook cache keeps the head of each book close */
      for (int64_t e = 0; e < E; e++) wk->order[e].uses = wk->count[e], wk->order[e].entry = e;
      qsort(wk->order, (size_t)E, sizeof *wk->order, by_use);
      for (int64_t e = 0; e < E; e++) wk->rank[wk->order[e].entry] = e;
    }
    uint16_t *out = (uint16_t *)t->books + (r * t->sz.n_books + book) * E * vs;
    for (int64_t e = 0; e < E; e++)
      for (int c = 0; c < vs; c++) out[e * vs + c] = entry_bits(t->fmt.entry_dtype, wk->centers[wk->order[e].entry * vs + c]);
    for (int64_t i = 0; i < nv; i++) {
      qf_vq_set_index(t->codes + (r * N + wk->where[2 * i]) * t->sz.row_bytes, wk->where[2 * i + 1], t->fmt.index_bits,
                      (uint32_t)wk->rank[wk->assign[i]]);
      for (int c = 0; c < vs; c++) wk->vec[i][c] -= wk->centers[wk->assign[i] * vs + c]; /* the next residual */
    }
    /* hot entries: used more than mean + 3 sigma of this codebook's counts */
    double mean = (double)nv / (double)E, var = 0.0;
    for (int64_t e = 0; e < E; e++) var += ((double)wk->count[e] - mean) * ((double)wk->count[e] - mean);
    double limit = mean + 3.0 * sqrt(var / (double)E);
    for (int64_t e = 0; e < E; e++) {
      wk->unused += wk->count[e] == 0;
      if ((double)wk->count[e] > limit) wk->hot++, wk->hot_uses += wk->count[e];
    }
    wk->uses += nv;
  }
}

/* Part p of the books: a contiguous run of them, its seed advanced past the draws of the books
 * before it (what one thread walking every book would hold there). */
static void book_range(void *p, int part, int64_t lo, int64_t hi) {
  const book_job *job = p;
  uint64_t seed = job->seed;
  for (int64_t k = lo * job->t->fmt.residuals * job->draws; k > 0; k--) rng(&seed);
  for (int64_t book = lo; book < hi && !job->work[part].failed; book++) quantize_book(job, &job->work[part], book, &seed);
}

static void free_work(book_work *wk) {
  free(wk->vec), free(wk->where), free(wk->assign), free(wk->centers), free(wk->count), free(wk->rank), free(wk->order);
}

static int alloc_work(book_work *wk, int64_t max_vec, int64_t E, int vs) {
  memset(wk, 0, sizeof *wk);
  wk->vec = malloc((size_t)max_vec * sizeof *wk->vec);
  wk->where = malloc((size_t)max_vec * 2 * sizeof *wk->where);
  wk->assign = malloc((size_t)max_vec * sizeof *wk->assign);
  wk->centers = malloc((size_t)(E * vs) * sizeof *wk->centers);
  wk->count = malloc((size_t)E * sizeof *wk->count), wk->rank = malloc((size_t)E * sizeof *wk->rank);
  wk->order = malloc((size_t)E * sizeof *wk->order);
  return wk->vec && wk->where && wk->assign && wk->centers && wk->count && wk->rank && wk->order;
}

qf_status qf_cpu_vq_quantize(qf_ctx *ctx, const qf_mat *w, const qf_vq_tensors *t, int iterations, uint64_t seed, int threads,
                             qf_vq_stats *stats) {
  const int64_t N = t->N, K = t->K, E = t->sz.entries, n_books = t->sz.n_books;
  const int vs = t->fmt.vector_size, R = t->fmt.residuals;
  const int64_t rows = t->fmt.scope_rows ? t->fmt.scope_rows : N, cols = t->fmt.scope_cols ? t->fmt.scope_cols : K;
  const int64_t max_vec = rows * (cols / vs);
  if (threads > kMaxThreads) threads = kMaxThreads;
  /* Whole books per thread where there are enough of them and no two write the same code byte
   * (a book's indices start on a byte in every row); else one book at a time, its distances over
   * the threads. */
  const int own_bytes = t->sz.books_per_row == 1 || (cols / vs) * t->fmt.index_bits % 8 == 0;
  const int book_parts = own_bytes && n_books >= 2 ? (int)(n_books < threads ? n_books : threads) : 1;
  book_job job = {.t = t, .iterations = iterations, .threads = book_parts > 1 ? 1 : threads, .seed = seed,
                  .draws = t->fmt.lattice ? 0 : 2 * E - 1};
  float *target = malloc((size_t)(N * K) * sizeof *target);
  float *decoded = malloc((size_t)K * sizeof *decoded);
  book_work *work = calloc((size_t)book_parts, sizeof *work);
  qf_e8p_table *e8p = t->fmt.lattice ? malloc(sizeof *e8p) : NULL;
  int ok = target && decoded && work && (!t->fmt.lattice || e8p);
  for (int p = 0; ok && p < book_parts; p++) ok = alloc_work(&work[p], max_vec, E, vs);
  qf_status st = QF_OK;
  if (!ok) {
    st = qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_quantize: no memory for the codebooks of a %lld x %lld tensor", (long long)N,
                 (long long)K);
    goto done;
  }
  for (int64_t n = 0; n < N; n++) {
    float s = row_target(w, n, t->scales != NULL, target + n * K);
    if (t->scales) t->scales[n] = s;
  }
  memset(t->codes, 0, (size_t)(R * N * t->sz.row_bytes));
  if (e8p) qf_cpu_e8p_table(e8p);
  job.target = target, job.e8p = e8p, job.work = work;
  run_parts(book_parts, n_books, book_range, &job);
  int64_t hot = 0, unused = 0, uses = 0, hot_uses = 0;
  for (int p = 0; p < book_parts; p++) {
    if (work[p].failed) {
      st = qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_quantize: no memory for k-means");
      goto done;
    }
    hot += work[p].hot, unused += work[p].unused, uses += work[p].uses, hot_uses += work[p].hot_uses;
  }
  if (stats) {
    double err = 0.0, ref = 0.0;
    for (int64_t n = 0; n < N; n++) {
      decode_row(t, n, decoded);
      for (int64_t k = 0; k < K; k++) {
        double x = load_w(w, n, k);
        err += (decoded[k] - x) * (decoded[k] - x), ref += x * x;
      }
    }
    stats->rel_mse = ref > 0.0 ? err / ref : err;
    stats->entries = R * n_books * E;
    stats->unused_entries = unused;
    stats->hot_entries = hot;
    stats->hot_share = uses ? (double)hot_uses / (double)uses : 0.0;
  }
done:
  for (int p = 0; work && p < book_parts; p++) free_work(&work[p]);
  free(target), free(decoded), free(work), free(e8p);
  return st;
}

qf_status qf_cpu_vq_dequantize(qf_ctx *ctx, const qf_vq_tensors *t, const qf_mat *w) {
  float *row = malloc((size_t)t->K * sizeof *row);
  if (!row) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_dequantize: no memory for a row");
  for (int64_t n = 0; n < t->N; n++) {
    decode_row(t, n, row);
    void *out = qf_cpu_row(w, n);
    for (int64_t k = 0; k < t->K; k++) qf_cpu_put(w->dtype, out, k, row[k]);
  }
  free(row);
  return QF_OK;
}

qf_status qf_cpu_vq_encode(qf_ctx *ctx, const qf_mat *x, int64_t row0, const int32_t *slots, const qf_vq_tensors *t) {
  if (slots) {
    qf_status st = qf_cpu_check_slots(ctx, "qf_vq_encode_slots", "codes' rows", slots, x->rows, t->N);
    if (st) return st;
  }
  const int vs = t->fmt.vector_size, bits = t->fmt.index_bits;
  const int64_t E = t->sz.entries, nb = t->fmt.residuals * t->sz.n_books * E * vs;
  float *v = malloc((size_t)t->K * sizeof *v), *books = malloc((size_t)nb * sizeof *books);
  if (!v || !books) {
    free(v), free(books);
    return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_encode: no memory for the codebooks in fp32");
  }
  for (int64_t i = 0; i < nb; i++) books[i] = entry_value(t->fmt.entry_dtype, ((const uint16_t *)t->books)[i]);
  for (int64_t i = 0; i < x->rows; i++) {
    const int64_t out = slots ? slots[i] : i, mrow = slots ? out : row0 + i; /* its code row, its matrix row */
    if (out < 0) continue;
    float s = row_target(x, i, t->scales != NULL, v);
    if (t->scales) t->scales[out] = s;
    for (int r = 0; r < t->fmt.residuals; r++) {
      uint8_t *row = t->codes + (r * t->N + out) * t->sz.row_bytes;
      memset(row, 0, (size_t)t->sz.row_bytes);
      for (int64_t j = 0; j < t->K / vs; j++) {
        const float *book = books + (r * t->sz.n_books + book_of(t, mrow, j)) * E * vs;
        int e = nearest(v + j * vs, book, E, vs);
        qf_vq_set_index(row, j, bits, (uint32_t)e);
        for (int c = 0; c < vs; c++) v[j * vs + c] -= book[e * vs + c];
      }
    }
  }
  free(v), free(books);
  return QF_OK;
}

static void store_f(const qf_mat *m, int64_t r, int64_t c, double v) { qf_cpu_put(m->dtype, qf_cpu_row(m, r), c, (float)v); }

qf_status qf_cpu_vq_pack_gemv(qf_ctx *ctx, const qf_vq_tensors *t, uint8_t *packed) {
  (void)ctx;
  const int bits = t->fmt.index_bits;
  const int64_t tiles = qf_vq_pack_tiles(t->N), chunks = qf_vq_pack_chunks(t->K / t->fmt.vector_size);
  const int64_t cb = qf_vq_pack_chunk_bytes(bits);
  for (int64_t r = 0; r < t->fmt.residuals; r++)
    for (int64_t n = 0; n < tiles * QF_VQ_PACK_ROWS; n++)
      for (int64_t c = 0; c < chunks; c++) {
        uint8_t *out = packed + qf_vq_pack_offset(r, n, c, tiles, chunks, bits);
        const uint8_t *row = t->codes + (r * t->N + n) * t->sz.row_bytes;
        for (int64_t b = 0; b < cb; b++) out[b] = n < t->N ? qf_vq_pack_byte(row, t->sz.row_bytes, c, b, bits) : 0;
      }
  return QF_OK;
}

static qf_status gemm_standard(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y);

/* Packed codes: unpacked into the standard layout (the bytes past the last chunk are zeros), then
 * the standard reference. */
static qf_status gemm_packed(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  const int bits = w->fmt.index_bits;
  const int64_t tiles = qf_vq_pack_tiles(w->N), chunks = qf_vq_pack_chunks(w->K / w->fmt.vector_size);
  qf_vq_tensors plain = *w;
  plain.packed = 0;
  plain.codes = calloc((size_t)(w->fmt.residuals * w->N * w->sz.row_bytes), 1);
  if (!plain.codes) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_gemm: no memory to unpack the codes");
  for (int64_t r = 0; r < w->fmt.residuals; r++)
    for (int64_t n = 0; n < w->N; n++)
      for (int64_t c = 0; c < chunks; c++) {
        memcpy(plain.codes + (r * w->N + n) * w->sz.row_bytes + c * bits,
               w->codes + qf_vq_pack_offset(r, n, c, tiles, chunks, bits),
               (size_t)qf_vq_pack_span(w->sz.row_bytes, c, bits));
      }
  const qf_status st = gemm_standard(ctx, x, &plain, y);
  free(plain.codes);
  return st;
}

qf_status qf_cpu_vq_gemm(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  return w->packed ? gemm_packed(ctx, x, w, y) : gemm_standard(ctx, x, w, y);
}

static qf_status gemm_standard(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y) {
  float *row = malloc((size_t)w->K * sizeof *row);
  if (!row) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_gemm: no memory for a row");
  for (int64_t n = 0; n < w->N; n++) {
    decode_row(w, n, row);
    for (int64_t m = 0; m < x->rows; m++) {
      double acc = 0.0;
      for (int64_t k = 0; k < w->K; k++) acc += (double)load_w(x, m, k) * row[k];
      store_f(y, m, n, acc);
    }
  }
  free(row);
  return QF_OK;
}

/* The code row of entry b's token t: its page's, or b * seq_len + t. */
static int64_t attn_row(const qf_vq_attention_args *a, int64_t b, int64_t t) {
  const int64_t P = a->page_size;
  return a->block_table ? a->block_table[b * a->bt_ld + t / P] * P + t % P : b * a->seq_len + t;
}

/* qf_vq_attention_decode_append's append (a->k_new, lengths and pages checked): entry b's new K
 * and V rows encoded as its token L_b - 1, by slot. */
static qf_status append_new_tokens(qf_ctx *ctx, const qf_vq_attention_args *a) {
  if (a->k.N > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "qf_vq_attention_decode_append: the cache's %lld rows exceed 32-bit slots", (long long)a->k.N);
  int32_t *slots = malloc((size_t)a->B * sizeof *slots);
  if (!slots) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_attention_decode_append: no memory for %lld slots", (long long)a->B);
  for (int64_t b = 0; b < a->B; b++) {
    const int64_t L = a->kv_lens ? a->kv_lens[b] : a->seq_len;
    slots[b] = L > 0 ? (int32_t)attn_row(a, b, L - 1) : -1;
  }
  qf_status st = qf_cpu_vq_encode(ctx, &a->k_new, 0, slots, &a->k);
  if (st == QF_OK) st = qf_cpu_vq_encode(ctx, &a->v_new, 0, slots, &a->v);
  free(slots);
  return st;
}

qf_status qf_cpu_vq_attention_decode(qf_ctx *ctx, const qf_vq_attention_args *a) {
  for (int64_t b = 0; a->kv_lens && b < a->B; b++)  /* (before anything is written) */
    if (a->kv_lens[b] < 0 || a->kv_lens[b] > a->seq_len)
      return qf_fail(ctx, QF_ERR_VALUE, "qf_vq_attention_decode: kv_lens[%lld]=%lld is outside [0, seq_len=%lld]", (long long)b,
                     (long long)a->kv_lens[b], (long long)a->seq_len);
  const int64_t T = a->seq_len, C = a->Hkv * a->D, group = a->Hq / a->Hkv, P = a->page_size;
  for (int64_t b = 0; a->block_table && b < a->B; b++) /* the pages of every entry's tokens */
    for (int64_t j = 0, L = a->kv_lens ? a->kv_lens[b] : T; j * P < L; j++) {
      const int64_t page = a->block_table[b * a->bt_ld + j];
      if (page < 0 || page >= a->num_pages)
        return qf_fail(ctx, QF_ERR_VALUE, "qf_vq_attention_decode: block_table[%lld, %lld]=%lld is outside [0, %lld pages)",
                       (long long)b, (long long)j, (long long)page, (long long)a->num_pages);
    }
  float *k = malloc((size_t)(T * C) * sizeof *k), *v = malloc((size_t)(T * C) * sizeof *v);
  double *score = malloc((size_t)T * sizeof *score), *acc = malloc((size_t)a->D * sizeof *acc);
  qf_status st = QF_OK;
  if (!k || !v || !score || !acc)
    st = qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_vq_attention_decode: no memory for %lld decoded tokens", (long long)T);
  else if (a->k_new.data) /* (the new tokens are below L_b: their pages were checked above) */
    st = append_new_tokens(ctx, a);
  if (st) {
    free(k), free(v), free(score), free(acc);
    return st;
  }
  for (int64_t b = 0; b < a->B; b++) {
    const int64_t L = a->kv_lens ? a->kv_lens[b] : T;  /* entry b's tokens */
    for (int64_t t = 0; t < L; t++) {
      const int64_t row = attn_row(a, b, t);
      decode_row(&a->k, row, k + t * C), decode_row(&a->v, row, v + t * C);
    }
    for (int64_t h = 0; h < a->Hq; h++) {
      const int64_t g = h / group;
      if (L == 0) {  /* no token: o = 0, lse = -inf (as qf_attention's rows with no visible key) */
        for (int64_t d = 0; d < a->D; d++) store_f(&a->o, b, h * a->D + d, 0.0);
        a->lse[b * a->Hq + h] = -INFINITY;
        continue;
      }
      double mx = -INFINITY, l = 0.0;
      for (int64_t t = 0; t < L; t++) {
        double dot = 0.0;
        for (int64_t d = 0; d < a->D; d++) dot += (double)load_w(&a->q, b, h * a->D + d) * k[t * C + g * a->D + d];
        score[t] = a->sm_scale * dot;
        if (score[t] > mx) mx = score[t];
      }
      for (int64_t d = 0; d < a->D; d++) acc[d] = 0.0;
      for (int64_t t = 0; t < L; t++) {
        double p = exp(score[t] - mx);
        l += p;
        for (int64_t d = 0; d < a->D; d++) acc[d] += p * v[t * C + g * a->D + d];
      }
      for (int64_t d = 0; d < a->D; d++) store_f(&a->o, b, h * a->D + d, acc[d] / l);
      a->lse[b * a->Hq + h] = (float)(mx + log(l));
    }
  }
  free(k), free(v), free(score), free(acc);
  return QF_OK;
}
