// ldmatrix: four 8 x 8 matrices of 16-bit elements from shared memory into the mma.sync fragment
// layout (lane 8 i + r gives the address of row r of matrix i; thread (g, t) of the warp receives
// elements (g, 2 t) and (g, 2 t + 1) of each matrix, in register i). One asm statement.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  QF_ASM_SM90("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
              : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
              : "r"(addr));
}
