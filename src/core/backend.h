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
void qf_cuda_ctx_release(qf_ctx *ctx);
/* The SMs that work on ctx->stream can occupy: its green context's share where the stream belongs
 * to one (a partition the device properties do not show), else ctx->sm_count. */
int qf_cuda_stream_sms(const qf_ctx *ctx);
/* qf_ctx_reserve_workspace on a CUDA context. */
qf_status qf_cuda_reserve_workspace(qf_ctx *ctx, size_t bytes);

/* ---- quant ---- */
typedef struct {
  qf_mat x;            /* bf16 / fp16 / fp32 */
  qf_mat q;            /* e4m3fn / int8, same rows and cols as x */
  const float *scale;  /* [1], on the op's device */
} qf_quant_tensor_args;

qf_status qf_cpu_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a);
qf_status qf_cuda_quant_per_tensor(qf_ctx *ctx, const qf_quant_tensor_args *a);

/* Scale rule and storage shared by the dynamic ops (resolved defaults, see qfuse.h). */
typedef struct {
  void *data;          /* fp32 scales, or int32 words of packed UE8M0 bytes */
  int64_t ld;          /* ROW_MAJOR: elements per row; COL_MAJOR*: elements (words) per group */
  int64_t pad_rows;    /* COL_MAJOR_TMA: rows m in [M, M + pad_rows) to fill with 0 */
  int layout;          /* qf_scale_layout */
  int format;          /* qf_scale_format */
  float scale_min;     /* > 0 */
  const float *ub;     /* NULL or the [1] upper bound on the op's device */
} qf_scale_out;

/* qf_quant_group and qf_silu_mul_quant_group. glu: x holds [gate | up] and the quantized value
 * of column k is qf_glu(x[m, k], x[m, K + k], ...), with K = q.cols. */
typedef struct {
  qf_mat x, q;
  int group_size;
  qf_scale_out scales;
  int glu;             /* 0: v = x; 1: gated activation */
  float alpha, limit;  /* alpha resolved (never 0) */
  int up_plus_one;
  int fast_exp;        /* glu: CUDA may use the hardware exp2 and reciprocal */
} qf_group_quant_args;

qf_status qf_cpu_quant_group(qf_ctx *ctx, const qf_group_quant_args *a);
qf_status qf_cuda_quant_group(qf_ctx *ctx, const qf_group_quant_args *a);

/* qf_quant_token: scales [M] fp32; azp NULL (symmetric) or [M] int32 (asymmetric int8). */
typedef struct {
  qf_mat x, q;
  float *scales;
  int32_t *azp;
  float scale_min;
  const float *ub;
} qf_token_quant_args;

qf_status qf_cpu_quant_token(qf_ctx *ctx, const qf_token_quant_args *a);
qf_status qf_cuda_quant_token(qf_ctx *ctx, const qf_token_quant_args *a);

/* qf_quant_tensor with dynamic != 0: scale [1] is written. */
typedef struct {
  qf_mat x, q;
  float *scale;
  float scale_min;
} qf_tensor_dynamic_args;

qf_status qf_cpu_quant_tensor_dynamic(qf_ctx *ctx, const qf_tensor_dynamic_args *a);
qf_status qf_cuda_quant_tensor_dynamic(qf_ctx *ctx, const qf_tensor_dynamic_args *a);

/* qf_rms_norm_quant: group_size -1 quantizes per token (scales.data: [M] fp32, layout unused). */
typedef struct {
  qf_mat x, residual;  /* residual.data NULL when absent */
  const void *weight;  /* [K], x's dtype */
  qf_mat q;
  float eps;
  int group_size;
  qf_scale_out scales;
} qf_rms_norm_quant_args;

qf_status qf_cpu_rms_norm_quant(qf_ctx *ctx, const qf_rms_norm_quant_args *a);
qf_status qf_cuda_rms_norm_quant(qf_ctx *ctx, const qf_rms_norm_quant_args *a);

/* ---- gemm ---- */
typedef struct {
  qf_mat a, b, d;          /* a [M, K], b [N, K] e4m3fn; d [M, N] bf16 / fp16 / fp32 */
  const float *a_scales;   /* element (m, kb) at a_scales[m * as_m + kb * as_k] */
  int64_t as_m, as_k;      /* column-major: as_m = 1, as_k = Mp; row-major: as_m = KB, as_k = 1 */
  const float *b_scales;   /* [ceil(N/128), KB] contiguous */
  qf_mat c;                /* c.data NULL when absent; fp32 [M, N] */
  int64_t M, N, K;
  /* The grouped forms (experts 1, expert_ids and masked_m NULL otherwise): b [experts * N, K],
   * b_scales [experts, ceil(N/128), KB]. Contiguous: row block mb's expert at
   * expert_ids[mb * ids_stride]. Masked: expert e's rows are [e * expert_rows, + expert_rows), its
   * row blocks from masked_m[e] on skipped. swiglu: d [M, N / 2] (qf_grouped_epilogue). */
  int64_t experts, ids_stride, expert_rows;
  const int32_t *expert_ids, *masked_m;
  int swiglu;
  int fine_promotion; /* 0, 32 or 64: qf_gemm_blockscale_opts.fine_promotion (dense calls, fp32 d) */
} qf_gemm_blockscale_args;

qf_status qf_cpu_gemm_fp8_blockscale(qf_ctx *ctx, const qf_gemm_blockscale_args *a);
qf_status qf_cuda_gemm_fp8_blockscale(qf_ctx *ctx, const qf_gemm_blockscale_args *a);
/* qf_gemm_fp8_blockscale on a dense call with the sm_90 engine's plan forced (cuda/gemm/
 * sm90_gemm_heuristic.h): tiles of block_m x block_n (64 x 64, 64 x 128, 128 x 64, 128 x 128,
 * 128 x 192, 192 x 128 or 256 x 128), and with splits > 1 (at most 16, at least two K-blocks a
 * range) the tiles past the last whole wave of the SMs, or all of them where they are fewer than
 * the SMs, split into that many K ranges. For qfuse-bench's plan sweep. Plans the engine cannot run (a
 * 256 x 128 split whose units do not all fit on the SMs at once, a split with no tile to split),
 * the grouped forms, opts->fine_promotion (a plan of its own) and contexts that are not CUDA's get
 * QF_ERR_UNSUPPORTED. */
qf_status qf_gemm_fp8_blockscale_with(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales, const DLTensor *b,
                                      const DLTensor *b_scales, DLTensor *d, const qf_gemm_blockscale_opts *opts,
                                      int block_m, int block_n, int splits);
qf_status qf_cuda_gemm_fp8_blockscale_with(qf_ctx *ctx, const qf_gemm_blockscale_args *a, int block_m, int block_n,
                                           int splits);
/* The plan qf_gemm_fp8_blockscale takes on this CUDA context for M x N x K (tail_kb > 0: a last
 * round of 256 x 128 owners and helpers, splits 2). */
void qf_cuda_gemm_fp8_blockscale_plan(qf_ctx *ctx, int64_t M, int64_t N, int64_t K, int *block_m, int *block_n,
                                      int *splits, int *tail_kb);

typedef struct {
  qf_mat a, b, d;            /* a [M, K], b [N, K] int8 or e4m3fn; d [M, N] */
  const float *a_scale;      /* [1] or [M] */
  int a_per_token;
  const float *b_scale;      /* [1] or [N] */
  int b_per_channel;
  const void *bias;          /* NULL or [N], d's dtype */
  const int32_t *azp_adj;    /* NULL or [N] */
  const int32_t *azp;        /* NULL or [M] (then azp_adj is set) */
  int64_t M, N, K;
} qf_gemm_scaled_args;

qf_status qf_cpu_gemm_scaled(qf_ctx *ctx, const qf_gemm_scaled_args *a);
qf_status qf_cuda_gemm_scaled(qf_ctx *ctx, const qf_gemm_scaled_args *a);
qf_status qf_cpu_gemm_azp_adj(qf_ctx *ctx, const qf_mat *b, int32_t multiplier, int32_t *adj);
qf_status qf_cuda_gemm_azp_adj(qf_ctx *ctx, const qf_mat *b, int32_t multiplier, int32_t *adj);

/* ---- attention ---- */
/* qf_attention: tensors [B, S, H, D] at element strides {batch, token, head} (the last dimension
 * contiguous); lse [B, Hq, Sq] contiguous or NULL; sinks [Hq] or NULL. qf_attention_paged:
 * k and v are caches [num_pages, page_size, Hkv, D] at strides {page, slot, head}, Skv is
 * max_pages * page_size (the longest a sequence can be) and kv_lens[b] the keys of sequence b. */
typedef struct {
  const void *q, *k, *v;
  void *o;
  float *lse;
  const float *sinks;
  qf_dtype dtype, o_dtype;   /* q (and 16-bit k, v): fp16 / bf16; o: that or fp32 */
  qf_dtype kv_dtype;         /* k and v: dtype, or e4m3fn with the scales below */
  /* e4m3fn k and v: key j of kv head g is k[j, g] * k_scale[g * k_scale_step] (step 1: a scale per
   * kv head, 0: one for the tensor), values likewise; NULL: 1. On the op's device. */
  const float *k_scale, *v_scale;
  int64_t k_scale_step, v_scale_step;
  int64_t B, Sq, Skv, Hq, Hkv, D, Dv;
  int64_t qs[3], ks[3], vs[3], os[3];
  double sm_scale;
  int causal;
  int64_t window;            /* 0: none */
  const int32_t *block_table; /* NULL: dense k and v */
  int64_t bt_stride, page_size, num_pages;
  const int32_t *kv_lens;
  /* Packed sequences (qf_attention_varlen, qf_attention_paged_varlen): q and o hold total_q
   * tokens (batch stride 0, lse [Hq, total_q]), sequence b's queries are tokens cu_seqlens_q[b] ..
   * cu_seqlens_q[b + 1] - 1 and Sq the most a sequence has; with dense keys, k and v hold total_k
   * rows, sequence b's keys rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1, and Skv the most a
   * sequence has. */
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  int64_t total_q, total_k;
} qf_attention_args;

qf_status qf_cpu_attention(qf_ctx *ctx, const qf_attention_args *a);
qf_status qf_cuda_attention(qf_ctx *ctx, const qf_attention_args *a);

/* qf_attention_cache_append: new rows [T, Hkv, D] (strides of token and head in ks / vs) into
 * caches [num_pages, page_size, Hkv, D] (strides of page, slot and head in kcs / vcs), a copy for
 * 16-bit caches, e4m3fn codes of x * (1 / scale) otherwise (scales with step 0 or 1 as in
 * qf_attention_args; NULL: 1). */
typedef struct {
  const void *k, *v;
  void *k_cache, *v_cache;
  const int32_t *slots;
  qf_dtype dtype, cache_dtype;
  int64_t T, Hkv, D, Dv, num_pages, page_size;
  int64_t ks[2], vs[2], kcs[3], vcs[3];
  const float *k_scale, *v_scale;
  int64_t k_scale_step, v_scale_step;
} qf_cache_append_args;

qf_status qf_cpu_attention_cache_append(qf_ctx *ctx, const qf_cache_append_args *a);
qf_status qf_cuda_attention_cache_append(qf_ctx *ctx, const qf_cache_append_args *a);

/* ---- fp4 ---- */
/* qf_quant_nvfp4: w [N, K]; codes e2m1x2 [N, K] (ld counts values); scales e4m3fn [N, K / 16]. */
typedef struct {
  qf_mat w, codes, scales;
  const float *tensor_scale; /* [1], on the op's device */
} qf_quant_nvfp4_args;

qf_status qf_cpu_quant_nvfp4(qf_ctx *ctx, const qf_quant_nvfp4_args *a);
qf_status qf_cuda_quant_nvfp4(qf_ctx *ctx, const qf_quant_nvfp4_args *a);
/* codes as stored into the packed layout (formats/nvfp4.h); same shape. */
qf_status qf_cpu_nvfp4_pack(qf_ctx *ctx, const qf_mat *codes, const qf_mat *packed);
qf_status qf_cuda_nvfp4_pack(qf_ctx *ctx, const qf_mat *codes, const qf_mat *packed);

typedef struct {
  qf_mat a, b, scales, d;    /* a [M, K] bf16 / fp16; b packed e2m1x2 [N, K]; scales e4m3fn [N, K / 16] */
  const float *tensor_scale; /* [1], on the op's device */
  int64_t M, N, K;
} qf_gemm_nvfp4_args;

qf_status qf_cpu_gemm_nvfp4(qf_ctx *ctx, const qf_gemm_nvfp4_args *a);
qf_status qf_cuda_gemm_nvfp4(qf_ctx *ctx, const qf_gemm_nvfp4_args *a);
/* qf_gemm_nvfp4 on CUDA's wgmma kernel with its plan forced (cuda/fp4/nvfp4_heuristic.h), any M:
 * warpgroups 2 on 128-row tiles of `tok` tokens (one of QF_FP4_WIDE2_TOKENS; split 1), or 1 on
 * 64-row tiles of `tok` tokens (one of QF_FP4_WIDE_TOKENS) with K split over a cluster of `split`
 * CTAs (1, 2, 4 or 8, at most one per step of 128 K). For the tests, which run every tile, and
 * qfuse-bench's plan rows. Other plans, and contexts that are not CUDA's, get QF_ERR_UNSUPPORTED;
 * a valid plan with M or N zero does nothing. */
qf_status qf_gemm_nvfp4_with(qf_ctx *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *b_scales,
                             const DLTensor *b_tensor_scale, DLTensor *d, int warpgroups, int tok, int split);
qf_status qf_cuda_gemm_nvfp4_with(qf_ctx *ctx, const qf_gemm_nvfp4_args *a, int warpgroups, int tok, int split);
/* The plan qf_gemm_nvfp4 takes on this CUDA context for M x N x K: the wgmma kernel's (as
 * qf_gemm_nvfp4_with names it), or warpgroups 0 for the mma.sync kernel (M <= 8). */
void qf_cuda_gemm_nvfp4_plan(qf_ctx *ctx, int64_t M, int64_t N, int64_t K, int *warpgroups, int *tok, int *split);
/* The token tile of the fewest equal tiles that hold M tokens on the wgmma kernel's tiles of
 * `warpgroups` (1: at most 128 tokens, a multiple of 16; 2: at most 256, a multiple of 32). */
int qf_cuda_gemm_nvfp4_balanced_tok(int64_t M, int warpgroups);

/* ---- vq ---- */
typedef struct {
  qf_vq_format fmt;
  qf_vq_sizes sz;
  int64_t N, K;
  uint8_t *codes;  /* [R, N, row_bytes], or the packed layout when `packed` (formats/vq.h) */
  void *books;     /* [R, n_books, entries, vector_size] of fmt.entry_dtype */
  float *scales;   /* [N], or NULL without row scales */
  int packed;      /* codes in the table GeMV's packed layout (qf_vq_pack_gemv) */
} qf_vq_tensors;

/* k-means books, or with t->fmt.lattice the E8P book scaled per book and residual, on `threads`
 * threads (the same bytes for any count). */
qf_status qf_cpu_vq_quantize(qf_ctx *ctx, const qf_mat *w, const qf_vq_tensors *t, int iterations, uint64_t seed, int threads,
                             qf_vq_stats *stats);
/* The encoders' fp32 squared distance, summed in element order (what the CPU reference rounds). */
static inline float qf_cpu_vq_dist2(const float *a, const float *b, int d) {
  float s = 0.0f;
  for (int i = 0; i < d; i++) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s;
}
/* The E8P lattice book (src/cpu/vq_e8p.c): its 256 patterns of absolute values (value j of
 * pattern p at a[j][p]) and whether each one's sum is odd. */
#define QF_E8P_PATTERNS 256
typedef struct {
  float a[8][QF_E8P_PATTERNS];
  uint8_t odd[QF_E8P_PATTERNS];
} qf_e8p_table;
void qf_cpu_e8p_table(qf_e8p_table *tb);
void qf_cpu_e8p_point(const qf_e8p_table *tb, uint32_t idx, float beta, float *out);
uint32_t qf_cpu_e8p_nearest(const qf_e8p_table *tb, const float *v, float beta);
float qf_cpu_e8p_scale(const qf_e8p_table *tb, float *const *vec, int64_t nv, int residual, int residuals);
qf_status qf_cpu_vq_dequantize(qf_ctx *ctx, const qf_vq_tensors *t, const qf_mat *w);
qf_status qf_cuda_vq_dequantize(qf_ctx *ctx, const qf_vq_tensors *t, const qf_mat *w);
/* t's codes (standard layout) into the packed layout at `packed`. */
qf_status qf_cpu_vq_pack_gemv(qf_ctx *ctx, const qf_vq_tensors *t, uint8_t *packed);
qf_status qf_cuda_vq_pack_gemv(qf_ctx *ctx, const qf_vq_tensors *t, uint8_t *packed);
/* x's rows encoded as rows row0 + i of t's matrix (slots NULL: t->N = x->rows, every code row
 * written), or as rows slots[i] of t's N rows (negative: skipped; the rows not named left as
 * they are). */
qf_status qf_cpu_vq_encode(qf_ctx *ctx, const qf_mat *x, int64_t row0, const int32_t *slots, const qf_vq_tensors *t);
/* CUDA: n (1 or 2) such encodes in one launch, x[i] into t[i] (a pair: qf_vq_encode_kv_slots, the
 * same shapes, dtypes and format). */
qf_status qf_cuda_vq_encode(qf_ctx *ctx, int n, const qf_mat *x, int64_t row0, const int32_t *slots, const qf_vq_tensors *t);
qf_status qf_cpu_vq_gemm(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y);
/* VQ-GeMV for M of 1 to 16, the tensor-core VQ-GeMM above. */
qf_status qf_cuda_vq_gemm(qf_ctx *ctx, const qf_mat *x, const qf_vq_tensors *w, const qf_mat *y);
typedef struct {
  qf_mat q, o;          /* [B, Hq * D] */
  float *lse;           /* [B, Hq] */
  qf_vq_tensors k, v;   /* [B * seq_len, Hkv * D] each */
  int64_t B, Hq, Hkv, D, seq_len;
  const int32_t *kv_lens;  /* [B] or NULL (every entry seq_len tokens); CUDA: device memory */
  const int32_t *block_table;  /* [B, max_pages] with row pitch bt_ld, or NULL (not paged) */
  int64_t bt_ld, page_size, num_pages;
  double sm_scale;
  int v_books_packed;  /* v.books in the banked kernel's layout (qf_vq_pack_attention_books): CUDA runs that kernel only */
  /* qf_vq_attention_decode_append: the step's new K and V rows [B, Hkv * D], encoded into token
   * L_b - 1 of each entry's cache before the attention reads it; k_new.data NULL without. */
  qf_mat k_new, v_new;
} qf_vq_attention_args;
/* t's V codebooks (standard layout, kv_heads heads of head_dim) into the banked attention's packed
 * layout at `packed` (formats/vq.h). */
qf_status qf_cuda_vq_pack_attention_books(qf_ctx *ctx, const qf_vq_tensors *t, int64_t head_dim, int64_t kv_heads, void *packed);
qf_status qf_cpu_vq_attention_decode(qf_ctx *ctx, const qf_vq_attention_args *a);
qf_status qf_cuda_vq_attention_decode(qf_ctx *ctx, const qf_vq_attention_args *a);

#ifdef __cplusplus
}
#endif

#endif
