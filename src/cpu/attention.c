/* CPU reference of the attention family: float64 softmax attention of the documented formula. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "cpu/floats.h"

/* Offset of key j of sequence b, kv head g, in k (strides ks) or v: dense [B, Skv, Hkv, D] or a page
 * of the cache. */
static int64_t key_offset(const qf_attention_args *a, const int64_t st[3], int64_t b, int64_t j, int64_t g) {
  if (!a->block_table) return b * st[0] + j * st[1] + g * st[2];
  const int64_t page = a->block_table[b * a->bt_stride + j / a->page_size];
  return page * st[0] + (j % a->page_size) * st[1] + g * st[2];
}

qf_status qf_cpu_attention(qf_ctx *ctx, const qf_attention_args *a) {
  for (int64_t b = 0; a->kv_lens && b < a->B; b++) {
    const int64_t len = a->kv_lens[b];
    if (len < 0 || len > a->Skv)
      return qf_fail(ctx, QF_ERR_VALUE, "qf_attention_paged: kv_lens[%lld]=%lld is outside [0, %lld]", (long long)b,
                     (long long)len, (long long)a->Skv);
    for (int64_t pg = 0; pg * a->page_size < len; pg++) {
      const int32_t page = a->block_table[b * a->bt_stride + pg];
      if (page < 0 || page >= a->num_pages)
        return qf_fail(ctx, QF_ERR_VALUE, "qf_attention_paged: block_table[%lld, %lld]=%d is outside [0, %lld)", (long long)b,
                       (long long)pg, (int)page, (long long)a->num_pages);
    }
  }
  double *s = malloc((size_t)(a->Skv + 1) * sizeof *s), *acc = malloc((size_t)a->Dv * sizeof *acc);
  if (!s || !acc) {
    free(s), free(acc);
    return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_attention: no memory for a row of %lld scores", (long long)a->Skv);
  }
  const int64_t group = a->Hq / a->Hkv;
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->Hq; h++)
      for (int64_t i = 0; i < a->Sq; i++) {
        const int64_t len = a->kv_lens ? a->kv_lens[b] : a->Skv, g = h / group, p = i + len - a->Sq;
        const int64_t qo = b * a->qs[0] + i * a->qs[1] + h * a->qs[2];
        double m = a->sinks ? a->sinks[h] : -INFINITY;
        for (int64_t j = 0; j < len; j++) {
          s[j] = -INFINITY;
          if ((a->causal && j > p) || (a->window > 0 && j <= p - a->window)) continue;
          const int64_t ko = key_offset(a, a->ks, b, j, g);
          double dot = 0.0;
          for (int64_t d = 0; d < a->D; d++) dot += (double)qf_cpu_get(a->dtype, a->q, qo + d) * qf_cpu_get(a->dtype, a->k, ko + d);
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
            const int64_t vo = key_offset(a, a->vs, b, j, g);
            l += e;
            for (int64_t d = 0; d < a->Dv; d++) acc[d] += e * qf_cpu_get(a->dtype, a->v, vo + d);
          }
          lse = m + log(l);
        }
        const int64_t oo = b * a->os[0] + i * a->os[1] + h * a->os[2];
        for (int64_t d = 0; d < a->Dv; d++) qf_cpu_put(a->o_dtype, a->o, oo + d, (float)(l > 0.0 ? acc[d] / l : 0.0));
        if (a->lse) a->lse[(b * a->Hq + h) * a->Sq + i] = (float)lse;
      }
  free(s), free(acc);
  return QF_OK;
}
