// wgmma: warpgroup matrix multiply-accumulate from shared memory (sm_90a). One asm statement
// each. All four warps of a warpgroup execute every one of these together.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

// wgmma.fence: orders this warpgroup's earlier register accesses (of accumulators) before the
// wgmma.mma_async that follow.
__device__ __forceinline__ void wgmma_fence() { QF_ASM_SM90A("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// wgmma.commit_group: closes the group of wgmma.mma_async issued since the last commit.
__device__ __forceinline__ void wgmma_commit_group() {
  QF_ASM_SM90A("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// wgmma.wait_group: waits until at most kPending committed groups are still in flight; after it
// their accumulators may be read and their shared-memory operands overwritten.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group: 0..7");
  QF_ASM_SM90A("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Not an instruction: tells the compiler that `r` may change here, so that no access of an
// accumulator register is moved across a wgmma fence, issue or wait (the hardware writes the
// accumulators asynchronously, which the asm operand lists cannot express); on a register A
// operand, that it is still in use, so that it is not reused before a wait shows the wgmma done.
__device__ __forceinline__ void wgmma_fence_operand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wgmma_fence_operand(int32_t &r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void wgmma_fence_operand(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared-memory matrix descriptor of a K-major tile laid out by TMA with 128-byte swizzling: rows
// of 128 bytes, groups of 8 rows 1024 bytes apart (stride byte offset). Fields: bits 0-13 start
// address >> 4, 16-29 leading byte offset >> 4 (unused by swizzled K-major layouts: 1), 32-45
// stride byte offset >> 4, 49-51 base offset (0: the tile starts on a 1024-byte boundary and
// `smem_addr` is that start plus a K offset below 128 bytes), 62-63 swizzle mode (1: 128 bytes).
__device__ __forceinline__ uint64_t wgmma_desc_kmajor_sw128(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(16 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// ---- wgmma.mma_async.sync.aligned.m64nNkK: 8-bit operands (k32: e4m3, s8), 16-bit (k16: f16, bf16) ----
// The asm strings need the register numbers as literals: they are listed once, 8 at a time.
#define QF_WGMMA_REGS8(a, b, c, d, e, f, g, h) \
  "%" #a ", %" #b ", %" #c ", %" #d ", %" #e ", %" #f ", %" #g ", %" #h
#define QF_WGMMA_REGS_1 QF_WGMMA_REGS8(0, 1, 2, 3, 4, 5, 6, 7)
#define QF_WGMMA_REGS_2 QF_WGMMA_REGS_1 ", " QF_WGMMA_REGS8(8, 9, 10, 11, 12, 13, 14, 15)
#define QF_WGMMA_REGS_3 QF_WGMMA_REGS_2 ", " QF_WGMMA_REGS8(16, 17, 18, 19, 20, 21, 22, 23)
#define QF_WGMMA_REGS_4 QF_WGMMA_REGS_3 ", " QF_WGMMA_REGS8(24, 25, 26, 27, 28, 29, 30, 31)
#define QF_WGMMA_REGS_5 QF_WGMMA_REGS_4 ", " QF_WGMMA_REGS8(32, 33, 34, 35, 36, 37, 38, 39)
#define QF_WGMMA_REGS_6 QF_WGMMA_REGS_5 ", " QF_WGMMA_REGS8(40, 41, 42, 43, 44, 45, 46, 47)
#define QF_WGMMA_REGS_7 QF_WGMMA_REGS_6 ", " QF_WGMMA_REGS8(48, 49, 50, 51, 52, 53, 54, 55)
#define QF_WGMMA_REGS_8 QF_WGMMA_REGS_7 ", " QF_WGMMA_REGS8(56, 57, 58, 59, 60, 61, 62, 63)
#define QF_WGMMA_REGS_9 QF_WGMMA_REGS_8 ", " QF_WGMMA_REGS8(64, 65, 66, 67, 68, 69, 70, 71)
#define QF_WGMMA_REGS_10 QF_WGMMA_REGS_9 ", " QF_WGMMA_REGS8(72, 73, 74, 75, 76, 77, 78, 79)
#define QF_WGMMA_REGS_11 QF_WGMMA_REGS_10 ", " QF_WGMMA_REGS8(80, 81, 82, 83, 84, 85, 86, 87)
#define QF_WGMMA_REGS_12 QF_WGMMA_REGS_11 ", " QF_WGMMA_REGS8(88, 89, 90, 91, 92, 93, 94, 95)
#define QF_WGMMA_REGS_13 QF_WGMMA_REGS_12 ", " QF_WGMMA_REGS8(96, 97, 98, 99, 100, 101, 102, 103)
#define QF_WGMMA_REGS_14 QF_WGMMA_REGS_13 ", " QF_WGMMA_REGS8(104, 105, 106, 107, 108, 109, 110, 111)
#define QF_WGMMA_REGS_15 QF_WGMMA_REGS_14 ", " QF_WGMMA_REGS8(112, 113, 114, 115, 116, 117, 118, 119)
#define QF_WGMMA_REGS_16 QF_WGMMA_REGS_15 ", " QF_WGMMA_REGS8(120, 121, 122, 123, 124, 125, 126, 127)

// The accumulator operands, 8 at a time, with constraint C ("+f" for fp32, "+r" for int32).
#define QF_WGMMA_OPS8(C, k)                                                                              \
  C(d[8 * (k) + 0]), C(d[8 * (k) + 1]), C(d[8 * (k) + 2]), C(d[8 * (k) + 3]), C(d[8 * (k) + 4]),          \
      C(d[8 * (k) + 5]), C(d[8 * (k) + 6]), C(d[8 * (k) + 7])
#define QF_WGMMA_OPS_1(C) QF_WGMMA_OPS8(C, 0)
#define QF_WGMMA_OPS_2(C) QF_WGMMA_OPS_1(C), QF_WGMMA_OPS8(C, 1)
#define QF_WGMMA_OPS_3(C) QF_WGMMA_OPS_2(C), QF_WGMMA_OPS8(C, 2)
#define QF_WGMMA_OPS_4(C) QF_WGMMA_OPS_3(C), QF_WGMMA_OPS8(C, 3)
#define QF_WGMMA_OPS_5(C) QF_WGMMA_OPS_4(C), QF_WGMMA_OPS8(C, 4)
#define QF_WGMMA_OPS_6(C) QF_WGMMA_OPS_5(C), QF_WGMMA_OPS8(C, 5)
#define QF_WGMMA_OPS_7(C) QF_WGMMA_OPS_6(C), QF_WGMMA_OPS8(C, 6)
#define QF_WGMMA_OPS_8(C) QF_WGMMA_OPS_7(C), QF_WGMMA_OPS8(C, 7)
#define QF_WGMMA_OPS_9(C) QF_WGMMA_OPS_8(C), QF_WGMMA_OPS8(C, 8)
#define QF_WGMMA_OPS_10(C) QF_WGMMA_OPS_9(C), QF_WGMMA_OPS8(C, 9)
#define QF_WGMMA_OPS_11(C) QF_WGMMA_OPS_10(C), QF_WGMMA_OPS8(C, 10)
#define QF_WGMMA_OPS_12(C) QF_WGMMA_OPS_11(C), QF_WGMMA_OPS8(C, 11)
#define QF_WGMMA_OPS_13(C) QF_WGMMA_OPS_12(C), QF_WGMMA_OPS8(C, 12)
#define QF_WGMMA_OPS_14(C) QF_WGMMA_OPS_13(C), QF_WGMMA_OPS8(C, 13)
#define QF_WGMMA_OPS_15(C) QF_WGMMA_OPS_14(C), QF_WGMMA_OPS8(C, 14)
#define QF_WGMMA_OPS_16(C) QF_WGMMA_OPS_15(C), QF_WGMMA_OPS8(C, 15)

// D[64, N] (+)= A[64, 32] * B[N, 32]^T, both operands K-major in shared memory (8-bit types have no
// transposed form), N / 2 accumulator registers per thread. Thread t of the warpgroup holds rows
// 16 * (t / 32) + (t % 32) / 4 (+ 8) and, for j < N / 8, columns 8 j + 2 (t % 4) (+ 1): d[4 j + 0,
// 1] on the first row, d[4 j + 2, 3] on the row 8 below. scale_d == 0 overwrites D.
//   wgmma_m64k32_f32_e4m3  e4m3 operands, fp32 accumulators
//   wgmma_m64k32_s32_s8    int8 operands, int32 accumulators (exact; integer forms take no operand
//                          scale immediates)
// and the same with A[64, 16], B[N, 16] of 16-bit types (K-major, not transposed):
//   wgmma_m64k16_f32_f16   fp16 operands, fp32 accumulators
//   wgmma_m64k16_f32_bf16  bf16 operands, fp32 accumulators
template <int N>
__device__ __forceinline__ void wgmma_m64k32_f32_e4m3(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d);
template <int N>
__device__ __forceinline__ void wgmma_m64k32_s32_s8(int32_t (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d);
template <int N>
__device__ __forceinline__ void wgmma_m64k16_f32_f16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d);
template <int N>
__device__ __forceinline__ void wgmma_m64k16_f32_bf16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d);

// X(N, N / 16, then the operand numbers of desc_a, desc_b and scale_d: N / 2, N / 2 + 1, N / 2 + 2)
#define QF_WGMMA_SHAPES(X)                                                                                    \
  X(16, 1, 8, 9, 10) X(32, 2, 16, 17, 18) X(48, 3, 24, 25, 26) X(64, 4, 32, 33, 34) X(80, 5, 40, 41, 42)     \
  X(96, 6, 48, 49, 50) X(112, 7, 56, 57, 58) X(128, 8, 64, 65, 66) X(144, 9, 72, 73, 74)                     \
  X(160, 10, 80, 81, 82) X(176, 11, 88, 89, 90) X(192, 12, 96, 97, 98) X(208, 13, 104, 105, 106)             \
  X(224, 14, 112, 113, 114) X(240, 15, 120, 121, 122) X(256, 16, 128, 129, 130)

// One specialization: FN<N> with accumulators of type T (constraint C), the K of the shape (K),
// the PTX type suffix TYPES and what follows the scale-d predicate (TAIL).
#define QF_WGMMA_DEFINE(FN, T, C, K, TYPES, TAIL, N, CHUNKS, DA, DB, SD)                                   \
  template <>                                                                                            \
  __device__ __forceinline__ void FN<N>(T (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {  \
    static_assert(N / 16 == CHUNKS && N / 2 == DA && DB == DA + 1 && SD == DA + 2, "operand numbering"); \
    QF_ASM_SM90A(                                                                                        \
        "{\n"                                                                                            \
        ".reg .pred p;\n"                                                                                \
        "setp.ne.b32 p, %" #SD ", 0;\n"                                                                  \
        "wgmma.mma_async.sync.aligned.m64n" #N K "." TYPES " {" QF_WGMMA_REGS_##CHUNKS "}, %" #DA        \
        ", %" #DB ", p" TAIL ";\n"                                                                       \
        "}\n"                                                                                            \
        : QF_WGMMA_OPS_##CHUNKS(C)                                                                       \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                       \
  }
#define QF_WGMMA_E4M3_DEFINE(N, CHUNKS, DA, DB, SD) \
  QF_WGMMA_DEFINE(wgmma_m64k32_f32_e4m3, float, "+f", "k32", "f32.e4m3.e4m3", ", 1, 1", N, CHUNKS, DA, DB, SD)
#define QF_WGMMA_S8_DEFINE(N, CHUNKS, DA, DB, SD) \
  QF_WGMMA_DEFINE(wgmma_m64k32_s32_s8, int32_t, "+r", "k32", "s32.s8.s8", "", N, CHUNKS, DA, DB, SD)
// 16-bit forms: operand scales 1, neither operand transposed (both K-major).
#define QF_WGMMA_F16_DEFINE(N, CHUNKS, DA, DB, SD) \
  QF_WGMMA_DEFINE(wgmma_m64k16_f32_f16, float, "+f", "k16", "f32.f16.f16", ", 1, 1, 0, 0", N, CHUNKS, DA, DB, SD)
#define QF_WGMMA_BF16_DEFINE(N, CHUNKS, DA, DB, SD) \
  QF_WGMMA_DEFINE(wgmma_m64k16_f32_bf16, float, "+f", "k16", "f32.bf16.bf16", ", 1, 1, 0, 0", N, CHUNKS, DA, DB, SD)
QF_WGMMA_SHAPES(QF_WGMMA_E4M3_DEFINE)
QF_WGMMA_SHAPES(QF_WGMMA_S8_DEFINE)
QF_WGMMA_SHAPES(QF_WGMMA_F16_DEFINE)
QF_WGMMA_SHAPES(QF_WGMMA_BF16_DEFINE)
#undef QF_WGMMA_E4M3_DEFINE
#undef QF_WGMMA_S8_DEFINE
#undef QF_WGMMA_F16_DEFINE
#undef QF_WGMMA_BF16_DEFINE
