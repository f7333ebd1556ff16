/*
 * qfuse: fused low-precision kernels for LLM inference behind one C API.
 *
 * Conventions (see docs/DESIGN.md for the reasons):
 *  - Every function returns qf_status. On failure nothing is written to any output tensor and
 *    qf_ctx_last_error(ctx) names the op, the argument and the offending values.
 *  - Tensors are DLPack DLTensor*. A tensor's device must be the context's device. Row-major 2-D
 *    tensors may have a row stride (strides[1] == 1, strides[0] >= shape[1]); other layouts are
 *    refused, never copied.
 *  - Options are plain structs whose zero value means the defaults; a NULL options pointer is the
 *    same as a zeroed struct.
 *  - Enums only grow at the end; changed behaviour gets a _v2 name.
 */
#ifndef QFUSE_H
#define QFUSE_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ---------------------------------------------------------------------------- */

#define QF_VERSION_MAJOR 0
#define QF_VERSION_MINOR 1
#define QF_VERSION_PATCH 0
#define QF_VERSION_NUMBER (QF_VERSION_MAJOR * 10000 + QF_VERSION_MINOR * 100 + QF_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the library actually loaded (compare with the macros above). */
const char *qf_version(void);
/* QF_VERSION_NUMBER of the library actually loaded. */
int qf_version_number(void);

/* ---- Status codes ----------------------------------------------------------------------- */

/* One list gives the enum and qf_status_str(). New codes are added at the end only. */
#define QF_STATUS_LIST(X)                                                                    \
  X(QF_OK, 0, "ok")                                                                          \
  X(QF_ERR_NULL, 1, "a required pointer is NULL")                                            \
  X(QF_ERR_DEVICE, 2, "tensor is not on the context's device")                               \
  X(QF_ERR_DTYPE, 3, "unsupported data type")                                                \
  X(QF_ERR_SHAPE, 4, "invalid shape")                                                        \
  X(QF_ERR_LAYOUT, 5, "unsupported strides or layout")                                       \
  X(QF_ERR_ALIGNMENT, 6, "pointer is not aligned as required")                               \
  X(QF_ERR_VALUE, 7, "invalid argument value")                                               \
  X(QF_ERR_UNSUPPORTED, 8, "not supported by this build or device")                          \
  X(QF_ERR_CUDA, 9, "CUDA runtime error")                                                    \
  X(QF_ERR_OUT_OF_MEMORY, 10, "out of memory")

typedef enum {
#define QF_STATUS_ENUM_(name, value, text) name = value,
  QF_STATUS_LIST(QF_STATUS_ENUM_)
#undef QF_STATUS_ENUM_
} qf_status;

/* A static string describing the code; "unknown status" for values outside the list. */
const char *qf_status_str(qf_status status);

/* ---- Context ---------------------------------------------------------------------------- */

typedef enum {
  QF_DEVICE_CPU = 0,  /* the reference backend: plain C, single thread */
  QF_DEVICE_CUDA = 1, /* a CUDA device (sm_90a kernels) */
} qf_device;

/* Opaque: device, stream and the detailed message of the last failure. Not thread-safe: use
 * one context per thread (contexts are cheap). */
typedef struct qf_ctx qf_ctx;

/* Creates a context for the CPU (device_id ignored) or for CUDA device device_id. Returns
 * QF_ERR_UNSUPPORTED for QF_DEVICE_CUDA when the library was built without CUDA or the device
 * is not an sm_90 part; *out is then NULL. */
qf_status qf_ctx_create(qf_ctx **out, qf_device device, int device_id);
void qf_ctx_destroy(qf_ctx *ctx);
/* Every later launch on this context goes to this cudaStream_t (NULL: the legacy default
 * stream). QF_ERR_UNSUPPORTED on a CPU context. */
qf_status qf_ctx_set_stream(qf_ctx *ctx, void *cuda_stream);
/* Detailed message of the last failed call on ctx, "" if none failed yet. Valid until the next
 * call on ctx. */
const char *qf_ctx_last_error(const qf_ctx *ctx);

/* ---- Data types ------------------------------------------------------------------------- */

/* qfuse's dtype vocabulary and its DLPack encoding. DLPack 0.6 (Debian's libdlpack-dev) has no
 * codes for FP8/FP4; qfuse uses the codes of DLPack >= 1.1, which PyTorch also emits, so
 * tensors from newer frameworks are understood as they are:
 *   bf16      {kDLBfloat=4, 16}    fp16 {kDLFloat=2, 16}   fp32 {kDLFloat=2, 32}
 *   int8      {kDLInt=0, 8}        int32 {kDLInt=0, 32}
 *   e4m3fn    {10, 8}   e4m3fnuz {11, 8}   e5m2 {12, 8}   ue8m0 {14 (e8m0fnu), 8}
 *   e2m1x2    {17 (e2m1fn), 4}: two values per byte, element 2i in the low nibble; the shape
 *             counts values, so the last dimension must be even.
 * Frameworks without FP8 (NumPy) hand FP8 data over as uint8: relabel such a tensor with
 * qf_dtype_to_dl() before the call (the Python binding's qfuse.view does that). */
typedef enum {
  QF_BF16 = 0,
  QF_F16 = 1,
  QF_F32 = 2,
  QF_I8 = 3,
  QF_I32 = 4,
  QF_E4M3FN = 5,
  QF_E4M3FNUZ = 6,
  QF_E5M2 = 7,
  QF_UE8M0 = 8,
  QF_E2M1X2 = 9,
  QF_DTYPE_COUNT /* not a type: the number of types; grows with the list */
} qf_dtype;

DLDataType qf_dtype_to_dl(qf_dtype dtype);
/* QF_ERR_DTYPE (and *out untouched) if the DLPack type is none of the above. */
qf_status qf_dtype_from_dl(DLDataType dl, qf_dtype *out);
/* "bf16", "e4m3fn", ...; "invalid" for values outside the enum. */
const char *qf_dtype_name(qf_dtype dtype);

/* ---- Quantization ------------------------------------------------------------------------ */

/* Numerics shared by every quantization op (docs/NUMERICS.md has the full contract):
 *  - q = encode(x * inv_scale) with inv_scale = 1.0f / scale computed once in fp32 (correctly
 *    rounded) and the product rounded to fp32; the GPU computes exactly the same.
 *  - encode rounds to nearest even and saturates: e4m3fn to +-448, int8 to [-128, 127];
 *    +-Inf saturates to the same bounds.
 *  - NaN inputs: e4m3fn gives its NaN code 0x7F; int8 gives 0 (int8 cannot carry NaN).
 */

/* Static per-tensor quantization: q = encode(x * (1 / scale[0])).
 *  x      [M, K] or [K]: bf16, fp16 or fp32; 2-D rows may be strided (strides[1] == 1).
 *  scale  [1] fp32, on the context's device. The value is data and is not read by the host:
 *         a scale that is not finite and > 0 makes inv_scale NaN, so every e4m3fn output is
 *         NaN (0x7F) and every int8 output 0, on both backends.
 *  q      same shape as x: e4m3fn or int8; 2-D rows may be strided.
 *  x and q: 16-byte aligned data pointers (data + byte_offset); 64-bit offsets throughout. */
qf_status qf_quant_per_tensor(qf_ctx *ctx, const DLTensor *x, const DLTensor *scale,
                              DLTensor *q);

#ifdef __cplusplus
}
#endif

#endif /* QFUSE_H */
