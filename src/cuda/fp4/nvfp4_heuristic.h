// Launch plan of qf_gemm_nvfp4's wgmma kernel (nvfp4_gemm_wide.cuh, past kFp4NarrowMaxM tokens):
// its tile and its K split, from the shape and the SM count. Host code only, no CUDA: the launcher
// (nvfp4_gemm.cu) instantiates the tiles listed here, and tests/cpu/test_nvfp4_plan.cpp checks the
// rules on the CPU. Measurements behind them: docs/NVFP4.md; bench/results/h200-dev-nvfp4-regs-
// configs.jsonl, h200-dev-nvfp4-tok64-ab.jsonl, h100-dev-nvfp4-split-rules.jsonl,
// h200-dev-nvfp4-tok96-ab.jsonl, h100-dev-nvfp4-tok16-ab.jsonl, h100-dev-nvfp4-balanced-tiles-ab.jsonl,
// h100-a638f72-nvfp4-plans.jsonl.
#pragma once

#include <cstdint>

// The one-warpgroup tiles' token counts (64 weight rows by TOK tokens), each instantiated.
#define QF_FP4_WIDE_TOKENS(X) X(16) X(32) X(48) X(64) X(80) X(96) X(112) X(128)
// The two-warpgroup tiles' (128 rows by TOK tokens): the plan's balanced token tiles past 128 tokens.
#define QF_FP4_WIDE2_TOKENS(X) X(160) X(192) X(224) X(256)

// Whether the kernel is instantiated for tiles of `warpgroups` x 64 rows by `tok` tokens.
constexpr bool fp4_wide_tile(int warpgroups, int tok) {
#define QF_FP4_IS1(TOK) || (warpgroups == 1 && tok == TOK)
#define QF_FP4_IS2(TOK) || (warpgroups == 2 && tok == TOK)
  return false QF_FP4_WIDE_TOKENS(QF_FP4_IS1) QF_FP4_WIDE2_TOKENS(QF_FP4_IS2);
#undef QF_FP4_IS2
#undef QF_FP4_IS1
}

// Ring stages of a tile: as many as fit in 227 KB of shared memory for the two-warpgroup tiles, up
// to 4 (stage bytes: the activations, 256 per token, and the codes, 4 KB per warpgroup): the 160-
// and 192-token tiles take 4, 160 tokens 0.7-5.4% faster than on 3, 192 tokens -3.7% to +3.5%
// (h100-dev-nvfp4-2wg-4stages-ab.jsonl); 3 for the one-warpgroup tiles, several of whose CTAs
// share an SM.
constexpr int fp4_wide_stages(int warpgroups, int tok) {
  const int stage = 256 * tok + 4096 * warpgroups, fit = (227 * 1024 - 2048) / stage;
  return warpgroups == 1 || fit < 3 ? 3 : fit > 4 ? 4 : fit;
}

// Tokens per tile of the fewest token tiles of at most `most` tokens that hold M, each M / tiles
// rounded up to a multiple of `multiple` (equal tiles: a tile's zero-filled rows cost as much as
// real ones).
constexpr int fp4_balanced_tok(int64_t M, int most, int multiple) {
  const int64_t tiles = (M + most - 1) / most;
  return static_cast<int>(((M + tiles - 1) / tiles + multiple - 1) / multiple * multiple);
}

struct Fp4WidePlan {
  int warpgroups; // 2: 128 rows x tok tokens (160-256); 1: 64 rows x tok tokens
  int tok;        // tokens per tile
  int split;      // CTAs of a cluster splitting K (1: none; one-warpgroup tiles only)
};

// Two-warpgroup tiles (one CTA per SM: each dequantized fragment serves twice the tokens) where
// more than 128 tokens fill three quarters of the CTA slots of their last wave, on the fewest token
// tiles of at most 256 tokens, each M / tiles rounded up to 32 (M = 300 as two tiles of 160 ran
// 1.3-1.9x faster than as two of 256 wherever they fill the wave, M = 384 as two of 192 1.15-1.3x:
// h100-a638f72-nvfp4-plans.jsonl); else one-warpgroup tiles on the fewest token tiles of at most 128
// tokens, each M / tiles rounded up to 16 (a tile's zero-filled token rows cost as much as real
// ones: M = 144 on two tiles of 80 ran 1.3-2.2x faster than on 128 + 16), with K split over a
// cluster where the tiles leave SMs idle. `steps`: K / 128, rounded up.
constexpr Fp4WidePlan fp4_wide_plan(int64_t M, int64_t N, int steps, int64_t sms) {
  const int wide_tok = fp4_balanced_tok(M, 256, 32);
  const int64_t wide_tiles = (M + wide_tok - 1) / wide_tok * ((N + 127) / 128);
  if (M > 128 && 4 * wide_tiles >= 3 * ((wide_tiles + sms - 1) / sms * sms)) return {2, wide_tok, 1};
  const int tok = fp4_balanced_tok(M, 128, 16);
  const int64_t tiles = (M + tok - 1) / tok * ((N + 63) / 64);
  // The split doubles while the CTAs are fewer than the target and each would keep min_steps steps:
  // up to 64 tokens (three CTAs or more per SM) the CTAs are to fill 4 per SM, keeping 8 steps (4
  // where the tiles are fewer than half the SMs); past 64 tokens (two or three CTAs per SM) they
  // are to fill nine tenths of the SMs, keeping 12. Shorter ranges, or more CTAs, lost to the
  // exchange of partial sums (h100-dev-nvfp4-split-rules.jsonl, h200-dev-nvfp4-wide-ksplit-ab.jsonl);
  // the smaller tiles' rule for the 80-token ones was mixed, 0.85-1.28x (h100-dev-nvfp4-balanced-
  // tiles-ab.jsonl).
  const int64_t target = tok <= 64 ? 4 * sms : 9 * sms / 10;
  const int min_steps = tok > 64 ? 12 : 2 * tiles < sms ? 4 : 8;
  int split = 1;
  while (split < 8 && tiles * split <= target && steps / (2 * split) >= min_steps) split *= 2;
  return {1, tok, split};
}
