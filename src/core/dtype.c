/* The dtype traits table: name, DLPack encoding and element size, one row per qf_dtype. */
#include "core/internal.h"

/* DLPack >= 1.1 type codes that Debian's DLPack 0.6 header lacks. */
enum {
  QF_DL_FLOAT8_E4M3FN = 10,
  QF_DL_FLOAT8_E4M3FNUZ = 11,
  QF_DL_FLOAT8_E5M2 = 12,
  QF_DL_FLOAT8_E8M0FNU = 14,
  QF_DL_FLOAT4_E2M1FN = 17,
};

typedef struct {
  const char *name;
  uint8_t dl_code, dl_bits;
  uint8_t bytes; /* 0: sub-byte */
} qf_dtype_traits;

static const qf_dtype_traits traits[QF_DTYPE_COUNT] = {
    [QF_BF16] = {"bf16", kDLBfloat, 16, 2},
    [QF_F16] = {"fp16", kDLFloat, 16, 2},
    [QF_F32] = {"fp32", kDLFloat, 32, 4},
    [QF_I8] = {"int8", kDLInt, 8, 1},
    [QF_I32] = {"int32", kDLInt, 32, 4},
    [QF_E4M3FN] = {"e4m3fn", QF_DL_FLOAT8_E4M3FN, 8, 1},
    [QF_E4M3FNUZ] = {"e4m3fnuz", QF_DL_FLOAT8_E4M3FNUZ, 8, 1},
    [QF_E5M2] = {"e5m2", QF_DL_FLOAT8_E5M2, 8, 1},
    [QF_UE8M0] = {"ue8m0", QF_DL_FLOAT8_E8M0FNU, 8, 1},
    [QF_E2M1X2] = {"e2m1x2", QF_DL_FLOAT4_E2M1FN, 4, 0},
    [QF_U8] = {"uint8", kDLUInt, 8, 1},
};

_Static_assert(sizeof traits / sizeof traits[0] == QF_DTYPE_COUNT, "one traits row per qf_dtype");

static int valid(qf_dtype t) { return (int)t >= 0 && t < QF_DTYPE_COUNT; }

DLDataType qf_dtype_to_dl(qf_dtype dtype) {
  DLDataType dl = {0, 0, 0};
  if (!valid(dtype)) return dl;
  dl.code = traits[dtype].dl_code;
  dl.bits = traits[dtype].dl_bits;
  dl.lanes = 1;
  return dl;
}

qf_status qf_dtype_from_dl(DLDataType dl, qf_dtype *out) {
  if (!out) return QF_ERR_NULL;
  if (dl.lanes != 1) return QF_ERR_DTYPE;
  for (int t = 0; t < QF_DTYPE_COUNT; t++) {
    if (traits[t].dl_code == dl.code && traits[t].dl_bits == dl.bits) {
      *out = (qf_dtype)t;
      return QF_OK;
    }
  }
  return QF_ERR_DTYPE;
}

const char *qf_dtype_name(qf_dtype dtype) { return valid(dtype) ? traits[dtype].name : "invalid"; }

size_t qf_dtype_size(qf_dtype dtype) { return valid(dtype) ? traits[dtype].bytes : 0; }
