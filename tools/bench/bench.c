/* qfuse-bench harness: sessions, timing, ceilings, table rows and JSON lines. */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/formats.h"

#ifdef QF_WITH_CUDA
#include <cuda_runtime.h>

#include "cublaslt.h"
#include "kernel_timer.h"
#endif

#define QFB_READ_MAX ((size_t)1 << 30)
#define QFB_READ_CACHE 512

struct qfb {
  int use_gpu;
  int reps;
  FILE *jsonl;
  char *commit;
  char device[256];
  int sm_count;
  size_t l2_bytes;
  qfb_flush flush_mode;
  qfb_timing timing; /* in effect */
  void *flush;        /* device buffer read (or overwritten) before every timed GPU run */
  size_t flush_bytes; /* 2x L2 */
  unsigned *sink;     /* the read pass's words */
  int copy_measured;
  double copy_gbps;
  int fp8_measured;
  double fp8_tflops;
  void *read_buf;        /* qfb_read_us: the bytes read (grown on demand, at most QFB_READ_MAX) */
  size_t read_buf_bytes;
  struct {
    size_t bytes;
    double us;
  } read_cache[QFB_READ_CACHE];
  int read_cached;
};

/* ---- small helpers ---------------------------------------------------------------------- */

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts t in place. */
static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

#ifdef QF_WITH_CUDA
static int cuda_ok(cudaError_t err, const char *call, const char *file, int line) {
  if (err == cudaSuccess) return 1;
  fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, call, cudaGetErrorName(err),
          cudaGetErrorString(err));
  return 0;
}
#define CUDA_CHECK(call) cuda_ok((call), #call, __FILE__, __LINE__)
#endif

/* ---- session ------------------------------------------------------------------------------ */

/* NOTES: why a read pass and not a memset. A memset over 2x the L2 leaves the L2 full of dirty
 * lines, and the timed kernel's misses then write them back: up to the L2's size (60 MiB on an
 * H200) of DRAM writes inside the timed region that the op's byte count does not hold. The
 * block-scaled GEMM streaming a 117 MB weight at M = 1 took 43.9 us after a memset and 38.1 us
 * after a read pass (68 -> 78% of its floor; H200, alternated twice). A read pass evicts the same
 * lines (their write-back falls inside the flush) and leaves clean ones, so a timed run starts
 * with nothing of its data in the L2 and nothing to write back. */
#define QFB_SINK_WORDS 16384u

const char *qfb_flush_name(qfb_flush f) {
  switch (f) {
  case QFB_FLUSH_READ: return "read";
  case QFB_FLUSH_MEMSET: return "memset";
  }
  return "unknown";
}

const char *qfb_timing_name(qfb_timing t) {
  switch (t) {
  case QFB_TIMING_KERNEL: return "kernel";
  case QFB_TIMING_EVENT: return "event";
  }
  return "unknown";
}

#ifdef QF_WITH_CUDA
static int open_gpu(qfb *b) {
  int count = 0, sms = 0, l2 = 0;
  struct cudaDeviceProp prop;
  if (!CUDA_CHECK(cudaGetDeviceCount(&count))) return 0;
  if (count < 1) {
    fprintf(stderr, "qfb_open: no CUDA device\n");
    return 0;
  }
  if (!CUDA_CHECK(cudaSetDevice(0))) return 0;
  if (!CUDA_CHECK(cudaGetDeviceProperties(&prop, 0))) return 0;
  if (!CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0))) return 0;
  if (!CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0))) return 0;
  snprintf(b->device, sizeof b->device, "%s", prop.name);
  b->sm_count = sms;
  b->l2_bytes = (size_t)(l2 > 0 ? l2 : 0);
  b->flush_bytes = 2 * b->l2_bytes;
  if (b->flush_bytes < ((size_t)1 << 20)) b->flush_bytes = (size_t)1 << 20;
  if (!CUDA_CHECK(cudaMalloc(&b->flush, b->flush_bytes))) return 0;
  if (!CUDA_CHECK(cudaMemset(b->flush, 0, b->flush_bytes))) return 0;
  if (!CUDA_CHECK(cudaMalloc((void **)&b->sink, QFB_SINK_WORDS * sizeof(unsigned)))) return 0;
  if (!CUDA_CHECK(cudaDeviceSynchronize())) return 0;
  if (b->timing == QFB_TIMING_KERNEL && !qfb_ktimer_open()) b->timing = QFB_TIMING_EVENT;
  return 1;
}
#endif

qfb *qfb_open(const qfb_config *cfg) {
  if (!cfg) {
    fprintf(stderr, "qfb_open: no configuration\n");
    return NULL;
  }
  qfb *b = calloc(1, sizeof *b);
  if (!b) {
    fprintf(stderr, "qfb_open: out of host memory\n");
    return NULL;
  }
  b->use_gpu = cfg->use_gpu != 0;
  b->flush_mode = cfg->flush;
  b->timing = cfg->timing;
  b->reps = cfg->reps > 0 ? cfg->reps : QFB_DEFAULT_REPS;
  if (b->reps < QFB_MIN_REPS) {
    fprintf(stderr, "qfb_open: reps=%d raised to the minimum of %d\n", b->reps, QFB_MIN_REPS);
    b->reps = QFB_MIN_REPS;
  }
  b->commit = dup_string(cfg->commit ? cfg->commit : "unknown");
  if (!b->commit) {
    fprintf(stderr, "qfb_open: out of host memory\n");
    qfb_close(b);
    return NULL;
  }
  if (cfg->jsonl_path) {
    b->jsonl = fopen(cfg->jsonl_path, "a");
    if (!b->jsonl) {
      fprintf(stderr, "qfb_open: cannot open %s for appending: ", cfg->jsonl_path);
      perror(NULL);
      qfb_close(b);
      return NULL;
    }
  }
  if (b->use_gpu) {
#ifdef QF_WITH_CUDA
    if (!open_gpu(b)) {
      qfb_close(b);
      return NULL;
    }
#else
    fprintf(stderr, "qfb_open: the GPU was asked for, but this build has no CUDA\n");
    qfb_close(b);
    return NULL;
#endif
  } else {
    snprintf(b->device, sizeof b->device, "cpu");
  }
  if (b->use_gpu)
    printf("device: %s, %d SMs, L2 %.1f MiB, %d warm-up + %d timed runs, L2 flush: %s of %.0f MiB, "
           "timing: %s\n",
           b->device, b->sm_count, (double)b->l2_bytes / (1 << 20), QFB_WARMUP, b->reps,
           qfb_flush_name(b->flush_mode), (double)b->flush_bytes / (1 << 20), qfb_timing_name(b->timing));
  else
    printf("device: cpu, %d warm-up + %d timed runs\n", QFB_WARMUP, b->reps);
  return b;
}

void qfb_close(qfb *b) {
  if (!b) return;
#ifdef QF_WITH_CUDA
  if (b->flush) CUDA_CHECK(cudaFree(b->flush));
  if (b->sink) CUDA_CHECK(cudaFree(b->sink));
  if (b->read_buf) CUDA_CHECK(cudaFree(b->read_buf));
#endif
  if (b->jsonl) fclose(b->jsonl);
  free(b->commit);
  free(b);
}

const char *qfb_device_name(const qfb *b) { return b ? b->device : "unknown"; }
int qfb_sm_count(const qfb *b) { return b ? b->sm_count : 0; }
size_t qfb_l2_bytes(const qfb *b) { return b ? b->l2_bytes : 0; }
qfb_timing qfb_set_timing(qfb *b, qfb_timing t) {
  const qfb_timing old = b->timing;
#ifdef QF_WITH_CUDA
  if (t == QFB_TIMING_EVENT || qfb_ktimer_open()) b->timing = t;
#else
  b->timing = t; /* (no GPU runs to time) */
#endif
  return old;
}

int qfb_emit_pdl_pair(qfb *b, qfb_row *row, int (*fn)(void *arg), void *pdl, void *plain) {
  const qfb_timing was = qfb_set_timing(b, QFB_TIMING_EVENT);
  const double before = qfb_time_us(b, fn, plain);
  row->us = qfb_time_us(b, fn, pdl);
  const double after = qfb_time_us(b, fn, plain);
  row->peer_us = 0.5 * (before + after);
  row->peer = "no_pdl (same calls)";
  qfb_emit(b, row);
  qfb_set_timing(b, was);
  return row->us > 0 && before > 0 && after > 0 ? 0 : 1;
}

int qfb_reps(const qfb *b) { return b ? b->reps : 0; }
int qfb_uses_gpu(const qfb *b) { return b ? b->use_gpu : 0; }

/* ---- timing ------------------------------------------------------------------------------- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static double time_cpu(qfb *b, int (*fn)(void *), void *arg, double *t) {
  for (int i = 0; i < QFB_WARMUP + b->reps; ++i) {
    const double t0 = now_us();
    const int rc = fn(arg);
    const double t1 = now_us();
    if (rc != 0) {
      fprintf(stderr, "qfb_time_us: the benchmarked function returned %d (run %d)\n", rc, i);
      return -1.0;
    }
    if (i >= QFB_WARMUP) t[i - QFB_WARMUP] = t1 - t0;
  }
  return median(t, b->reps);
}

#ifdef QF_WITH_CUDA
/* NOTES: event timing: the flush runs before the start event on the same stream, so it is
 * outside the timed region; while the GPU works through it the host has already enqueued fn, so
 * the start event does not wait on host launch overhead either. One event pair is reused, read
 * after cudaEventSynchronize on the stop event of each run. Kernel timing: the GPU finishes the
 * flush and its records are drained before the run's window opens, and the window closes after
 * the GPU has finished the run (kernel_timer.c). */
static int flush_l2(qfb *b, int i) {
  switch (b->flush_mode) {
  case QFB_FLUSH_READ: return qfb_read16(b->flush, b->flush_bytes / 16 * 16, b->sink, QFB_SINK_WORDS, 0) == 0;
  case QFB_FLUSH_MEMSET: return CUDA_CHECK(cudaMemsetAsync(b->flush, i & 0xff, b->flush_bytes, 0));
  }
  return 0;
}

static double time_gpu(qfb *b, int (*fn)(void *), void *arg, double *t) {
  cudaEvent_t start = NULL, stop = NULL;
  double result = -1.0;
  cudaError_t pending = cudaGetLastError();
  if (pending != cudaSuccess) {
    fprintf(stderr, "qfb_time_us: CUDA error pending before timing: %s (%s)\n",
            cudaGetErrorName(pending), cudaGetErrorString(pending));
    return -1.0;
  }
  const int kernel = b->timing == QFB_TIMING_KERNEL;
  if (!CUDA_CHECK(cudaEventCreate(&start)) || !CUDA_CHECK(cudaEventCreate(&stop))) goto done;
  for (int i = 0; i < QFB_WARMUP + b->reps; ++i) {
    float ms = 0.0f;
    if (!flush_l2(b, i)) goto done;
    if (kernel && (!CUDA_CHECK(cudaDeviceSynchronize()) || !qfb_ktimer_begin())) goto done;
    if (!CUDA_CHECK(cudaEventRecord(start, 0))) goto done;
    const int rc = fn(arg);
    if (rc != 0) {
      fprintf(stderr, "qfb_time_us: the benchmarked function returned %d (run %d)\n", rc, i);
      CUDA_CHECK(cudaDeviceSynchronize());
      goto done;
    }
    if (!CUDA_CHECK(cudaGetLastError())) goto done;
    if (!CUDA_CHECK(cudaEventRecord(stop, 0))) goto done;
    if (!CUDA_CHECK(cudaEventSynchronize(stop))) goto done;
    if (!CUDA_CHECK(cudaGetLastError())) goto done;
    if (!kernel && !CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop))) goto done;
    const double us = kernel ? qfb_ktimer_end() : 1e3 * (double)ms;
    if (us < 0.0) goto done;
    if (i >= QFB_WARMUP) t[i - QFB_WARMUP] = us;
  }
  result = median(t, b->reps);
done:
  if (stop) CUDA_CHECK(cudaEventDestroy(stop));
  if (start) CUDA_CHECK(cudaEventDestroy(start));
  return result;
}
#endif

double qfb_time_us(qfb *b, int (*fn)(void *arg), void *arg) {
  if (!b || !fn) {
    fprintf(stderr, "qfb_time_us: null session or function\n");
    return -1.0;
  }
  double *t = malloc((size_t)b->reps * sizeof *t);
  if (!t) {
    fprintf(stderr, "qfb_time_us: out of host memory\n");
    return -1.0;
  }
  double us = -1.0;
  if (!b->use_gpu) {
    us = time_cpu(b, fn, arg, t);
  } else {
#ifdef QF_WITH_CUDA
    us = time_gpu(b, fn, arg, t);
#endif
  }
  free(t);
  return us;
}

/* ---- rows ------------------------------------------------------------------------------- */

#define QFB_ROW_FMT "%-22s %-36s %-24s %10s %9s %8s %7s %6s %-18s %10s %7s\n"

void qfb_print_header(void) {
  printf(QFB_ROW_FMT, "op", "variant", "shape", "us", "GB/s", "TFLOPS", "%floor", "%read", "peer",
         "peer us", "ratio");
}

/* A finite positive number, or NaN meaning "not applicable". */
static double or_nan(int applicable, double v) {
  return applicable && isfinite(v) ? v : NAN;
}

static void fmt_num(char *buf, size_t n, double v, int decimals) {
  if (isnan(v))
    snprintf(buf, n, "-");
  else
    snprintf(buf, n, "%.*f", decimals, v);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    case '\b': fputs("\\b", f); break;
    case '\f': fputs("\\f", f); break;
    default:
      if (*p < 0x20 || *p == 0x7f)
        fprintf(f, "\\u%04x", (unsigned)*p);
      else
        fputc(*p, f);
    }
  }
  fputc('"', f);
}

static void json_key_string(FILE *f, const char *key, const char *s, int last) {
  fprintf(f, "\"%s\":", key);
  if (s)
    json_string(f, s);
  else
    fputs("null", f);
  fputs(last ? "}" : ",", f);
}

static void json_key_number(FILE *f, const char *key, double v, int last) {
  fprintf(f, "\"%s\":", key);
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
  fputs(last ? "}" : ",", f);
}

/* The bytes term of a row's floor: bytes at the session's copy ceiling, in microseconds (0 while
 * the ceiling is unmeasured or there are no bytes). */
static double bytes_term_us(const qfb *b, double bytes) {
  return bytes > 0.0 && b->copy_gbps > 0.0 ? bytes / (b->copy_gbps * 1e3) : 0.0;
}

/* The table row goes to stdout when print is set; the JSON line goes to the file when open. */
static void emit_row(qfb *b, const qfb_row *r, int print) {
  const int ok = r->us > 0.0 && isfinite(r->us);
  const int has_peer = r->peer != NULL;
  const int peer_ok = has_peer && r->peer_us > 0.0 && isfinite(r->peer_us);
  const double us = or_nan(ok, r->us);
  const double gbps = or_nan(ok && r->bytes > 0.0, r->bytes / (r->us * 1e3));
  const double tflops = or_nan(ok && r->flops > 0.0, r->flops / (r->us * 1e6));
  const double pct = or_nan(ok && r->floor_us > 0.0, 100.0 * r->floor_us / r->us);
  /* the read floor where the bytes set the row's floor (qfb_floor_us's bytes term equals it) */
  const int memory_bound = ok && r->floor_us > 0.0 && bytes_term_us(b, r->bytes) >= r->floor_us;
  const double read_raw = memory_bound ? qfb_read_us(b, r->bytes) : 0.0;
  const double read_us = or_nan(read_raw > 0.0, read_raw);
  const double pct_read = or_nan(read_raw > 0.0, 100.0 * read_raw / r->us);
  const double peer_us = or_nan(peer_ok, r->peer_us);
  const double ratio = or_nan(ok && peer_ok, r->peer_us / r->us);
  const char *op = r->op ? r->op : "";
  const char *variant = r->variant ? r->variant : "";
  const char *shape = r->shape ? r->shape : "";

  char s_us[32], s_gbps[32], s_tf[32], s_pct[32], s_read[32], s_peer_us[32], s_ratio[32];
  if (ok)
    fmt_num(s_us, sizeof s_us, us, 2);
  else
    snprintf(s_us, sizeof s_us, "FAILED");
  fmt_num(s_gbps, sizeof s_gbps, gbps, 1);
  fmt_num(s_tf, sizeof s_tf, tflops, 1);
  fmt_num(s_pct, sizeof s_pct, pct, 1);
  fmt_num(s_read, sizeof s_read, pct_read, 1);
  if (has_peer && !peer_ok)
    snprintf(s_peer_us, sizeof s_peer_us, "FAILED");
  else
    fmt_num(s_peer_us, sizeof s_peer_us, peer_us, 2);
  fmt_num(s_ratio, sizeof s_ratio, ratio, 2);
  if (print) {
    printf(QFB_ROW_FMT, op, variant, shape, s_us, s_gbps, s_tf, s_pct, s_read, has_peer ? r->peer : "-",
           s_peer_us, s_ratio);
    fflush(stdout);
  }

  if (!b->jsonl) return;
  FILE *f = b->jsonl;
  fputc('{', f);
  json_key_string(f, "op", op, 0);
  json_key_string(f, "variant", variant, 0);
  json_key_string(f, "shape", shape, 0);
  json_key_string(f, "device", b->device, 0);
  json_key_string(f, "commit", b->commit, 0);
  json_key_string(f, "backend", b->use_gpu ? "cuda" : "cpu", 0);
  json_key_string(f, "flush", b->use_gpu ? qfb_flush_name(b->flush_mode) : NULL, 0);
  json_key_string(f, "timing", b->use_gpu ? qfb_timing_name(b->timing) : NULL, 0);
  json_key_number(f, "us", us, 0);
  json_key_number(f, "gbps", gbps, 0);
  json_key_number(f, "tflops", tflops, 0);
  json_key_number(f, "pct_floor", pct, 0);
  json_key_number(f, "read_us", read_us, 0);
  json_key_number(f, "pct_read", pct_read, 0);
  json_key_string(f, "peer", r->peer, 0);
  json_key_number(f, "peer_us", peer_us, 0);
  json_key_number(f, "ratio", ratio, 1);
  fputc('\n', f);
  if (fflush(f) != 0) perror("qfb_emit: writing the JSON lines file");
}

void qfb_emit(qfb *b, const qfb_row *r) {
  if (!b || !r) return;
  emit_row(b, r, 1);
}

/* ---- ceilings ------------------------------------------------------------------------------ */

double qfb_bf16_distance(const uint16_t *v, const uint16_t *ref, size_t n) {
  double e2 = 0.0, r2 = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double r = qf_bf16_to_f32(ref[i]), d = qf_bf16_to_f32(v[i]) - r;
    e2 += d * d, r2 += r * r;
  }
  return sqrt(e2 / (r2 > 0.0 ? r2 : 1e-300));
}

#ifdef QF_WITH_CUDA
typedef struct {
  const void *src;
  void *dst;
  size_t bytes;
} copy_args;

static int run_copy16(void *p) {
  const copy_args *a = p;
  return qfb_copy16(a->src, a->dst, a->bytes, 0);
}

static int run_memcpy(void *p) {
  const copy_args *a = p;
  return CUDA_CHECK(cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, 0)) ? 0 : 1;
}

/* Checks that dst holds the byte pattern at its start, middle and end. */
static int copy_landed(const unsigned char *dst, size_t bytes, unsigned char pattern) {
  unsigned char probe[4096];
  const size_t n = bytes < sizeof probe ? bytes : sizeof probe;
  const size_t offsets[3] = {0, (bytes - n) / 2, bytes - n};
  for (int k = 0; k < 3; ++k) {
    if (!CUDA_CHECK(cudaMemcpy(probe, dst + offsets[k], n, cudaMemcpyDeviceToHost))) return 0;
    for (size_t i = 0; i < n; ++i)
      if (probe[i] != pattern) {
        fprintf(stderr, "qfb_copy_gbps: copy16 left byte %zu = 0x%02x, expected 0x%02x\n",
                offsets[k] + i, probe[i], pattern);
        return 0;
      }
  }
  return 1;
}

static double measure_copy(qfb *b) {
  const unsigned char pattern = 0x5a;
  size_t bytes = (size_t)2 << 30, free_b = 0, total_b = 0;
  void *src = NULL, *dst = NULL;
  double gbps = 0.0;
  if (!CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b))) return 0.0;
  /* two buffers plus headroom for the caller's own allocations */
  while (bytes > ((size_t)64 << 20) && 2 * bytes + ((size_t)1 << 30) > free_b) bytes /= 2;
  if (!CUDA_CHECK(cudaMalloc(&src, bytes)) || !CUDA_CHECK(cudaMalloc(&dst, bytes))) goto done;
  if (!CUDA_CHECK(cudaMemset(src, pattern, bytes)) || !CUDA_CHECK(cudaMemset(dst, 0, bytes)))
    goto done;
  copy_args args = {src, dst, bytes};
  if (run_copy16(&args) != 0 || !CUDA_CHECK(cudaDeviceSynchronize())) goto done;
  if (!copy_landed(dst, bytes, pattern)) goto done;

  const double us = qfb_time_us(b, run_copy16, &args);
  if (us <= 0.0) goto done;
  const double memcpy_us = qfb_time_us(b, run_memcpy, &args);
  gbps = 2.0 * (double)bytes / (us * 1e3);
  const double mib = (double)bytes / (1 << 20);
  printf("ceiling: copy16 %.0f MiB: %.1f GB/s (read+write)\n", mib, gbps);
  if (memcpy_us > 0.0)
    printf("ceiling: cudaMemcpy D2D %.0f MiB: %.1f GB/s (read+write), copy16 at %.1f%% of it\n",
           mib, 2.0 * (double)bytes / (memcpy_us * 1e3), 100.0 * memcpy_us / us);
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess &&
      clock_khz > 0 && bus_bits > 0) {
    const double peak = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    printf("ceiling: DRAM peak (2 x %d MHz x %d bit): %.1f GB/s, copy16 at %.1f%% of it\n",
           clock_khz / 1000, bus_bits, peak, 100.0 * gbps / peak);
  }
  (void)cudaGetLastError(); /* an unsupported attribute above is not an error of ours */

  char shape[64];
  snprintf(shape, sizeof shape, "bytes=%zu", bytes);
  const qfb_row row = {"ceiling_copy", "copy16", shape, us, 2.0 * (double)bytes, 0.0, 0.0,
                       memcpy_us > 0.0 ? "cudaMemcpy" : NULL, memcpy_us > 0.0 ? memcpy_us : 0.0};
  emit_row(b, &row, 0);
done:
  if (dst) CUDA_CHECK(cudaFree(dst));
  if (src) CUDA_CHECK(cudaFree(src));
  return gbps;
}

typedef struct {
  qfb_lt_gemm *gemm;
  const void *a, *b;
  const float *a_scale, *b_scale;
  void *d;
} gemm_args;

static int run_gemm(void *p) {
  const gemm_args *g = p;
  return qfb_lt_gemm_run(g->gemm, g->a, g->b, g->a_scale, g->b_scale, g->d, 0);
}

/* Random e4m3 bytes: no NaN (S.1111.111) and no zero, so every product is real work. */
static void fill_e4m3(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    unsigned char v = (unsigned char)(x >> 24);
    if ((v & 0x7f) == 0x7f) v ^= 0x01;
    if ((v & 0x7f) == 0x00) v |= 0x38;
    p[i] = v;
  }
}

static double measure_fp8(qfb *b) {
  const int64_t M = 8192, N = 8192, K = 8192;
  const size_t a_bytes = (size_t)(M * K), b_bytes = (size_t)(N * K), d_bytes = (size_t)(M * N) * 2;
  /* a at [0], b at [4]: cuBLASLt wants each scale pointer 16-byte aligned */
  const float scales[8] = {0.5f, 0, 0, 0, 0.25f, 0, 0, 0};
  qfb_lt *lt = NULL;
  qfb_lt_gemm *gemm = NULL;
  void *a = NULL, *bm = NULL, *d = NULL;
  float *sc = NULL;
  unsigned char *host = NULL;
  double tflops = 0.0;

  if (!(lt = qfb_lt_open())) goto done;
  if (!(gemm = qfb_lt_gemm_plan(lt, M, N, K, QFB_LT_SCALE_TENSOR))) goto done;
  if (!CUDA_CHECK(cudaMalloc(&a, a_bytes)) || !CUDA_CHECK(cudaMalloc(&bm, b_bytes)) ||
      !CUDA_CHECK(cudaMalloc(&d, d_bytes)) || !CUDA_CHECK(cudaMalloc((void **)&sc, sizeof scales)))
    goto done;
  host = malloc(a_bytes > b_bytes ? a_bytes : b_bytes);
  if (!host) {
    fprintf(stderr, "qfb_fp8_tflops: out of host memory\n");
    goto done;
  }
  fill_e4m3(host, a_bytes, 0x9e3779b97f4a7c15ull);
  if (!CUDA_CHECK(cudaMemcpy(a, host, a_bytes, cudaMemcpyHostToDevice))) goto done;
  fill_e4m3(host, b_bytes, 0xd1b54a32d192ed03ull);
  if (!CUDA_CHECK(cudaMemcpy(bm, host, b_bytes, cudaMemcpyHostToDevice))) goto done;
  if (!CUDA_CHECK(cudaMemcpy(sc, scales, sizeof scales, cudaMemcpyHostToDevice))) goto done;
  if (!CUDA_CHECK(cudaMemset(d, 0xff, d_bytes))) goto done; /* bf16 NaN until written */

  gemm_args args = {gemm, a, bm, sc, sc + 4, d};
  const double us = qfb_time_us(b, run_gemm, &args);
  if (us <= 0.0) goto done;

  /* the product must have been written: first row finite and not all zero */
  uint16_t row0[1024];
  if (!CUDA_CHECK(cudaMemcpy(row0, d, sizeof row0, cudaMemcpyDeviceToHost))) goto done;
  int nonzero = 0;
  for (size_t i = 0; i < sizeof row0 / sizeof row0[0]; ++i) {
    const float v = qf_bf16_to_f32(row0[i]);
    if (!isfinite(v)) {
      fprintf(stderr, "qfb_fp8_tflops: D[0][%zu] is not finite\n", i);
      goto done;
    }
    nonzero |= v != 0.0f;
  }
  if (!nonzero) {
    fprintf(stderr, "qfb_fp8_tflops: D[0][0..1023] is all zero\n");
    goto done;
  }

  const double flops = 2.0 * (double)M * (double)N * (double)K;
  tflops = flops / (us * 1e6);
  printf("ceiling: cuBLASLt %zu fp8 e4m3 %lldx%lldx%lld, per-tensor scales, bf16 out: %.1f TFLOPS\n",
         qfb_lt_version(), (long long)M, (long long)N, (long long)K, tflops);
  const qfb_row row = {"ceiling_fp8_gemm", "cublaslt_e4m3_tensor", "M=8192,N=8192,K=8192", us,
                       0.0, flops, 0.0, NULL, 0.0};
  emit_row(b, &row, 0);
done:
  free(host);
  if (sc) CUDA_CHECK(cudaFree(sc));
  if (d) CUDA_CHECK(cudaFree(d));
  if (bm) CUDA_CHECK(cudaFree(bm));
  if (a) CUDA_CHECK(cudaFree(a));
  qfb_lt_gemm_free(gemm);
  qfb_lt_close(lt);
  return tflops;
}
#endif

double qfb_copy_gbps(qfb *b) {
  if (!b || !b->use_gpu) return 0.0;
  if (!b->copy_measured) {
    b->copy_measured = 1;
#ifdef QF_WITH_CUDA
    b->copy_gbps = measure_copy(b);
#endif
    if (b->copy_gbps <= 0.0) fprintf(stderr, "qfb_copy_gbps: no copy ceiling this session\n");
  }
  return b->copy_gbps;
}

double qfb_fp8_tflops(qfb *b) {
  if (!b || !b->use_gpu) return 0.0;
  if (!b->fp8_measured) {
    b->fp8_measured = 1;
#ifdef QF_WITH_CUDA
    b->fp8_tflops = measure_fp8(b);
#endif
    if (b->fp8_tflops <= 0.0) fprintf(stderr, "qfb_fp8_tflops: no FP8 ceiling this session\n");
  }
  return b->fp8_tflops;
}

#ifdef QF_WITH_CUDA
typedef struct {
  qfb *b;
  size_t bytes;
} read_arg;

static int run_read(void *p) {
  const read_arg *a = p;
  return qfb_read16(a->b->read_buf, a->bytes, a->b->sink, QFB_SINK_WORDS, 0);
}

/* A read buffer of at least n bytes (0: none). */
static int read_buffer(qfb *b, size_t n) {
  if (n <= b->read_buf_bytes) return 1;
  if (b->read_buf) CUDA_CHECK(cudaFree(b->read_buf));
  b->read_buf = NULL;
  b->read_buf_bytes = 0;
  const size_t size = (n + ((size_t)64 << 20) - 1) / ((size_t)64 << 20) * ((size_t)64 << 20);
  if (!CUDA_CHECK(cudaMalloc(&b->read_buf, size))) return 0;
  if (!CUDA_CHECK(cudaMemset(b->read_buf, 0, size)) || !CUDA_CHECK(cudaDeviceSynchronize())) return 0;
  b->read_buf_bytes = size;
  return 1;
}
#endif

double qfb_read_us(qfb *b, double bytes) {
  if (!b || !b->use_gpu || !(bytes > 0.0) || bytes > (double)QFB_READ_MAX) return 0.0;
  const size_t n = ((size_t)bytes + 15) / 16 * 16;
  for (int i = 0; i < b->read_cached; i++)
    if (b->read_cache[i].bytes == n) return b->read_cache[i].us;
  double us = 0.0;
#ifdef QF_WITH_CUDA
  if (read_buffer(b, n)) {
    read_arg a = {b, n};
    us = qfb_time_us(b, run_read, &a);
    if (us < 0.0) us = 0.0;
  }
#endif
  if (b->read_cached < QFB_READ_CACHE) {
    b->read_cache[b->read_cached].bytes = n;
    b->read_cache[b->read_cached].us = us;
    b->read_cached++;
  }
  return us;
}

double qfb_floor_us(qfb *b, double bytes, double flops, double peak_tflops) {
  if (bytes > 0.0) qfb_copy_gbps(b);  /* (measured on first use) */
  double floor_us = bytes_term_us(b, bytes);
  if (flops > 0.0) {
    const double peak = peak_tflops > 0.0 ? peak_tflops : qfb_fp8_tflops(b);
    if (peak > 0.0 && flops / (peak * 1e6) > floor_us) floor_us = flops / (peak * 1e6);
  }
  return floor_us;
}
