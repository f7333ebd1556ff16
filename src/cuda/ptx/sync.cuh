// GPU-scope release / acquire on a global counter: the handshakes between CTAs (the units of a
// split tile in the GEMM and VQ kernels, the grid barrier of the fused per-tensor quant). One asm
// statement each.
//
// NOTES: __threadfence() is fence.sc.gpu, a sequentially consistent fence, which every thread of
// a split unit paid twice per handshake. The pattern here orders the same writes: the CTA's
// threads meet at a barrier, then one thread's release (or acquire) at GPU scope covers what the
// others wrote before (or read after) the barrier.
#pragma once

// atom.acq_rel.gpu add: adds v to *p and returns the value before, releasing this CTA's earlier
// writes (those before a barrier with this thread) and acquiring the writes released before it.
__device__ __forceinline__ int atom_add_acq_rel_gpu(int *p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// ld.acquire.gpu: *p, acquiring the writes released before the value was written.
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
