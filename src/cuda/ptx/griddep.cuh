// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute may start while the kernel before it in the stream still runs. One asm
// statement each.
#pragma once

#include "cuda/ptx/arch.cuh"

// griddepcontrol.wait: blocks until the grids this one depends on have completed and their
// memory operations are visible. A no-op in a kernel launched without the attribute.
__device__ __forceinline__ void griddep_wait() { QF_ASM_SM90("griddepcontrol.wait;\n" ::: "memory"); }

// griddepcontrol.launch_dependents: lets the grid launched after this one (with the attribute)
// start once every CTA of this grid has issued it or exited. Without such a dependent, nothing.
// It orders no memory access (the dependent waits for this grid's completion), so the compiler
// may move loads and stores across it: no "memory" clobber.
__device__ __forceinline__ void griddep_launch_dependents() { QF_ASM_SM90("griddepcontrol.launch_dependents;\n"); }
