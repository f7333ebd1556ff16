/* qf_attention on CUDA against the CPU reference (float64), element by element.
 *  - Shapes: prefill tiles (64 rows of packed (token, query head) pairs) at head dims 64, 128,
 *    256 and 512 with causal, sliding-window, both and no mask, fewer queries than keys, GQA
 *    groups 1 to 8, sinks; decode tiles (at most 16 rows per kv head) at every head dim, long
 *    caches whose keys split over CTAs (partials merged by LSE), a window, two query tokens
 *    (speculative decode), MHA batches; queries before every key (Sq > Skv, causal: rows with
 *    nothing visible) and an empty cache (Skv = 0), with and without sinks; MLA's head dims (q and
 *    k 192, v and o 128) in prefill, decode and paged prefill.
 *  - Layouts: [B, S, H, D] and [B, H, S, D] storage, heads padded by 8 or 16 elements so that
 *    the gaps (poisoned) must stay untouched; o in fp32 and the inputs' 16-bit type.
 *  - Each case runs twice and must give the same bytes (a fixed summation order); a sentinel past
 *    o and lse stays poisoned. Paged cases are also captured once in a CUDA graph and replayed as
 *    the sequence lengths change on the device, each replay against a direct call with the same
 *    lengths, byte for byte.
 *  - Packed sequences (qf_attention_varlen, qf_attention_paged_varlen): queries and keys per
 *    sequence from offsets on the device, prefill and decode rows, an empty sequence, tokens past
 *    the last sequence untouched; NaN in the value row right after a sequence's keys (which its
 *    last tile loads) leaves it unchanged; paged caches whose unused slots hold NaN; a CUDA graph
 *    of each call replayed after its offsets changed on the device, against a direct call.
 *  - FP8 keys and values (e4m3fn): decode, split, prompts (the prefill kernel's codes widened by its
 *    producer at D = 64, 128 and 256, the decode kernel at 512 and MLA's dims), paged and packed
 *    calls, every head dim, with a scale per kv head (one negative k_scale among them) or one for
 *    the tensor; the reference takes code x scale, and the bounds below use those values.
 *  - qf_attention_cache_append: bf16 and fp16 rows copied or turned into e4m3fn codes at shuffled
 *    slots, byte for byte as the CPU's over the whole cache; a slot past the cache skipped.
 *  - Refusals write nothing: head dim 96, a misaligned q, a stride of 8 bytes.
 * Tolerance per element, from the numerics (u = 2^-24; S = sm_scale * max over keys of
 * sum_d |q_d k_d| for the row; vmax = max |v| of its kv head): a score is an fp32 sum of D
 * products, off by at most ds = 2 (D + 2) u S (the factor 2 for the tensor cores' accumulation
 * order), so a weight is off by 2 ds relative and o by 4 ds vmax; the probabilities are rounded to
 * the input type for P . V, 2^-9 (bf16) or 2^-11 (fp16) relative each, so o moves by that times
 * vmax at most; fp32 sums add under 1e-5 vmax; 16-bit outputs may differ by one ulp (2^-7 bf16,
 * 2^-10 fp16 relative). lse: 2 ds + 1e-5 (1 + |lse|) (hardware exp2 and log2). */
#include <inttypes.h>
#include <math.h>

#include "gpu.h"

static qf_ctx *gpu, *cpu;


typedef struct {
  int B, Sq, Skv, Hq, Hkv, D;
  qf_dtype in, out;
  int causal, window, sinks;
  int bhsd;  /* k and v stored [B, H, S, D] */
  float sm_scale;
  int page;  /* > 0: qf_attention_paged over pages of `page` keys, sequence b holding lens[b] <= Skv */
  int dv;    /* v's and o's head dim (0: D) */
  int fp8;   /* k and v e4m3fn with scales: 1 one per kv head, 2 one for the tensor ([1]) */
} acase;

/* FP8 keys' and values' scales: per kv head g (k_scale negative for odd g) or one for the tensor;
 * host and device copies and their tensors. Without fp8 every scale is 1 and no tensor is passed. */
typedef struct {
  float k[64], v[64];
  pair kp, vp;
  int64_t shape[1];
  DLTensor kh, kd, vh, vd;
} kv_scales;

static void scales_init(kv_scales *s, int fp8, int Hkv) {
  memset(s, 0, sizeof *s);
  for (int g = 0; g < Hkv; g++) {
    const int i = fp8 == 2 ? 0 : g;
    s->k[g] = fp8 ? (i % 2 ? -1.0f : 1.0f) * (0.75f + 0.25f * i) : 1.0f;
    s->v[g] = fp8 ? 1.5f - 0.125f * i : 1.0f;
  }
  if (!fp8) return;
  s->shape[0] = fp8 == 2 ? 1 : Hkv;
  pair_init(&s->kp, (size_t)s->shape[0] * 4, s->k), pair_init(&s->vp, (size_t)s->shape[0] * 4, s->v);
  s->kh = dl_tensor(s->kp.ref, QF_F32, 1, s->shape, kDLCPU), s->kd = dl_tensor(s->kp.dev, QF_F32, 1, s->shape, kDLCUDA);
  s->vh = dl_tensor(s->vp.ref, QF_F32, 1, s->shape, kDLCPU), s->vd = dl_tensor(s->vp.dev, QF_F32, 1, s->shape, kDLCUDA);
}

/* The options with the scales on the host (dev 0) or the device. */
static qf_attention_opts scaled_opts(qf_attention_opts opt, kv_scales *s, int dev) {
  if (s->shape[0]) opt.k_scale = dev ? &s->kd : &s->kh, opt.v_scale = dev ? &s->vd : &s->vh;
  return opt;
}

static void scales_free(kv_scales *s) {
  if (s->shape[0]) pair_free(&s->kp), pair_free(&s->vp);
}

/* A 4-D tensor [B, S, H, D] with heads padded by `pad` elements, as [B, S, H, D] or [B, H, S, D]
 * storage; host buffer (reference copy), device buffer. */
typedef struct {
  int64_t shape[4], strides[4], elems;
  size_t bytes;
  uint8_t *host;
  void *dev;
  DLTensor th, td;
} t4;

static void t4_init(t4 *t, int B, int S, int H, int D, int pad, int bhsd, qf_dtype dt) {
  const int64_t hd = D + pad;
  t->shape[0] = B, t->shape[1] = S, t->shape[2] = H, t->shape[3] = D;
  t->strides[3] = 1;
  if (bhsd) t->strides[1] = hd, t->strides[2] = (int64_t)S * hd, t->strides[0] = (int64_t)H * S * hd;
  else t->strides[2] = hd, t->strides[1] = (int64_t)H * hd, t->strides[0] = (int64_t)S * H * hd;
  t->elems = (int64_t)B * S * H * hd;
  t->bytes = (size_t)t->elems * float_size(dt) + PAIR_TAIL;
  t->host = malloc(t->bytes);
  memset(t->host, POISON, t->bytes);
  t->dev = dev_alloc(t->bytes);
  t->th = dl_tensor(t->host, dt, 4, t->shape, kDLCPU);
  t->th.strides = t->strides;
  t->td = t->th;
  t->td.data = t->dev, t->td.device.device_type = kDLCUDA;
}

static int64_t t4_off(const t4 *t, int b, int s, int h, int d) {
  return b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + d;
}

static void t4_fill(t4 *t, qf_dtype dt, uint64_t *seed) {
  for (int b = 0; b < t->shape[0]; b++)
    for (int s = 0; s < t->shape[1]; s++)
      for (int h = 0; h < t->shape[2]; h++)
        for (int d = 0; d < t->shape[3]; d++) float_put(t->host, dt, (size_t)t4_off(t, b, s, h, d), rng_normal(seed));
  CUDA_OK(cudaMemcpy(t->dev, t->host, t->bytes, cudaMemcpyHostToDevice));
}

static void t4_free(t4 *t) {
  free(t->host);
  CUDA_OK(cudaFree(t->dev));
}

static void run_case(const acase *c) {
  char desc[200];
  const qf_dtype kvt = c->fp8 ? QF_E4M3FN : c->in;
  snprintf(desc, sizeof desc, "B %d Sq %d Skv %d Hq %d Hkv %d D %d/%d %s%s->%s causal %d window %d sinks %d %s page %d", c->B,
           c->Sq, c->Skv, c->Hq, c->Hkv, c->D, c->dv ? c->dv : c->D, qf_dtype_name(c->in),
           c->fp8 == 1 ? " kv e4m3fn/head" : c->fp8 ? " kv e4m3fn" : "", qf_dtype_name(c->out), c->causal, c->window, c->sinks,
           c->bhsd ? "bhsd" : "bshd", c->page);
  uint64_t seed = 0x5eed + (uint64_t)c->Skv * 131 + (uint64_t)c->D;
  const int dv = c->dv ? c->dv : c->D;
  t4 q, k, v, o;
  t4_init(&q, c->B, c->Sq, c->Hq, c->D, 8, 0, c->in);
  t4_init(&k, c->B, c->Skv, c->Hkv, c->D, 16, c->bhsd, kvt);
  t4_init(&v, c->B, c->Skv, c->Hkv, dv, c->fp8 ? 16 : 8, c->bhsd, kvt);
  t4_init(&o, c->B, c->Sq, c->Hq, dv, 8, 0, c->out);
  t4_fill(&q, c->in, &seed), t4_fill(&k, kvt, &seed), t4_fill(&v, kvt, &seed);
  kv_scales sc;
  scales_init(&sc, c->fp8, c->Hkv);
  CUDA_OK(cudaMemcpy(o.dev, o.host, o.bytes, cudaMemcpyHostToDevice)); /* poisoned */
  const size_t n_lse = (size_t)c->B * c->Hq * c->Sq;
  pair lse, sk;
  pair_init(&lse, n_lse * 4, NULL);
  float sinks[64];
  for (int h = 0; h < c->Hq; h++) sinks[h] = rng_normal(&seed) * 2.0f;
  pair_init(&sk, (size_t)c->Hq * 4, sinks);
  int64_t lshape[3] = {c->B, c->Hq, c->Sq}, sshape[1] = {c->Hq};
  DLTensor lh = dl_tensor(lse.ref, QF_F32, 3, lshape, kDLCPU), ld = dl_tensor(lse.dev, QF_F32, 3, lshape, kDLCUDA);
  DLTensor sh = dl_tensor(sk.ref, QF_F32, 1, sshape, kDLCPU), sd = dl_tensor(sk.dev, QF_F32, 1, sshape, kDLCUDA);
  const qf_attention_opts opt0 = {.sm_scale = c->sm_scale, .causal = c->causal, .window = c->window};
  const qf_attention_opts opt_h = scaled_opts(opt0, &sc, 0), opt_d = scaled_opts(opt0, &sc, 1);

  /* Paged: sequence b holds lens[b] keys (the first lens[b] of k and v), scattered over shuffled
   * pages of a cache with two pages to spare; table entries past a sequence hold garbage. */
  int lens[64], n_pages = 2, max_pages = c->page ? (c->Skv + c->page - 1) / c->page : 0;
  for (int b = 0; b < c->B; b++) lens[b] = c->page ? c->Skv - (b * 997) % (c->Skv / 2 + 1) : c->Skv;
  for (int b = 0; c->page && b < c->B; b++) n_pages += (lens[b] + c->page - 1) / c->page;
  t4 kc, vc;
  pair table, lens_p;
  int64_t tshape[2] = {c->B, max_pages > 0 ? max_pages : 1}, lshape1[1] = {c->B};
  DLTensor th, td, lnh, lnd;
  memset(&kc, 0, sizeof kc), memset(&vc, 0, sizeof vc), memset(&table, 0, sizeof table), memset(&lens_p, 0, sizeof lens_p);
  memset(&th, 0, sizeof th), memset(&td, 0, sizeof td), memset(&lnh, 0, sizeof lnh), memset(&lnd, 0, sizeof lnd);
  if (c->page) {
    t4_init(&kc, n_pages, c->page, c->Hkv, c->D, 16, 0, kvt);
    t4_init(&vc, n_pages, c->page, c->Hkv, dv, c->fp8 ? 16 : 8, c->bhsd, kvt);
    int32_t *tab = malloc((size_t)c->B * max_pages * 4), *perm = malloc((size_t)n_pages * 4);
    for (int i = 0; i < n_pages; i++) perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
      const int r = (int)(rng_next(&seed) % (uint64_t)(i + 1)), t = perm[i];
      perm[i] = perm[r], perm[r] = t;
    }
    for (int b = 0, next = 0; b < c->B; b++)
      for (int pg = 0; pg < max_pages; pg++) {
        const int used = pg * c->page < lens[b];
        tab[b * max_pages + pg] = used ? perm[next++] : (pg % 2 ? -7 : 1 << 30);
        for (int slot = 0; used && slot < c->page && pg * c->page + slot < lens[b]; slot++)
          for (int g = 0; g < c->Hkv; g++)
            for (int d = 0; d < c->D; d++) {
              const size_t e = float_size(kvt), j = (size_t)pg * c->page + slot, pgi = (size_t)tab[b * max_pages + pg];
              memcpy(kc.host + (size_t)t4_off(&kc, (int)pgi, slot, g, d) * e, k.host + (size_t)t4_off(&k, b, (int)j, g, d) * e, e);
              if (d < dv)
                memcpy(vc.host + (size_t)t4_off(&vc, (int)pgi, slot, g, d) * e, v.host + (size_t)t4_off(&v, b, (int)j, g, d) * e, e);
            }
      }
    CUDA_OK(cudaMemcpy(kc.dev, kc.host, kc.bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(vc.dev, vc.host, vc.bytes, cudaMemcpyHostToDevice));
    pair_init(&table, (size_t)c->B * max_pages * 4, tab);
    pair_init(&lens_p, (size_t)c->B * 4, lens);
    th = dl_tensor(table.ref, QF_I32, 2, tshape, kDLCPU), td = dl_tensor(table.dev, QF_I32, 2, tshape, kDLCUDA);
    lnh = dl_tensor(lens_p.ref, QF_I32, 1, lshape1, kDLCPU), lnd = dl_tensor(lens_p.dev, QF_I32, 1, lshape1, kDLCUDA);
    free(tab), free(perm);
  }
#define RUN(ctx, side, dev)                                                                                          \
  (c->page ? qf_attention_paged(ctx, &q.side, &kc.side, &vc.side, dev ? &td : &th, dev ? &lnd : &lnh,               \
                                c->sinks ? (dev ? &sd : &sh) : NULL, dev ? &opt_d : &opt_h, &o.side, dev ? &ld : &lh) \
           : qf_attention(ctx, &q.side, &k.side, &v.side, c->sinks ? (dev ? &sd : &sh) : NULL, dev ? &opt_d : &opt_h, \
                          &o.side, dev ? &ld : &lh))

  qf_status st = RUN(cpu, th, 0);
  if (!CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu))) return;
  st = RUN(gpu, td, 1);
  CUDA_OK(cudaDeviceSynchronize());
  if (!CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu))) return;
  uint8_t *got = malloc(o.bytes), *again = malloc(o.bytes);
  float *got_lse = malloc(lse.bytes);
  CUDA_OK(cudaMemcpy(got, o.dev, o.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_lse, lse.dev, lse.bytes, cudaMemcpyDeviceToHost));
  /* the same call again: the same bytes */
  CHECK(RUN(gpu, td, 1) == QF_OK, "%s: rerun", desc);
  CUDA_OK(cudaMemcpy(again, o.dev, o.bytes, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(got, again, o.bytes), "%s: a second run gave other bytes", desc);

  const double u = ldexp(1.0, -24), sm = c->sm_scale > 0 ? c->sm_scale : 1.0 / sqrt((double)c->D);
  const double p_round = c->in == QF_BF16 ? ldexp(1.0, -9) : ldexp(1.0, -11);
  const double out_ulp = c->out == QF_F32 ? ldexp(1.0, -23) : c->out == QF_BF16 ? ldexp(1.0, -7) : ldexp(1.0, -10);
  const int group = c->Hq / c->Hkv;
  long bad = 0, bad_lse = 0;
  double worst = 0.0; /* largest error over its bound */
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->Hq; h++) {
      const int g = h / group;
      double vmax = 0.0;
      for (int j = 0; j < lens[b]; j++)
        for (int d = 0; d < dv; d++) vmax = fmax(vmax, fabs(float_get(v.host, kvt, (size_t)t4_off(&v, b, j, g, d)) * sc.v[g]));
      for (int i = 0; i < c->Sq; i++) {
        double S = 0.0;
        for (int j = 0; j < lens[b]; j++) {
          double a = 0.0;
          for (int d = 0; d < c->D; d++)
            a += fabs((double)float_get(q.host, c->in, (size_t)t4_off(&q, b, i, h, d)) *
                      float_get(k.host, kvt, (size_t)t4_off(&k, b, j, g, d)) * sc.k[g]);
          S = fmax(S, sm * a);
        }
        const double ds = 2.0 * (c->D + 2) * u * S;
        for (int d = 0; d < dv; d++) {
          const size_t e = (size_t)t4_off(&o, b, i, h, d);
          const double ref = float_get(o.host, c->out, e), val = float_get(got, c->out, e);
          const double bound = vmax * (4 * ds + p_round + 1e-5) + out_ulp * fabs(ref);
          const double err = fabs(val - ref);
          if (!(err <= bound)) {
            if (bad++ < 3) fprintf(stderr, "  %s: o[%d, %d, %d, %d] gpu %g cpu %g\n", desc, b, i, h, d, val, ref);
          } else if (bound > 0) {
            worst = fmax(worst, err / bound);
          }
        }
        const size_t li = ((size_t)b * c->Hq + h) * c->Sq + i;
        const float lr = ((float *)lse.ref)[li], lg = got_lse[li];
        const int ok = isinf(lr) ? lg == lr : fabs(lg - lr) <= 2 * ds + 1e-5 * (1.0 + fabs(lr));
        if (!ok && bad_lse++ < 3) fprintf(stderr, "  %s: lse[%d, %d, %d] gpu %g cpu %g\n", desc, b, h, i, lg, lr);
      }
    }
  CHECK(bad == 0 && bad_lse == 0, "%s: %ld values of o and %ld of lse outside their bounds", desc, bad, bad_lse);
  /* The gaps between heads and the tail: the poison the reference buffer also kept. */
  const size_t esz = float_size(c->out);
  uint8_t *is_elem = calloc(o.bytes, 1);
  for (int b = 0; b < c->B; b++)
    for (int i = 0; i < c->Sq; i++)
      for (int h = 0; h < c->Hq; h++) memset(is_elem + (size_t)t4_off(&o, b, i, h, 0) * esz, 1, (size_t)dv * esz);
  long gaps = 0;
  for (size_t i = 0; i < o.bytes; i++) gaps += !is_elem[i] && got[i] != POISON;
  free(is_elem);
  CHECK(gaps == 0, "%s: %ld bytes of o's gaps or tail written", desc, gaps);
  CHECK(dev_poisoned((uint8_t *)lse.dev + n_lse * 4, PAIR_TAIL), "%s: the sentinel past lse written", desc);
  if (c->page && max_pages > 0) {
    /* A CUDA graph of the call (its own stream, the workspace reserved first), captured once and
     * replayed as the lengths change on the device, as in an engine's decode steps: each replay's
     * o and lse equal, byte for byte, a direct call's with the same lengths (o filled with another
     * byte before each, so that both must write the same elements). Lengths only shrink: the
     * table's entries past a sequence's pages hold garbage. */
    graph_ctx gr;
    int gok = graph_open(&gr, 0, qf_ctx_workspace_bytes(gpu), desc);
    if (gok) {
      graph_begin(&gr);
      const qf_status gs = RUN(gr.ctx, td, 1);
      gok = graph_end(&gr, gs == QF_OK, desc);
    }
    uint8_t *want = malloc(o.bytes + lse.bytes), *replay = malloc(o.bytes + lse.bytes), *first = malloc(o.bytes);
    for (int round = 0; round < 3 && gok; round++) {
      int glens[64], changed = 0;
      for (int b = 0; b < c->B; b++) {
        const int cut = round == 0 ? 0 : round == 1 ? (int)(rng_next(&seed) % (uint64_t)(lens[b] / 2 + 1)) : lens[b];
        glens[b] = lens[b] - cut < c->Sq ? c->Sq : lens[b] - cut;
        if (glens[b] > lens[b]) glens[b] = lens[b];
        changed |= glens[b] != lens[b];
      }
      CUDA_OK(cudaMemcpy(lens_p.dev, glens, (size_t)c->B * 4, cudaMemcpyHostToDevice));
      for (int pass = 0; pass < 2; pass++) {
        uint8_t *into = pass ? replay : want;
        CUDA_OK(cudaMemset(o.dev, 0x5A, o.bytes));
        if (pass) {
          graph_replay(&gr);
        } else {
          CHECK(RUN(gpu, td, 1) == QF_OK, "%s: direct call, round %d", desc, round);
          CUDA_OK(cudaDeviceSynchronize());
        }
        CUDA_OK(cudaMemcpy(into, o.dev, o.bytes, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(into + o.bytes, lse.dev, lse.bytes, cudaMemcpyDeviceToHost));
      }
      CHECK(!memcmp(want, replay, o.bytes + lse.bytes), "%s: graph replay, round %d: o or lse differs from the direct call's",
            desc, round);
      if (round == 0) memcpy(first, want, o.bytes);
      else if (changed) CHECK(memcmp(first, want, o.bytes) != 0, "%s: round %d's lengths gave round 0's o", desc, round);
    }
    free(want), free(replay), free(first);
    graph_close(&gr);
    CUDA_OK(cudaMemcpy(lens_p.dev, lens, (size_t)c->B * 4, cudaMemcpyHostToDevice)); /* (the lengths as they were) */

    /* The last sequence's last page out of range: the rows that see a key of it get NaN, the rows
     * of other sequences the bytes before, the rest of its rows either. */
    const int32_t wrong = n_pages + 3, last = c->B - 1, bad_page = (lens[last] - 1) / c->page;
    CUDA_OK(cudaMemcpy((int32_t *)table.dev + last * max_pages + bad_page, &wrong, 4, cudaMemcpyHostToDevice));
    CHECK(RUN(gpu, td, 1) == QF_OK, "%s: bad page run", desc);
    CUDA_OK(cudaMemcpy(again, o.dev, o.bytes, cudaMemcpyDeviceToHost));
    float *again_lse = malloc(lse.bytes);
    CUDA_OK(cudaMemcpy(again_lse, lse.dev, lse.bytes, cudaMemcpyDeviceToHost));
    long off = 0;
    for (int b = 0; b < c->B; b++)
      for (int i = 0; i < c->Sq; i++)
        for (int h = 0; h < c->Hq; h++) {
          const size_t li = ((size_t)b * c->Hq + h) * c->Sq + i;
          const int pos = i + lens[b] - c->Sq, lo = c->window ? pos - c->window + 1 : 0;
          const int sees = b == last && pos >= bad_page * c->page && lo < (bad_page + 1) * c->page;
          const int either = b == last && !sees;
          const int lse_nan = isnan(again_lse[li]), lse_same = !memcmp(&again_lse[li], &got_lse[li], 4);
          off += sees ? !lse_nan : either ? !(lse_nan || lse_same) : !lse_same;
          for (int d = 0; d < dv; d++) {
            const size_t e = (size_t)t4_off(&o, b, i, h, d);
            const int v_nan = isnan(float_get(again, c->out, e)), v_same = !memcmp(again + e * esz, got + e * esz, esz);
            off += sees ? !v_nan : either ? !(v_nan || v_same) : !v_same;
          }
        }
    CHECK(off == 0, "%s: a page out of range: %ld values not as expected (NaN where it is seen)", desc, off);
    free(again_lse);
    t4_free(&kc), t4_free(&vc), pair_free(&table), pair_free(&lens_p);
  }
#undef RUN
  printf("  %-90s worst error %.2f of its bound\n", desc, worst);
  free(got), free(again), free(got_lse);
  t4_free(&q), t4_free(&k), t4_free(&v), t4_free(&o);
  pair_free(&lse), pair_free(&sk), scales_free(&sc);
}

/* Packed sequences (qf_attention_varlen, or with `page` > 0 qf_attention_paged_varlen over a cache
 * of shuffled pages whose unused slots hold NaN): sequence b has sq[b] queries and len[b] keys. */
typedef struct {
  int B, Hq, Hkv, D;
  qf_dtype in, out;
  int causal, window, sinks, page;
  int sq[8], len[8];
  int dv; /* v's and o's head dim (0: D) */
  int fp8; /* as acase's */
} vcase;

/* A t4 [1, T, H, D] as the packed tensor [T, H, D] of the varlen calls. */
static DLTensor packed(const t4 *t, int dev) {
  DLTensor x = dev ? t->td : t->th;
  x.ndim = 3, x.shape = (int64_t *)t->shape + 1, x.strides = (int64_t *)t->strides + 1;
  return x;
}

static void run_varlen(const vcase *c) {
  char desc[200];
  const qf_dtype kvt = c->fp8 ? QF_E4M3FN : c->in;
  int n = snprintf(desc, sizeof desc, "varlen B %d Hq %d Hkv %d D %d/%d %s%s->%s causal %d window %d sinks %d page %d sq/len",
                   c->B, c->Hq, c->Hkv, c->D, c->dv ? c->dv : c->D, qf_dtype_name(c->in),
                   c->fp8 == 1 ? " kv e4m3fn/head" : c->fp8 ? " kv e4m3fn" : "", qf_dtype_name(c->out), c->causal, c->window,
                   c->sinks, c->page);
  int32_t cuq[9] = {0}, cuk[9] = {0};
  int max_q = 0, max_k = 0;
  for (int b = 0; b < c->B; b++) {
    cuq[b + 1] = cuq[b] + c->sq[b], cuk[b + 1] = cuk[b] + c->len[b];
    max_q = c->sq[b] > max_q ? c->sq[b] : max_q, max_k = c->len[b] > max_k ? c->len[b] : max_k;
    n += snprintf(desc + n, sizeof desc - (size_t)n, " %d/%d", c->sq[b], c->len[b]);
  }
  const int tq = cuq[c->B] + 3, tk = cuk[c->B]; /* three tokens past the last sequence stay poisoned */
  uint64_t seed = 0xfa11 + (uint64_t)tk * 7 + (uint64_t)c->D;
  const int dv = c->dv ? c->dv : c->D;
  t4 q, k, v, o;
  t4_init(&q, 1, tq, c->Hq, c->D, 8, 0, c->in);
  t4_init(&k, 1, tk, c->Hkv, c->D, 16, 1, kvt);
  t4_init(&v, 1, tk, c->Hkv, dv, c->fp8 ? 16 : 8, 0, kvt);
  t4_init(&o, 1, tq, c->Hq, dv, 8, 0, c->out);
  t4_fill(&q, c->in, &seed), t4_fill(&k, kvt, &seed), t4_fill(&v, kvt, &seed);
  kv_scales sc;
  scales_init(&sc, c->fp8, c->Hkv);
  CUDA_OK(cudaMemcpy(o.dev, o.host, o.bytes, cudaMemcpyHostToDevice)); /* poisoned */
  const size_t n_lse = (size_t)c->Hq * tq;
  pair lse, sk, cq, ck;
  pair_init(&lse, n_lse * 4, NULL);
  float sinks[64];
  for (int h = 0; h < c->Hq; h++) sinks[h] = rng_normal(&seed) * 2.0f;
  pair_init(&sk, (size_t)c->Hq * 4, sinks);
  pair_init(&cq, (size_t)(c->B + 1) * 4, cuq), pair_init(&ck, (size_t)(c->B + 1) * 4, cuk);
  int64_t lshape[2] = {c->Hq, tq}, sshape[1] = {c->Hq}, cshape[1] = {c->B + 1};
  DLTensor lh = dl_tensor(lse.ref, QF_F32, 2, lshape, kDLCPU), ld = dl_tensor(lse.dev, QF_F32, 2, lshape, kDLCUDA);
  DLTensor sh = dl_tensor(sk.ref, QF_F32, 1, sshape, kDLCPU), sd = dl_tensor(sk.dev, QF_F32, 1, sshape, kDLCUDA);
  DLTensor cqh = dl_tensor(cq.ref, QF_I32, 1, cshape, kDLCPU), cqd = dl_tensor(cq.dev, QF_I32, 1, cshape, kDLCUDA);
  DLTensor ckh = dl_tensor(ck.ref, QF_I32, 1, cshape, kDLCPU), ckd = dl_tensor(ck.dev, QF_I32, 1, cshape, kDLCUDA);
  const qf_attention_opts opt0 = {.causal = c->causal, .window = c->window};
  const qf_attention_opts opt_h = scaled_opts(opt0, &sc, 0), opt_d = scaled_opts(opt0, &sc, 1);

  /* Paged: sequence b's keys over shuffled pages; the slots past each sequence hold NaN. */
  int max_pages = 0, n_pages = 0;
  for (int b = 0; c->page && b < c->B; b++) {
    const int pages = (c->len[b] + c->page - 1) / c->page;
    max_pages = pages > max_pages ? pages : max_pages, n_pages += pages;
  }
  t4 kc, vc;
  pair table, lens_p;
  int64_t tshape[2] = {c->B, max_pages > 0 ? max_pages : 1}, lnshape[1] = {c->B};
  DLTensor th = {0}, td = {0}, lnh = {0}, lnd = {0};
  memset(&kc, 0, sizeof kc), memset(&vc, 0, sizeof vc), memset(&table, 0, sizeof table), memset(&lens_p, 0, sizeof lens_p);
  if (c->page) {
    t4_init(&kc, n_pages + 1, c->page, c->Hkv, c->D, 16, 0, kvt);
    t4_init(&vc, n_pages + 1, c->page, c->Hkv, dv, c->fp8 ? 16 : 8, 0, kvt);
    memset(kc.host, 0xFF, kc.bytes), memset(vc.host, 0xFF, vc.bytes);
    int32_t *tab = calloc((size_t)c->B * tshape[1], 4), *perm = malloc((size_t)n_pages * 4);
    for (int i = 0; i < n_pages; i++) perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
      const int r = (int)(rng_next(&seed) % (uint64_t)(i + 1)), t = perm[i];
      perm[i] = perm[r], perm[r] = t;
    }
    const size_t e = float_size(kvt);
    for (int b = 0, next = 0; b < c->B; b++)
      for (int pg = 0; pg * c->page < c->len[b]; pg++) {
        const int page = perm[next++];
        tab[b * tshape[1] + pg] = page;
        for (int slot = 0; slot < c->page && pg * c->page + slot < c->len[b]; slot++)
          for (int g = 0; g < c->Hkv; g++) {
            const int j = cuk[b] + pg * c->page + slot;
            memcpy(kc.host + (size_t)t4_off(&kc, page, slot, g, 0) * e, k.host + (size_t)t4_off(&k, 0, j, g, 0) * e, (size_t)c->D * e);
            memcpy(vc.host + (size_t)t4_off(&vc, page, slot, g, 0) * e, v.host + (size_t)t4_off(&v, 0, j, g, 0) * e, (size_t)dv * e);
          }
      }
    CUDA_OK(cudaMemcpy(kc.dev, kc.host, kc.bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(vc.dev, vc.host, vc.bytes, cudaMemcpyHostToDevice));
    pair_init(&table, (size_t)c->B * tshape[1] * 4, tab);
    pair_init(&lens_p, (size_t)c->B * 4, c->len);
    th = dl_tensor(table.ref, QF_I32, 2, tshape, kDLCPU), td = dl_tensor(table.dev, QF_I32, 2, tshape, kDLCUDA);
    lnh = dl_tensor(lens_p.ref, QF_I32, 1, lnshape, kDLCPU), lnd = dl_tensor(lens_p.dev, QF_I32, 1, lnshape, kDLCUDA);
    free(tab), free(perm);
  }
  DLTensor qh = packed(&q, 0), qd = packed(&q, 1), kh = packed(&k, 0), kd = packed(&k, 1), vh = packed(&v, 0), vd = packed(&v, 1);
  DLTensor oh = packed(&o, 0), od = packed(&o, 1);
#define RUN(ctx, dev)                                                                                      \
  (c->page ? qf_attention_paged_varlen(ctx, dev ? &qd : &qh, dev ? &kc.td : &kc.th, dev ? &vc.td : &vc.th,      \
                                       dev ? &td : &th, dev ? &lnd : &lnh, dev ? &cqd : &cqh, max_q,          \
                                       c->sinks ? (dev ? &sd : &sh) : NULL, dev ? &opt_d : &opt_h,            \
                                       dev ? &od : &oh, dev ? &ld : &lh)                                      \
           : qf_attention_varlen(ctx, dev ? &qd : &qh, dev ? &kd : &kh, dev ? &vd : &vh, dev ? &cqd : &cqh,   \
                                 dev ? &ckd : &ckh, max_q, max_k, c->sinks ? (dev ? &sd : &sh) : NULL,       \
                                 dev ? &opt_d : &opt_h, dev ? &od : &oh, dev ? &ld : &lh))
  qf_status st = RUN(cpu, 0);
  if (!CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu))) return;
  st = RUN(gpu, 1);
  CUDA_OK(cudaDeviceSynchronize());
  if (!CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu))) return;
  uint8_t *got = malloc(o.bytes), *again = malloc(o.bytes);
  float *got_lse = malloc(lse.bytes);
  CUDA_OK(cudaMemcpy(got, o.dev, o.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_lse, lse.dev, lse.bytes, cudaMemcpyDeviceToHost));
  CHECK(RUN(gpu, 1) == QF_OK, "%s: rerun", desc);
  CUDA_OK(cudaMemcpy(again, o.dev, o.bytes, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(got, again, o.bytes), "%s: a second run gave other bytes", desc);

  const double u = ldexp(1.0, -24), sm = 1.0 / sqrt((double)c->D);
  const double p_round = c->in == QF_BF16 ? ldexp(1.0, -9) : ldexp(1.0, -11);
  const double out_ulp = c->out == QF_F32 ? ldexp(1.0, -23) : c->out == QF_BF16 ? ldexp(1.0, -7) : ldexp(1.0, -10);
  const int group = c->Hq / c->Hkv;
  long bad = 0, bad_lse = 0;
  double worst = 0.0;
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->Hq; h++) {
      const int g = h / group;
      double vmax = 0.0;
      for (int j = cuk[b]; j < cuk[b + 1]; j++)
        for (int d = 0; d < dv; d++) vmax = fmax(vmax, fabs(float_get(v.host, kvt, (size_t)t4_off(&v, 0, j, g, d)) * sc.v[g]));
      for (int i = cuq[b]; i < cuq[b + 1]; i++) {
        double S = 0.0;
        for (int j = cuk[b]; j < cuk[b + 1]; j++) {
          double a = 0.0;
          for (int d = 0; d < c->D; d++)
            a += fabs((double)float_get(q.host, c->in, (size_t)t4_off(&q, 0, i, h, d)) *
                      float_get(k.host, kvt, (size_t)t4_off(&k, 0, j, g, d)) * sc.k[g]);
          S = fmax(S, sm * a);
        }
        const double ds = 2.0 * (c->D + 2) * u * S;
        for (int d = 0; d < dv; d++) {
          const size_t e = (size_t)t4_off(&o, 0, i, h, d);
          const double ref = float_get(o.host, c->out, e), val = float_get(got, c->out, e);
          const double bound = vmax * (4 * ds + p_round + 1e-5) + out_ulp * fabs(ref), err = fabs(val - ref);
          if (!(err <= bound)) {
            if (bad++ < 3) fprintf(stderr, "  %s: o[%d, %d, %d] gpu %g cpu %g\n", desc, i, h, d, val, ref);
          } else if (bound > 0) {
            worst = fmax(worst, err / bound);
          }
        }
        const float lr = ((float *)lse.ref)[h * tq + i], lg = got_lse[h * tq + i];
        const int ok = isinf(lr) ? lg == lr : fabs(lg - lr) <= 2 * ds + 1e-5 * (1.0 + fabs(lr));
        if (!ok && bad_lse++ < 3) fprintf(stderr, "  %s: lse[%d, %d] gpu %g cpu %g\n", desc, h, i, lg, lr);
      }
    }
  CHECK(bad == 0 && bad_lse == 0, "%s: %ld values of o and %ld of lse outside their bounds", desc, bad, bad_lse);
  /* Gaps between heads, the tokens past the last sequence and the tails keep their poison. */
  const size_t esz = float_size(c->out);
  uint8_t *is_elem = calloc(o.bytes, 1);
  for (int i = 0; i < cuq[c->B]; i++)
    for (int h = 0; h < c->Hq; h++) memset(is_elem + (size_t)t4_off(&o, 0, i, h, 0) * esz, 1, (size_t)dv * esz);
  long gaps = 0;
  for (size_t i = 0; i < o.bytes; i++) gaps += !is_elem[i] && got[i] != POISON;
  for (int h = 0; h < c->Hq; h++)
    for (int i = cuq[c->B]; i < tq; i++) gaps += memcmp(&got_lse[h * tq + i], lse.ref + ((size_t)h * tq + i) * 4, 4) != 0;
  free(is_elem);
  CHECK(gaps == 0, "%s: %ld bytes of o's gaps, tokens past the sequences or lse's written", desc, gaps);
  CHECK(dev_poisoned((uint8_t *)lse.dev + n_lse * 4, PAIR_TAIL), "%s: the sentinel past lse written", desc);
  {
    /* A CUDA graph of the call, captured once and replayed after the offsets changed on the device
     * (each sequence's queries halved, its keys as many fewer): o and lse equal, byte for byte, a
     * direct call's with the new offsets (o filled with another byte before each). */
    graph_ctx gr;
    int gok = graph_open(&gr, 0, qf_ctx_workspace_bytes(gpu), desc);
    if (gok) {
      graph_begin(&gr);
      const qf_status gs = RUN(gr.ctx, 1);
      gok = graph_end(&gr, gs == QF_OK, desc);
    }
    int32_t cuq2[9] = {0}, cuk2[9] = {0}, lens2[8];
    for (int b = 0; b < c->B; b++) {
      const int drop = c->sq[b] - c->sq[b] / 2;
      lens2[b] = c->len[b] > drop ? c->len[b] - drop : 0;
      cuq2[b + 1] = cuq2[b] + c->sq[b] / 2, cuk2[b + 1] = cuk2[b] + lens2[b];
    }
    CUDA_OK(cudaMemcpy(cq.dev, cuq2, (size_t)(c->B + 1) * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ck.dev, cuk2, (size_t)(c->B + 1) * 4, cudaMemcpyHostToDevice));
    if (c->page) CUDA_OK(cudaMemcpy(lens_p.dev, lens2, (size_t)c->B * 4, cudaMemcpyHostToDevice));
    uint8_t *want = malloc(o.bytes + lse.bytes), *replay = malloc(o.bytes + lse.bytes);
    for (int pass = 0; pass < 2 && gok; pass++) {
      uint8_t *into = pass ? replay : want;
      CUDA_OK(cudaMemset(o.dev, 0x5A, o.bytes));
      CUDA_OK(cudaMemset(lse.dev, 0x5A, n_lse * 4));
      if (pass) graph_replay(&gr);
      else CHECK(RUN(gpu, 1) == QF_OK, "%s: direct call with new offsets", desc);
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy(into, o.dev, o.bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(into + o.bytes, lse.dev, lse.bytes, cudaMemcpyDeviceToHost));
    }
    if (gok)
      CHECK(!memcmp(want, replay, o.bytes + lse.bytes), "%s: graph replay with new offsets: o or lse differs from the direct call's",
            desc);
    free(want), free(replay);
    graph_close(&gr);
    CUDA_OK(cudaMemcpy(cq.dev, cuq, (size_t)(c->B + 1) * 4, cudaMemcpyHostToDevice)); /* (as they were) */
    CUDA_OK(cudaMemcpy(ck.dev, cuk, (size_t)(c->B + 1) * 4, cudaMemcpyHostToDevice));
    if (c->page) CUDA_OK(cudaMemcpy(lens_p.dev, c->len, (size_t)c->B * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(o.dev, got, o.bytes, cudaMemcpyHostToDevice));
  }
  if (!c->page && c->B > 1) {
    /* NaN in the first key's value row of every sequence after the first: the sequence before it
     * reads that row into its last tile (dense rows) and must keep its bytes. */
    const size_t e = float_size(kvt);
    for (int b = 1; b < c->B; b++)
      for (int g = 0; g < c->Hkv && c->len[b] > 0; g++)
        CUDA_OK(cudaMemset((uint8_t *)v.dev + (size_t)t4_off(&v, 0, cuk[b], g, 0) * e, 0xFF, (size_t)dv * e));
    CHECK(RUN(gpu, 1) == QF_OK, "%s: NaN run", desc);
    CUDA_OK(cudaMemcpy(again, o.dev, o.bytes, cudaMemcpyDeviceToHost));
    long changed = 0;
    for (int i = cuq[0]; i < cuq[1]; i++)
      for (int h = 0; h < c->Hq; h++)
        changed += memcmp(again + (size_t)t4_off(&o, 0, i, h, 0) * esz, got + (size_t)t4_off(&o, 0, i, h, 0) * esz, (size_t)dv * esz) != 0;
    CHECK(changed == 0, "%s: NaN in the next sequence's values changed %ld rows of the first", desc, changed);
  }
#undef RUN
  printf("  %-90s worst error %.2f of its bound\n", desc, worst);
  free(got), free(again), free(got_lse);
  t4_free(&q), t4_free(&k), t4_free(&v), t4_free(&o);
  pair_free(&lse), pair_free(&sk), pair_free(&cq), pair_free(&ck), scales_free(&sc);
  if (c->page) t4_free(&kc), t4_free(&vc), pair_free(&table), pair_free(&lens_p);
}

/* qf_attention_cache_append: T new rows (padded heads, Inf, NaN and values past 448 x scale among
 * them) into a cache of n_pages pages of `page` slots at shuffled slots (every fifth token padding):
 * the whole cache, poison in the slots no token names included, byte for byte as the CPU's; then a
 * slot past the cache, which CUDA skips, against the CPU with that token as padding. */
static void run_append(int T, int Hkv, int D, int Dv, int page, int n_pages, qf_dtype in, int fp8) {
  char desc[120];
  const qf_dtype cdt = fp8 ? QF_E4M3FN : in;
  snprintf(desc, sizeof desc, "cache append T %d Hkv %d D %d/%d page %d x %d %s->%s", T, Hkv, D, Dv, page, n_pages,
           qf_dtype_name(in), qf_dtype_name(cdt));
  uint64_t seed = 0xcac4e + (uint64_t)T * 3 + (uint64_t)D;
  t4 k, v, kc, vc;
  t4_init(&k, 1, T, Hkv, D, 8, 0, in), t4_init(&v, 1, T, Hkv, Dv, 16, 0, in);
  t4_init(&kc, n_pages, page, Hkv, D, 16, 0, cdt), t4_init(&vc, n_pages, page, Hkv, Dv, 0, 0, cdt);
  for (int i = 0; i < T * Hkv; i++) /* a few values past 448 / scale, Inf and NaN */
    for (int d = 0; d < D; d++) float_put(k.host, in, (size_t)t4_off(&k, 0, i / Hkv, i % Hkv, d), rng_normal(&seed) * (i % 7 ? 2.0f : 300.0f));
  float_put(k.host, in, 3, INFINITY), float_put(k.host, in, 4, -INFINITY), float_put(v.host, in, 5, NAN);
  for (int i = 0; i < T * Hkv; i++)
    for (int d = 0; d < Dv; d++) if (i || d != 5) float_put(v.host, in, (size_t)t4_off(&v, 0, i / Hkv, i % Hkv, d), rng_normal(&seed));
  CUDA_OK(cudaMemcpy(k.dev, k.host, k.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(v.dev, v.host, v.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(kc.dev, kc.host, kc.bytes, cudaMemcpyHostToDevice)); /* poisoned */
  CUDA_OK(cudaMemcpy(vc.dev, vc.host, vc.bytes, cudaMemcpyHostToDevice));
  const int n_slots = n_pages * page;
  int32_t *perm = malloc((size_t)n_slots * 4), *slots = malloc((size_t)T * 4);
  for (int i = 0; i < n_slots; i++) perm[i] = i;
  for (int i = n_slots - 1; i > 0; i--) {
    const int r = (int)(rng_next(&seed) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[r], perm[r] = t;
  }
  for (int t = 0; t < T; t++) slots[t] = t % 5 == 4 ? -1 : perm[t];
  pair sp, ksp, vsp;
  float ksc[64], vsc[1] = {0.0625f};
  for (int g = 0; g < Hkv; g++) ksc[g] = 0.2f + 0.37f * g;
  pair_init(&sp, (size_t)T * 4, slots), pair_init(&ksp, (size_t)Hkv * 4, ksc), pair_init(&vsp, 4, vsc);
  int64_t ts[1] = {T}, hs[1] = {Hkv}, one[1] = {1};
  DLTensor sh = dl_tensor(sp.ref, QF_I32, 1, ts, kDLCPU), sd = dl_tensor(sp.dev, QF_I32, 1, ts, kDLCUDA);
  DLTensor kh = dl_tensor(ksp.ref, QF_F32, 1, hs, kDLCPU), kd = dl_tensor(ksp.dev, QF_F32, 1, hs, kDLCUDA);
  DLTensor vh = dl_tensor(vsp.ref, QF_F32, 1, one, kDLCPU), vd = dl_tensor(vsp.dev, QF_F32, 1, one, kDLCUDA);
  DLTensor knh = packed(&k, 0), knd = packed(&k, 1), vnh = packed(&v, 0), vnd = packed(&v, 1);
  uint8_t *got = malloc(kc.bytes + vc.bytes);
  for (int round = 0; round < 2; round++) {
    if (round) { /* token 0's slot past the cache: CUDA skips it, as the CPU skips padding */
      const int32_t past = n_slots + 5, pad = -1;
      CUDA_OK(cudaMemcpy(sp.dev, &past, 4, cudaMemcpyHostToDevice));
      memcpy(sp.ref, &pad, 4);
      memset(kc.host, POISON, kc.bytes), memset(vc.host, POISON, vc.bytes);
      CUDA_OK(cudaMemcpy(kc.dev, kc.host, kc.bytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(vc.dev, vc.host, vc.bytes, cudaMemcpyHostToDevice));
    }
    qf_status st = qf_attention_cache_append(cpu, &knh, &vnh, &sh, fp8 ? &kh : NULL, fp8 ? &vh : NULL, &kc.th, &vc.th);
    if (!CHECK(st == QF_OK, "%s: cpu: %s", desc, qf_ctx_last_error(cpu))) break;
    st = qf_attention_cache_append(gpu, &knd, &vnd, &sd, fp8 ? &kd : NULL, fp8 ? &vd : NULL, &kc.td, &vc.td);
    CUDA_OK(cudaDeviceSynchronize());
    if (!CHECK(st == QF_OK, "%s: gpu: %s", desc, qf_ctx_last_error(gpu))) break;
    CUDA_OK(cudaMemcpy(got, kc.dev, kc.bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got + kc.bytes, vc.dev, vc.bytes, cudaMemcpyDeviceToHost));
    long diff = 0;
    for (size_t i = 0; i < kc.bytes; i++) diff += got[i] != kc.host[i];
    for (size_t i = 0; i < vc.bytes; i++) diff += got[kc.bytes + i] != vc.host[i];
    CHECK(diff == 0, "%s%s: %ld bytes of the caches differ from the CPU's", desc, round ? ", a slot past the cache" : "", diff);
  }
  printf("  %s\n", desc);
  free(perm), free(slots), free(got);
  t4_free(&k), t4_free(&v), t4_free(&kc), t4_free(&vc);
  pair_free(&sp), pair_free(&ksp), pair_free(&vsp);
}

/* Refusals on CUDA leave o untouched. */
static void check_refusals(void) {
  t4 q, k, o;
  t4_init(&q, 1, 4, 2, 96, 0, 0, QF_BF16);
  t4_init(&k, 1, 4, 2, 96, 0, 0, QF_BF16);
  t4_init(&o, 1, 4, 2, 96, 0, 0, QF_BF16);
  CUDA_OK(cudaMemcpy(o.dev, o.host, o.bytes, cudaMemcpyHostToDevice));
  CHECK(qf_attention(gpu, &q.td, &k.td, &k.td, NULL, NULL, &o.td, NULL) == QF_ERR_UNSUPPORTED, "head dim 96: %s",
        qf_ctx_last_error(gpu));
  t4 q2, k2, o2;
  t4_init(&q2, 1, 4, 2, 64, 4, 0, QF_BF16); /* heads 68 elements apart: 136 bytes */
  t4_init(&k2, 1, 4, 2, 64, 0, 0, QF_BF16);
  t4_init(&o2, 1, 4, 2, 64, 0, 0, QF_BF16);
  CUDA_OK(cudaMemcpy(o2.dev, o2.host, o2.bytes, cudaMemcpyHostToDevice));
  CHECK(qf_attention(gpu, &q2.td, &k2.td, &k2.td, NULL, NULL, &o2.td, NULL) == QF_ERR_LAYOUT, "stride of 136 bytes: %s",
        qf_ctx_last_error(gpu));
  DLTensor shifted = k2.td;
  int64_t shape3[4] = {1, 3, 2, 64};
  shifted.byte_offset = 8, shifted.shape = shape3;
  CHECK(qf_attention(gpu, &k2.td, &shifted, &shifted, NULL, NULL, &o2.td, NULL) == QF_ERR_ALIGNMENT, "k 8 bytes in: %s",
        qf_ctx_last_error(gpu));
  CHECK(dev_poisoned(o.dev, o.bytes) && dev_poisoned(o2.dev, o2.bytes), "a refused call wrote o");
  t4_free(&q), t4_free(&k), t4_free(&o), t4_free(&q2), t4_free(&k2), t4_free(&o2);
}

int main(void) {
  open_contexts(&gpu, &cpu);
  const acase cases[] = {
      /* prefill */
      {2, 200, 200, 8, 2, 128, QF_BF16, QF_BF16, 1, 0, 0, 0, 0, 0, 0, 0},
      {2, 130, 130, 4, 4, 128, QF_F16, QF_F32, 0, 0, 0, 1, 0, 0, 0, 0},
      {1, 77, 300, 6, 2, 64, QF_F16, QF_F16, 1, 50, 1, 0, 0, 0, 0, 0},
      {1, 90, 90, 8, 1, 64, QF_BF16, QF_F32, 0, 33, 0, 1, 0.3f, 0, 0, 0},
      {1, 130, 130, 4, 4, 256, QF_BF16, QF_F32, 1, 0, 0, 0, 0, 0, 0, 0},
      {1, 70, 70, 2, 1, 512, QF_BF16, QF_BF16, 0, 0, 1, 1, 0, 0, 0, 0},
      {1, 40, 20, 4, 2, 64, QF_BF16, QF_F32, 1, 0, 0, 0, 0, 0, 0, 0},
      {1, 40, 20, 4, 2, 128, QF_F16, QF_F32, 1, 0, 1, 0, 0, 0, 0, 0},
      {1, 5, 0, 8, 2, 128, QF_BF16, QF_F32, 0, 0, 1, 0, 0, 0, 0, 0},
      /* decode */
      {3, 1, 1000, 32, 8, 128, QF_BF16, QF_BF16, 1, 0, 1, 0, 0, 0, 0, 0},
      {1, 1, 4097, 8, 1, 128, QF_F16, QF_F32, 1, 1000, 0, 1, 0, 0, 0, 0},
      {1, 2, 333, 16, 2, 64, QF_BF16, QF_F32, 1, 0, 0, 0, 0, 0, 0, 0},
      {4, 1, 2048, 16, 16, 128, QF_F16, QF_F16, 0, 0, 0, 1, 0, 0, 0, 0},
      {1, 1, 600, 4, 1, 256, QF_BF16, QF_F32, 1, 0, 1, 0, 0, 0, 0, 0},
      {1, 1, 600, 4, 1, 512, QF_BF16, QF_BF16, 1, 0, 0, 1, 0, 0, 0, 0},
      {2, 1, 0, 8, 2, 64, QF_F16, QF_F32, 1, 0, 1, 0, 0, 0, 0, 0},
      /* paged: decode (pages of 16 and of 100 keys), prefill with pages shorter and longer than a tile */
      {4, 1, 1500, 32, 8, 128, QF_BF16, QF_BF16, 1, 0, 1, 0, 0, 16, 0, 0},
      {3, 2, 700, 16, 2, 64, QF_F16, QF_F32, 1, 0, 0, 1, 0, 100, 0, 0},
      {2, 150, 600, 8, 2, 128, QF_BF16, QF_F32, 1, 0, 0, 0, 0, 32, 0, 0},
      {2, 100, 900, 4, 4, 128, QF_F16, QF_F16, 1, 200, 1, 0, 0, 256, 0, 0},
      {2, 80, 400, 4, 2, 256, QF_BF16, QF_F32, 1, 0, 0, 0, 0, 64, 0, 0},
      /* MLA's head dims (D = 192, Dv = 128): prefill, decode with split keys, paged prefill */
      {2, 300, 300, 16, 16, 192, QF_BF16, QF_BF16, 1, 0, 0, 1, 0, 0, 128, 0},
      {2, 1, 3000, 16, 1, 192, QF_BF16, QF_F32, 1, 0, 1, 0, 0, 0, 128, 0},
      {2, 120, 500, 8, 8, 192, QF_F16, QF_F32, 1, 0, 0, 0, 0, 64, 128, 0},
      /* FP8 keys and values: decode with split keys, two query tokens, a window, a prompt's rows
       * (the decode kernel's many row tiles), paged decode, every head dim, MLA's */
      {3, 1, 1000, 32, 8, 128, QF_BF16, QF_BF16, 1, 0, 1, 0, 0, 0, 0, 1},
      {1, 2, 333, 16, 2, 64, QF_F16, QF_F32, 1, 0, 0, 1, 0, 0, 0, 2},
      {1, 1, 4097, 8, 1, 128, QF_F16, QF_F16, 1, 1000, 0, 0, 0, 0, 0, 1},
      {1, 77, 300, 6, 2, 64, QF_BF16, QF_F32, 1, 50, 1, 0, 0, 0, 0, 1},
      {4, 1, 1500, 32, 8, 128, QF_BF16, QF_BF16, 1, 0, 1, 0, 0, 16, 0, 1},
      {2, 150, 600, 8, 2, 128, QF_F16, QF_F32, 1, 0, 0, 1, 0, 32, 0, 2},
      {1, 1, 600, 4, 1, 256, QF_BF16, QF_F32, 1, 0, 1, 0, 0, 0, 0, 1},
      {1, 1, 600, 4, 2, 512, QF_F16, QF_F16, 1, 0, 0, 1, 0, 0, 0, 1},
      {2, 1, 3000, 16, 1, 192, QF_BF16, QF_F32, 1, 0, 1, 0, 0, 0, 128, 1},
      /* FP8 prompts on the prefill kernel (D = 256) and on the decode kernel (D = 512, MLA's) */
      {1, 130, 130, 4, 4, 256, QF_BF16, QF_F32, 1, 0, 1, 0, 0, 0, 0, 1},
      {1, 70, 70, 2, 1, 512, QF_F16, QF_F16, 0, 0, 1, 1, 0, 0, 0, 2},
      {1, 100, 300, 8, 8, 192, QF_BF16, QF_BF16, 1, 0, 0, 0, 0, 0, 128, 1},
  };
  const size_t n = sizeof cases / sizeof cases[0], quick = 6;
  for (size_t i = 0; i < n; i++)
    if (!quick_mode() || i % (n / quick) == 0) run_case(&cases[i]);
  /* Packed sequences: prefill rows (long and short sequences, an empty one, more queries than keys
   * with the causal mask, a key count that is not a multiple of the tile), decode rows (at most 16
   * per kv head, with long keys split over CTAs), paged prefill and decode. */
  const vcase vcases[] = {
      {4, 8, 2, 128, QF_BF16, QF_BF16, 1, 0, 0, 0, {200, 1, 0, 77}, {200, 300, 5, 77}, 0, 0},
      {3, 4, 4, 64, QF_F16, QF_F32, 1, 40, 1, 0, {130, 33, 5}, {150, 33, 3}, 0, 0},
      {2, 4, 2, 256, QF_BF16, QF_F32, 0, 0, 0, 0, {70, 129}, {70, 129}, 0, 0},
      {2, 2, 1, 512, QF_BF16, QF_BF16, 1, 0, 1, 0, {40, 65}, {60, 65}, 0, 0},
      {5, 32, 8, 128, QF_BF16, QF_BF16, 1, 0, 1, 0, {1, 2, 1, 0, 1}, {3000, 517, 1, 9, 64}, 0, 0},
      {3, 16, 2, 128, QF_F16, QF_F32, 1, 0, 0, 32, {150, 1, 90}, {400, 333, 90}, 0, 0},
      {3, 8, 8, 128, QF_BF16, QF_F32, 1, 0, 1, 16, {1, 1, 2}, {1500, 17, 40}, 0, 0},
      {3, 16, 16, 192, QF_BF16, QF_BF16, 1, 0, 0, 0, {257, 60, 1}, {257, 100, 700}, 128, 0},
      /* FP8 keys and values: packed prompts and decode rows, dense and paged */
      {4, 8, 2, 128, QF_BF16, QF_F32, 1, 0, 1, 0, {200, 1, 0, 77}, {200, 300, 5, 77}, 0, 1},
      {3, 8, 8, 128, QF_F16, QF_F16, 1, 0, 0, 16, {1, 1, 2}, {1500, 17, 40}, 0, 2},
      {3, 16, 2, 64, QF_BF16, QF_BF16, 1, 0, 1, 32, {150, 1, 90}, {400, 333, 90}, 0, 1},
  };
  for (size_t i = 0; i < sizeof vcases / sizeof vcases[0]; i++)
    if (!quick_mode() || i % 3 == 0) run_varlen(&vcases[i]);
  /* Appends: a decode step (one token per sequence), a prefill chunk, MLA's head dims, fp16 */
  run_append(32, 8, 128, 128, 16, 64, QF_BF16, 1);
  run_append(32, 8, 128, 128, 16, 64, QF_BF16, 0);
  run_append(1000, 2, 64, 64, 256, 5, QF_F16, 1);
  if (!quick_mode()) run_append(300, 1, 192, 128, 64, 8, QF_BF16, 1), run_append(77, 4, 256, 256, 1, 100, QF_F16, 0);
  check_refusals();
  qf_ctx_destroy(gpu), qf_ctx_destroy(cpu);
  return check_finish("gpu_test_attention");
}
