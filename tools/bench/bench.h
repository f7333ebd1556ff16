/* qfuse-bench harness: timing, ceilings and result rows.
 *
 * One session (qfb) times callbacks on CUDA device 0 (events on the legacy default stream, L2
 * flushed before every run) or on the CPU (CLOCK_MONOTONIC), reports the median, and writes
 * each result as an aligned table row on stdout plus one JSON object per line to a file.
 * See tools/bench/README.md for the method. */
#ifndef QFUSE_TOOLS_BENCH_H
#define QFUSE_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>

#if defined(QF_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define QFB_DEFAULT_REPS 30
#define QFB_MIN_REPS 20
#define QFB_WARMUP 5

typedef struct qfb qfb; /* one benchmark session */

/* How the L2 is emptied before each timed GPU run (outside the timed region). */
typedef enum {
  QFB_FLUSH_READ = 0, /* default: a read pass over 2x the L2: the L2 is left holding clean lines */
  QFB_FLUSH_MEMSET    /* cudaMemsetAsync over 2x the L2 (the method before): up to the L2's size of
                         dirty lines, written back to DRAM inside the timed run that follows */
} qfb_flush;

const char *qfb_flush_name(qfb_flush f); /* "read", "memset" */

/* What a timed GPU run's time is. */
typedef enum {
  QFB_TIMING_KERNEL = 0, /* default: the durations of the run's kernels (memsets, memcpys) on the
                            GPU added up, from CUPTI's activity records; falls back to
                            QFB_TIMING_EVENT, with a message, where libcupti cannot be loaded */
  QFB_TIMING_EVENT       /* a CUDA event pair around the run: the launch latency too */
} qfb_timing;

const char *qfb_timing_name(qfb_timing t); /* "kernel", "event" */

typedef struct {
  int use_gpu;            /* 1: time on CUDA device 0, 0: time CPU code */
  const char *jsonl_path; /* append JSON lines here; NULL: none */
  const char *commit;     /* git commit string for the rows; NULL -> "unknown" */
  int reps;               /* timed runs per measurement; <= 0 -> QFB_DEFAULT_REPS; raised to QFB_MIN_REPS */
  qfb_flush flush;        /* zero: QFB_FLUSH_READ */
  qfb_timing timing;      /* zero: QFB_TIMING_KERNEL */
} qfb_config;

/* Opens a session. NULL (and a message on stderr) when the GPU is asked for but CUDA is not built
 * in or fails, or when jsonl_path cannot be opened for appending. */
qfb *qfb_open(const qfb_config *cfg);
void qfb_close(qfb *b);

const char *qfb_device_name(const qfb *b); /* e.g. "NVIDIA H100 80GB HBM3", or "cpu" */
int qfb_sm_count(const qfb *b);            /* 0 on the CPU */
size_t qfb_l2_bytes(const qfb *b);         /* 0 on the CPU */
int qfb_reps(const qfb *b);                /* timed runs per measurement after clamping */
int qfb_uses_gpu(const qfb *b);

/* Median time in microseconds of fn(arg) over the session's reps timed runs, after QFB_WARMUP
 * untimed runs. GPU: before every run (outside the timed region) the L2 is flushed as the
 * session's qfb_flush says (by default a read pass over a buffer of twice the L2 size); fn must
 * enqueue its work on the legacy default stream (stream 0); a run's time is its kernel time or
 * its event time as the session's qfb_timing says. CPU: each run is bracketed by
 * clock_gettime(CLOCK_MONOTONIC).
 * Returns a negative value, after printing why, if fn returns nonzero or a CUDA error occurs. */
double qfb_time_us(qfb *b, int (*fn)(void *arg), void *arg);

/* Sets the session's timing (for the measurements and rows that follow) and returns the one it
 * had; kernel timing where CUPTI is missing stays event timing. For rows whose work overlaps
 * across kernels (programmatic dependent launch), which only event timing sees. */
qfb_timing qfb_set_timing(qfb *b, qfb_timing t);

typedef struct {
  const char *op, *variant, *shape; /* e.g. "quant_per_tensor", "bf16->e4m3fn", "M=4096,K=7168" */
  double us;                        /* median time; <= 0 means the measurement failed */
  double bytes;                     /* bytes moved (0 if n/a) -> GB/s */
  double flops;                     /* flops (0 if n/a) -> TFLOPS */
  double floor_us;                  /* max(bytes/copy_bw, flops/peak); 0 if unknown */
  const char *peer;                 /* peer name; NULL if none */
  double peer_us;                   /* peer median time; 0 if none */
} qfb_row;

void qfb_print_header(void);
/* Prints one aligned row (op, variant, shape, us, GB/s, TFLOPS, %floor, %read, peer, peer us,
 * ratio = peer_us/us) and appends one JSON line with the keys op, variant, shape, device,
 * commit, backend ("cuda"|"cpu"), flush (qfb_flush_name; null on the CPU), timing
 * (qfb_timing_name of the session's timing in effect; null on the CPU), us, gbps, tflops,
 * pct_floor, read_us, pct_read, peer, peer_us, ratio; null where not applicable. read_us is
 * qfb_read_us of the row's bytes, given where the bytes term sets the row's floor (a memory-bound
 * row); pct_read = 100 x read_us / us. */
void qfb_emit(qfb *b, const qfb_row *r);

/* A row for calls that may overlap across kernels under programmatic dependent launch: fn(pdl)
 * (on a context with qf_ctx_set_pdl) against fn(plain) (the same calls on one without), both
 * event-timed; row->us is the first's time, row->peer_us the mean of a run of the second before
 * and one after (so that clock drift does not fall on one side), row->peer "no_pdl (same calls)".
 * Emits the row (its other fields the caller's) and returns nonzero when a timing failed. */
int qfb_emit_pdl_pair(qfb *b, qfb_row *row, int (*fn)(void *arg), void *pdl, void *plain);

/* Ceilings, measured on the first call and cached in the session (GPU only; 0 on the CPU or
 * when the measurement fails, with a message). Each prints "ceiling: ..." lines and appends a
 * JSON row (op "ceiling_copy" / "ceiling_fp8_gemm") without a table row.
 * qfb_copy_gbps: the copy16 kernel from a 2 GiB buffer to another (halved while free memory is
 *   short), counting bytes read + bytes written, decimal GB/s; cudaMemcpy D2D on the same
 *   buffers and the DRAM peak from memory clock x bus width are printed beside it.
 * qfb_fp8_tflops: cuBLASLt e4m3 x e4m3 -> bf16, M=N=K=8192, per-tensor scales, random data,
 *   2*M*N*K / median time. */
double qfb_copy_gbps(qfb *b);
double qfb_fp8_tflops(qfb *b);

/* The time of reading `bytes` once with a plain streaming kernel (copy16's loads, no stores),
 * measured as every row is (L2 flushed, the session's timing) and cached per byte count: about the
 * least time any kernel needs to read that much, launch and first-data latency included, which
 * the copy ceiling's 2 GiB leave out. 0 on the CPU, past 1 GiB, or when the measurement fails. */
double qfb_read_us(qfb *b, double bytes);

/* Relative Frobenius distance ||v - ref|| / ||ref|| of two bf16 host arrays of n values (a
 * qfuse output against its peer's); NaN where v holds one. */
double qfb_bf16_distance(const uint16_t *v, const uint16_t *ref, size_t n);

/* floor_us for a row, in microseconds: max(bytes / copy ceiling, flops / matrix peak), where the
 * matrix peak is peak_tflops when > 0 and the measured FP8 ceiling otherwise (ceilings are
 * measured on first use). Terms whose ceiling is unknown are left out; 0 when none applies. */
double qfb_floor_us(qfb *b, double bytes, double flops, double peak_tflops);

#if defined(QF_WITH_CUDA) || defined(__CUDACC__)
/* copy.cu: dst[0, bytes) = src[0, bytes) on stream s with 16-byte loads and stores (both
 * pointers must be 16-byte aligned). Returns 0, or the cudaError_t after printing it. */
int qfb_copy16(const void *src, void *dst, size_t bytes, cudaStream_t s);
/* copy.cu: reads src[0, bytes) on stream s with copy16's 16-byte loads (four in flight per thread,
 * a grid of one full wave, at most as many blocks as sink has words for), leaving one word per warp
 * in sink[0, sink_words) (bytes a multiple of 16, src aligned): the L2 flush and qfb_read_us's
 * kernel. Returns 0, or the cudaError_t. */
int qfb_read16(const void *src, size_t bytes, unsigned *sink, unsigned sink_words, cudaStream_t s);
#endif

#ifdef __cplusplus
}
#endif

#endif
