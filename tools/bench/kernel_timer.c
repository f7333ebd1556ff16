/* Kernel time through CUPTI's activity records: the GPU's own start and end timestamps of every
 * kernel, memset and memcpy that a timed run enqueues. libcupti is opened at run time, so the
 * bench runs (with event timing) where it is missing; its header is needed at build time only.
 *
 * NOTES: a run's kernel time is the sum of its records' durations (one stream: they never
 * overlap), what profilers report as kernel time. It leaves out the launch latency that a pair
 * of CUDA events brackets too (2-3 us per call on an H200: the block-scaled (128, 2112, 7168)
 * GEMM runs 11.9 us of kernel in 14.8 us of event time) and the gaps between the kernels of a
 * multi-kernel op. Those gaps are host time once CUPTI records activity: a span from the first
 * start to the last end put cuBLASLt's block-scaled GEMM at (128, 2112, 7168), two kernels, at
 * 47-60 us against 18.8 us event-timed without CUPTI. */
#define _GNU_SOURCE
#include "kernel_timer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef QF_WITH_CUPTI
#include <cupti.h>
#include <dlfcn.h>

static struct {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
  int open;
  /* the window: records delivered while it is open add their durations */
  int window;
  uint64_t ns;
  long records;
  int trace; /* QF_BENCH_TRACE set: every record of a window goes to stderr */
} cupti;

enum { kBufferBytes = 1 << 20 };

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, kBufferBytes);
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

static void add(uint64_t start, uint64_t end, const char *what) {
  if (!cupti.window || end < start) return;
  if (cupti.trace) fprintf(stderr, "qfuse-bench trace: %.3f us %s\n", (double)(end - start) * 1e-3, what);
  cupti.ns += end - start;
  cupti.records++;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *r = NULL;
  while (cupti.next_record(buffer, valid, &r) == CUPTI_SUCCESS) {
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
      add(k->start, k->end, k->name ? k->name : "kernel");
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
      add(m->start, m->end, "memset");
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
      add(m->start, m->end, "memcpy");
      break;
    }
    default: break;
    }
  }
  free(buffer);
}

int qfb_ktimer_open(void) {
  if (cupti.open) return 1;
  const char *names[] = {getenv("QF_CUPTI"), "libcupti.so.13", "libcupti.so"};
  void *lib = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
    if (names[i]) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "qfuse-bench: libcupti not found (set QF_CUPTI to its path): timing with CUDA events\n");
    return 0;
  }
  *(void **)&cupti.register_callbacks = dlsym(lib, "cuptiActivityRegisterCallbacks");
  *(void **)&cupti.enable = dlsym(lib, "cuptiActivityEnable");
  *(void **)&cupti.flush_all = dlsym(lib, "cuptiActivityFlushAll");
  *(void **)&cupti.next_record = dlsym(lib, "cuptiActivityGetNextRecord");
  if (!cupti.register_callbacks || !cupti.enable || !cupti.flush_all || !cupti.next_record ||
      cupti.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cupti.enable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
      cupti.enable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
    fprintf(stderr, "qfuse-bench: libcupti did not start its activity records: timing with CUDA events\n");
    return 0;
  }
  cupti.trace = getenv("QF_BENCH_TRACE") != NULL;
  cupti.open = 1;
  return 1;
}

/* Records of work finished before this call (the flush) land outside the window. */
int qfb_ktimer_begin(void) {
  if (cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != CUPTI_SUCCESS) return 0;
  cupti.window = 1;
  cupti.ns = 0;
  cupti.records = 0;
  return 1;
}

double qfb_ktimer_end(void) {
  const int ok = cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS;
  cupti.window = 0;
  if (!ok || cupti.records == 0) {
    fprintf(stderr, "qfuse-bench: no kernel, memset or memcpy record in a timed run\n");
    return -1.0;
  }
  return (double)cupti.ns * 1e-3;
}
#else
int qfb_ktimer_open(void) {
  fprintf(stderr, "qfuse-bench: built without the CUPTI header: timing with CUDA events\n");
  return 0;
}
int qfb_ktimer_begin(void) { return 0; }
double qfb_ktimer_end(void) { return -1.0; }
#endif
