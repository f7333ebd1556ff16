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

// barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every thread of every CTA of the
// cluster arrives, then waits for all the others (shared-memory writes before it are visible to
// the peers after it).
__device__ __forceinline__ void cluster_sync() {
  QF_ASM_SM90("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  QF_ASM_SM90("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// mapa.shared::cluster: the address in CTA `rank`'s shared memory of the object at `addr` in
// this CTA's (the same offset).
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t addr, uint32_t rank) {
  uint32_t r = 0;
  QF_ASM_SM90("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

// ld.shared::cluster: a load from a peer CTA's shared memory, at an address from mapa_shared_cluster.
__device__ __forceinline__ double ld_shared_cluster_f64(uint32_t addr) {
  double v = 0.0;
  QF_ASM_SM90("ld.shared::cluster.f64 %0, [%1];\n" : "=d"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t addr) {
  float v = 0.0f;
  QF_ASM_SM90("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
