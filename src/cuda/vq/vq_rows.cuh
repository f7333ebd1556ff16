// Where a token's codes lie in a CQ-quantized KV cache: the rule shared by the attention kernels
// (P = vq_attention_params, vq_attention.cuh) and the encoder's append by the lengths
// (P = qf_vq_append_rows, vq_encode.h). P carries kv_lens, block_table, seq_len, bt_ld, page_size,
// num_pages and by_page, with the meanings vq_encode.h gives them.
#pragma once

#include <cstdint>

#include "cuda/fastdiv.h"

// Batch entry b's tokens: kv_lens[b] clamped to [0, seq_len] (read on the device: under PDL only
// after the grid dependency wait), or seq_len.
__device__ __forceinline__ int64_t vq_attn_len(const int32_t *kv_lens, int64_t seq_len, int64_t b) {
  if (!kv_lens) return seq_len;
  const int64_t L = kv_lens[b];
  return L < 0 ? 0 : L > seq_len ? seq_len : L;
}

// Paged caches: the row of the codes at offset off of a page (a block table's entry), or -1 where
// the page is outside the cache (the token's score is then NaN).
template <class P>
__device__ __forceinline__ int64_t vq_attn_page_row(const P &p, int32_t page, uint32_t off) {
  return page >= 0 && page < p.num_pages ? page * p.page_size + off : -1;
}

// Token t of entry b (paged): its page's entry in the block table, and its row offset on the page.
// (31-bit division: the launchers keep seq_len and page_size below 2^31.)
template <class P>
__device__ __forceinline__ int32_t vq_attn_page(const P &p, int64_t b, int64_t t, uint32_t &off) {
  const int page = qf_fastdiv_div(static_cast<int>(t), p.by_page);
  off = static_cast<uint32_t>(t - static_cast<int64_t>(page) * p.page_size);
  return p.block_table[b * p.bt_ld + page];
}

// Token t of entry b: its row of the codes, or -1 where its page is outside the cache (paged).
template <class P>
__device__ __forceinline__ int64_t vq_attn_row(const P &p, int64_t b, int64_t t) {
  if (!p.block_table) return b * p.seq_len + t;
  uint32_t off;
  const int32_t page = vq_attn_page(p, b, t, off);
  return vq_attn_page_row(p, page, off);
}
