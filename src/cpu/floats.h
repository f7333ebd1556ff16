/* The CPU reference's access to validated matrices and to fp32 / fp16 / bf16 elements, shared by
 * the family files: a row's first byte, an element widened to fp32 (exact), a value stored
 * rounded to nearest even (the portable codecs of src/formats/). */
#ifndef QF_CPU_FLOATS_H
#define QF_CPU_FLOATS_H

#include "core/internal.h"
#include "formats/formats.h"

/* Row r of m (e2m1x2 rows count values, two to a byte). */
static inline void *qf_cpu_row(const qf_mat *m, int64_t r) {
  const int64_t pitch = m->dtype == QF_E2M1X2 ? m->ld / 2 : m->ld * (int64_t)qf_dtype_size(m->dtype);
  return (char *)m->data + r * pitch;
}

/* Element i of an fp32, fp16 or bf16 buffer. */
static inline float qf_cpu_get(qf_dtype dt, const void *base, int64_t i) {
  if (dt == QF_F32) return ((const float *)base)[i];
  const uint16_t h = ((const uint16_t *)base)[i];
  return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

/* Stores v as element i of an fp32, fp16 or bf16 buffer. */
static inline void qf_cpu_put(qf_dtype dt, void *base, int64_t i, float v) {
  if (dt == QF_F32) ((float *)base)[i] = v;
  else if (dt == QF_BF16) ((uint16_t *)base)[i] = qf_bf16_from_f32(v);
  else ((uint16_t *)base)[i] = qf_f16_from_f32(v);
}

#endif
