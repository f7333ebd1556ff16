/* GPU test helpers: checked CUDA calls and host/device buffer pairs. */
#ifndef QF_TEST_GPU_H
#define QF_TEST_GPU_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "check.h"
#include "qfuse.h"
#include "tensors.h"

#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_));     \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

static inline void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

/* Opens the CUDA context under test and the CPU reference context; exits when there is no GPU. */
static inline void open_contexts(qf_ctx **gpu, qf_ctx **cpu) {
  qf_status st = qf_ctx_create(gpu, QF_DEVICE_CUDA, 0);
  if (st != QF_OK) {
    fprintf(stderr, "no CUDA context: %s\n", qf_status_str(st));
    exit(1);
  }
  if (qf_ctx_create(cpu, QF_DEVICE_CPU, 0) != QF_OK) exit(1);
}

/* QF_TEST_QUICK (the compute-sanitizer pass): small shapes only. */
static inline int quick_mode(void) { return getenv("QF_TEST_QUICK") != NULL; }

/* A random finite e4m3fn code (0x7F and 0xFF are the NaNs). */
static inline uint8_t draw_e4m3(uint64_t *seed) {
  uint8_t b = (uint8_t)(rng_next(seed) >> 56);
  return (b & 0x7F) == 0x7F ? (uint8_t)(b ^ 1) : b;
}

/* ---- CUDA graphs ----------------------------------------------------------------------- */

/* A CUDA context on a non-blocking stream of its own, and a graph captured on that stream. */
typedef struct {
  cudaStream_t stream;
  qf_ctx *ctx;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
} graph_ctx;

/* Opens g: its context on its own stream, PDL as given, `workspace` bytes reserved (a capture
 * cannot grow the workspace; 0: none reserved). Whether it worked (checked, named by `what`). */
static inline int graph_open(graph_ctx *g, int pdl, size_t workspace, const char *what) {
  memset(g, 0, sizeof *g);
  CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  return CHECK(qf_ctx_create(&g->ctx, QF_DEVICE_CUDA, 0) == QF_OK && qf_ctx_set_stream(g->ctx, g->stream) == QF_OK &&
                   qf_ctx_set_pdl(g->ctx, pdl) == QF_OK &&
                   (workspace == 0 || qf_ctx_reserve_workspace(g->ctx, workspace) == QF_OK),
               "%s: a graph context (PDL %d, %zu bytes of workspace): %s", what, pdl, workspace,
               g->ctx ? qf_ctx_last_error(g->ctx) : "none");
}

static inline void graph_begin(graph_ctx *g) { CUDA_OK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeGlobal)); }

/* Ends the capture begun by graph_begin and, where the captured calls all returned QF_OK
 * (`calls_ok`), instantiates it. Whether the graph is ready to launch (checked). */
static inline int graph_end(graph_ctx *g, int calls_ok, const char *what) {
  const cudaError_t end = cudaStreamEndCapture(g->stream, &g->graph);
  const cudaError_t inst = end == cudaSuccess && calls_ok ? cudaGraphInstantiate(&g->exec, g->graph, 0) : cudaErrorUnknown;
  return CHECK(calls_ok && end == cudaSuccess && inst == cudaSuccess, "%s: the calls captured in a CUDA graph: %s (%s)", what,
               calls_ok ? cudaGetErrorString(end == cudaSuccess ? inst : end) : "a call failed", qf_ctx_last_error(g->ctx));
}

/* Runs the graph once and waits for it; the device is synchronized first, so that the copies and
 * fills the test made on the legacy stream are done. */
static inline void graph_replay(graph_ctx *g) {
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGraphLaunch(g->exec, g->stream));
  CUDA_OK(cudaStreamSynchronize(g->stream));
}

static inline void graph_close(graph_ctx *g) {
  if (g->exec) CUDA_OK(cudaGraphExecDestroy(g->exec));
  if (g->graph) CUDA_OK(cudaGraphDestroy(g->graph));
  qf_ctx_destroy(g->ctx);
  CUDA_OK(cudaStreamDestroy(g->stream));
}

/* Whether every one of the n device bytes at dev equals `byte`. */
static inline int dev_holds(const void *dev, size_t n, uint8_t byte) {
  uint8_t *h = malloc(n);
  CUDA_OK(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
  int clean = 1;
  for (size_t i = 0; i < n; i++) clean &= h[i] == byte;
  free(h);
  return clean;
}

/* Whether the n device bytes at dev still hold the poison byte (a sentinel left untouched). */
static inline int dev_poisoned(const void *dev, size_t n) { return dev_holds(dev, n, POISON); }

enum { PAIR_TAIL = 64 };

/* ---- host/device buffer pairs ------------------------------------------------------------ */

/* The CPU backend's buffer (ref), the CUDA backend's (dev) and its copy back (got): `bytes` of
 * data (or poison) followed by PAIR_TAIL poisoned bytes. */
typedef struct {
  uint8_t *ref, *got;
  void *dev;
  size_t bytes;
} pair;

static inline void pair_init(pair *p, size_t bytes, const void *init) {
  p->bytes = bytes + PAIR_TAIL;
  p->ref = malloc(p->bytes);
  p->got = malloc(p->bytes);
  p->dev = dev_alloc(p->bytes);
  memset(p->ref, POISON, p->bytes);
  if (init) memcpy(p->ref, init, bytes);
  CUDA_OK(cudaMemcpy(p->dev, p->ref, p->bytes, cudaMemcpyHostToDevice));
}

/* Compares the device buffer with the reference, every byte including the sentinel tail. */
static inline void pair_check(pair *p, const char *what, const char *desc) {
  CUDA_OK(cudaMemcpy(p->got, p->dev, p->bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < p->bytes; i++)
    if (p->got[i] != p->ref[i] && bad++ == 0) first = i;
  CHECK(bad == 0, "%s: %s: %zu bytes differ, first at byte %zu%s (gpu 0x%02x, cpu 0x%02x)", desc, what, bad, first,
        first >= p->bytes - PAIR_TAIL ? " (sentinel)" : "", bad ? p->got[first] : 0, bad ? p->ref[first] : 0);
}

static inline void pair_free(pair *p) {
  free(p->ref), free(p->got);
  CUDA_OK(cudaFree(p->dev));
}

#endif
