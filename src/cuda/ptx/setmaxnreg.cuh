// setmaxnreg (sm_90a): moves registers between the warpgroups of a CTA. Every warp of a
// warpgroup must execute the same one; the count is a multiple of 8 in [24, 256]. One asm
// statement each.
#pragma once

#include "cuda/ptx/arch.cuh"

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  QF_ASM_SM90A("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  QF_ASM_SM90A("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
