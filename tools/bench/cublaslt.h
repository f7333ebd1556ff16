/* cuBLASLt GEMM peers for qfuse-bench (built only with CUDA).
 *
 * FP8: D[M,N] (bf16, row-major, ldd = N) = A[M,K] (e4m3, row-major) x B[N,K]^T (e4m3, row-major),
 * fp32 accumulation, with one of three scale modes. All pointers are device pointers; scales are
 * multiplicative (value = fp8 * scale). The exact scale tensor layouts are documented at
 * qfb_lt_scale below.
 * INT8: D[M,N] (int32, row-major, ldd = N) = A[M,K] (int8) x B[N,K]^T (int8), int32
 * accumulation, no scaling: see qfb_lt_gemm_plan_i8.
 * FP16 / BF16: D[M,N] (fp16 / bf16, row-major, ldd = N) = A[M,K] x B[N,K]^T of the same type,
 * fp32 accumulation, no scaling: see qfb_lt_gemm_plan_f16 and _bf16. */
#ifndef QFUSE_TOOLS_BENCH_CUBLASLT_H
#define QFUSE_TOOLS_BENCH_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QFB_LT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct qfb_lt qfb_lt; /* cuBLASLt handle + 32 MiB device workspace */

qfb_lt *qfb_lt_open(void); /* NULL + message on stderr on failure */
void qfb_lt_close(qfb_lt *lt);
size_t qfb_lt_version(void); /* cublasLtGetVersion() of the library loaded at run time */

/* Scale modes, in qfuse's row-major terms (L = ceil(K/128), L4 = L rounded up to a multiple of 4):
 *
 *   TENSOR     a_scale: 1 float.  b_scale: 1 float.
 *              D[m,n] = a_scale * b_scale * sum_k A[m,k] B[n,k]
 *
 *   OUTER_VEC  a_scale: M floats, one per row of A.  b_scale: N floats, one per row of B.
 *              D[m,n] = a_scale[m] * b_scale[n] * sum_k A[m,k] B[n,k]
 *
 *   BLK        (DeepSeek-V3 style; M and N must be multiples of 4, scale pointers 16-byte aligned)
 *              a_scale: 1x128 blocks of A, L*M floats, M contiguous ("M-major"):
 *                  scale of A[m, kb*128 .. kb*128+127] is a_scale[kb*M + m]
 *              b_scale: 128x128 blocks of B, L4*ceil(N/128) floats, K-blocks contiguous with the
 *                  stride between consecutive N-blocks padded to L4 (pad entries are ignored):
 *                  scale of B[nb*128 .., kb*128 ..] is b_scale[nb*L4 + kb]
 *              D[m,n] = sum_kb a_scale[kb*M + m] * b_scale[(n/128)*L4 + kb]
 *                              * sum_{k in block kb} A[m,k] B[n,k]
 *
 * Note the activation layout: the transpose of the [M][L] order a per-token-group quantizer
 * naturally writes. The layouts come from the cuBLAS manual, section "Scaling factors layouts"
 * under "128-element 1D and 128x128 2D Block Scaling For FP8 Data Types", translated through the
 * operand swap described in cublaslt.c. */
typedef enum {
  QFB_LT_SCALE_TENSOR = 0,
  QFB_LT_SCALE_OUTER_VEC = 1,
  QFB_LT_SCALE_BLK = 2
} qfb_lt_scale;

const char *qfb_lt_scale_name(qfb_lt_scale mode); /* "tensor", "outer_vec", "blk" */
/* Number of floats the caller must allocate for a_scale / b_scale in a mode (0 if invalid). */
size_t qfb_lt_a_scale_count(int64_t M, int64_t K, qfb_lt_scale mode);
size_t qfb_lt_b_scale_count(int64_t N, int64_t K, qfb_lt_scale mode);

typedef struct qfb_lt_gemm qfb_lt_gemm;

/* Matmul descriptor, layouts and the heuristic's first algorithm for the given shape and mode.
 * NULL + message on stderr when the arguments are invalid or cuBLASLt has no algorithm for it. */
qfb_lt_gemm *qfb_lt_gemm_plan(qfb_lt *lt, int64_t M, int64_t N, int64_t K, qfb_lt_scale mode);
/* The same with D of type d_type, CUDA_R_16BF (qfb_lt_gemm_plan) or CUDA_R_32F (row-major [M][N],
 * ldd = N), for comparing the two libraries' accuracy (tools/probe/fp8_error.c). */
qfb_lt_gemm *qfb_lt_gemm_plan_d(qfb_lt *lt, int64_t M, int64_t N, int64_t K, qfb_lt_scale mode,
                                cudaDataType_t d_type);
/* Enqueues the GEMM on stream s. Returns 0, or nonzero after printing the failing call. */
int qfb_lt_gemm_run(qfb_lt_gemm *g, const void *A, const void *B, const float *a_scale,
                    const float *b_scale, void *D, cudaStream_t s);
void qfb_lt_gemm_free(qfb_lt_gemm *g);

/* The algorithms cuBLASLt can run a plan's descriptor with (at most max, at most
 * QFB_LT_MAX_ALGOS): the heuristic's list in its order (at most eight), then, for its first
 * algorithm and every algorithm id cuBLASLt has for the types, each tile the id lists, its own
 * stages or the heuristic's, each cluster shape of up to four CTAs, unsplit and split along K 2
 * and 4 ways where it can, each kept if it passes cublasLtMatmulAlgoCheck (*checked: how many
 * configurations were checked). Returns how many are kept; qfb_lt_gemm_use_algo(g, i) makes the
 * i-th the one later runs take, and qfb_lt_gemm_algo_is_planned(g, i) says whether it is byte for
 * byte the one qfb_lt_gemm_plan chose. The bench's peers run the heuristic's first algorithm, as
 * an engine calls cuBLASLt; these time its other choices (what an autotuning engine could pick). */
#define QFB_LT_MAX_ALGOS 128
int qfb_lt_gemm_algos(qfb_lt_gemm *g, int max, int *checked);
int qfb_lt_gemm_use_algo(qfb_lt_gemm *g, int i);        /* 0, or nonzero past the count found */
int qfb_lt_gemm_algo_is_planned(const qfb_lt_gemm *g, int i); /* algorithm i, byte for byte the plan's */
/* Algorithm i's configuration as "id<ID>.tile<TILE>.split<K SPLITS>.stages<ID>.cluster<ID>". */
void qfb_lt_gemm_algo_name(const qfb_lt_gemm *g, int i, char *buf, size_t n);

/* INT8: D = A x B^T with int32 accumulation and int32 output, alpha 1 and beta 0: the fastest
 * INT8 GEMM cuBLASLt offers (no scaling, no conversion of D), the peer of scaled INT8 GEMMs.
 * cuBLASLt's IMMA kernels (regular ordering) need the TN form, cuBLAS m and k (our N and K) and the
 * leading dimensions (K, K, N) multiples of 4, and 4-byte aligned pointers (16 for full speed);
 * plan refuses N or K not a multiple of 4. M (cuBLAS n) is free. Plan, free with
 * qfb_lt_gemm_free; NULL + message on stderr as qfb_lt_gemm_plan. */
qfb_lt_gemm *qfb_lt_gemm_plan_i8(qfb_lt *lt, int64_t M, int64_t N, int64_t K);
/* Enqueues an INT8 plan on stream s. Returns 0, or nonzero after printing the failing call. */
int qfb_lt_gemm_run_i8(qfb_lt_gemm *g, const void *A, const void *B, int32_t *D, cudaStream_t s);

/* FP16: D = A x B^T with fp16 operands (A [M, K] the activations, B [N, K] the weight, both K
 * contiguous), fp32 accumulation (CUBLAS_COMPUTE_32F, alpha 1, beta 0) and an fp16 D [M, N]: the
 * uncompressed peer of the VQ kernels. Pointers 16-byte aligned and K a multiple of 8 for the
 * tensor-core kernels. Plan, free with qfb_lt_gemm_free; NULL + message on stderr as
 * qfb_lt_gemm_plan. */
qfb_lt_gemm *qfb_lt_gemm_plan_f16(qfb_lt *lt, int64_t M, int64_t N, int64_t K);
/* BF16: the same with bf16 operands and D, the peer of the NVFP4 GEMM (the weight dequantized). */
qfb_lt_gemm *qfb_lt_gemm_plan_bf16(qfb_lt *lt, int64_t M, int64_t N, int64_t K);
/* Enqueues an FP16 or BF16 plan on stream s. Returns 0, or nonzero after printing the failing call. */
int qfb_lt_gemm_run_f16(qfb_lt_gemm *g, const void *A, const void *B, void *D, cudaStream_t s);

/* One FP16 or BF16 run on stream 0, as a qfb_time_us callback: arg points to a qfb_lt_call16. */
typedef struct {
  qfb_lt_gemm *g;
  const void *a, *b;
  void *d;
} qfb_lt_call16;
int qfb_lt_run_call16(void *arg);

#ifdef __cplusplus
}
#endif

#endif
