/* Internal to libqfuse: the context, error reporting and the plain-struct views that the
 * validated front end hands to the backends. Backends never see a DLTensor. */
#ifndef QF_CORE_INTERNAL_H
#define QF_CORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "qfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qf_ctx {
  qf_device device;
  int device_id;
  void *stream; /* cudaStream_t; NULL is the legacy default stream */
  /* device facts, read once at creation (CUDA only) */
  int sm_count;
  int cc_major, cc_minor;
  size_t l2_bytes;
  size_t smem_optin; /* max dynamic shared memory per block after opt-in */
  double dram_gbps;  /* peak DRAM bandwidth in GB/s (2 x memory clock x bus width; 0 if unknown) */
  int stream_sms;    /* SMs the stream's work can occupy: its green context's, else sm_count (set
                        with the stream) */
  int pdl;           /* qf_ctx_set_pdl: the GEMMs and quantization kernels launch as programmatic
                        dependents (qf_cuda_launch) */
  /* Device scratch (CUDA only): grown on demand by qf_cuda_workspace, freed with the context. */
  void *workspace;
  size_t workspace_bytes;
  char error[512];
};

/* Records a failure on ctx (printf-style message) and returns status. */
qf_status qf_fail(qf_ctx *ctx, qf_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Bytes per element, for types of whole bytes; e2m1x2 has 0 here (half a byte). */
size_t qf_dtype_size(qf_dtype dtype);

/* A validated row-major matrix: rows x cols elements, row i at data + i * ld elements.
 * A 1-D tensor of n elements is one row (rows = 1, ld = n). */
typedef struct {
  void *data;
  qf_dtype dtype;
  int64_t rows, cols, ld;
} qf_mat;

/* A set of accepted dtypes, as a bit mask of (1u << qf_dtype). */
typedef uint32_t qf_dtype_set;
#define QF_DT(t) (1u << (t))

/* Validates a 1-D or 2-D tensor argument named `name` of op `op` and fills *out:
 * non-NULL, on ctx's device, dtype in `accept`, last dimension contiguous, row stride >= cols
 * (free when there is one row) and data + byte_offset aligned to `align` bytes and at least to its
 * element size; the row pitch need not be a multiple of `align` (kernels take a narrower path
 * then). Returns the specific status with a message naming op, argument and values. */
qf_status qf_check_mat(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t,
                       qf_dtype_set accept, size_t align, qf_mat *out);

/* qf_check_mat for a matrix of exactly [rows, cols] whose row pitch is a multiple of `pitch`
 * elements. */
qf_status qf_check_mat_2d(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype_set accept,
                          size_t align, int64_t rows, int64_t cols, int64_t pitch, qf_mat *out);

/* Checks a tensor's exact shape (ndim and every extent). */
qf_status qf_check_shape(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t,
                         int ndim, const int64_t *shape);

/* A compact row-major tensor of exactly `shape`, of dtype dt on ctx's device, aligned to
 * `align` bytes; *data receives its first element. */
qf_status qf_check_dense(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype dt, int ndim,
                         const int64_t *shape, size_t align, void **data);

/* A vector of n elements given as [n], [n, 1] or [1, n], contiguous, of dtype dt on ctx's
 * device, 4-byte aligned; *data receives its first element. */
qf_status qf_check_vec(qf_ctx *ctx, const char *op, const char *name, const DLTensor *t, qf_dtype dt,
                       int64_t n, void **data);

#ifdef __cplusplus
}
#endif

#endif
