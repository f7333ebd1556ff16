/* qfuse-bench: measures the machine's ceilings, then times qfuse's ops against their peers.
 * Default: on CUDA device 0 when one is present, otherwise the CPU backend on small shapes. */
#define _POSIX_C_SOURCE 200809L /* readlink */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bench_ops.h"
#include "qfuse.h"

static void usage(void) {
  fprintf(stderr,
          "usage: qfuse-bench [--cpu] [--jsonl FILE] [--commit ID] [--reps N] [--only OPS] [--m M] [--k K]\n"
          "                   [--flush read|memset] [--timing kernel|event]\n"
          "  --cpu      time the CPU backend even when a GPU is present\n"
          "  --jsonl    append one JSON line per result to FILE\n"
          "  --commit   commit id recorded in the rows (default: $QF_COMMIT, else the commit.txt that\n"
          "             scripts/build writes beside tools/, else 'unknown')\n"
          "  --reps     timed runs per measurement (at least 20; default 30)\n"
          "  --only     run only the ops named, comma-separated (e.g. quant_group,quant_token); some\n"
          "             run only when named (gemm_nvfp4_plans: the NVFP4 GEMM's launch plans forced;\n"
          "             vq_gemm_splits: the tiled VQ-GeMM's split-K forced 1 to 8 ways on a grid;\n"
          "             gemm_fp8_blockscale_grid: the block-scaled GEMM on more weights and M;\n"
          "             gemm_fp8_blockscale_plans: its plans forced;\n"
          "             gemm_fp8_blockscale_lt_algos: every configuration cuBLASLt accepts)\n"
          "  --m        run only the shapes with this M (e.g. under a profiler; grouped GEMM: tokens per expert)\n"
          "  --k        quantization, GEMM and vq_gemm ops: run only the shapes with this K (H for SiLU * Mul)\n"
          "  --flush    how the L2 is emptied before each timed GPU run: a read pass over 2x the L2\n"
          "             (default; leaves clean lines) or a memset of it (leaves dirty lines)\n"
          "  --timing   a GPU run's time: its kernels' durations from CUPTI's records (default)\n"
          "             or a CUDA event pair around it (the launch latency too)\n");
}

/* The build's commit.txt (scripts/build, scripts/pack), one folder above this executable, so that
 * rows of a run started by hand say what they measured. Returns the first line or NULL. */
static char *build_commit(char *buf, size_t size) {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
  if (n <= 0) return NULL;
  path[n] = '\0';
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    *slash = '\0';
  }
  strcat(path, "/commit.txt");
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *line = fgets(buf, (int)size, f);
  fclose(f);
  if (!line) return NULL;
  line[strcspn(line, "\r\n")] = '\0';
  return line[0] ? line : NULL;
}

static int parse_timing(const char *name, qfb_timing *t) {
  const qfb_timing all[] = {QFB_TIMING_KERNEL, QFB_TIMING_EVENT};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(name, qfb_timing_name(all[i]))) return *t = all[i], 1;
  return 0;
}

static int parse_flush(const char *name, qfb_flush *f) {
  const qfb_flush all[] = {QFB_FLUSH_READ, QFB_FLUSH_MEMSET};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(name, qfb_flush_name(all[i]))) return *f = all[i], 1;
  return 0;
}

int main(int argc, char **argv) {
  qfb_config cfg = {0};
  char commit_buf[128];
  cfg.commit = getenv("QF_COMMIT");
  if (!cfg.commit) cfg.commit = build_commit(commit_buf, sizeof commit_buf);
  qfb_select sel = {NULL, 0, 0};
  int force_cpu = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cpu")) force_cpu = 1;
    else if (!strcmp(argv[i], "--jsonl") && i + 1 < argc) cfg.jsonl_path = argv[++i];
    else if (!strcmp(argv[i], "--commit") && i + 1 < argc) cfg.commit = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) cfg.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) sel.ops = argv[++i];
    else if (!strcmp(argv[i], "--m") && i + 1 < argc) sel.m = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--k") && i + 1 < argc) sel.k = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--flush") && i + 1 < argc && parse_flush(argv[i + 1], &cfg.flush)) i++;
    else if (!strcmp(argv[i], "--timing") && i + 1 < argc && parse_timing(argv[i + 1], &cfg.timing)) i++;
    else {
      usage();
      return 2;
    }
  }

  qf_ctx *ctx = NULL;
  qfb *b = NULL;
  if (!force_cpu && qf_ctx_create(&ctx, QF_DEVICE_CUDA, 0) == QF_OK) {
    cfg.use_gpu = 1;
    b = qfb_open(&cfg);
    if (!b) {
      qf_ctx_destroy(ctx);
      ctx = NULL;
    }
  }
  if (!b) {
    if (!force_cpu) printf("no usable CUDA device: timing the CPU backend on small shapes\n");
    cfg.use_gpu = 0;
    if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK || !(b = qfb_open(&cfg))) return 1;
  }

  printf("qfuse %s on %s\n", qf_version(), qfb_device_name(b));
  if (qfb_uses_gpu(b)) {
    qfb_copy_gbps(b); /* each prints its line and records a JSON row */
    qfb_fp8_tflops(b);
  }
  qfb_print_header();
  int rows = 0;
  int rc = bench_quant(b, ctx, &sel, &rows);
  rc |= bench_gemm(b, ctx, &sel, &rows);
  rc |= bench_gemm_grouped(b, ctx, &sel, &rows);
  rc |= bench_nvfp4(b, ctx, &sel, &rows);
  rc |= bench_vq(b, ctx, &sel, &rows);
  if (!rows && (sel.ops || sel.m || sel.k)) {
    fprintf(stderr, "qfuse-bench: --only %s --m %lld --k %lld matches no row\n", sel.ops ? sel.ops : "(all)",
            (long long)sel.m, (long long)sel.k);
    rc = 1;
  }
  qfb_close(b);
  qf_ctx_destroy(ctx);
  return rc;
}
