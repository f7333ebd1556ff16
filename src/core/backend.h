/* The interface between the validated front end (src/core) and the two backends
 * (src/cpu: the reference; src/cuda: the kernels). Arguments arrive checked. */
#ifndef QF_CORE_BACKEND_H
#define QF_CORE_BACKEND_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device (src/cuda/device.cu) ---- */
qf_status qf_cuda_ctx_init(qf_ctx *ctx, int device_id);

/* ---- quant ---- */
typedef struct {
  qf_mat x;            /* bf16 / fp16 / fp32 */
  qf_mat q;            /* e4m3fn / int8, same rows and cols as x */
  const float *scale;  /* [1], on the op's device */
} qf_quant_tensor_args;

qf_status qf_cpu_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a);
qf_status qf_cuda_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a);

#ifdef __cplusplus
}
#endif

#endif
