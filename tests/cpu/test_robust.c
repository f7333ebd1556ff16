/* Malformed DLTensors never crash an op: for every tensor argument of every op, replace it with
 * each malformed form (NULL tensor, NULL shape, ndim -1, 0 or 9, a NULL data pointer, an
 * unknown dtype, lanes 4, negative extents, a first or last dim of INT64_MAX or 2^62, row strides
 * of INT64_MAX) and check that the call fails with a message naming the op and leaves every
 * output untouched. (The huge forms have no undefined behaviour to reach in the sanitizer build
 * of scripts/test; test_huge_shapes.c draws such tensors at random.) */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qfuse.h"
#include "tensors.h"

static qf_ctx *ctx;

enum { M = 4, K = 128, N = 16, ARGS = 9, POOL = 16384 + 64 };
static _Alignas(16) uint8_t pool[ARGS][POOL];

typedef struct {
  DLTensor t[ARGS];
  int64_t shape[ARGS][4], strides[ARGS][4];
  int n;
} args;

static void arg(args *a, qf_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int i = a->n++;
  int64_t dims[4] = {d0, d1, d2, d3};
  memcpy(a->shape[i], dims, sizeof dims);
  DLTensor t = {.data = pool[i], .device = {kDLCPU, 0}, .ndim = ndim, .dtype = qf_dtype_to_dl(dt), .shape = a->shape[i]};
  a->t[i] = t;
}

typedef enum {
  OP_GROUP, OP_TOKEN, OP_RMS, OP_GEMM_BS, OP_GEMM_SCALED, OP_VQ_DEQ, OP_QUANT_FP4, OP_GEMM_FP4, OP_PER_TENSOR, OP_SILU,
  OP_TENSOR, OP_AZP_ADJ, OP_PACK_FP4, OP_ATTN, OP_ATTN_PAGED, OP_GROUPED, OP_MASKED, OP_VQ_GEMM, OP_VQ_ENCODE, OP_VQ_ATTN,
  OP_VQ_ENCODE_SLOTS, OP_VQ_ATTN_LENS, OP_VQ_PACK, OP_VQ_ENCODE_KV, OP_VQ_ATTN_APPEND, OP_ATTN_VARLEN, OP_ATTN_PAGED_VARLEN,
  OP_ATTN_CACHE_APPEND, OP_COUNT
} op_id;
static const char *names[] = {"qf_quant_group", "qf_quant_token", "qf_rms_norm_quant", "qf_gemm_fp8_blockscale",
                              "qf_gemm_scaled", "qf_vq_dequantize", "qf_quant_nvfp4", "qf_gemm_nvfp4",
                              "qf_quant_per_tensor", "qf_silu_mul_quant_group", "qf_quant_tensor", "qf_gemm_azp_adj",
                              "qf_nvfp4_pack", "qf_attention", "qf_attention_paged", "qf_gemm_fp8_blockscale_grouped",
                              "qf_gemm_fp8_blockscale_masked", "qf_vq_gemm", "qf_vq_encode", "qf_vq_attention_decode",
                              "qf_vq_encode_slots", "qf_vq_attention_decode", "qf_vq_pack_gemv",
                              "qf_vq_encode_kv_slots", "qf_vq_attention_decode_append", "qf_attention_varlen",
                              "qf_attention_paged_varlen", "qf_attention_cache_append"};

static const qf_vq_format vq_fmt = {4, 8, 1, 0, 0, QF_F16, 0, 0};

/* Valid arguments of each op; the outputs are the args listed in outs. */
static void valid(op_id op, args *a, int *outs, int *n_outs) {
  memset(a, 0, sizeof *a);
  *n_outs = 0;
  switch (op) {
    case OP_GROUP:
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 2, M, 1, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 2;
      break;
    case OP_TOKEN:
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_I8, 2, M, K, 0, 0), arg(a, QF_F32, 1, M, 0, 0, 0), arg(a, QF_I32, 1, M, 0, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 2, outs[(*n_outs)++] = 3;
      break;
    case OP_RMS:
      arg(a, QF_BF16, 2, M, K, 0, 0), arg(a, QF_BF16, 2, M, K, 0, 0), arg(a, QF_BF16, 1, K, 0, 0, 0);
      arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 1, M, 0, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 3, outs[(*n_outs)++] = 4;
      break;
    case OP_GEMM_BS:
      arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 2, 1, M, 0, 0), arg(a, QF_E4M3FN, 2, N, K, 0, 0);
      arg(a, QF_F32, 2, 1, 1, 0, 0), arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 4;
      break;
    case OP_GEMM_SCALED:
      arg(a, QF_I8, 2, M, K, 0, 0), arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_I8, 2, N, K, 0, 0), arg(a, QF_F32, 1, N, 0, 0, 0);
      arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 4;
      break;
    case OP_QUANT_FP4: /* w [M, K], tensor scale [1], codes [M, K] e2m1x2, scales [M, K / 16] */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_E2M1X2, 2, M, K, 0, 0);
      arg(a, QF_E4M3FN, 2, M, K / 16, 0, 0);
      outs[(*n_outs)++] = 2, outs[(*n_outs)++] = 3;
      break;
    case OP_GEMM_FP4: /* a [M, K] bf16, b [N, K] packed, b_scales [N, K / 16], tensor scale [1], d [M, N] */
      arg(a, QF_BF16, 2, M, K, 0, 0), arg(a, QF_E2M1X2, 2, N, K, 0, 0), arg(a, QF_E4M3FN, 2, N, K / 16, 0, 0);
      arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 4;
      break;
    case OP_VQ_DEQ: /* codes [1, M, 48], codebooks [1, 1, 256, 4], w [M, K] */
      arg(a, QF_U8, 3, 1, M, 48, 0), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_F32, 2, M, K, 0, 0);
      outs[(*n_outs)++] = 2;
      break;
    case OP_PER_TENSOR: /* x [M, K], scale [1], q [M, K] */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_F32, 1, 1, 0, 0, 0), arg(a, QF_E4M3FN, 2, M, K, 0, 0);
      outs[(*n_outs)++] = 2;
      break;
    case OP_SILU: /* x [M, 2K] = [gate | up], q [M, K], scales [M, K / 128] */
      arg(a, QF_BF16, 2, M, 2 * K, 0, 0), arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 2, M, 1, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 2;
      break;
    case OP_TENSOR: /* x [M, K], q [M, K], scale [1] (dynamic: an output) */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_E4M3FN, 2, M, K, 0, 0), arg(a, QF_F32, 1, 1, 0, 0, 0);
      outs[(*n_outs)++] = 1, outs[(*n_outs)++] = 2;
      break;
    case OP_AZP_ADJ: /* b [N, K] int8, adj [N] */
      arg(a, QF_I8, 2, N, K, 0, 0), arg(a, QF_I32, 1, N, 0, 0, 0);
      outs[(*n_outs)++] = 1;
      break;
    case OP_PACK_FP4: /* codes and packed [N, K] e2m1x2 */
      arg(a, QF_E2M1X2, 2, N, K, 0, 0), arg(a, QF_E2M1X2, 2, N, K, 0, 0);
      outs[(*n_outs)++] = 1;
      break;
    case OP_ATTN: /* q [1, 2, 2, 64], k and v [1, 4, 2, 64], sinks [2], o [1, 2, 2, 64], lse [1, 2, 2] */
      arg(a, QF_BF16, 4, 1, 2, 2, 64), arg(a, QF_BF16, 4, 1, 4, 2, 64), arg(a, QF_BF16, 4, 1, 4, 2, 64);
      arg(a, QF_F32, 1, 2, 0, 0, 0), arg(a, QF_BF16, 4, 1, 2, 2, 64), arg(a, QF_F32, 3, 1, 2, 2, 0);
      outs[(*n_outs)++] = 4, outs[(*n_outs)++] = 5;
      break;
    case OP_ATTN_PAGED: /* q [1, 2, 2, 64], two pages of 4 keys [2, 4, 2, 64], block table [1, 2], lengths [1] */
      arg(a, QF_BF16, 4, 1, 2, 2, 64), arg(a, QF_BF16, 4, 2, 4, 2, 64), arg(a, QF_BF16, 4, 2, 4, 2, 64);
      arg(a, QF_I32, 2, 1, 2, 0, 0), arg(a, QF_I32, 1, 1, 0, 0, 0), arg(a, QF_F32, 1, 2, 0, 0, 0);
      arg(a, QF_BF16, 4, 1, 2, 2, 64), arg(a, QF_F32, 3, 1, 2, 2, 0);
      outs[(*n_outs)++] = 6, outs[(*n_outs)++] = 7;
      break;
    case OP_ATTN_VARLEN: /* q [2, 2, 64], k and v [4, 2, 64], offsets [2] and [2], sinks [2], o [2, 2, 64], lse [2, 2] */
      arg(a, QF_BF16, 3, 2, 2, 64, 0), arg(a, QF_BF16, 3, 4, 2, 64, 0), arg(a, QF_BF16, 3, 4, 2, 64, 0);
      arg(a, QF_I32, 1, 2, 0, 0, 0), arg(a, QF_I32, 1, 2, 0, 0, 0), arg(a, QF_F32, 1, 2, 0, 0, 0);
      arg(a, QF_BF16, 3, 2, 2, 64, 0), arg(a, QF_F32, 2, 2, 2, 0, 0);
      outs[(*n_outs)++] = 6, outs[(*n_outs)++] = 7;
      break;
    case OP_ATTN_PAGED_VARLEN: /* OP_ATTN_PAGED's cache and table with packed q [2, 2, 64] and offsets [2] */
      arg(a, QF_BF16, 3, 2, 2, 64, 0), arg(a, QF_BF16, 4, 2, 4, 2, 64), arg(a, QF_BF16, 4, 2, 4, 2, 64);
      arg(a, QF_I32, 2, 1, 2, 0, 0), arg(a, QF_I32, 1, 1, 0, 0, 0), arg(a, QF_I32, 1, 2, 0, 0, 0);
      arg(a, QF_F32, 1, 2, 0, 0, 0), arg(a, QF_BF16, 3, 2, 2, 64, 0), arg(a, QF_F32, 2, 2, 2, 0, 0);
      outs[(*n_outs)++] = 7, outs[(*n_outs)++] = 8;
      break;
    case OP_ATTN_CACHE_APPEND: /* k_new, v_new [4, 2, 64], slots [4], scales [2] and [2], e4m3fn caches [2, 4, 2, 64] */
      arg(a, QF_BF16, 3, 4, 2, 64, 0), arg(a, QF_BF16, 3, 4, 2, 64, 0), arg(a, QF_I32, 1, 4, 0, 0, 0);
      arg(a, QF_F32, 1, 2, 0, 0, 0), arg(a, QF_F32, 1, 2, 0, 0, 0);
      arg(a, QF_E4M3FN, 4, 2, 4, 2, 64), arg(a, QF_E4M3FN, 4, 2, 4, 2, 64);
      outs[(*n_outs)++] = 5, outs[(*n_outs)++] = 6;
      break;
    case OP_GROUPED: /* a [128, K], a_scales [1, 128], b [1, N, K], b_scales [1, 1, 1], expert ids [1], d [128, N] */
      arg(a, QF_E4M3FN, 2, 128, K, 0, 0), arg(a, QF_F32, 2, 1, 128, 0, 0), arg(a, QF_E4M3FN, 3, 1, N, K, 0);
      arg(a, QF_F32, 3, 1, 1, 1, 0), arg(a, QF_I32, 1, 1, 0, 0, 0), arg(a, QF_F32, 2, 128, N, 0, 0);
      outs[(*n_outs)++] = 5;
      break;
    case OP_MASKED: /* a [1, 128, K], a_scales [1, 128], b [1, N, K], b_scales [1, 1, 1], counts [1], d [1, 128, N] */
      arg(a, QF_E4M3FN, 3, 1, 128, K, 0), arg(a, QF_F32, 2, 1, 128, 0, 0), arg(a, QF_E4M3FN, 3, 1, N, K, 0);
      arg(a, QF_F32, 3, 1, 1, 1, 0), arg(a, QF_I32, 1, 1, 0, 0, 0), arg(a, QF_F32, 3, 1, 128, N, 0);
      outs[(*n_outs)++] = 5;
      break;
    case OP_VQ_GEMM: /* x [M, K], codes [1, N, 48], codebooks [1, 1, 256, 4], y [M, N] */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_U8, 3, 1, N, 48, 0), arg(a, QF_F16, 4, 1, 1, 256, 4);
      arg(a, QF_F32, 2, M, N, 0, 0);
      outs[(*n_outs)++] = 3;
      break;
    case OP_VQ_ENCODE: /* x [M, K], codebooks [1, 1, 256, 4], codes [1, M, 48] */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_U8, 3, 1, M, 48, 0);
      outs[(*n_outs)++] = 2;
      break;
    case OP_VQ_ATTN: /* q [1, 64], K and V [4 tokens, 64] as codes [1, 4, 32] and books [1, 1, 256, 4], o [1, 64], lse [1, 1] */
      arg(a, QF_F32, 2, 1, 64, 0, 0), arg(a, QF_U8, 3, 1, 4, 32, 0), arg(a, QF_F16, 4, 1, 1, 256, 4);
      arg(a, QF_U8, 3, 1, 4, 32, 0), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_F32, 2, 1, 64, 0, 0);
      arg(a, QF_F32, 2, 1, 1, 0, 0);
      outs[(*n_outs)++] = 5, outs[(*n_outs)++] = 6;
      break;
    case OP_VQ_ENCODE_SLOTS: /* x [M, K], slots [M], codebooks [1, 1, 256, 4], codes [1, N, 48] (the cache) */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_I32, 1, M, 0, 0, 0), arg(a, QF_F16, 4, 1, 1, 256, 4);
      arg(a, QF_U8, 3, 1, N, 48, 0);
      outs[(*n_outs)++] = 3;
      break;
    case OP_VQ_ENCODE_KV: /* k_new, v_new [M, K], slots [M], K and V codebooks, K and V caches [1, N, 48] */
      arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_F32, 2, M, K, 0, 0), arg(a, QF_I32, 1, M, 0, 0, 0);
      arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_U8, 3, 1, N, 48, 0);
      arg(a, QF_U8, 3, 1, N, 48, 0);
      outs[(*n_outs)++] = 5, outs[(*n_outs)++] = 6;
      break;
    case OP_VQ_ATTN_LENS: /* OP_VQ_ATTN's tensors, then kv_lens [1] */
      arg(a, QF_F32, 2, 1, 64, 0, 0), arg(a, QF_U8, 3, 1, 4, 32, 0), arg(a, QF_F16, 4, 1, 1, 256, 4);
      arg(a, QF_U8, 3, 1, 4, 32, 0), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_F32, 2, 1, 64, 0, 0);
      arg(a, QF_F32, 2, 1, 1, 0, 0), arg(a, QF_I32, 1, 1, 0, 0, 0);
      outs[(*n_outs)++] = 5, outs[(*n_outs)++] = 6;
      break;
    case OP_VQ_ATTN_APPEND: /* q, k_new, v_new [1, 64], then OP_VQ_ATTN's caches, o and lse */
      arg(a, QF_F32, 2, 1, 64, 0, 0), arg(a, QF_F32, 2, 1, 64, 0, 0), arg(a, QF_F32, 2, 1, 64, 0, 0);
      arg(a, QF_U8, 3, 1, 4, 32, 0), arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_U8, 3, 1, 4, 32, 0);
      arg(a, QF_F16, 4, 1, 1, 256, 4), arg(a, QF_F32, 2, 1, 64, 0, 0), arg(a, QF_F32, 2, 1, 1, 0, 0);
      outs[(*n_outs)++] = 3, outs[(*n_outs)++] = 5, outs[(*n_outs)++] = 7, outs[(*n_outs)++] = 8;
      break;
    default: { /* OP_VQ_PACK: codes [1, N, 48], packed as qf_vq_pack_gemv_shape says for [N, K] */
      int64_t sh[4] = {0, 0, 0, 0};
      qf_vq_pack_gemv_shape(ctx, &vq_fmt, N, K, sh);
      arg(a, QF_U8, 3, 1, N, 48, 0), arg(a, QF_U8, 4, sh[0], sh[1], sh[2], sh[3]);
      outs[(*n_outs)++] = 1;
      break;
    }
  }
}

static qf_status call(op_id op, args *a, DLTensor **p) {
  switch (op) {
    case OP_GROUP: {
      qf_group_quant_opts o = {.group_size = 128};
      return qf_quant_group(ctx, p[0], p[1], p[2], &o);
    }
    case OP_TOKEN: return qf_quant_token(ctx, p[0], p[1], p[2], p[3], NULL);
    case OP_RMS: {
      qf_rms_norm_quant_opts o = {.group_size = -1};
      return qf_rms_norm_quant(ctx, p[0], p[1], p[2], p[3], p[4], &o);
    }
    case OP_GEMM_BS: return qf_gemm_fp8_blockscale(ctx, p[0], p[1], p[2], p[3], p[4], NULL);
    case OP_GEMM_SCALED: return qf_gemm_scaled(ctx, p[0], p[1], p[2], p[3], p[4], NULL);
    case OP_QUANT_FP4: return qf_quant_nvfp4(ctx, p[0], p[1], p[2], p[3]);
    case OP_GEMM_FP4: return qf_gemm_nvfp4(ctx, p[0], p[1], p[2], p[3], p[4]);
    case OP_VQ_DEQ: return qf_vq_dequantize(ctx, p[0], p[1], NULL, &vq_fmt, p[2]);
    case OP_PER_TENSOR: return qf_quant_per_tensor(ctx, p[0], p[1], p[2]);
    case OP_SILU: {
      qf_group_quant_opts o = {.group_size = 128};
      return qf_silu_mul_quant_group(ctx, p[0], p[1], p[2], NULL, &o);
    }
    case OP_TENSOR: {
      qf_tensor_quant_opts o = {.dynamic = 1};
      return qf_quant_tensor(ctx, p[0], p[1], p[2], &o);
    }
    case OP_AZP_ADJ: return qf_gemm_azp_adj(ctx, p[0], 1, p[1]);
    case OP_PACK_FP4: return qf_nvfp4_pack(ctx, p[0], p[1]);
    case OP_ATTN: {
      qf_attention_opts o = {.causal = 1};
      return qf_attention(ctx, p[0], p[1], p[2], p[3], &o, p[4], p[5]);
    }
    case OP_ATTN_PAGED: {
      qf_attention_opts o = {.causal = 1};
      return qf_attention_paged(ctx, p[0], p[1], p[2], p[3], p[4], p[5], &o, p[6], p[7]);
    }
    case OP_GROUPED: return qf_gemm_fp8_blockscale_grouped(ctx, p[0], p[1], p[2], p[3], p[4], p[5], NULL);
    case OP_MASKED: return qf_gemm_fp8_blockscale_masked(ctx, p[0], p[1], p[2], p[3], p[4], p[5], NULL);
    case OP_VQ_GEMM: return qf_vq_gemm(ctx, p[0], p[1], p[2], NULL, &vq_fmt, p[3]);
    case OP_VQ_ENCODE: return qf_vq_encode(ctx, p[0], 0, p[1], &vq_fmt, p[2], NULL);
    case OP_VQ_ATTN: {
      qf_vq_attention_opts o = {.head_dim = 64, .kv_heads = 1, .seq_len = 4};
      return qf_vq_attention_decode(ctx, p[0], p[1], p[2], p[3], p[4], &vq_fmt, &o, p[5], p[6]);
    }
    case OP_VQ_ENCODE_SLOTS: return qf_vq_encode_slots(ctx, p[0], p[1], p[2], &vq_fmt, p[3], NULL);
    case OP_VQ_ATTN_LENS: {
      qf_vq_attention_opts o = {.head_dim = 64, .kv_heads = 1, .seq_len = 4, .kv_lens = p[7]};
      return qf_vq_attention_decode(ctx, p[0], p[1], p[2], p[3], p[4], &vq_fmt, &o, p[5], p[6]);
    }
    case OP_VQ_ENCODE_KV: return qf_vq_encode_kv_slots(ctx, p[0], p[1], p[2], p[3], p[4], &vq_fmt, p[5], p[6], NULL, NULL);
    case OP_VQ_ATTN_APPEND: {
      qf_vq_attention_opts o = {.head_dim = 64, .kv_heads = 1, .seq_len = 4};
      return qf_vq_attention_decode_append(ctx, p[0], p[1], p[2], p[3], p[4], p[5], p[6], &vq_fmt, &o, p[7], p[8]);
    }
    case OP_ATTN_VARLEN: {
      qf_attention_opts o = {.causal = 1};
      return qf_attention_varlen(ctx, p[0], p[1], p[2], p[3], p[4], 2, 4, p[5], &o, p[6], p[7]);
    }
    case OP_ATTN_PAGED_VARLEN: {
      qf_attention_opts o = {.causal = 1};
      return qf_attention_paged_varlen(ctx, p[0], p[1], p[2], p[3], p[4], p[5], 2, p[6], &o, p[7], p[8]);
    }
    case OP_ATTN_CACHE_APPEND: return qf_attention_cache_append(ctx, p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
    default: (void)a; return qf_vq_pack_gemv(ctx, p[0], &vq_fmt, K, p[1]);
  }
}

/* Inputs whose values the CPU backend checks get valid ones (after the pool's poisoning): the
 * paged cache's block table {0, 1} and length 8, packed sequences' offsets {0, 2} (queries) and
 * {0, 4} (keys), the grouped GEMM's expert id 0, the masked one's
 * token count 4, the VQ and cache appends' slots {0, 1, 2, 3}, the VQ attention's length 3. */
static void fill_inputs(op_id op) {
  const int32_t table[2] = {0, 1}, len = 8, zero = 0, count = 4, slots[M] = {0, 1, 2, 3}, three = 3;
  const int32_t cu_q[2] = {0, 2}, cu_k[2] = {0, 4};
  if (op == OP_VQ_ENCODE_SLOTS) memcpy(pool[1], slots, sizeof slots);
  if (op == OP_VQ_ENCODE_KV || op == OP_ATTN_CACHE_APPEND) memcpy(pool[2], slots, sizeof slots);
  if (op == OP_VQ_ATTN_LENS) memcpy(pool[7], &three, sizeof three);
  if (op == OP_ATTN_PAGED || op == OP_ATTN_PAGED_VARLEN) memcpy(pool[3], table, sizeof table), memcpy(pool[4], &len, sizeof len);
  if (op == OP_ATTN_PAGED_VARLEN) memcpy(pool[5], cu_q, sizeof cu_q);
  if (op == OP_ATTN_VARLEN) memcpy(pool[3], cu_q, sizeof cu_q), memcpy(pool[4], cu_k, sizeof cu_k);
  if (op == OP_GROUPED) memcpy(pool[4], &zero, sizeof zero);
  if (op == OP_MASKED) memcpy(pool[4], &count, sizeof count);
}

/* Arguments that may be absent (NULL is a valid value): the residual of qf_rms_norm_quant, the
 * zero points of qf_quant_token, sinks and lse of the attention ops, the VQ attention's kv_lens, the
 * cache append's scales. */
static int optional_arg(op_id op, int i) {
  return (op == OP_RMS && i == 1) || (op == OP_TOKEN && i == 3) || (op == OP_ATTN && (i == 3 || i == 5)) ||
         (op == OP_ATTN_PAGED && (i == 5 || i == 7)) || (op == OP_VQ_ATTN_LENS && i == 7) ||
         (op == OP_ATTN_VARLEN && (i == 5 || i == 7)) || (op == OP_ATTN_PAGED_VARLEN && (i == 6 || i == 8)) ||
         (op == OP_ATTN_CACHE_APPEND && (i == 3 || i == 4));
}

enum {
  BAD_NULL, BAD_SHAPE_NULL, BAD_NDIM_NEG, BAD_NDIM_0, BAD_NDIM_9, BAD_DATA_NULL, BAD_DTYPE, BAD_LANES, BAD_NEG,
  BAD_HUGE_FIRST, BAD_HUGE_LAST, BAD_HUGE_STRIDES, BAD_COUNT
};

static void poison(void) { memset(pool, 0xA5, sizeof pool); }
static int clean(int i) {
  for (size_t j = 0; j < sizeof pool[i]; j++)
    if (pool[i][j] != 0xA5) return 0;
  return 1;
}

int main(void) {
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  for (op_id op = 0; op < OP_COUNT; op++) {
    args a;
    int outs[ARGS], n_outs;
    valid(op, &a, outs, &n_outs);
    DLTensor *p[ARGS];
    for (int i = 0; i < a.n; i++) p[i] = &a.t[i];
    poison();
    fill_inputs(op);
    CHECK(call(op, &a, p) == QF_OK, "%s: the valid call fails: %s", names[op], qf_ctx_last_error(ctx));
    for (int i = 0; i < a.n; i++)
      for (int bad = 0; bad < BAD_COUNT; bad++) {
        valid(op, &a, outs, &n_outs);
        for (int j = 0; j < a.n; j++) p[j] = &a.t[j];
        DLTensor *t = &a.t[i];
        switch (bad) {
          case BAD_NULL: p[i] = NULL; break;
          case BAD_SHAPE_NULL: t->shape = NULL; break;
          case BAD_NDIM_NEG: t->ndim = -1; break;
          case BAD_NDIM_0: t->ndim = 0; break;
          case BAD_NDIM_9: t->ndim = 9; break;
          case BAD_DATA_NULL: t->data = NULL; break;
          case BAD_DTYPE: t->dtype.code = 99; break;
          case BAD_LANES: t->dtype.lanes = 4; break;
          case BAD_NEG: a.shape[i][0] = -3; break;
          case BAD_HUGE_FIRST: a.shape[i][0] = INT64_MAX; break;
          case BAD_HUGE_LAST: a.shape[i][t->ndim - 1] = INT64_C(1) << 62; break;
          default: { /* the stride of every dim of more than one element INT64_MAX (the last one's of a 2-D or
                      * larger tensor 1; of a 1-D one not contiguous); skipped where no dim has two */
            int huge = 0;
            for (int d = 0; d < t->ndim; d++) {
              const int last = d == t->ndim - 1 && t->ndim > 1;
              a.strides[i][d] = a.shape[i][d] > 1 && !last ? INT64_MAX : 1;
              huge |= a.shape[i][d] > 1 && !last;
            }
            t->strides = a.strides[i];
            if (!huge) continue;
            break;
          }
        }
        const int optional = optional_arg(op, i);
        poison();
        fill_inputs(op);
        qf_status st = call(op, &a, p);
        if (optional && bad == BAD_NULL) {
          CHECK(st == QF_OK, "%s: absent optional argument %d refused: %s", names[op], i, qf_ctx_last_error(ctx));
          continue;
        }
        /* a per-tensor scale may come as a 0-d scalar (qf_gemm_scaled's a_scale also shapeless) */
        const int scalar = (op == OP_GEMM_SCALED && i == 1) || (op == OP_PER_TENSOR && i == 1) || (op == OP_TENSOR && i == 2);
        if (st == QF_OK && scalar && (bad == BAD_NDIM_0 || (bad == BAD_SHAPE_NULL && op == OP_GEMM_SCALED))) continue;
        CHECK(st != QF_OK, "%s: argument %d, malformed form %d accepted", names[op], i, bad);
        CHECK(strstr(qf_ctx_last_error(ctx), names[op]) != NULL, "%s: argument %d, form %d: message '%s'", names[op], i, bad,
              qf_ctx_last_error(ctx));
        int untouched = 1;
        for (int o = 0; o < n_outs; o++) untouched &= clean(outs[o]);
        CHECK(untouched, "%s: argument %d, form %d: an output was written", names[op], i, bad);
      }
  }
  qf_ctx_destroy(ctx);
  return check_finish("test_robust");
}
