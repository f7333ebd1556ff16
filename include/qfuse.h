/*
 * qfuse: fused low-precision kernels for LLM inference behind one C API.
 *
 * Conventions (see docs/DESIGN.md for the reasons):
 *  - Every function returns qf_status. On failure nothing is written to any output tensor and
 *    qf_ctx_last_error(ctx) names the op, the argument and the offending values.
 *  - Tensors are DLPack DLTensor*. A tensor's device must be the context's device. Row-major 2-D
 *    tensors may have a row stride (strides[1] == 1, strides[0] >= shape[1]); other layouts are
 *    refused, never copied.
 *  - Options are plain structs whose zero value means the defaults; a NULL options pointer is the
 *    same as a zeroed struct.
 *  - Enums only grow at the end; changed behaviour gets a _v2 name.
 */
#ifndef QFUSE_H
#define QFUSE_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ---------------------------------------------------------------------------- */

#define QF_VERSION_MAJOR 0
#define QF_VERSION_MINOR 1
#define QF_VERSION_PATCH 0
#define QF_VERSION_NUMBER (QF_VERSION_MAJOR * 10000 + QF_VERSION_MINOR * 100 + QF_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the library actually loaded (compare with the macros above). */
const char *qf_version(void);
/* QF_VERSION_NUMBER of the library actually loaded. */
int qf_version_number(void);

/* ---- Status codes ----------------------------------------------------------------------- */

/* One list gives the enum and qf_status_str(). New codes are added at the end only. */
#define QF_STATUS_LIST(X)                                                                    \
  X(QF_OK, 0, "ok")                                                                          \
  X(QF_ERR_NULL, 1, "a required pointer is NULL")                                            \
  X(QF_ERR_DEVICE, 2, "tensor is not on the context's device")                               \
  X(QF_ERR_DTYPE, 3, "unsupported data type")                                                \
  X(QF_ERR_SHAPE, 4, "invalid shape")                                                        \
  X(QF_ERR_LAYOUT, 5, "unsupported strides or layout")                                       \
  X(QF_ERR_ALIGNMENT, 6, "pointer is not aligned as required")                               \
  X(QF_ERR_VALUE, 7, "invalid argument value")                                               \
  X(QF_ERR_UNSUPPORTED, 8, "not supported by this build or device")                          \
  X(QF_ERR_CUDA, 9, "CUDA runtime error")                                                    \
  X(QF_ERR_OUT_OF_MEMORY, 10, "out of memory")

typedef enum {
#define QF_STATUS_ENUM_(name, value, text) name = value,
  QF_STATUS_LIST(QF_STATUS_ENUM_)
#undef QF_STATUS_ENUM_
} qf_status;

/* A static string describing the code; "unknown status" for values outside the list. */
const char *qf_status_str(qf_status status);

/* ---- Context ---------------------------------------------------------------------------- */

typedef enum {
  QF_DEVICE_CPU = 0,  /* the reference backend: plain C, single thread */
  QF_DEVICE_CUDA = 1, /* a CUDA device (sm_90a kernels) */
} qf_device;

/* Opaque: device, stream and the detailed message of the last failure. Not thread-safe: use
 * one context per thread (contexts are cheap). */
typedef struct qf_ctx qf_ctx;

/* Creates a context for the CPU (device_id ignored) or for CUDA device device_id. Returns
 * QF_ERR_UNSUPPORTED for QF_DEVICE_CUDA when the library was built without CUDA or the device
 * is not an sm_90 part; *out is then NULL. */
qf_status qf_ctx_create(qf_ctx **out, qf_device device, int device_id);
void qf_ctx_destroy(qf_ctx *ctx);
/* Every later launch on this context goes to this cudaStream_t (NULL: the legacy default
 * stream). A stream of a green context confines the launches to its SMs: their number is read
 * here, and the persistent kernels size their grids by it. QF_ERR_UNSUPPORTED on a CPU context. */
qf_status qf_ctx_set_stream(qf_ctx *ctx, void *cuda_stream);
/* Programmatic dependent launch (off by default). On, the GEMMs (qf_gemm_fp8_blockscale, its
 * grouped forms, qf_gemm_scaled; all but the split 256 x 128 tiles, which launch cooperatively)
 * launch so that they may start while the kernel before them in the stream finishes: their
 * launch and set-up overlap that kernel, and they wait for it to complete before they read A, the
 * scales, C or bias or write anything. qf_quant_group, qf_silu_mul_quant_group, qf_quant_token and
 * qf_quant_per_tensor launch the same way (they wait for the kernel before them, e.g. the GEMM
 * that wrote x), and so does qf_rms_norm_quant at decode (one block a row up to one per SM, or
 * clusters of blocks up to half the SMs), qf_vq_gemm's tile-table GeMV (M = 1 to 4, books per
 * tile of W: its first codebook and code copies are asked for before it waits), and
 * qf_vq_attention_decode where it runs the banked kernel (the head's codebooks are copied before it
 * waits, so the kernel before must not write them; q and the cache codes are read after; unlike the
 * others it does not let the kernel after it start early), and qf_vq_encode (it waits at its start:
 * a decode step's append and attention chain). On such a context
 * those let the GEMM after them start early; after any other kernel it starts when that kernel's
 * blocks have all exited. Every other
 * launch is as before: a kernel launched without the attribute waits for the kernel before it as
 * usual. QF_ERR_UNSUPPORTED on a CPU context. */
qf_status qf_ctx_set_pdl(qf_ctx *ctx, int enable);
/* The device workspace. The calls that split their work across CTAs (the GEMMs' split-K partial
 * tiles and counters, split-KV attention, the VQ kernels' partial sums, per-tensor quantization's
 * amax) use one device buffer per context, grown by the first call that needs more (an allocation,
 * which synchronizes the device) and kept until qf_ctx_destroy. It cannot grow while the
 * context's stream is capturing a CUDA graph: a call that would need it to fails with
 * QF_ERR_UNSUPPORTED, naming the bytes it needs, before it enqueues anything (the capture stays
 * valid; the check sees the context's own stream, so while another stream of the thread captures
 * in global mode, growing fails as CUDA fails any allocation then). qf_ctx_reserve_workspace grows
 * it to at least `bytes` now (zero-filled, the device synchronized), so that the calls of a
 * capture find it large enough: reserve, or make one call of each shape, before capturing. The block-scaled and scaled GEMMs (dense, grouped, masked) need at
 * most 4 KB + 128 KB per SM; the attention and VQ calls need more as their shapes grow (make their
 * largest call once, then read qf_ctx_workspace_bytes). QF_ERR_UNSUPPORTED on a CPU context, which
 * needs none; qf_ctx_workspace_bytes is then 0, as it is before any call needed the buffer. */
qf_status qf_ctx_reserve_workspace(qf_ctx *ctx, size_t bytes);
size_t qf_ctx_workspace_bytes(const qf_ctx *ctx);
/* Detailed message of the last failed call on ctx, "" if none failed yet. Valid until the next
 * call on ctx. */
const char *qf_ctx_last_error(const qf_ctx *ctx);

/* ---- Data types ------------------------------------------------------------------------- */

/* qfuse's dtype vocabulary and its DLPack encoding. DLPack 0.6 (Debian's libdlpack-dev) has no
 * codes for FP8/FP4; qfuse uses the codes of DLPack >= 1.1, which PyTorch also emits, so
 * tensors from newer frameworks are understood as they are:
 *   bf16      {kDLBfloat=4, 16}    fp16 {kDLFloat=2, 16}   fp32 {kDLFloat=2, 32}
 *   int8      {kDLInt=0, 8}        int32 {kDLInt=0, 32}     uint8 {kDLUInt=1, 8}
 *   e4m3fn    {10, 8}   e4m3fnuz {11, 8}   e5m2 {12, 8}   ue8m0 {14 (e8m0fnu), 8}
 *   e2m1x2    {17 (e2m1fn), 4}: two values per byte, element 2i in the low nibble; the shape
 *             counts values, so the last dimension must be even.
 * Frameworks without FP8 (NumPy) hand FP8 data over as uint8: relabel such a tensor with
 * qf_dtype_to_dl() before the call (the Python binding's qfuse.view does that).
 * Every op, on every backend, refuses a tensor whose data + byte_offset is not aligned to its
 * element size (QF_ERR_ALIGNMENT); ops that need more say so. */
typedef enum {
  QF_BF16 = 0,
  QF_F16 = 1,
  QF_F32 = 2,
  QF_I8 = 3,
  QF_I32 = 4,
  QF_E4M3FN = 5,
  QF_E4M3FNUZ = 6,
  QF_E5M2 = 7,
  QF_UE8M0 = 8,
  QF_E2M1X2 = 9,
  QF_U8 = 10, /* raw bytes: packed VQ codes */
  QF_DTYPE_COUNT /* not a type: the number of types; grows with the list */
} qf_dtype;

DLDataType qf_dtype_to_dl(qf_dtype dtype);
/* QF_ERR_DTYPE (and *out untouched) if the DLPack type is none of the above. */
qf_status qf_dtype_from_dl(DLDataType dl, qf_dtype *out);
/* "bf16", "e4m3fn", ...; "invalid" for values outside the enum. */
const char *qf_dtype_name(qf_dtype dtype);

/* ---- Quantization ------------------------------------------------------------------------ */

/* Numerics shared by every quantization op (docs/NUMERICS.md has the full contract):
 *  - q = encode(x * inv_scale) with inv_scale = 1.0f / scale computed once in fp32 (correctly
 *    rounded) and the product rounded to fp32; the GPU computes exactly the same.
 *  - encode rounds to nearest even and saturates: e4m3fn to +-448, int8 to [-128, 127];
 *    +-Inf saturates to the same bounds.
 *  - NaN inputs: e4m3fn gives its NaN code 0x7F; int8 gives 0 (int8 cannot carry NaN).
 */

/* Static per-tensor quantization: q = encode(x * (1 / scale[0])).
 *  x      [M, K] or [K]: bf16, fp16 or fp32; 2-D rows may be strided (strides[1] == 1).
 *  scale  [1] fp32, on the context's device. The value is data and is not read by the host:
 *         a scale that is not finite and > 0 makes inv_scale NaN, so every e4m3fn output is
 *         NaN (0x7F) and every int8 output 0, on both backends.
 *  q      same shape as x: e4m3fn or int8; 2-D rows may be strided.
 *  x and q: 16-byte aligned data pointers (data + byte_offset); 64-bit offsets throughout. */
qf_status qf_quant_per_tensor(qf_ctx *ctx, const DLTensor *x, const DLTensor *scale,
                              DLTensor *q);

/* ---- Quantization family: dynamic scales -------------------------------------------------
 *
 * Every dynamic op below computes, per group of values v (a 1 x G group, a row, or the tensor):
 *   amax  = max |v|                        NaN-propagating: one NaN in the group makes it NaN
 *   s     = amax / qmax                    fp32 division; qmax: e4m3fn 448, e4m3fnuz 224, int8 127
 *   s     = min(s, ub)                     only when an upper bound tensor is given
 *   s     = max(s, scale_min)              the floor (default 1e-10); all-zero groups get it
 *   s     = pow2_ceil(s)                   for the power-of-two and UE8M0 scale formats
 *   q     = encode(v * (1.0f / s))         encode as in qf_quant_per_tensor, for e4m3fnuz too
 * A NaN or Inf anywhere in a group gives that group a NaN scale (UE8M0 byte 0xFF) and NaN (e4m3)
 * or 0 (int8) outputs, with or without ub: the scale shows it, never a finite wrong value.
 * e4m3fnuz uses qmax 224, not its largest value 240: every e4m3fnuz value up to 224 is half an
 * e4m3fn value, so data quantized this way converts to and from e4m3fn exactly (halve the value,
 * double the scale); 240 has no e4m3fn counterpart. The cost is 7% of the range.
 */

/* Where group scales go, for x [M, K] with groups of G along K (KG = K / G):
 *  ROW_MAJOR      [M, KG] fp32, row pitch may be strided.
 *  COL_MAJOR      [KG, M] fp32 contiguous (scale of row m, group g at g * M + m): what
 *                 DeepSeek-style GEMMs read.
 *  COL_MAJOR_TMA  [KG, Mp] with Mp = M rounded up to a multiple of 4 (16 bytes, the TMA pitch);
 *                 the tensor is given as [KG, M] with strides {Mp, 1}; the padding entries
 *                 (m >= M) are written with 0. */
typedef enum {
  QF_SCALE_ROW_MAJOR = 0,
  QF_SCALE_COL_MAJOR = 1,
  QF_SCALE_COL_MAJOR_TMA = 2,
} qf_scale_layout;

/* How group scales are stored:
 *  F32           the fp32 scale s.
 *  F32_POW2      s rounded up to a power of two (UE8M0 semantics, still fp32).
 *  UE8M0_PACKED  the exponent byte of the power-of-two scale, four groups per int32 (group 4j+i
 *                in byte i, little-endian); layout must be COL_MAJOR_TMA and the scale tensor is
 *                int32 [ceil(KG / 4), M] with strides {Mp, 1}; missing groups of the last word and
 *                padding rows are 0. */
typedef enum {
  QF_SCALE_F32 = 0,
  QF_SCALE_F32_POW2 = 1,
  QF_SCALE_UE8M0_PACKED = 2,
} qf_scale_format;

typedef struct {
  int group_size;                /* 32, 64 or 128; 0 means 128 */
  qf_scale_layout scale_layout;  /* default ROW_MAJOR */
  qf_scale_format scale_format;  /* default F32 */
  float scale_min;               /* floor on every scale; 0 means 1e-10; must be finite, >= 0 */
  const DLTensor *scale_ub;      /* optional [1] fp32 upper bound on every scale; NULL: none */
} qf_group_quant_opts;

/* Per-token-group quantization: q[m, k] = encode(x[m, k] * (1 / s[m, k / G])), s by the rule above.
 *  x       [M, K] bf16, fp16 or fp32, rows may be strided; K a multiple of G.
 *  q       [M, K] e4m3fn, e4m3fnuz or int8, rows may be strided.
 *  scales  as opts->scale_layout / scale_format describe.
 * x, q 16-byte aligned; 64-bit offsets. */
qf_status qf_quant_group(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales,
                         const qf_group_quant_opts *opts);

/* The gated activation before quantization, for x laid out [gate | up]:
 *   g' = limit > 0 ? min(g, limit) : g          u' = limit > 0 ? clamp(u, -limit, limit) : u
 *   v  = g' * (1 / (1 + exp(-alpha * g'))) * (u' + (up_plus_one ? 1 : 0))
 * The zero value is SiLU(g) * u (alpha 0 means 1). gpt-oss: alpha 1.702, limit 7, up_plus_one.
 * exp is qfuse's own fp32 exp (docs/NUMERICS.md), identical on CPU and GPU, so by default the
 * CUDA output equals the CPU reference bit for bit.
 * fast_exp nonzero lets CUDA compute 1 / (1 + exp(-alpha g')) with the hardware approximations
 * (ex2.approx and rcp.approx, each within 2 ulp; about a third of the instructions, which is what
 * makes the op memory-bound): v then differs from the exact v by a few ulp, which moves a code by
 * one step where v * (1/s) lies that close to a rounding boundary, and an fp32 scale by a few ulp
 * when the group's absmax moves. NaN, Inf and zero inputs give the same results as the exact path.
 * The CPU backend always computes exactly. */
typedef struct {
  float alpha;      /* 0 means 1 */
  float limit;      /* > 0 enables the clamps; 0: none */
  int up_plus_one;  /* nonzero: multiply by (u' + 1) */
  int fast_exp;     /* nonzero: CUDA may use the hardware exp2 / reciprocal (see above) */
} qf_glu_opts;

/* Fused gated activation + per-token-group quantization:
 *  x       [M, 2H] bf16 or fp16 ([gate | up] along the last dimension), rows may be strided.
 *  q       [M, H] e4m3fn, e4m3fnuz or int8; H a multiple of G.
 *  scales  as in qf_quant_group with K = H.  glu: NULL for SiLU(g) * u. */
qf_status qf_silu_mul_quant_group(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales,
                                  const qf_glu_opts *glu, const qf_group_quant_opts *opts);

typedef struct {
  float scale_min;           /* floor on every scale; 0 means 1e-10 */
  const DLTensor *scale_ub;  /* optional [1] fp32 upper bound on every scale (symmetric only) */
} qf_token_quant_opts;

/* Dynamic per-token quantization: one scale per row (a group of the whole row).
 *  x       [M, K] bf16, fp16 or fp32, rows may be strided.
 *  q       [M, K] e4m3fn, e4m3fnuz or int8.
 *  scales  [M] or [M, 1] fp32.
 *  azp     NULL: symmetric. Otherwise [M] int32 and q int8: asymmetric per-token INT8,
 *          lo = min(v), hi = max(v) over the row (NaN-propagating), s = max((hi - lo) / 255,
 *          scale_min), azp = rne(-128 - lo * (1/s)) clamped to [-128, 127] (as int32),
 *          q = sat_int8(rne(v * (1/s)) + azp), so that v ~ s * (q - azp). scale_ub must be NULL. */
qf_status qf_quant_token(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales,
                         DLTensor *azp, const qf_token_quant_opts *opts);

/* Per-tensor quantization, static or dynamic.
 *  dynamic == 0: scale is an input, as qf_quant_per_tensor (e4m3fnuz accepted as well).
 *  dynamic != 0: scale [1] fp32 is an output: s = max(amax(x) / qmax, scale_min), then q as
 *  above. On CUDA the dynamic form reads x once when it fits the registers of one resident grid
 *  (about 8 M elements; one cooperative kernel), otherwise twice (the amax, then the
 *  quantization). It uses the context's workspace (allocated on first use). */
typedef struct {
  int dynamic;
  float scale_min; /* dynamic only; 0 means 1e-10 */
} qf_tensor_quant_opts;

qf_status qf_quant_tensor(qf_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scale,
                          const qf_tensor_quant_opts *opts);

/* RMSNorm followed by quantization.
 *   y  = residual ? round_to_x_dtype(x + residual) : x      (residual then holds y; a NaN sum
 *                                                            is stored as the positive NaN)
 *   r  = 1.0f / sqrtf((float)(sum_k y_k^2 (accumulated in fp64) / K) + eps)
 *   v  = (y * r) * w                                          (fp32, in this order)
 * then per-token quantization (group_size == -1: scales [M] fp32) or per-group quantization of v
 * exactly as qf_quant_group with opts->group.
 *  x        [M, K] bf16 or fp16, rows may be strided.  weight [K], same dtype as x.
 *  residual NULL or [M, K] same dtype as x; read, then overwritten with y.
 *  q, scales as in qf_quant_token (group_size -1) or qf_quant_group. */
typedef struct {
  float eps;                  /* 0 means 1e-6 */
  int group_size;             /* -1: per token; 0 means 128; else 32, 64, 128 */
  qf_group_quant_opts group;  /* layout, format, floor and bound (group_size field unused) */
} qf_rms_norm_quant_opts;

qf_status qf_rms_norm_quant(qf_ctx *ctx, const DLTensor *x, DLTensor *residual,
                            const DLTensor *weight, DLTensor *q, DLTensor *scales,
                            const qf_rms_norm_quant_opts *opts);

/* ---- GEMM: block-scaled FP8 (the DeepSeek-V3 recipe) ------------------------------------
 *
 * D[m, n] = C[m, n] + sum over K-blocks kb of As[m, kb] * Bs[n / 128, kb] * (A[m, kb] . B[n, kb])
 * where A[m, kb] . B[n, kb] is the dot product over the 128 columns of block kb (the last block
 * may be shorter when K is not a multiple of 128; it still has one scale). Each block's dot
 * product is accumulated by the tensor cores and promoted to fp32 with its two scales, so the
 * limited-precision FP8 accumulation never spans more than 128 products.
 *  a         [M, K] e4m3fn, K contiguous, rows may be strided (pitch a multiple of 16 bytes).
 *  a_scales  fp32 per 1 x 128 block: [KB, M] with strides {Mp, 1} (column-major, M padded to a
 *            multiple of 4: what qf_quant_group writes with COL_MAJOR_TMA), or row-major [M, KB]
 *            with opts->a_scales_row_major (read with strided loads; docs/GEMM.md gives the cost).
 *            KB = ceil(K/128).
 *  b         [N, K] e4m3fn, K contiguous (the weight as stored), rows may be strided.
 *  b_scales  fp32 per 128 x 128 block: [ceil(N/128), KB], contiguous.
 *  d         [M, N] bf16, fp16 or fp32, rows may be strided.
 *  opts->c   optional fp32 [M, N] (rows may be strided) added to the result; may be d itself when
 *            d is fp32.
 * Any M >= 1; N and K multiples of 16; 64-bit offsets.
 * CUDA: where the output tiles leave SMs idle (decode, small M), K is split across CTAs whose
 * fp32 partial tiles are added in a fixed order (the result does not vary from run to run)
 * through a device scratch buffer that the context allocates at the first such call and keeps
 * (a few MB; freed by qf_ctx_destroy). Allocation synchronizes the device and cannot happen
 * during a CUDA graph's capture: qf_ctx_reserve_workspace (4 KB + 128 KB per SM covers every
 * shape) or one call of each split shape before capturing.
 * opts->fine_promotion (fp32 d only, else QF_ERR_DTYPE; 0, 1, 32 or 64, else QF_ERR_VALUE): the
 * tensor cores' sums span 32 products (one wgmma; 32 or 1) or 64 (64) instead of a block's 128,
 * each promoted to fp32 with the block's two scales. The formula is the same; what changes is the
 * error of the tensor cores' own reduced-precision sum, which sets the fp32 result's error: on an
 * H200 with 32, about 2.8x lower on data quantized as DeepSeek-V3 does (relative Frobenius 4.5e-5
 * against 1.27e-4, cuBLASLt's figure too) and 2x lower on random e4m3 codes (1.0e-4 against
 * 2.1e-4), at 1.37x the time (geomean of the bench's shapes); with 64, 7.5e-5 and 1.5e-4 at
 * 1.15x, 1.01-1.12x at M <= 64 (docs/GEMM.md). The CPU backend computes in float64 either way. */
typedef struct {
  const DLTensor *c;       /* NULL: D = A.B^T only */
  int a_scales_row_major;  /* nonzero: a_scales is [M, KB] row-major instead of [KB, M] */
  int fine_promotion;      /* fp32 d only: promote every 32 (32 or 1) or 64 (64) of K instead of every 128 */
} qf_gemm_blockscale_opts;

qf_status qf_gemm_fp8_blockscale(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales,
                                 const DLTensor *b, const DLTensor *b_scales, DLTensor *d,
                                 const qf_gemm_blockscale_opts *opts);

/* ---- GEMM: grouped block-scaled FP8 for MoE experts (contiguous layout) -----------------
 *
 * The tokens routed to each expert are rows of one A, grouped by expert in runs that start on
 * a multiple of 128 rows (the layout of DeepSeek-V3's grouped GEMMs: each expert's run padded to
 * 128 rows). Row block mb (rows 128 mb .. 128 mb + 127) belongs to expert e = expert_ids[mb]:
 *   Y[m, n] = sum over K-blocks kb of As[m, kb] * Bs[e, n / 128, kb] * (A[m, kb] . B[e, n, kb])
 * with the blockwise promotion of qf_gemm_fp8_blockscale. expert_ids[mb] = -1 marks a block of
 * padding: its rows of D are left untouched. Rows of a block past its expert's tokens are computed
 * like the others, from whatever A and As hold there.
 *  epilogue QF_GROUPED_NONE:   D [M, N], D[m, n] = Y[m, n].
 *  epilogue QF_GROUPED_SWIGLU: B holds an expert's gate and up projections interleaved by 8 rows
 *            (rows 16 j .. 16 j + 7: gate rows 8 j .. 8 j + 7; rows 16 j + 8 .. 16 j + 15: the
 *            matching up rows), so N = 2 I; D [M, I],
 *            D[m, 8 j + c] = silu(Y[m, 16 j + c]) * Y[m, 16 j + 8 + c], silu(g) = g / (1 + e^-g),
 *            in fp32 on CUDA with the fast exponential and division (a few ulp; 0 for g below
 *            about -87, NaN for g = -inf), in float64 on the CPU reference.
 *  a           [M, K] e4m3fn as in qf_gemm_fp8_blockscale; a_scales likewise (column-major
 *              [KB, Mp] or, with opts->a_scales_row_major, [M, KB]).
 *  b           [E, N, K] e4m3fn, K contiguous, experts stacked (strides {N * pitch, pitch, 1}).
 *  b_scales    fp32 [E, ceil(N/128), KB], contiguous.
 *  expert_ids  int32 [ceil(M/128)], any stride (a per-row expert index taken every 128 rows is
 *              one): values in [-1, E). The CPU backend refuses others with QF_ERR_VALUE; the CUDA
 *              backend reads them on the device and leaves the D rows of such a block untouched.
 *  d           [M, N] or, SwiGLU, [M, N / 2]: bf16, fp16 or fp32, rows may be strided.
 * Any M >= 1; N and K multiples of 16; 64-bit offsets. */
typedef enum {
  QF_GROUPED_NONE = 0,   /* D = Y */
  QF_GROUPED_SWIGLU = 1  /* D = silu(gate) * up of interleaved gate / up rows */
} qf_grouped_epilogue;

typedef struct {
  qf_grouped_epilogue epilogue;
  int a_scales_row_major;  /* nonzero: a_scales is [M, KB] row-major instead of [KB, Mp] */
} qf_gemm_grouped_opts;

qf_status qf_gemm_fp8_blockscale_grouped(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales,
                                         const DLTensor *b, const DLTensor *b_scales,
                                         const DLTensor *expert_ids, DLTensor *d,
                                         const qf_gemm_grouped_opts *opts);

/* ---- GEMM: grouped block-scaled FP8 for MoE experts (masked layout) ----------------------
 *
 * The layout of a decode step whose token counts stay on the device (CUDA graphs): expert e's
 * tokens are the first masked_m[e] of its max_m rows. As qf_gemm_fp8_blockscale_grouped, with
 * expert e's rows [e * max_m, (e + 1) * max_m) of the flattened A and D, and its row blocks from
 * masked_m[e] on skipped (their D rows untouched); rows of its last block past masked_m[e] are
 * computed like the others.
 *  a         [E, max_m, K] e4m3fn, K contiguous, experts stacked; max_m a multiple of 128.
 *  a_scales  of the flattened A [E * max_m, K]: column-major [KB, E * max_m] (what qf_quant_group
 *            writes for it with COL_MAJOR_TMA) or, with opts->a_scales_row_major, [E * max_m, KB].
 *  b, b_scales as in qf_gemm_fp8_blockscale_grouped (the same E).
 *  masked_m  int32 [E], values in [0, max_m]: the CPU backend refuses others with QF_ERR_VALUE;
 *            the CUDA backend reads them on the device (negative: no rows; above max_m: all).
 *  d         [E, max_m, N] or, SwiGLU, [E, max_m, N / 2], experts stacked, rows may be strided. */
qf_status qf_gemm_fp8_blockscale_masked(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scales,
                                        const DLTensor *b, const DLTensor *b_scales,
                                        const DLTensor *masked_m, DLTensor *d,
                                        const qf_gemm_grouped_opts *opts);

/* ---- GEMM: W8A8 scaled GEMM with dequantization epilogues -------------------------------
 *
 * D[m, n] = sa * sb * (acc[m, n] - zp[m, n]) + bias[n], with acc = A^ . B^T accumulated exactly
 * in int32 for int8 operands and in fp32 for e4m3fn operands, and zp the zero-point term of
 * asymmetric int8 activations (A = sa * (A^ - z_a), as qf_quant_token with azp produces):
 *   ScaledEpilogue       no bias, no zero point            (opts NULL or all fields NULL)
 *   ScaledEpilogueBias   bias                              (opts->bias)
 *   ScaledEpilogueAzp    zp[m, n] = azp_adj[n], a per-tensor zero point folded into it
 *                        (azp_adj = z_a * column sums of B^: qf_gemm_azp_adj with multiplier z_a)
 *   ScaledEpilogueAzpPerToken  zp[m, n] = azp[m] * azp_adj[n] (azp_adj = column sums of B^)
 * bias is optional with each. The float part is computed in fp32 as
 * ((float)(acc - zp) * (sa * sb)) + bias on the GPU and in float64 on the CPU reference; int8
 * results then agree up to the final float roundings.
 *  a        [M, K] int8 or e4m3fn, K contiguous, rows may be strided (pitch a multiple of 16).
 *  a_scale  fp32 [1] (per tensor) or [M] / [M, 1] (per token).
 *  b        [N, K] same dtype as a (the weight as stored), rows may be strided.
 *  b_scale  fp32 [1] (per tensor) or [N] / [1, N] (per output channel).
 *  d        [M, N] bf16, fp16 or fp32, rows may be strided.
 * Any M >= 1; N and K multiples of 16; 64-bit offsets.
 * CUDA: e4m3fn products are accumulated by the tensor cores 128 K at a time and promoted to fp32
 * (as in qf_gemm_fp8_blockscale), int8 ones in int32 over the whole K, which bounds int8 K to
 * 65535 (QF_ERR_SHAPE beyond). Decode shapes split K as qf_gemm_fp8_blockscale does (same
 * workspace, same fixed summation order). */
typedef struct {
  const DLTensor *bias;     /* NULL or [N] of d's dtype */
  const DLTensor *azp_adj;  /* NULL or [N] int32 (int8 operands only) */
  const DLTensor *azp;      /* NULL or [M] int32 per-token zero points; needs azp_adj */
} qf_gemm_scaled_opts;

qf_status qf_gemm_scaled(qf_ctx *ctx, const DLTensor *a, const DLTensor *a_scale,
                         const DLTensor *b, const DLTensor *b_scale, DLTensor *d,
                         const qf_gemm_scaled_opts *opts);

/* adj[n] = multiplier * sum_k b[n, k] (int32, exact). b [N, K] int8, rows may be strided;
 * adj [N] int32. multiplier 1 gives azp_adj for per-token zero points; z_a gives azp_with_adj
 * for a per-tensor zero point. A result that would leave int32 is refused with QF_ERR_VALUE: the
 * CPU refuses an actual overflow, CUDA (which cannot look at the data first) any multiplier with
 * |multiplier| * 128 * K > 2^31 - 1. */
qf_status qf_gemm_azp_adj(qf_ctx *ctx, const DLTensor *b, int32_t multiplier, DLTensor *adj);

/* ---- Attention -------------------------------------------------------------------------
 *
 * Multi-head attention (FMHA) with grouped-query heads, over a batch of B sequences:
 *  q  [B, Sq, Hq, D], k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv]: fp16 or bf16 (one dtype for the
 *     three; k and v may be e4m3fn instead, below), the last dimension contiguous, any element strides on the other three (so
 *     [B, S, H, D] and [B, H, S, D] storage alike). Hq is a multiple of Hkv: query head h reads
 *     kv head h / (Hq / Hkv).
 *  o  [B, Sq, Hq, Dv]: q's dtype or fp32, the last dimension contiguous, any strides on the
 *     others (o must not overlap q, k or v).
 *  lse fp32 [B, Hq, Sq] contiguous, or NULL.
 *  sinks fp32 [Hq] on the op's device, or NULL: one logit per query head that joins every row's
 *     softmax denominator and has no value (attention sinks as gpt-oss uses them).
 * The queries are the last Sq tokens of the Skv (Sq <= Skv is not required): query i sits at key
 * position p = i + Skv - Sq. With g = h / (Hq / Hkv), key j is visible to query i when
 *   (!causal || j <= p) && (window == 0 || j > p - window),
 *   s[j] = sm_scale * (q[b, i, h] . k[b, j, g])
 *   lse[b, h, i] = log(sum over visible j of exp(s[j]) + (sinks ? exp(sinks[h]) : 0))  (natural)
 *   o[b, i, h] = sum over visible j of exp(s[j] - lse) v[b, j, g]
 * so o is the normalized output and lse the row's log-sum-exp: a result over one part of the
 * keys merges with another's by o = sum_i exp(lse_i - lse) o_i, lse = log(sum_i exp(lse_i))
 * (docs/ATTENTION.md says why qfuse returns normalized O rather than an un-normalized sum). A row
 * with no visible key and no sink gets o = 0 and lse = -inf.
 * Numerics: the CPU reference computes in float64 from the 16-bit inputs. CUDA forms s in fp32
 * on the tensor cores, rounds the probabilities exp(s - running max) to q's dtype for the P.V
 * product (fp32 accumulation), and uses the hardware exp2; its error against the reference is
 * stated and bounded in tests/gpu/test_attention.c.
 * CUDA: D = Dv in {64, 128, 256, 512} or D = 192 with Dv = 128 (MLA's prefill), every pointer
 * 16-byte aligned and every stride a multiple of 16 bytes, B * Hkv <= 65535, Sq * Hq / Hkv and
 * Skv below 2^30 (QF_ERR_UNSUPPORTED, QF_ERR_ALIGNMENT or QF_ERR_LAYOUT otherwise). The query heads of one kv head share the rows of
 * a tile (decode fills a tile with them), and where the tiles leave SMs idle the keys are split
 * across CTAs whose partial results are merged by the rule above through the context's workspace
 * (allocated at the first call of a shape, as for the GEMMs' split-K: make one call before
 * capturing a CUDA graph). Sinks must not be NaN (they are read on the device, unchecked).
 * FP8 keys and values (every form, caches included): k and v may both be e4m3fn while q stays
 * fp16 / bf16, with the dequantization scales opts->k_scale and opts->v_scale (fp32 [Hkv], one per
 * kv head, or [1] for the whole tensor, on the op's device; NULL means 1): key j of kv head g is
 * k[j, g] * k_scale[g] and its value v[j, g] * v_scale[g] in the formula above. The CPU reference
 * computes with those products in float64. CUDA turns the codes into q's dtype (exact: every
 * e4m3fn value is an fp16 and a bf16), multiplies the scores by k_scale[g] and each row's result
 * by v_scale[g], and otherwise computes as for 16-bit keys (prompts at D = 64, 128 and 256 on the
 * prefill kernel, whose producer widens the codes; other head dims on the decode kernel, slower on
 * long prompts: docs/ATTENTION.md). The scales are read on the device (a
 * CUDA graph can replay the call as they change), unchecked: a scale that is not finite makes the
 * rows of its kv head NaN or Inf. Scales with 16-bit k and v are refused (QF_ERR_VALUE). */
typedef struct {
  float sm_scale;  /* 0 means 1 / sqrt(D) */
  int causal;      /* nonzero: keys after the query's position are masked */
  int64_t window;  /* > 0: keys window or more positions before the query's are masked */
  const DLTensor *k_scale, *v_scale;  /* e4m3fn k and v: fp32 [Hkv] or [1], or NULL (1) */
} qf_attention_opts;

qf_status qf_attention(qf_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *sinks,
                       const qf_attention_opts *opts, DLTensor *o, DLTensor *lse);

/* Attention over a paged KV cache with a length per sequence (decode, speculative decode and
 * chunked prefill against an engine's cache):
 *  k_cache [num_pages, page_size, Hkv, D], v_cache [num_pages, page_size, Hkv, Dv]: q's dtype
 *     (or both e4m3fn, as qf_attention's FP8 keys and values),
 *     the last dimension contiguous, any element strides on the others.
 *  block_table int32 [B, max_pages] (rows may be strided): key j of sequence b is slot
 *     j % page_size of page block_table[b, j / page_size].
 *  kv_lens int32 [B]: L_b, the keys of sequence b, in [0, max_pages * page_size].
 *  q [B, Sq, Hq, D]: the last Sq tokens of each sequence (query i at key position i + L_b - Sq);
 *  sinks, opts, o and lse as qf_attention, with L_b keys in place of Skv.
 * The CPU backend refuses lengths or pages (of keys below L_b) out of range with QF_ERR_VALUE.
 * CUDA reads block_table and kv_lens on the device (a CUDA graph can replay the call as they
 * change): lengths are clamped to the range, and where a page is out of range the rows that see
 * its keys (and others of their tile) get NaN in o and lse, never values from another page. Head
 * dims, alignment and strides as qf_attention on CUDA; pages of any size (the prefill kernel loads
 * them by TMA where page_size is a multiple of its key tile or a divisor of it that is a multiple
 * of 8, else the decode kernel runs). */
qf_status qf_attention_paged(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_cache, const DLTensor *v_cache,
                             const DLTensor *block_table, const DLTensor *kv_lens, const DLTensor *sinks,
                             const qf_attention_opts *opts, DLTensor *o, DLTensor *lse);

/* Attention over packed sequences of different lengths (an engine's batch of prompts, "varlen"):
 *  q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv], o [total_q, Hq, Dv]: dtypes,
 *     contiguity and strides as qf_attention's (with no batch dimension).
 *  cu_seqlens_q, cu_seqlens_k int32 [B + 1] on the op's device: sequence b's queries are tokens
 *     cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q and o, its keys rows cu_seqlens_k[b] ..
 *     cu_seqlens_k[b + 1] - 1 of k and v (offsets that start at >= 0 and never decrease).
 *  max_seqlen_q, max_seqlen_k: the most queries and keys a sequence has (CUDA sizes its grid by
 *     them), in [0, 2^30).
 *  lse fp32 [Hq, total_q] contiguous, or NULL; sinks and opts as qf_attention.
 * Each sequence is computed as qf_attention with B = 1 would compute it: its queries are the last
 * of its keys (query i of a sequence of Sq_b queries and L_b keys at key position i + L_b - Sq_b).
 * Tokens past cu_seqlens_q[B] are left as they were in o and lse.
 * The CPU backend refuses offsets out of range (decreasing, past total_q or total_k, a step above
 * the max) with QF_ERR_VALUE. CUDA reads the offsets on the device (a CUDA graph can replay the call
 * as they change) and clamps them to those ranges; it never reads keys of another sequence into a
 * result (the rows of a tile past a sequence's keys are cleared, so even an Inf or NaN there stays
 * out). Head dims, alignment and strides as qf_attention on CUDA, and total_q, total_k below 2^30. */
qf_status qf_attention_varlen(qf_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *cu_seqlens_q,
                              const DLTensor *cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, const DLTensor *sinks,
                              const qf_attention_opts *opts, DLTensor *o, DLTensor *lse);

/* Packed queries over a paged KV cache (chunked prefill and decode steps of different lengths in
 * one call): q [total_q, Hq, D], o [total_q, Hq, Dv], lse [Hq, total_q] or NULL, cu_seqlens_q and
 * max_seqlen_q as qf_attention_varlen; k_cache, v_cache, block_table [B, max_pages] and kv_lens [B]
 * as qf_attention_paged. Sequence b's queries are the last of its kv_lens[b] keys. */
qf_status qf_attention_paged_varlen(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_cache, const DLTensor *v_cache,
                                    const DLTensor *block_table, const DLTensor *kv_lens, const DLTensor *cu_seqlens_q,
                                    int64_t max_seqlen_q, const DLTensor *sinks, const qf_attention_opts *opts, DLTensor *o,
                                    DLTensor *lse);

/* Appends new keys and values to a KV cache by slot (a decode or prefill step writing its tokens'
 * K and V where qf_attention_paged and qf_attention_paged_varlen read them):
 *  k_new [T, Hkv, D], v_new [T, Hkv, Dv]: fp16 or bf16, the last dimension contiguous, any element
 *     strides on the others.
 *  slots int32 [T] on the op's device: token t's row goes to slot slots[t] of the cache (page
 *     slots[t] / page_size, its row slots[t] % page_size); a negative slot skips the token (padding).
 *  k_cache [num_pages, page_size, Hkv, D], v_cache [num_pages, page_size, Hkv, Dv]: k_new's dtype
 *     (the values copied), or both e4m3fn: code = e4m3fn(x * (1 / scale[g])) for kv head g, the
 *     reciprocal and product in fp32, rounded to nearest even and saturated to +-448, NaN kept as
 *     NaN; k_scale and v_scale fp32 [Hkv] or [1] on the op's device, NULL meaning 1 (the scales the
 *     attention calls' opts then take; refused with 16-bit caches, QF_ERR_VALUE). A dense cache
 *     [B, S, Hkv, D] is the paged one with page_size S (slot b * S + s).
 * Slots that no token names are left as they are. The CPU backend refuses a slot at or past
 * num_pages * page_size, or one named twice, with QF_ERR_VALUE before writing anything; CUDA reads
 * the slots on the device (a CUDA graph can replay the call as they change), skips a slot past the
 * cache, and a slot named twice gets any mix of its tokens' rows. CUDA gives the CPU's bytes. CUDA:
 * D and Dv multiples of 8, pointers and strides of whole 16-byte chunks. */
qf_status qf_attention_cache_append(qf_ctx *ctx, const DLTensor *k_new, const DLTensor *v_new, const DLTensor *slots,
                                    const DLTensor *k_scale, const DLTensor *v_scale, DLTensor *k_cache, DLTensor *v_cache);

/* ---- Vector quantization (VQ) -------------------------------------------------------------
 *
 * A weight W [N, K] is cut along K into vectors of vector_size elements. Each vector is replaced
 * by `residuals` indices of index_bits bits; index i of residual r selects an entry (a vector) of
 * codebook r, and the decoded vector is the sum over r of the selected entries, times scale[n]
 * when row_scale is set. Rows and columns are grouped into scopes that share a codebook:
 * scope_rows x scope_cols (0: the whole dimension), which covers one codebook per tensor (AQLM),
 * per 256 x 256 tile (GPTVQ) and per channel group of a KV cache laid out [tokens, heads * dim]
 * (CQ: scope_cols = the group's channels, every token shares it).
 *
 * Storage, for an allocation that qf_vq_sizes() describes:
 *  codes      uint8 [R, N, row_bytes]: row n of residual r holds its K / vector_size indices as a
 *             little-endian bit stream (index j in bits [j * index_bits, (j + 1) * index_bits));
 *             row_bytes = ceil(K / vector_size * index_bits / 8) + 2, rounded up to a multiple of
 *             16 (decoders read 24-bit windows; rows start 16-byte aligned for wide loads).
 *  codebooks  entry_dtype (fp16 or bf16) [R, n_books, 2^index_bits, vector_size]; the book of
 *             element (n, k) is (n / scope_rows) * books_per_row + k / scope_cols. Entries are
 *             ordered by how often the codes use them, most used first (the codebook cache's
 *             register and shared-memory tiers hold the head of each book).
 *  scales     fp32 [N] when row_scale, else absent. */
typedef struct {
  int vector_size;       /* elements per vector, 1 to 16 */
  int index_bits;        /* bits per index, 1 to 16: 2^index_bits entries per codebook */
  int residuals;         /* codebooks applied in sequence and summed, 1 to 4 */
  int scope_rows;        /* rows sharing a codebook; 0: all */
  int scope_cols;        /* columns sharing a codebook, a multiple of vector_size; 0: all */
  qf_dtype entry_dtype;  /* QF_F16 or QF_BF16 */
  int row_scale;         /* nonzero: one fp32 scale per row */
  int lattice;           /* 0: codebooks learned by k-means; QF_VQ_LATTICE_E8P: each book is the E8P
                            lattice times a scale (below) */
} qf_vq_format;

/* The configurations of the VQ-LLM paper, as qf_vq_format values (fp16 entries). */
typedef enum {
  QF_VQ_GPTVQ_2 = 0, /* VQ<4, 8, 1>, one codebook per 256 x 256 tile: 2 bits per value */
  QF_VQ_CQ_2 = 1,    /* VQ<4, 8, 1>, one codebook per 4 channels of a KV cache: 2 bits */
  QF_VQ_CQ_4 = 2,    /* VQ<2, 8, 1>, one codebook per 2 channels: 4 bits */
  QF_VQ_AQLM_3 = 3,  /* VQ<8, 12, 2>, one codebook pair per tensor: 3 bits */
  QF_VQ_QUIP_4 = 4,  /* VQ<8, 16, 2>, row scales, lattice QF_VQ_LATTICE_E8P: QuIP#-4, 4 bits */
} qf_vq_preset;

/* QF_ERR_VALUE for an unknown preset (*out untouched). */
qf_status qf_vq_format_preset(qf_vq_preset preset, qf_vq_format *out);

typedef struct {
  int64_t row_bytes;       /* bytes per row of codes (multiple of 16) */
  int64_t n_books;         /* codebooks per residual */
  int64_t books_per_row;   /* codebooks along K */
  int64_t entries;         /* 2^index_bits */
  double bits_per_value;   /* codes only: residuals * index_bits / vector_size */
} qf_vq_sizes;

/* Checks fmt against W's shape [N, K] and fills *out. QF_ERR_VALUE (bad format) or QF_ERR_SHAPE
 * (K not a multiple of vector_size or scope_cols), with a message on ctx. */
qf_status qf_vq_sizes_of(qf_ctx *ctx, const qf_vq_format *fmt, int64_t N, int64_t K, qf_vq_sizes *out);

/* Lattice codebooks (qf_vq_format.lattice). E8P: QuIP#'s 2^16 points of E8 + 1/4 for vectors of 8
 * values (vector_size 8, index_bits 16, fp16 entries); index bits 15-8 pick one of 256 patterns of
 * absolute values, 7-1 the signs of values 1-7 (value 0's follows from a parity rule), 0 a shift
 * of +1/4 or -1/4 (docs/VQ.md gives the construction). Each book is the lattice times a scale of
 * at most 7 significant bits (exact in fp16; entry 0 is a quarter of it in every element), which
 * the quantizer chooses per book and residual for the least error, and keeps the lattice's index
 * order (no reordering by use). The books are stored whole, and every call that reads them works
 * on any books; CUDA's VQ-GeMV and VQ-GeMM decode the lattice instead (a 4 KB table of patterns,
 * signs and shift from the index, the scale from entry 0), so with this format the books must be
 * such scaled lattices, as qf_vq_quantize writes them. */
#define QF_VQ_LATTICE_E8P 1

typedef struct {
  int iterations;    /* Lloyd iterations per codebook; 0 means 10 (k-means only) */
  uint64_t seed;     /* k-means++ seeding; 0 means a fixed default */
  int threads;       /* CPU threads (at most 256 are used); 0 means one per CPU the process may run
                        on. Every count writes the same bytes. */
} qf_vq_quantize_opts;

typedef struct {
  double rel_mse;         /* ||W - decoded||^2 / ||W||^2 */
  int64_t entries;        /* entries over all codebooks */
  int64_t unused_entries; /* entries no code selects */
  int64_t hot_entries;    /* entries used more than mean + 3 sigma of their codebook's counts */
  double hot_share;       /* fraction of all code uses that fall on hot entries */
} qf_vq_stats;

/* Offline quantizer (CPU contexts only): per scope and residual, k-means++ seeding and Lloyd
 * iterations on the (residual) vectors, entries rounded to entry_dtype before the next residual
 * is formed, then the entries of each codebook reordered by use, most used first. With a lattice
 * (fmt->lattice), each residual's book is the scaled lattice and every vector takes the entry
 * qf_vq_encode would pick (nearest in fp32, lowest index on ties), found by a lattice search.
 *  w  [N, K] fp32, fp16 or bf16, rows may be strided.  stats may be NULL. */
qf_status qf_vq_quantize(qf_ctx *ctx, const DLTensor *w, const qf_vq_format *fmt,
                         const qf_vq_quantize_opts *opts, DLTensor *codes, DLTensor *codebooks,
                         DLTensor *scales, qf_vq_stats *stats);

/* Quantize-on-append: encodes new rows x [T, K] (fp32, fp16 or bf16) with existing codebooks,
 * as rows row0 .. row0 + T - 1 of the matrix the codebooks belong to (row0 picks the codebooks
 * when scope_rows > 0). Each residual takes the stored entry nearest (squared distance, lowest
 * index on ties) to what the previous ones left, exactly as the quantizer's final assignment, so
 * encoding the quantized matrix again reproduces its codes. codes [R, T, row_bytes]; scales [T]
 * when fmt->row_scale (each new row's RMS), else NULL. CUDA gives the CPU's codes and scales
 * byte for byte (the same fp32 distances; the fp64 sum of squares of a row scale is summed in
 * another order, which can move the fp32 scale only on a rounding tie). */
qf_status qf_vq_encode(qf_ctx *ctx, const DLTensor *x, int64_t row0, const DLTensor *codebooks,
                       const qf_vq_format *fmt, DLTensor *codes, DLTensor *scales);

/* Quantize-on-append into a cache by slot (a decode step's new tokens of sequences at different
 * lengths): row i of x [T, K] is encoded as row slots[i] of the matrix the codebooks belong to
 * (which picks the codebooks when scope_rows > 0), exactly as qf_vq_encode would encode it there,
 * and written to that row of codes [R, N, row_bytes] (the whole cache; its codebooks those of an
 * [N, K] matrix) and of scales [N] when fmt->row_scale. slots int32 [T] on the op's device: a
 * negative slot skips its row (a padding token); the others must be distinct and below N. Rows of
 * codes and scales that no slot names are left as they are. The CPU backend refuses a slot >= N or
 * a repeated one with QF_ERR_VALUE before writing anything; CUDA reads the slots on the device
 * (a CUDA graph can replay the call as they change) and skips a slot >= N, and a repeated slot
 * leaves that row any mix of its rows' codes. With qf_vq_attention_decode's kv_lens, an engine's
 * step appends token L_b of entry b at slot b * seq_len + L_b. */
qf_status qf_vq_encode_slots(qf_ctx *ctx, const DLTensor *x, const DLTensor *slots, const DLTensor *codebooks,
                             const qf_vq_format *fmt, DLTensor *codes, DLTensor *scales);

/* A decode step's K and V appends in one call (on CUDA one launch instead of two):
 * qf_vq_encode_slots(k_new, slots, k_books, fmt, k_codes, k_scales) and the same for v_new into
 * v_codes with v_books, with the same codes and scales as those two calls. k_new and v_new have
 * one shape and dtype, k_codes and v_codes one number of rows; the scales are NULL unless
 * fmt->row_scale. Every argument of both is checked before anything is written. */
qf_status qf_vq_encode_kv_slots(qf_ctx *ctx, const DLTensor *k_new, const DLTensor *v_new, const DLTensor *slots,
                                const DLTensor *k_books, const DLTensor *v_books, const qf_vq_format *fmt,
                                DLTensor *k_codes, DLTensor *v_codes, DLTensor *k_scales, DLTensor *v_scales);

/* y[M, N] = x[M, K] . W^T with W [N, K] VQ-quantized: VQ-GeMV (M of 1 to 16) and VQ-GeMM.
 * x fp32, fp16 or bf16; y fp32, fp16 or bf16 [M, N]. The reference decodes W as
 * qf_vq_dequantize does (fp32) and accumulates in float64; CUDA forms every product exactly on
 * the tensor cores and accumulates in fp32. Its general kernel (every M): x and the entries
 * enter as 16-bit parts that sum to them exactly (fp32 x as three bf16 parts, an fp16 value as two bf16
 * parts when the other operand is bf16; docs/VQ.md gives the limits), each residual's entries
 * are multiplied separately, and the row scale multiplies the finished sum. For M <= 16 with
 * 8-bit indices, vector size 2, 4 or 8, K and the codebook scopes multiples of 256 and x of the
 * entries' type (16-byte aligned rows), CUDA runs the banked GeMV (bank-private codebook copies
 * in shared memory, split-K over blocks with a fixed-order reduction through the context's
 * workspace); an E8P lattice format (QuIP#-4) with fp16 x, K and scope_cols multiples of 256,
 * scope_rows 0 or a multiple of 16 runs the E8P GeMV instead (the entries decoded from the index
 * bits into the MMA's operands, each residual's share of 256 columns summed by the tensor core,
 * then the same reduction). For M > 16 with 8-bit indices, vector size 2, 4 or 8, the E8P
 * lattice, or 12-bit indices of vector size 8 with one codebook per residual (AQLM), one or two
 * residuals, x of the entries' type (16-byte aligned rows), K a multiple of 64 and codebook scopes
 * of 0 or multiples of 128 rows and 64 columns, CUDA runs the tiled VQ-GeMM (W decoded once per
 * 128-row block tile into shared memory, wgmma against x tiles; x and the entries then enter as
 * themselves and the tensor cores accumulate each block's K range in fp32, split-K as above; the
 * AQLM formats from M = 9, or 7 where K >= 8192, W decoded into the wgmma's registers from books
 * staged whole). For M = 1 with one codebook per residual (AQLM), vector size 8 with 12- or 8-bit
 * indices or 4 with 10-bit ones and N at least half the entries, CUDA runs the table GeMV: per
 * chunk of 8 vectors the products of every entry with x's vectors (fp32 fma chains: exact products)
 * in a shared-memory table, then one lookup per vector of a row, the 8 lookups of a chunk added in
 * a fixed tree and the chunks in order (split-K as above). It also takes M = 2 with vector size 8,
 * x of the entries' type and fp16 or bf16 y: each table value (both rows of x in one word) is then
 * the fp32 sum of the vector's 8 exact products rounded to the entries' type; M = 3 and 4 run a
 * pair of rows at a time (an odd last row as at M = 1), on packed codes (standard codes: GC). For
 * M = 1 and 2 with books per tile of W, 8-bit indices and vector size 4 (GPTVQ-2), x of the entries'
 * type (rows aligned to 4 bytes), fp16 or bf16 y, K and the scopes multiples of 256, CUDA runs the
 * tile-table GeMV: per 256 columns (M = 2: 128, both rows of x in one table word) and book a table
 * of the entries' products with x built on the tensor cores, each value the fp32 sum of an entry's
 * 4 exact products rounded to the entries' type (fp16 values beyond 65504 are infinite), one lookup
 * per vector, the lookups added by the tensor cores in fp32 (split-K as above); M = 3 and 4 run it
 * a pair of rows at a time, on packed codes; with fp32 y the banked GeMV runs. The environment variable QF_VQ_BOOKS (auto, global,
 * shared, banked, tiled, lut, registers) forces the codebook placement of the CUDA kernels for the
 * ablation (docs/VQ.md). */
qf_status qf_vq_gemm(qf_ctx *ctx, const DLTensor *x, const DLTensor *codes, const DLTensor *codebooks,
                     const DLTensor *scales, const qf_vq_format *fmt, DLTensor *y);

/* Codes repacked for the table GeMV (made once per weight, as engines repack weights for their
 * GEMV kernels): for each residual, tile of 512 rows and chunk of 8 vectors along K, the tile's
 * rows' 8 indices of that chunk (index_bits bytes of the row's bit stream, zero-padded to a
 * multiple of 4 bytes) back to back, so that the kernel reads a (tile, chunk) in one contiguous
 * copy instead of one request per row. uint8 [R, ceil(N / 512), ceil(K / vector_size / 8),
 * 512 * ((index_bits + 3) / 4 * 4)]; rows past N and bytes past a code row are zeros.
 * qf_vq_gemm takes such a 4-D codes tensor in place of the 3-D one: the CPU reference unpacks it;
 * CUDA runs a table GeMV on it directly (M = 1 to 4, the table GeMVs' formats only, else
 * QF_ERR_UNSUPPORTED, as is fp32 y for books per tile of W): 1.2-1.5x faster than on the standard layout for one book per residual (AQLM), 1.14x on the
 * Llama-65B layers for books per tile of W (GPTVQ-2; docs/VQ.md). */
qf_status qf_vq_pack_gemv_shape(qf_ctx *ctx, const qf_vq_format *fmt, int64_t N, int64_t K, int64_t shape[4]);

/* packed = the packed layout of codes [R, N, row_bytes] of a [N, K] weight in fmt (CPU and CUDA,
 * the same bytes). */
qf_status qf_vq_pack_gemv(qf_ctx *ctx, const DLTensor *codes, const qf_vq_format *fmt, int64_t K, DLTensor *packed);

/* Decode attention over a VQ-quantized KV cache (CQ): for each batch b and query head h,
 *   o[b, h] = softmax(sm_scale * q[b, h] . K[b, t, g]) . V[b, t, g],  t < seq_len, g = h / (Hq / Hkv)
 *   lse[b, h] = log(sum_t exp(sm_scale * q[b, h] . K[b, t, g]))   (natural log)
 * K and V are the matrices [B * seq_len, Hkv * D] (row b * seq_len + t) quantized in fmt, with
 * their own codes and codebooks. q [B, Hq * D], o [B, Hq * D] fp32, fp16 or bf16, lse [B, Hq]
 * fp32. head_dim D and Hkv come from the options; Hq = q.shape[1] / D must be a multiple of Hkv.
 * The reference decodes K and V (fp32) and computes in float64. CUDA (vector_size 2, 4 or 8, D a
 * multiple of it up to 256, codebooks shared by all tokens)
 * forms the scores by decoding each K vector once for all query heads of its kv head or through a
 * table of q . entry products (chosen per shape), computes in fp32 and splits the sequence into
 * chunks merged with the LSE rule through the context's workspace (allocated at the first call of
 * a shape, as for the GEMMs' split-K; QF_VQ_BOOKS forces the codebook placement, docs/VQ.md).
 * For one residual of 8-bit indices, vector size 2 or 4 and D / vector_size of 32 or 64 (CQ-2 and
 * CQ-4 at D = 128), with codes 16-byte aligned, CUDA runs the banked kernel (without GQA, and with
 * GQA where the sequence keeps the SMs busy):
 * score tables and V codebooks laid out by vector in shared memory, so that no lookup of a warp
 * shares a bank with another lane's.
 * Sequences of different lengths (an engine's batch of requests in a cache of seq_len slots per
 * entry): opts->kv_lens int32 [B], contiguous, on the op's device, gives L_b, and entry b attends
 * to its first L_b tokens (rows b * seq_len .. b * seq_len + L_b - 1; the rows past them are never
 * read); an entry with L_b = 0 gets o = 0 and lse = -inf, as qf_attention's rows with no visible
 * key. The CPU backend refuses a length outside [0, seq_len] with QF_ERR_VALUE (outputs
 * untouched); CUDA reads the lengths on the device and clamps them to that range, so a CUDA graph
 * can replay the call as they change. Tiles past L_b copy and compute nothing.
 * A paged cache (an engine's pool of pages): with opts->block_table, int32 [B, max_pages] on the
 * op's device (rows may be strided), K and V codes are [R, num_pages * page_size, row_bytes], pages
 * of opts->page_size rows, and token t of entry b is row block_table[b, t / page_size] * page_size
 * + t % page_size; seq_len (at most max_pages * page_size) bounds the lengths as above, and table
 * entries past an entry's tokens are never read. The CPU backend refuses a page outside
 * [0, num_pages) for a token below L_b with QF_ERR_VALUE; CUDA reads the table on the device and
 * gives a token on such a page a NaN score (its entry's o and lse NaN), never another page's
 * codes. CUDA takes seq_len and page_size below 2^31 (QF_ERR_SHAPE); the banked kernel takes page
 * sizes that are multiples of 256 or divide it (16 or more: a code tile is then copied page by
 * page), other page sizes run the GC / SC kernels.
 * qf_vq_encode_slots appends to such a cache (slot page * page_size + offset). */
typedef struct {
  int head_dim;      /* D */
  int kv_heads;      /* Hkv */
  int64_t seq_len;   /* tokens per batch entry in the cache (with kv_lens: its capacity) */
  float sm_scale;    /* 0 means 1 / sqrt(D) */
  const DLTensor *kv_lens;      /* NULL: every entry holds seq_len tokens; else int32 [B], above */
  const DLTensor *block_table;  /* NULL: entry b's token t is row b * seq_len + t; else int32 [B, max_pages] */
  int64_t page_size;            /* with block_table: rows per page (> 0) */
} qf_vq_attention_opts;

qf_status qf_vq_attention_decode(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_codes,
                                 const DLTensor *k_codebooks, const DLTensor *v_codes,
                                 const DLTensor *v_codebooks, const qf_vq_format *fmt,
                                 const qf_vq_attention_opts *opts, DLTensor *o, DLTensor *lse);

/* A decode step in one call: each entry's new K and V rows, k_new and v_new [B, Hkv * D] (fp32,
 * fp16 or bf16, one dtype), appended as its token L_b - 1 (L_b = kv_lens[b], or seq_len without
 * kv_lens: the lengths count the new token; an entry with L_b = 0 appends nothing), then the
 * attention above over the first L_b tokens. The same codes, o and lse as
 * qf_vq_encode_kv_slots(k_new, v_new, slots) with slot b = the row of token L_b - 1 (b * seq_len +
 * L_b - 1, or its page's row), then qf_vq_attention_decode. On CUDA the banked kernel's blocks whose
 * setup takes the books by bulk copies (one query head: CQ-2, and CQ-4 where its halves pair up;
 * grouped heads at D = 128: CQ-2 where the group is a multiple of 4, CQ-4 where it is even, when
 * the batch holds enough new tokens for the blocks or the V codebooks are packed) encode the token
 * with the books they hold and write its codes before their copy of its tile, so the step is one
 * launch; elsewhere the encoder's K and V kernel runs first, finding each entry's row from the
 * lengths on the device (packed V codebooks are then refused with QF_ERR_UNSUPPORTED). The
 * CPU backend checks every length and the new tokens' pages before writing anything (QF_ERR_VALUE)
 * and refuses caches of 2^31 rows or more (QF_ERR_SHAPE: its slots are 32-bit); CUDA skips an entry
 * whose new token is on a page outside the cache (its o and lse are NaN). */
qf_status qf_vq_attention_decode_append(qf_ctx *ctx, const DLTensor *q, const DLTensor *k_new, const DLTensor *v_new,
                                        DLTensor *k_codes, const DLTensor *k_codebooks, DLTensor *v_codes,
                                        const DLTensor *v_codebooks, const qf_vq_format *fmt, const qf_vq_attention_opts *opts,
                                        DLTensor *o, DLTensor *lse);

/* V codebooks packed for the banked kernel (made once per layer, as qf_vq_pack_gemv packs a
 * weight's codes): packed [1, kv_heads, 256, S, vector_size] of the entries' dtype (S = head_dim /
 * vector_size), kv head g's entries in the order the kernel holds them in shared memory: at [0, g,
 * e, c] entry e of the codebook of the head's vector c (S = 32), or of vector 2c for c < 32 and
 * 2 (c - 32) + 1 above (S = 64), so that a block copies its head's V codebooks into place as they
 * are instead of laying them out;
 * for one residual of 8-bit indices, 32 vectors of 2 or 4 elements or 64 of 2 per head (CQ-2 and
 * CQ-4 at head_dim 128) and codebooks shared by all tokens (else QF_ERR_UNSUPPORTED). CPU and CUDA, the same bytes. qf_vq_attention_decode takes
 * such a 5-D tensor in place of v_codebooks: the CPU reference unpacks it; CUDA runs the banked
 * kernel on it (a call that would run another kernel, e.g. codes not 16-byte aligned or a page
 * size it does not take, is refused with QF_ERR_UNSUPPORTED). On an H200, CQ-4 1.07-1.17x and CQ-2
 * 1.04-1.10x faster at batch 1, 1.04-1.06x at batch 8 x 1024, within 3% at batch 8 x 4096 than
 * with the standard V codebooks (docs/VQ.md). */
qf_status qf_vq_pack_attention_books(qf_ctx *ctx, const DLTensor *v_codebooks, const qf_vq_format *fmt, int64_t head_dim,
                                     int64_t kv_heads, DLTensor *packed);

/* w [N, K] = decode(codes, codebooks, scales): fp32, fp16 or bf16 output (the sum of entries is
 * formed in fp32 in residual order, times the row scale, then rounded to w's dtype). scales NULL
 * unless fmt->row_scale. CPU and CUDA (the same bits). */
qf_status qf_vq_dequantize(qf_ctx *ctx, const DLTensor *codes, const DLTensor *codebooks,
                           const DLTensor *scales, const qf_vq_format *fmt, DLTensor *w);

/* ---- NVFP4 weights -----------------------------------------------------------------------
 *
 * NVFP4 stores a weight w [N, K] as e2m1 codes (values 0, +-0.5, 1, 1.5, 2, 3, 4, 6), one e4m3fn
 * scale per 16 consecutive elements of a row and one fp32 scale for the whole tensor:
 *   w^[n, k] = e2m1(codes[n, k]) * e4m3fn(scales[n, k / 16]) * tensor_scale
 * (the format of ModelOpt checkpoints; Blackwell multiplies it natively, Hopper dequantizes it in
 * the GEMM's main loop).
 *
 * qf_quant_nvfp4: w [N, K] bf16, fp16 or fp32 (rows may be strided) into codes [N, K] e2m1x2
 * and scales [N, K / 16] e4m3fn (rows of both may be strided), given tensor_scale fp32 [1] on the
 * op's device (positive and finite; amax(|w|) / (6 * 448) is ModelOpt's choice: the largest
 * block then gets the scale 448). Per block of 16, in fp32 with IEEE roundings:
 *   s = e4m3fn(amax / (6 * tensor_scale))    amax = max |w| over the block (NaN ignored)
 *   codes = e2m1(w / (s * tensor_scale))      (0 where s is 0)
 * with e4m3fn saturating at 448 and e2m1 at 6, both rounding to nearest even. CPU and CUDA
 * write the same bytes. K a multiple of 16. NaN elements get the code +6 (formats.h): check
 * weights before quantizing them.
 *
 * qf_nvfp4_pack: codes [N, K] e2m1x2 as stored (element 2i in the low nibble of byte i) into
 * packed [N, K] e2m1x2, the layout qf_gemm_nvfp4 reads: each 32-bit word of 8 codes has its bits
 * rearranged (formats/nvfp4.h) so that the GEMM turns them into 16-bit floats with a few bit
 * operations. Run once when the weights are loaded. K a multiple of 8; rows may be strided
 * (pitches a multiple of 8 values).
 *
 * qf_gemm_nvfp4: d [M, N] = a [M, K] . w^[N, K]^T with b the packed codes of w:
 *  a         [M, K] bf16 or fp16, K contiguous, row pitch a multiple of 8 elements.
 *  b         [N, K] e2m1x2 from qf_nvfp4_pack, row pitch a multiple of 32 values.
 *  b_scales  [N, K / 16] e4m3fn, row pitch even.
 *  b_tensor_scale  fp32 [1] on the op's device.
 *  d         [M, N] bf16, fp16 or fp32, rows may be strided.
 * Any M >= 1; N a multiple of 16; K a multiple of 32; 64-bit offsets; a and b 16-byte aligned,
 * b_scales 2-byte.
 * Numerics: the CPU reference sums a[m, k] * w^[n, k] in float64. CUDA forms each code times its
 * block scale exactly in a's 16-bit type, multiplies it by a on the tensor cores with fp32
 * accumulation and applies tensor_scale at the end; where K is split across the CTAs of a
 * cluster their fp32 partial sums are added in a fixed order (the result does not vary from run
 * to run). Scales that are NaN give NaN outputs. */
qf_status qf_quant_nvfp4(qf_ctx *ctx, const DLTensor *w, const DLTensor *tensor_scale, DLTensor *codes,
                         DLTensor *scales);
qf_status qf_nvfp4_pack(qf_ctx *ctx, const DLTensor *codes, DLTensor *packed);
qf_status qf_gemm_nvfp4(qf_ctx *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *b_scales,
                        const DLTensor *b_tensor_scale, DLTensor *d);

#ifdef __cplusplus
}
#endif

#endif /* QFUSE_H */
