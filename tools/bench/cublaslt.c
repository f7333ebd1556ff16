/* cuBLASLt FP8 and INT8 GEMM peers for qfuse-bench.
 *
 * NOTES: cuBLASLt is column-major, and FP8 on Hopper needs the "TN" form (op(A) = A^T,
 * op(B) = B, both K-contiguous). A row-major X[r][c] is a column-major c x r matrix with ld = c,
 * so the row-major product D[M,N] = A[M,K] B[N,K]^T is computed as its column-major transpose
 * D^T (N x M, ld N) = op(W) op(X) with, in cuBLASLt's names:
 *   cuBLAS A = our B: stored K x N, lda = K, TRANSA = T  -> op(A) is N x K   (cuBLAS m = N)
 *   cuBLAS B = our A: stored K x M, ldb = K, TRANSB = N  -> op(B) is K x M   (cuBLAS n = M)
 *   cuBLAS D = our D: N x M, ldd = N, i.e. row-major [M][N]
 * The scales follow their operands: our b_scale goes to A_SCALE_POINTER / A_SCALE_MODE and our
 * a_scale to B_SCALE_POINTER / B_SCALE_MODE.
 *   OUTER_VEC: cuBLAS wants M (= our N) floats for A and N (= our M) floats for B.
 *   BLK: cuBLAS A (our weights) is BLK128x128_32F, "K-major", shape L4 x ceil(m/128) with the
 *   column stride a multiple of 4; cuBLAS B (our activations) is VEC128_32F, "N-major" with
 *   shape n x L, i.e. the token index is contiguous. The pair BLK128x128 (A) x VEC128 (B) is
 *   listed as supported; BLK128x128 on both is not. cuBLAS also requires m and n (our N and M)
 *   to be multiples of 4 and 16-byte aligned scale pointers in this mode. The manual sets no
 *   such condition for OUTER_VEC (vectors of m and n floats).
 * INT8 uses the same TN form and operand swap, with CUBLAS_COMPUTE_32I, int32 alpha / beta and an
 * int32 D. Its IMMA kernels (regular ordering, cuBLAS manual under cublasLtMatmul) need TN, m and
 * k (our N and K) and the leading dimensions (K, K, N) multiples of 4, and 4-byte aligned
 * pointers (16 for full speed); n (our M) is free.
 * FP16 uses the same TN form and operand swap too (our B, the weight [N, K], is cuBLAS A), with
 * CUBLAS_COMPUTE_32F, fp32 alpha / beta and an fp16 D; no scales. */
#include "cublaslt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

struct qfb_lt {
  cublasLtHandle_t handle;
  void *workspace;
  size_t workspace_bytes;
};

struct qfb_lt_gemm {
  qfb_lt *lt;
  int64_t M, N, K;
  qfb_lt_scale mode;          /* FP8 plans */
  int int8;                   /* an INT8 plan (qfb_lt_gemm_plan_i8) */
  int f16;                    /* a 16-bit plan (qfb_lt_gemm_plan_f16 or _bf16) */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a_layout, b_layout, d_layout; /* cuBLAS A (our B), B (our A), D */
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t planned;                   /* the heuristic's first, as planned */
  cublasLtMatmulAlgo_t algos[QFB_LT_MAX_ALGOS];   /* qfb_lt_gemm_algos */
  int n_algos;
  cublasComputeType_t compute; /* the descriptor's types, for enumerating algorithms */
  cudaDataType_t scale_type, in_type, out_type;
  const float *bound_a_scale, *bound_b_scale; /* pointers currently set on desc */
};

static int lt_ok(cublasStatus_t st, const char *call, const char *file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return 1;
  fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", file, line, call, cublasLtGetStatusName(st),
          (int)st);
  return 0;
}

static int cuda_ok(cudaError_t err, const char *call, const char *file, int line) {
  if (err == cudaSuccess) return 1;
  fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, call, cudaGetErrorName(err),
          cudaGetErrorString(err));
  return 0;
}

#define LT_CHECK(call) lt_ok((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK(call) cuda_ok((call), #call, __FILE__, __LINE__)

size_t qfb_lt_version(void) { return cublasLtGetVersion(); }

qfb_lt *qfb_lt_open(void) {
  qfb_lt *lt = calloc(1, sizeof *lt);
  if (!lt) {
    fprintf(stderr, "qfb_lt_open: out of host memory\n");
    return NULL;
  }
  if (!LT_CHECK(cublasLtCreate(&lt->handle))) {
    free(lt);
    return NULL;
  }
  lt->workspace_bytes = QFB_LT_WORKSPACE_BYTES;
  if (!CUDA_CHECK(cudaMalloc(&lt->workspace, lt->workspace_bytes))) {
    LT_CHECK(cublasLtDestroy(lt->handle));
    free(lt);
    return NULL;
  }
  return lt;
}

void qfb_lt_close(qfb_lt *lt) {
  if (!lt) return;
  if (lt->workspace) CUDA_CHECK(cudaFree(lt->workspace));
  if (lt->handle) LT_CHECK(cublasLtDestroy(lt->handle));
  free(lt);
}

const char *qfb_lt_scale_name(qfb_lt_scale mode) {
  switch (mode) {
  case QFB_LT_SCALE_TENSOR: return "tensor";
  case QFB_LT_SCALE_OUTER_VEC: return "outer_vec";
  case QFB_LT_SCALE_BLK: return "blk";
  }
  return "invalid";
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

size_t qfb_lt_a_scale_count(int64_t M, int64_t K, qfb_lt_scale mode) {
  if (M <= 0 || K <= 0) return 0;
  switch (mode) {
  case QFB_LT_SCALE_TENSOR: return 1;
  case QFB_LT_SCALE_OUTER_VEC: return (size_t)M;
  case QFB_LT_SCALE_BLK: return (size_t)(ceil_div(K, 128) * M);
  }
  return 0;
}

size_t qfb_lt_b_scale_count(int64_t N, int64_t K, qfb_lt_scale mode) {
  if (N <= 0 || K <= 0) return 0;
  switch (mode) {
  case QFB_LT_SCALE_TENSOR: return 1;
  case QFB_LT_SCALE_OUTER_VEC: return (size_t)N;
  case QFB_LT_SCALE_BLK: return (size_t)(round_up(ceil_div(K, 128), 4) * ceil_div(N, 128));
  }
  return 0;
}

static int set_scale_pointers(qfb_lt_gemm *g, const float *a_scale, const float *b_scale) {
  /* cuBLAS A is our B and vice versa. */
  if (!LT_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                               &b_scale, sizeof b_scale)))
    return 0;
  if (!LT_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                               &a_scale, sizeof a_scale)))
    return 0;
  g->bound_a_scale = a_scale;
  g->bound_b_scale = b_scale;
  return 1;
}

void qfb_lt_gemm_free(qfb_lt_gemm *g) {
  if (!g) return;
  if (g->d_layout) LT_CHECK(cublasLtMatrixLayoutDestroy(g->d_layout));
  if (g->b_layout) LT_CHECK(cublasLtMatrixLayoutDestroy(g->b_layout));
  if (g->a_layout) LT_CHECK(cublasLtMatrixLayoutDestroy(g->a_layout));
  if (g->desc) LT_CHECK(cublasLtMatmulDescDestroy(g->desc));
  free(g);
}

static int plan_args_ok(const qfb_lt *lt, int64_t M, int64_t N, int64_t K, const char *fn) {
  if (!lt) {
    fprintf(stderr, "%s: no cuBLASLt handle\n", fn);
    return 0;
  }
  if (M <= 0 || N <= 0 || K <= 0) {
    fprintf(stderr, "%s: invalid shape M=%lld N=%lld K=%lld\n", fn, (long long)M, (long long)N,
            (long long)K);
    return 0;
  }
  return 1;
}

/* A plan with its matmul descriptor in the TN form (see NOTES). NULL after printing why. */
static qfb_lt_gemm *plan_create(qfb_lt *lt, int64_t M, int64_t N, int64_t K,
                                cublasComputeType_t compute, cudaDataType_t scale_type) {
  qfb_lt_gemm *g = calloc(1, sizeof *g);
  if (!g) {
    fprintf(stderr, "qfb_lt_gemm_plan: out of host memory\n");
    return NULL;
  }
  g->lt = lt;
  g->compute = compute;
  g->scale_type = scale_type;
  g->M = M;
  g->N = N;
  g->K = K;
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  if (!LT_CHECK(cublasLtMatmulDescCreate(&g->desc, compute, scale_type)) ||
      !LT_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                               sizeof trans_a)) ||
      !LT_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                               sizeof trans_b))) {
    qfb_lt_gemm_free(g);
    return NULL;
  }
  return g;
}

/* The heuristic's first `want` results (at most 8) for g's descriptor, within the handle's
 * workspace, into heur; *found of them. Returns cublasLtMatmulAlgoGetHeuristic's status (or the
 * failing preference call's, after printing it). */
static cublasStatus_t heuristic(qfb_lt_gemm *g, int want, cublasLtMatmulHeuristicResult_t *heur, int *found) {
  cublasLtMatmulPreference_t pref = NULL;
  cublasStatus_t st;
  *found = 0;
  if (!LT_CHECK(st = cublasLtMatmulPreferenceCreate(&pref))) return st;
  if (LT_CHECK(st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &g->lt->workspace_bytes, sizeof g->lt->workspace_bytes)))
    st = cublasLtMatmulAlgoGetHeuristic(g->lt->handle, g->desc, g->a_layout, g->b_layout, g->d_layout, g->d_layout, pref,
                                        want, heur, found);
  LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  return st;
}

/* The layouts of the TN form for operands of type `in` and D of type `out`, and the heuristic's
 * first algorithm for the descriptor as it stands. Frees g and returns NULL after printing why
 * (`what` names the GEMM in the message). */
static qfb_lt_gemm *plan_finish(qfb_lt_gemm *g, cudaDataType_t in, cudaDataType_t out,
                                const char *what) {
  cublasLtMatmulHeuristicResult_t heur = {0};
  int found = 0;
  g->in_type = in, g->out_type = out;
  if (!LT_CHECK(cublasLtMatrixLayoutCreate(&g->a_layout, in, (uint64_t)g->K, (uint64_t)g->N,
                                           g->K)) ||
      !LT_CHECK(cublasLtMatrixLayoutCreate(&g->b_layout, in, (uint64_t)g->K, (uint64_t)g->M,
                                           g->K)) ||
      !LT_CHECK(cublasLtMatrixLayoutCreate(&g->d_layout, out, (uint64_t)g->N, (uint64_t)g->M,
                                           g->N))) {
    qfb_lt_gemm_free(g);
    return NULL;
  }
  const cublasStatus_t st = heuristic(g, 1, &heur, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || heur.state != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr,
            "qfb_lt_gemm_plan: cuBLASLt %zu has no algorithm for %s M=%lld N=%lld K=%lld "
            "(cublasLtMatmulAlgoGetHeuristic: %s, %d found)\n",
            qfb_lt_version(), what, (long long)g->M, (long long)g->N, (long long)g->K,
            cublasLtGetStatusName(st), found);
    qfb_lt_gemm_free(g);
    return NULL;
  }
  g->algo = g->planned = heur.algo;
  return g;
}

qfb_lt_gemm *qfb_lt_gemm_plan(qfb_lt *lt, int64_t M, int64_t N, int64_t K, qfb_lt_scale mode) {
  return qfb_lt_gemm_plan_d(lt, M, N, K, mode, CUDA_R_16BF);
}

qfb_lt_gemm *qfb_lt_gemm_plan_d(qfb_lt *lt, int64_t M, int64_t N, int64_t K, qfb_lt_scale mode,
                                cudaDataType_t d_type) {
  if (!plan_args_ok(lt, M, N, K, "qfb_lt_gemm_plan")) return NULL;
  if (d_type != CUDA_R_16BF && d_type != CUDA_R_32F) {
    fprintf(stderr, "qfb_lt_gemm_plan: D must be bf16 or fp32\n");
    return NULL;
  }
  int32_t a_mode, b_mode; /* cuBLAS A (our B), cuBLAS B (our A) */
  switch (mode) {
  case QFB_LT_SCALE_TENSOR:
    a_mode = b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    break;
  case QFB_LT_SCALE_OUTER_VEC:
    a_mode = b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    break;
  case QFB_LT_SCALE_BLK:
    if (M % 4 != 0 || N % 4 != 0) {
      fprintf(stderr,
              "qfb_lt_gemm_plan: blk scaling needs M and N to be multiples of 4 "
              "(M=%lld N=%lld); pad M\n",
              (long long)M, (long long)N);
      return NULL;
    }
    a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    break;
  default:
    fprintf(stderr, "qfb_lt_gemm_plan: invalid scale mode %d\n", (int)mode);
    return NULL;
  }

  qfb_lt_gemm *g = plan_create(lt, M, N, K, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (!g) return NULL;
  g->mode = mode;
  if (!LT_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                               sizeof a_mode)) ||
      !LT_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                               sizeof b_mode)) ||
      /* NOTES: the heuristic sees the descriptor as it will run, scale pointers included; the
       * real pointers arrive with each run, so the query uses the (aligned, never read)
       * workspace. */
      !set_scale_pointers(g, (const float *)lt->workspace, (const float *)lt->workspace)) {
    qfb_lt_gemm_free(g);
    return NULL;
  }
  char what[48];
  snprintf(what, sizeof what, "e4m3 scale=%s -> %s", qfb_lt_scale_name(mode), d_type == CUDA_R_32F ? "fp32" : "bf16");
  return plan_finish(g, CUDA_R_8F_E4M3, d_type, what);
}

qfb_lt_gemm *qfb_lt_gemm_plan_i8(qfb_lt *lt, int64_t M, int64_t N, int64_t K) {
  if (!plan_args_ok(lt, M, N, K, "qfb_lt_gemm_plan_i8")) return NULL;
  if (N % 4 != 0 || K % 4 != 0) {
    fprintf(stderr,
            "qfb_lt_gemm_plan_i8: IMMA needs N and K to be multiples of 4 (N=%lld K=%lld)\n",
            (long long)N, (long long)K);
    return NULL;
  }
  qfb_lt_gemm *g = plan_create(lt, M, N, K, CUBLAS_COMPUTE_32I, CUDA_R_32I);
  if (!g) return NULL;
  g->int8 = 1;
  return plan_finish(g, CUDA_R_8I, CUDA_R_32I, "int8 -> int32");
}

static qfb_lt_gemm *plan_16bit(qfb_lt *lt, int64_t M, int64_t N, int64_t K, cudaDataType_t type, const char *name,
                               const char *what) {
  if (!plan_args_ok(lt, M, N, K, name)) return NULL;
  qfb_lt_gemm *g = plan_create(lt, M, N, K, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (!g) return NULL;
  g->f16 = 1;
  return plan_finish(g, type, type, what);
}

qfb_lt_gemm *qfb_lt_gemm_plan_f16(qfb_lt *lt, int64_t M, int64_t N, int64_t K) {
  return plan_16bit(lt, M, N, K, CUDA_R_16F, "qfb_lt_gemm_plan_f16", "fp16 -> fp16");
}

qfb_lt_gemm *qfb_lt_gemm_plan_bf16(qfb_lt *lt, int64_t M, int64_t N, int64_t K) {
  return plan_16bit(lt, M, N, K, CUDA_R_16BF, "qfb_lt_gemm_plan_bf16", "bf16 -> bf16");
}

/* Appends algo to g's list unless it is there already or fails cublasLtMatmulAlgoCheck for g's
 * descriptor (or needs more workspace than the handle has). */
static void add_algo(qfb_lt_gemm *g, const cublasLtMatmulAlgo_t *algo) {
  for (int i = 0; i < g->n_algos; i++)
    if (!memcmp(&g->algos[i], algo, sizeof *algo)) return;
  cublasLtMatmulHeuristicResult_t r = {0};
  if (cublasLtMatmulAlgoCheck(g->lt->handle, g->desc, g->a_layout, g->b_layout, g->d_layout, g->d_layout, algo, &r) !=
          CUBLAS_STATUS_SUCCESS ||
      r.workspaceSize > g->lt->workspace_bytes)
    return;
  g->algos[g->n_algos++] = *algo;
}

int qfb_lt_gemm_algos(qfb_lt_gemm *g, int max, int *checked) {
  cublasLtMatmulHeuristicResult_t heur[8];
  int found = 0;
  if (checked) *checked = 0;
  if (!g || max < 1) return 0;
  if (max > QFB_LT_MAX_ALGOS) max = QFB_LT_MAX_ALGOS;
  g->n_algos = 0;
  /* The heuristic's list first, in its order. */
  if (LT_CHECK(heuristic(g, max < 8 ? max : 8, heur, &found)))
    for (int i = 0; i < found && g->n_algos < max; i++)
      if (heur[i].state == CUBLAS_STATUS_SUCCESS) g->algos[g->n_algos++] = heur[i].algo;
  /* Then, for the heuristic's first algorithm and every algorithm id cuBLASLt has for the types,
   * each tile the id lists, with its own stages or the heuristic's, each cluster shape of up to
   * four CTAs, unsplit and (where the id splits K, with a reduction it supports) in 2 or 4 parts. */
  int ids[64], n_ids = 0;
  if (!LT_CHECK(cublasLtMatmulAlgoGetIds(g->lt->handle, g->compute, g->scale_type, g->in_type, g->in_type, g->out_type,
                                         g->out_type, 64, ids, &n_ids)))
    n_ids = 0;
  const int listed = g->n_algos;
  for (int k = -1; k < n_ids && g->n_algos < max; k++) {
    cublasLtMatmulAlgo_t algo;
    if (k < 0) {
      if (!listed) continue;
      algo = g->algos[0];
    } else if (cublasLtMatmulAlgoInit(g->lt->handle, g->compute, g->scale_type, g->in_type, g->in_type, g->out_type,
                                      g->out_type, ids[k], &algo) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    uint32_t tiles[64] = {CUBLASLT_MATMUL_TILE_UNDEFINED}, stages[2] = {CUBLASLT_MATMUL_STAGES_UNDEFINED, 0};
    uint32_t mask = 0, reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t bytes = 0;
    int n_tiles = 1, n_stages = 1, split_ok = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &bytes) == CUBLAS_STATUS_SUCCESS &&
        bytes >= sizeof tiles[0] && bytes <= sizeof tiles &&
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, bytes, &bytes) == CUBLAS_STATUS_SUCCESS)
      n_tiles = (int)(bytes / sizeof tiles[0]);
    if (k < 0 && cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[1], sizeof stages[1],
                                                      &bytes) == CUBLAS_STATUS_SUCCESS)
      n_stages = 2;
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &split_ok, sizeof split_ok, &bytes);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &mask, sizeof mask, &bytes);
    for (uint32_t r = CUBLASLT_REDUCTION_SCHEME_INPLACE; r <= CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE; r <<= 1)
      if (mask & r) {
        reduction = r;
        break;
      }
    static const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                        CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
                                        CUBLASLT_CLUSTER_SHAPE_1x4x1};
    static const int32_t splits[] = {1, 2, 4};
    for (int t = 0; t < n_tiles; t++)
      for (int st = 0; st < n_stages; st++)
        for (size_t cl = 0; cl < sizeof clusters / sizeof clusters[0]; cl++)
          for (size_t si = 0; si < sizeof splits / sizeof splits[0] && g->n_algos < max; si++) {
            if (splits[si] > 1 && (!split_ok || reduction == CUBLASLT_REDUCTION_SCHEME_NONE)) break;
            const uint32_t scheme = splits[si] > 1 ? reduction : CUBLASLT_REDUCTION_SCHEME_NONE;
            if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], sizeof tiles[t]) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[st], sizeof stages[st]) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &clusters[cl],
                                                     sizeof clusters[cl]) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits[si], sizeof splits[si]) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme))
              continue;
            if (checked) ++*checked;
            add_algo(g, &algo);
          }
  }
  return g->n_algos;
}

int qfb_lt_gemm_use_algo(qfb_lt_gemm *g, int i) {
  if (!g || i < 0 || i >= g->n_algos) {
    fprintf(stderr, "qfb_lt_gemm_use_algo: no algorithm %d (%d found)\n", i, g ? g->n_algos : 0);
    return 1;
  }
  g->algo = g->algos[i];
  return 0;
}

void qfb_lt_gemm_algo_name(const qfb_lt_gemm *g, int i, char *buf, size_t n) {
  int32_t id = -1, split = 0;
  uint32_t tile = 0, stages = 0;
  uint16_t cluster = 0;
  size_t w;
  if (!g || i < 0 || i >= g->n_algos) {
    snprintf(buf, n, "none");
    return;
  }
  const cublasLtMatmulAlgo_t *a = &g->algos[i];
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
  snprintf(buf, n, "id%d.tile%u.split%d.stages%u.cluster%u", (int)id, tile, (int)split, stages, (unsigned)cluster);
}

int qfb_lt_gemm_algo_is_planned(const qfb_lt_gemm *g, int i) {
  return g && i >= 0 && i < g->n_algos && !memcmp(&g->algos[i], &g->planned, sizeof g->planned);
}

/* The planned matmul with our operands: cuBLAS A is our B (the weight), cuBLAS B is our A; C is
 * unused (beta = 0) and aliases D. alpha and beta have the plan's scale type. */
static int matmul(qfb_lt_gemm *g, const void *alpha, const void *beta, const void *A, const void *B, void *D,
                  cudaStream_t s) {
  return LT_CHECK(cublasLtMatmul(g->lt->handle, g->desc, alpha, B, g->a_layout, A, g->b_layout, beta, D, g->d_layout, D,
                                 g->d_layout, &g->algo, g->lt->workspace, g->lt->workspace_bytes, s))
             ? 0
             : 1;
}

int qfb_lt_gemm_run(qfb_lt_gemm *g, const void *A, const void *B, const float *a_scale,
                    const float *b_scale, void *D, cudaStream_t s) {
  if (!g || !A || !B || !a_scale || !b_scale || !D) {
    fprintf(stderr, "qfb_lt_gemm_run: null argument\n");
    return 1;
  }
  if (g->int8 || g->f16) {
    fprintf(stderr, "qfb_lt_gemm_run: an %s plan (use qfb_lt_gemm_run_%s)\n", g->int8 ? "INT8" : "16-bit",
            g->int8 ? "i8" : "f16");
    return 1;
  }
  if ((a_scale != g->bound_a_scale || b_scale != g->bound_b_scale) &&
      !set_scale_pointers(g, a_scale, b_scale))
    return 1;
  const float alpha = 1.0f, beta = 0.0f;
  return matmul(g, &alpha, &beta, A, B, D, s);
}

int qfb_lt_gemm_run_i8(qfb_lt_gemm *g, const void *A, const void *B, int32_t *D, cudaStream_t s) {
  if (!g || !A || !B || !D) {
    fprintf(stderr, "qfb_lt_gemm_run_i8: null argument\n");
    return 1;
  }
  if (!g->int8) {
    fprintf(stderr, "qfb_lt_gemm_run_i8: not an INT8 plan\n");
    return 1;
  }
  /* CUBLAS_COMPUTE_32I takes int32 alpha and beta. */
  const int32_t alpha = 1, beta = 0;
  return matmul(g, &alpha, &beta, A, B, D, s);
}

int qfb_lt_gemm_run_f16(qfb_lt_gemm *g, const void *A, const void *B, void *D, cudaStream_t s) {
  if (!g || !A || !B || !D) {
    fprintf(stderr, "qfb_lt_gemm_run_f16: null argument\n");
    return 1;
  }
  if (!g->f16) {
    fprintf(stderr, "qfb_lt_gemm_run_f16: not a 16-bit plan\n");
    return 1;
  }
  const float alpha = 1.0f, beta = 0.0f;
  return matmul(g, &alpha, &beta, A, B, D, s);
}

int qfb_lt_run_call16(void *arg) {
  const qfb_lt_call16 *c = arg;
  return qfb_lt_gemm_run_f16(c->g, c->a, c->b, c->d, 0);
}
