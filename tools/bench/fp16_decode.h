/* The peer of qfuse's VQ attention decode in qfuse-bench: a plain fp16 split-KV decode attention
 * over an uncompressed cache (fp16_decode.cu). */
#ifndef QFUSE_TOOLS_BENCH_FP16_DECODE_H
#define QFUSE_TOOLS_BENCH_FP16_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace bytes qfb_fp16_decode needs for this shape (partial results of its chunks). */
size_t qfb_fp16_decode_workspace(int64_t B, int64_t Hq, int64_t D, int64_t seq_len);

/* o[b, h] = softmax(sm_scale q[b, h] . K[b, t, g]) . V[b, t, g], lse[b, h] = log sum_t exp(...),
 * g = h / (Hq / Hkv): q, o fp16 [B, Hq * D]; k, v fp16 [B * seq_len, Hkv * D] (row b * seq_len + t);
 * lse fp32 [B, Hq]; all contiguous. D 64, 128 or 256, Hq a multiple of Hkv. Enqueued on stream s.
 * Returns 0, or nonzero after printing why (an unsupported shape, a workspace too small, a CUDA
 * error). */
int qfb_fp16_decode(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B, int64_t Hq, int64_t Hkv,
                    int64_t D, int64_t seq_len, float sm_scale, void *workspace, size_t workspace_bytes, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
