/* Test helpers: DLTensors over plain buffers, random data, poison and sentinels. */
#ifndef QF_TEST_TENSORS_H
#define QF_TEST_TENSORS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "qfuse.h"

#define POISON 0xA5u

/* Element i of an fp32, fp16, bf16 or e4m3fn buffer as fp32, and the store back (rounded to nearest
 * even by the library's own codecs; e4m3fn saturating). */
static inline float float_get(const void *buf, qf_dtype dt, size_t i) {
  if (dt == QF_F32) return ((const float *)buf)[i];
  if (dt == QF_E4M3FN) return qf_e4m3fn_to_f32(((const uint8_t *)buf)[i]);
  const uint16_t h = ((const uint16_t *)buf)[i];
  return dt == QF_BF16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

static inline void float_put(void *buf, qf_dtype dt, size_t i, float v) {
  if (dt == QF_F32) ((float *)buf)[i] = v;
  else if (dt == QF_E4M3FN) ((uint8_t *)buf)[i] = qf_e4m3fn_from_f32(v);
  else ((uint16_t *)buf)[i] = dt == QF_BF16 ? qf_bf16_from_f32(v) : qf_f16_from_f32(v);
}

/* Bytes per element of fp32, fp16, bf16 and e4m3fn. */
static inline size_t float_size(qf_dtype dt) { return dt == QF_F32 ? 4 : dt == QF_E4M3FN ? 1 : 2; }

/* A 2-D row-major tensor description: shape, strides and the DLTensor pointing at them. */
typedef struct {
  DLTensor t;
  int64_t shape[2];
  int64_t strides[2];
} tensor2d;

static inline void tensor2d_init(tensor2d *m, void *data, qf_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                                 DLDeviceType dev) {
  memset(m, 0, sizeof *m);
  m->shape[0] = rows;
  m->shape[1] = cols;
  m->strides[0] = ld;
  m->strides[1] = 1;
  m->t.data = data;
  m->t.device.device_type = dev;
  m->t.device.device_id = 0;
  m->t.ndim = 2;
  m->t.dtype = qf_dtype_to_dl(dt);
  m->t.shape = m->shape;
  m->t.strides = m->strides;
}

/* A compact tensor (NULL strides) of ndim dimensions over data. */
static inline DLTensor dl_tensor(void *data, qf_dtype dt, int ndim, int64_t *shape, DLDeviceType dev) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = dev;
  t.ndim = ndim;
  t.dtype = qf_dtype_to_dl(dt);
  t.shape = shape;
  return t;
}

/* xorshift64*: reproducible per test, never all zeros. */
static inline uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}
static inline float rng_uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)); }
static inline float rng_normal(uint64_t *s) {
  float u = rng_uniform(s) + 1e-7f, v = rng_uniform(s);
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* Random activations: mostly N(0, 1) * `scale`, a few outliers (x100), and, when `specials` is
 * set, some NaN, +-Inf and exact zeros. */
static inline float rng_activation(uint64_t *s, float scale, int specials) {
  uint64_t r = rng_next(s) % 1000;
  if (specials && r == 0) return NAN;
  if (specials && r == 1) return INFINITY;
  if (specials && r == 2) return -INFINITY;
  if (specials && r == 3) return 0.0f;
  float v = rng_normal(s) * scale;
  return r < 20 ? v * 100.0f : v;
}

#endif
