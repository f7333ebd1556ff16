// mbarrier: shared-memory barriers with phases and transaction counts (sm_90). One asm statement
// each. Addresses are 32-bit shared-window addresses (__cvta_generic_to_shared).
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

// mbarrier.init: phase 0, `count` arrivals expected per phase.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  QF_ASM_SM90("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// fence.mbarrier_init: makes the preceding inits visible before the barriers are used by other
// threads or the copy engine (the only form PTX has is .release.cluster; a lone CTA is a cluster
// of one).
__device__ __forceinline__ void fence_mbarrier_init() {
  QF_ASM_SM90("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// fence.proxy.async.shared::cta: orders this thread's generic-proxy shared-memory accesses with
// later async-proxy ones (TMA, wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
  QF_ASM_SM90("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// fence.proxy.async.global: the same for global memory (generic stores that a later TMA copy
// reads).
__device__ __forceinline__ void fence_proxy_async_global() {
  QF_ASM_SM90("fence.proxy.async.global;\n" ::: "memory");
}

// mbarrier.arrive (release, CTA scope): one arrival; the state token is discarded.
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  QF_ASM_SM90("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// mbarrier.arrive.relaxed (CTA scope): one arrival that orders none of the thread's earlier
// memory accesses (qfuse-probe-loop times it against the release form).
__device__ __forceinline__ void mbarrier_arrive_relaxed(uint32_t bar) {
  QF_ASM_SM90("mbarrier.arrive.relaxed.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// mbarrier.arrive.expect_tx: one arrival, and `bytes` more bytes of asynchronous transactions
// that must complete (complete_tx) before the phase can.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  QF_ASM_SM90("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// mbarrier.expect_tx (relaxed, CTA scope): `bytes` more bytes of asynchronous transactions that
// must complete before the phase can, without an arrival (the arrival comes later, on its own).
__device__ __forceinline__ void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
  QF_ASM_SM90("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// mbarrier.try_wait.parity (acquire, CTA scope): true once the phase of parity `parity` has
// completed, i.e. the barrier's current phase parity differs from `parity`. May return false
// after a system-dependent time limit; callers loop.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  QF_ASM_SM90(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// bar.sync id, count: a named barrier over `count` threads (a multiple of 32), the warps of a
// subset of the block (barrier 0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive id, count: this warp's arrival on named barrier `id` without waiting; the barrier
// completes when `count` threads have arrived or synced (a producer / consumer handoff).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
