// wgmma with the A operand in registers (sm_90a). 16-bit types, B N-major (transposed) in shared
// memory: the P . V product of attention, whose P leaves the previous wgmma's accumulators and
// whose V tile is stored as loaded, keys by rows. B K-major: the NVFP4 GEMM's prefill, whose
// weights are dequantized straight into the A fragments, and the e4m3 form (K-major only), which
// qfuse-probe-wgmma-rate times against the shared-memory form. One asm statement each.
#pragma once

#include <cstdint>

#include "cuda/ptx/wgmma.cuh"

// Shared-memory matrix descriptor of an N-major tile with 128-byte swizzling: 128-byte rows of 64
// N-elements, one row per K index; 8 rows (1024 bytes, 1024-aligned) form a swizzle atom. `lbo`:
// bytes from one atom to the next along N (the next 64 elements); `sbo`: along K (the next 8 rows).
__device__ __forceinline__ uint64_t wgmma_desc_nmajor_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// D[64, N] (+)= A[64, 16] * B[16, N]: A in registers (four 32-bit registers of two 16-bit values,
// the accumulator layout of a wgmma with N = 16 rounded to the type: thread t holds rows
// 16 (t / 32) + (t % 32) / 4 (+ 8), columns 2 (t % 4) (+ 1) and + 8), B N-major in shared memory
// (imm-trans-b 1). scale_d == 0 overwrites D. The _kmajor forms take B K-major (the layout of
// wgmma_desc_kmajor_sw128, imm-trans-b 0).
template <int N>
__device__ __forceinline__ void wgmma_m64k16_f32_f16_rs_nmajor(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                                 int scale_d);
template <int N>
__device__ __forceinline__ void wgmma_m64k16_f32_bf16_rs_nmajor(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                                  int scale_d);
template <int N>
__device__ __forceinline__ void wgmma_m64k16_f32_f16_rs_kmajor(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                                 int scale_d);
template <int N>
__device__ __forceinline__ void wgmma_m64k16_f32_bf16_rs_kmajor(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                                  int scale_d);
// D[64, N] (+)= A[64, 32] * B[N, 32]^T of e4m3: A in registers, four 32-bit registers of four
// 8-bit values (mma.m16n8k32's A layout per warp): a[0] row 16 (t / 32) + (t % 32) / 4, columns
// 4 (t % 4) .. + 3; a[1] the row 8 below; a[2], a[3] the same rows 16 columns on. B K-major.
template <int N>
__device__ __forceinline__ void wgmma_m64k32_f32_e4m3_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                           int scale_d);

// X(N, N / 16, then the operand numbers of a[0..3], desc_b and scale_d)
#define QF_WGMMA_RS_SHAPES(X)                     \
  X(16, 1, 8, 9, 10, 11, 12, 13)                  \
  X(32, 2, 16, 17, 18, 19, 20, 21)                \
  X(48, 3, 24, 25, 26, 27, 28, 29)                \
  X(64, 4, 32, 33, 34, 35, 36, 37)                \
  X(80, 5, 40, 41, 42, 43, 44, 45)                \
  X(96, 6, 48, 49, 50, 51, 52, 53)                \
  X(112, 7, 56, 57, 58, 59, 60, 61)               \
  X(128, 8, 64, 65, 66, 67, 68, 69)               \
  X(160, 10, 80, 81, 82, 83, 84, 85)              \
  X(192, 12, 96, 97, 98, 99, 100, 101)            \
  X(224, 14, 112, 113, 114, 115, 116, 117)        \
  X(256, 16, 128, 129, 130, 131, 132, 133)

#define QF_WGMMA_RS_DEFINE(FN, KTYPES, TAIL, N, CHUNKS, A0, A1, A2, A3, DB, SD)                                \
  template <>                                                                                                \
  __device__ __forceinline__ void FN<N>(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) { \
    static_assert(N / 16 == CHUNKS && N / 2 == A0 && DB == A0 + 4 && SD == DB + 1, "operand numbering");          \
    QF_ASM_SM90A(                                                                                            \
        "{\n"                                                                                                \
        ".reg .pred p;\n"                                                                                    \
        "setp.ne.b32 p, %" #SD ", 0;\n"                                                                      \
        "wgmma.mma_async.sync.aligned.m64n" #N KTYPES " {" QF_WGMMA_REGS_##CHUNKS "}, {%" #A0 ", %" #A1      \
        ", %" #A2 ", %" #A3 "}, %" #DB ", p, 1, 1" TAIL ";\n"                                                     \
        "}\n"                                                                                                \
        : QF_WGMMA_OPS_##CHUNKS("+f")                                                                        \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                            \
  }
#define QF_WGMMA_RS_F16_DEFINE(N, CHUNKS, A0, A1, A2, A3, DB, SD) \
  QF_WGMMA_RS_DEFINE(wgmma_m64k16_f32_f16_rs_nmajor, "k16.f32.f16.f16", ", 1", N, CHUNKS, A0, A1, A2, A3, DB, SD) \
  QF_WGMMA_RS_DEFINE(wgmma_m64k16_f32_f16_rs_kmajor, "k16.f32.f16.f16", ", 0", N, CHUNKS, A0, A1, A2, A3, DB, SD)
#define QF_WGMMA_RS_BF16_DEFINE(N, CHUNKS, A0, A1, A2, A3, DB, SD)                                             \
  QF_WGMMA_RS_DEFINE(wgmma_m64k16_f32_bf16_rs_nmajor, "k16.f32.bf16.bf16", ", 1", N, CHUNKS, A0, A1, A2, A3, DB, SD) \
  QF_WGMMA_RS_DEFINE(wgmma_m64k16_f32_bf16_rs_kmajor, "k16.f32.bf16.bf16", ", 0", N, CHUNKS, A0, A1, A2, A3, DB, SD)
#define QF_WGMMA_RS_E4M3_DEFINE(N, CHUNKS, A0, A1, A2, A3, DB, SD) \
  QF_WGMMA_RS_DEFINE(wgmma_m64k32_f32_e4m3_rs, "k32.f32.e4m3.e4m3", "", N, CHUNKS, A0, A1, A2, A3, DB, SD)
QF_WGMMA_RS_SHAPES(QF_WGMMA_RS_F16_DEFINE)
QF_WGMMA_RS_SHAPES(QF_WGMMA_RS_BF16_DEFINE)
QF_WGMMA_RS_SHAPES(QF_WGMMA_RS_E4M3_DEFINE)
#undef QF_WGMMA_RS_F16_DEFINE
#undef QF_WGMMA_RS_BF16_DEFINE
#undef QF_WGMMA_RS_E4M3_DEFINE
#undef QF_WGMMA_RS_DEFINE
#undef QF_WGMMA_RS_SHAPES
