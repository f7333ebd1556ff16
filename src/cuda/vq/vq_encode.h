// The encoder's entry for a decode step's append by the lengths (vq_encode.cu), for the fallback
// of qf_vq_attention_decode_append (vq_attention.cu).
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "cuda/fastdiv.h"

// Where x row b of an append goes: batch entry b's new token, len_b - 1 (len_b its kv_lens entry
// clamped to [0, seq_len], or seq_len without lengths), in entry b's rows of an unpaged cache
// (b seq_len + len_b - 1) or on its page of a paged one (block_table [B, bt_ld] of pages of
// page_size rows, num_pages of them); an entry with no token, or whose page is outside the cache,
// is skipped. The attention's rule for a token's row (vq_attn_row, vq_rows.cuh; seq_len and
// page_size below 2^31, as its launcher keeps them).
struct qf_vq_append_rows {
  const int32_t *kv_lens;      // [B] or NULL
  const int32_t *block_table;  // or NULL: unpaged
  int64_t seq_len, bt_ld, page_size, num_pages;
  qf_fastdiv by_page;          // page_size's
};

// K's rows xs[0] and V's xs[1] into ts[0] and ts[1] at the rows `at` names, as qf_vq_encode_kv_slots
// would with those rows as its slots (the same kernels, the rows found on the device after the
// kernel's wait instead of read from a slots array written by a kernel of their own).
extern "C" qf_status qf_cuda_vq_encode_append(qf_ctx *ctx, const qf_mat *xs, const qf_vq_tensors *ts,
                                              const qf_vq_append_rows *at);
