/* CPU reference of the attention family: float64 softmax attention of the documented formula. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "cpu/floats.h"
#include "cpu/slots.h"
#include "formats/formats.h"

/* Offset of key j of sequence b, kv head g, in k (strides ks) or v: dense [B, Skv, Hkv, D] or a page
 * of the cache. */
static int64_t key_offset(const qf_attention_args *a, const int64_t st[3], int64_t b, int64_t j, int64_t g) {
  if (!a->block_table) return b * st[0] + j * st[1] + g * st[2];
  const int64_t page = a->block_table[b * a->bt_stride + j / a->page_size];
  return page * st[0] + (j % a->page_size) * st[1] + g * st[2];
}

/* Offsets of packed sequences: cu[0] >= 0, never decreasing, cu[B] <= total, no step above max. */
static qf_status check_offsets(qf_ctx *ctx, const qf_attention_args *a, const char *name, const int32_t *cu, int64_t total,
                               int64_t max) {
  for (int64_t b = 0; cu && b <= a->B; b++)
    if (cu[b] < (b ? cu[b - 1] : 0) || cu[b] > total || (b && cu[b] - cu[b - 1] > max))
      return qf_fail(ctx, QF_ERR_VALUE,
                     "%s: %s[%lld]=%d is out of range (offsets start at >= 0, never decrease, end at <= %lld and step by "
                     "at most %lld)",
                     a->block_table ? "qf_attention_paged_varlen" : "qf_attention_varlen", name, (long long)b, (int)cu[b],
                     (long long)total, (long long)max);
  return QF_OK;
}

/* Element i of k or v: a 16-bit value, or an e4m3fn code times its kv head's scale (`scale`). */
static double kv_get(const qf_attention_args *a, const void *base, int64_t i, double scale) {
  if (a->kv_dtype == QF_E4M3FN) return qf_e4m3fn_to_f32(((const uint8_t *)base)[i]) * scale;
  return qf_cpu_get(a->kv_dtype, base, i);
}

qf_status qf_cpu_attention(qf_ctx *ctx, const qf_attention_args *a) {
  qf_status st;
  if ((st = check_offsets(ctx, a, "cu_seqlens_q", a->cu_seqlens_q, a->total_q, a->Sq)) ||
      (st = check_offsets(ctx, a, "cu_seqlens_k", a->cu_seqlens_k, a->total_k, a->Skv)))
    return st;
  const char *op = a->cu_seqlens_q ? "qf_attention_paged_varlen" : "qf_attention_paged";
  for (int64_t b = 0; a->kv_lens && b < a->B; b++) {
    const int64_t len = a->kv_lens[b];
    if (len < 0 || len > a->Skv)
      return qf_fail(ctx, QF_ERR_VALUE, "%s: kv_lens[%lld]=%lld is outside [0, %lld]", op, (long long)b,
                     (long long)len, (long long)a->Skv);
    for (int64_t pg = 0; pg * a->page_size < len; pg++) {
      const int32_t page = a->block_table[b * a->bt_stride + pg];
      if (page < 0 || page >= a->num_pages)
        return qf_fail(ctx, QF_ERR_VALUE, "%s: block_table[%lld, %lld]=%d is outside [0, %lld)", op, (long long)b,
                       (long long)pg, (int)page, (long long)a->num_pages);
    }
  }
  double *s = malloc((size_t)(a->Skv + 1) * sizeof *s), *acc = malloc((size_t)a->Dv * sizeof *acc);
  if (!s || !acc) {
    free(s), free(acc);
    return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_attention: no memory for a row of %lld scores", (long long)a->Skv);
  }
  const int64_t group = a->Hq / a->Hkv;
  for (int64_t b = 0; b < a->B; b++) {
    /* The sequence's queries (q0 .. q0 + sq - 1 of the token dimension) and keys (k0 .. k0 + len - 1
     * of dense k and v, or the first len of its pages) */
    const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k;
    const int64_t q0 = cq ? cq[b] : 0, sq = cq ? cq[b + 1] - cq[b] : a->Sq, k0 = ck ? ck[b] : 0;
    const int64_t len = a->kv_lens ? a->kv_lens[b] : ck ? ck[b + 1] - ck[b] : a->Skv;
    for (int64_t h = 0; h < a->Hq; h++)
      for (int64_t i = 0; i < sq; i++) {
        const int64_t g = h / group, p = i + len - sq;
        const double ksc = a->k_scale ? a->k_scale[g * a->k_scale_step] : 1.0;
        const double vsc = a->v_scale ? a->v_scale[g * a->v_scale_step] : 1.0;
        const int64_t qo = b * a->qs[0] + (q0 + i) * a->qs[1] + h * a->qs[2];
        double m = a->sinks ? a->sinks[h] : -INFINITY;
        for (int64_t j = 0; j < len; j++) {
          s[j] = -INFINITY;
          if ((a->causal && j > p) || (a->window > 0 && j <= p - a->window)) continue;
          const int64_t ko = key_offset(a, a->ks, b, k0 + j, g);
          double dot = 0.0;
          for (int64_t d = 0; d < a->D; d++) dot += (double)qf_cpu_get(a->dtype, a->q, qo + d) * kv_get(a, a->k, ko + d, ksc);
          s[j] = a->sm_scale * dot;
          if (s[j] > m) m = s[j];
        }
        for (int64_t d = 0; d < a->Dv; d++) acc[d] = 0.0;
        double l = 0.0, lse = -INFINITY;
        if (m > -INFINITY) {
          l = a->sinks ? exp(a->sinks[h] - m) : 0.0;
          for (int64_t j = 0; j < len; j++) {
            if (s[j] == -INFINITY) continue;
            const double e = exp(s[j] - m);
            const int64_t vo = key_offset(a, a->vs, b, k0 + j, g);
            l += e;
            for (int64_t d = 0; d < a->Dv; d++) acc[d] += e * kv_get(a, a->v, vo + d, vsc);
          }
          lse = m + log(l);
        }
        const int64_t oo = b * a->os[0] + (q0 + i) * a->os[1] + h * a->os[2];
        for (int64_t d = 0; d < a->Dv; d++) qf_cpu_put(a->o_dtype, a->o, oo + d, (float)(l > 0.0 ? acc[d] / l : 0.0));
        if (a->lse) a->lse[cq ? h * a->total_q + q0 + i : (b * a->Hq + h) * a->Sq + i] = (float)lse;
      }
  }
  free(s), free(acc);
  return QF_OK;
}

qf_status qf_cpu_attention_cache_append(qf_ctx *ctx, const qf_cache_append_args *a) {
  qf_status st = qf_cpu_check_slots(ctx, "qf_attention_cache_append", "cache's slots", a->slots, a->T, a->num_pages * a->page_size);
  if (st) return st;
  for (int64_t t = 0; t < a->T; t++) {
    if (a->slots[t] < 0) continue;
    const int64_t page = a->slots[t] / a->page_size, row = a->slots[t] % a->page_size;
    for (int64_t g = 0; g < a->Hkv; g++)
      for (int kv = 0; kv < 2; kv++) {
        const int64_t n = kv ? a->Dv : a->D, *src_st = kv ? a->vs : a->ks, *dst_st = kv ? a->vcs : a->kcs;
        const float *scale = kv ? a->v_scale : a->k_scale;
        const int64_t src = t * src_st[0] + g * src_st[1], dst = page * dst_st[0] + row * dst_st[1] + g * dst_st[2];
        const void *x = kv ? a->v : a->k;
        void *c = kv ? a->v_cache : a->k_cache;
        const float inv = 1.0f / (scale ? scale[g * (kv ? a->v_scale_step : a->k_scale_step)] : 1.0f);
        for (int64_t d = 0; d < n; d++) {
          if (a->cache_dtype == QF_E4M3FN) ((uint8_t *)c)[dst + d] = qf_e4m3fn_from_f32(qf_cpu_get(a->dtype, x, src + d) * inv);
          else ((uint16_t *)c)[dst + d] = ((const uint16_t *)x)[src + d];
        }
      }
  }
  return QF_OK;
}
