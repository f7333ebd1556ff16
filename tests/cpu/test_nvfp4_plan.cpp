// fp4_wide_plan (src/cuda/fp4/nvfp4_heuristic.h), the NVFP4 GEMM's tile and K-split choice, on the
// CPU: hand-computed plans for shapes the GPU test and the benchmarks run, then its rules over a
// grid of shapes and SM counts (each plan names an instantiated tile, the fewest token tiles of
// equal size, a split that leaves every CTA whole steps).
#include <cinttypes>

#include "check.h"
#include "cuda/fp4/nvfp4_heuristic.h"

static void expect(int64_t M, int64_t N, int steps, int64_t sms, int wg, int tok, int split) {
  const Fp4WidePlan p = fp4_wide_plan(M, N, steps, sms);
  CHECK(p.warpgroups == wg && p.tok == tok && p.split == split,
        "M=%" PRId64 " N=%" PRId64 " steps=%d sms=%" PRId64 ": plan (%d, %d, %d), expected (%d, %d, %d)", M, N, steps,
        sms, p.warpgroups, p.tok, p.split, wg, tok, split);
}

int main() {
  // 132 SMs (H100, H200). Decode-sized: 112 row tiles of 64 x 16, split twice (16 steps, 8 each).
  expect(9, 7168, 16, 132, 1, 16, 2);
  expect(40, 640, 97, 132, 1, 48, 8);     // gpu_test_nvfp4's 8-way split: 10 tiles
  expect(100, 2544, 25, 132, 1, 112, 2);  // and its 2-way split: 40 tiles, 12 steps each
  expect(128, 2112, 56, 132, 1, 128, 4);  // 33 tiles of 128 tokens, 14 steps each
  expect(129, 2112, 56, 132, 1, 80, 2);   // two tiles of 80 (was 128 + 1), 66 tiles
  expect(144, 8192, 64, 132, 1, 80, 1);   // 256 tiles of 80: more than 0.9 x SMs
  expect(300, 2112, 56, 132, 1, 112, 2);  // three tiles of 112, 99 in all
  expect(300, 7168, 128, 132, 2, 160, 1); // 112 tiles of 128 x 160 fill 85% of their wave
  expect(144, 28672, 64, 132, 2, 160, 1); // 224 tiles of 128 x 160: 85% of two waves
  expect(144, 24576, 12, 132, 1, 80, 1);  // 192 tiles of 128 x 160 would fill 73% of two waves
  expect(384, 32768, 4, 132, 2, 192, 1);  // two tiles of 192
  expect(420, 32768, 4, 132, 2, 224, 1);  // two tiles of 210, rounded up to 224
  expect(2048, 7168, 16, 132, 2, 256, 1);
  expect(2048, 2112, 56, 132, 1, 128, 1); // 136 tiles of 128 x 256 would fill 52% of two waves

  const int64_t Ns[] = {16, 48, 64, 640, 2112, 7168, 16400, 28672};
  const int stepss[] = {1, 2, 12, 56, 128};
  const int64_t smss[] = {8, 78, 114, 132};
  for (int64_t sms : smss)
    for (int64_t N : Ns)
      for (int steps : stepss)
        for (int64_t M = 9; M <= 1100; M++) {
          const Fp4WidePlan p = fp4_wide_plan(M, N, steps, sms);
          if (p.warpgroups == 2) {
            const int64_t tiles2 = (M + p.tok - 1) / p.tok, fewest2 = (M + 255) / 256;
            CHECK(M > 128 && fp4_wide_tile(2, p.tok) && p.split == 1,
                  "M=%" PRId64 " N=%" PRId64 ": two warpgroups, tok %d split %d", M, N, p.tok, p.split);
            CHECK(tiles2 == fewest2 && p.tok - (M + tiles2 - 1) / tiles2 < 32,
                  "M=%" PRId64 ": %" PRId64 " two-warpgroup tiles of %d tokens, not the fewest (%" PRId64 ") of equal size",
                  M, tiles2, p.tok, fewest2);
            continue;
          }
          const int64_t tiles = (M + p.tok - 1) / p.tok, fewest = (M + 127) / 128;
          CHECK(p.warpgroups == 1 && fp4_wide_tile(1, p.tok), "M=%" PRId64 ": %d-token tiles are not instantiated", M, p.tok);
          CHECK(tiles == fewest && p.tok - (M + tiles - 1) / tiles < 16,
                "M=%" PRId64 ": %" PRId64 " tiles of %d tokens, not the fewest (%" PRId64 ") of equal size", M, tiles,
                p.tok, fewest);
          CHECK(p.split == 1 || ((p.split == 2 || p.split == 4 || p.split == 8) && steps / p.split >= 4),
                "M=%" PRId64 " N=%" PRId64 " steps=%d: split %d", M, N, steps, p.split);
        }
  return check_finish("test_nvfp4_plan");
}
