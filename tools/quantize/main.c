/* qfuse-quantize: quantizes a weight offline on the CPU backend, from a .npy file or a checkpoint's
 * tensor into the tensors qfuse's kernels read, and reports how close the result is.
 *
 *   qfuse-quantize FORMAT IN OUT [--iterations N] [--seed S] [--threads T]
 *   qfuse-quantize --list FILE.safetensors
 *
 * IN is w [N, K]: a .npy file (float32 or float16, C order) or FILE.safetensors:NAME, the tensor
 * NAME of a checkpoint (F32, F16 or BF16; --list prints the tensors). FORMAT:
 *  - a VQ preset (qf_vq_format_preset): gptvq-2, cq-2, cq-4, aqlm-3, quip-4. qf_vq_quantize
 *    (k-means, or the E8P lattice for quip-4) writes OUT.codes.npy (uint8 [R, N, row_bytes]),
 *    OUT.codebooks.npy (float16 [R, n_books, entries, vector_size]) and, for formats with row
 *    scales, OUT.scales.npy (float32 [N]). --iterations and --seed go to its k-means, --threads
 *    to its threads (default: one per CPU it may run on; the files are the same for any count).
 *  - nvfp4: the tensor scale amax(|w|) / (6 * 448) (ModelOpt's), qf_quant_nvfp4 and qf_nvfp4_pack
 *    write OUT.codes.npy (uint8 [N, K / 2], codes as stored: element 2i in the low nibble of byte
 *    i), OUT.packed.npy (the same bytes in qf_gemm_nvfp4's layout), OUT.scales.npy (uint8 [N,
 *    K / 16], e4m3fn bits) and OUT.tensor_scale.npy (float32 [1]).
 *  - fp8-block: qf_gemm_fp8_blockscale's weight (DeepSeek-V3): per 128 x 128 block the dynamic
 *    scale rule of docs/NUMERICS.md (s = amax / 448, q = e4m3fn(w * (1 / s))), OUT.codes.npy
 *    (uint8 [N, K], e4m3fn bits) and OUT.scales.npy (float32 [ceil(N / 128), ceil(K / 128)]).
 *  - fp8-channel, int8-channel: qf_gemm_scaled's weight with per-channel scales: qf_quant_token
 *    on its rows, OUT.codes.npy (uint8 e4m3fn bits, or int8 [N, K]) and OUT.scales.npy (float32
 *    [N]).
 * It prints the relative squared error ||w - w^||^2 / ||w||^2 of the decoded weight
 * (qf_vq_dequantize; otherwise the format's formula), and for VQ the bits per value and the
 * codebooks' statistics (entries no code uses, hot entries above mean + 3 sigma and their share of
 * the codes).
 * Weights must be finite. Nothing is written unless quantization succeeded, and then the files
 * appear together (written under temporary names, then renamed); files an earlier run left under
 * the same prefix that this format does not write are removed. Exit status 0, 1 on failure (with a
 * message), 2 on bad usage. A k-means iteration costs vectors x entries distances: a large weight
 * in a 12-bit format (4096 entries) takes hours of one thread. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "formats/quant_math.h"
#include "npy.h"
#include "qfuse.h"
#include "safetensors.h"

static void usage(void) {
  fprintf(stderr,
          "usage: qfuse-quantize FORMAT IN OUT [--iterations N] [--seed S] [--threads T]\n"
          "       qfuse-quantize --list FILE.safetensors\n"
          "  FORMAT  gptvq-2, cq-2, cq-4, aqlm-3, quip-4 (vector quantization), nvfp4, fp8-block,\n"
          "          fp8-channel or int8-channel\n"
          "  IN      the weight [N, K]: W.npy (float32 or float16, C order) or FILE.safetensors:NAME\n"
          "          (a checkpoint's tensor, F32, F16 or BF16)\n"
          "  OUT     prefix of the files written: OUT.codes.npy, OUT.codebooks.npy, OUT.scales.npy (VQ);\n"
          "          OUT.codes.npy, OUT.packed.npy, OUT.scales.npy, OUT.tensor_scale.npy (nvfp4);\n"
          "          OUT.codes.npy, OUT.scales.npy (fp8-block, fp8-channel, int8-channel)\n");
}

static DLTensor host_tensor(void *data, qf_dtype dt, int ndim, int64_t *shape) {
  DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = qf_dtype_to_dl(dt), .shape = shape};
  return t;
}

static double w_value(const npy_array *w, size_t i) {
  if (w->item == 4) return ((const float *)w->data)[i];
  const uint16_t h = ((const uint16_t *)w->data)[i];
  return strcmp(w->descr, "bf16") ? qf_f16_to_f32(h) : qf_bf16_to_f32(h);
}

/* The weight from W.npy or FILE.safetensors:NAME. */
static int read_weight(const char *in, npy_array *w, char *err, size_t err_len) {
  const char *st = strstr(in, ".safetensors:");
  if (!st) return npy_read(in, w, err, err_len);
  char path[4096];
  const size_t n = (size_t)(st - in) + strlen(".safetensors");
  if (n >= sizeof path) return snprintf(err, err_len, "a path of %zu bytes", n), -1;
  memcpy(path, in, n);
  path[n] = '\0';
  return safetensors_read(path, st + strlen(".safetensors:"), w, err, err_len);
}

/* ||w - w^||^2 / ||w||^2 with w^ fp32. */
static double rel_error(const npy_array *w, const float *decoded) {
  const size_t n = (size_t)(w->shape[0] * w->shape[1]);
  double e2 = 0.0, r2 = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double v = w_value(w, i), d = v - decoded[i];
    e2 += d * d, r2 += v * v;
  }
  return r2 > 0.0 ? e2 / r2 : e2;
}

/* The files of one result, written only once every tensor exists. */
typedef struct {
  const char *suffix, *descr;
  int ndim;
  int64_t shape[4];
  const void *data;
} out_file;

/* Writes every file under a temporary name, then renames them all: a failure leaves none of them
 * (nor a truncated one). Files of the prefix that this format does not write (an earlier run's,
 * which would not match the new ones) are removed. */
static int write_all(const char *prefix, const out_file *files, int n) {
  char path[8][4096], tmp[8][4096], err[512];
  int written = 0, rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    if (snprintf(path[i], sizeof path[i], "%s.%s.npy", prefix, files[i].suffix) >= (int)sizeof path[i] ||
        snprintf(tmp[i], sizeof tmp[i], "%s.%s.npy.tmp", prefix, files[i].suffix) >= (int)sizeof tmp[i]) {
      fprintf(stderr, "qfuse-quantize: the output prefix is too long\n");
      rc = 1;
      break;
    }
    if (npy_write(tmp[i], files[i].descr, files[i].ndim, files[i].shape, files[i].data, err, sizeof err)) {
      fprintf(stderr, "qfuse-quantize: %s\n", err);
      remove(tmp[i]);
      rc = 1;
    }
    written = i + 1 - rc;
  }
  int renamed = 0;
  for (; !rc && renamed < n; renamed++)
    if (rename(tmp[renamed], path[renamed])) {
      fprintf(stderr, "qfuse-quantize: cannot rename %s to %s\n", tmp[renamed], path[renamed]);
      rc = 1;
      break;
    }
  if (rc) { /* none of this result stays */
    for (int i = 0; i < renamed; i++) remove(path[i]);
    for (int i = renamed; i < written; i++) remove(tmp[i]);
    return 1;
  }
  for (int i = 0; i < n; i++) printf("wrote %s\n", path[i]);
  static const char *const every[] = {"codes", "codebooks", "scales", "packed", "tensor_scale"};
  for (size_t j = 0; j < sizeof every / sizeof *every; j++) {
    int mine = 0;
    for (int i = 0; i < n; i++) mine |= !strcmp(files[i].suffix, every[j]);
    char old[4096];
    snprintf(old, sizeof old, "%s.%s.npy", prefix, every[j]);
    if (!mine && !remove(old)) printf("removed %s (an earlier result's; this format has none)\n", old);
  }
  return 0;
}

static int quantize_vq(qf_ctx *ctx, qf_vq_preset preset, const char *name, const npy_array *w, DLTensor *wt,
                       const qf_vq_quantize_opts *opts, const char *prefix) {
  const int64_t N = w->shape[0], K = w->shape[1];
  qf_vq_format fmt;
  qf_vq_sizes sz;
  qf_vq_format_preset(preset, &fmt);
  if (qf_vq_sizes_of(ctx, &fmt, N, K, &sz) != QF_OK) {
    fprintf(stderr, "qfuse-quantize: %s: %s\n", name, qf_ctx_last_error(ctx));
    return 1;
  }
  int64_t cshape[3] = {fmt.residuals, N, sz.row_bytes}, bshape[4] = {fmt.residuals, sz.n_books, sz.entries, fmt.vector_size},
          sshape[1] = {N}, wshape[2] = {N, K};
  uint8_t *codes = calloc((size_t)(cshape[0] * cshape[1] * cshape[2]), 1);
  uint16_t *books = calloc((size_t)(bshape[0] * bshape[1] * bshape[2] * bshape[3]), 2);
  float *scales = calloc((size_t)N, 4), *decoded = calloc((size_t)(N * K), 4);
  int rc = 1;
  if (!codes || !books || !scales || !decoded) {
    fprintf(stderr, "qfuse-quantize: no memory for the %lld x %lld weight's codes and codebooks\n", (long long)N,
            (long long)K);
    goto done;
  }
  DLTensor ct = host_tensor(codes, QF_U8, 3, cshape), bt = host_tensor(books, fmt.entry_dtype, 4, bshape),
           st = host_tensor(scales, QF_F32, 1, sshape), dt = host_tensor(decoded, QF_F32, 2, wshape);
  qf_vq_stats stats;
  if (qf_vq_quantize(ctx, wt, &fmt, opts, &ct, &bt, fmt.row_scale ? &st : NULL, &stats) != QF_OK ||
      qf_vq_dequantize(ctx, &ct, &bt, fmt.row_scale ? &st : NULL, &fmt, &dt) != QF_OK) {
    fprintf(stderr, "qfuse-quantize: %s\n", qf_ctx_last_error(ctx));
    goto done;
  }
  printf("%s: VQ<%d, %d, %d>, %lld x %lld, %.3f bits per value (codes; %lld codebooks of %lld entries per "
         "residual)\n",
         name, fmt.vector_size, fmt.index_bits, fmt.residuals, (long long)N, (long long)K, sz.bits_per_value,
         (long long)sz.n_books, (long long)sz.entries);
  printf("relative squared error %.4g (the quantizer's: %.4g)\n", rel_error(w, decoded), stats.rel_mse);
  printf("entries %lld, unused %lld, hot (above mean + 3 sigma) %lld taking %.1f%% of the codes\n",
         (long long)stats.entries, (long long)stats.unused_entries, (long long)stats.hot_entries,
         100.0 * stats.hot_share);
  const out_file files[] = {{"codes", "|u1", 3, {cshape[0], cshape[1], cshape[2]}, codes},
                            {"codebooks", "<f2", 4, {bshape[0], bshape[1], bshape[2], bshape[3]}, books},
                            {"scales", "<f4", 1, {N}, scales}};
  rc = write_all(prefix, files, fmt.row_scale ? 3 : 2);
done:
  free(codes), free(books), free(scales), free(decoded);
  return rc;
}

static int quantize_nvfp4(qf_ctx *ctx, const npy_array *w, DLTensor *wt, const char *prefix) {
  const int64_t N = w->shape[0], K = w->shape[1];
  if (N % 16 || K % 32) { /* (qf_gemm_nvfp4's; the quantizer alone takes any N and K a multiple of 16) */
    fprintf(stderr, "qfuse-quantize: nvfp4: N=%lld must be a multiple of 16 and K=%lld of 32 (qf_gemm_nvfp4)\n",
            (long long)N, (long long)K);
    return 1;
  }
  double amax = 0.0;
  for (size_t i = 0; i < (size_t)(N * K); i++) amax = fmax(amax, fabs(w_value(w, i))); /* (w is finite) */
  float ts = (float)(amax / (6.0 * 448.0));
  if (!(ts >= FLT_MIN)) { /* a subnormal tensor scale keeps few bits, and times an activation scale underflows */
    fprintf(stderr, "qfuse-quantize: nvfp4: max |w| = %g gives a tensor scale below 2^-126\n", amax);
    return 1;
  }
  uint8_t *codes = malloc((size_t)(N * K / 2)), *packed = malloc((size_t)(N * K / 2)), *scales = malloc((size_t)(N * K / 16));
  float *decoded = malloc((size_t)(N * K) * 4);
  int rc = 1;
  if (!codes || !packed || !scales || !decoded) {
    fprintf(stderr, "qfuse-quantize: no memory for the %lld x %lld weight's codes\n", (long long)N, (long long)K);
    goto done;
  }
  int64_t wshape[2] = {N, K}, sshape[2] = {N, K / 16}, one = 1;
  DLTensor ct = host_tensor(codes, QF_E2M1X2, 2, wshape), pt = host_tensor(packed, QF_E2M1X2, 2, wshape),
           st = host_tensor(scales, QF_E4M3FN, 2, sshape), tt = host_tensor(&ts, QF_F32, 1, &one);
  if (qf_quant_nvfp4(ctx, wt, &tt, &ct, &st) != QF_OK || qf_nvfp4_pack(ctx, &ct, &pt) != QF_OK) {
    fprintf(stderr, "qfuse-quantize: %s\n", qf_ctx_last_error(ctx));
    goto done;
  }
  for (int64_t n = 0; n < N; n++) /* w^ = e2m1(code) * e4m3fn(block scale) * tensor scale */
    for (int64_t k = 0; k < K; k++)
      decoded[n * K + k] = qf_e2m1_to_f32((uint8_t)(codes[(n * K + k) / 2] >> (4 * (k % 2)))) *
                           qf_e4m3fn_to_f32(scales[n * (K / 16) + k / 16]) * ts;
  printf("nvfp4: %lld x %lld, 4.5 bits per value (e2m1 codes, an e4m3fn scale per 16), tensor scale %.6g\n",
         (long long)N, (long long)K, ts);
  printf("relative squared error %.4g\n", rel_error(w, decoded));
  const out_file files[] = {{"codes", "|u1", 2, {N, K / 2}, codes},
                            {"packed", "|u1", 2, {N, K / 2}, packed},
                            {"scales", "|u1", 2, {N, K / 16}, scales},
                            {"tensor_scale", "<f4", 1, {1}, &ts}};
  rc = write_all(prefix, files, 4);
done:
  free(codes), free(packed), free(scales), free(decoded);
  return rc;
}

/* DeepSeek-V3's 128 x 128 weight blocks: the scale rule and encoding of the dynamic quantizations
 * (quant_math.h), so that the codes are those qf_quant_per_tensor gives each block for its scale. */
static int quantize_fp8_block(const npy_array *w, const char *prefix) {
  const int64_t N = w->shape[0], K = w->shape[1], NB = (N + 127) / 128, KB = (K + 127) / 128;
  if (N % 16 || K % 16) {
    fprintf(stderr, "qfuse-quantize: fp8-block: N=%lld and K=%lld must be multiples of 16 (qf_gemm_fp8_blockscale)\n",
            (long long)N, (long long)K);
    return 1;
  }
  uint8_t *codes = malloc((size_t)(N * K));
  float *scales = malloc((size_t)(NB * KB) * 4), *decoded = malloc((size_t)(N * K) * 4);
  int rc = 1;
  if (!codes || !scales || !decoded) {
    fprintf(stderr, "qfuse-quantize: no memory for the %lld x %lld weight's codes\n", (long long)N, (long long)K);
    goto done;
  }
  for (int64_t nb = 0; nb < NB; nb++)
    for (int64_t kb = 0; kb < KB; kb++) {
      const int64_t n1 = nb * 128 + 128 < N ? nb * 128 + 128 : N, k1 = kb * 128 + 128 < K ? kb * 128 + 128 : K;
      float amax = 0.0f;
      for (int64_t n = nb * 128; n < n1; n++)
        for (int64_t k = kb * 128; k < k1; k++) amax = qf_nan_max(amax, qf_absf((float)w_value(w, (size_t)(n * K + k))));
      const float s = qf_group_scale(amax, 448.0f, 0, 0.0f, 1e-10f, 0), inv = qf_inv_scale(s);
      scales[nb * KB + kb] = s;
      for (int64_t n = nb * 128; n < n1; n++)
        for (int64_t k = kb * 128; k < k1; k++) {
          const uint8_t q = qf_e4m3fn_from_f32((float)w_value(w, (size_t)(n * K + k)) * inv);
          codes[n * K + k] = q;
          decoded[n * K + k] = qf_e4m3fn_to_f32(q) * s;
        }
    }
  printf("fp8-block: %lld x %lld, e4m3fn with an fp32 scale per 128 x 128 block (%lld x %lld scales)\n", (long long)N,
         (long long)K, (long long)NB, (long long)KB);
  printf("relative squared error %.4g\n", rel_error(w, decoded));
  const out_file files[] = {{"codes", "|u1", 2, {N, K}, codes}, {"scales", "<f4", 2, {NB, KB}, scales}};
  rc = write_all(prefix, files, 2);
done:
  free(codes), free(scales), free(decoded);
  return rc;
}

/* Per-channel weights for qf_gemm_scaled: qf_quant_token on the weight's rows. */
static int quantize_channel(qf_ctx *ctx, const npy_array *w, DLTensor *wt, int int8, const char *prefix) {
  const int64_t N = w->shape[0], K = w->shape[1];
  uint8_t *codes = malloc((size_t)(N * K));
  float *scales = malloc((size_t)N * 4), *decoded = malloc((size_t)(N * K) * 4);
  int rc = 1;
  if (!codes || !scales || !decoded) {
    fprintf(stderr, "qfuse-quantize: no memory for the %lld x %lld weight's codes\n", (long long)N, (long long)K);
    goto done;
  }
  int64_t qshape[2] = {N, K}, sshape[1] = {N};
  DLTensor qt = host_tensor(codes, int8 ? QF_I8 : QF_E4M3FN, 2, qshape), st = host_tensor(scales, QF_F32, 1, sshape);
  if (qf_quant_token(ctx, wt, &qt, &st, NULL, NULL) != QF_OK) {
    fprintf(stderr, "qfuse-quantize: %s\n", qf_ctx_last_error(ctx));
    goto done;
  }
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      const uint8_t q = codes[n * K + k];
      decoded[n * K + k] = (int8 ? (float)(int8_t)q : qf_e4m3fn_to_f32(q)) * scales[n];
    }
  printf("%s-channel: %lld x %lld, %s with an fp32 scale per row (output channel)\n", int8 ? "int8" : "fp8",
         (long long)N, (long long)K, int8 ? "int8" : "e4m3fn");
  printf("relative squared error %.4g\n", rel_error(w, decoded));
  const out_file files[] = {{"codes", int8 ? "|i1" : "|u1", 2, {N, K}, codes}, {"scales", "<f4", 1, {N}, scales}};
  rc = write_all(prefix, files, 2);
done:
  free(codes), free(scales), free(decoded);
  return rc;
}

int main(int argc, char **argv) {
  enum { NVFP4 = -1, FP8_BLOCK = -2, FP8_CHANNEL = -3, INT8_CHANNEL = -4 };
  static const struct {
    const char *name;
    int preset; /* a qf_vq_preset, or one of the above */
  } formats[] = {{"gptvq-2", QF_VQ_GPTVQ_2}, {"cq-2", QF_VQ_CQ_2},        {"cq-4", QF_VQ_CQ_4},
                 {"aqlm-3", QF_VQ_AQLM_3},   {"quip-4", QF_VQ_QUIP_4},    {"nvfp4", NVFP4},
                 {"fp8-block", FP8_BLOCK},   {"fp8-channel", FP8_CHANNEL}, {"int8-channel", INT8_CHANNEL}};
  char err[512];
  if (argc == 3 && !strcmp(argv[1], "--list")) {
    if (!safetensors_list(argv[2], stdout, err, sizeof err)) return 0;
    fprintf(stderr, "qfuse-quantize: %s\n", err);
    return 1;
  }
  if (argc < 4) {
    usage();
    return 2;
  }
  int format = -1;
  for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
    if (!strcmp(argv[1], formats[i].name)) format = (int)i;
  if (format < 0) {
    fprintf(stderr, "qfuse-quantize: unknown format '%s'\n", argv[1]);
    usage();
    return 2;
  }
  qf_vq_quantize_opts opts = {0, 0, 0};
  for (int i = 4; i < argc; i++) {
    const int iterations = !strcmp(argv[i], "--iterations"), seed = !strcmp(argv[i], "--seed"),
              threads = !strcmp(argv[i], "--threads");
    char *end = NULL;
    errno = 0;
    const unsigned long long v = (iterations || seed || threads) && i + 1 < argc && argv[i + 1][0] != '-'
                                     ? strtoull(argv[i + 1], &end, 10)
                                     : 0;
    if (!end || *end || end == argv[i + 1] || errno || (iterations && (v < 1 || v > 1000000)) ||
        (threads && (v < 1 || v > 256))) {
      fprintf(stderr, "qfuse-quantize: %s: expected --iterations 1..1000000, --seed 0..2^64-1 or --threads 1..256\n",
              argv[i]);
      usage();
      return 2;
    }
    if (formats[format].preset < 0) {
      fprintf(stderr, "qfuse-quantize: %s applies to the VQ formats (k-means) only\n", argv[i]);
      return 2;
    }
    if (iterations) opts.iterations = (int)v;
    else if (threads) opts.threads = (int)v;
    else opts.seed = v;
    i++;
  }

  npy_array w;
  if (read_weight(argv[2], &w, err, sizeof err)) {
    fprintf(stderr, "qfuse-quantize: %s\n", err);
    return 1;
  }
  int rc = 1;
  qf_ctx *ctx = NULL;
  if (w.ndim != 2 || w.item == 1 || w.shape[0] == 0 || w.shape[1] == 0) {
    fprintf(stderr, "qfuse-quantize: %s: a weight is a non-empty 2-D float32, float16 or bfloat16 array (got %d-D %s)\n",
            argv[2], w.ndim, w.descr);
    goto done;
  }
  for (int64_t i = 0; i < w.shape[0] * w.shape[1]; i++)
    if (!isfinite(w_value(&w, (size_t)i))) { /* (each format would carry it into its scales or codebooks) */
      fprintf(stderr, "qfuse-quantize: %s: w[%lld, %lld] = %g; a weight must be finite\n", argv[2],
              (long long)(i / w.shape[1]), (long long)(i % w.shape[1]), w_value(&w, (size_t)i));
      goto done;
    }
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) {
    fprintf(stderr, "qfuse-quantize: no CPU context\n");
    goto done;
  }
  DLTensor wt = host_tensor(w.data, w.item == 4 ? QF_F32 : strcmp(w.descr, "bf16") ? QF_F16 : QF_BF16, 2, w.shape);
  switch (formats[format].preset) {
    case NVFP4: rc = quantize_nvfp4(ctx, &w, &wt, argv[3]); break;
    case FP8_BLOCK: rc = quantize_fp8_block(&w, argv[3]); break;
    case FP8_CHANNEL: rc = quantize_channel(ctx, &w, &wt, 0, argv[3]); break;
    case INT8_CHANNEL: rc = quantize_channel(ctx, &w, &wt, 1, argv[3]); break;
    default:
      rc = quantize_vq(ctx, (qf_vq_preset)formats[format].preset, formats[format].name, &w, &wt, &opts, argv[3]);
  }
done:
  qf_ctx_destroy(ctx);
  npy_free(&w);
  return rc;
}
