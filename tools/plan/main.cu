// qfuse-plan: the Hopper GEMM engine's plan (sm90_gemm_pick, src/cuda/gemm/sm90_gemm_heuristic.h)
// for shapes read from standard input, as host code: no GPU needed. Each input line holds a shape
// as qfuse-bench writes it ("M=4096,N=7168,K=16384"); each output line repeats it and adds the plan
// in the bench's notation: BMxBN/splits, "+tail" for a last round of owners and helpers.
//
//   qfuse-plan [--sms N] [--dram GBPS] [--recipe blockscale|fp8|int8] < shapes.txt
//
// --dram is the device's peak DRAM bandwidth in GB/s, which a decode rule reads (an H200 4800, an
// H100 3350; the default 0, unknown, takes the slower memory's plans).
//
// bench/plan_eval.py runs it on the shapes of a plan sweep and scores its plans against the
// sweep's forced ones (docs/GEMM.md, "The plan sweep and the time model").
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/gemm/sm90_gemm_heuristic.h"

int main(int argc, char **argv) {
  int sms = 132;
  double dram = 0.0;
  Sm90Recipe recipe = Sm90Recipe::kBlockScaledFp8;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sms") && i + 1 < argc) {
      sms = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--dram") && i + 1 < argc) {
      dram = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--recipe") && i + 1 < argc) {
      const char *r = argv[++i];
      if (!strcmp(r, "blockscale")) recipe = Sm90Recipe::kBlockScaledFp8;
      else if (!strcmp(r, "fp8")) recipe = Sm90Recipe::kScaledFp8;
      else if (!strcmp(r, "int8")) recipe = Sm90Recipe::kScaledInt8;
      else return fprintf(stderr, "qfuse-plan: unknown recipe %s (blockscale, fp8 or int8)\n", r), 2;
    } else {
      return fprintf(stderr, "usage: qfuse-plan [--sms N] [--dram GBPS] [--recipe blockscale|fp8|int8] < shapes\n"), 2;
    }
  }
  if (sms < 1) return fprintf(stderr, "qfuse-plan: --sms must be positive\n"), 2;
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    int64_t M, N, K;
    if (sscanf(line, " M=%" SCNd64 ",N=%" SCNd64 ",K=%" SCNd64, &M, &N, &K) != 3) continue;
    if (M < 1 || N < 1 || K < 1) {
      fprintf(stderr, "qfuse-plan: skipped M=%" PRId64 ",N=%" PRId64 ",K=%" PRId64 " (not a shape)\n", M, N, K);
      continue;
    }
    const sm90_gemm_config c = sm90_gemm_pick(M, N, K, sms, recipe, dram);
    printf("M=%" PRId64 ",N=%" PRId64 ",K=%" PRId64 " %dx%d/%d%s\n", M, N, K, c.block_m, c.block_n, c.splits,
           c.tail_kb > 0 ? "+tail" : "");
  }
  return 0;
}
