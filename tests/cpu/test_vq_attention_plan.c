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
  const char *what;
  int vector_size; /* 4: CQ-2, 2: CQ-4 */
  int64_t B, seq_len;
  int halves;       /* halves of 8 warps per block */
  int64_t n_chunks; /* chunks per sequence */
  int64_t grid;     /* blocks per head (0: not checked) */
} plan_case;

static const plan_case cases[] = {
    /* four chunks of a tile, one half per block (128 blocks) */
    {"CQ-2 batch 1 x 1024", 4, 1, 1024, 1, 4, 4},
    /* the same chunks, in pairs of halves (64 blocks) */
    {"CQ-4 batch 1 x 1024", 2, 1, 1024, 2, 4, 2},
    /* one chunk, which cannot pair: one half per block */
    {"CQ-4 batch 1 x 256", 2, 1, 256, 1, 1, 0},
    /* pairs past the SMs (128 blocks) */
    {"CQ-4 batch 1 x 4096", 2, 1, 4096, 2, 8, 4},
    {"CQ-4 batch 8 x 4096", 2, 8, 4096, 2, 2, 4},
    /* a half per batch entry, two to a block (128 blocks) */
    {"CQ-2 batch 8 x 4096", 4, 8, 4096, 2, 1, 4},
};

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const plan_case *c = &cases[i];
    const qf_vq_attention_problem pb = {.B = c->B, .Hq = 32, .Hkv = 32, .D = 128, .seq_len = c->seq_len,
                                        .vector_size = c->vector_size, .index_bits = 8, .residuals = 1, .entries = 256,
                                        .vectors_per_book = 1};
    qf_vq_attention_config cfg = {0};
    int halves = 0;
    int64_t n_chunks = 0, grid = 0;
    if (qf_vq_attention_banked_layout(&pb, kSmemOptin, &cfg)) {
      qf_vq_attention_split(&pb, kSms, 1, 4096, &cfg);
      qf_vq_attention_banked_fill(&cfg, &pb, kSms);
      halves = cfg.halves, n_chunks = cfg.n_chunks, grid = cfg.halves == 2 ? cfg.blocks / 2 : cfg.blocks;
    }
    CHECK(halves == c->halves && n_chunks == c->n_chunks && (!c->grid || grid == c->grid),
          "%s: %d halves, %lld chunks, %lld blocks a head", c->what, halves, (long long)n_chunks, (long long)grid);
  }
  return check_finish("test_vq_attention_plan");
}
