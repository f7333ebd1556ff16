/* The banked VQ attention's launch plan (src/cuda/vq/vq_attention_heuristic.h, host code of the
 * CUDA backend) on the CPU, as the launcher forms it on an H200 (132 SMs, 227 KB of shared memory
 * a block, one banked block per SM): the banked layout, the split, then the one-half fill. Llama-7B
 * heads (32 x 128), CQ-2 and CQ-4. What is checked is where the plan's shape was measured
 * (docs/VQ.md): CQ-2 runs one half per block where its halves do not fill the SMs; CQ-4 keeps its
 * pairs of halves sharing a table wherever the chunks and the halves pair up, and runs one half
 * per block where they do not. */
#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "cuda/vq/vq_attention_heuristic.h"

enum { kSms = 132 };
static const size_t kSmemOptin = 232448; /* 227 KB */

typedef struct {
  int halves;      /* halves of 8 warps per block */
  int64_t n_chunks; /* chunks per sequence */
  int64_t grid;    /* blocks per head */
} plan;

static plan plan_of(int vector_size, int64_t B, int64_t seq_len) {
  const qf_vq_attention_problem pb = {.B = B, .Hq = 32, .Hkv = 32, .D = 128, .seq_len = seq_len, .vector_size = vector_size,
                                      .index_bits = 8, .residuals = 1, .entries = 256, .vectors_per_book = 1};
  qf_vq_attention_config cfg = {0};
  plan p = {0, 0, 0};
  if (!qf_vq_attention_banked_layout(&pb, kSmemOptin, &cfg)) return p;
  qf_vq_attention_split(&pb, kSms, 1, 4096, &cfg);
  qf_vq_attention_banked_fill(&cfg, &pb, kSms);
  p.halves = cfg.halves;
  p.n_chunks = cfg.n_chunks;
  p.grid = cfg.halves == 2 ? cfg.blocks / 2 : cfg.blocks;
  return p;
}

int main(void) {
  /* CQ-2 at batch 1 x 1024: four chunks of a tile, one half per block (128 blocks) */
  plan p = plan_of(4, 1, 1024);
  CHECK(p.halves == 1 && p.n_chunks == 4 && p.grid == 4, "CQ-2 batch 1 x 1024: %d halves, %lld chunks, %lld blocks a head",
        p.halves, (long long)p.n_chunks, (long long)p.grid);
  /* CQ-4 at batch 1 x 1024: the same chunks, in pairs of halves (64 blocks) */
  p = plan_of(2, 1, 1024);
  CHECK(p.halves == 2 && p.n_chunks == 4 && p.grid == 2, "CQ-4 batch 1 x 1024: %d halves, %lld chunks, %lld blocks a head",
        p.halves, (long long)p.n_chunks, (long long)p.grid);
  /* CQ-4 over one tile: one chunk, which cannot pair: one half per block */
  p = plan_of(2, 1, 256);
  CHECK(p.halves == 1 && p.n_chunks == 1, "CQ-4 batch 1 x 256: %d halves, %lld chunks", p.halves, (long long)p.n_chunks);
  /* CQ-4 at batch 1 x 4096 and batch 8 x 4096: pairs past the SMs (128 blocks) */
  p = plan_of(2, 1, 4096);
  CHECK(p.halves == 2 && p.n_chunks == 8 && p.grid == 4, "CQ-4 batch 1 x 4096: %d halves, %lld chunks, %lld blocks a head",
        p.halves, (long long)p.n_chunks, (long long)p.grid);
  p = plan_of(2, 8, 4096);
  CHECK(p.halves == 2 && p.n_chunks == 2 && p.grid == 4, "CQ-4 batch 8 x 4096: %d halves, %lld chunks, %lld blocks a head",
        p.halves, (long long)p.n_chunks, (long long)p.grid);
  /* CQ-2 at batch 8 x 4096: a half per batch entry, two to a block (128 blocks) */
  p = plan_of(4, 8, 4096);
  CHECK(p.halves == 2 && p.n_chunks == 1 && p.grid == 4, "CQ-2 batch 8 x 4096: %d halves, %lld chunks, %lld blocks a head",
        p.halves, (long long)p.n_chunks, (long long)p.grid);
  return check_finish("test_vq_attention_plan");
}
