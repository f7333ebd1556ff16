// Entry points of VQ attention decode on CUDA: the limits of the kernels, the launch plan
// (vq_attention_heuristic.h: score technique, codebook placement, split), the workspace for the
// chunks' partials, the two launches (chunk kernel, then merge kernel) on the context's stream, and
// the QF_VQ_BOOKS switch of the public call (the score technique is the heuristic's there).
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "cuda/common.cuh"
#include "cuda/tma_map.h"
#include "cuda/vq/vq_books_env.h"
#include "cuda/vq/vq_encode.h"
#include "cuda/vq/vq_attention_banked.cuh"

namespace {

const char kOp[] = "qf_vq_attention_decode";

using chunk_kernel_t = void (*)(vq_attention_params);

// The instantiations, from one list each: vector sizes, head buckets, entry dtypes, placements,
// score techniques.
#define QF_VQ_ATTN_VECTOR_SIZES(X) X(2) X(4) X(8)
#define QF_VQ_ATTN_HEAD_BUCKETS(X) X(1) X(4) X(8)
#define QF_VQ_ATTN_COUNT(x) +1
constexpr int kVectorSizes = 0 QF_VQ_ATTN_VECTOR_SIZES(QF_VQ_ATTN_COUNT);
constexpr int kHeadBuckets = 0 QF_VQ_ATTN_HEAD_BUCKETS(QF_VQ_ATTN_COUNT);
constexpr int kKernels = kVectorSizes * kHeadBuckets * 2 * 2 * 2;
#undef QF_VQ_ATTN_COUNT

// Each level picks its template argument and adds its index to `slot` (the kernel's place among
// kKernels, for the per-kernel shared-memory opt-in); nullptr for a size without a kernel.
template <class Scores, class Placement, typename E, int kHeads>
chunk_kernel_t pick_vs(int vs, int &slot) {
  slot *= kVectorSizes;
#define QF_VQ_ATTN_VS_CASE(VS)                                                          \
  if (vs == VS) return vq_attention_chunk_kernel<VS, E, kHeads, Placement, Scores>; \
  slot++;
  QF_VQ_ATTN_VECTOR_SIZES(QF_VQ_ATTN_VS_CASE)
#undef QF_VQ_ATTN_VS_CASE
  return nullptr;
}

template <class Scores, class Placement, typename E>
chunk_kernel_t pick_heads(int heads, int vs, int &slot) {
  slot *= kHeadBuckets;
#define QF_VQ_ATTN_HEADS_CASE(H)                                      \
  if (heads == H) return pick_vs<Scores, Placement, E, H>(vs, slot); \
  slot++;
  QF_VQ_ATTN_HEAD_BUCKETS(QF_VQ_ATTN_HEADS_CASE)
#undef QF_VQ_ATTN_HEADS_CASE
  return nullptr;
}

template <class Scores>
chunk_kernel_t pick_books(bool shared, bool bf16, int heads, int vs, int &slot) {
  if (shared)
    return bf16 ? pick_heads<Scores, VqAttnBooksInShared, vq_bf16>(heads, vs, slot)
                : pick_heads<Scores, VqAttnBooksInShared, vq_f16>(heads, vs, slot);
  return bf16 ? pick_heads<Scores, VqAttnBooksInGlobal, vq_bf16>(heads, vs, slot)
              : pick_heads<Scores, VqAttnBooksInGlobal, vq_f16>(heads, vs, slot);
}

chunk_kernel_t pick(bool lut, bool shared, bool bf16, int heads, int vs, int &slot) {
  slot = (lut ? 4 : 0) + (shared ? 2 : 0) + (bf16 ? 1 : 0);
  return lut ? pick_books<VqAttnScoresByLut>(shared, bf16, heads, vs, slot)
             : pick_books<VqAttnScoresByDecode>(shared, bf16, heads, vs, slot);
}

// The banked kernels, after the others in the opt-in slots: (S, vs, query heads per block) in
// {(32, 4, 1), (32, 2, 1), (64, 2, 1), (32, 4, 2), (32, 4, 4), (64, 2, 2)} x entry dtype x paged x packed V books.
constexpr int kBankedShapes = 6;
// Then the shapes that set up by bulk copies (all but (32, 4, 2)) with the fused append
// (qf_vq_attention_decode_append).
constexpr int kBankedAppendShapes = 5;
constexpr int kBankedKernels = (kBankedShapes + kBankedAppendShapes) * 2 * 2 * 2;  // x entry dtype x paged x packed V books

template <bool kPaged, bool kPackedV>
chunk_kernel_t pick_banked_shape(bool bf16, int shape) {
#define QF_BANKED(S, VS, G) \
  (bf16 ? vq_attention_banked_kernel<S, VS, vq_bf16, G, kPaged, kPackedV> : vq_attention_banked_kernel<S, VS, vq_f16, G, kPaged, kPackedV>)
  switch (shape) {
    case 0: return QF_BANKED(32, 4, 1);
    case 1: return QF_BANKED(32, 2, 1);
    case 2: return QF_BANKED(64, 2, 1);
    case 3: return QF_BANKED(32, 4, 2);
    case 4: return QF_BANKED(32, 4, 4);
    default: return QF_BANKED(64, 2, 2);
  }
#undef QF_BANKED
}

// The shapes with the fused append (of pick_banked_shape's, 0-2 and 4-5 as 0-4): instantiations of
// their own, as the paged and packed ones (with a run-time flag the calls without the append ran
// CQ-2 1-2% slower on an H200).
template <bool kPaged, bool kPackedV>
chunk_kernel_t pick_banked_append_shape(bool bf16, int shape) {
#define QF_BANKED(S, VS, G) \
  (bf16 ? vq_attention_banked_kernel<S, VS, vq_bf16, G, kPaged, kPackedV, true> : vq_attention_banked_kernel<S, VS, vq_f16, G, kPaged, kPackedV, true>)
  switch (shape) {
    case 0: return QF_BANKED(32, 4, 1);
    case 1: return QF_BANKED(32, 2, 1);
    case 2: return QF_BANKED(64, 2, 1);
    case 3: return QF_BANKED(32, 4, 4);
    default: return QF_BANKED(64, 2, 2);
  }
#undef QF_BANKED
}

// The banked kernel of a shape (and of a paged cache or not, of packed V books or not: each its
// own instantiation, since a run-time flag made the tile loop of the others 2-4% slower).
chunk_kernel_t pick_banked(bool bf16, int vectors, int vs, int heads, bool paged, bool packed, bool append, int &slot) {
  int shape = -1;
  if (heads == 1) shape = vectors == 32 ? (vs == 4 ? 0 : vs == 2 ? 1 : -1) : vectors == 64 && vs == 2 ? 2 : -1;
  else if (vectors == 32 && vs == 4) shape = heads == 2 ? 3 : heads == 4 ? 4 : -1;
  else if (vectors == 64 && vs == 2 && heads == 2) shape = 5;
  if (shape < 0 || (append && shape == 3)) return nullptr;
  if (append) {
    const int as = shape < 3 ? shape : shape - 1;
    slot = kKernels + 8 * kBankedShapes + 2 * as + (bf16 ? 1 : 0) + (paged ? 2 * kBankedAppendShapes : 0) +
           (packed ? 4 * kBankedAppendShapes : 0);
    if (packed) return paged ? pick_banked_append_shape<true, true>(bf16, as) : pick_banked_append_shape<false, true>(bf16, as);
    return paged ? pick_banked_append_shape<true, false>(bf16, as) : pick_banked_append_shape<false, false>(bf16, as);
  }
  slot = kKernels + 2 * shape + (bf16 ? 1 : 0) + (paged ? 2 * kBankedShapes : 0) + (packed ? 4 * kBankedShapes : 0);
  if (packed) return paged ? pick_banked_shape<true, true>(bf16, shape) : pick_banked_shape<false, true>(bf16, shape);
  return paged ? pick_banked_shape<true, false>(bf16, shape) : pick_banked_shape<false, false>(bf16, shape);
}

template <typename Out>
qf_status launch_merge(qf_ctx *ctx, const vq_attention_merge_params &mp, int64_t blocks) {
  vq_attention_merge_kernel<Out><<<static_cast<unsigned>(blocks), 128, 0, qf_stream(ctx)>>>(mp);
  return qf_cuda_check_launch(ctx, kOp);
}

}  // namespace

extern "C" qf_status qf_cuda_vq_attention_decode_with(qf_ctx *ctx, const qf_vq_attention_args *a, int placement, int scores,
                                                      qf_vq_attention_config *used) {
  const qf_vq_format &f = a->k.fmt;
  const int vs = f.vector_size;
  // ---- what the kernels do not cover ----
  if (vs != 2 && vs != 4 && vs != 8)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: vector_size=%d: the CUDA kernel is built for vector sizes 2, 4 and 8", kOp, vs);
  if (a->D % vs != 0 || a->D > QF_VQ_ATTN_MAX_D)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: head_dim=%lld: the CUDA kernel needs a multiple of vector_size=%d (a vector inside one head) "
                   "of at most %d",
                   kOp, static_cast<long long>(a->D), vs, QF_VQ_ATTN_MAX_D);
  if (a->k.sz.n_books != a->k.sz.books_per_row)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: scope_rows=%d gives codebooks that change along the %lld cached tokens; the CUDA kernel "
                   "takes codebooks shared by all tokens (scope_rows 0, as CQ)",
                   kOp, f.scope_rows, static_cast<long long>(a->B * a->seq_len));
  // Bit offsets inside a code row, vector indices, heads and units are 32-bit in the kernels.
  if (a->k.sz.row_bytes > (INT64_C(1) << 28) || a->B * a->Hq > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: B=%lld, Hq=%lld, row of %lld code bytes exceed the kernels' 32-bit offsets", kOp,
                   static_cast<long long>(a->B), static_cast<long long>(a->Hq), static_cast<long long>(a->k.sz.row_bytes));

  if (placement == QF_VQ_BOOKS_TILED || placement == QF_VQ_BOOKS_LUT || placement == QF_VQ_BOOKS_REGISTERS)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the %s placement is %s's; attention takes global, shared or banked "
                   "codebooks", kOp,
                   placement == QF_VQ_BOOKS_LUT ? "lut" : placement == QF_VQ_BOOKS_TILED ? "tiled" : "registers",
                   placement == QF_VQ_BOOKS_TILED ? "VQ-GeMM" : "VQ-GeMV");

  const int64_t V = a->D / vs, row_vectors = a->Hkv * V;
  const qf_vq_attention_problem pb = {a->B, a->Hq, a->Hkv, a->D, a->seq_len, vs, f.index_bits, f.residuals,
                                      a->k.sz.entries, f.scope_cols ? f.scope_cols / vs : row_vectors};
  // The banked kernel (vq_attention_banked.cuh): forced, or auto (below).
  const char *banked_refusal = qf_vq_attn_banked_refusal(&pb);
  auto aligned16 = [](const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool operands_aligned = aligned16(a->k.codes) && aligned16(a->v.codes) && aligned16(a->k.books) && aligned16(a->v.books);
  if (!banked_refusal && !operands_aligned) banked_refusal = "it takes K and V codes and codebooks aligned to 16 bytes";
  if (a->block_table && (a->seq_len >= (INT64_C(1) << 31) || a->page_size >= (INT64_C(1) << 31)))
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: a paged cache's seq_len and page_size must be below 2^31", kOp);
  if (!banked_refusal && a->block_table && a->page_size % QF_VQ_ATTN_TILE != 0 &&
      (QF_VQ_ATTN_TILE % a->page_size != 0 || a->page_size < 16))
    banked_refusal = "it takes page sizes that are multiples of 256 or divide it (16 or more)";
  qf_vq_attention_config cfg;
  if (placement == QF_VQ_BOOKS_BANKED) {
    if (banked_refusal) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the banked codebook placement: %s", kOp, banked_refusal);
    if (scores == QF_VQ_ATTN_SCORES_DECODE)
      return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: the banked codebook placement scores by the lookup table only", kOp);
    if (!qf_vq_attention_banked_layout(&pb, ctx->smem_optin, &cfg))
      return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                     "%s: the banked codebook placement: the score table, the V codebooks and a code tile do not fit the "
                     "%zu bytes of shared memory of a block (vector_size %d, head_dim %lld)",
                     kOp, ctx->smem_optin, vs, static_cast<long long>(a->D));
  } else if (!qf_vq_attention_layout(&pb, ctx->sm_count, ctx->smem_optin, placement, scores, &cfg)) {
    const char *what = scores == QF_VQ_ATTN_SCORES_LUT
                           ? (placement == QF_VQ_BOOKS_IN_SHARED ? "the score tables of a query head, the head's V codebooks and a code tile"
                                                                 : "the score tables of a query head and a code tile")
                           : (placement == QF_VQ_BOOKS_IN_SHARED ? "the head's K and V codebooks plus a code tile" : "a code tile");
    return qf_fail(ctx, QF_ERR_UNSUPPORTED,
                   "%s: %s does not fit the %zu bytes of shared memory of a block (vector_size %d, %d-bit indices, "
                   "%d residuals, head_dim %lld)",
                   kOp, what, ctx->smem_optin, vs, f.index_bits, f.residuals, static_cast<long long>(a->D));
  }
  // Auto: the banked kernel wherever it applies without GQA (it beat every other plan on Llama-7B
  // heads), and with GQA where the blocks are busy enough for the global placement (batch 8: 2-2.6x
  // faster than it), the vectors have 4 elements (CQ-2 at batch 1: 26.4 against 28.2 us for the
  // shared placement, in kernel time) or groups have at most 4 query heads (CQ-4 at batch 1, 8 kv
  // heads of 4: 30.4 against 41.0 us since the book chunks and TMA code tiles). With larger groups
  // at small batch the shared placement decodes each V vector once for more heads (docs/VQ.md).
  // Packed V codebooks take the banked kernel wherever it applies.
  if (placement == QF_VQ_BOOKS_AUTO && scores == QF_VQ_ATTN_SCORES_AUTO &&
      (pb.Hq == pb.Hkv || cfg.placement == QF_VQ_BOOKS_IN_GLOBAL || pb.vector_size >= 4 || pb.Hq / pb.Hkv <= 4 ||
       a->v_books_packed) &&
      !banked_refusal)
    qf_vq_attention_banked_layout(&pb, ctx->smem_optin, &cfg);  // keeps cfg when it does not fit
  if (a->v_books_packed && cfg.placement != QF_VQ_BOOKS_BANKED)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: packed V codebooks (qf_vq_pack_attention_books) run the banked kernel only; "
                   "this call runs another: %s", kOp,
                   banked_refusal ? banked_refusal : "its codebook placement or scores are forced (QF_VQ_BOOKS)");
  if (a->Hkv * cfg.head_tiles > 65535)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld kv heads x %d head tiles exceed the grid's 65535 rows", kOp,
                   static_cast<long long>(a->Hkv), cfg.head_tiles);

  int slot = 0;
  const bool bf16 = f.entry_dtype == QF_BF16;
  chunk_kernel_t kernel =
      cfg.placement == QF_VQ_BOOKS_BANKED
          ? pick_banked(bf16, static_cast<int>(V), vs, cfg.heads, a->block_table != nullptr, a->v_books_packed != 0, false, slot)
          : pick(cfg.scores == QF_VQ_ATTN_SCORES_LUT, cfg.placement == QF_VQ_BOOKS_IN_SHARED, bf16, cfg.heads, vs, slot);
  if (kernel == nullptr) return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for vector_size %d, %d heads", kOp, vs, cfg.heads);

  // Raised to the device's limit: the heuristic has sized the block's shared memory within it.
  static std::atomic<uint64_t> opted_in[kKernels + kBankedKernels];
  if (qf_status st = qf_cuda_smem_opt_in(ctx, kOp, kernel, ctx->smem_optin, opted_in[slot]); st != QF_OK) return st;
  cudaError_t err;
  int threads = kVqAttnThreads * cfg.halves;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, cfg.smem_bytes);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, kOp, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  if (per_sm < 1)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: a block of %d threads with %zu bytes of shared memory does not fit an SM", kOp,
                   threads, cfg.smem_bytes);
  const size_t counters = kQfWorkspaceCounters * sizeof(int);
  qf_vq_attention_split(&pb, ctx->sm_count, per_sm, counters, &cfg);
  if (qf_vq_attention_banked_fill(&cfg, &pb, ctx->sm_count)) threads = kVqAttnThreads;  // one half per block
  if (cfg.units > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld (batch entry, chunk) units exceed the kernel's 32-bit counts", kOp,
                   static_cast<long long>(cfg.units));
  // qf_vq_attention_decode_append: fused into the banked kernel where its blocks set up by bulk
  // copies (one head: S = 32, or S = 64 in paired halves; grouped: 4 heads of S = 32, 2 of S = 64)
  // and the batch's new tokens make it pay (qf_vq_attn_banked_appends), else the encoder's K and V
  // kernel first, its rows found from the lengths (vq_encode.h).
  const bool appending = a->k_new.data != nullptr;
  const bool fused = appending && qf_vq_attn_banked_appends(&pb, &cfg, a->v_books_packed != 0);
  if (appending && !fused && a->v_books_packed)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: with packed V codebooks the append runs inside the banked kernel only "
                   "where its blocks set up by bulk copies (one query head: S = 32, or S = 64 in paired halves; 4 query heads "
                   "of S = 32, 2 of S = 64); this call runs it with %d query heads per block and %d halves", kOp, cfg.heads,
                   cfg.halves);
  if (fused) {  // the same plan on the append's own instantiation (the same shared memory and threads)
    kernel = pick_banked(bf16, static_cast<int>(V), vs, cfg.heads, a->block_table != nullptr, a->v_books_packed != 0, true, slot);
    if (qf_status st = qf_cuda_smem_opt_in(ctx, kOp, kernel, ctx->smem_optin, opted_in[slot]); st != QF_OK) return st;
  }
  if (used) *used = cfg;

  void *ws = nullptr;
  qf_status st = qf_cuda_workspace(ctx, kOp, cfg.scratch_bytes, &ws);
  if (st != QF_OK) return st;
  float *part_o = reinterpret_cast<float *>(static_cast<char *>(ws) + counters);  // the counters stay untouched
  float *part_ml = reinterpret_cast<float *>(reinterpret_cast<char *>(part_o) +
                                             qf_vq_attn_part_o_bytes(a->B, a->Hq, cfg.n_chunks, a->D));

  vq_attention_params p = {};
  p.codes[0] = reinterpret_cast<const uint32_t *>(a->k.codes);
  p.codes[1] = reinterpret_cast<const uint32_t *>(a->v.codes);
  p.books[0] = static_cast<const uint16_t *>(a->k.books);
  p.books[1] = static_cast<const uint16_t *>(a->v.books);
  p.q = a->q.data;
  p.kv_lens = a->kv_lens;
  p.block_table = a->block_table;
  p.bt_ld = a->bt_ld, p.page_size = a->page_size, p.num_pages = a->num_pages;
  if (a->block_table) p.by_page = qf_fastdiv_make(static_cast<uint32_t>(a->page_size));
  p.box_rows = a->block_table && a->page_size < QF_VQ_ATTN_TILE ? static_cast<int>(a->page_size) : QF_VQ_ATTN_TILE;
  p.part_o = part_o;
  p.part_ml = part_ml;
  p.q_ld = a->q.ld;
  p.N = a->k.N;  // B * seq_len, or the pages' rows
  p.seq_len = a->seq_len;
  p.chunk_len = cfg.chunk_len;
  p.n_books = a->k.sz.n_books;
  p.q_scale = static_cast<float>(a->sm_scale * 1.4426950408889634074);  // log2(e): scores in log2 units
  p.q_dtype = a->q.dtype;
  p.Hq = static_cast<int>(a->Hq);
  p.group = static_cast<int>(a->Hq / a->Hkv);
  p.D = static_cast<int>(a->D);
  p.head_tiles = cfg.head_tiles;
  p.n_chunks = static_cast<int>(cfg.n_chunks);
  p.units = static_cast<int>(cfg.units);
  p.vectors = static_cast<int>(V);
  p.bits = f.index_bits;
  p.residuals = f.residuals;
  p.entries = static_cast<int>(a->k.sz.entries);
  p.row_words = static_cast<uint32_t>(a->k.sz.row_bytes / 4);
  p.vectors_per_book = static_cast<int>(pb.vectors_per_book);
  p.book_shift = vq_book_shift(pb.vectors_per_book, false);
  p.books_per_head = cfg.books_per_head;
  p.code_words = cfg.code_words;
  p.stages = cfg.stages;
  for (p.lane_shift = 0; (1 << p.lane_shift) < cfg.lanes_per_token; p.lane_shift++) {
  }
  p.vectors_per_lane = cfg.vectors_per_lane;
  p.books_bytes = static_cast<uint32_t>(cfg.books_bytes);
  p.lut_bytes = static_cast<uint32_t>(cfg.lut_bytes);
  p.codes_bytes = static_cast<uint32_t>(cfg.codes_bytes);
  p.halves = cfg.halves;
  p.vblocks = static_cast<int>(cfg.blocks);
  p.half_bytes = static_cast<uint32_t>((cfg.smem_bytes - cfg.lut_bytes - cfg.books_bytes) / cfg.halves);

  if (cfg.placement == QF_VQ_BOOKS_BANKED) {  // the code tiles' TMA maps: boxes of a tile's tokens x one head's indices
    // A head's 64-byte slices (S = 64) with misses filling 128 bytes of the L2 (its row and the
    // next head's), 32-byte ones with 256: CQ-4 at batch 8 x 4096 2.5% faster than with 256, CQ-2
    // 1-2% slower with 128 (H100, docs/VQ.md).
    const CUtensorMapL2promotion promotion = V == 64 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    const qf_vq_tensors *c[2] = {&a->k, &a->v};
    for (int m = 0; m < 2; m++)
      if ((st = qf_cuda_make_tmap_bytes(ctx, kOp, &p.tmap_codes[m], m ? "V codes" : "K codes", c[m]->codes, p.N,
                                        c[m]->sz.row_bytes, c[m]->sz.row_bytes, static_cast<uint32_t>(V),
                                        static_cast<uint32_t>(p.box_rows), CU_TENSOR_MAP_SWIZZLE_NONE, promotion)) != QF_OK)
        return st;
  }
  if (fused) {
    p.x_new[0] = a->k_new.data, p.x_new[1] = a->v_new.data;
    p.append_codes[0] = a->k.codes, p.append_codes[1] = a->v.codes;
    p.x_ld = a->k_new.ld;
    p.x_dtype = a->k_new.dtype;
  } else if (appending) {  // (after every check: a refused call writes nothing)
    const qf_mat xs[2] = {a->k_new, a->v_new};
    const qf_vq_tensors ts[2] = {a->k, a->v};
    const qf_vq_append_rows at = {a->kv_lens, a->block_table, a->seq_len, a->bt_ld, a->page_size, a->num_pages, p.by_page};
    if ((st = qf_cuda_vq_encode_append(ctx, xs, ts, &at)) != QF_OK) return st;
  }
  const dim3 grid(static_cast<unsigned>((cfg.blocks + cfg.halves - 1) / cfg.halves), static_cast<unsigned>(a->Hkv * cfg.head_tiles));
  p.o = a->o.data;
  p.lse = a->lse;
  p.o_ld = a->o.ld;
  p.o_dtype = a->o.dtype;
  p.write_o = qf_vq_attn_banked_writes_o(&pb, &cfg);
  if (cfg.placement == QF_VQ_BOOKS_BANKED) {  // a programmatic dependent under qf_ctx_set_pdl (vq_attention_banked.cuh)
    if ((st = qf_cuda_launch(ctx, kOp, kernel, kernel, grid, dim3(threads), cfg.smem_bytes, p)) != QF_OK) return st;
  } else {
    kernel<<<grid, threads, cfg.smem_bytes, qf_stream(ctx)>>>(p);
    if ((st = qf_cuda_check_launch(ctx, kOp)) != QF_OK) return st;
  }
  if (p.write_o) return QF_OK;

  vq_attention_merge_params mp = {};
  mp.part_o = part_o;
  mp.part_ml = part_ml;
  mp.kv_lens = a->kv_lens;
  mp.seq_len = a->seq_len;
  mp.o = a->o.data;
  mp.lse = a->lse;
  mp.o_ld = a->o.ld;
  mp.Hq = static_cast<int>(a->Hq);
  mp.D = static_cast<int>(a->D);
  mp.n_chunks = static_cast<int>(cfg.n_chunks);
  const int64_t blocks = a->B * a->Hq;
  switch (a->o.dtype) {
    case QF_BF16: return launch_merge<__nv_bfloat16>(ctx, mp, blocks);
    case QF_F16: return launch_merge<__half>(ctx, mp, blocks);
    default: return launch_merge<float>(ctx, mp, blocks);
  }
}

extern "C" qf_status qf_cuda_vq_attention_decode(qf_ctx *ctx, const qf_vq_attention_args *a) {
  int placement;
  const char *forced;
  qf_status st = qf_vq_books_from_env(ctx, kOp, &placement, &forced);
  if (st != QF_OK) return st;
  st = qf_cuda_vq_attention_decode_with(ctx, a, placement, QF_VQ_ATTN_SCORES_AUTO, nullptr);
  return qf_vq_books_blame(ctx, st, placement, forced);
}

// The banked kernel's packed V codebooks (formats/vq.h): one thread per (head, entry, column).
__global__ void vq_pack_attention_books_kernel(const uint16_t *books, uint16_t *packed, int S, int vs, int64_t cols,
                                               int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t src = qf_vq_attn_packed_source(i, S, vs, cols);
    for (int k = 0; k < vs; k++) packed[i * vs + k] = books[src + k];
  }
}

extern "C" qf_status qf_cuda_vq_pack_attention_books(qf_ctx *ctx, const qf_vq_tensors *t, int64_t head_dim, int64_t kv_heads,
                                                     void *packed) {
  const int vs = t->fmt.vector_size;
  const int64_t S = head_dim / vs, total = kv_heads * 256 * S;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, int64_t{ctx->sm_count > 0 ? ctx->sm_count : 1} * 8);
  vq_pack_attention_books_kernel<<<static_cast<unsigned>(blocks), 256, 0, qf_stream(ctx)>>>(
      static_cast<const uint16_t *>(t->books), static_cast<uint16_t *>(packed), static_cast<int>(S), vs,
      t->fmt.scope_cols ? t->fmt.scope_cols : t->K, total);
  return qf_cuda_check_launch(ctx, "qf_vq_pack_attention_books");
}
