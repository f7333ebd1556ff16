// Warp-level tensor-core MMA (mma.sync, sm_80+) and the shared-memory matrix loads that feed it
// (ldmatrix). One asm statement each.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/ptx/arch.cuh"

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: d[16 x 8] += a[16 x 16] . b[16 x 8] with fp32
// accumulators (a row-major, b column-major, the fragments of the PTX manual's m16n8k16 layouts).
// The first argument only selects the input type.
__device__ __forceinline__ void mma_m16n8k16(__half, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  QF_ASM_SM90("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
              "{%0, %1, %2, %3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_m16n8k16(__nv_bfloat16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  QF_ASM_SM90("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
              "{%0, %1, %2, %3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// mma.sync.aligned.m16n8k8.row.col.f32.{f16,bf16}: d[16 x 8] += a[16 x 8] . b[8 x 8], the same
// conventions (a0: row l / 4, a1: row l / 4 + 8, each columns 2 (l % 4) and + 1; b0: rows 2 (l % 4)
// and + 1 of column l / 4; d as for m16n8k16).
__device__ __forceinline__ void mma_m16n8k8(__half, float (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  QF_ASM_SM90("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(b));
}
__device__ __forceinline__ void mma_m16n8k8(__nv_bfloat16, float (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  QF_ASM_SM90("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
              : "r"(a[0]), "r"(a[1]), "r"(b));
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8 x 8 matrices of 16-bit elements; lane l gives
// the address of row l % 8 of matrix l / 8 and receives in r[i] its two elements (row l / 4,
// columns 2 (l % 4) and + 1) of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  QF_ASM_SM90("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
              : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
              : "r"(addr));
}

// ... .trans: each matrix transposed on the way (lane l receives rows 2 (l % 4) and + 1 of column
// l / 4).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  QF_ASM_SM90("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
              : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
              : "r"(addr));
}
