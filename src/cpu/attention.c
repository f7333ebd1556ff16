/* CPU reference of the attention family: float64 softmax attention of the documented formula. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "formats/formats.h"

static double load(qf_dtype dt, const void *base, int64_t i) {
  const uint16_t h = ((const uint16_t *)base)[i];
  return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

static void store(qf_dtype dt, void *base, int64_t i, double v) {
  if (dt == QF_F32) ((float *)base)[i] = (float)v;
  else if (dt == QF_BF16) ((uint16_t *)base)[i] = qf_bf16_from_f32((float)v);
  else ((uint16_t *)base)[i] = qf_f16_from_f32((float)v);
}

qf_status qf_cpu_attention(qf_ctx *ctx, const qf_attention_args *a) {
  double *s = malloc((size_t)(a->Skv + 1) * sizeof *s), *acc = malloc((size_t)a->Dv * sizeof *acc);
  if (!s || !acc) {
    free(s), free(acc);
    return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "qf_attention: no memory for a row of %lld scores", (long long)a->Skv);
  }
  const int64_t group = a->Hq / a->Hkv;
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->Hq; h++)
      for (int64_t i = 0; i < a->Sq; i++) {
        const int64_t g = h / group, p = i + a->Skv - a->Sq;
        const int64_t qo = b * a->qs[0] + i * a->qs[1] + h * a->qs[2];
        double m = a->sinks ? a->sinks[h] : -INFINITY;
        for (int64_t j = 0; j < a->Skv; j++) {
          s[j] = -INFINITY;
          if ((a->causal && j > p) || (a->window > 0 && j <= p - a->window)) continue;
          const int64_t ko = b * a->ks[0] + j * a->ks[1] + g * a->ks[2];
          double dot = 0.0;
          for (int64_t d = 0; d < a->D; d++) dot += load(a->dtype, a->q, qo + d) * load(a->dtype, a->k, ko + d);
          s[j] = a->sm_scale * dot;
          if (s[j] > m) m = s[j];
        }
        for (int64_t d = 0; d < a->Dv; d++) acc[d] = 0.0;
        double l = 0.0, lse = -INFINITY;
        if (m > -INFINITY) {
          l = a->sinks ? exp(a->sinks[h] - m) : 0.0;
          for (int64_t j = 0; j < a->Skv; j++) {
            if (s[j] == -INFINITY) continue;
            const double e = exp(s[j] - m);
            const int64_t vo = b * a->vs[0] + j * a->vs[1] + g * a->vs[2];
            l += e;
            for (int64_t d = 0; d < a->Dv; d++) acc[d] += e * load(a->dtype, a->v, vo + d);
          }
          lse = m + log(l);
        }
        const int64_t oo = b * a->os[0] + i * a->os[1] + h * a->os[2];
        for (int64_t d = 0; d < a->Dv; d++) store(a->o_dtype, a->o, oo + d, l > 0.0 ? acc[d] / l : 0.0);
        if (a->lse) a->lse[(b * a->Hq + h) * a->Sq + i] = (float)lse;
      }
  free(s), free(acc);
  return QF_OK;
}
