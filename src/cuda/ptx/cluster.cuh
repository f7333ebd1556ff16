// Thread-block clusters (sm_90): rank, the cluster-wide barrier, and addresses in a peer CTA's
// shared memory. One asm statement each.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

// %cluster_ctarank: this CTA's rank within its cluster.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
  QF_ASM_SM90("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// mapa.shared::cluster: the address in CTA `rank`'s shared memory of the object at `addr` in
// this CTA's (the same offset).
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t addr, uint32_t rank) {
  uint32_t r = 0;
  QF_ASM_SM90("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

// barrier.cluster.arrive.relaxed + barrier.cluster.wait: every thread of every CTA of the cluster
// arrives, then waits for the others, without ordering memory (the release form costs a GPU-wide
// MEMBAR). For liveness (no CTA leaves while a peer may still signal it) and, after
// fence_mbarrier_init, for publishing initialized mbarriers.
__device__ __forceinline__ void cluster_sync_relaxed() {
  QF_ASM_SM90("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  QF_ASM_SM90("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// barrier.cluster.arrive (release) + barrier.cluster.wait (acquire): every thread of every CTA
// of the cluster arrives, then waits for the others; the shared-memory writes each CTA made
// before it are visible to the peers' reads after it.
__device__ __forceinline__ void cluster_sync() {
  QF_ASM_SM90("barrier.cluster.arrive.aligned;\n" ::: "memory");
  QF_ASM_SM90("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// ld.shared::cluster.f32: a float from a peer CTA's shared memory (addr from mapa_shared_cluster).
__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t addr) {
  float v = 0.0f;
  QF_ASM_SM90("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// st.async with complete_tx: stores v at `addr` in a peer CTA's shared memory (from
// mapa_shared_cluster) and counts its bytes on the peer's mbarrier at `bar` (also mapped).
__device__ __forceinline__ void st_async_f64(uint32_t addr, double v, uint32_t bar) {
  QF_ASM_SM90("st.async.shared::cluster.mbarrier::complete_tx::bytes.f64 [%0], %1, [%2];\n" ::"r"(addr), "d"(v), "r"(bar)
              : "memory");
}
__device__ __forceinline__ void st_async_f32(uint32_t addr, float v, uint32_t bar) {
  QF_ASM_SM90("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n" ::"r"(addr), "f"(v), "r"(bar)
              : "memory");
}
