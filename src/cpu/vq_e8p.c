/* The E8P lattice codebook (QuIP#'s "E8 padded" book of 2^16 points for vectors of 8 values) and
 * the quantizer's nearest-point search on it (docs/VQ.md, "QuIP#-4").
 *
 * A point is s * (sign-flipped pattern + shift): one of 256 patterns of absolute values (the 227
 * vectors of {1/2, 3/2, 5/2, 7/2}^8 with squared norm <= 10 in lexicographic order, then 29 with
 * five 3/2 and three 1/2), signs with as many minus signs as the pattern's sum is odd (so that the
 * signed pattern lies in D8 + 1/2, a coset of E8), and a shift of +1/4 or -1/4 on every value.
 * Index bits: 15-8 the pattern, 7-1 the signs of values 1 to 7 (bit 7 - j for value j; a set bit
 * is a minus), 0 the shift (set: +1/4). Value 0's sign is the one the parity rule leaves. */
#include <math.h>

#include "core/backend.h"
#include "formats/vq.h"

void qf_cpu_e8p_table(qf_e8p_table *tb) {
  uint8_t twice[QF_E8P_PATTERNS][8];
  qf_e8p_patterns(twice, tb->odd);
  for (int p = 0; p < QF_E8P_PATTERNS; p++)
    for (int j = 0; j < 8; j++) tb->a[j][p] = 0.5f * (float)twice[p][j];
}

/* Index idx of the book scaled by beta, as 8 floats (exact: beta has at most 7 significant bits). */
void qf_cpu_e8p_point(const qf_e8p_table *tb, uint32_t idx, float beta, float *out) {
  const int p = (int)(idx >> 8), flips = (int)(idx >> 1) & 127;
  const float shift = idx & 1 ? 0.25f : -0.25f;
  const int minus0 = (__builtin_popcount((unsigned)flips) & 1) != tb->odd[p];
  for (int j = 0; j < 8; j++) {
    const int minus = j == 0 ? minus0 : (flips >> (7 - j)) & 1;
    out[j] = beta * ((minus ? -tb->a[j][p] : tb->a[j][p]) + shift);
  }
}

/* The index of the signs `minus` (value j negative when bit j is set) of pattern p with shift bit b. */
static uint32_t index_of(int p, unsigned minus, int b) {
  unsigned flips = 0;
  for (int j = 1; j < 8; j++) flips |= ((minus >> j) & 1u) << (7 - j);
  return (uint32_t)p << 8 | flips << 1 | (uint32_t)b;
}

/* For shift bit b and pattern p: the squared distance (float64) from v to the pattern's nearest
 * point with that shift; *minus: its signs, *cost: what flipping value j from those signs adds. */
static double pattern_best(const qf_e8p_table *tb, const float *v, float beta, int b, int p, unsigned *minus, double cost[8]) {
  const double s = b ? 0.25 : -0.25;
  double d = 0.0, cheapest = INFINITY;
  unsigned m = 0;
  int cheapest_j = 0;
  for (int j = 0; j < 8; j++) {
    const double z = (double)v[j] - beta * s, a = (double)beta * tb->a[j][p];
    d += (fabs(z) - a) * (fabs(z) - a);
    if (z < 0.0) m |= 1u << j;
    cost[j] = 4.0 * fabs(z) * a;
    if (cost[j] < cheapest) cheapest = cost[j], cheapest_j = j;
  }
  if ((__builtin_popcount(m) & 1) != tb->odd[p]) { /* the parity rule: one more flip, the cheapest */
    m ^= 1u << cheapest_j;
    d += cheapest;
    cost[cheapest_j] = -cost[cheapest_j]; /* flipping it back saves as much */
  }
  *minus = m;
  return d;
}

/* For shift bit b: every pattern's pattern_best distance at once (the patterns are the inner loop,
 * which the compiler vectorizes), into d. */
static void pattern_dists(const qf_e8p_table *tb, const float *v, float beta, int b, double d[QF_E8P_PATTERNS]) {
  const double s = b ? 0.25 : -0.25;
  double cheapest[QF_E8P_PATTERNS];
  unsigned m = 0;
  for (int p = 0; p < QF_E8P_PATTERNS; p++) d[p] = 0.0, cheapest[p] = INFINITY;
  for (int j = 0; j < 8; j++) {
    const double z = (double)v[j] - beta * s, x = fabs(z);
    if (z < 0.0) m |= 1u << j;
    for (int p = 0; p < QF_E8P_PATTERNS; p++) {
      const double a = (double)beta * tb->a[j][p], c = 4.0 * x * a;
      d[p] += (x - a) * (x - a);
      cheapest[p] = c < cheapest[p] ? c : cheapest[p];
    }
  }
  const int odd = __builtin_popcount(m) & 1;
  for (int p = 0; p < QF_E8P_PATTERNS; p++)
    if (odd != tb->odd[p]) d[p] += cheapest[p];
}

/* Every (shift bit, pattern) distance into dist; returns the least. */
static double all_patterns(const qf_e8p_table *tb, const float *v, float beta, double dist[2][QF_E8P_PATTERNS]) {
  double best = INFINITY;
  for (int b = 0; b < 2; b++) {
    pattern_dists(tb, v, beta, b, dist[b]);
    for (int p = 0; p < QF_E8P_PATTERNS; p++) best = dist[b][p] < best ? dist[b][p] : best; /* (vectorized) */
  }
  return best;
}

/* The entry of the book beta * E8P that qf_vq_encode picks for v: the smallest fp32 distance
 * (qf_cpu_vq_dist2), the lowest index on ties, without scanning the 65,536 entries. The float64
 * search finds the nearest point; every entry whose fp32 distance could reach that point's lies
 * within a relative 1e-5 of its distance (the fp32 sum of 8 squares errs by under 2^-20 of it), and
 * those entries are enumerated (a pattern's sign choices cost the flipped values' costs more) and
 * compared in fp32 as the encoder compares them. */
uint32_t qf_cpu_e8p_nearest(const qf_e8p_table *tb, const float *v, float beta) {
  double dist[2][QF_E8P_PATTERNS], cost[8];
  unsigned minus;
  const double best = all_patterns(tb, v, beta, dist);
  const double limit = best * (1.0 + 1e-5) + 1e-30;
  uint32_t pick = 0;
  float pick_d = INFINITY, e[8];
  for (int b = 0; b < 2; b++)
    for (int p = 0; p < QF_E8P_PATTERNS; p++) {
      if (dist[b][p] > limit) continue;
      const double d0 = pattern_best(tb, v, beta, b, p, &minus, cost);
      /* sign choices that keep the parity: flip an even number of values (a negative cost undoes
       * the parity flip, so pairs with it are covered) */
      for (unsigned set = 0; set < 256; set++) {
        if (__builtin_popcount(set) & 1) continue;
        double d = d0;
        for (int j = 0; j < 8; j++)
          if ((set >> j) & 1u) d += cost[j];
        if (d > limit) continue;
        const uint32_t idx = index_of(p, minus ^ set, b);
        qf_cpu_e8p_point(tb, idx, beta, e);
        const float fd = qf_cpu_vq_dist2(v, e, 8);
        if (fd < pick_d || (fd == pick_d && idx < pick)) pick_d = fd, pick = idx;
      }
    }
  return pick;
}

/* The nearest point of beta * E8P to v (float64 search), written to out. */
static void nearest_point(const qf_e8p_table *tb, const float *v, float beta, float *out) {
  double dist[2][QF_E8P_PATTERNS], cost[8];
  unsigned minus;
  const double best = all_patterns(tb, v, beta, dist);
  int i = 0; /* the first (shift bit, pattern) at the least distance */
  while (i < 2 * QF_E8P_PATTERNS - 1 && dist[i / QF_E8P_PATTERNS][i % QF_E8P_PATTERNS] != best) i++;
  const int b = i / QF_E8P_PATTERNS, p = i % QF_E8P_PATTERNS;
  pattern_best(tb, v, beta, b, p, &minus, cost);
  qf_cpu_e8p_point(tb, index_of(p, minus, b), beta, out);
}

static float scale_of(int m, int r) { return ldexpf((float)m, -(6 + 2 * r)); }

/* The m of 16 to 127 with the least cost(m), in three passes: every eighth m, then every second
 * within 4 of the best, then its neighbours. */
static int best_m(double (*cost)(const void *, int), const void *arg) {
  int pick = 64;
  double best = INFINITY;
  for (int by = 8; by >= 1; by /= 2) {
    if (by == 4) continue;
    const int lo = by == 8 ? 16 : pick - 2 * by, hi = by == 8 ? 127 : pick + 2 * by;
    for (int m = lo < 16 ? 16 : lo; m <= (hi > 127 ? 127 : hi); m += by) {
      if (by < 8 && m == pick) continue;
      const double c = cost(arg, m);
      if (c < best) best = c, pick = m;
    }
  }
  return pick;
}

typedef struct {
  const qf_e8p_table *tb;
  float *const *vec; /* the vectors scored, every step-th of nv */
  int64_t nv, step;
  int r;             /* the residual whose scale is chosen */
  float *left;       /* NULL, or [sampled vectors, 8] for what residual r leaves: the error is then
                        scored after the next residual too, at its own best scale */
} scale_search;

static double cost_of_scale(const void *arg, int m) {
  const scale_search *q = arg;
  const float beta = scale_of(m, q->r);
  if (!q->left) {
    double err = 0.0, dist[2][QF_E8P_PATTERNS];
    for (int64_t i = 0; i < q->nv; i += q->step) err += all_patterns(q->tb, q->vec[i], beta, dist);
    return err;
  }
  float *rows[256], e[8];
  int64_t n = 0;
  for (int64_t i = 0; i < q->nv; i += q->step, n++) {
    nearest_point(q->tb, q->vec[i], beta, e);
    rows[n] = q->left + n * 8;
    for (int j = 0; j < 8; j++) rows[n][j] = q->vec[i][j] - e[j];
  }
  const scale_search inner = {q->tb, rows, n, 1, q->r + 1, NULL};
  return cost_of_scale(&inner, best_m(cost_of_scale, &inner));
}

/* The scale of residual r's book: m / 2^(6 + 2 r) with m of 16 to 127 (7 bits, so that every point
 * is exact in fp16), the m whose book leaves the least squared error on (at most 2048 evenly spaced)
 * vectors. Where another residual follows, the error counted is the one left after that residual
 * too, at its own best scale, on at most 256 vectors: a first book fitted on its own leaves about a
 * fifth more error after the second (4-bit QuIP#-4 on Gaussian vectors: 0.0103 against 0.0083). */
float qf_cpu_e8p_scale(const qf_e8p_table *tb, float *const *vec, int64_t nv, int r, int residuals) {
  if (r + 1 < residuals) {
    float left[256 * 8];
    const scale_search q = {tb, vec, nv, nv > 256 ? (nv + 255) / 256 : 1, r, left};
    return scale_of(best_m(cost_of_scale, &q), r);
  }
  const scale_search q = {tb, vec, nv, nv > 2048 ? (nv + 2047) / 2048 : 1, r, NULL};
  return scale_of(best_m(cost_of_scale, &q), r);
}
